//! The broker stopped mid-traffic, against the real broker: while requests keep arriving the gateway answers only
//! 202 or 503 (with `Retry-After`), never 2xx for what the broker did not acknowledge; once the broker is back it
//! acknowledges again, and every event it ever answered 202 for is in the topic.
//!
//! This binary stops and restarts the stack's broker with `scripts/stack`, so it holds a single test: cargo runs
//! test binaries one after another, and no other test runs while the broker is down.

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use hookline_tests::{Delivery, StackRestore, TestStack, eventually, stack_script};
use http::StatusCode;
use rdkafka::Message;
use tokio_util::sync::CancellationToken;

/// What the senders saw: each delivery with the status it got.
#[derive(Debug, Default)]
struct Seen {
    answers: Vec<(Delivery, StatusCode, bool)>,
}

const N_SENDERS: usize = 4;
const MAX_REQUESTS: usize = 2_000;

#[tokio::test]
async fn broker_stopped_mid_traffic_gives_503_then_202_and_every_acknowledged_event_is_in_the_topic() {
    let stack = Arc::new(TestStack::builder().produce_timeout_ms(1_500).build().await);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop_sending = CancellationToken::new();

    // Providers keep sending throughout; bounded in count and time.
    let mut senders = Vec::new();
    for sender_idx in 0..N_SENDERS {
        let (stack, seen, stop_sending) = (stack.clone(), seen.clone(), stop_sending.clone());
        senders.push(tokio::spawn(async move {
            let started = Instant::now();
            let mut n_sent = 0;
            while !stop_sending.is_cancelled()
                && n_sent < MAX_REQUESTS / N_SENDERS
                && started.elapsed() < Duration::from_secs(120)
            {
                let delivery = Delivery::new(format!(r#"{{"sender":{sender_idx},"n":{n_sent}}}"#).into_bytes());
                let reply = stack.post(&delivery).await;
                let retry_after = reply.headers.contains_key(http::header::RETRY_AFTER);
                seen.lock().expect("seen").answers.push((delivery, reply.status, retry_after));
                n_sent += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }));
    }
    let count = |status: StatusCode| {
        let seen = seen.lock().expect("seen");
        seen.answers.iter().filter(|(_, s, _)| *s == status).count()
    };
    eventually(Duration::from_secs(20), "some deliveries acknowledged before the outage", || async {
        count(StatusCode::ACCEPTED) >= 10
    })
    .await;

    let guard = StackRestore("start-kafka");
    tokio::task::spawn_blocking(|| stack_script("stop-kafka")).await.expect("stop");
    eventually(Duration::from_secs(30), "503s while the broker is down", || async {
        count(StatusCode::SERVICE_UNAVAILABLE) >= 3
    })
    .await;
    // A load balancer stops sending traffic: readiness fails while the broker is unreachable.
    let readyz = format!("http://{}/readyz", stack.gateway_admin_addr);
    let ready = || async {
        let request = http::Request::get(&readyz).body(http_body_util::Full::default()).expect("request");
        stack.send(request).await.status
    };
    eventually(Duration::from_secs(30), "/readyz fails while the broker is down", || async {
        ready().await == StatusCode::SERVICE_UNAVAILABLE
    })
    .await;
    let accepted_before_restart = count(StatusCode::ACCEPTED);
    tokio::task::spawn_blocking(move || drop(guard)).await.expect("start"); // waits until the broker answers
    eventually(Duration::from_secs(60), "202s again after the broker is back", || async {
        count(StatusCode::ACCEPTED) >= accepted_before_restart + 10
    })
    .await;
    eventually(Duration::from_secs(30), "/readyz recovers with the broker", || async {
        ready().await == StatusCode::OK
    })
    .await;
    stop_sending.cancel();
    for sender in senders {
        sender.await.expect("sender");
    }

    let answers = std::mem::take(&mut seen.lock().expect("seen").answers);
    for (delivery, status, retry_after) in &answers {
        assert!(
            *status == StatusCode::ACCEPTED || *status == StatusCode::SERVICE_UNAVAILABLE,
            "only 202 or 503 while the broker comes and goes; {} got {status}",
            delivery.delivery_id
        );
        assert_eq!(*retry_after, *status == StatusCode::SERVICE_UNAVAILABLE, "Retry-After exactly on 503");
    }
    let acknowledged: HashSet<String> =
        answers.iter().filter(|(_, s, _)| *s == StatusCode::ACCEPTED).map(|(d, _, _)| d.delivery_id.clone()).collect();

    // The provider retries what got a 503; now it is acknowledged too.
    let mut retried = HashSet::new();
    for (delivery, _, _) in answers.iter().filter(|(_, s, _)| *s == StatusCode::SERVICE_UNAVAILABLE) {
        eventually(Duration::from_secs(30), "a refused delivery is acknowledged on retry", || async {
            stack.post(delivery).await.status == StatusCode::ACCEPTED
        })
        .await;
        retried.insert(delivery.delivery_id.clone());
    }

    let in_kafka: HashSet<String> = stack
        .inbound_records()
        .await
        .iter()
        .filter_map(|record| record.key().map(|key| String::from_utf8_lossy(key).into_owned()))
        .collect();
    let missing: Vec<&String> = acknowledged.union(&retried).filter(|id| !in_kafka.contains(*id)).collect();
    assert!(missing.is_empty(), "acknowledged but not in Kafka: {missing:?}");
    assert!(
        !retried.is_empty() && acknowledged.len() >= 20,
        "{} acknowledged, {} retried",
        acknowledged.len(),
        retried.len()
    );
    match Arc::try_unwrap(stack) {
        Ok(stack) => stack.shutdown().await,
        Err(_) => panic!("stack still shared"),
    }
}

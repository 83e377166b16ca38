//! The DLQ replayer against the real broker, Redis and the real consumer: entries re-driven through the same
//! dedupe and handler path, processed once however often they are replayed, and every fate recorded.

use std::time::Duration;

use bytes::Bytes;
use hookline_common::config::SecretRef;
use hookline_dlq_replayer::{
    ReplayerConfig,
    filter::Filter,
    ops::{DiscardRequest, ReplayRequest, Replayer},
    view::{Entry, Status},
};
use hookline_tests::{Delivery, TestStack, eventually};
use http::{Request, StatusCode};
use http_body_util::Full;
use rdkafka::Message;

fn replayer_for(stack: &TestStack, max_failed_again: u32) -> Replayer {
    let config = ReplayerConfig { kafka: stack.kafka.clone(), max_failed_again, ..ReplayerConfig::default() };
    Replayer::new(config).expect("replayer")
}

/// Posts deliveries the handler rejects as poison and waits until each is dead-lettered.
async fn dead_lettered(stack: &TestStack, n: usize) -> Vec<Delivery> {
    let deliveries: Vec<Delivery> = (0..n).map(|i| Delivery::new(format!("{{\"i\":{i}}}").into_bytes())).collect();
    for delivery in &deliveries {
        stack.handler.poison(&delivery.delivery_id);
        stack.post_accepted(delivery).await;
    }
    stack.wait_until_handled(n as u64).await;
    deliveries
}

async fn entry_of(replayer: &Replayer, event_id: &str) -> Entry {
    let entries = replayer.list(&Filter::default()).await.expect("list");
    entries.into_iter().rfind(|e| e.entry.event_id.as_deref() == Some(event_id)).expect("entry for the event")
}

fn by_ids(ids: &[&str]) -> ReplayRequest {
    ReplayRequest { ids: ids.iter().map(|id| id.to_string()).collect(), by: "test".into(), ..ReplayRequest::default() }
}

#[tokio::test]
async fn fixed_entry_replayed_is_processed_once_and_marked_succeeded_even_when_replayed_twice() {
    let stack = TestStack::builder().consumer().build().await;
    let replayer = replayer_for(&stack, 3);
    let delivery = dead_lettered(&stack, 1).await.remove(0);
    let entry = entry_of(&replayer, &delivery.delivery_id).await;
    assert_eq!(entry.status, Status::New);
    assert_eq!(entry.entry.error_class.as_deref(), Some("poison"));

    stack.handler.heal(&delivery.delivery_id);
    let id = entry.entry.id.clone();
    let report = replayer.replay(&by_ids(&[&id])).await.expect("replay");
    assert_eq!(report.done, vec![id.clone()]);
    eventually(Duration::from_secs(30), "replayed event processed", || async {
        stack.handler.count(&delivery.delivery_id) == 1
    })
    .await;
    eventually(Duration::from_secs(30), "entry marked succeeded", || async {
        entry_of(&replayer, &delivery.delivery_id).await.status == Status::Succeeded
    })
    .await;
    let processed = stack.handler.successes();
    assert_eq!(processed[0].body, delivery.body, "the raw body is re-driven unchanged");
    assert_eq!(processed[0].replay_of.as_deref(), Some(id.as_str()));

    // Again: the consumer's dedupe makes it a duplicate.
    replayer.replay(&by_ids(&[&id])).await.expect("second replay");
    stack.wait_until_handled(3).await;
    assert_eq!(stack.handler.count(&delivery.delivery_id), 1, "processed once, replayed twice");
    eventually(Duration::from_secs(30), "second replay recorded", || async {
        let entry = entry_of(&replayer, &delivery.delivery_id).await;
        entry.status == Status::Succeeded && entry.replays == 2
    })
    .await;
    stack.shutdown().await;
}

#[tokio::test]
async fn dry_run_changes_nothing() {
    let stack = TestStack::builder().consumer().build().await;
    let replayer = replayer_for(&stack, 3);
    dead_lettered(&stack, 2).await;
    let inbound_before = stack.inbound_records().await.len();
    let request = ReplayRequest { all: true, dry_run: true, ..ReplayRequest::default() };
    let report = replayer.replay(&request).await.expect("dry run");
    assert!(report.dry_run);
    assert_eq!(report.done.len(), 2, "it says what it would replay");
    assert_eq!(stack.inbound_records().await.len(), inbound_before, "nothing produced");
    assert!(stack.records(&stack.kafka.dlq_status_topic).await.is_empty(), "nothing recorded");
    assert!(replayer.list(&Filter::default()).await.expect("list").iter().all(|e| e.status == Status::New));
    stack.shutdown().await;
}

#[tokio::test]
async fn discard_is_recorded_and_replay_all_skips_it() {
    let stack = TestStack::builder().consumer().build().await;
    let replayer = replayer_for(&stack, 3);
    let deliveries = dead_lettered(&stack, 2).await;
    let (kept, dropped) = (&deliveries[0], &deliveries[1]);
    let dropped_id = entry_of(&replayer, &dropped.delivery_id).await.entry.id;
    let discard =
        DiscardRequest { ids: vec![dropped_id.clone()], reason: "test data, never valid".into(), by: "ops-1".into() };
    assert_eq!(replayer.discard(&discard).await.expect("discard").done, vec![dropped_id.clone()]);
    let entry = entry_of(&replayer, &dropped.delivery_id).await;
    assert_eq!(entry.status, Status::Discarded);
    let last = entry.last_status.expect("status");
    assert_eq!((last.note.as_deref(), last.by.as_str()), (Some("test data, never valid"), "ops-1"));

    stack.handler.heal(&kept.delivery_id);
    stack.handler.heal(&dropped.delivery_id);
    let report = replayer
        .replay(&ReplayRequest { all: true, by: "test".into(), ..ReplayRequest::default() })
        .await
        .expect("all");
    assert_eq!(report.done.len(), 1);
    eventually(Duration::from_secs(30), "kept entry processed", || async {
        stack.handler.count(&kept.delivery_id) == 1
    })
    .await;
    stack.wait_until_handled(3).await;
    assert_eq!(stack.handler.count(&dropped.delivery_id), 0, "a discarded entry is never re-driven by --all");
    let forced = ReplayRequest {
        all: true,
        force: true,
        filter: Filter { status: Some("discarded".into()), ..Filter::default() },
        ..ReplayRequest::default()
    };
    assert_eq!(replayer.replay(&forced).await.expect("forced all").done.len(), 0, "not even forced");
    assert!(stack.records(&stack.kafka.dlq_topic).await.len() == 2, "discarding deletes nothing");
    stack.shutdown().await;
}

#[tokio::test]
async fn entry_that_fails_again_links_to_its_new_entry_and_is_flagged() {
    let stack = TestStack::builder().consumer().build().await;
    let replayer = replayer_for(&stack, 1);
    let delivery = dead_lettered(&stack, 1).await.remove(0);
    let first = entry_of(&replayer, &delivery.delivery_id).await;
    replayer.replay(&by_ids(&[&first.entry.id])).await.expect("replay");
    stack.wait_until_handled(2).await;

    let entries = replayer.list(&Filter::default()).await.expect("list");
    assert_eq!(entries.len(), 2, "it came back to the DLQ");
    let old = entries.iter().find(|e| e.entry.id == first.entry.id).expect("old entry");
    let new = entries.iter().find(|e| e.entry.id != first.entry.id).expect("new entry");
    assert_eq!(old.status, Status::FailedAgain);
    assert_eq!(old.last_status.as_ref().and_then(|s| s.new_entry.clone()), Some(new.entry.id.clone()));
    assert_eq!(new.replay_of.as_deref(), Some(first.entry.id.as_str()), "the new entry links the old");
    assert_eq!(new.failed_again, 1);
    assert!(new.flagged, "max_failed_again = 1");

    let refused = replayer.replay(&by_ids(&[&new.entry.id])).await.expect("replay flagged");
    assert!(refused.done.is_empty() && refused.skipped[0].reason.contains("flagged"));
    stack.handler.heal(&delivery.delivery_id);
    let forced = ReplayRequest { force: true, ..by_ids(&[&new.entry.id]) };
    assert_eq!(replayer.replay(&forced).await.expect("forced").done.len(), 1);
    eventually(Duration::from_secs(30), "processed after the forced replay", || async {
        stack.handler.count(&delivery.delivery_id) == 1
    })
    .await;
    stack.shutdown().await;
}

#[tokio::test]
async fn replay_rate_cap_holds() {
    let stack = TestStack::builder().consumer().build().await;
    let replayer = replayer_for(&stack, 3);
    dead_lettered(&stack, 5).await;
    let before = stack.inbound_records().await.len();
    let request = ReplayRequest { all: true, rate: Some(2.0), by: "test".into(), ..ReplayRequest::default() };
    assert_eq!(replayer.replay(&request).await.expect("replay").done.len(), 5);
    // Counted on the broker's record timestamps: no one-second window holds more than the rate (+1 for the edge).
    let records = stack.inbound_records().await;
    let mut times: Vec<i64> = records
        .iter()
        .filter(|r| hookline_common::wire::header_str(r.headers(), hookline_common::wire::header::REPLAY_OF).is_some())
        .filter_map(|r| r.timestamp().to_millis())
        .collect();
    times.sort_unstable();
    assert_eq!(times.len(), 5);
    assert_eq!(records.len(), before + 5);
    for (index, start) in times.iter().enumerate() {
        let in_window = times[index..].iter().take_while(|t| **t < start + 1_000).count();
        assert!(in_window <= 3, "{in_window} replays within one second of {start}: {times:?}");
    }
    stack.shutdown().await;
}

#[tokio::test]
async fn admin_api_requires_the_token_and_has_the_cli_semantics() {
    let stack = TestStack::builder().consumer().build().await;
    let delivery = dead_lettered(&stack, 1).await.remove(0);
    let token_file = std::env::temp_dir().join(format!("hookline-api-token-{}", uuid::Uuid::new_v4()));
    std::fs::write(&token_file, "s3cret-token").expect("token file");
    let config = ReplayerConfig {
        kafka: stack.kafka.clone(),
        api_token: Some(SecretRef::from_file("api", token_file.display().to_string())),
        refresh_interval_s: 1,
        ..ReplayerConfig::default()
    };
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = admin.local_addr().expect("addr");
    let shutdown = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(hookline_dlq_replayer::serve_api(config, admin, shutdown.clone()));
    let request = |method: &str, path: &str, token: Option<&str>, body: &str| {
        let mut builder = Request::builder().method(method).uri(format!("http://{addr}{path}"));
        if let Some(token) = token {
            builder = builder.header("authorization", format!("Bearer {token}"));
        }
        builder.body(Full::new(Bytes::from(body.to_owned()))).expect("request")
    };

    for token in [None, Some("wrong"), Some("s3cret-tokeN"), Some("")] {
        let reply = stack.send(request("GET", "/v1/entries", token, "")).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{token:?}");
    }
    let reply = stack.send(request("GET", "/v1/entries?status=new&source=github", Some("s3cret-token"), "")).await;
    assert_eq!(reply.status, StatusCode::OK);
    let entries: Vec<serde_json::Value> = serde_json::from_slice(&reply.body).expect("JSON");
    assert_eq!(entries.len(), 1);
    let id = entries[0]["id"].as_str().expect("id").to_owned();
    assert_eq!(entries[0]["event_id"].as_str(), Some(delivery.delivery_id.as_str()));

    let reply = stack.send(request("GET", &format!("/v1/entries/{id}"), Some("s3cret-token"), "")).await;
    let detail: serde_json::Value = serde_json::from_slice(&reply.body).expect("JSON");
    assert_eq!(detail["body"].as_str().map(str::as_bytes), Some(delivery.body.as_ref()));
    assert!(detail["headers"].as_array().is_some_and(|h| h.len() > 10));

    let reply = stack.send(request("POST", "/v1/replay", Some("s3cret-token"), r#"{"all":true,"dry_run":true}"#)).await;
    let report: serde_json::Value = serde_json::from_slice(&reply.body).expect("JSON");
    assert_eq!(report["done"].as_array().map(Vec::len), Some(1));
    assert_eq!(stack.handler.attempts(&delivery.delivery_id), 1, "a dry run re-drives nothing");
    let reply =
        stack.send(request("POST", "/v1/discard", Some("s3cret-token"), &format!(r#"{{"ids":["{id}"]}}"#))).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "a discard needs a reason");
    let body = format!(r#"{{"ids":["{id}"],"reason":"duplicate test","by":"oncall"}}"#);
    assert_eq!(stack.send(request("POST", "/v1/discard", Some("s3cret-token"), &body)).await.status, StatusCode::OK);
    let reply = stack.send(request("GET", "/v1/stats", Some("s3cret-token"), "")).await;
    let stats: serde_json::Value = serde_json::from_slice(&reply.body).expect("JSON");
    assert_eq!(stats["by_status"]["discarded"].as_u64(), Some(1));

    // Probes and metrics need no token.
    assert_eq!(stack.send(request("GET", "/livez", None, "")).await.status, StatusCode::OK);
    eventually(Duration::from_secs(15), "metrics show the discarded entry", || async {
        let reply = stack.send(request("GET", "/metrics", None, "")).await;
        let text = String::from_utf8_lossy(&reply.body).into_owned();
        text.contains("hookline_dlq_discards_total 1")
            && text.lines().any(|l| {
                l.starts_with("hookline_dlq_entries{") && l.contains("status=\"discarded\"") && l.ends_with(" 1")
            })
    })
    .await;
    shutdown.cancel();
    server.await.expect("task").expect("served");
    let _ = std::fs::remove_file(token_file);
    stack.shutdown().await;
}

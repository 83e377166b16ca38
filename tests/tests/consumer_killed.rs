//! A consumer process killed with SIGKILL between claim and done loses nothing: its claim expires with the lease
//! and another member of the group processes the event, once.

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::Duration,
};

use hookline_tests::{Delivery, TestStack, eventually};

#[tokio::test]
async fn consumer_killed_between_claim_and_done_loses_nothing() {
    let mut stack = TestStack::builder()
        .partitions(1)
        .consumer_config(|config| {
            config.redis.claim_lease_ms = 3_000;
            config.handler.timeout_ms = 2_500;
        })
        .build()
        .await;
    let config = &stack.consumer_config;
    let config_file = std::env::temp_dir().join(format!("hookline-killed-{}.toml", uuid::Uuid::new_v4()));
    std::fs::write(
        &config_file,
        format!(
            "[kafka]\nbrokers = \"{}\"\ninbound_topic = \"{}\"\ndlq_topic = \"{}\"\ndlq_status_topic = \"{}\"\n\
             group_id = \"{}\"\n[redis]\nurl = \"{}\"\nkey_prefix = \"{}\"\nclaim_lease_ms = {}\n\
             [handler]\ntimeout_ms = {}\n",
            config.kafka.brokers,
            config.kafka.inbound_topic,
            config.kafka.dlq_topic,
            config.kafka.dlq_status_topic,
            config.kafka.group_id,
            config.redis.url,
            config.redis.key_prefix,
            config.redis.claim_lease_ms,
            config.handler.timeout_ms,
        ),
    )
    .expect("write config");

    let mut child = Command::new(env!("CARGO_BIN_EXE_test-consumer"))
        .arg(&config_file)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the consumer process");
    let delivery = Delivery::new(&br#"{"kill":"me"}"#[..]);
    stack.post_accepted(&delivery).await;

    // Wait until the process is inside the handler: it has claimed the event and not marked it done.
    let stdout = child.stdout.take().expect("stdout");
    let expected = format!("handling {}", delivery.delivery_id);
    let announced = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout).lines().map_while(Result::ok).any(|line| line == expected)
    });
    tokio::time::timeout(Duration::from_secs(60), announced)
        .await
        .expect("the consumer process reached the handler in time")
        .expect("reader");
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");

    // Another member takes over once the group notices (session timeout) and the claim's lease has expired.
    stack.start_consumer().await;
    eventually(Duration::from_secs(60), "the event is processed by the surviving member", || async {
        stack.handler.count(&delivery.delivery_id) >= 1
    })
    .await;
    stack.wait_until_handled(1).await;
    assert_eq!(stack.handler.count(&delivery.delivery_id), 1);
    let _ = std::fs::remove_file(config_file);
    stack.shutdown().await;
}

//! The DLQ console in a real browser: Debian's chromium, driven by playwright-core (`tests/browser/console.mjs`),
//! against the replayer service over the real broker, Redis and consumer. The browser logs in (and a wrong token
//! gets nowhere), sees counts by service, filters (by service too), opens an entry, replays it after a fix and
//! sees it become `succeeded`, discards another with a reason, and finds an accepted event by its body on the Search
//! page; this test then checks in Kafka what was processed and recorded. The screenshots in `docs/console/` are this test's.

use std::{path::PathBuf, process::Stdio, time::Duration};

use hookline_dlq_replayer::{ReplayerConfig, filter::Filter, index::Status, ops::Replayer};
use hookline_tests::{Delivery, TestStack, browser};

#[tokio::test]
async fn console_in_a_real_browser() {
    let browser_dir = browser::scripts_dir();
    let stack = TestStack::builder()
        .consumer_config(|config| config.service.name = Some("billing".to_owned()))
        .consumer()
        .build()
        .await;
    let deliveries: Vec<Delivery> = (0..3)
        .map(|i| Delivery::new(format!(r#"{{"order":{{"id":{i},"total":"12.50","items":[1,2]}}}}"#).into_bytes()))
        .collect();
    for delivery in &deliveries {
        stack.handler.poison(&delivery.delivery_id);
        stack.post_accepted(delivery).await;
    }
    stack.wait_until_handled(3).await;
    let replayer =
        Replayer::new(ReplayerConfig { kafka: stack.kafka.clone(), ..ReplayerConfig::default() }).expect("replayer");
    let entries = replayer.list(&Filter::default()).await.expect("list");
    let id_of = |delivery: &Delivery| {
        entries
            .iter()
            .find(|e| e.entry.event_id.as_deref() == Some(delivery.delivery_id.as_str()))
            .map(|e| e.entry.id.clone())
            .expect("entry")
    };
    let (to_replay, to_discard, untouched) = (id_of(&deliveries[0]), id_of(&deliveries[1]), id_of(&deliveries[2]));
    // The fix: the handler takes this event now.
    stack.handler.heal(&deliveries[0].delivery_id);

    let token = uuid::Uuid::new_v4().simple().to_string();
    let api = stack.start_replayer_api(&token).await;
    let addr = api.addr;

    let screenshots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/console");
    let mut node = tokio::process::Command::new("node");
    node.arg(browser_dir.join("console.mjs"))
        .current_dir(&browser_dir)
        .env("CONSOLE_URL", format!("http://{addr}"))
        .env("CONSOLE_TOKEN", &token)
        .env("ENTRY_TO_REPLAY", &to_replay)
        .env("ENTRY_TO_DISCARD", &to_discard)
        .env("ENTRY_FILTER_TEXT", &deliveries[0].delivery_id)
        .env("N_ENTRIES", "3")
        .env("SERVICE", stack.consumer_config.service_name())
        .env("SEARCH_SOURCE", "github")
        .env("SEARCH_MATCH", &deliveries[1].delivery_id)
        .env("SCREENSHOTS", &screenshots)
        .env("CHROMIUM", browser::chromium())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(180), node.output())
        .await
        .expect("the browser test finished within 3 minutes")
        .expect("node runs");
    let log = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "browser test failed:\n{log}");

    // What the browser did, as Kafka and the handler saw it.
    assert_eq!(stack.handler.count(&deliveries[0].delivery_id), 1, "the fixed entry was processed once");
    assert_eq!(stack.handler.count(&deliveries[1].delivery_id), 0, "the discarded entry was not re-driven");
    assert_eq!(stack.handler.attempts(&deliveries[2].delivery_id), 1, "the third entry was left alone");
    let entries = replayer.list(&Filter::default()).await.expect("list");
    let status_of = |id: &str| entries.iter().find(|e| e.entry.id == id).map(|e| e.status);
    assert_eq!(status_of(&to_replay), Some(Status::Succeeded));
    assert_eq!(status_of(&to_discard), Some(Status::Discarded));
    assert_eq!(status_of(&untouched), Some(Status::New));
    let discarded = entries.iter().find(|e| e.entry.id == to_discard).and_then(|e| e.last_status.clone());
    let discarded = discarded.expect("status record");
    assert_eq!(discarded.note.as_deref(), Some("test event from the provider's dashboard"));
    assert_eq!(discarded.by, "shared-token", "the session's verified subject");
    assert_eq!(entries.len(), 3, "nothing else reached the DLQ");
    assert!(replayer.pauses().await.expect("pauses").is_empty(), "the route paused in the browser was resumed");
    let control = stack.records(&stack.kafka.control_topic).await;
    assert_eq!(control.len(), 2, "the console wrote one pause and one resume");

    api.stop().await;
    stack.shutdown().await;
}

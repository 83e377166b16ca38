//! The console's single sign-on in a real browser, against a real OpenID Connect provider: the certified
//! `oidc-provider` (`tests/browser/oidc-provider.mjs`, installed by `tests/browser/install`), Debian's chromium
//! driven by playwright-core (`tests/browser/oidc.mjs`), and the replayer over the real broker, Redis and consumer.
//! A viewer logs in (authorization code with PKCE), searches events, and gets 403 when it tries to replay; an
//! operator logs in and replays an entry. This test then checks that the replay is recorded under the operator's
//! subject, in the status topic and the audit trail, and that nothing is recorded for the viewer.

use std::{process::Stdio, time::Duration};

use hookline_common::{
    config::SecretRef,
    wire::{EntryStatus, EntryStatusRecord},
};
use hookline_dlq_replayer::{
    ReplayerConfig, config::OidcConfig, filter::Filter, identity::audit::AuditQuery, index::Status, ops::Replayer,
};
use hookline_tests::{Delivery, TestStack, browser, eventually};
use tokio::io::{AsyncBufReadExt, BufReader};

#[tokio::test]
async fn a_viewer_searches_but_cannot_replay_and_an_operators_replay_is_recorded_under_their_subject() {
    let browser_dir = browser::scripts_dir();
    let stack = TestStack::builder().consumer().build().await;
    let delivery = Delivery::new(br#"{"order":{"id":7}}"#.to_vec());
    stack.handler.poison(&delivery.delivery_id);
    stack.post_accepted(&delivery).await;
    stack.wait_until_handled(1).await;
    let replayer =
        Replayer::new(ReplayerConfig { kafka: stack.kafka.clone(), ..ReplayerConfig::default() }).expect("replayer");
    let entry = replayer.list(&Filter::default()).await.expect("list").remove(0).entry.id;
    stack.handler.heal(&delivery.delivery_id);

    // The console's address first: the provider registers its callback.
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let console = format!("http://{}", admin.local_addr().expect("addr"));
    let redirect_url = format!("{console}/ui/oidc/callback");
    let client_secret = uuid::Uuid::new_v4().simple().to_string();
    let mut provider = tokio::process::Command::new("node")
        .arg(browser_dir.join("oidc-provider.mjs"))
        .arg(&redirect_url)
        .arg(&client_secret)
        .current_dir(&browser_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs the provider");
    let mut lines = BufReader::new(provider.stdout.take().expect("stdout")).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the provider starts within 30 s")
        .expect("read")
        .expect("a line");
    let issuer: serde_json::Value = serde_json::from_str(&first).expect("the issuer as JSON");
    let issuer = issuer["issuer"].as_str().expect("issuer").to_owned();

    let secret_file = std::env::temp_dir().join(format!("hookline-oidc-secret-{}", uuid::Uuid::new_v4()));
    std::fs::write(&secret_file, &client_secret).expect("secret file");
    let oidc = OidcConfig {
        issuer,
        client_id: "hookline-console".to_owned(),
        client_secret: Some(SecretRef::from_file("oidc", secret_file.display().to_string())),
        redirect_url,
        scopes: vec!["openid".to_owned(), "roles".to_owned()],
        viewer_roles: vec!["hookline-viewer".to_owned()],
        operator_roles: vec!["hookline-operator".to_owned()],
        admin_roles: vec!["hookline-admin".to_owned()],
        ..OidcConfig::default()
    };
    let api = stack.start_replayer_api_on(admin, &uuid::Uuid::new_v4().simple().to_string(), |config| {
        config.api_token = None;
        config.oidc = Some(oidc);
    });
    eventually(Duration::from_secs(30), "the console is ready", || async {
        let reply = stack
            .send(http::Request::get(format!("{console}/readyz")).body(Default::default()).expect("request"))
            .await;
        reply.status == http::StatusCode::OK
    })
    .await;

    let output = tokio::time::timeout(
        Duration::from_secs(180),
        tokio::process::Command::new("node")
            .arg(browser_dir.join("oidc.mjs"))
            .current_dir(&browser_dir)
            .env("CONSOLE_URL", &console)
            .env("ENTRY_TO_REPLAY", &entry)
            .env("SEARCH_SOURCE", "github")
            .env("CHROMIUM", browser::chromium())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the browser test finished within 3 minutes")
    .expect("node runs");
    let log = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "browser test failed:\n{log}");

    eventually(Duration::from_secs(30), "the replayed entry succeeds", || async {
        replayer
            .list(&Filter::default())
            .await
            .expect("list")
            .iter()
            .any(|e| e.entry.id == entry && e.status == Status::Succeeded)
    })
    .await;
    assert_eq!(stack.handler.count(&delivery.delivery_id), 1, "replayed once");
    let replayed: Vec<String> = stack
        .records(&stack.kafka.dlq_status_topic)
        .await
        .iter()
        .filter_map(|record| EntryStatusRecord::decode(rdkafka::Message::payload(record).unwrap_or_default()).ok())
        .filter(|fate| fate.status == EntryStatus::Replayed)
        .map(|fate| fate.by)
        .collect();
    assert_eq!(replayed, vec!["oidc:operator-olga".to_owned()], "the operator's subject, and only one replay");
    let trail = replayer.audit_trail(&AuditQuery::default()).await.expect("audit");
    let actions: Vec<(&str, &str)> =
        trail.records.iter().map(|record| (record.subject.as_str(), record.action.as_str())).collect();
    assert_eq!(
        actions,
        vec![("oidc:operator-olga", "replay")],
        "the audit trail: the operator's replay, nothing of the viewer"
    );
    assert_eq!(trail.records[0].detail["entries"][0].as_str(), Some(entry.as_str()));

    api.stop().await;
    let _ = std::fs::remove_file(&secret_file);
    drop(provider);
    stack.shutdown().await;
}

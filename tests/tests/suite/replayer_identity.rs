//! Every operator known by name (issue 47 item 6, docs/security.md F14): scoped API tokens kept hashed in a MACed
//! compacted topic, the scope each route needs, the subject every mutating action is recorded under, and the audit
//! trail, against the real broker, Redis and consumer, with replayers running in-process.
//!
//! - A `read` token gets 403 on replay and its attempt changes nothing; an `operate` token's replay is recorded under
//!   its name, whatever `by` the caller sends, in the status topic and the audit trail.
//! - A token created on one instance works on another; revoked on one, every instance answers 401 within the tail's
//!   latency (stated: 5 s); tokens survive a replayer restart.

use std::time::Duration;

use bytes::Bytes;
use hookline_common::wire::{EntryStatus, EntryStatusRecord};
use hookline_dlq_replayer::{
    ReplayerConfig, filter::Filter, identity::audit::AuditQuery, index::Status, ops::Replayer,
};
use hookline_tests::{Delivery, ReplayerApi, TestStack, eventually};
use http::{Request, StatusCode};
use http_body_util::Full;

/// The shared demo token the helper configures; the tests below act through scoped tokens.
const SHARED: &str = "a-shared-demo-token-of-forty-characters-x";
/// How long a token's creation or revocation on one instance may take to reach another: the tokens topic's tail
/// polls every 100 ms, so this is latency of the broker, with room for a loaded CI machine.
const PROPAGATION: Duration = Duration::from_secs(5);

fn replayer_for(stack: &TestStack) -> Replayer {
    Replayer::new(ReplayerConfig { kafka: stack.kafka.clone(), ..ReplayerConfig::default() }).expect("replayer")
}

/// The status code and JSON body of `method path` with `token`.
async fn call(
    stack: &TestStack,
    api: &ReplayerApi,
    method: &str,
    path: &str,
    token: &str,
    body: &str,
) -> (StatusCode, serde_json::Value) {
    let request = Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", api.addr))
        .header("authorization", format!("Bearer {token}"))
        .body(Full::new(Bytes::from(body.to_owned())))
        .expect("request");
    let reply = stack.send(request).await;
    (reply.status, serde_json::from_slice(&reply.body).unwrap_or(serde_json::Value::Null))
}

/// The first admin, made as the runbook says: `hookline-replayer tokens create` (the library call behind it).
async fn first_admin(replayer: &Replayer) -> String {
    let book = replayer.token_book().await.expect("tokens topic");
    let (issued, _) = replayer.create_token(&book, "root", "admin", "cli:test").await.expect("first admin");
    assert_eq!(issued.info.created_by, "cli:test");
    issued.token
}

/// A token made through the API by `admin`.
async fn token_by_api(stack: &TestStack, api: &ReplayerApi, admin: &str, name: &str, scope: &str) -> String {
    let body = format!(r#"{{"name":"{name}","scope":"{scope}"}}"#);
    let (status, created) = call(stack, api, "POST", "/v1/tokens", admin, &body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!((created["name"].as_str(), created["scope"].as_str()), (Some(name), Some(scope)));
    created["token"].as_str().expect("the token, shown once").to_owned()
}

/// Waits until `api` has read its tokens and answers `token` on a read route.
async fn answers(stack: &TestStack, api: &ReplayerApi, token: &str, expected: StatusCode) {
    eventually(PROPAGATION, &format!("the replayer answers {expected}"), || async {
        call(stack, api, "GET", "/v1/pauses", token, "").await.0 == expected
    })
    .await;
}

#[tokio::test]
async fn a_read_token_cannot_replay_and_changes_nothing_and_an_operate_tokens_replay_is_recorded_under_its_name() {
    let stack = TestStack::builder().consumer().build().await;
    let replayer = replayer_for(&stack);
    let delivery = Delivery::new(b"{\"i\":1}".to_vec());
    stack.handler.poison(&delivery.delivery_id);
    stack.post_accepted(&delivery).await;
    stack.wait_until_handled(1).await;
    let entry = replayer.list(&Filter::default()).await.expect("list").remove(0);
    let id = entry.entry.id.clone();

    let admin = first_admin(&replayer).await;
    let api = stack.start_replayer_api(SHARED).await;
    answers(&stack, &api, &admin, StatusCode::OK).await;
    let reader = token_by_api(&stack, &api, &admin, "viewer-1", "read").await;
    let operator = token_by_api(&stack, &api, &admin, "oncall-1", "operate").await;
    // The token is kept as a digest only: it is nowhere in the tokens topic.
    let kept = stack.records(&format!("{}-tokens", stack.kafka.control_topic)).await;
    assert_eq!(kept.len(), 3, "root, viewer-1, oncall-1");
    for record in &kept {
        let value = String::from_utf8_lossy(rdkafka::Message::payload(record).unwrap_or_default()).into_owned();
        assert!(![&admin, &reader, &operator].iter().any(|token| value.contains(token.as_str())), "{value}");
    }

    // The reader reads, and may not replay, pause or make tokens: 403, and nothing changes.
    assert_eq!(call(&stack, &api, "GET", "/v1/entries", &reader, "").await.0, StatusCode::OK);
    stack.handler.heal(&delivery.delivery_id);
    let replay = format!(r#"{{"ids":["{id}"],"by":"somebody-else"}}"#);
    let (status, refused) = call(&stack, &api, "POST", "/v1/replay", &reader, &replay).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
    assert_eq!(refused["error"]["code"], "forbidden");
    let pause = r#"{"service":"billing","route":"github","reason":"x"}"#;
    assert_eq!(call(&stack, &api, "POST", "/v1/pause", &reader, pause).await.0, StatusCode::FORBIDDEN);
    let token = r#"{"name":"mine","scope":"admin"}"#;
    assert_eq!(call(&stack, &api, "POST", "/v1/tokens", &reader, token).await.0, StatusCode::FORBIDDEN);
    assert_eq!(call(&stack, &api, "POST", "/v1/tokens", &operator, token).await.0, StatusCode::FORBIDDEN);
    assert_eq!(replayer.list(&Filter::default()).await.expect("list")[0].status, Status::New, "not replayed");
    assert!(stack.records(&stack.kafka.dlq_status_topic).await.is_empty(), "no fate recorded");
    let replays = AuditQuery { what: Some("replay".to_owned()), ..AuditQuery::default() };
    assert!(replayer.audit_trail(&replays).await.expect("audit").records.is_empty(), "no replay audited");
    assert_eq!(stack.handler.count(&delivery.delivery_id), 0);

    // The operator replays, claiming to be someone else: recorded under its token's name.
    let (status, report) = call(&stack, &api, "POST", "/v1/replay", &operator, &replay).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["done"][0].as_str(), Some(id.as_str()));
    eventually(Duration::from_secs(30), "the replayed event is processed", || async {
        stack.handler.count(&delivery.delivery_id) == 1
    })
    .await;
    let fates: Vec<EntryStatusRecord> = stack
        .records(&stack.kafka.dlq_status_topic)
        .await
        .iter()
        .filter_map(|record| EntryStatusRecord::decode(rdkafka::Message::payload(record).unwrap_or_default()).ok())
        .collect();
    let replayed: Vec<&str> =
        fates.iter().filter(|fate| fate.status == EntryStatus::Replayed).map(|fate| fate.by.as_str()).collect();
    assert_eq!(replayed, vec!["token:oncall-1"], "the status topic names the token, not the body's `by`");

    // The audit trail: who, what, when, by API (filtered) and by the library the CLI calls.
    let since = hookline_common::time::format_rfc3339_millis(hookline_common::wire::now_ms() - 600_000);
    let path = format!("/v1/audit?who=token%3Aoncall-1&since={since}");
    let (status, trail) = call(&stack, &api, "GET", &path, &reader, "").await;
    assert_eq!(status, StatusCode::OK, "{trail}");
    let records = trail["records"].as_array().expect("records");
    assert_eq!(records.len(), 1, "{trail}");
    assert_eq!(
        (records[0]["subject"].as_str(), records[0]["action"].as_str()),
        (Some("token:oncall-1"), Some("replay"))
    );
    assert_eq!(records[0]["detail"]["entries"][0].as_str(), Some(id.as_str()));
    let at_ms = records[0]["at_ms"].as_i64().expect("when");
    assert!((hookline_common::wire::now_ms() - 600_000..=hookline_common::wire::now_ms()).contains(&at_ms));
    let tokens_made = replayer
        .audit_trail(&AuditQuery { what: Some("token.".to_owned()), ..AuditQuery::default() })
        .await
        .expect("audit");
    let made: Vec<(&str, &str)> = tokens_made
        .records
        .iter()
        .map(|record| (record.subject.as_str(), record.detail["name"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(
        made,
        vec![("token:root", "oncall-1"), ("token:root", "viewer-1"), ("cli:test", "root")],
        "newest first"
    );
    api.stop().await;
    stack.shutdown().await;
}

#[tokio::test]
async fn a_revoked_token_is_refused_by_every_instance_and_tokens_survive_a_restart() {
    let stack = TestStack::builder().build().await;
    let replayer = replayer_for(&stack);
    let admin = first_admin(&replayer).await;
    // No shared token: scoped tokens only, as in production.
    let no_shared = |config: &mut ReplayerConfig| config.api_token = None;
    let first = stack.start_replayer_api_with(SHARED, no_shared).await;
    let second = stack.start_replayer_api_with(SHARED, no_shared).await;
    answers(&stack, &first, &admin, StatusCode::OK).await;
    assert_eq!(call(&stack, &first, "GET", "/v1/pauses", SHARED, "").await.0, StatusCode::UNAUTHORIZED);
    // Made on one instance, known to the other.
    let ci = token_by_api(&stack, &first, &admin, "ci", "operate").await;
    answers(&stack, &second, &ci, StatusCode::OK).await;

    // A restart reads the tokens back.
    first.stop().await;
    let first = stack.start_replayer_api_with(SHARED, no_shared).await;
    answers(&stack, &first, &ci, StatusCode::OK).await;
    let (status, listed) = call(&stack, &first, "GET", "/v1/tokens", &admin, "").await;
    assert_eq!(status, StatusCode::OK);
    let names: Vec<&str> =
        listed["tokens"].as_array().expect("tokens").iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, vec!["root", "ci"]);
    assert!(
        listed["tokens"]
            .as_array()
            .expect("tokens")
            .iter()
            .all(|t| t.get("token").is_none() && t.get("sha256").is_none())
    );

    // Revoked on the second: refused there at once, and on the first within the stated time.
    let (status, revoked) = call(&stack, &second, "DELETE", "/v1/tokens/ci", &admin, "").await;
    assert_eq!(status, StatusCode::OK, "{revoked}");
    assert_eq!(revoked["revoked_by"].as_str(), Some("token:root"));
    assert_eq!(call(&stack, &second, "GET", "/v1/pauses", &ci, "").await.0, StatusCode::UNAUTHORIZED);
    answers(&stack, &first, &ci, StatusCode::UNAUTHORIZED).await;
    // Its name is free again; the revoked one stays revoked after another restart.
    second.stop().await;
    let second = stack.start_replayer_api_with(SHARED, no_shared).await;
    answers(&stack, &second, &admin, StatusCode::OK).await;
    assert_eq!(call(&stack, &second, "GET", "/v1/pauses", &ci, "").await.0, StatusCode::UNAUTHORIZED);
    let trail = replayer
        .audit_trail(&AuditQuery {
            who: Some("token:root".to_owned()),
            what: Some("token.revoke".to_owned()),
            ..AuditQuery::default()
        })
        .await
        .expect("audit");
    assert_eq!(trail.records.len(), 1);
    assert_eq!(trail.records[0].detail["name"], "ci");
    first.stop().await;
    second.stop().await;
    stack.shutdown().await;
}

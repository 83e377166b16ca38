//! The bytes on Kafka, pinned: one golden test per record kind (inbound, retry, dead letter, status, route pause,
//! API token, audit) encodes a fixed value the way its writer does (fixed key, fixed time, fixed record key), signs
//! it as the producer does, and compares its topic, key, body, every header in order and the MAC to a checked-in fixture
//! (`tests/fixtures/records/<kind>.txt`). A change of a record's bytes fails here: a fixture is rewritten only on
//! purpose, with `HOOKLINE_BLESS=1`, and the change is then a wire-format change (docs/records.md). Beside them, one
//! property test per kind: what a writer encodes, its reader decodes to the same value.
//!
//! No broker is needed: the records are built and signed, not sent.

use std::path::PathBuf;

use bytes::Bytes;
use hookline_common::{
    control::RoutePause,
    record_auth::RecordKeys,
    wire::{EntryStatus, EntryStatusRecord, EventMeta, FetchedRecord, InboundEvent, kafka},
};
use hookline_consumer::{
    dlq::{DeadLetters, ErrorClass, Failure},
    record::Record,
    retry::{Attempts, RetryHeaders},
};
use hookline_gateway::produce::VerifiedWebhook;
use hookline_record::{HeaderTable, Outgoing};
use hookline_signature::Verified;
use hookline_tests::record_auth::{key_file, keys_of};
use proptest::prelude::*;
use rdkafka::{Message, Timestamp, message::OwnedMessage};

/// The record key every golden record is signed with, and the time it is signed at.
const GOLDEN_KEY: &str = "hookline-golden-record-key-0123456789abcdef";
const NOW_MS: i64 = 1_780_000_000_000;

fn keys() -> RecordKeys {
    KEYS.with(RecordKeys::clone)
}

/// A record's bytes as a fixture holds them: one line per part, every byte string quoted and escaped (so the
/// text is exact and readable), `null` for an absent key, body or header value.
fn render(topic: &str, key: Option<&[u8]>, body: Option<&[u8]>, headers: &HeaderTable) -> String {
    let quoted = |bytes: Option<&[u8]>| match bytes {
        None => "null".to_owned(),
        Some(bytes) => format!("\"{}\"", bytes.escape_ascii()),
    };
    let mut out = format!("topic {}\nkey {}\nbody {}\n", quoted(Some(topic.as_bytes())), quoted(key), quoted(body));
    for header in headers.iter() {
        out.push_str(&format!("header {} {}\n", quoted(Some(header.name.as_bytes())), quoted(header.value)));
    }
    out
}

/// `record` signed as the producer signs it (at [`NOW_MS`], with [`GOLDEN_KEY`]).
fn sign(mut record: Outgoing) -> Outgoing {
    keys().sign_record(&mut record, NOW_MS).expect("the record signs");
    record
}

/// `record` signed as the producer signs it, rendered.
fn signed(record: Outgoing) -> String {
    let record = sign(record);
    render(&record.topic, record.key.as_deref(), record.body.as_deref(), &record.headers)
}

/// Compares `actual` with the fixture `name`, or writes it with `HOOKLINE_BLESS=1`.
fn golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/records").join(format!("{name}.txt"));
    if std::env::var_os("HOOKLINE_BLESS").is_some() {
        std::fs::write(&path, actual).expect("write the fixture");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    assert_eq!(actual, expected, "the bytes of a {name} record changed (fixture {})", path.display());
}

fn meta() -> EventMeta {
    EventMeta {
        source: "github".to_owned(),
        event_id: "d-1".to_owned(),
        event_type: Some("push".to_owned()),
        received_at_ms: 1_779_999_999_123,
        content_type: Some("application/json".to_owned()),
        secret_id: String::new(),
        ordering_key: Some("repo-7".to_owned()),
    }
}

fn webhook() -> VerifiedWebhook {
    let proof = Verified::fetched_from_provider_api("golden", Bytes::from_static(b"{\"zen\":\"ok\",\"n\":1}"));
    VerifiedWebhook::new(proof, meta(), "webhooks.inbound")
        .with_provider_event_id(Some("gh-delivery-1".to_owned()))
        .with_forwarded_headers(vec![
            ("x-github-event".to_owned(), Bytes::from_static(b"push")),
            ("x-github-hook-id".to_owned(), Bytes::from_static(b"12")),
            ("x-github-hook-id".to_owned(), Bytes::from_static(b"13")),
        ])
}

/// A record as the consumer fetched it from its topic at (`partition`, `offset`): `record`, signed.
fn fetched(record: Outgoing, partition: i32, offset: i64) -> Record {
    let record = sign(record);
    let message = OwnedMessage::new(
        record.body.as_ref().map(|body| body.to_vec()),
        record.key.as_ref().map(|key| key.to_vec()),
        record.topic.clone(),
        Timestamp::CreateTime(NOW_MS),
        partition,
        offset,
        Some(kafka::owned_headers(&record.headers)),
    );
    let keys = keys();
    Record::parse(FetchedRecord::copy_of(&message, record.topic.as_str().into()), |fetched| {
        keys.verify_as(
            hookline_common::record_auth::RecordKind::Inbound,
            fetched.topic(),
            fetched.key(),
            fetched.payload(),
            fetched.headers(),
            NOW_MS,
        )
    })
}

fn dead_letters(retention_days: Option<u32>) -> DeadLetters {
    let kafka = hookline_common::config::KafkaConfig {
        brokers: "127.0.0.1:1".to_owned(),
        group_id: "billing-group".to_owned(),
        record_auth: hookline_common::record_auth::RecordAuthConfig {
            keys: vec![key_file("golden-k1", GOLDEN_KEY)],
            accept_unsigned_until: None,
            inbound_only_keys: Vec::new(),
        },
        ..hookline_common::config::KafkaConfig::default()
    };
    DeadLetters::new(&kafka, "billing", "webhooks.retry.billing")
        .expect("a producer (it does not connect)")
        .keeping_dedupe_rows_for(retention_days)
}

fn attempts() -> Attempts {
    Attempts { attempts: 3, first_failure_at_ms: NOW_MS - 60_000, last_error: "503 from the handler".to_owned() }
}

fn failure() -> Failure<'static> {
    Failure {
        class: ErrorClass::RetryableExhausted,
        error: "503 from the handler",
        attempts: 5,
        handler: "http",
        first_failure_at_ms: NOW_MS - 60_000,
        last_failure_at_ms: NOW_MS - 1_000,
    }
}

#[test]
fn golden_inbound_record() {
    golden("inbound", &signed(webhook().record()));
}

#[test]
fn golden_retry_record() {
    let inbound = fetched(webhook().record(), 3, 41);
    let dead_letters = dead_letters(None);
    golden("retry", &signed(dead_letters.retry_record(&inbound, &attempts(), NOW_MS + 30_000)));
}

#[test]
fn golden_dead_letter_record() {
    let inbound = fetched(webhook().record(), 3, 41);
    let dead_letters = dead_letters(Some(30));
    // Dead-lettered from the retry topic: the record names the inbound position the event first had.
    let retry = dead_letters.retry_record(&inbound, &attempts(), NOW_MS + 30_000);
    let retried = fetched(retry, 0, 9);
    golden("dead_letter", &signed(dead_letters.dead_letter_record(&retried, &failure(), false)));
    golden("dead_letter_by_reference", &signed(dead_letters.dead_letter_record(&retried, &failure(), true)));
}

fn status() -> EntryStatusRecord {
    EntryStatusRecord {
        status: EntryStatus::FailedAgain,
        at_ms: NOW_MS,
        by: "consumer:billing".to_owned(),
        event_id: Some("d-1".to_owned()),
        new_entry: Some("webhooks.dlq:1:77".to_owned()),
        note: Some("still 503".to_owned()),
        replays: Some(2),
    }
}

#[test]
fn golden_status_record() {
    golden("status", &signed(status().encode("webhooks.dlq-status", "webhooks.dlq:0:12")));
}

fn pause() -> RoutePause {
    RoutePause {
        service: "billing".to_owned(),
        route: "stripe:invoice.paid".to_owned(),
        paused: true,
        by: "ops@example.com".to_owned(),
        reason: "handler maintenance".to_owned(),
        at_ms: NOW_MS,
    }
}

#[test]
fn golden_route_pause_record() {
    golden("route_pause", &signed(pause().encode("webhooks.control")));
}

#[test]
fn golden_api_token_record() {
    let token = hookline_record::identity::ApiTokenRecord {
        id: "0123456789abcdef".to_owned(),
        name: "alice".to_owned(),
        scope: "operate".to_owned(),
        sha256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".to_owned(),
        created_at_ms: NOW_MS,
        created_by: "token:root".to_owned(),
        revoked_at_ms: Some(NOW_MS + 1),
        revoked_by: Some("token:root".to_owned()),
    };
    golden("api_token", &signed(token.encode("webhooks.control-tokens")));
}

#[test]
fn golden_audit_record() {
    let audit = hookline_record::identity::AuditRecord {
        at_ms: NOW_MS,
        subject: "token:alice".to_owned(),
        action: "replay".to_owned(),
        detail: serde_json::json!({ "entries": ["webhooks.dlq:0:5"], "done": 1, "skipped": 0 }),
    };
    golden("audit", &signed(audit.encode("webhooks.control-audit")));
}

/// Header values as writers take them: any text (a value is UTF-8 in every record kind).
fn text() -> impl Strategy<Value = String> {
    "\\PC{0,24}"
}

fn event_meta() -> impl Strategy<Value = EventMeta> {
    (
        (text(), text(), proptest::option::of(text())),
        any::<i64>(),
        (proptest::option::of(text()), text(), proptest::option::of(text())),
    )
        .prop_map(|((source, event_id, event_type), received_at_ms, (content_type, secret_id, ordering_key))| {
            EventMeta { source, event_id, event_type, received_at_ms, content_type, secret_id, ordering_key }
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn inbound_records_decode_to_what_was_encoded(
        meta in event_meta(),
        provider_event_id in proptest::option::of(text()),
        forwarded in proptest::collection::vec(("[a-z-]{1,12}", proptest::collection::vec(any::<u8>(), 0..8)), 0..3),
    ) {
        let proof = Verified::fetched_from_provider_api("prop", Bytes::from_static(b"{}"));
        let forwarded: Vec<(String, Bytes)> =
            forwarded.into_iter().map(|(name, value)| (name, Bytes::from(value))).collect();
        let webhook = VerifiedWebhook::new(proof, meta.clone(), "webhooks.inbound")
            .with_provider_event_id(provider_event_id.clone())
            .with_forwarded_headers(forwarded.clone());
        let record = webhook.record();
        let message = OwnedMessage::new(
            Some(b"{}".to_vec()), record.key.as_ref().map(|key| key.to_vec()), "webhooks.inbound".into(),
            Timestamp::NotAvailable, 0, 1, Some(kafka::owned_headers(&record.headers)),
        );
        let event = InboundEvent::from_message(&message).expect("an inbound record decodes");
        let meta = EventMeta { secret_id: "api:prop".to_owned(), ..meta };
        prop_assert_eq!(&event.meta, &meta);
        prop_assert_eq!(message.key(), Some(meta.record_key().as_bytes()));
        prop_assert_eq!(event.provider_event_id, provider_event_id);
        prop_assert_eq!(event.forwarded_headers, forwarded);
    }

    #[test]
    fn retry_records_decode_to_what_was_encoded(
        count in any::<u32>(),
        first_failure_at_ms in any::<i64>(),
        due_at_ms in any::<i64>(),
        last_error in text(),
        (partition, offset) in (0..i32::MAX, 0..i64::MAX),
    ) {
        let inbound = fetched(webhook().record(), partition, offset);
        let attempts = Attempts { attempts: count, first_failure_at_ms, last_error };
        let record = DEAD_LETTERS.with(|dead_letters| dead_letters.retry_record(&inbound, &attempts, due_at_ms));
        let read = RetryHeaders::decode(record.headers.iter()).expect("retry headers decode");
        prop_assert_eq!(read.attempts, attempts);
        prop_assert_eq!(read.due_at_ms, due_at_ms);
        prop_assert_eq!(read.origin.topic, "webhooks.inbound");
        prop_assert_eq!((read.origin.partition, read.origin.offset), (partition, offset));
    }

    #[test]
    fn dead_letter_records_decode_to_what_was_encoded(
        attempts in any::<u32>(),
        first_failure_at_ms in any::<i64>(),
        last_failure_at_ms in any::<i64>(),
        error in text(),
        by_reference in any::<bool>(),
        (partition, offset) in (0..i32::MAX, 0..i64::MAX),
    ) {
        let webhook = webhook();
        let inbound = fetched(webhook.record(), partition, offset);
        let failure = Failure {
            class: ErrorClass::Poison, error: &error, attempts, handler: "http", first_failure_at_ms, last_failure_at_ms,
        };
        let record =
            DEAD_LETTERS.with(|dead_letters| dead_letters.dead_letter_record(&inbound, &failure, by_reference));
        let message = OwnedMessage::new(
            record.body.as_ref().map(|body| body.to_vec()), record.key.as_ref().map(|key| key.to_vec()),
            "webhooks.dlq".into(), Timestamp::NotAvailable, 4, 5, Some(kafka::owned_headers(&record.headers)),
        );
        let entry = hookline_common::wire::dead_letter_entry(&message);
        prop_assert_eq!(entry.id, "webhooks.dlq:4:5");
        prop_assert_eq!(entry.source.as_deref(), Some("github"));
        prop_assert_eq!(entry.service.as_deref(), Some("billing"));
        prop_assert_eq!(entry.event_id.as_deref(), Some("d-1"));
        prop_assert_eq!(entry.event_type.as_deref(), Some("push"));
        prop_assert_eq!(entry.error_class.as_deref(), Some("poison"));
        prop_assert_eq!(entry.error.as_deref(), Some(error.as_str()));
        prop_assert_eq!(entry.attempts, Some(attempts));
        prop_assert_eq!(entry.original_topic.as_deref(), Some("webhooks.inbound"));
        prop_assert_eq!((entry.original_partition, entry.original_offset), (Some(partition), Some(offset)));
        prop_assert_eq!(entry.first_failure_at_ms, Some(first_failure_at_ms));
        prop_assert_eq!(entry.last_failure_at_ms, Some(last_failure_at_ms));
        prop_assert_eq!(entry.body_bytes, webhook.body().len());
    }

    #[test]
    fn status_records_decode_to_what_was_encoded(
        status in prop_oneof![
            Just(EntryStatus::Replayed), Just(EntryStatus::ReplayFailed), Just(EntryStatus::Succeeded),
            Just(EntryStatus::FailedAgain), Just(EntryStatus::Discarded),
        ],
        at_ms in any::<i64>(),
        by in text(),
        (event_id, new_entry, note) in (
            proptest::option::of(text()), proptest::option::of(text()), proptest::option::of(text()),
        ),
        replays in proptest::option::of(any::<u32>()),
    ) {
        let record = EntryStatusRecord { status, at_ms, by, event_id, new_entry, note, replays };
        let encoded = record.encode("webhooks.dlq-status", "webhooks.dlq:0:1");
        let read = EntryStatusRecord::decode(encoded.body.as_deref().unwrap_or_default()).expect("it decodes");
        prop_assert_eq!(read, record);
    }

    #[test]
    fn route_pause_records_decode_to_what_was_encoded(
        service in "[a-z0-9-]{1,16}",
        route in "[a-z0-9.:,_-]{1,32}",
        paused in any::<bool>(),
        (by, reason) in (text(), text()),
        at_ms in any::<i64>(),
    ) {
        let pause = RoutePause { service, route, paused, by, reason, at_ms };
        let encoded = pause.encode("webhooks.control");
        let (key, body) = (encoded.key.unwrap_or_default(), encoded.body.unwrap_or_default());
        prop_assert_eq!(RoutePause::decode(&key, &body), Some(pause));
    }
}

thread_local! {
    static KEYS: RecordKeys = keys_of(&[key_file("golden-k1", GOLDEN_KEY)]);
    /// One writer per test thread (creating one loads its keys and a librdkafka producer handle, not connected).
    static DEAD_LETTERS: DeadLetters = dead_letters(None);
}

//! The record MAC's tests: signing, verifying, key rotation, kinds bound to topics, and a fixed test vector.

use rdkafka::message::{Header, Headers, OwnedHeaders};

use super::*;
use hookline_record::raw;

use crate::config::SecretRef;

const KEY_A: &str = "0123456789abcdef0123456789abcdef-key-a";
const KEY_B: &str = "0123456789abcdef0123456789abcdef-key-b";

fn keys_from(entries: &[(&str, &str, Option<&str>, Option<&str>)], accept_unsigned_until: Option<&str>) -> RecordKeys {
    let dir = std::env::temp_dir().join(format!("hookline-record-auth-unit-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let keys = entries
        .iter()
        .map(|(id, value, not_before, not_after)| {
            let path = dir.join(id);
            std::fs::write(&path, value).unwrap();
            SecretRef {
                not_before: not_before.map(str::to_owned),
                not_after: not_after.map(str::to_owned),
                ..SecretRef::from_file(*id, path.to_string_lossy())
            }
        })
        .collect();
    let config = RecordAuthConfig {
        keys,
        accept_unsigned_until: accept_unsigned_until.map(str::to_owned),
        inbound_only_keys: Vec::new(),
    };
    let loaded = RecordKeys::load(&config).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    loaded
}

fn headers() -> OwnedHeaders {
    OwnedHeaders::new()
        .insert(Header { key: raw::SOURCE, value: Some("github") })
        .insert(Header { key: raw::EVENT_ID, value: Some("d-1") })
        .insert(Header { key: "http-x-github-event", value: Some("push") })
}

const NOW: i64 = 1_780_000_000_000;

fn signed(keys: &RecordKeys) -> OwnedHeaders {
    keys.sign("webhooks.inbound", Some(b"d-1"), Some(b"{\"a\":1}"), Some(&headers()), NOW).unwrap()
}

fn rebuilt(headers: &OwnedHeaders, change: impl Fn(&str, Option<&[u8]>) -> Option<Vec<u8>>) -> OwnedHeaders {
    headers.iter().fold(OwnedHeaders::new(), |out, h| {
        let value = change(h.key, h.value).or_else(|| h.value.map(<[u8]>::to_vec));
        out.insert(Header { key: h.key, value: value.as_deref() })
    })
}

#[test]
fn a_stolen_gateway_key_signs_inbound_records_only() {
    let dir = std::env::temp_dir().join(format!("hookline-record-auth-kinds-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = |id: &str, value: &str| {
        std::fs::write(dir.join(id), value).unwrap();
        SecretRef::from_file(id, dir.join(id).to_string_lossy())
    };
    let (gateway_key, service_key) = (key("gw", KEY_A), key("svc", KEY_B));
    let config = |keys: Vec<SecretRef>, inbound_only: &[&str]| RecordAuthConfig {
        keys,
        accept_unsigned_until: None,
        inbound_only_keys: inbound_only.iter().map(|id| (*id).to_owned()).collect(),
    };
    // The gateway holds its key only; a reader holds both, the gateway's listed as inbound-only (and first,
    // to show the writer still picks a key allowed to sign what it writes).
    let gateway = RecordKeys::load(&config(vec![gateway_key.clone()], &["gw"])).unwrap();
    let reader = RecordKeys::load(&config(vec![gateway_key.clone(), service_key.clone()], &["gw"])).unwrap();
    // A service writing status, control, retry and DLQ records, with its own key only.
    let service = RecordKeys::load(&config(vec![service_key], &[])).unwrap();
    // Whoever stole the gateway's key signs with it as they like (no inbound-only list of their own).
    let thief = RecordKeys::load(&config(vec![gateway_key], &[])).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();

    let (topic, body) = ("webhooks.inbound", Some(&b"{}"[..]));
    let verify = |keys: &RecordKeys, headers: &OwnedHeaders| {
        keys.verify_as(RecordKind::Inbound, topic, None, body, Some(headers), NOW)
    };
    let inbound = gateway.sign(topic, None, body, Some(&headers()), NOW).unwrap();
    assert_eq!(verify(&reader, &inbound), Verdict::Authentic { key_id: "gw".into() });

    let powers = [
        (raw::REPROCESS_ID, "r1"),
        (raw::REPLAY_OF, "webhooks.dlq:0:1"),
        (raw::SERVICE, "billing"),
        (raw::ORIGIN, "reconciled"),
        (raw::retry::ATTEMPTS, "1"),
        (raw::dlq::ERROR_CLASS, "poison"),
    ];
    for (name, value) in powers {
        let control = headers().insert(Header { key: name, value: Some(value) });
        let refused = gateway.sign(topic, None, body, Some(&control), NOW).err();
        assert_eq!(refused, Some(SignError::KindNotAllowed), "{name}");
        let forged = thief.sign(topic, None, body, Some(&control), NOW).unwrap();
        assert_eq!(verify(&reader, &forged), Verdict::Refused(Refusal::KindNotAllowed), "{name}");
        let own = reader.sign(topic, None, body, Some(&control), NOW).unwrap();
        assert_eq!(verify(&reader, &own), Verdict::Authentic { key_id: "svc".into() }, "{name}");
    }
    // A status record (no hookline headers) is not an inbound record either.
    let status = thief.sign("webhooks.dlq-status", Some(b"webhooks.dlq:0:1"), body, None, NOW).unwrap();
    let verdict = reader.verify("webhooks.dlq-status", Some(b"webhooks.dlq:0:1"), body, Some(&status), NOW);
    assert_eq!(verdict, Verdict::Refused(Refusal::KindNotAllowed));

    // Header stuffing: the thief adds the two headers of an inbound record to a record of another kind. The
    // reader knows the kind from the topic it reads, so the headers change nothing.
    let status_json = br#"{"status":"discarded","by":"thief","at_ms":1}"#;
    let control_json = br#"{"service":"billing","route":"github","paused":false,"by":"thief","reason":"","at_ms":1}"#;
    let stuffed = [
        (RecordKind::Status, "webhooks.dlq-status", &b"webhooks.dlq:0:1"[..], &status_json[..]),
        (RecordKind::Control, "webhooks.control", &b"route-pause:billing:github"[..], &control_json[..]),
        (RecordKind::Retry, "webhooks.retry.billing", &b"d-1"[..], &b"{}"[..]),
        (RecordKind::DeadLetter, "webhooks.dlq", &b"d-1"[..], &b"{}"[..]),
    ];
    for (kind, topic, key, value) in stuffed {
        let forged = thief.sign(topic, Some(key), Some(value), Some(&headers()), NOW).unwrap();
        let as_kind = reader.verify_as(kind, topic, Some(key), Some(value), Some(&forged), NOW);
        assert_eq!(as_kind, Verdict::Refused(Refusal::KindNotAllowed), "{kind:?}");
        let plain = reader.verify(topic, Some(key), Some(value), Some(&forged), NOW);
        assert_eq!(plain, Verdict::Refused(Refusal::KindNotAllowed), "{kind:?} through verify");
        // The same record signed with a service key is believed: the refusal is the key's kind, not the topic's.
        let own = service.sign(topic, Some(key), Some(value), Some(&headers()), NOW).unwrap();
        let verdict = reader.verify_as(kind, topic, Some(key), Some(value), Some(&own), NOW);
        assert_eq!(verdict, Verdict::Authentic { key_id: "svc".into() }, "{kind:?}");
    }
}

#[test]
fn a_signed_record_verifies_and_the_header_names_its_key() {
    let keys = keys_from(&[("k1", KEY_A, None, None)], None);
    let headers = signed(&keys);
    let mac = headers.iter().find(|h| h.key == raw::MAC).unwrap().value.unwrap();
    assert!(std::str::from_utf8(mac).unwrap().starts_with("v1,k1,"));
    let verdict = keys.verify("webhooks.inbound", Some(b"d-1"), Some(b"{\"a\":1}"), Some(&headers), NOW);
    assert_eq!(verdict, Verdict::Authentic { key_id: "k1".into() });
}

#[test]
fn any_change_breaks_the_mac() {
    let keys = keys_from(&[("k1", KEY_A, None, None), ("k2", KEY_B, None, None)], None);
    let headers = signed(&keys);
    let verify = |topic: &str, key: Option<&[u8]>, body: Option<&[u8]>, headers: &OwnedHeaders| {
        keys.verify(topic, key, body, Some(headers), NOW)
    };
    let body: &[u8] = b"{\"a\":1}";
    let bad = Verdict::Refused(Refusal::BadMac);
    assert_eq!(verify("webhooks.dlq", Some(b"d-1"), Some(body), &headers), bad, "topic");
    assert_eq!(verify("webhooks.inbound", Some(b"d-2"), Some(body), &headers), bad, "key");
    assert_eq!(verify("webhooks.inbound", None, Some(body), &headers), bad, "absent key");
    assert_eq!(verify("webhooks.inbound", Some(b""), Some(body), &headers), bad, "empty key");
    assert_eq!(verify("webhooks.inbound", Some(b"d-1"), Some(b"{\"a\":2}"), &headers), bad, "body");
    assert_eq!(verify("webhooks.inbound", Some(b"d-1"), None, &headers), bad, "absent body");
    let changed_value = rebuilt(&headers, |key, _| (key == raw::EVENT_ID).then(|| b"d-2".to_vec()));
    assert_eq!(verify("webhooks.inbound", Some(b"d-1"), Some(body), &changed_value), bad, "hookline header");
    let changed_other = rebuilt(&headers, |key, _| (key == "http-x-github-event").then(|| b"ping".to_vec()));
    assert_eq!(verify("webhooks.inbound", Some(b"d-1"), Some(body), &changed_other), bad, "forwarded header");
    let added = headers.clone().insert(Header { key: raw::ORIGIN, value: Some("reconciled") });
    assert_eq!(verify("webhooks.inbound", Some(b"d-1"), Some(body), &added), bad, "added header");
    // The same MAC claimed for the other key.
    let other_key = rebuilt(&headers, |key, value| {
        (key == raw::MAC).then(|| String::from_utf8_lossy(value.unwrap()).replace("v1,k1,", "v1,k2,").into_bytes())
    });
    assert_eq!(verify("webhooks.inbound", Some(b"d-1"), Some(body), &other_key), bad, "key id");
    // Signed with another key of the same id: the key itself is covered.
    let impostor = keys_from(&[("k1", KEY_B, None, None)], None);
    assert_eq!(impostor.verify("webhooks.inbound", Some(b"d-1"), Some(body), Some(&headers), NOW), bad, "key value");
    // Field boundaries: moving a byte from the key into the topic changes the input.
    let a = mac_input("k1", "ab", Some(b"c"), None, Some(&OwnedHeaders::new()));
    let b = mac_input("k1", "a", Some(b"bc"), None, Some(&OwnedHeaders::new()));
    assert_ne!(a, b);
    let header_split = |name: &str, value: &str| {
        mac_input("k1", "t", None, None, Some(&OwnedHeaders::new().insert(Header { key: name, value: Some(value) })))
    };
    assert_ne!(header_split("hookline-ab", "c"), header_split("hookline-a", "bc"));
}

#[test]
fn unsigned_records_pass_only_inside_the_transition_window() {
    let body: &[u8] = b"{}";
    let strict = keys_from(&[("k1", KEY_A, None, None)], None);
    assert_eq!(strict.verify("t", None, Some(body), Some(&headers()), NOW), Verdict::Refused(Refusal::Unsigned));
    let lenient = keys_from(&[("k1", KEY_A, None, None)], Some("2026-06-01T00:00:00Z"));
    let until = lenient.accept_unsigned_until_ms().unwrap();
    assert_eq!(lenient.verify("t", None, Some(body), Some(&headers()), until), Verdict::UnsignedAccepted);
    assert_eq!(lenient.verify("t", None, Some(body), Some(&headers()), until + 1), Verdict::Refused(Refusal::Unsigned));
    // A present but wrong MAC is refused inside the window too.
    let forged = headers().insert(Header { key: raw::MAC, value: Some("v1,k1,AAAA") });
    assert_eq!(lenient.verify("t", None, Some(body), Some(&forged), until), Verdict::Refused(Refusal::Malformed));
}

#[test]
fn rotation_signs_with_the_first_valid_key_and_retires_the_old_one() {
    let keys = keys_from(
        &[("k2", KEY_B, Some("2026-06-01T00:00:00Z"), None), ("k1", KEY_A, None, Some("2026-07-01T00:00:00Z"))],
        None,
    );
    let before = 1_780_000_000_000; // 2026-05-28
    let after_switch = 1_780_400_000_000; // 2026-06-02
    let after_retire = 1_783_000_000_000; // 2026-07-02
    assert_eq!(keys.signing_key_id(before), Some("k1"));
    assert_eq!(keys.signing_key_id(after_switch), Some("k2"));
    let old = keys.sign("t", None, Some(b"x"), None, before).unwrap();
    let new = keys.sign("t", None, Some(b"x"), None, after_switch).unwrap();
    assert_eq!(
        keys.verify("t", None, Some(b"x"), Some(&old), after_switch),
        Verdict::Authentic { key_id: "k1".into() }
    );
    assert_eq!(
        keys.verify("t", None, Some(b"x"), Some(&new), after_switch),
        Verdict::Authentic { key_id: "k2".into() }
    );
    assert_eq!(keys.verify("t", None, Some(b"x"), Some(&old), after_retire), Verdict::Refused(Refusal::ExpiredKey));
    let only_old = keys_from(&[("k1", KEY_A, None, Some("2026-07-01T00:00:00Z"))], None);
    assert_eq!(only_old.sign("t", None, None, None, after_retire).err(), Some(SignError::NoValidKey));
    let unknown = keys_from(&[("k3", KEY_A, None, None)], None);
    assert_eq!(unknown.verify("t", None, Some(b"x"), Some(&new), after_switch), Verdict::Refused(Refusal::UnknownKey));
}

#[test]
fn signing_a_copy_replaces_its_mac() {
    let keys = keys_from(&[("k1", KEY_A, None, None)], None);
    let first = signed(&keys);
    let copy = keys.sign("webhooks.dlq", Some(b"d-1"), Some(b"{\"a\":1}"), Some(&first), NOW).unwrap();
    assert_eq!(copy.iter().filter(|h| h.key == raw::MAC).count(), 1);
    assert!(keys.verify("webhooks.dlq", Some(b"d-1"), Some(b"{\"a\":1}"), Some(&copy), NOW).accepted());
    let doubled = first.clone().insert(Header { key: raw::MAC, value: Some("v1,k1,x") });
    assert_eq!(
        keys.verify("webhooks.inbound", Some(b"d-1"), Some(b"{\"a\":1}"), Some(&doubled), NOW),
        Verdict::Refused(Refusal::Malformed)
    );
}

/// A fixed test vector: another implementation (or a later version of this one) must produce these bytes.
#[test]
fn test_vector() {
    let keys = keys_from(&[("k1", "hookline-record-key-test-vector-32bytes!", None, None)], None);
    let headers = OwnedHeaders::new()
        .insert(Header { key: raw::SOURCE, value: Some("github") })
        .insert(Header { key: raw::EVENT_ID, value: Some("d-1") });
    let input = mac_input("k1", "webhooks.inbound", Some(b"d-1"), Some(b"{}"), Some(&headers));
    assert_eq!(
        hex::encode(&input),
        concat!(
            "686f6f6b6c696e652d7265636f72642d6d616300",
            "763100", // "hookline-record-mac\0v1\0"
            "0000000000000002",
            "6b31", // key id
            "0000000000000010",
            "776562686f6f6b732e696e626f756e64", // topic
            "01",
            "0000000000000003",
            "642d31", // key
            "01",
            "0000000000000002",
            "7b7d",     // body
            "00000002", // two headers
            "000000000000000f",
            "686f6f6b6c696e652d736f75726365",
            "01",
            "0000000000000006",
            "676974687562",
            "0000000000000011",
            "686f6f6b6c696e652d6576656e742d6964",
            "01",
            "0000000000000003",
            "642d31",
        )
    );
    let signed = keys.sign("webhooks.inbound", Some(b"d-1"), Some(b"{}"), Some(&headers), NOW).unwrap();
    let mac = signed.iter().find(|h| h.key == raw::MAC).unwrap().value.unwrap();
    assert_eq!(std::str::from_utf8(mac).unwrap(), TEST_VECTOR_MAC);
}

/// Computed independently (Python `hmac` over the bytes above).
const TEST_VECTOR_MAC: &str = "v1,k1,FvwdhwotOo5TGXssxP1vbOOCKyezHb7yiEvwlmhTbVE=";

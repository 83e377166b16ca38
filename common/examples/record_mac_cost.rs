//! What a record MAC costs ([`hookline_common::record_auth`]): signs or verifies one gateway's record (1 KiB body,
//! 8 headers: the event's 7 and one forwarded, the event id as key; built as the gateway builds it) N times, for counting instructions under callgrind. The cost of one
//! operation is the difference between a run with N and a run with 0, divided by N (start-up cancels out):
//!
//! ```sh
//! cargo build --release -p hookline-common --example record_mac_cost
//! for op in sign verify; do for n in 0 10000; do
//!   valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/record_mac_cost $op $n
//! done; done   # "Collected : <instructions>"
//! ```

use std::hint::black_box;

use bytes::Bytes;
use hookline_common::{
    config::SecretRef,
    record_auth::{RecordAuthConfig, RecordKeys},
    wire::{EventMeta, kafka},
};
use hookline_record::inbound::InboundRecord;

const TOPIC: &str = "webhooks.inbound";
const EVENT_ID: &str = "5f1c3a9e-2b7d-4c11-9e0a-6d8f4b2a7c31";
const NOW_MS: i64 = 1_780_000_000_000;

fn main() {
    let mut args = std::env::args().skip(1);
    let operation = args.next().unwrap_or_default();
    let n: u64 = args.next().and_then(|n| n.parse().ok()).expect("usage: record_mac_cost sign|verify N");

    let path = std::env::temp_dir().join(format!("hookline-record-mac-cost-{}", std::process::id()));
    std::fs::write(&path, "hookline-record-mac-cost-key-0123456789abcdef0123456789").expect("key file");
    let config = RecordAuthConfig {
        keys: vec![SecretRef::from_file("k1", path.to_string_lossy())],
        accept_unsigned_until: None,
        inbound_only_keys: Vec::new(),
    };
    let keys = RecordKeys::load(&config).expect("keys");
    std::fs::remove_file(&path).expect("remove key file");

    let body: Vec<u8> = br#"{"action":"opened","data":""#
        .iter()
        .copied()
        .chain(std::iter::repeat_n(b'x', 1024 - 29))
        .chain(*br#""}"#)
        .collect();
    assert_eq!(body.len(), 1024);
    let meta = EventMeta {
        source: "github".to_owned(),
        event_id: EVENT_ID.to_owned(),
        event_type: Some("pull_request".to_owned()),
        received_at_ms: 1_780_000_000_000,
        content_type: Some("application/json".to_owned()),
        secret_id: "primary".to_owned(),
        ordering_key: None,
    };
    let record = InboundRecord {
        forwarded_headers: vec![("user-agent".to_owned(), Bytes::from_static(b"GitHub-Hookshot/abc123"))],
        ..InboundRecord::new(meta)
    }
    .encode(TOPIC, Bytes::copy_from_slice(&body));
    assert_eq!(record.headers.len(), 8);
    let headers = kafka::owned_headers(&record.headers);
    let key = record.key.as_deref();

    match operation.as_str() {
        "sign" => {
            for _ in 0..n {
                let signed = keys.sign(black_box(TOPIC), key, Some(black_box(&body)), Some(&headers), NOW_MS);
                black_box(signed.expect("signed"));
            }
        }
        "verify" => {
            let signed = keys.sign(TOPIC, key, Some(&body), Some(&headers), NOW_MS).expect("signed");
            for _ in 0..n {
                let verdict = keys.verify(black_box(TOPIC), key, Some(black_box(&body)), Some(&signed), NOW_MS);
                assert!(black_box(verdict).accepted());
            }
        }
        other => panic!("unknown operation `{other}`: sign or verify"),
    }
}

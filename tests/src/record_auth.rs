//! Record keys for the test stacks, and the tools of the record-MAC tests: a stack's own key set (every service of
//! a [`crate::TestStack`] shares it, as deployments share theirs; [`crate::TestStack::signed`] signs a record a
//! test writes to Kafka itself as hookline would have), key files, and times for key validity.

use hookline_common::{
    config::SecretRef,
    record_auth::{RecordAuthConfig, RecordKeys},
};

/// The record key every test stack signs with (32+ bytes, as validation asks).
pub const TEST_RECORD_KEY: &str = "hookline-test-record-key-0123456789abcdef";

/// Writes `value` to a fresh file and returns a reference to it as key `id` (tests never set environment
/// variables).
pub fn key_file(id: &str, value: &str) -> SecretRef {
    let path = std::env::temp_dir().join(format!("hookline-test-record-key-{}-{id}", uuid::Uuid::new_v4().simple()));
    std::fs::write(&path, value).expect("write record key file");
    SecretRef::from_file(id, path.to_string_lossy())
}

/// The `[kafka.record_auth]` of a test stack: one key, `test-k1`.
pub fn test_record_auth() -> RecordAuthConfig {
    RecordAuthConfig {
        keys: vec![key_file("test-k1", TEST_RECORD_KEY)],
        accept_unsigned_until: None,
        inbound_only_keys: Vec::new(),
    }
}

/// The current time as RFC 3339 with a shift of `seconds` (negative: in the past), for `not_after` and
/// `accept_unsigned_until`.
pub fn rfc3339_in(seconds: i64) -> String {
    hookline_common::time::format_rfc3339_seconds(hookline_common::wire::now_ms() + seconds * 1000)
}

/// A key set of these keys (as a service configured with them loads it), to sign a record a test writes itself
/// as a writer holding them would.
pub fn keys_of(keys: &[SecretRef]) -> RecordKeys {
    RecordKeys::load(&RecordAuthConfig {
        keys: keys.to_vec(),
        accept_unsigned_until: None,
        inbound_only_keys: Vec::new(),
    })
    .expect("the keys load")
}

//! Record keys for the test stacks, and the tools of the record-MAC tests: a stack's own key set (every service of
//! a [`TestStack`] shares it, as deployments share theirs), and signing records a test writes to Kafka itself as
//! hookline would have.

use hookline_common::{
    config::SecretRef,
    record_auth::{RecordAuthConfig, RecordKeys},
    wire::now_ms,
};
use rdkafka::message::OwnedHeaders;

use crate::TestStack;

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
    RecordAuthConfig { keys: vec![key_file("test-k1", TEST_RECORD_KEY)], accept_unsigned_until: None }
}

impl TestStack {
    /// The stack's record keys, loaded.
    pub fn record_keys(&self) -> RecordKeys {
        RecordKeys::load(&self.kafka.record_auth).expect("the stack's record keys load")
    }

    /// `headers` with the MAC hookline would add to a record of `topic` with this key and body.
    pub fn signed(&self, topic: &str, key: Option<&[u8]>, body: &[u8], headers: &OwnedHeaders) -> OwnedHeaders {
        self.record_keys().sign(topic, key, Some(body), Some(headers), now_ms()).expect("a key valid now")
    }
}

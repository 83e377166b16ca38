//! The bytes on Kafka: every record kind hookline writes, one module each with its encoding and its decoding side
//! by side ([`inbound`], [`retry`], [`dead_letter`], [`status`], [`route_pause`], the replayer's [`identity`]), the
//! one owned header table ([`HeaderTable`]), the replayer's copies of an inbound record ([`redrive`]), the record MAC
//! ([`mac`]: sign and verify, keys bound to record kinds), the record a writer hands its producer ([`Outgoing`]), and
//! what a record's headers claim before (or without) it being believed ([`Claims`]).
//!
//! This crate knows no service, no configuration and no runtime (no Kafka client either: a service's producer
//! turns an [`Outgoing`] into librdkafka's headers once, and its door copies a fetched record's headers into a
//! [`HeaderTable`] once). It is the one place that names a record header ([`header`]): every other crate reads and
//! writes records through the types here. Changing a name or an encoding here is a wire-format change: bump
//! [`FORMAT_VERSION`]; the golden tests (`tests/fixtures/records`) pin every kind's bytes.

use bytes::Bytes;

mod claims;
pub mod dead_letter;
pub mod header;
pub mod identity;
pub mod inbound;
pub mod mac;
pub mod redrive;
pub mod retry;
pub mod route_pause;
pub mod status;
mod table;

pub use claims::Claims;
pub use table::{Header, HeaderTable};

/// Version of the inbound record layout, carried in [`header::FORMAT_VERSION`].
///
/// - `1`: key = event id; no ordering key.
/// - `2`: adds [`header::ORDERING_KEY`]; when present, the record's key is that value instead of the event id.
///   The dedupe id is always [`header::EVENT_ID`], never the key. Readers accept both versions.
pub const FORMAT_VERSION: &str = "2";

/// Every record format version this build reads.
pub const READABLE_FORMAT_VERSIONS: &[&str] = &["1", "2"];

/// The version of the record MAC ([`header::MAC`]): the first field of its value, and part of what is MACed.
pub const RECORD_MAC_VERSION: &str = "v1";

/// The domain tag that starts every record MAC's input, so that no other HMAC made with the same key (none is)
/// could ever be mistaken for one.
pub const RECORD_MAC_DOMAIN: &str = "hookline-record-mac";

/// [`header::dlq::ERROR_CLASS`] of a record dead-lettered because its MAC ([`header::MAC`]) was missing or wrong.
/// The replayer refuses to re-drive such an entry without `force`.
pub const UNAUTHENTICATED_RECORD_CLASS: &str = "unauthenticated_record";

/// Longest error message kept in a DLQ or retry record, in bytes.
pub const MAX_DLQ_ERROR_BYTES: usize = 2048;

/// Values of [`header::ORIGIN`].
pub mod origin {
    /// Fetched from the provider's event API with our credentials (over TLS) by the reconciler, because the
    /// provider cannot redeliver it (Stripe). Keyed and deduped by the provider's event id like its webhook.
    pub const RECONCILED: &str = "reconciled";
}

/// Why a record's headers do not describe an inbound event.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("record has no `{0}` header")]
    MissingHeader(&'static str),
    #[error("record header `{0}` is not valid")]
    BadHeader(&'static str),
    #[error("record format version `{0}` is not supported")]
    UnsupportedVersion(String),
}

/// A record as a writer built it, once: where it goes, its key, body and headers. The producer signs it (appending
/// its MAC, and before that its trace context when traces are on) and hands it to the Kafka client; nothing
/// rebuilds its headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    pub topic: String,
    pub key: Option<Bytes>,
    pub body: Option<Bytes>,
    pub headers: HeaderTable,
}

impl Outgoing {
    pub fn new(topic: &str, key: Option<Bytes>, body: Option<Bytes>, headers: HeaderTable) -> Self {
        Self { topic: topic.to_owned(), key, body, headers }
    }

    /// Sets the W3C trace context ([`header::TRACEPARENT`]), replacing one copied from an earlier record, so a
    /// record carries one. Called before the record is signed: the MAC covers it.
    pub fn set_traceparent(&mut self, traceparent: &str) {
        if self.headers.iter().any(|h| h.name == header::TRACEPARENT) {
            self.headers = self.headers.without(|name| name == header::TRACEPARENT);
        }
        self.headers.push_str(header::TRACEPARENT, traceparent);
    }

    /// The event id it carries ([`header::EVENT_ID`]), for a producer span's message id.
    pub fn event_id(&self) -> Option<String> {
        self.headers
            .iter()
            .find(|h| h.name == header::EVENT_ID)
            .and_then(|h| h.value)
            .map(|value| String::from_utf8_lossy(value).into_owned())
    }
}

/// A fetched record a writer copies (into a retry or a dead letter): its key, body and headers.
#[derive(Debug, Clone)]
pub struct Original<'a> {
    pub key: Option<Bytes>,
    pub body: Option<Bytes>,
    pub headers: &'a HeaderTable,
}

impl Original<'_> {
    /// A copy of this record to `topic` with `fields` appended: its key and body, and its headers but any retry
    /// header, any [`header::DESTINATION`] (a copy names its destination in `fields`, or none) and any header
    /// `fields` sets anew (a retry or a dead letter of a record that was retried before).
    pub(crate) fn copy_with(self, topic: &str, fields: &[(&'static str, String)]) -> Outgoing {
        let mut headers = HeaderTable::with_capacity(self.headers.len() + fields.len());
        headers.extend_from(self.headers, |name| {
            !retry::is_retry_header(name)
                && name != header::DESTINATION
                && !fields.iter().any(|(field, _)| *field == name)
        });
        for (name, value) in fields {
            headers.push_str(name, value);
        }
        Outgoing::new(topic, self.key, self.body, headers)
    }
}

/// The longest prefix of `text` that fits in `max_bytes` without splitting a character.
pub fn truncate_utf8(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The escape hatch for tests that forge hostile records (a wrong MAC, a missing header, a header that gives
/// powers): raw header names, named as such. Production code reads and writes records through the kinds' types.
pub mod raw {
    pub use crate::header::*;
}

#[cfg(test)]
mod tests {
    use super::truncate_utf8;

    #[test]
    fn truncation_never_splits_a_character() {
        assert_eq!(truncate_utf8("héllo", 2), "h");
        assert_eq!(truncate_utf8("héllo", 3), "hé");
        assert_eq!(truncate_utf8("short", 100), "short");
    }
}

#[cfg(test)]
mod names_live_here;

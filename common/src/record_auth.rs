//! Records only hookline could have written: every record a hookline service produces carries a MAC
//! ([`hookline_record::mac`], which signs and verifies it) made with an internal key, and every reader checks it
//! before dedupe or any handler. Anyone who can write a topic but does not hold the key cannot make a record a
//! consumer will process. This is defence in depth beside Kafka ACLs (docs/security.md, "Records only hookline
//! could write"). This module only loads the keys of `kafka.record_auth` and hands records to the `record` crate.
//!
//! The header value is `v1,<key id>,<base64 of HMAC-SHA256>` ([`crate::wire::RECORD_MAC_VERSION`]). The MAC is
//! over an unambiguous encoding ([`mac_input`]) of: a domain tag, the key id, the topic the record is written to
//! (so a record copied from the DLQ into the inbound topic does not pass as an inbound record), the record key,
//! the body, and every header of the record except the MAC header itself, in record order, names and values.
//!
//! Keys: `kafka.record_auth.keys`, a list of secret references (at least [`MIN_KEY_BYTES`] bytes each). The first
//! key that is valid now (its `not_before` passed, its `not_after` not yet) signs; every configured key verifies
//! until its `not_after`. A rotation adds the new key first with a `not_before` in the future, deployed to every
//! service before that time: writers switch to it by themselves and readers already know it. Keys are bound to the
//! record kinds they may sign: a key listed in `inbound_only_keys` (the internet-facing gateway's) signs inbound
//! records only, and every reader refuses anything else signed with it ([`Refusal::KindNotAllowed`]), so a stolen
//! gateway key cannot make a re-drive, a re-processing request, a retry, a dead letter, a status or a control
//! record. The kind is the reader's, not the record's: a reader says what it reads ([`RecordKind`], from the
//! topic it reads) and an inbound-only key is believed only by a reader of inbound records (the inbound and
//! source topics), and there only for a record without the headers that give powers. Headers a thief adds cannot
//! make a status or control record pass. The other services share the other keys.
//!
//! Records from before the upgrade carry no MAC: `kafka.record_auth.accept_unsigned_until` (an RFC 3339 time,
//! compared with the reader's own clock, never the record's timestamp, which the writer chooses) lets a reader
//! accept them, counted, until then. A record whose MAC is present but wrong is never accepted.

use hookline_record::{
    Outgoing,
    mac::{KeySet, MacKey},
};
use rdkafka::message::{Headers, OwnedHeaders};

pub use crate::config::RecordAuthConfig;
use crate::{config::Problems, wire::kafka};

pub use crate::config::MIN_RECORD_KEY_BYTES as MIN_KEY_BYTES;
pub use hookline_record::mac::{RecordKind, Refusal, SignError, Verdict, outcome};

/// The exact bytes a record's MAC covers ([`hookline_record::mac::mac_input`]), for a record's librdkafka headers.
pub fn mac_input<H: Headers>(
    key_id: &str,
    topic: &str,
    key: Option<&[u8]>,
    payload: Option<&[u8]>,
    headers: Option<&H>,
) -> Vec<u8> {
    hookline_record::mac::mac_input(key_id, topic, key, payload, kafka::headers_of(headers))
}

/// The loaded key set of a service ([`KeySet`], the MAC of the `record` crate, with the keys of
/// `kafka.record_auth`): signs what it writes, verifies what it reads. Cheap to clone. Its `Debug` shows key ids
/// only.
#[derive(Clone, Debug)]
pub struct RecordKeys {
    keys: KeySet,
}

impl RecordKeys {
    /// Loads every key of `config`, or returns every problem at once (one line each, never a key's value): the
    /// settings' problems ([`RecordAuthConfig::validate`]), then each key's value read and its length checked.
    pub fn load(config: &RecordAuthConfig) -> Result<Self, Vec<String>> {
        let mut problems = Problems::default();
        config.validate(&mut problems);
        let mut problems = problems.into_lines();
        let mut keys = Vec::new();
        for secret in &config.keys {
            let id = &secret.id;
            let value = match secret.load() {
                Ok(value) => value,
                Err(problem) => {
                    problems.push(format!("kafka.record_auth.keys: {problem}"));
                    continue;
                }
            };
            if value.len() < MIN_KEY_BYTES {
                problems.push(format!(
                    "kafka.record_auth.keys: key `{id}` has {} bytes; a record key needs at least {MIN_KEY_BYTES}",
                    value.len()
                ));
                continue;
            }
            // Validation parsed the validity already; a key it refused is not loaded.
            let Ok(validity) = secret.validity_ms() else { continue };
            keys.push(MacKey::new(id.clone(), &value, validity, config.inbound_only_keys.contains(id)));
        }
        let accept_unsigned_until_ms = config.accept_unsigned_until_ms().ok().flatten();
        if let Some(until_ms) = accept_unsigned_until_ms.filter(|until_ms| *until_ms >= crate::wire::now_ms()) {
            tracing::warn!(
                accept_unsigned_until_ms = until_ms,
                "kafka.record_auth.accept_unsigned_until is open: records without a MAC are accepted until then \
                 (and counted as unsigned_accepted); remove it once the pre-upgrade backlog has drained"
            );
        }
        if problems.is_empty() { Ok(Self { keys: KeySet::new(keys, accept_unsigned_until_ms) }) } else { Err(problems) }
    }

    /// The configured key ids, in order (the first valid one signs).
    pub fn key_ids(&self) -> Vec<&str> {
        self.keys.key_ids()
    }

    /// The id of the key that signs at `now_ms`, if any: for the start-up line.
    pub fn signing_key_id(&self, now_ms: i64) -> Option<&str> {
        self.keys.signing_key_id(now_ms)
    }

    /// Until when unsigned records are accepted, ms since the epoch.
    pub fn accept_unsigned_until_ms(&self) -> Option<i64> {
        self.keys.accept_unsigned_until_ms()
    }

    /// Signs `record` at `now_ms` ([`KeySet::sign`]): its MAC appended, any copied one dropped.
    pub fn sign_record(&self, record: &mut Outgoing, now_ms: i64) -> Result<(), SignError> {
        self.keys.sign(record, now_ms)
    }

    /// The headers to write for a record given as librdkafka parts: `headers` without any MAC header they carried
    /// (a copy of a signed record is signed anew by its writer), then this record's MAC, made at `now_ms` with the
    /// first key valid then. For tests and tools that build a record by hand; writers build an [`Outgoing`].
    pub fn sign(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        payload: Option<&[u8]>,
        headers: Option<&OwnedHeaders>,
        now_ms: i64,
    ) -> Result<OwnedHeaders, SignError> {
        let mut record = kafka::outgoing(topic, key, payload, headers);
        self.keys.sign(&mut record, now_ms)?;
        Ok(kafka::owned_headers(&record.headers))
    }

    /// Checks a record of any kind but inbound ([`RecordKind::Retry`], `DeadLetter`, `Status`, `Control`) read
    /// from `topic` at the reader's time `now_ms`: a record signed with an inbound-only key is refused whatever
    /// its headers. Readers of the inbound and source topics call [`Self::verify_as`] with [`RecordKind::Inbound`].
    pub fn verify<H: Headers>(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        payload: Option<&[u8]>,
        headers: Option<&H>,
        now_ms: i64,
    ) -> Verdict {
        self.keys.verify(RecordKind::Control, topic, key, payload, kafka::headers_of(headers), now_ms)
    }

    /// Checks a record a reader of `kind` read from `topic` at the reader's time `now_ms` ([`KeySet::verify`]).
    pub fn verify_as<H: Headers>(
        &self,
        kind: RecordKind,
        topic: &str,
        key: Option<&[u8]>,
        payload: Option<&[u8]>,
        headers: Option<&H>,
        now_ms: i64,
    ) -> Verdict {
        self.keys.verify(kind, topic, key, payload, kafka::headers_of(headers), now_ms)
    }

    /// [`Self::verify_as`] for a record whose headers are already in a [`hookline_record::HeaderTable`].
    pub fn verify_table(
        &self,
        kind: RecordKind,
        topic: &str,
        key: Option<&[u8]>,
        payload: Option<&[u8]>,
        headers: Option<&hookline_record::HeaderTable>,
        now_ms: i64,
    ) -> Verdict {
        self.keys.verify(kind, topic, key, payload, headers.into_iter().flat_map(|table| table.iter()), now_ms)
    }
}

#[cfg(test)]
mod tests;

//! Records only hookline could have written: every record a hookline service produces carries a MAC
//! ([`crate::wire::header::MAC`]) made with an internal key, and every reader checks it before dedupe or any
//! handler. Anyone who can write a topic but does not hold the key cannot make a record a consumer will process.
//! This is defence in depth beside Kafka ACLs (docs/security.md, "Records only hookline could write").
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

use std::sync::Arc;

use base64::Engine as _;
use hmac::{Hmac, Mac};
use rdkafka::message::{Header, Headers, OwnedHeaders};
use sha2::Sha256;

pub use crate::config::RecordAuthConfig;
use crate::{
    config::Problems,
    wire::{HeaderTable, RECORD_MAC_VERSION, header},
};

pub use crate::config::MIN_RECORD_KEY_BYTES as MIN_KEY_BYTES;

mod encoding;
mod kind;

pub use self::encoding::mac_input;
use self::{
    encoding::{compute, feed, parse_mac_header},
    kind::is_inbound_record,
};

/// Why a record is not authentic. The label of `..._record_auth_total{outcome}` for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No MAC header, and no transition window (or it is over).
    Unsigned,
    /// A MAC header that is not `v1,<key id>,<base64>`, or more than one.
    Malformed,
    /// Signed with a key this reader does not know.
    UnknownKey,
    /// Signed with a key past its `not_after`.
    ExpiredKey,
    /// The MAC does not match: the record was changed, or forged.
    BadMac,
    /// Signed with an inbound-only key (the gateway's) but not an inbound record: a re-drive, re-processing,
    /// retry, dead letter or status record made with a key that may not make them.
    KindNotAllowed,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unsigned => "unsigned",
            Self::Malformed => "malformed",
            Self::UnknownKey => "unknown_key",
            Self::ExpiredKey => "expired_key",
            Self::BadMac => "bad_mac",
            Self::KindNotAllowed => "kind_not_allowed",
        }
    }
}

/// What a reader reads, as it knows from the topic: the kind of record it expects. Only [`RecordKind::Inbound`]
/// believes an inbound-only key (the gateway's), and only for a record as the gateway writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// The inbound topic or a source topic: the gateway's records, re-drives and re-processing requests.
    Inbound,
    /// A service's retry topic.
    Retry,
    /// The DLQ topic.
    DeadLetter,
    /// The DLQ status topic.
    Status,
    /// The control topic (route pauses).
    Control,
}

/// What a reader concludes about one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Signed by a key this reader holds: hookline wrote it.
    Authentic {
        key_id: String,
    },
    /// No MAC, inside `accept_unsigned_until`: processed as before the upgrade, and counted.
    UnsignedAccepted,
    Refused(Refusal),
}

impl Verdict {
    /// Whether the record may be processed.
    pub fn accepted(&self) -> bool {
        !matches!(self, Self::Refused(_))
    }

    /// The `outcome` label: `authentic`, `unsigned_accepted`, or the refusal's.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Authentic { .. } => outcome::AUTHENTIC,
            Self::UnsignedAccepted => outcome::UNSIGNED_ACCEPTED,
            Self::Refused(refusal) => refusal.as_str(),
        }
    }
}

/// Values of the `outcome` label of the readers' record-authentication counters.
pub mod outcome {
    pub const AUTHENTIC: &str = "authentic";
    pub const UNSIGNED_ACCEPTED: &str = "unsigned_accepted";
    /// Every value, for `--print-metrics`.
    pub const ALL: &[&str] = &[
        AUTHENTIC,
        UNSIGNED_ACCEPTED,
        "unsigned",
        "malformed",
        "unknown_key",
        "expired_key",
        "bad_mac",
        "kind_not_allowed",
    ];
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SignError {
    #[error(
        "no record key is valid now (kafka.record_auth.keys: every key is before its not_before or past its not_after)"
    )]
    NoValidKey,
    #[error(
        "no record key may sign this record: the keys valid now are inbound-only (kafka.record_auth.inbound_only_keys), \
         and this is not an inbound record"
    )]
    KindNotAllowed,
}

/// One loaded key: its id, validity and the HMAC state keyed with it (cloned per record, so the key schedule is
/// computed once).
#[derive(Clone)]
struct Key {
    id: String,
    not_before_ms: Option<i64>,
    not_after_ms: Option<i64>,
    /// Listed in `inbound_only_keys`: signs, and is believed for, inbound records only.
    inbound_only: bool,
    mac: Hmac<Sha256>,
}

impl Key {
    fn signs_at(&self, now_ms: i64) -> bool {
        self.not_before_ms.is_none_or(|start| start <= now_ms) && self.verifies_at(now_ms)
    }

    /// A key verifies from the moment it is configured (records are ours; a writer whose clock runs ahead may
    /// sign with it a little early) until its `not_after`.
    fn verifies_at(&self, now_ms: i64) -> bool {
        self.not_after_ms.is_none_or(|end| now_ms <= end)
    }
}

/// The loaded key set of a service: signs what it writes, verifies what it reads. Cheap to clone. Its `Debug`
/// shows key ids only.
#[derive(Clone)]
pub struct RecordKeys {
    keys: Arc<[Key]>,
    accept_unsigned_until_ms: Option<i64>,
}

impl std::fmt::Debug for RecordKeys {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RecordKeys")
            .field("key_ids", &self.key_ids())
            .field("accept_unsigned_until_ms", &self.accept_unsigned_until_ms)
            .finish()
    }
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
            let Ok((not_before_ms, not_after_ms)) = secret.validity_ms() else { continue };
            // HMAC takes a key of any length: this cannot fail.
            let mac = Hmac::<Sha256>::new_from_slice(&value).expect("HMAC accepts any key length");
            let inbound_only = config.inbound_only_keys.contains(id);
            keys.push(Key { id: id.clone(), not_before_ms, not_after_ms, inbound_only, mac });
        }
        let accept_unsigned_until_ms = config.accept_unsigned_until_ms().ok().flatten();
        if let Some(until_ms) = accept_unsigned_until_ms.filter(|until_ms| *until_ms >= crate::wire::now_ms()) {
            tracing::warn!(
                accept_unsigned_until_ms = until_ms,
                "kafka.record_auth.accept_unsigned_until is open: records without a MAC are accepted until then \
                 (and counted as unsigned_accepted); remove it once the pre-upgrade backlog has drained"
            );
        }
        if problems.is_empty() { Ok(Self { keys: keys.into(), accept_unsigned_until_ms }) } else { Err(problems) }
    }

    /// The configured key ids, in order (the first valid one signs).
    pub fn key_ids(&self) -> Vec<&str> {
        self.keys.iter().map(|key| key.id.as_str()).collect()
    }

    /// The id of the key that signs at `now_ms`, if any: for the start-up line.
    pub fn signing_key_id(&self, now_ms: i64) -> Option<&str> {
        self.keys.iter().find(|key| key.signs_at(now_ms)).map(|key| key.id.as_str())
    }

    /// Until when unsigned records are accepted, ms since the epoch.
    pub fn accept_unsigned_until_ms(&self) -> Option<i64> {
        self.accept_unsigned_until_ms
    }

    /// The headers to write: `headers` without any MAC header they carried (a copy of a signed record is signed
    /// anew by its writer), then this record's MAC, made at `now_ms` with the first key valid then.
    pub fn sign(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        payload: Option<&[u8]>,
        headers: Option<&OwnedHeaders>,
        now_ms: i64,
    ) -> Result<OwnedHeaders, SignError> {
        // Read out of librdkafka once, for the kind, the MAC and the copy.
        let table = headers.map(HeaderTable::read).unwrap_or_default();
        let valid = || self.keys.iter().filter(|key| key.signs_at(now_ms));
        let inbound = is_inbound_record(Some(&table));
        let signer = valid().find(|key| inbound || !key.inbound_only).ok_or(if valid().next().is_some() {
            SignError::KindNotAllowed
        } else {
            SignError::NoValidKey
        })?;
        let mut out = OwnedHeaders::new_with_capacity(table.count() + 1);
        for h in table.iter().filter(|h| h.key != header::MAC) {
            out = out.insert(h);
        }
        // The MAC covers exactly what `out` holds: `visit` leaves out the MAC header too.
        let tag = compute(&signer.mac, &signer.id, topic, key, payload, Some(&table));
        let value =
            format!("{RECORD_MAC_VERSION},{},{}", signer.id, base64::engine::general_purpose::STANDARD.encode(tag));
        Ok(out.insert(Header { key: header::MAC, value: Some(value.as_str()) }))
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
        self.check(false, topic, key, payload, headers, now_ms)
    }

    /// Checks a record a reader of `kind` read from `topic` at the reader's time `now_ms`. Constant-time
    /// comparison of the MAC. An inbound-only key is believed only when `kind` is [`RecordKind::Inbound`] and the
    /// record is an inbound record as the gateway writes it (no header that gives it powers).
    pub fn verify_as<H: Headers>(
        &self,
        kind: RecordKind,
        topic: &str,
        key: Option<&[u8]>,
        payload: Option<&[u8]>,
        headers: Option<&H>,
        now_ms: i64,
    ) -> Verdict {
        self.check(kind == RecordKind::Inbound, topic, key, payload, headers, now_ms)
    }

    fn check<H: Headers>(
        &self,
        inbound_reader: bool,
        topic: &str,
        key: Option<&[u8]>,
        payload: Option<&[u8]>,
        headers: Option<&H>,
        now_ms: i64,
    ) -> Verdict {
        let mut macs = headers.into_iter().flat_map(|headers| headers.iter()).filter(|h| h.key == header::MAC);
        let Some(first) = macs.next() else {
            return match self.accept_unsigned_until_ms {
                Some(until) if now_ms <= until => Verdict::UnsignedAccepted,
                _ => Verdict::Refused(Refusal::Unsigned),
            };
        };
        if macs.next().is_some() {
            return Verdict::Refused(Refusal::Malformed);
        }
        let Some((key_id, tag)) = first.value.and_then(parse_mac_header) else {
            return Verdict::Refused(Refusal::Malformed);
        };
        let Some(signer) = self.keys.iter().find(|key| key.id == key_id) else {
            return Verdict::Refused(Refusal::UnknownKey);
        };
        if !signer.verifies_at(now_ms) {
            return Verdict::Refused(Refusal::ExpiredKey);
        }
        let mut mac = signer.mac.clone();
        feed(&mut mac, key_id, topic, key, payload, headers);
        match mac.verify_slice(&tag) {
            Ok(()) if signer.inbound_only && !(inbound_reader && is_inbound_record(headers)) => {
                Verdict::Refused(Refusal::KindNotAllowed)
            }
            Ok(()) => Verdict::Authentic { key_id: key_id.to_owned() },
            Err(_) => Verdict::Refused(Refusal::BadMac),
        }
    }
}

#[cfg(test)]
mod tests;

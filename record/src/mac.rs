//! The record MAC: every record a hookline service writes carries one ([`header::MAC`]), made with an internal key,
//! and every reader checks it before dedupe or any handler (docs/security.md, "Records only hookline could write").
//! Signing and verifying live here once; where the keys come from (configuration, secret files) is the services'.
//!
//! The header value is `v1,<key id>,<base64 of HMAC-SHA256>` ([`crate::RECORD_MAC_VERSION`]), over [`mac_input`]:
//! a domain tag, the key id, the topic, the record key, the body and every header but the MAC itself, in record
//! order. Keys are bound to the record kinds they may sign: an inbound-only key (the internet-facing gateway's)
//! signs inbound records only, and is believed only by a reader of inbound records ([`RecordKind::Inbound`]), and
//! there only for a record without the headers that give powers ([`is_inbound_record`]).

use std::sync::Arc;

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::{
    Outgoing, RECORD_MAC_DOMAIN, RECORD_MAC_VERSION, header,
    table::{Header, HeaderTable},
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

    /// Why a reader refused the record, in words that name the MAC header: the error a consumer dead-letters a
    /// refused record with.
    pub fn reason(self) -> String {
        format!(
            "record not written by hookline: {} (no valid {} header; see docs/security.md)",
            self.as_str(),
            header::MAC
        )
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
    /// The replayer's tokens and audit topics ([`crate::identity`]).
    Identity,
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

/// One key: its id, validity and the HMAC state keyed with it (cloned per record, so the key schedule is computed
/// once).
#[derive(Clone)]
pub struct MacKey {
    id: String,
    not_before_ms: Option<i64>,
    not_after_ms: Option<i64>,
    /// Signs, and is believed for, inbound records only.
    inbound_only: bool,
    mac: Hmac<Sha256>,
}

impl std::fmt::Debug for MacKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("MacKey").field("id", &self.id).finish_non_exhaustive()
    }
}

impl MacKey {
    /// Key `id` with secret `value`, valid from `not_before_ms` to `not_after_ms` (ms since the epoch, either open).
    pub fn new(
        id: impl Into<String>,
        value: &[u8],
        (not_before_ms, not_after_ms): (Option<i64>, Option<i64>),
        inbound_only: bool,
    ) -> Self {
        // HMAC takes a key of any length: this cannot fail.
        let mac = Hmac::<Sha256>::new_from_slice(value).expect("HMAC accepts any key length");
        Self { id: id.into(), not_before_ms, not_after_ms, inbound_only, mac }
    }

    fn signs_at(&self, now_ms: i64) -> bool {
        self.not_before_ms.is_none_or(|start| start <= now_ms) && self.verifies_at(now_ms)
    }

    /// A key verifies from the moment it is configured (records are ours; a writer whose clock runs ahead may
    /// sign with it a little early) until its `not_after`.
    fn verifies_at(&self, now_ms: i64) -> bool {
        self.not_after_ms.is_none_or(|end| now_ms <= end)
    }
}

/// A service's keys: signs what it writes, verifies what it reads. Cheap to clone.
#[derive(Clone)]
pub struct KeySet {
    keys: Arc<[MacKey]>,
    accept_unsigned_until_ms: Option<i64>,
}

impl std::fmt::Debug for KeySet {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("KeySet")
            .field("key_ids", &self.key_ids())
            .field("accept_unsigned_until_ms", &self.accept_unsigned_until_ms)
            .finish()
    }
}

impl KeySet {
    /// `keys` in order (the first valid one signs); unsigned records accepted until `accept_unsigned_until_ms`.
    pub fn new(keys: Vec<MacKey>, accept_unsigned_until_ms: Option<i64>) -> Self {
        Self { keys: keys.into(), accept_unsigned_until_ms }
    }

    /// The key ids, in order.
    pub fn key_ids(&self) -> Vec<&str> {
        self.keys.iter().map(|key| key.id.as_str()).collect()
    }

    /// The id of the key that signs at `now_ms`, if any.
    pub fn signing_key_id(&self, now_ms: i64) -> Option<&str> {
        self.keys.iter().find(|key| key.signs_at(now_ms)).map(|key| key.id.as_str())
    }

    /// Until when unsigned records are accepted, ms since the epoch.
    pub fn accept_unsigned_until_ms(&self) -> Option<i64> {
        self.accept_unsigned_until_ms
    }

    /// Signs `record` at `now_ms` with the first key valid then (and allowed for its kind): any MAC header it
    /// carried (a copy of a signed record) is dropped, and its MAC appended last.
    pub fn sign(&self, record: &mut Outgoing, now_ms: i64) -> Result<(), SignError> {
        if record.headers.iter().any(|h| h.name == header::MAC) {
            record.headers = record.headers.without(|name| name == header::MAC);
        }
        let value =
            self.mac_value(&record.topic, record.key.as_deref(), record.body.as_deref(), &record.headers, now_ms)?;
        record.headers.push_str(header::MAC, &value);
        Ok(())
    }

    /// The MAC header's value for a record of these parts (`headers` without a MAC header).
    fn mac_value(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        body: Option<&[u8]>,
        headers: &HeaderTable,
        now_ms: i64,
    ) -> Result<String, SignError> {
        let valid = || self.keys.iter().filter(|key| key.signs_at(now_ms));
        let inbound = is_inbound_record(headers.iter());
        let signer = valid().find(|key| inbound || !key.inbound_only).ok_or(if valid().next().is_some() {
            SignError::KindNotAllowed
        } else {
            SignError::NoValidKey
        })?;
        let mut mac = signer.mac.clone();
        visit(&signer.id, topic, key, body, headers.iter(), &mut |bytes| mac.update(bytes));
        let tag = mac.finalize().into_bytes();
        Ok(format!("{RECORD_MAC_VERSION},{},{}", signer.id, base64::engine::general_purpose::STANDARD.encode(tag)))
    }

    /// Checks a record a reader of `kind` read from `topic` at the reader's time `now_ms`. Constant-time
    /// comparison of the MAC. An inbound-only key is believed only when `kind` is [`RecordKind::Inbound`] and the
    /// record is an inbound record as the gateway writes it (no header that gives it powers).
    pub fn verify<'a>(
        &self,
        kind: RecordKind,
        topic: &str,
        key: Option<&[u8]>,
        body: Option<&[u8]>,
        headers: impl Iterator<Item = Header<'a>> + Clone,
        now_ms: i64,
    ) -> Verdict {
        let mut macs = headers.clone().filter(|h| h.name == header::MAC);
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
        visit(key_id, topic, key, body, headers.clone(), &mut |bytes| mac.update(bytes));
        match mac.verify_slice(&tag) {
            Ok(()) if signer.inbound_only && !(kind == RecordKind::Inbound && is_inbound_record(headers)) => {
                Verdict::Refused(Refusal::KindNotAllowed)
            }
            Ok(()) => Verdict::Authentic { key_id: key_id.to_owned() },
            Err(_) => Verdict::Refused(Refusal::BadMac),
        }
    }
}

/// `v1,<key id>,<base64>` → (key id, MAC bytes).
fn parse_mac_header(value: &[u8]) -> Option<(&str, Vec<u8>)> {
    let text = std::str::from_utf8(value).ok()?;
    let mut parts = text.splitn(3, ',');
    let (version, key_id, tag) = (parts.next()?, parts.next()?, parts.next()?);
    if version != RECORD_MAC_VERSION || key_id.is_empty() {
        return None;
    }
    let tag = base64::engine::general_purpose::STANDARD.decode(tag).ok()?;
    (tag.len() == 32).then_some((key_id, tag))
}

/// Whether a record is an inbound record as the gateway writes it, what an inbound-only key may sign: it names its
/// source and event id, and carries none of the headers that give a record powers or make it another kind (a
/// re-drive's, a re-processing request's, a service address, an origin, retry or DLQ metadata). A status record
/// (no hookline headers at all) is not one.
pub fn is_inbound_record<'a>(headers: impl Iterator<Item = Header<'a>>) -> bool {
    let mut source = false;
    let mut event_id = false;
    for h in headers {
        match h.name {
            header::SOURCE => source = true,
            header::EVENT_ID => event_id = true,
            header::REPLAY_OF
            | header::REPLAY_COUNT
            | header::REPROCESS_ID
            | header::REPROCESS_OF
            | header::SERVICE
            | header::ORIGIN => return false,
            other
                if other.starts_with(header::retry::PREFIX) || other.starts_with(crate::dead_letter::HEADER_PREFIX) =>
            {
                return false;
            }
            _ => {}
        }
    }
    source && event_id
}

/// The exact bytes a record's MAC covers (version 1), for the documentation and the test vector:
///
/// ```text
/// "hookline-record-mac" 0x00 "v1" 0x00           RECORD_MAC_DOMAIN, RECORD_MAC_VERSION
/// field(key id) field(topic) optional(record key) optional(body)
/// u32be(number of headers)                       every header except `hookline-mac`, in record order:
///   field(name) optional(value)
/// field(b)    = u64be(len(b)) || b
/// optional(x) = 0x00 when absent, 0x01 || field(x) when present (an empty key is not an absent key)
/// ```
pub fn mac_input<'a>(
    key_id: &str,
    topic: &str,
    key: Option<&[u8]>,
    body: Option<&[u8]>,
    headers: impl Iterator<Item = Header<'a>> + Clone,
) -> Vec<u8> {
    let mut out = Vec::new();
    visit(key_id, topic, key, body, headers, &mut |bytes| out.extend_from_slice(bytes));
    out
}

fn visit<'a>(
    key_id: &str,
    topic: &str,
    key: Option<&[u8]>,
    body: Option<&[u8]>,
    headers: impl Iterator<Item = Header<'a>> + Clone,
    sink: &mut dyn FnMut(&[u8]),
) {
    let field = |sink: &mut dyn FnMut(&[u8]), bytes: &[u8]| {
        sink(&(bytes.len() as u64).to_be_bytes());
        sink(bytes);
    };
    let optional = |sink: &mut dyn FnMut(&[u8]), bytes: Option<&[u8]>| match bytes {
        None => sink(&[0]),
        Some(bytes) => {
            sink(&[1]);
            field(sink, bytes);
        }
    };
    sink(RECORD_MAC_DOMAIN.as_bytes());
    sink(&[0]);
    sink(RECORD_MAC_VERSION.as_bytes());
    sink(&[0]);
    field(sink, key_id.as_bytes());
    field(sink, topic.as_bytes());
    optional(sink, key);
    optional(sink, body);
    let covered = headers.filter(|h| h.name != header::MAC);
    let count = u32::try_from(covered.clone().count()).unwrap_or(u32::MAX);
    sink(&count.to_be_bytes());
    for h in covered {
        field(sink, h.name.as_bytes());
        optional(sink, h.value);
    }
}

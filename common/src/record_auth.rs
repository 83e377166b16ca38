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
mod tests {
    use super::*;
    use crate::config::SecretRef;

    const KEY_A: &str = "0123456789abcdef0123456789abcdef-key-a";
    const KEY_B: &str = "0123456789abcdef0123456789abcdef-key-b";

    fn keys_from(
        entries: &[(&str, &str, Option<&str>, Option<&str>)],
        accept_unsigned_until: Option<&str>,
    ) -> RecordKeys {
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
            .insert(Header { key: header::SOURCE, value: Some("github") })
            .insert(Header { key: header::EVENT_ID, value: Some("d-1") })
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
            (header::REPROCESS_ID, "r1"),
            (header::REPLAY_OF, "webhooks.dlq:0:1"),
            (header::SERVICE, "billing"),
            (header::ORIGIN, "reconciled"),
            (header::retry::ATTEMPTS, "1"),
            (header::dlq::ERROR_CLASS, "poison"),
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
        let control_json =
            br#"{"service":"billing","route":"github","paused":false,"by":"thief","reason":"","at_ms":1}"#;
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
        let mac = headers.iter().find(|h| h.key == header::MAC).unwrap().value.unwrap();
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
        let changed_value = rebuilt(&headers, |key, _| (key == header::EVENT_ID).then(|| b"d-2".to_vec()));
        assert_eq!(verify("webhooks.inbound", Some(b"d-1"), Some(body), &changed_value), bad, "hookline header");
        let changed_other = rebuilt(&headers, |key, _| (key == "http-x-github-event").then(|| b"ping".to_vec()));
        assert_eq!(verify("webhooks.inbound", Some(b"d-1"), Some(body), &changed_other), bad, "forwarded header");
        let added = headers.clone().insert(Header { key: header::ORIGIN, value: Some("reconciled") });
        assert_eq!(verify("webhooks.inbound", Some(b"d-1"), Some(body), &added), bad, "added header");
        // The same MAC claimed for the other key.
        let other_key = rebuilt(&headers, |key, value| {
            (key == header::MAC)
                .then(|| String::from_utf8_lossy(value.unwrap()).replace("v1,k1,", "v1,k2,").into_bytes())
        });
        assert_eq!(verify("webhooks.inbound", Some(b"d-1"), Some(body), &other_key), bad, "key id");
        // Signed with another key of the same id: the key itself is covered.
        let impostor = keys_from(&[("k1", KEY_B, None, None)], None);
        assert_eq!(
            impostor.verify("webhooks.inbound", Some(b"d-1"), Some(body), Some(&headers), NOW),
            bad,
            "key value"
        );
        // Field boundaries: moving a byte from the key into the topic changes the input.
        let a = mac_input("k1", "ab", Some(b"c"), None, Some(&OwnedHeaders::new()));
        let b = mac_input("k1", "a", Some(b"bc"), None, Some(&OwnedHeaders::new()));
        assert_ne!(a, b);
        let header_split = |name: &str, value: &str| {
            mac_input(
                "k1",
                "t",
                None,
                None,
                Some(&OwnedHeaders::new().insert(Header { key: name, value: Some(value) })),
            )
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
        assert_eq!(
            lenient.verify("t", None, Some(body), Some(&headers()), until + 1),
            Verdict::Refused(Refusal::Unsigned)
        );
        // A present but wrong MAC is refused inside the window too.
        let forged = headers().insert(Header { key: header::MAC, value: Some("v1,k1,AAAA") });
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
        assert_eq!(
            unknown.verify("t", None, Some(b"x"), Some(&new), after_switch),
            Verdict::Refused(Refusal::UnknownKey)
        );
    }

    #[test]
    fn signing_a_copy_replaces_its_mac() {
        let keys = keys_from(&[("k1", KEY_A, None, None)], None);
        let first = signed(&keys);
        let copy = keys.sign("webhooks.dlq", Some(b"d-1"), Some(b"{\"a\":1}"), Some(&first), NOW).unwrap();
        assert_eq!(copy.iter().filter(|h| h.key == header::MAC).count(), 1);
        assert!(keys.verify("webhooks.dlq", Some(b"d-1"), Some(b"{\"a\":1}"), Some(&copy), NOW).accepted());
        let doubled = first.clone().insert(Header { key: header::MAC, value: Some("v1,k1,x") });
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
            .insert(Header { key: "hookline-source", value: Some("github") })
            .insert(Header { key: "hookline-event-id", value: Some("d-1") });
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
        let mac = signed.iter().find(|h| h.key == header::MAC).unwrap().value.unwrap();
        assert_eq!(std::str::from_utf8(mac).unwrap(), TEST_VECTOR_MAC);
    }

    /// Computed independently (Python `hmac` over the bytes above).
    const TEST_VECTOR_MAC: &str = "v1,k1,FvwdhwotOo5TGXssxP1vbOOCKyezHb7yiEvwlmhTbVE=";
}

//! The dedupe layout of wire layout 3: short-lived claim keys, and remembered outcomes as fields of small hashes
//! bucketed by time slot (see docs/dedupe.md for the states, their costs and the collision odds).
//!
//! An event of service `s` is named by [`EventHash`]: SHA-256 of `<source> NUL <event id>`. Its first
//! [`FIELD_BYTES`] bytes are the event's field in a bucket; the next four pick its bucket index among
//! [`BUCKETS`]. Every key of one event carries the hash tag `{<service>:<bucket index>}`, so the claim key and
//! every time slot's bucket of the event live on one Redis Cluster slot and one script may touch them all:
//! - claim: `<prefix>:{<service>:<index>}:c:<hex of the field>`, a string holding `claim:<token>` with the lease;
//! - bucket: `<prefix>:{<service>:<index>}:<slot>`, a hash (field: the event's [`FIELD_BYTES`] bytes, value: its
//!   outcome, [`Outcome`]), where `<slot>` is the [`SLOT_S`]-second slot of the write. A bucket lives until its
//!   slot ends plus the longest window written into it, then expires whole.
//!
//! A bucket holds about `events per slot / BUCKETS` fields: below Redis's `hash-max-listpack-entries` (128 by
//! default) it stays in the compact listpack encoding, where a field costs its bytes plus a few.

use sha2::{Digest, Sha256};

use super::redis_key::DEDUPE_DEAD_TYPES;

/// Bytes of the event hash kept as its field: 128 bits (collision odds in docs/dedupe.md).
pub const FIELD_BYTES: usize = 16;
/// Buckets per service and time slot.
pub const BUCKETS: u32 = 16_384;
/// Length of a time slot: a bucket holds the outcomes written during one slot.
pub const SLOT_S: u64 = 6 * 3600;
/// How far apart two hosts' clocks may be: a claim looks into the slots of `[now - window - skew, now + skew]`.
pub const CLOCK_SKEW_S: u64 = 120;
/// The longest window a source may have: the replayer's lookup reads this far back.
pub const MAX_WINDOW_S: u64 = 30 * 24 * 3600;

/// A service's event, hashed: its field and bucket index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventHash {
    pub field: [u8; FIELD_BYTES],
    pub index: u32,
}

impl EventHash {
    pub fn new(source: &str, event_id: &str) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(source.as_bytes());
        hasher.update([0]);
        hasher.update(event_id.as_bytes());
        let digest = hasher.finalize();
        let mut field = [0; FIELD_BYTES];
        field.copy_from_slice(&digest[..FIELD_BYTES]);
        let index_bytes =
            [digest[FIELD_BYTES], digest[FIELD_BYTES + 1], digest[FIELD_BYTES + 2], digest[FIELD_BYTES + 3]];
        Self { field, index: u32::from_be_bytes(index_bytes) % BUCKETS }
    }

    /// `<prefix>:{<service>:<index>}`: the start of every key of this event, its hash tag included.
    fn tagged(&self, prefix: &str, service: &str) -> String {
        format!("{prefix}:{{{service}:{}}}", self.index)
    }

    /// The claim key.
    pub fn claim_key(&self, prefix: &str, service: &str) -> String {
        format!("{}:c:{}", self.tagged(prefix, service), hex::encode(self.field))
    }

    /// The bucket of time slot `slot`.
    pub fn bucket_key(&self, prefix: &str, service: &str, slot: u64) -> String {
        format!("{}:{slot}", self.tagged(prefix, service))
    }

    /// The buckets a claim at `now_s` with a window of `window_s` reads, newest first: the slot of `now` plus
    /// the clock skew (a host ahead of ours may have written there), back to that of `now - window - skew`.
    /// The first is not where this host writes: see [`write_slot`].
    pub fn window_buckets(&self, prefix: &str, service: &str, now_s: u64, window_s: u64) -> Vec<String> {
        window_slots(now_s, window_s).map(|slot| self.bucket_key(prefix, service, slot)).collect()
    }
}

/// The slots of a window, newest first.
pub fn window_slots(now_s: u64, window_s: u64) -> impl Iterator<Item = u64> {
    let newest = (now_s + CLOCK_SKEW_S) / SLOT_S;
    let oldest = now_s.saturating_sub(window_s + CLOCK_SKEW_S) / SLOT_S;
    (oldest..=newest).rev()
}

/// The slot a write at `now_s` goes to.
pub fn write_slot(now_s: u64) -> u64 {
    now_s / SLOT_S
}

/// How long a bucket written at `now_s` must live for a window of `window_s`: to the end of its slot plus the
/// window plus the skew, in ms.
pub fn bucket_ttl_ms(now_s: u64, window_s: u64) -> u64 {
    let slot_end = (write_slot(now_s) + 1) * SLOT_S;
    (slot_end - now_s + window_s + CLOCK_SKEW_S) * 1000
}

/// What a bucket's field says about an event. Written by the consumer's scripts; read by them and by lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `<s>`: processed at `s` (seconds since the epoch): a decimal integer, which a listpack keeps in 5 bytes.
    Processed { at_s: i64 },
    /// `f<s>:<filter>;types=,<hex>,...,`: skipped by the route's filter `filter` at `s`, recording the types of the
    /// copies skipped as a dead marker does ([`super::redis_key::dead_marker_type`]): a copy of an allowlisted type
    /// not among them claims the event over it (finding P8). `None`: written without types (`f<s>:<filter>`),
    /// claimed over by nothing.
    Filtered { at_s: i64, filter: String, types: Option<Vec<String>> },
    /// `d<s>:<dead marker>`: dead-lettered at `s`, the marker as the previous layout wrote it
    /// ([`super::redis_key::dead_marker`]: the DLQ entry and the types recorded).
    Dead { at_s: i64, marker: String },
}

/// The prefix of a filtered outcome.
pub const FILTERED: char = 'f';

/// What follows `f<s>:` in a filtered outcome: `<filter>;types=,<hex>,...,` (`;types=,` when no type is recorded;
/// a filter's name holds no `;`).
pub fn filtered_value(filter: &str, types: &[String]) -> String {
    format!("{filter}{DEDUPE_DEAD_TYPES},{}", types.iter().map(|hex| format!("{hex},")).collect::<String>())
}
/// The prefix of a dead outcome.
pub const DEAD: char = 'd';

impl Outcome {
    pub fn encode(&self) -> String {
        match self {
            Self::Processed { at_s } => at_s.to_string(),
            Self::Filtered { at_s, filter, types: Some(types) } => {
                format!("{FILTERED}{at_s}:{}", filtered_value(filter, types))
            }
            Self::Filtered { at_s, filter, types: None } => format!("{FILTERED}{at_s}:{filter}"),
            Self::Dead { at_s, marker } => format!("{DEAD}{at_s}:{marker}"),
        }
    }

    pub fn decode(value: &str) -> Option<Self> {
        if let Ok(at_s) = value.parse() {
            return Some(Self::Processed { at_s });
        }
        let (at_s, rest) = value.get(1..)?.split_once(':')?;
        let at_s = at_s.parse().ok()?;
        match value.chars().next()? {
            FILTERED => {
                let (filter, types) = match rest.split_once(DEDUPE_DEAD_TYPES) {
                    Some((filter, types)) => {
                        (filter, Some(types.split(',').filter(|hex| !hex.is_empty()).map(str::to_owned).collect()))
                    }
                    None => (rest, None),
                };
                Some(Self::Filtered { at_s, filter: filter.to_owned(), types })
            }
            DEAD => Some(Self::Dead { at_s, marker: rest.to_owned() }),
            _ => None,
        }
    }

    pub fn at_s(&self) -> i64 {
        match self {
            Self::Processed { at_s } | Self::Filtered { at_s, .. } | Self::Dead { at_s, .. } => *at_s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_hash_is_stable_and_names_every_key_with_one_tag() {
        let hash = EventHash::new("github", "e1");
        assert_eq!(hash, EventHash::new("github", "e1"));
        assert_ne!(hash.field, EventHash::new("github", "e2").field);
        assert_ne!(hash.field, EventHash::new("githu", "be1").field, "the separator keeps source and id apart");
        let claim = hash.claim_key("p", "billing");
        let bucket = hash.bucket_key("p", "billing", 7);
        let tag = format!("{{billing:{}}}", hash.index);
        assert!(claim.starts_with(&format!("p:{tag}:c:")) && claim.len() == format!("p:{tag}:c:").len() + 32);
        assert_eq!(bucket, format!("p:{tag}:7"));
    }

    #[test]
    fn a_window_covers_its_slots_with_the_skew_on_both_ends() {
        let now = 100 * SLOT_S + 10;
        let slots: Vec<u64> = window_slots(now, 72 * 3600).collect();
        assert_eq!(slots.first(), Some(&100));
        assert_eq!(slots.last(), Some(&((now - 72 * 3600 - CLOCK_SKEW_S) / SLOT_S)));
        // Near a slot's end, a host ahead of ours may already write into the next slot.
        let late = 101 * SLOT_S - 5;
        assert_eq!(window_slots(late, 2).collect::<Vec<_>>(), vec![101, 100]);
        assert_eq!(bucket_ttl_ms(100 * SLOT_S, 2), (SLOT_S + 2 + CLOCK_SKEW_S) * 1000);
    }

    #[test]
    fn every_outcome_round_trips() {
        for outcome in [
            Outcome::Processed { at_s: 1_767_000_001 },
            Outcome::Filtered { at_s: 5, filter: "test_mode".to_owned(), types: None },
            Outcome::Filtered { at_s: 5, filter: "test_mode".to_owned(), types: Some(Vec::new()) },
            Outcome::Filtered { at_s: 5, filter: "test_mode".to_owned(), types: Some(vec!["70757368".to_owned()]) },
            Outcome::Dead { at_s: 6, marker: "dead:webhooks.dlq:0:7;types=,62,".to_owned() },
        ] {
            assert_eq!(Outcome::decode(&outcome.encode()), Some(outcome));
        }
        let typed = Outcome::Filtered { at_s: 5, filter: "noise".to_owned(), types: Some(vec!["6a".to_owned()]) };
        assert_eq!(typed.encode(), "f5:noise;types=,6a,");
        let untyped = Outcome::Filtered { at_s: 5, filter: "noise".to_owned(), types: Some(Vec::new()) };
        assert_eq!(Outcome::decode("f5:noise;types=,"), Some(untyped));
        assert_eq!(Outcome::decode("x1:y"), None);
        assert_eq!(Outcome::decode(""), None);
    }
}

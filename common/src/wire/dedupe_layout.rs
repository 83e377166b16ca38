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
//! A bucket holds about `events per slot / buckets` fields: below Redis's `hash-max-listpack-entries` (128 by
//! default) it stays in the compact listpack encoding, where a field costs its bytes plus a few. A service's
//! bucket count per slot is [`BUCKETS`] unless its [`BucketSchedule`] raised it from some slot on: then each of the
//! [`BUCKETS`] hash tags holds `buckets / BUCKETS` sub-buckets, `<prefix>:{<service>:<index>}:<slot>:<sub>`, on the
//! same cluster slot as the claim key.

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

/// The most buckets a slot may have (2^24: 1,024 sub-buckets per hash tag), enough for 100,000 events/s at 64
/// per bucket.
pub const MAX_BUCKETS: u32 = 1 << 24;
// Every count's sub-buckets divide 2^16, so `sub_bits` picks among them evenly.
const _: () = assert!((1 << 16) % (MAX_BUCKETS / BUCKETS) == 0);
/// How far ahead a new bucket count takes effect: every consumer re-reads the schedule far more often
/// ([`SCHEDULE_REFRESH_S`]), so none writes or reads a slot with another count than the rest.
pub const SCHEDULE_LEAD_S: u64 = 15 * 60;
/// How often a consumer re-reads its service's schedule.
pub const SCHEDULE_REFRESH_S: u64 = 60;
/// A schedule read longer ago than this is not used: a consumer that cannot re-read it stops claiming (fails
/// closed, as on any Redis error) before a change it might not know of could take effect.
pub const SCHEDULE_STALE_S: u64 = 10 * 60;

/// A service's event, hashed: its field, its bucket index (its hash tag) and the bits that pick its sub-bucket when
/// a slot has more than [`BUCKETS`] buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventHash {
    pub field: [u8; FIELD_BYTES],
    /// Below [`BUCKETS`].
    pub index: u16,
    /// Taken modulo the sub-buckets of a slot: at most [`MAX_BUCKETS`] / [`BUCKETS`], which divides 2^16.
    pub sub_bits: u16,
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
        let index = u32::from_be_bytes(index_bytes) % BUCKETS;
        Self {
            field,
            index: u16::try_from(index).expect("BUCKETS fits in 16 bits"),
            sub_bits: u16::from_be_bytes([digest[20], digest[21]]),
        }
    }

    /// `<prefix>:{<service>:<index>}`: the start of every key of this event, its hash tag included.
    fn tagged(&self, prefix: &str, service: &str) -> String {
        format!("{prefix}:{{{service}:{}}}", self.index)
    }

    /// The claim key.
    pub fn claim_key(&self, prefix: &str, service: &str) -> String {
        format!("{}:c:{}", self.tagged(prefix, service), hex::encode(self.field))
    }

    /// The bucket of time slot `slot` when that slot has `buckets` buckets: `<tag>:<slot>` at [`BUCKETS`] (the
    /// name before schedules existed), `<tag>:<slot>:<sub>` above.
    pub fn bucket_key(&self, prefix: &str, service: &str, slot: u64, buckets: u32) -> String {
        let subs = (buckets / BUCKETS).max(1);
        if subs == 1 {
            format!("{}:{slot}", self.tagged(prefix, service))
        } else {
            format!("{}:{slot}:{}", self.tagged(prefix, service), u32::from(self.sub_bits) % subs)
        }
    }

    /// The bucket a write at `now_s` goes to: that of the span holding the current slot.
    pub fn write_bucket(&self, prefix: &str, service: &str, now_s: u64, schedule: &BucketSchedule) -> String {
        let slot = write_slot(now_s);
        self.bucket_key(prefix, service, schedule.span_of(slot).0, schedule.buckets_at(slot))
    }

    /// The buckets a claim at `now_s` with a window of `window_s` reads, newest first: those of the spans holding
    /// the slot of `now` plus the clock skew (a host ahead of ours may have written there) back to that of
    /// `now - window - skew`, each with its slot's bucket count. The first is not where this host writes: see
    /// [`write_slot`].
    pub fn window_buckets(
        &self,
        prefix: &str,
        service: &str,
        now_s: u64,
        window_s: u64,
        schedule: &BucketSchedule,
    ) -> Vec<String> {
        let mut buckets: Vec<String> = Vec::new();
        let mut last_span = None;
        for slot in window_slots(now_s, window_s) {
            let (start, _) = schedule.span_of(slot);
            if last_span != Some(start) {
                buckets.push(self.bucket_key(prefix, service, start, schedule.buckets_at(slot)));
                last_span = Some(start);
            }
        }
        buckets
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

/// How long a bucket written at `now_s` must live for a window of `window_s`: to the end of its span plus the
/// window plus the skew, in ms.
pub fn bucket_ttl_ms(now_s: u64, window_s: u64, schedule: &BucketSchedule) -> u64 {
    let span_end = schedule.span_of(write_slot(now_s)).1 * SLOT_S;
    (span_end - now_s + window_s + CLOCK_SKEW_S) * 1000
}

/// The most slots one bucket may span (3 days).
pub const MAX_SPAN: u64 = 12;

/// How many buckets each of a service's slots has, and how many slots one bucket spans: [`BUCKETS`] and one, then
/// each change from its slot on. A bucket spanning `k` slots holds the outcomes written during `k` consecutive slots
/// (counted from its change's slot) and is named by the first: a claim then reads about `window / (k × 6 h) + 1`
/// buckets instead of one per slot (Redis CPU), and an outcome stays up to `k` slots past its window (Redis bytes).
/// Kept in Redis (`<prefix>:svc=<service>:buckets`, [`super::redis_key::dedupe_buckets`]) as
/// `<buckets>[x<span>]@<slot>,...`, changed only by an operator (`hookline-consumer dedupe-buckets`), read by every
/// consumer of the service and by lookup. A slot's count and span never change once the slot may have been written:
/// a change takes effect from the first slot that starts at least [`SCHEDULE_LEAD_S`] later, and a span the change
/// cuts short ends there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BucketSchedule {
    /// Ascending by slot.
    changes: Vec<BucketChange>,
}

/// From slot `from_slot` on, `buckets` buckets per span of `span` slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketChange {
    pub from_slot: u64,
    pub buckets: u32,
    pub span: u64,
}

/// A schedule or a change that cannot be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("a bucket count must be a power of two from {BUCKETS} to {MAX_BUCKETS}, not {0}")]
    Count(u64),
    #[error("a bucket spans 1 to {MAX_SPAN} slots, not {0}")]
    Span(u64),
    #[error("the bucket schedule {0:?} is not `<buckets>[x<span>]@<slot>,...` in ascending slots")]
    Unreadable(String),
    #[error("slots from {from_slot} on already have {buckets} buckets spanning {span} slots")]
    Unchanged { from_slot: u64, buckets: u32, span: u64 },
}

impl BucketSchedule {
    /// The bucket count of `slot`.
    pub fn buckets_at(&self, slot: u64) -> u32 {
        self.change_at(slot).map_or(BUCKETS, |change| change.buckets)
    }

    /// The change in force at `slot`, if any.
    fn change_at(&self, slot: u64) -> Option<&BucketChange> {
        self.changes.iter().rev().find(|change| change.from_slot <= slot)
    }

    /// The slots `[start, end)` whose outcomes share a bucket with `slot`'s, named by `start`.
    pub fn span_of(&self, slot: u64) -> (u64, u64) {
        let Some(change) = self.change_at(slot) else { return (slot, slot + 1) };
        let start = change.from_slot + (slot - change.from_slot) / change.span * change.span;
        let next_change = self.changes.iter().find(|later| later.from_slot > slot).map_or(u64::MAX, |c| c.from_slot);
        (start, (start + change.span).min(next_change))
    }

    /// The changes, oldest first.
    pub fn changes(&self) -> &[BucketChange] {
        &self.changes
    }

    /// Checks a bucket count.
    pub fn valid_count(buckets: u64) -> Result<u32, ScheduleError> {
        let count = u32::try_from(buckets).map_err(|_| ScheduleError::Count(buckets))?;
        if !count.is_power_of_two() || !(BUCKETS..=MAX_BUCKETS).contains(&count) {
            return Err(ScheduleError::Count(buckets));
        }
        Ok(count)
    }

    /// The schedule with `buckets` per span of `span` slots from the first slot that starts at least
    /// [`SCHEDULE_LEAD_S`] after `now_s` (and after every change already scheduled), and that change. `None`:
    /// the span in force then.
    pub fn changed(&self, now_s: u64, buckets: u64, span: Option<u64>) -> Result<(Self, BucketChange), ScheduleError> {
        let buckets = Self::valid_count(buckets)?;
        let earliest = (now_s + SCHEDULE_LEAD_S).div_ceil(SLOT_S);
        let from_slot = self.changes.last().map_or(earliest, |last| earliest.max(last.from_slot + 1));
        let current_span = self.change_at(from_slot).map_or(1, |change| change.span);
        let span = span.unwrap_or(current_span);
        if !(1..=MAX_SPAN).contains(&span) {
            return Err(ScheduleError::Span(span));
        }
        if self.buckets_at(from_slot) == buckets && current_span == span {
            return Err(ScheduleError::Unchanged { from_slot, buckets, span });
        }
        let change = BucketChange { from_slot, buckets, span };
        let mut changes = self.changes.clone();
        changes.push(change);
        Ok((Self { changes }, change))
    }

    /// `<buckets>@<slot>,...`; empty for the default.
    pub fn encode(&self) -> String {
        self.changes
            .iter()
            .map(|change| match change.span {
                1 => format!("{}@{}", change.buckets, change.from_slot),
                span => format!("{}x{span}@{}", change.buckets, change.from_slot),
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn decode(value: &str) -> Result<Self, ScheduleError> {
        let unreadable = || ScheduleError::Unreadable(value.to_owned());
        let mut changes: Vec<BucketChange> = Vec::new();
        for entry in value.split(',').filter(|entry| !entry.is_empty()) {
            let (count, slot) = entry.split_once('@').ok_or_else(unreadable)?;
            let (buckets, span) = count.split_once('x').unwrap_or((count, "1"));
            let buckets = Self::valid_count(buckets.parse().map_err(|_| unreadable())?)?;
            let span = span.parse().map_err(|_| unreadable())?;
            if !(1..=MAX_SPAN).contains(&span) {
                return Err(ScheduleError::Span(span));
            }
            let from_slot = slot.parse().map_err(|_| unreadable())?;
            if changes.last().is_some_and(|last| last.from_slot >= from_slot) {
                return Err(unreadable());
            }
            changes.push(BucketChange { from_slot, buckets, span });
        }
        Ok(Self { changes })
    }
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
        let bucket = hash.bucket_key("p", "billing", 7, BUCKETS);
        let tag = format!("{{billing:{}}}", hash.index);
        assert!(claim.starts_with(&format!("p:{tag}:c:")) && claim.len() == format!("p:{tag}:c:").len() + 32);
        assert_eq!(bucket, format!("p:{tag}:7"));
        // More buckets: sub-buckets under the same tag (the same cluster slot as the claim key).
        assert_eq!(hash.bucket_key("p", "billing", 7, 4 * BUCKETS), format!("p:{tag}:7:{}", hash.sub_bits % 4));
    }

    #[test]
    fn sub_buckets_spread_events_evenly() {
        let mut counts = [0u32; 8];
        for n in 0..8_000 {
            counts[usize::from(EventHash::new("s", &n.to_string()).sub_bits % 8)] += 1;
        }
        assert!(counts.iter().all(|count| (800..1_200).contains(count)), "{counts:?}");
    }

    #[test]
    fn a_schedule_changes_only_slots_that_start_after_its_lead() {
        let default = BucketSchedule::default();
        assert_eq!(default.buckets_at(0), BUCKETS);
        assert_eq!(default.encode(), "");
        // Just before a slot boundary: the next slot starts within the lead, so the change waits one more.
        let now = 10 * SLOT_S - 60;
        let (schedule, change) = default.changed(now, 65_536, Some(1)).expect("a valid change");
        assert_eq!(change, BucketChange { from_slot: 11, buckets: 65_536, span: 1 });
        assert_eq!(
            (schedule.buckets_at(10), schedule.buckets_at(11), schedule.buckets_at(99)),
            (BUCKETS, 65_536, 65_536)
        );
        // Well before a boundary: the next slot.
        assert_eq!(default.changed(10 * SLOT_S, 65_536, Some(1)).expect("valid").1.from_slot, 11);
        // A second change goes after the first, even if asked for earlier.
        let (twice, second) = schedule.changed(now, 32_768, Some(1)).expect("valid");
        assert_eq!(second.from_slot, 12);
        assert_eq!(BucketSchedule::decode(&twice.encode()), Ok(twice.clone()));
        assert_eq!(twice.encode(), "65536@11,32768@12");
        assert_eq!(
            schedule.changed(now, 65_536, Some(1)),
            Err(ScheduleError::Unchanged { from_slot: 12, buckets: 65_536, span: 1 })
        );
        for wrong in [0, 100, 8_192, 24_576, u64::from(MAX_BUCKETS) * 2] {
            assert_eq!(default.changed(now, wrong, Some(1)), Err(ScheduleError::Count(wrong)));
        }
        assert_eq!(default.changed(now, 65_536, Some(13)), Err(ScheduleError::Span(13)));
        assert_eq!(default.changed(now, 65_536, Some(0)), Err(ScheduleError::Span(0)));
        for unreadable in ["65536", "65536@x", "65536@5,32768@5", "3@1", "65536x0@5", "65536xq@5"] {
            assert!(BucketSchedule::decode(unreadable).is_err(), "{unreadable}");
        }
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
        assert_eq!(bucket_ttl_ms(100 * SLOT_S, 2, &BucketSchedule::default()), (SLOT_S + 2 + CLOCK_SKEW_S) * 1000);
    }

    #[test]
    fn a_span_shares_one_bucket_among_its_slots_and_a_change_cuts_it_short() {
        // Spans of 4 slots (a day) from slot 10, then one slot from 21: 10-13, 14-17, 18-20 (cut), 21, 22...
        let schedule = BucketSchedule::decode("65536x4@10,32768@21").expect("readable");
        assert_eq!(schedule.encode(), "65536x4@10,32768@21");
        assert_eq!(schedule.span_of(9), (9, 10));
        assert_eq!(schedule.span_of(10), (10, 14));
        assert_eq!(schedule.span_of(13), (10, 14));
        assert_eq!(schedule.span_of(17), (14, 18));
        assert_eq!(schedule.span_of(19), (18, 21));
        assert_eq!(schedule.span_of(21), (21, 22));
        // A 72 h window read at the end of slot 17 covers slots 5-18 (with the skew): buckets 18, 14, 10, then
        // one per slot before the change (9 down to 5).
        let hash = EventHash::new("s", "e");
        let now = 18 * SLOT_S - 30;
        let read = hash.window_buckets("p", "b", now, 72 * 3600, &schedule);
        let expected: Vec<String> = [(18, 65_536), (14, 65_536), (10, 65_536), (9, BUCKETS), (8, BUCKETS)]
            .into_iter()
            .chain((5..8).rev().map(|slot| (slot, BUCKETS)))
            .map(|(slot, buckets)| hash.bucket_key("p", "b", slot, buckets))
            .collect();
        assert_eq!(read, expected);
        assert_eq!(hash.write_bucket("p", "b", 16 * SLOT_S + 5, &schedule), hash.bucket_key("p", "b", 14, 65_536));
        // A bucket lives to its span's end plus the window; the span cut short by the change ends there.
        assert_eq!(bucket_ttl_ms(16 * SLOT_S, 60, &schedule), (2 * SLOT_S + 60 + CLOCK_SKEW_S) * 1000);
        assert_eq!(bucket_ttl_ms(20 * SLOT_S, 60, &schedule), (SLOT_S + 60 + CLOCK_SKEW_S) * 1000);
        // 72 h at spans of a day: 4 or 5 buckets a claim, where one per slot is 13 or 14.
        let daily = BucketSchedule::decode("65536x4@0").expect("readable");
        for now in [100 * SLOT_S + 1, 101 * SLOT_S + 7, 103 * SLOT_S - 1] {
            let n = hash.window_buckets("p", "b", now, 72 * 3600, &daily).len();
            assert!((4..=5).contains(&n), "{n} at {now}");
        }
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

//! The replayer's index of dead-letter entries and their fate: headers and metadata, never bodies. It is built
//! once by reading the DLQ and status topics from their start, then advanced by tailing both (the service), or
//! built once to the topics' high watermarks and dropped (the CLI). Kafka stays the only store: a restarted
//! replayer, or a second one, builds the same index.
//!
//! Entries are kept per DLQ partition in offset order (tailing appends in that order), so the stable listing
//! order is (partition, offset) and a cursor is the last position a page returned. Strings that repeat across
//! entries (source, service, event type, error class, error message, who, notes) are interned once; an entry holds
//! their numbers. Bodies and full headers are fetched from Kafka by partition and offset when one entry is shown or
//! re-driven ([`crate::fetch`]).
//!
//! Every DLQ record's MAC is checked as it is indexed: one that does not verify (a writer without the record key)
//! becomes a minimal `unverified` entry holding none of its strings, and every string kept is cut to 2 KiB.
//!
//! `build` holds the compact state and applies records to it, `status` checks the status records' MACs before
//! any is applied and bounds those waiting for their entry, `query` answers from it (filters, pages, counts),
//! `tail` reads the two topics into it.

mod build;
mod compact;
#[cfg(test)]
mod index_tests;
mod query;
mod spill;
mod status;
mod store;
mod tail;

use std::{
    collections::BTreeMap,
    sync::{
        RwLock,
        atomic::{AtomicBool, Ordering},
    },
};

use hookline_common::{
    record_auth::RecordKeys,
    wire::{DeadLetterEntry, EntryStatusRecord},
};
use serde::Serialize;

use self::build::State;
pub use self::{
    build::{Budget, EntryCounts},
    query::Query,
    status::{Dropped, MAX_EARLY_STATUSES, StatusCounts},
    tail::{reader, reader_config, tail},
};

/// A failure of the index's own storage: the file it moves entries to past its memory budget.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("the dead-letter index's spill file")]
    Spill(#[from] std::io::Error),
}

/// Where an entry lives in the DLQ topic: its id is `<dlq topic>:<partition>:<offset>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    pub partition: i32,
    pub offset: i64,
}

impl Position {
    /// The position an entry id names, when it names one of `dlq_topic`'s.
    pub fn parse(dlq_topic: &str, id: &str) -> Option<Self> {
        let rest = id.strip_prefix(dlq_topic)?.strip_prefix(':')?;
        let (partition, offset) = rest.split_once(':')?;
        Some(Self { partition: partition.parse().ok()?, offset: offset.parse().ok()? })
    }

    pub fn id(self, dlq_topic: &str) -> String {
        DeadLetterEntry::entry_id(dlq_topic, self.partition, self.offset)
    }
}

/// An entry's status as the operator sees it: the latest status record's, or `new`; and `replay_overdue` for a
/// `replayed` entry whose outcome has not arrived within `replay_outcome_timeout_s` (so `replay --all` takes it
/// again: a re-drive lost with its `replay_failed` record must not leave the entry `replayed` forever).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    New,
    Replayed,
    ReplayOverdue,
    ReplayFailed,
    Succeeded,
    FailedAgain,
    Discarded,
    /// The DLQ record's MAC did not verify: a writer without the record key wrote it. The index holds nothing it
    /// claims (`show` reads the record itself); never untriaged, never taken by `replay --all` alone.
    Unverified,
}

impl Status {
    pub const ALL: [Status; 8] = [
        Self::New,
        Self::Replayed,
        Self::ReplayOverdue,
        Self::ReplayFailed,
        Self::Succeeded,
        Self::FailedAgain,
        Self::Discarded,
        Self::Unverified,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::New => "new",
            Self::Replayed => "replayed",
            Self::ReplayOverdue => "replay_overdue",
            Self::ReplayFailed => "replay_failed",
            Self::Succeeded => "succeeded",
            Self::FailedAgain => "failed_again",
            Self::Discarded => "discarded",
            Self::Unverified => "unverified",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == text)
    }

    /// Nobody has dealt with the entry yet: `replay --all` without a status takes these, and the oldest one's
    /// age is the `hookline_dlq_oldest_untriaged_age_seconds` gauge.
    pub fn is_untriaged(self) -> bool {
        matches!(self, Self::New | Self::ReplayFailed | Self::ReplayOverdue)
    }
}

/// One entry with its fate, as listed and shown.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    #[serde(flatten)]
    pub entry: DeadLetterEntry,
    pub status: Status,
    /// The latest status record, if any.
    pub last_status: Option<EntryStatusRecord>,
    /// How many times this entry has been re-driven.
    pub replays: u32,
    /// The entry this one came from, when its event was a replay that failed again.
    pub replay_of: Option<String>,
    /// How many times this event has failed again after replays (0 for a first failure).
    pub failed_again: u32,
    /// `failed_again` reached `max_failed_again`: replaying needs `force`.
    pub flagged: bool,
}

impl Entry {
    pub fn position(&self) -> Position {
        Position { partition: self.entry.partition, offset: self.entry.offset }
    }
}

/// A parsed filter, independent of any index (see [`crate::filter`]).
#[derive(Debug, Clone, Default)]
pub struct Criteria {
    pub source: Option<String>,
    pub service: Option<String>,
    pub event_type: Option<String>,
    pub error_class: Option<String>,
    pub status: Option<Status>,
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
    pub text: Option<String>,
}

/// One page of a listing.
#[derive(Debug, Clone, Serialize)]
pub struct Page {
    pub entries: Vec<Entry>,
    /// Pass it back as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
    /// How many entries match the filter in all.
    pub total_matching: usize,
}

/// Counts by source, service, error class and status.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    pub total: usize,
    pub by_source: BTreeMap<String, usize>,
    pub by_service: BTreeMap<String, usize>,
    pub by_error_class: BTreeMap<String, usize>,
    pub by_status: BTreeMap<String, usize>,
}

/// Per source and service: how many entries nobody has dealt with, and when the oldest of them became a dead letter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Untriaged {
    pub count: usize,
    pub oldest_at_ms: i64,
}

/// What the gauges show: entries per (status, source, service, error class), and the untriaged ones per
/// (source, service).
#[derive(Debug, Clone, Default)]
pub struct Gauges {
    pub counts: Vec<((Status, String, String, String), usize)>,
    pub untriaged: BTreeMap<(String, String), Untriaged>,
    /// Per (source, service): the unresolved dead letters by reference (not succeeded, discarded or superseded),
    /// whose bodies expire with the original topic's retention, and when the oldest one's event first failed (its
    /// original record is at least that old).
    pub by_reference: BTreeMap<(String, String), Untriaged>,
}

/// The index, shared between the tail that advances it and the readers.
#[derive(Debug)]
pub struct Index {
    dlq_topic: String,
    max_failed_again: u32,
    replay_outcome_timeout_ms: i64,
    state: RwLock<State>,
    caught_up: AtomicBool,
    /// Checks every status record before it is applied ([`status`]).
    record_keys: RecordKeys,
    status_counts: StatusCounts,
    /// The DLQ records' MAC outcomes.
    entry_counts: EntryCounts,
}

impl Index {
    pub fn new(
        dlq_topic: &str,
        max_failed_again: u32,
        replay_outcome_timeout_s: u64,
        record_keys: RecordKeys,
        budget: Budget,
    ) -> Self {
        Self {
            dlq_topic: dlq_topic.to_owned(),
            max_failed_again,
            replay_outcome_timeout_ms: i64::try_from(replay_outcome_timeout_s.saturating_mul(1000)).unwrap_or(i64::MAX),
            state: RwLock::new(State::new(budget)),
            caught_up: AtomicBool::new(false),
            record_keys,
            status_counts: StatusCounts::default(),
            entry_counts: EntryCounts::default(),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn dlq_topic(&self) -> &str {
        &self.dlq_topic
    }

    /// Whether the index has read both topics up to where they were when it started.
    pub fn is_caught_up(&self) -> bool {
        self.caught_up.load(Ordering::Acquire)
    }

    pub fn len(&self) -> usize {
        self.read().n_entries
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the status topic's partition has been applied past `offset` (a write is visible).
    pub fn has_status_offset(&self, partition: i32, offset: i64) -> bool {
        self.read().status_next.get(&partition).is_some_and(|next| *next > offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_name_positions_of_their_own_topic_only() {
        assert_eq!(Position::parse("webhooks.dlq", "webhooks.dlq:2:17"), Some(Position { partition: 2, offset: 17 }));
        assert_eq!(Position::parse("webhooks.dlq", "webhooks.dlq-status:2:17"), None);
        assert_eq!(Position::parse("webhooks.dlq", "webhooks.dlq:2"), None);
        assert_eq!(Position { partition: 2, offset: 17 }.id("webhooks.dlq"), "webhooks.dlq:2:17");
    }
}

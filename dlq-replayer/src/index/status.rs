//! Status records are believed only when hookline wrote them. Every record of the status topic is checked with
//! the record key, as the consumer checks inbound records: whoever may write the topic (every consumer service,
//! by the ACL table of docs/security.md) but does not hold the key cannot mark another service's dead letter
//! `succeeded` or `discarded`, which would take it out of `replay --all` and of the untriaged alert. A record that
//! fails is counted (`hookline_replayer_record_auth_total{outcome}`), logged (rate-limited) and never applied. An
//! unsigned status is refused even inside `kafka.record_auth.accept_unsigned_until` (that window is for inbound
//! records from before the upgrade), and one signed with the gateway's inbound-only key is refused whatever its
//! headers ([`RecordKind::Status`]).
//!
//! Statuses that wait for an entry the DLQ tail has not read yet are bounded too: one for a position the tail has
//! passed is dropped (no entry can appear behind it), and at most [`MAX_EARLY_STATUSES`] wait at once.

use std::{
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use hookline_common::{
    record_auth::{RecordKind, Refusal, Verdict, outcome},
    wire::{EntryStatusRecord, REPROCESS_STATUS_KEY_PREFIX, now_ms},
};
use rdkafka::{Message, message::BorrowedMessage};

use super::{Index, Position};

/// How many status records may wait for their entry at once. The status topic is compacted to one record per
/// entry and both topics are read from their start, so during a build the statuses of the entries the DLQ tail
/// has not reached yet wait here: about 80 bytes each, so this bound is about 20 MiB. Past it a status is
/// dropped and counted (`dropped_status_records{reason="too_many_early"}`), and its entry shows `new`: seen
/// again, never hidden.
pub const MAX_EARLY_STATUSES: usize = 262_144;

/// How often at most a refused or dropped status record is logged (with the count since the last line).
const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Why a checked status record was not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// Its position is behind the DLQ tail and holds no entry: it never will.
    NoSuchEntry,
    /// [`MAX_EARLY_STATUSES`] statuses already wait for their entries.
    TooManyEarly,
}

impl Dropped {
    pub const ALL: [Dropped; 2] = [Self::NoSuchEntry, Self::TooManyEarly];

    /// The `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoSuchEntry => "no_such_entry",
            Self::TooManyEarly => "too_many_early",
        }
    }
}

/// What the status tail has refused and dropped so far: the metrics mirror these (the index lives apart from
/// the metrics registry, and the CLI has none).
#[derive(Debug, Default)]
pub struct StatusCounts {
    /// Per value of [`outcome::ALL`], in that order.
    auth: [AtomicU64; outcome::ALL.len()],
    /// Per value of [`Dropped::ALL`], in that order.
    dropped: [AtomicU64; 2],
    /// When a refusal was last logged, and how many happened since.
    last_log: Mutex<(Option<Instant>, u64)>,
}

impl StatusCounts {
    fn count_auth(&self, verdict: &Verdict) {
        let label = verdict.label();
        if let Some(at) = outcome::ALL.iter().position(|known| *known == label) {
            self.auth[at].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(super) fn count_dropped(&self, dropped: Dropped) {
        let at = Dropped::ALL.iter().position(|known| *known == dropped).unwrap_or(0);
        self.dropped[at].fetch_add(1, Ordering::Relaxed);
    }

    /// `(outcome, count)` for every outcome of the MAC check of status records.
    pub fn auth(&self) -> Vec<(&'static str, u64)> {
        outcome::ALL.iter().zip(&self.auth).map(|(label, count)| (*label, count.load(Ordering::Relaxed))).collect()
    }

    /// `(reason, count)` for every reason a checked status record was dropped.
    pub fn dropped(&self) -> Vec<(&'static str, u64)> {
        Dropped::ALL
            .iter()
            .zip(&self.dropped)
            .map(|(why, count)| (why.as_str(), count.load(Ordering::Relaxed)))
            .collect()
    }

    /// Logs a refused status record, at most once per [`LOG_INTERVAL`] (a writer of the topic must not be able to
    /// flood the log), with how many were refused since the last line.
    fn log_refused(&self, entry_id: &str, refusal: &'static str) {
        let mut last = self.last_log.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        last.1 += 1;
        if last.0.is_some_and(|at| at.elapsed() < LOG_INTERVAL) {
            return;
        }
        tracing::warn!(
            entry_id,
            refusal,
            refused_since_last_line = last.1,
            "a status record hookline did not write was ignored (someone who may write the status topic but holds \
             no record key)"
        );
        *last = (Some(Instant::now()), 0);
    }
}

impl Index {
    /// The status tail's counts: MAC outcomes and dropped records.
    pub fn status_counts(&self) -> &StatusCounts {
        &self.status_counts
    }

    /// Checks one record of the status topic and decodes it when hookline wrote it and it is a DLQ entry's: its
    /// entry's position and the status, for the index to apply.
    pub(super) fn checked_status(&self, message: &BorrowedMessage<'_>) -> Option<(Position, EntryStatusRecord)> {
        let (Some(key), Some(value)) = (message.key(), message.payload()) else { return None };
        let key = String::from_utf8_lossy(key);
        // A re-processing request and its fates (`reprocess:...`) are kept in the same topic but are no DLQ entry:
        // never an entry, never an early status waiting for one.
        if key.starts_with(REPROCESS_STATUS_KEY_PREFIX) {
            return None;
        }
        let position = Position::parse(&self.dlq_topic, &key)?;
        let verdict = self.record_keys.verify_as(
            RecordKind::Status,
            message.topic(),
            message.key(),
            message.payload(),
            message.headers(),
            now_ms(),
        );
        // Never believed unsigned, whatever `accept_unsigned_until` says for inbound records: a status hides or
        // settles a dead letter, and every writer of statuses has signed them since record keys exist. A status
        // from before then is ignored: its entry shows `new`, seen again rather than hidden.
        let verdict = match verdict {
            Verdict::UnsignedAccepted => Verdict::Refused(Refusal::Unsigned),
            verdict => verdict,
        };
        self.status_counts.count_auth(&verdict);
        if let Verdict::Refused(refusal) = verdict {
            self.status_counts.log_refused(&key, refusal.as_str());
            return None;
        }
        match EntryStatusRecord::decode(value) {
            Ok(record) => Some((position, record)),
            Err(error) => {
                tracing::warn!(entry_id = %key, error = %error, "unreadable status record skipped");
                None
            }
        }
    }
}

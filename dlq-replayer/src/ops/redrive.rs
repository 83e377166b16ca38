//! Re-driving one DLQ record to the topic its event came from, and what is believed from that record.
//!
//! A DLQ record whose MAC verifies was written by a hookline consumer: its original topic and its headers are
//! hookline's, and are copied (minus the DLQ's own). A record without a valid MAC (or unsigned inside
//! `accept_unsigned_until`) is re-driven only when an operator forces it, and then nothing it says about routing
//! is believed: it goes to the configured inbound topic only, and carries only the core metadata of an inbound
//! record ([`VOUCHED_HEADERS`]) and the forwarded request headers. Whatever could make a consumer re-run an event
//! already processed, choose a service, an ordering or an origin is left out, since the replayer's signature would
//! turn those claims into hookline's. Those rules are the `record` crate's ([`Redrive`]): the replayer names no
//! header.

use hookline_common::{
    record_auth::Verdict,
    telemetry::traces::{self, Parent},
    wire::{EntryStatus, EntryStatusRecord, FetchedRecord, now_ms},
};
use hookline_record::redrive::Redrive;
pub use hookline_record::redrive::{Provenance, VOUCHED_HEADERS};

use super::{OpError, Replayer, action_span, by_or_default};
use crate::index::{Entry, Index};

/// How long before the end of an entry's dedupe retention a re-drive is refused already: a dedupe row is written
/// in the transaction of an attempt that began before the first failure was noted (by up to the handler's
/// timeout), and the retention job runs on an interval.
const RETENTION_MARGIN_MS: i64 = 60 * 60 * 1000;

/// The dedupe retention assumed for an entry whose record does not carry its own: the `postgres` handler's
/// default `retention_days`, the longest a service keeps its rows unless its config says otherwise.
pub const DEFAULT_RETENTION_DAYS: i64 = 30;

/// Why the entry may no longer be re-driven safely, if so: its service's `postgres` handler keeps dedupe rows
/// `carried_days` days (what its DLQ record says: [`hookline_common::wire::DeadLetterEntry::dedupe_retention_days`]), and an event dead-lettered after a COMMIT whose answer was lost
/// (`retryable_exhausted` after a timeout or a lost connection) has its effect in the database; once retention
/// has deleted its row, a re-drive would apply it a second time. `past_retention` re-drives it anyway, once the
/// operator has checked the database.
///
/// A record without the header (dead-lettered before the build that writes it, or by a service whose retention
/// is not in its config file, such as an application's own transactional handler) is held to
/// [`DEFAULT_RETENTION_DAYS`]: nothing says its rows are kept longer, so past that it needs `past_retention` too.
pub fn past_retention(entry: &Entry, carried_days: Option<i64>, now_ms: i64) -> Option<String> {
    let carried = carried_days;
    let days = carried.unwrap_or(DEFAULT_RETENTION_DAYS);
    let failed_at = entry.entry.first_failure_at_ms.or(entry.entry.last_failure_at_ms)?;
    let kept_until = failed_at.saturating_add(days.saturating_mul(86_400_000)).saturating_sub(RETENTION_MARGIN_MS);
    (now_ms > kept_until).then(|| match carried {
        Some(days) => format!(
            "older than its service's dedupe retention ({days} days): its effect may have been applied already and \
             the row that would make this re-drive a duplicate is deleted; check the database, then replay with \
             past_retention (--past-retention)"
        ),
        None => format!(
            "older than {days} days (the default dedupe retention) and its record does not say its service's \
             retention (dead-lettered before the build that records it, or by a service whose retention is not in \
             its config): its effect may have been applied already and the row that would make this re-drive a \
             duplicate may be deleted; check the database, then replay with past_retention (--past-retention)"
        ),
    })
}

/// How much of a DLQ record whose MAC was checked (`verdict`) is believed.
pub fn provenance_of(verdict: &Verdict) -> Provenance {
    if matches!(verdict, Verdict::Authentic { .. }) { Provenance::Verified } else { Provenance::Vouched }
}

/// Why an entry cannot be re-driven to the topic its record names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedriveTopicError {
    #[error(
        "its original topic `{named}` comes from a record without a valid MAC: a forced re-drive goes to the inbound \
         topic `{inbound}` only"
    )]
    NotVouchedFor { named: String, inbound: String },
    #[error("its original topic `{0}` is not an inbound topic")]
    NotInbound(String),
}

impl Replayer {
    /// Where `entry` is re-driven, or why it cannot be: never a topic of the DLQ, its statuses or a retry topic
    /// (a re-drive is an inbound record), and for a [`Provenance::Vouched`] record only the inbound topic.
    pub(super) fn redrive_topic<'a>(
        &'a self,
        entry: &'a Entry,
        provenance: Provenance,
    ) -> Result<&'a str, RedriveTopicError> {
        let kafka = &self.config.kafka;
        let named = entry.entry.original_topic.as_deref().unwrap_or(&kafka.inbound_topic);
        if provenance == Provenance::Vouched && named != kafka.inbound_topic {
            return Err(RedriveTopicError::NotVouchedFor {
                named: named.to_owned(),
                inbound: kafka.inbound_topic.clone(),
            });
        }
        if named == kafka.dlq_topic || named == kafka.dlq_status_topic || named.starts_with(&kafka.retry_topic) {
            return Err(RedriveTopicError::NotInbound(named.to_owned()));
        }
        Ok(named)
    }

    /// Re-drives `record`, the entry's DLQ record (already checked by the caller), to `topic`. The producer signs
    /// the copy.
    ///
    /// With traces on, a `replay` span in a NEW trace, linked to the context the DLQ record carries (the trace the
    /// event failed in); the re-driven record carries the replay's context, so its processing continues the new
    /// trace.
    pub(super) async fn redrive(
        &self,
        index: &Index,
        entry: &Entry,
        record: &FetchedRecord,
        target: Target<'_>,
    ) -> Result<Vec<(i32, i64)>, OpError> {
        if !traces::enabled() {
            return self.redrive_record(index, entry, record, target).await;
        }
        let original = traces::record_context(record.headers());
        let parent = match &original {
            Some(span_context) => Parent::LinkedTo(span_context),
            None => Parent::Root,
        };
        let span = action_span("replay", parent, entry);
        let redriven = span.scope(self.redrive_record(index, entry, record, target)).await;
        if let Err(error) = &redriven {
            span.fail("replay_failed", || error.to_string());
        }
        redriven
    }

    async fn redrive_record(
        &self,
        index: &Index,
        entry: &Entry,
        record: &FetchedRecord,
        target: Target<'_>,
    ) -> Result<Vec<(i32, i64)>, OpError> {
        let id = &entry.entry.id;
        let replays = entry.replays + 1;
        let redrive = Redrive {
            entry_id: id,
            replays,
            service: entry.entry.service.as_deref(),
            // A fan-out service's dead letter names its destination: the replay reaches it alone.
            destination: target.destination,
            provenance: target.provenance,
            event_type: target.event_type,
        };
        if let Some(event_type) = target.event_type {
            tracing::warn!(entry_id = %id, event_type, by = target.by, "re-driven with an event type the operator chose");
        }
        let topic = target.topic;
        let out = redrive.encode(topic, record.original());
        // The status first: the consumer records the outcome as soon as it has processed the re-driven event, and
        // in a compacted topic the outcome must be the later record. If this process dies between the two, or the
        // `replay_failed` record below is lost too, the entry turns `replay_overdue` after
        // `replay_outcome_timeout_s` and `replay --all` takes it again.
        let status = |status, note| EntryStatusRecord {
            status,
            at_ms: now_ms(),
            by: by_or_default(target.by),
            event_id: entry.entry.event_id.clone(),
            new_entry: None,
            note,
            replays: Some(replays),
        };
        let mut written =
            vec![self.record_status(index, entry.position(), &status(EntryStatus::Replayed, None)).await?];
        if let Err(error) = self.send(out).await {
            let note = Some(format!("re-drive not produced: {error}"));
            if let Ok(at) = self.record_status(index, entry.position(), &status(EntryStatus::ReplayFailed, note)).await
            {
                written.push(at);
            }
            return Err(error);
        }
        tracing::info!(entry_id = %id, topic, replays, service = entry.entry.service.as_deref(), "entry replayed");
        Ok(written)
    }
}

/// Where and how one entry is re-driven, decided by the caller from the record's MAC.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub topic: &'a str,
    pub provenance: Provenance,
    /// The operator's event type, replacing the record's.
    pub event_type: Option<&'a str>,
    /// The destination of a fan-out service its DLQ record names (not kept in the index: read from the record),
    /// which the replay reaches alone.
    pub destination: Option<&'a str>,
    /// Who asked (recorded in the status topic).
    pub by: &'a str,
}

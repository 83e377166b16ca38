//! Re-driving one DLQ record to the topic its event came from, and what is believed from that record.
//!
//! A DLQ record whose MAC verifies was written by a hookline consumer: its original topic and its headers are
//! hookline's, and are copied (minus the DLQ's own). A record without a valid MAC (or unsigned inside
//! `accept_unsigned_until`) is re-driven only when an operator forces it, and then nothing it says about routing
//! is believed: it goes to the configured inbound topic only, and carries only the core metadata of an inbound
//! record ([`VOUCHED_HEADERS`]) and the forwarded request headers. Whatever could make a consumer re-run an event
//! already processed (`hookline-reprocess-*`), choose a service, an ordering or an origin is left out, since the
//! replayer's signature would turn those claims into hookline's.

use hookline_common::{
    record_auth::Verdict,
    telemetry::traces::{self, Parent},
    wire::{EntryStatus, EntryStatusRecord, header, now_ms},
};
use rdkafka::{
    Message,
    message::{Header, Headers, OwnedHeaders, OwnedMessage},
    producer::FutureRecord,
};

use super::{OpError, Replayer, action_span, by_or_default};
use crate::index::{Entry, Index};

/// The headers a forced re-drive of a record without a valid MAC keeps: what the gateway writes on every inbound
/// record, nothing that gives a record powers (re-processing, service, ordering, origin, retry, replay).
pub const VOUCHED_HEADERS: &[&str] = &[
    header::SOURCE,
    header::EVENT_ID,
    header::EVENT_TYPE,
    header::RECEIVED_AT_MS,
    header::CONTENT_TYPE,
    header::SECRET_ID,
    header::FORMAT_VERSION,
    header::PROVIDER_EVENT_ID,
];

/// How long before the end of an entry's dedupe retention a re-drive is refused already: a dedupe row is written
/// in the transaction of an attempt that began before the first failure was noted (by up to the handler's
/// timeout), and the retention job runs on an interval.
const RETENTION_MARGIN_MS: i64 = 60 * 60 * 1000;

/// The dedupe retention assumed for an entry whose record does not carry its own: the `postgres` handler's
/// default `retention_days`, the longest a service keeps its rows unless its config says otherwise.
pub const DEFAULT_RETENTION_DAYS: i64 = 30;

/// Why `record`'s entry may no longer be re-driven safely, if so: its service's `postgres` handler keeps dedupe
/// rows [`header::dlq::DEDUPE_RETENTION_DAYS`] days, and an event dead-lettered after a COMMIT whose answer was lost
/// (`retryable_exhausted` after a timeout or a lost connection) has its effect in the database; once retention
/// has deleted its row, a re-drive would apply it a second time. `past_retention` re-drives it anyway, once the
/// operator has checked the database.
///
/// A record without the header (dead-lettered before the build that writes it, or by a service whose retention
/// is not in its config file, such as an application's own transactional handler) is held to
/// [`DEFAULT_RETENTION_DAYS`]: nothing says its rows are kept longer, so past that it needs `past_retention` too.
pub fn past_retention(entry: &Entry, record: &OwnedMessage, now_ms: i64) -> Option<String> {
    let carried: Option<i64> = record
        .headers()
        .and_then(|headers| headers.iter().find(|h| h.key == header::dlq::DEDUPE_RETENTION_DAYS))
        .and_then(|h| std::str::from_utf8(h.value?).ok()?.parse().ok());
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

/// How much of a DLQ record is believed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provenance {
    /// Its MAC verifies: a hookline consumer wrote it.
    Verified,
    /// No valid MAC; an operator forced the re-drive and vouches for the event, not for its routing.
    Vouched,
}

impl Provenance {
    pub fn of(verdict: &Verdict) -> Self {
        if matches!(verdict, Verdict::Authentic { .. }) { Self::Verified } else { Self::Vouched }
    }
}

impl Replayer {
    /// Where `entry` is re-driven, or why it cannot be: never a topic of the DLQ, its statuses or a retry topic
    /// (a re-drive is an inbound record), and for a [`Provenance::Vouched`] record only the inbound topic.
    pub(super) fn redrive_topic<'a>(&'a self, entry: &'a Entry, provenance: Provenance) -> Result<&'a str, String> {
        let kafka = &self.config.kafka;
        let named = entry.entry.original_topic.as_deref().unwrap_or(&kafka.inbound_topic);
        if provenance == Provenance::Vouched && named != kafka.inbound_topic {
            return Err(format!(
                "its original topic `{named}` comes from a record without a valid MAC: a forced re-drive goes to the \
                 inbound topic `{}` only",
                kafka.inbound_topic
            ));
        }
        if named == kafka.dlq_topic || named == kafka.dlq_status_topic || named.starts_with(&kafka.retry_topic) {
            return Err(format!("its original topic `{named}` is not an inbound topic"));
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
        record: &OwnedMessage,
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
        record: &OwnedMessage,
        target: Target<'_>,
    ) -> Result<Vec<(i32, i64)>, OpError> {
        let id = &entry.entry.id;
        let replays = entry.replays + 1;
        let mut headers = redrive_headers(record, entry, target.provenance, replays);
        if let Some(event_type) = target.event_type {
            headers = with_event_type(headers, event_type);
            tracing::warn!(entry_id = %id, event_type, by = target.by, "re-driven with an event type the operator chose");
        }
        let topic = target.topic;
        let mut out =
            FutureRecord::<[u8], [u8]>::to(topic).headers(headers).payload(record.payload().unwrap_or_default());
        if let Some(key) = record.key() {
            out = out.key(key);
        }
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
    /// The operator's event type, replacing the record's `hookline-event-type`.
    pub event_type: Option<&'a str>,
    /// Who asked (recorded in the status topic).
    pub by: &'a str,
}

/// `headers` with `hookline-event-type` set to `event_type` (any the record carried dropped).
fn with_event_type(headers: OwnedHeaders, event_type: &str) -> OwnedHeaders {
    let mut out = OwnedHeaders::new();
    for h in headers.iter().filter(|h| h.key != header::EVENT_TYPE) {
        out = out.insert(Header { key: h.key, value: h.value });
    }
    out.insert(Header { key: header::EVENT_TYPE, value: Some(event_type) })
}

/// The re-driven record's headers: the DLQ record's (a [`Provenance::Verified`] one's, without the DLQ's own and
/// the replay and service headers; a [`Provenance::Vouched`] one's, only [`VOUCHED_HEADERS`] and the forwarded
/// `http-*` ones), then `hookline-replay-of` (the entry id), `hookline-replay-count` and `hookline-service` (the
/// entry's service: only that service processes it; an entry without a service goes to every service, as it did
/// before services had names). A verified record keeps its `hookline-reprocess-*` headers: a re-processing that
/// failed replays as that re-processing.
pub fn redrive_headers(record: &OwnedMessage, entry: &Entry, provenance: Provenance, replays: u32) -> OwnedHeaders {
    let mut headers = OwnedHeaders::new();
    if let Some(original) = record.headers() {
        for h in original.iter() {
            let keep = match provenance {
                Provenance::Verified => {
                    !(h.key.starts_with("hookline-dlq-")
                        || h.key == header::REPLAY_OF
                        || h.key == header::REPLAY_COUNT
                        || h.key == header::SERVICE)
                }
                Provenance::Vouched => VOUCHED_HEADERS.contains(&h.key) || h.key.starts_with(header::FORWARDED_PREFIX),
            };
            if keep {
                headers = headers.insert(Header { key: h.key, value: h.value });
            }
        }
    }
    let count = replays.to_string();
    headers = headers
        .insert(Header { key: header::REPLAY_OF, value: Some(entry.entry.id.as_str()) })
        .insert(Header { key: header::REPLAY_COUNT, value: Some(count.as_str()) });
    // A vouched record's service is its own unverified claim, but addressing one service only narrows who runs it.
    if let Some(service) = &entry.entry.service {
        headers = headers.insert(Header { key: header::SERVICE, value: Some(service.as_str()) });
    }
    headers
}

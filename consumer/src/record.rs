//! A fetched record, parsed once at the door.
//!
//! The fetch loop turns each fetched message into one [`Record`]: the record copied out of librdkafka once
//! ([`FetchedRecord`]: position, key, body, headers), its MAC verdict, the event its headers describe, its retry
//! headers and its trace context. Everything after the door (the scheduler, the pipeline, the handler, the retry
//! and dead-letter copies and their MACs) takes this value: nothing reads a header from librdkafka again, parses
//! the metadata or the retry headers again, or copies the body again (the event handed to the handler and every
//! copy produced share it).

use std::sync::Arc;

use hookline_common::{
    record_auth::Verdict,
    telemetry::traces::{self, SpanContext},
    wire::{FetchedRecord, InboundEvent, WireError},
};

use crate::{retry::RetryHeaders, schedule::Admission, service::ServiceTopics};

/// One fetched record and everything read from it.
#[derive(Debug)]
pub struct Record {
    /// The record itself, owned.
    pub fetched: FetchedRecord,
    /// Its MAC, checked once when it was fetched, at the consumer's clock.
    pub verdict: Verdict,
    /// The event its headers describe: an error for a record no gateway wrote (poison).
    pub event: Result<InboundEvent, WireError>,
    /// Its retry headers: a record read back from a retry topic (or a copy that carries them).
    pub retry: Option<RetryHeaders>,
    /// The trace context its `traceparent` carries, when traces are on and its MAC was accepted (a record
    /// hookline did not write must not choose our trace).
    pub trace: Option<SpanContext>,
}

impl Record {
    /// Parses `fetched`, whose MAC `verify` checks.
    pub fn parse(fetched: FetchedRecord, verify: impl FnOnce(&FetchedRecord) -> Verdict) -> Self {
        let verdict = verify(&fetched);
        let event = InboundEvent::from_fetched(&fetched);
        let retry = RetryHeaders::from_headers(fetched.headers());
        let trace = if verdict.accepted() { traces::record_context(fetched.headers()) } else { None };
        Self { fetched, verdict, event, retry, trace }
    }

    /// What the scheduler needs of it. A record without hookline's MAC gets no route of its own and no due
    /// time: whatever its headers claim, it only goes to the pipeline, which dead-letters it. A record no gateway
    /// wrote gets no source (dead-lettered as poison on the `unknown` route). A record of a retry topic waits until
    /// its due time.
    pub fn admission(&self, topics: &ServiceTopics) -> Admission {
        if !self.verdict.accepted() {
            return Admission::default();
        }
        let retry = self.retry.as_ref().filter(|_| topics.is_retry(self.fetched.topic()));
        let (due_at_ms, first_failure_at_ms, attempts) = match retry {
            Some(retry) => {
                (Some(retry.due_at_ms), Some(retry.attempts.first_failure_at_ms), Some(retry.attempts.clone()))
            }
            None => (None, None, None),
        };
        match &self.event {
            Ok(event) => Admission {
                source: Some(event.meta.source.clone()),
                event_type: event.meta.event_type.clone(),
                ordering_key: event.meta.ordering_key.clone(),
                due_at_ms,
                first_failure_at_ms,
                attempts,
            },
            Err(_) => Admission { due_at_ms, first_failure_at_ms, attempts, ..Admission::default() },
        }
    }

    /// Its source as its (accepted) headers name it, for labels and logs: `unknown` for a record no gateway wrote
    /// or without a valid MAC (bounded: anyone who can write the topic could otherwise grow the label set).
    pub fn source_label(&self) -> &str {
        match (&self.event, self.verdict.accepted()) {
            (Ok(event), true) => &event.meta.source,
            _ => "unknown",
        }
    }

    /// Its event id as its headers name it, if any.
    pub fn event_id(&self) -> Option<&str> {
        self.event.as_ref().ok().map(|event| event.meta.event_id.as_str())
    }

    /// The topic's name, shared.
    pub fn topic_name(&self) -> &Arc<str> {
        self.fetched.topic_name()
    }
}

impl std::ops::Deref for Record {
    type Target = FetchedRecord;

    fn deref(&self) -> &FetchedRecord {
        &self.fetched
    }
}

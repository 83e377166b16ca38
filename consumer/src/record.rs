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

use crate::retry::{Origin, RetryHeaders};

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
        let retry = fetched.headers().and_then(|headers| RetryHeaders::decode(headers.iter()));
        let trace = if verdict.accepted() { traces::record_context(fetched.headers()) } else { None };
        Self { fetched, verdict, event, retry, trace }
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

    /// Where it first was, before any retry: its retry headers' origin, or its own position. What its DLQ record
    /// and its next retry copy name.
    pub fn origin(&self) -> Origin {
        self.retry.as_ref().map(|headers| headers.origin.clone()).unwrap_or_else(|| Origin {
            topic: self.topic().to_owned(),
            partition: self.partition(),
            offset: self.offset(),
        })
    }

    /// Addresses it to one destination of a fan-out service (`None`: to none, as every record of a first-match
    /// service is, whatever its headers say): what its route, filters, dedupe scope, retry and dead letter follow.
    pub fn address_to(&mut self, destination: Option<&str>) {
        if let Ok(event) = &mut self.event {
            event.destination = destination.map(str::to_owned);
        }
    }

    /// A copy for another destination of a fan-out service: the record shared by its destinations (its body is
    /// not copied, only its headers' table). `None` for a record without a well-formed event, which has no
    /// destinations.
    pub fn copy_for(&self, destination: &str) -> Option<Self> {
        let event = self.event.as_ref().ok()?;
        Some(Self {
            fetched: self.fetched.clone(),
            verdict: self.verdict.clone(),
            event: Ok(InboundEvent { destination: Some(destination.to_owned()), ..event.clone() }),
            retry: self.retry.clone(),
            trace: self.trace.clone(),
        })
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

//! Recording a skip: an event its route's filter skips ([`crate::filter`]) is claimed like any other, then its key
//! becomes the filtered marker in place of the claim, with the done TTL. The marker is a done marker, so a copy of
//! the event arriving later (a provider's retry) is a duplicate and nothing processes it by accident; only a
//! re-processing run (its own key, and never filtered) runs it, on an operator's word.

use hookline_common::{
    telemetry::traces::{TraceSpan, attribute},
    wire::{InboundEvent, now_ms, redis_key::FilteredMarker},
};

use super::{Outcome, Pipeline};
use crate::{dedupe::ClaimToken, filter::Skip, record::Record};

impl Pipeline {
    /// Marks the claimed event filtered by `skip`, retrying Redis errors (fail closed, as for a done marker),
    /// and counts it. `None` on shutdown: the claim then lapses and the record, not stored, comes again.
    pub(super) async fn record_filtered(
        &self,
        message: &Record,
        event: &InboundEvent,
        token: &ClaimToken,
        skip: Skip<'_>,
        span: &TraceSpan,
    ) -> Option<Outcome> {
        let marker = FilteredMarker {
            filter: skip.filter.to_owned(),
            filtered_at_ms: now_ms(),
            topic: message.topic().to_owned(),
            partition: message.partition(),
            offset: message.offset(),
            // Recorded from the claim by `mark_filtered`.
            types: Vec::new(),
        };
        let still_ours = self.redis_until_done("done", || self.dedupe.mark_filtered(token, &marker)).await?;
        if !still_ours {
            // Another consumer may have claimed the event meanwhile; it decides the same way.
            tracing::warn!(source = %event.meta.source, event_id = %event.meta.event_id, "claim expired before the filtered marker");
        }
        self.metrics.filtered.with_label_values(&[skip.route, skip.filter]).inc();
        span.set(attribute::DEDUPE_OUTCOME, || "claimed");
        span.set("hookline.filter", || skip.filter.to_owned());
        tracing::info!(
            source = %event.meta.source,
            event_id = %event.meta.event_id,
            route = skip.route,
            filter = skip.filter,
            "filtered: skipped for this service (`hookline-replayer reprocess` runs it)"
        );
        Some(Outcome::Filtered)
    }
}

//! What processes an event. Implement [`Handler`] to build your own consumer binary on this library; the
//! consumer guarantees it is called at least once per event and, through dedupe, succeeds at most once.

use std::{future::Future, pin::Pin};

use hookline_common::wire::InboundEvent;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How a handler call failed; the disposition follows from the variant alone.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum HandlerError {
    /// A retry may succeed (a downstream timeout, a 503): retried with backoff, then dead-lettered.
    #[error("retryable: {0}")]
    Retryable(String),
    /// No retry can succeed (a malformed event, a 400 from downstream): dead-lettered at once.
    #[error("poison: {0}")]
    Poison(String),
}

pub trait Handler: Send + Sync + std::fmt::Debug + 'static {
    /// Name recorded in metrics and in dead-letter records.
    fn name(&self) -> &str;

    /// Processes one event. Must be idempotent enough to be retried after a failure it reported.
    fn handle<'a>(&'a self, event: &'a InboundEvent) -> BoxFuture<'a, Result<(), HandlerError>>;
}

/// Writes one structured line per event; the default handler and the demo's.
#[derive(Debug, Default)]
pub struct LogHandler;

impl Handler for LogHandler {
    fn name(&self) -> &str {
        "log"
    }

    fn handle<'a>(&'a self, event: &'a InboundEvent) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            tracing::info!(
                source = %event.meta.source,
                event_id = %event.meta.event_id,
                event_type = event.meta.event_type.as_deref().unwrap_or(""),
                body_bytes = event.body.len(),
                partition = event.partition,
                offset = event.offset,
                "event processed"
            );
            Ok(())
        })
    }
}

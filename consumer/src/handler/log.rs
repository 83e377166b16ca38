//! The `log` handler: one structured line per event. The default, and the demo's.

use hookline_common::wire::InboundEvent;

use super::{BoxFuture, Handler, HandlerError};

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
                provider_event_id = event.provider_event_id.as_deref().unwrap_or(""),
                event_type = event.meta.event_type.as_deref().unwrap_or(""),
                body_bytes = event.body.len(),
                partition = event.partition,
                offset = event.offset,
                replay_of = event.replay_of.as_deref().unwrap_or(""),
                "event processed"
            );
            Ok(())
        })
    }
}

//! The `log` handler: one structured line per event. The default, and the demo's.
//!
//! The line is its whole work, so it is written without `tracing`'s formatter when the binary's subscriber is the
//! one `init_tracing` set up ([`hookline_common::telemetry::line`]: the same line, text or JSON, at a few hundred
//! instructions instead of about 15k); under any other subscriber it goes through `tracing`.

use std::sync::OnceLock;

use hookline_common::{
    telemetry::line::{EventLine, Value},
    wire::InboundEvent,
};

use super::{BoxFuture, Handler, HandlerError, StartContext, StartError};

#[derive(Debug, Default)]
pub struct LogHandler {
    /// The consumer service, as the `consumer` span around every record's line names it; set at start.
    service: OnceLock<String>,
}

impl Handler for LogHandler {
    fn name(&self) -> &str {
        "log"
    }

    fn start<'a>(&'a self, context: &'a StartContext) -> BoxFuture<'a, Result<(), StartError>> {
        let _ = self.service.set(context.service.clone());
        Box::pin(async { Ok(()) })
    }

    fn handle<'a>(&'a self, event: &'a InboundEvent) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            if !tracing::enabled!(tracing::Level::INFO) {
                return Ok(());
            }
            let service = self.service.get().map_or("", String::as_str);
            let body_bytes = i64::try_from(event.body.len()).unwrap_or(i64::MAX);
            let fields = [
                ("source", Value::Display(&event.meta.source)),
                ("event_id", Value::Display(&event.meta.event_id)),
                ("provider_event_id", Value::Quoted(event.provider_event_id.as_deref().unwrap_or(""))),
                ("event_type", Value::Quoted(event.meta.event_type.as_deref().unwrap_or(""))),
                ("body_bytes", Value::Int(body_bytes)),
                ("partition", Value::Int(i64::from(event.partition))),
                ("offset", Value::Int(event.offset)),
                ("replay_of", Value::Quoted(event.replay_of.as_deref().unwrap_or(""))),
            ];
            let line =
                EventLine { span: ("consumer", &[("service", service)]), message: "event processed", fields: &fields };
            if !line.write_info() {
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
            }
            Ok(())
        })
    }
}

//! What processes an event. Implement [`Handler`] to build your own consumer binary on this library; the
//! consumer guarantees it is called at least once per event and, through dedupe, succeeds at most once.
//!
//! Built-in handlers: [`log`] (one structured line per event), [`http`] (a signed POST to a downstream URL) and
//! [`postgres`] (the event's work and its dedupe row in one transaction of the user's database). The [`router`] picks one per source and event type, applies the validation that makes an event poison
//! before any handler runs, and a route's [`transform`] (a jq program) to the body its handler gets.

pub mod forward_signing;
pub mod http;
pub mod log;
pub mod postgres;
pub mod router;
pub mod transform;

use std::{future::Future, pin::Pin, time::Duration};

use hookline_common::wire::InboundEvent;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How a handler call failed; the disposition follows from the variant alone.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum HandlerError {
    /// A retry may succeed (a downstream timeout, a 503): retried with backoff, then dead-lettered.
    /// `retry_after` (from a downstream `Retry-After`) lengthens the next backoff.
    #[error("retryable: {message}")]
    Retryable { message: String, retry_after: Option<Duration> },
    /// No retry can succeed (a malformed event, a 400 from downstream): dead-lettered at once.
    #[error("poison: {0}")]
    Poison(String),
}

impl HandlerError {
    pub fn retryable(message: impl Into<String>) -> Self {
        Self::Retryable { message: message.into(), retry_after: None }
    }

    pub fn poison(message: impl Into<String>) -> Self {
        Self::Poison(message.into())
    }

    pub fn message(&self) -> &str {
        match self {
            Self::Retryable { message, .. } | Self::Poison(message) => message,
        }
    }
}

/// Why a handler can never run with its configuration ([`Handler::start`]): said in one line, and the start ends.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The database refuses what the configuration asks (a missing table, a statement that does not prepare);
    /// every refusal found, in one line.
    #[error("{0}")]
    Refused(String),
    /// No connection can ever be made with this configuration (wrong credentials, an unknown database, a
    /// certificate that does not verify): the pool's error, as the line says it.
    #[error("{line}")]
    Connect {
        line: String,
        #[source]
        source: deadpool_postgres::PoolError,
    },
    /// The handler of one place of the configuration (`[handler]`, or a route's). (Its Display says the
    /// problem, so it is not also its source: an error chain prints it once.)
    #[error("{place}: {problem}")]
    In { place: String, problem: Box<StartError> },
}

pub trait Handler: Send + Sync + std::fmt::Debug + 'static {
    /// Name recorded in metrics and in dead-letter records.
    fn name(&self) -> &str;

    /// The name of the handler that processes `event`, when this one delegates (the router).
    fn name_for(&self, _event: &InboundEvent) -> &str {
        self.name()
    }

    /// Whether `event`'s type is on an allowlist of its source (the router's `sources.<name>.event_types`). Such a
    /// copy may claim an event whose earlier copy was dead-lettered under another type, once per type: the
    /// allowlist bounds how often one event can be dead-lettered. No allowlist, no takeover.
    fn allowlists_type(&self, _event: &InboundEvent) -> bool {
        false
    }

    /// Whether `event`'s source has an allowlist (`sources.<name>.event_types`) its type is not on: the event is
    /// poison whatever its route, so route filters are not consulted (a copy re-sent under a type nobody
    /// allowed must not get the event marked filtered).
    fn refuses_type(&self, _event: &InboundEvent) -> bool {
        false
    }

    /// Called once before the consumer joins its group: a handler that must reach something first (the
    /// `postgres` handler prepares its statements) does it here. An error is a configuration the handler can
    /// never run with and ends the start; something merely unreachable is waited for until `context.shutdown`.
    fn start<'a>(&'a self, _context: &'a StartContext) -> BoxFuture<'a, Result<(), StartError>> {
        Box::pin(async { Ok(()) })
    }

    /// Processes one event. Must tolerate being called again for an event whose earlier call it reported as a
    /// retryable failure (or timed out): those are retried.
    fn handle<'a>(&'a self, event: &'a InboundEvent) -> BoxFuture<'a, Result<(), HandlerError>>;
}

/// What a handler learns when the consumer starts it.
#[derive(Debug, Clone)]
pub struct StartContext {
    /// The consumer service: part of every dedupe key a handler keeps.
    pub service: String,
    pub metrics: Metrics,
    pub shutdown: CancellationToken,
}

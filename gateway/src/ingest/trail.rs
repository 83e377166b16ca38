//! What a refused request or an answered handshake leaves behind: one rate-limited log line and an entry in the
//! source's ring ([`crate::rejection_ring`]), never the body, a signature or a secret.

use hookline_common::wire::now_ms;

use super::Failure;
use crate::{error::Rejection, metrics::outcome, rejection_ring::RejectionEntry};

/// The log line of a rejection (when the rate-limited log allows one): source, reason, event id when known.
/// Never the body, a signature or a secret.
pub(super) fn log_rejection(source: &str, failure: &Failure) {
    let rejection = &failure.rejection;
    let event_id = failure.event_id.as_deref().unwrap_or("");
    if rejection.status().is_server_error() {
        tracing::warn!(source, code = rejection.code(), event_id, error = %rejection, "refused with 5xx");
    } else {
        tracing::info!(source, code = rejection.code(), event_id, reason = %rejection, "rejected");
    }
}

/// What the ring keeps of a rejection: never the body, a signature or a secret (see [`crate::rejection_ring`]).
/// Takes the secret ids and the event id out of `failure`: the log line has been written, nothing after needs them.
pub(super) fn ring_entry(failure: &mut Failure, peer: Option<std::net::IpAddr>) -> RejectionEntry {
    let rejection = &failure.rejection;
    RejectionEntry {
        at_ms: now_ms(),
        code: rejection.code(),
        status: rejection.status().as_u16(),
        secrets_tried: std::mem::take(&mut failure.secrets_tried),
        skew_ms: match rejection {
            Rejection::Verify(error) => error.skew_ms(),
            _ => None,
        },
        peer,
        event_id: failure.event_id.take(),
        handshake: None,
    }
}

/// What the ring keeps of an answered handshake: its kind, the status answered and the client address.
pub(super) fn handshake_entry(
    kind: &'static str,
    status: http::StatusCode,
    peer: Option<std::net::IpAddr>,
) -> RejectionEntry {
    RejectionEntry {
        at_ms: now_ms(),
        code: outcome::HANDSHAKE,
        status: status.as_u16(),
        secrets_tried: Vec::new(),
        skew_ms: None,
        peer,
        event_id: None,
        handshake: Some(kind),
    }
}

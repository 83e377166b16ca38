//! The event a verified request carries: its identity read from what the signature covers, its metadata and the
//! source's allowlisted request headers, as the [`VerifiedWebhook`] the producer takes.

use bytes::Bytes;
use hookline_common::wire::EventMeta;
use hookline_signature::{self as signature, Coverage};
use http::header;

use crate::{produce::VerifiedWebhook, source::Source};

/// The webhook `proof` vouches for: its identity read from what the signature covers only (a trusted `none`
/// source vouches for everything; a scheme that signs only some body fields says itself what identifies the
/// event), its metadata, and the source's allowlisted request headers; `None` when what is signed names no event id.
pub(super) fn webhook_for(
    source: &Source,
    parts: &http::request::Parts,
    body: &Bytes,
    proof: signature::Verified,
    received_at_ms: i64,
) -> Option<VerifiedWebhook> {
    let verifying = source.scheme.is_verifying();
    let is_signed = |name: &str| !verifying || proof.signs_header(name);
    let identity = match proof.coverage() {
        Coverage::SignedFields { event_id, event_type } => signature::SignedIdentity {
            event_id: Some(event_id.clone()),
            provider_event_id: None,
            event_type: event_type.clone(),
        },
        Coverage::WholeBody | Coverage::Token | Coverage::BodyChecksum => {
            source.identity.identify_signed(&parts.headers, body, &is_signed)
        }
    };
    let event_id = identity.event_id?;
    let meta = EventMeta {
        source: source.name.clone(),
        event_id,
        event_type: identity.event_type,
        received_at_ms,
        content_type: parts.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned),
        secret_id: String::new(),
        // Absent from this request: keyed by the event id, as for a source without an ordering key.
        ordering_key: source.ordering_key.as_ref().and_then(|key| key.value(&parts.headers, body)),
    };
    Some(
        VerifiedWebhook::new(proof, meta, &source.topic)
            .with_provider_event_id(identity.provider_event_id)
            .with_forwarded_headers(forwarded_headers(source, &parts.headers)),
    )
}

/// The allowlisted request headers: lowercase name and value, one entry per value (the inbound record carries
/// each as a header of its own).
fn forwarded_headers(source: &Source, headers: &http::HeaderMap) -> Vec<(String, Bytes)> {
    source
        .forward_headers
        .iter()
        .flat_map(|name| {
            headers
                .get_all(name)
                .iter()
                .map(move |value| (name.as_str().to_owned(), Bytes::copy_from_slice(value.as_bytes())))
        })
        .collect()
}

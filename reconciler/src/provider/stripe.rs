//! Stripe: `GET /v1/events` (`limit` ≤ 100, cursor `starting_after`, filters `created[gte]`/`created[lt]` and
//! `types[]`), 30 days back. Stripe cannot redeliver an event through its API, so a missed one is fetched with
//! `GET /v1/events/{id}` (the event object *is* the webhook's body) and produced by the reconciler.
//!
//! `delivery_success=false` is deliberately not used: an event "delivered" to something that answered 2xx in
//! our name (a misrouted ingress) is still missing from hookline, and only our index can tell.

use bytes::Bytes;
use serde::Deserialize;

use super::{Endpoint, MAX_ENDPOINT_PAGES, ProviderEvent, decode, too_many_endpoint_pages};
use crate::{api::ApiClient, config::SourceConfig, error::ReconcileError};

const PAGE_LIMIT: u32 = 100;

#[derive(Debug)]
pub struct Stripe {
    client: ApiClient,
    source: String,
    event_types: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct EventList {
    data: Vec<EventItem>,
    has_more: bool,
}

#[derive(Debug, Deserialize)]
struct EventItem {
    id: String,
    created: i64,
    #[serde(rename = "type")]
    event_type: Option<String>,
}

#[derive(Debug, Deserialize)]
struct EndpointList {
    data: Vec<EndpointItem>,
    has_more: bool,
}

/// `GET /v1/webhook_endpoints`: `status` is `enabled` or `disabled`; `enabled_events` `["*"]` is every type.
#[derive(Debug, Deserialize)]
struct EndpointItem {
    id: String,
    url: String,
    status: String,
    #[serde(default)]
    enabled_events: Vec<String>,
}

impl Stripe {
    pub fn new(client: ApiClient, source: &SourceConfig) -> Self {
        Self { client, source: source.name.clone(), event_types: source.event_types.clone() }
    }

    pub async fn list(&self, from_ms: i64, to_ms: i64) -> Result<Vec<ProviderEvent>, ReconcileError> {
        let mut base = format!(
            "/v1/events?limit={PAGE_LIMIT}&created%5Bgte%5D={}&created%5Blt%5D={}",
            from_ms.div_euclid(1000),
            (to_ms + 999).div_euclid(1000)
        );
        for event_type in &self.event_types {
            base.push_str(&format!("&types%5B%5D={}", form_encode(event_type)));
        }
        let mut events = Vec::new();
        let mut starting_after: Option<String> = None;
        loop {
            let path = match &starting_after {
                Some(id) => format!("{base}&starting_after={}", form_encode(id)),
                None => base.clone(),
            };
            let page: EventList = decode(&self.source, &self.client.get(&path).await?.body)?;
            let last = page.data.last().map(|item| item.id.clone());
            for item in page.data {
                let wanted = self.event_types.is_empty()
                    || item.event_type.as_ref().is_some_and(|event_type| self.event_types.contains(event_type));
                if wanted {
                    events.push(ProviderEvent {
                        handle: item.id.clone(),
                        id: item.id,
                        occurred_at_ms: item.created.saturating_mul(1000),
                        event_type: item.event_type,
                        provider_still_retrying: false,
                    });
                }
            }
            match (page.has_more, last) {
                (true, Some(last)) if starting_after.as_ref() != Some(&last) => starting_after = Some(last),
                _ => break,
            }
        }
        events.sort_by(|a, b| a.id.cmp(&b.id));
        events.dedup_by(|a, b| a.id == b.id);
        Ok(events)
    }

    /// The account's webhook endpoints (`GET /v1/webhook_endpoints`, `limit` 100, `starting_after`).
    pub async fn endpoints(&self) -> Result<Vec<Endpoint>, ReconcileError> {
        let mut endpoints = Vec::new();
        let mut starting_after: Option<String> = None;
        for _ in 0..MAX_ENDPOINT_PAGES {
            let path = match &starting_after {
                Some(id) => format!("/v1/webhook_endpoints?limit={PAGE_LIMIT}&starting_after={}", form_encode(id)),
                None => format!("/v1/webhook_endpoints?limit={PAGE_LIMIT}"),
            };
            let page: EndpointList = decode(&self.source, &self.client.get(&path).await?.body)?;
            let last = page.data.last().map(|item| item.id.clone());
            endpoints.extend(page.data.into_iter().map(|item| Endpoint {
                enabled: item.status == "enabled",
                id: item.id,
                url: item.url,
                state: item.status,
                event_types: item.enabled_events,
            }));
            match (page.has_more, last) {
                (true, Some(last)) if starting_after.as_ref() != Some(&last) => starting_after = Some(last),
                _ => return Ok(endpoints),
            }
        }
        Err(too_many_endpoint_pages(&self.source))
    }

    /// The event's bytes, exactly as the API returned them; refused unless they carry the id asked for.
    pub async fn fetch(&self, event: &ProviderEvent) -> Result<Bytes, ReconcileError> {
        let body = self.client.get(&format!("/v1/events/{}", form_encode(&event.handle))).await?.body;
        #[derive(Deserialize)]
        struct Id {
            id: String,
        }
        let fetched: Id = decode(&self.source, &body)?;
        if fetched.id != event.id {
            return Err(ReconcileError::Decode {
                source_name: self.source.clone(),
                error: format!("asked for event {} and got {}", event.id, fetched.id),
            });
        }
        Ok(body)
    }
}

/// Percent-encodes everything but unreserved characters (ids and type names are plain, but never trusted).
pub(crate) fn form_encode(value: &str) -> String {
    value
        .bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (byte as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

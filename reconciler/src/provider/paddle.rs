//! Paddle Billing: `GET /notifications` (`per_page` ≤ 200, `after` cursor through `meta.pagination.next`,
//! filters `notification_setting_id`, `from`, `to`), 90 days back, and `POST /notifications/{id}/replay`, which
//! sends the event again as a new notification (same `event_id`, so the gateway's event id and the consumer's
//! dedupe treat it as the same event). Notifications are grouped by `payload.event_id`.
//!
//! A notification Paddle is still retrying (`needs_retry`, `not_attempted`) is left to Paddle: asking for a
//! replay too would only send it twice.

use std::collections::HashMap;

use serde::Deserialize;

use super::{
    Endpoint, MAX_ENDPOINT_PAGES, ProviderEvent, decode, rfc3339, rfc3339_ms, stripe::form_encode,
    too_many_endpoint_pages,
};
use crate::{api::ApiClient, config::SourceConfig, error::ReconcileError};

const PER_PAGE: u32 = 200;

#[derive(Debug)]
pub struct Paddle {
    client: ApiClient,
    source: String,
    notification_setting_id: String,
}

#[derive(Debug, Deserialize)]
struct NotificationList {
    data: Vec<Notification>,
    meta: Meta,
}

#[derive(Debug, Deserialize)]
struct Meta {
    pagination: Pagination,
}

#[derive(Debug, Deserialize)]
struct Pagination {
    next: Option<String>,
    has_more: bool,
}

#[derive(Debug, Deserialize)]
struct Notification {
    id: String,
    #[serde(rename = "type")]
    event_type: Option<String>,
    status: String,
    payload: Payload,
    occurred_at: String,
    #[serde(default)]
    notification_setting_id: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Payload {
    event_id: String,
}

#[derive(Debug, Deserialize)]
struct SettingList {
    data: Vec<Setting>,
    meta: Meta,
}

/// `GET /notification-settings`: `destination` (a URL, or an email address for `type: email`), `active`,
/// `traffic_source` (`platform`, `simulation` or `all`) and `subscribed_events` (event type objects). Its
/// `endpoint_secret_key` is deliberately not a field here: it is never read into memory we keep.
#[derive(Debug, Deserialize)]
struct Setting {
    id: String,
    destination: String,
    active: bool,
    #[serde(default)]
    traffic_source: Option<String>,
    #[serde(default)]
    subscribed_events: Vec<SubscribedEvent>,
}

#[derive(Debug, Deserialize)]
struct SubscribedEvent {
    name: String,
}

impl Paddle {
    pub fn new(client: ApiClient, source: &SourceConfig) -> Self {
        Self {
            client,
            source: source.name.clone(),
            notification_setting_id: source.notification_setting_id.clone().unwrap_or_default(),
        }
    }

    pub async fn list(&self, from_ms: i64, to_ms: i64) -> Result<Vec<ProviderEvent>, ReconcileError> {
        let mut by_event: HashMap<String, ProviderEvent> = HashMap::new();
        let mut next = Some(format!(
            "/notifications?per_page={PER_PAGE}&notification_setting_id={}&from={}&to={}",
            form_encode(&self.notification_setting_id),
            form_encode(&rfc3339(from_ms)),
            form_encode(&rfc3339(to_ms + 999)),
        ));
        while let Some(url) = next.take() {
            let page: NotificationList = decode(&self.source, &self.client.get(&url).await?.body)?;
            for notification in page.data {
                if notification.notification_setting_id.as_deref().is_some_and(|id| id != self.notification_setting_id)
                {
                    continue;
                }
                let at_ms = rfc3339_ms(&notification.occurred_at).ok_or_else(|| ReconcileError::Decode {
                    source_name: self.source.clone(),
                    error: format!("occurred_at `{}` is not an RFC 3339 time", notification.occurred_at),
                })?;
                let retrying = matches!(notification.status.as_str(), "needs_retry" | "not_attempted");
                let event = by_event.entry(notification.payload.event_id.clone()).or_insert_with(|| ProviderEvent {
                    id: notification.payload.event_id.clone(),
                    occurred_at_ms: at_ms,
                    event_type: notification.event_type.clone(),
                    handle: notification.id.clone(),
                    provider_still_retrying: false,
                });
                event.occurred_at_ms = event.occurred_at_ms.min(at_ms);
                event.provider_still_retrying |= retrying;
            }
            if page.meta.pagination.has_more {
                next = page.meta.pagination.next;
            }
        }
        let mut events: Vec<ProviderEvent> = by_event.into_values().collect();
        events.sort_by_key(|event| event.occurred_at_ms);
        Ok(events)
    }

    pub fn notification_setting_id(&self) -> &str {
        &self.notification_setting_id
    }

    /// Every notification destination (`per_page` 200, `after` through `meta.pagination.next`).
    pub async fn endpoints(&self) -> Result<Vec<Endpoint>, ReconcileError> {
        let mut next = Some(format!("/notification-settings?per_page={PER_PAGE}"));
        let mut visited = std::collections::HashSet::new();
        let mut endpoints = Vec::new();
        while let Some(url) = next.take() {
            if visited.len() >= MAX_ENDPOINT_PAGES {
                return Err(too_many_endpoint_pages(&self.source));
            }
            if !visited.insert(url.clone()) {
                break;
            }
            let page: SettingList = decode(&self.source, &self.client.get(&url).await?.body)?;
            endpoints.extend(page.data.into_iter().map(|setting| {
                let simulation_only = setting.traffic_source.as_deref() == Some("simulation");
                let state = match (setting.active, simulation_only) {
                    (false, _) => "inactive",
                    (true, true) => "simulation only",
                    (true, false) => "active",
                };
                Endpoint {
                    id: setting.id,
                    url: setting.destination,
                    enabled: setting.active && !simulation_only,
                    state: state.to_owned(),
                    event_types: setting.subscribed_events.into_iter().map(|event| event.name).collect(),
                }
            }));
            if page.meta.pagination.has_more {
                next = page.meta.pagination.next;
            }
        }
        Ok(endpoints)
    }

    pub async fn replay(&self, event: &ProviderEvent) -> Result<(), ReconcileError> {
        let path = format!("/notifications/{}/replay", form_encode(&event.handle));
        self.client.post(&path, None).await.map(drop)
    }
}

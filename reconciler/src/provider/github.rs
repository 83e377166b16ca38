//! GitHub: `GET /{hook}/deliveries` (`per_page` ≤ 100, newest first, next page from the `Link` header's
//! `rel="next"`), and `POST /{hook}/deliveries/{delivery_id}/attempts` to redeliver, within 3 days. `{hook}` is
//! `repos/<owner>/<repo>/hooks/<id>` or `orgs/<org>/hooks/<id>`.
//!
//! A redelivery is a new delivery (`redelivery: true`) with the same GUID (`X-GitHub-Delivery`) and the same
//! body: the gateway verifies it like any webhook, and its event id (the body's SHA-256) makes it a duplicate of
//! the original if that ever arrives too. Deliveries are grouped by GUID; a GUID is the event.

use std::collections::HashMap;

use serde::Deserialize;

use super::{
    Endpoint, MAX_ENDPOINT_PAGES, ProviderEvent, decode, rfc3339_ms, stripe::form_encode, too_many_endpoint_pages,
};
use crate::{api::ApiClient, config::SourceConfig, error::ReconcileError};

const PER_PAGE: u32 = 100;

#[derive(Debug)]
pub struct Github {
    client: ApiClient,
    source: String,
    hook: String,
}

#[derive(Debug, Deserialize)]
struct DeliveryItem {
    id: u64,
    guid: String,
    delivered_at: String,
    event: Option<String>,
}

/// `GET /repos/{owner}/{repo}/hooks` or `/orgs/{org}/hooks`: `active`, `events` (`*` is every event) and
/// `config.url` (its secret is never returned in clear, and not read).
#[derive(Debug, Deserialize)]
struct HookItem {
    id: u64,
    active: bool,
    #[serde(default)]
    events: Vec<String>,
    config: HookConfig,
}

#[derive(Debug, Deserialize)]
struct HookConfig {
    #[serde(default)]
    url: Option<String>,
}

impl Github {
    pub fn new(client: ApiClient, source: &SourceConfig) -> Self {
        let hook = source.hook.as_deref().unwrap_or_default().trim_matches('/').to_owned();
        Self { client, source: source.name.clone(), hook }
    }

    pub async fn list(&self, from_ms: i64, _to_ms: i64) -> Result<Vec<ProviderEvent>, ReconcileError> {
        // GUID -> (first delivery time, newest delivery id, event).
        let mut by_guid: HashMap<String, (i64, u64, Option<String>)> = HashMap::new();
        let mut next = Some(format!("/{}/deliveries?per_page={PER_PAGE}", self.hook));
        // A `next` link seen before would loop for ever (a broken or hostile API): the listing stops there.
        let mut visited = std::collections::HashSet::new();
        while let Some(url) = next.take() {
            if !visited.insert(url.clone()) {
                tracing::warn!(source = %self.source, "GitHub's next link repeats a page already read; stopping");
                break;
            }
            let response = self.client.get(&url).await?;
            let page: Vec<DeliveryItem> = decode(&self.source, &response.body)?;
            let mut oldest_on_page = i64::MAX;
            for item in page {
                let at_ms = rfc3339_ms(&item.delivered_at).ok_or_else(|| ReconcileError::Decode {
                    source_name: self.source.clone(),
                    error: format!("delivered_at `{}` is not an RFC 3339 time", item.delivered_at),
                })?;
                oldest_on_page = oldest_on_page.min(at_ms);
                let entry = by_guid.entry(item.guid).or_insert((at_ms, item.id, item.event.clone()));
                entry.0 = entry.0.min(at_ms);
                entry.1 = entry.1.max(item.id);
            }
            // Newest first: once a page reaches before the window, later pages hold only older deliveries.
            if oldest_on_page >= from_ms {
                next = next_link(response.headers.get(http::header::LINK).and_then(|value| value.to_str().ok()));
            }
        }
        let mut events: Vec<ProviderEvent> = by_guid
            .into_iter()
            .map(|(guid, (first_ms, newest_id, event))| ProviderEvent {
                id: guid,
                occurred_at_ms: first_ms,
                event_type: event,
                handle: newest_id.to_string(),
                provider_still_retrying: false,
            })
            .collect();
        events.sort_by_key(|event| event.occurred_at_ms);
        Ok(events)
    }

    /// The configured hook's id (the last segment of `hook`).
    pub fn hook_id(&self) -> &str {
        self.hook.rsplit('/').next().unwrap_or_default()
    }

    /// Every hook of the configured hook's repository or organization (`per_page` 100, `Link: rel="next"`).
    pub async fn endpoints(&self) -> Result<Vec<Endpoint>, ReconcileError> {
        let hooks_path = self.hook.rsplit_once('/').map_or(self.hook.as_str(), |(hooks, _id)| hooks);
        let mut next = Some(format!("/{hooks_path}?per_page={PER_PAGE}"));
        let mut visited = std::collections::HashSet::new();
        let mut endpoints = Vec::new();
        while let Some(url) = next.take() {
            if visited.len() >= MAX_ENDPOINT_PAGES {
                return Err(too_many_endpoint_pages(&self.source));
            }
            if !visited.insert(url.clone()) {
                tracing::warn!(source = %self.source, "GitHub's next link repeats a page already read; stopping");
                break;
            }
            let response = self.client.get(&url).await?;
            let page: Vec<HookItem> = decode(&self.source, &response.body)?;
            endpoints.extend(page.into_iter().map(|hook| Endpoint {
                id: hook.id.to_string(),
                url: hook.config.url.unwrap_or_default(),
                enabled: hook.active,
                state: if hook.active { "active" } else { "inactive" }.to_owned(),
                event_types: hook.events,
            }));
            next = next_link(response.headers.get(http::header::LINK).and_then(|value| value.to_str().ok()));
        }
        Ok(endpoints)
    }

    pub async fn redeliver(&self, event: &ProviderEvent) -> Result<(), ReconcileError> {
        let path = format!("/{}/deliveries/{}/attempts", self.hook, form_encode(&event.handle));
        self.client.post(&path, None).await.map(drop)
    }
}

/// The `rel="next"` URL of a `Link` header.
fn next_link(link: Option<&str>) -> Option<String> {
    link?.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        let is_next = params.split(';').any(|param| param.trim().replace(' ', "") == "rel=\"next\"");
        is_next.then(|| url.trim().trim_start_matches('<').trim_end_matches('>').to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_link_is_found_among_others() {
        let link = r#"<https://api.github.com/repos/o/r/hooks/1/deliveries?per_page=2&cursor=v1_9>; rel="next", <https://api.github.com/repos/o/r/hooks/1/deliveries?per_page=2>; rel="first""#;
        assert_eq!(
            next_link(Some(link)).as_deref(),
            Some("https://api.github.com/repos/o/r/hooks/1/deliveries?per_page=2&cursor=v1_9")
        );
        assert_eq!(next_link(Some(r#"<https://x/y>; rel="prev""#)), None);
        assert_eq!(next_link(None), None);
    }
}

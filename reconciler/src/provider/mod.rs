//! One module per provider: how to list its log for a window, and how to get one missed event in.
//!
//! Every list is filtered again on our side by time, whatever the provider's own filters did, so a run never
//! acts outside the window it was asked for.
//!
//! Each module also lists the provider's webhook registrations ([`Endpoint`]) for the registration check
//! ([`crate::registration`]): only `GET`s, at most [`MAX_ENDPOINT_PAGES`] pages.

pub mod github;
pub mod paddle;
pub mod stripe;

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use http::HeaderMap;
use secrecy::{ExposeSecret, SecretString};

use crate::{
    api::ApiClient,
    config::{Provider, SourceConfig},
    error::ReconcileError,
    load::Loaded,
    metrics::Metrics,
};

/// An API client per configured source, by source name, each with the credential [`Loaded`] read.
pub fn clients(
    loaded: &Loaded,
    metrics: &Arc<Metrics>,
) -> Result<std::collections::HashMap<String, ProviderClient>, ReconcileError> {
    let mut providers = std::collections::HashMap::new();
    for source in &loaded.config.sources {
        let credential = loaded.credential(&source.name).ok_or_else(|| ReconcileError::Setup {
            source_name: source.name.clone(),
            error: "no credential was loaded for it".to_owned(),
        })?;
        providers.insert(source.name.clone(), ProviderClient::new(source, credential, metrics.clone())?);
    }
    Ok(providers)
}

/// One event of the provider's log, reduced to what a decision needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderEvent {
    /// The id compared with the index (see [`crate::index::indexed_id`]).
    pub id: String,
    /// When the provider created the event (ms since the epoch).
    pub occurred_at_ms: i64,
    pub event_type: Option<String>,
    /// What the provider's API acts on: the delivery to redeliver (GitHub), the notification to replay
    /// (Paddle), the event to fetch (Stripe).
    pub handle: String,
    /// The provider is still retrying it on its own (Paddle `needs_retry` / `not_attempted`): left alone.
    pub provider_still_retrying: bool,
}

/// The most pages of webhook registrations read for one check (Stripe allows 16 endpoints per account, Paddle 10
/// active destinations, GitHub 20 hooks per event per repository: one page each). More is an error, not a loop.
pub const MAX_ENDPOINT_PAGES: usize = 10;

/// One webhook registration at the provider, reduced to what a registration check needs. Never holds the
/// endpoint's signing secret (Paddle's list returns it; it is not read).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Endpoint {
    /// Stripe `we_...`, GitHub's hook id, Paddle `ntfset_...`.
    pub id: String,
    pub url: String,
    /// The provider sends to it: Stripe `status: enabled`, GitHub `active`, Paddle `active` (and not
    /// simulation-only).
    pub enabled: bool,
    /// The provider's own word for its state (`enabled`, `disabled`, `active`, `inactive`, `simulation only`).
    pub state: String,
    /// The event types it is subscribed to; `*` is every type.
    pub event_types: Vec<String>,
}

/// The error for a registration list longer than [`MAX_ENDPOINT_PAGES`].
pub(crate) fn too_many_endpoint_pages(source: &str) -> ReconcileError {
    ReconcileError::Provider {
        source_name: source.to_owned(),
        error: format!("more than {MAX_ENDPOINT_PAGES} pages of webhook registrations; not judged"),
    }
}

/// How a missed event gets in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    /// The provider accepted a redelivery/replay request: the event will arrive signed through the gateway.
    Requested,
    /// The event's bytes, fetched from the provider's API: produced by the reconciler.
    Fetched(Bytes),
}

#[derive(Debug)]
pub enum ProviderClient {
    Stripe(stripe::Stripe),
    Github(github::Github),
    Paddle(paddle::Paddle),
}

impl ProviderClient {
    /// A client for `source`'s provider API, authenticating with `credential` (read by [`crate::load::Loaded`]).
    pub fn new(
        source: &SourceConfig,
        credential: &SecretString,
        metrics: Arc<Metrics>,
    ) -> Result<Self, ReconcileError> {
        let setup = |error: String| ReconcileError::Setup { source_name: source.name.clone(), error };
        let mut headers = HeaderMap::new();
        let (name, value) = crate::api::credential_header(
            http::header::AUTHORIZATION,
            &format!("Bearer {}", credential.expose_secret()),
        )
        .map_err(|error| setup(error.to_string()))?;
        headers.insert(name, value);
        headers.insert(http::header::USER_AGENT, http::HeaderValue::from_static("hookline-reconciler"));
        match source.provider {
            Provider::Github => {
                headers.insert(http::header::ACCEPT, http::HeaderValue::from_static("application/vnd.github+json"));
                headers.insert("x-github-api-version", http::HeaderValue::from_static("2022-11-28"));
            }
            Provider::Stripe => {
                if let Some(version) = &source.api_version {
                    let value = http::HeaderValue::from_str(version)
                        .map_err(|_| setup("api_version is not a header value".to_owned()))?;
                    headers.insert("stripe-version", value);
                }
            }
            Provider::Paddle => {}
        }
        let client = ApiClient::new(
            &source.name,
            source.api_url(),
            headers,
            source.ca_file.as_deref().map(std::path::Path::new),
            source.requests_per_s(),
            Duration::from_secs(source.max_retry_after_s),
            metrics,
        )?;
        Ok(match source.provider {
            Provider::Stripe => Self::Stripe(stripe::Stripe::new(client, source)),
            Provider::Github => Self::Github(github::Github::new(client, source)),
            Provider::Paddle => Self::Paddle(paddle::Paddle::new(client, source)),
        })
    }

    /// The provider's events that occurred in `[from_ms, to_ms)`, one per event id.
    pub async fn list(&self, from_ms: i64, to_ms: i64) -> Result<Vec<ProviderEvent>, ReconcileError> {
        let mut events = match self {
            Self::Stripe(client) => client.list(from_ms, to_ms).await?,
            Self::Github(client) => client.list(from_ms, to_ms).await?,
            Self::Paddle(client) => client.list(from_ms, to_ms).await?,
        };
        events.retain(|event| (from_ms..to_ms).contains(&event.occurred_at_ms));
        Ok(events)
    }

    /// Every webhook registration the credential can see (Stripe: the account's endpoints; GitHub: the hooks of
    /// the configured hook's repository or organization; Paddle: the notification destinations). Reads only.
    pub async fn endpoints(&self) -> Result<Vec<Endpoint>, ReconcileError> {
        match self {
            Self::Stripe(client) => client.endpoints().await,
            Self::Github(client) => client.endpoints().await,
            Self::Paddle(client) => client.endpoints().await,
        }
    }

    /// The endpoint whose log the reconciler reads, when it reads one endpoint's log: GitHub's hook id, Paddle's
    /// notification destination (Stripe's events are the account's).
    pub fn reconciled_endpoint(&self) -> Option<&str> {
        match self {
            Self::Stripe(_) => None,
            Self::Github(client) => Some(client.hook_id()),
            Self::Paddle(client) => Some(client.notification_setting_id()),
        }
    }

    /// Gets one missed event in: asks the provider to redeliver it, or fetches it.
    pub async fn recover(&self, event: &ProviderEvent) -> Result<Recovery, ReconcileError> {
        match self {
            Self::Stripe(client) => client.fetch(event).await.map(Recovery::Fetched),
            Self::Github(client) => client.redeliver(event).await.map(|()| Recovery::Requested),
            Self::Paddle(client) => client.replay(event).await.map(|()| Recovery::Requested),
        }
    }
}

/// Milliseconds since the epoch of an RFC 3339 time.
pub(crate) fn rfc3339_ms(text: &str) -> Option<i64> {
    // Providers here send UTC (`Z`) times, with or without fractions.
    hookline_common::time::parse_rfc3339_weak_ms(text.trim()).ok()
}

/// An RFC 3339 UTC time (seconds precision) for `ms`.
pub(crate) fn rfc3339(ms: i64) -> String {
    hookline_common::time::format_rfc3339_seconds(ms)
}

pub(crate) fn decode<T: serde::de::DeserializeOwned>(source: &str, body: &[u8]) -> Result<T, ReconcileError> {
    serde_json::from_slice(body)
        .map_err(|error| ReconcileError::Decode { source_name: source.to_owned(), error: error.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trips_with_and_without_fractions() {
        assert_eq!(rfc3339_ms("2021-05-12T20:33:44.000Z"), Some(1_620_851_624_000));
        assert_eq!(rfc3339_ms("2021-05-12T20:33:44Z"), Some(1_620_851_624_000));
        assert_eq!(rfc3339_ms("2023-08-18T11:30:44.163948Z"), Some(1_692_358_244_163));
        assert_eq!(rfc3339(1_620_851_624_000), "2021-05-12T20:33:44Z");
        assert_eq!(rfc3339_ms("yesterday"), None);
    }
}

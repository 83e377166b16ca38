//! Keys fetched from providers (SNS's and PayPal's signing certificates, Google's OIDC key set, Plaid's keys by id, asked
//! for by a `POST` with the source's API credentials): only from URLs that passed the
//! scheme's pins (`hookline_common::signature::fetched::pin`), over https verified against the trust roots,
//! within a timeout and a response size cap, cached with a TTL and bounded in count and bytes ([`cache`]).
//!
//! One fetch per URL at a time: concurrent requests for a key not yet held wait for the same fetch (bounded by its
//! timeout), and a failure is remembered for `failure_hold_s`, during which requests naming that key are answered
//! 503 with `Retry-After` at once. A key past half its TTL is refetched in the background while the held one keeps
//! serving, so once a provider's key is known, requests never wait for the network.
//!
//! [`KeyFetchConfig::test_only`] is the one setting tests need that production must never have (their own CA,
//! their key server's loopback address for the pinned name): it cannot be read from a file or the environment
//! (`serde(skip)`), so only code that builds a `GatewayConfig` value can set it, and its addresses must be
//! loopback.

mod cache;
mod client;

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use hookline_common::signature::fetched::{FetchedKey, KeyFormat, KeyUrl, TrustRoots};
use serde::{Deserialize, Serialize};

use crate::metrics::Metrics;
use cache::{Cache, Lookup};
pub use client::FetchError;

/// `[key_fetch]`: how the gateway fetches the keys of the SNS, PayPal, Google Pub/Sub and Plaid sources.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct KeyFetchConfig {
    /// One fetch (connect, TLS, request, response) must end within this.
    pub fetch_timeout_ms: u64,
    /// A response larger than this is refused (a certificate is a few KiB).
    pub max_response_bytes: usize,
    /// How long a fetched certificate is kept; it is refetched in the background past half of it.
    pub cache_ttl_s: u64,
    /// At most this many certificates (and remembered failures) are kept...
    pub cache_max_entries: usize,
    /// ...and at most this many bytes of certificates.
    pub cache_max_bytes: usize,
    /// After a failed fetch, requests needing that key are answered 503 at once for this long (and told to retry
    /// after it).
    pub failure_hold_s: u64,
    /// Tests only, never read from a file or the environment (see the module's doc).
    #[doc(hidden)]
    #[serde(skip)]
    pub test_only: Option<KeyFetchTestOnly>,
}

impl Default for KeyFetchConfig {
    fn default() -> Self {
        Self {
            fetch_timeout_ms: 3_000,
            max_response_bytes: 64 * 1024,
            cache_ttl_s: 3_600,
            cache_max_entries: 64,
            cache_max_bytes: 1024 * 1024,
            failure_hold_s: 10,
            test_only: None,
        }
    }
}

/// What only a test may set: its own CA instead of the Mozilla roots (for TLS to the key host and for the fetched
/// chains), and fixed loopback addresses for pinned names, as curl's `--resolve` does.
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct KeyFetchTestOnly {
    pub roots_pem: Vec<u8>,
    pub resolve: Vec<(String, SocketAddr)>,
}

impl KeyFetchConfig {
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if !(100..=30_000).contains(&self.fetch_timeout_ms) {
            problems.push("key_fetch.fetch_timeout_ms must be between 100 and 30000".to_owned());
        }
        if !(1024..=1024 * 1024).contains(&self.max_response_bytes) {
            problems.push("key_fetch.max_response_bytes must be between 1024 and 1048576".to_owned());
        }
        if self.cache_ttl_s == 0 || self.cache_max_entries == 0 || self.cache_max_bytes < self.max_response_bytes {
            problems.push(
                "key_fetch.cache_ttl_s and cache_max_entries must be positive, and cache_max_bytes at least \
                 max_response_bytes"
                    .to_owned(),
            );
        }
        if !(1..=300).contains(&self.failure_hold_s) {
            problems.push("key_fetch.failure_hold_s must be between 1 and 300".to_owned());
        }
        problems
    }
}

/// Why a key cannot be had now: the request is answered 503 with `Retry-After`, never 401.
#[derive(Debug, thiserror::Error)]
#[error("the provider's key cannot be fetched now")]
pub struct KeyUnavailable {
    pub retry_after_s: u64,
}

/// The gateway's fetcher and cache, shared by every source and kept across reloads.
#[derive(Debug, Clone)]
pub struct KeyFetcher {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: client::Client,
    roots: TrustRoots,
    cache: Mutex<Cache>,
    /// One lock per URL being fetched: the single flight.
    in_flight: Mutex<HashMap<KeyUrl, Arc<tokio::sync::Mutex<()>>>>,
    failure_hold_s: u64,
    metrics: Metrics,
}

impl KeyFetcher {
    pub fn new(config: &KeyFetchConfig, metrics: Metrics) -> Result<Self, String> {
        let (roots, resolve) = match &config.test_only {
            Some(test) => (TrustRoots::from_pem(&test.roots_pem)?, test.resolve.clone()),
            None => (TrustRoots::mozilla(), Vec::new()),
        };
        let client = client::Client::new(
            &roots,
            resolve,
            Duration::from_millis(config.fetch_timeout_ms),
            config.max_response_bytes,
        )?;
        let cache = Cache::new(
            Duration::from_secs(config.cache_ttl_s),
            Duration::from_secs(config.failure_hold_s),
            config.cache_max_entries,
            config.cache_max_bytes,
        );
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                roots,
                cache: Mutex::new(cache),
                in_flight: Mutex::new(HashMap::new()),
                failure_hold_s: config.failure_hold_s,
                metrics,
            }),
        })
    }

    /// How long a failure is remembered: the `Retry-After` of a key that cannot be had.
    pub fn failure_hold_s(&self) -> u64 {
        self.inner.failure_hold_s
    }

    /// The roots fetched certificates must chain to.
    pub fn roots(&self) -> &TrustRoots {
        &self.inner.roots
    }

    /// The key document at `url` (already pinned), as `format`, from the cache or fetched now.
    pub async fn key(
        &self,
        provider: &str,
        format: KeyFormat,
        url: &KeyUrl,
    ) -> Result<Arc<FetchedKey>, KeyUnavailable> {
        let unavailable = KeyUnavailable { retry_after_s: self.inner.failure_hold_s };
        match self.lookup(url) {
            Lookup::Hit { certificate, refresh } => {
                if refresh {
                    let fetcher = self.clone();
                    let (provider, url) = (provider.to_owned(), url.clone());
                    tokio::spawn(async move { fetcher.fetch_into_cache(&provider, format, &url).await });
                }
                return Ok(certificate);
            }
            Lookup::Failing => return Err(unavailable),
            Lookup::Miss => {}
        }
        let flight = {
            let mut in_flight = self.inner.in_flight.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            in_flight.entry(url.clone()).or_default().clone()
        };
        let _turn = flight.lock().await;
        // Whoever held the turn before may have fetched it (or failed to) meanwhile.
        let result = match self.lookup(url) {
            Lookup::Hit { certificate, .. } => Ok(certificate),
            Lookup::Failing => Err(unavailable),
            Lookup::Miss => self.fetch_into_cache(provider, format, url).await.ok_or(unavailable),
        };
        let mut in_flight = self.inner.in_flight.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if in_flight.get(url).is_some_and(|lock| Arc::strong_count(lock) <= 2) {
            in_flight.remove(url);
        }
        result
    }

    /// A `GET` of `url` (already pinned) that must answer 200: SNS's subscription confirmation.
    pub async fn confirm(&self, provider: &str, url: &KeyUrl) -> Result<(), KeyUnavailable> {
        let result = self.inner.client.get(url).await;
        self.count(provider, "confirmation", result.as_ref().map(|_| ()));
        result.map(|_| ()).map_err(|error| {
            tracing::warn!(provider, host = url.host(), error = %error, "subscription confirmation failed");
            KeyUnavailable { retry_after_s: self.inner.failure_hold_s }
        })
    }

    /// A call of a provider's API (already pinned `url`) with a credential (PayPal's OAuth token, then its event),
    /// counted under `kind`; never cached.
    pub async fn call_api(
        &self,
        provider: &str,
        kind: &str,
        url: &KeyUrl,
        authorization: &http::HeaderValue,
        form: Option<&'static str>,
    ) -> Result<bytes::Bytes, FetchError> {
        let result = self.inner.client.call(url, authorization, form).await.map(|fetched| fetched.body);
        self.count(provider, kind, result.as_ref().map(|_| ()));
        result
    }

    fn lookup(&self, url: &KeyUrl) -> Lookup {
        let lookup =
            self.inner.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).lookup(url, Instant::now());
        let outcome = match lookup {
            Lookup::Hit { .. } => "hit",
            Lookup::Failing => "failing",
            Lookup::Miss => "miss",
        };
        self.inner.metrics.key_cache_lookups.with_label_values(&[outcome]).inc();
        lookup
    }

    async fn fetch_into_cache(&self, provider: &str, format: KeyFormat, url: &KeyUrl) -> Option<Arc<FetchedKey>> {
        let fetched = self.inner.client.get(url).await.and_then(|fetched| {
            FetchedKey::parse(format, &fetched.body, &fetched.presented).ok_or(FetchError::Unparsable)
        });
        let kind = match format {
            KeyFormat::Certificate => "certificate",
            KeyFormat::JwkSet => "key_set",
        };
        self.count(provider, kind, fetched.as_ref().map(|_| ()));
        let mut cache = self.inner.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let result = match fetched {
            Ok(certificate) => {
                let certificate = Arc::new(certificate);
                cache.insert(url.clone(), certificate.clone(), Instant::now());
                Some(certificate)
            }
            Err(error) => {
                tracing::warn!(provider, host = url.host(), error = %error, "key fetch failed");
                cache.failed(url.clone(), Instant::now());
                None
            }
        };
        self.inner.metrics.key_cache_entries.set(i64::try_from(cache.n_entries()).unwrap_or(i64::MAX));
        self.inner.metrics.key_cache_bytes.set(i64::try_from(cache.bytes()).unwrap_or(i64::MAX));
        result
    }

    fn count(&self, provider: &str, kind: &str, result: Result<(), &FetchError>) {
        let outcome = match result {
            Ok(()) => "ok",
            Err(error) => error.outcome(),
        };
        self.inner.metrics.key_fetches.with_label_values(&[provider, kind, outcome]).inc();
    }
}

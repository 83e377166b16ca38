//! Keys fetched from providers (SNS's and PayPal's signing certificates, Google's OIDC key set, Plaid's keys by id, asked
//! for by a `POST` with the source's API credentials): only from URLs that passed the
//! scheme's pins (`hookline_signature::fetched::pin`), over https verified against the trust roots,
//! within a timeout and a response size cap, cached with a TTL and bounded in count and bytes ([`cache`]).
//!
//! One fetch per URL at a time: concurrent requests for a key not yet held wait for the same fetch (bounded by its
//! timeout), and a failure is remembered for `failure_hold_s`, during which requests naming that key are answered
//! 503 with `Retry-After` at once. At most `max_fetches_in_flight` URLs are being fetched at once, and each flight
//! is forgotten when its last request leaves, even a cancelled one ([`flight`]). Each source fetches at most
//! `misses_per_source` keys it does not hold per `miss_interval_s` ([`budget`]): a forged request naming a new key
//! costs one fetch, and past the budget it costs none. A key past half its TTL is refetched in the background while the held one keeps
//! serving, so once a provider's key is known, requests never wait for the network.
//!
//! [`KeyFetchConfig::test_only`] is the one setting tests need that production must never have (their own CA,
//! their key server's loopback address for the pinned name): it cannot be read from a file or the environment
//! (`serde(skip)`), so only code that builds a `GatewayConfig` value can set it, and its addresses must be
//! loopback.

mod budget;
mod cache;
mod client;
mod confirmed;
mod flight;

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use hookline_signature::fetched::{FetchedKey, KeyFormat, KeyUrl, TrustRoots};
use serde::{Deserialize, Serialize};

use crate::{error::KeyFetchBuildError, metrics::Metrics};
use budget::MissBudget;
use cache::{Cache, Lookup};
pub use client::FetchError;
use confirmed::Confirmed;
use flight::Flights;

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
    /// At most this many keys not held are fetched for one source per `miss_interval_s` (a forged request naming
    /// a new key costs one fetch; past this it is answered 503 at once).
    pub misses_per_source: u32,
    /// The interval of `misses_per_source`, in seconds.
    pub miss_interval_s: u64,
    /// At most this many URLs are being fetched at once; a request needing one more is answered 503 at once.
    pub max_fetches_in_flight: usize,
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
            misses_per_source: 10,
            miss_interval_s: 60,
            max_fetches_in_flight: 32,
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
        if !(1..=10_000).contains(&self.misses_per_source) || !(1..=3_600).contains(&self.miss_interval_s) {
            problems.push(
                "key_fetch.misses_per_source must be between 1 and 10000, and miss_interval_s between 1 and 3600"
                    .to_owned(),
            );
        }
        if !(1..=4_096).contains(&self.max_fetches_in_flight) {
            problems.push("key_fetch.max_fetches_in_flight must be between 1 and 4096".to_owned());
        }
        problems
    }
}

/// Why a key cannot be had now: the request is answered 503 with `Retry-After`, never 401.
#[derive(Debug, thiserror::Error)]
#[error("the provider's key cannot be fetched now")]
pub struct KeyUnavailable {
    pub retry_after_s: u64,
    /// The request named a key not held and got nothing: its fetch failed, or the source's miss budget or the
    /// in-flight bound refused it. Charged to the client address like a failed verification (a request naming a
    /// key already known to be failing is not: the provider's own retries during an outage land there).
    pub after_miss: bool,
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
    /// One turn per URL being fetched: the single flight.
    in_flight: Flights,
    /// Each source's fetches of keys not held.
    misses: MissBudget,
    /// SNS subscription confirmations already made.
    confirmed: Confirmed,
    failure_hold_s: u64,
    metrics: Metrics,
}

impl KeyFetcher {
    pub fn new(config: &KeyFetchConfig, metrics: Metrics) -> Result<Self, KeyFetchBuildError> {
        let (roots, resolve) = match &config.test_only {
            Some(test) => {
                let roots =
                    TrustRoots::from_pem(&test.roots_pem).map_err(|error| match std::error::Error::source(&error) {
                        Some(source) => KeyFetchBuildError::Roots(format!("{error}: {source}")),
                        None => KeyFetchBuildError::Roots(error.to_string()),
                    })?;
                (roots, test.resolve.clone())
            }
            None => (TrustRoots::mozilla(), Vec::new()),
        };
        Self::with_roots(config, roots, resolve, metrics)
    }

    fn with_roots(
        config: &KeyFetchConfig,
        roots: TrustRoots,
        resolve: Vec<(String, SocketAddr)>,
        metrics: Metrics,
    ) -> Result<Self, KeyFetchBuildError> {
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
                in_flight: Flights::new(config.max_fetches_in_flight),
                confirmed: Confirmed::default(),
                misses: MissBudget::new(config.misses_per_source, Duration::from_secs(config.miss_interval_s)),
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

    /// The key document at `url` (already pinned), as `format`, from the cache or fetched now within `source`'s
    /// miss budget.
    pub async fn key(
        &self,
        source: &str,
        provider: &str,
        format: KeyFormat,
        url: &KeyUrl,
    ) -> Result<Arc<FetchedKey>, KeyUnavailable> {
        let failing = KeyUnavailable { retry_after_s: self.inner.failure_hold_s, after_miss: false };
        match self.lookup(url) {
            Lookup::Hit { certificate, refresh } => {
                if refresh {
                    let fetcher = self.clone();
                    let (provider, url) = (provider.to_owned(), url.clone());
                    tokio::spawn(async move { fetcher.fetch_into_cache(&provider, format, &url).await });
                }
                return Ok(certificate);
            }
            Lookup::Failing => return Err(failing),
            Lookup::Miss => {}
        }
        // Refused before joining anything when the source has no fetch left or too many URLs are in flight.
        self.inner.misses.check(source, Instant::now()).map_err(|wait| self.refused("miss_budget", wait))?;
        let flight = self
            .inner
            .in_flight
            .join(url)
            .ok_or_else(|| self.refused("in_flight", Duration::from_secs(self.inner.failure_hold_s)))?;
        let _turn = flight.turn().await;
        // Whoever held the turn before may have fetched it (or failed to) meanwhile.
        match self.lookup(url) {
            Lookup::Hit { certificate, .. } => Ok(certificate),
            Lookup::Failing => Err(failing),
            Lookup::Miss => {
                self.inner.misses.spend(source, Instant::now()).map_err(|wait| self.refused("miss_budget", wait))?;
                self.fetch_into_cache(provider, format, url)
                    .await
                    .ok_or(KeyUnavailable { retry_after_s: self.inner.failure_hold_s, after_miss: true })
            }
        }
    }

    /// URLs being fetched now (the single flight's entries).
    pub fn n_in_flight(&self) -> usize {
        self.inner.in_flight.len()
    }

    /// Forgets the miss budgets of the sources `keep` says are gone (after a reload).
    pub fn retain_sources(&self, keep: impl Fn(&str) -> bool) {
        self.inner.misses.retain_sources(keep);
    }

    /// A key not held that is not fetched (the source's miss budget, or the in-flight bound): 503, retry after
    /// `wait`, counted by `reason`.
    fn refused(&self, reason: &str, wait: Duration) -> KeyUnavailable {
        self.inner.metrics.key_fetches_refused.with_label_values(&[reason]).inc();
        KeyUnavailable { retry_after_s: wait.as_secs().saturating_add(1), after_miss: true }
    }

    /// A `GET` of `url` (already pinned) that must answer 200: SNS's subscription confirmation. One at a time per
    /// URL, and a URL confirmed lately is not visited again (a replayed capture costs no outbound request).
    pub async fn confirm(&self, provider: &str, url: &KeyUrl) -> Result<(), KeyUnavailable> {
        if self.inner.confirmed.contains(url, Instant::now()) {
            return Ok(());
        }
        let flight = self
            .inner
            .in_flight
            .join(url)
            .ok_or_else(|| self.refused("in_flight", Duration::from_secs(self.inner.failure_hold_s)))?;
        let _turn = flight.turn().await;
        if self.inner.confirmed.contains(url, Instant::now()) {
            return Ok(());
        }
        let result = self.inner.client.get(url).await;
        self.count(provider, "confirmation", result.as_ref().map(|_| ()));
        match result {
            Ok(_) => {
                self.inner.confirmed.insert(url.clone(), Instant::now());
                Ok(())
            }
            Err(error) => {
                tracing::warn!(provider, host = url.host(), error = %error, "subscription confirmation failed");
                Err(KeyUnavailable { retry_after_s: self.inner.failure_hold_s, after_miss: false })
            }
        }
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

#[cfg(test)]
mod tests {
    use hookline_signature::fetched::pin::{HostPin, Pins};

    use super::*;

    const HOST: &str = "sns.us-east-1.amazonaws.com";
    const PINS: Pins = Pins { hosts: &[HostPin::Exact(HOST)], path_prefix: "/", path_suffix: ".pem" };

    fn url(n: usize) -> KeyUrl {
        KeyUrl::pinned(&format!("https://{HOST}/SimpleNotificationService-{n}.pem"), &PINS, "url").expect("pinned")
    }

    /// A key host that never says a word: a listener that never accepts (connections complete in the kernel's
    /// backlog, then wait for TLS for ever; past the backlog, the connect itself waits).
    async fn silent_host() -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let _listener = listener;
            std::future::pending::<()>().await;
        });
        addr
    }

    fn fetcher(config: &KeyFetchConfig, host: SocketAddr) -> KeyFetcher {
        let metrics = Metrics::register(&prometheus::Registry::new()).expect("metrics");
        KeyFetcher::with_roots(config, TrustRoots::mozilla(), vec![(HOST.to_owned(), host)], metrics).expect("fetcher")
    }

    /// P2: a request cancelled while it waits for its key (the client left: hyper drops its future) leaves nothing
    /// in the single-flight map, nor do two requests racing for one URL.
    #[tokio::test]
    async fn cancelled_fetches_leave_nothing_in_flight() {
        let config = KeyFetchConfig { misses_per_source: 10_000, ..KeyFetchConfig::default() };
        let fetcher = fetcher(&config, silent_host().await);
        for n in 0..1_000 {
            let url = url(n);
            let asked = fetcher.key("sns", "sns", KeyFormat::Certificate, &url);
            assert!(tokio::time::timeout(Duration::from_millis(2), asked).await.is_err(), "the host never answers");
        }
        assert_eq!(fetcher.n_in_flight(), 0, "every cancelled fetch's entry was removed");

        // Two waiters on one URL, both cancelled, in either order.
        let (first, second) = (url(5_000), url(5_000));
        let (a, b) = tokio::join!(
            tokio::time::timeout(Duration::from_millis(30), fetcher.key("sns", "sns", KeyFormat::Certificate, &first)),
            tokio::time::timeout(Duration::from_millis(60), fetcher.key("sns", "sns", KeyFormat::Certificate, &second)),
        );
        assert!(a.is_err() && b.is_err());
        assert_eq!(fetcher.n_in_flight(), 0, "nor does a lost race");
    }

    /// P2: at most `max_fetches_in_flight` URLs at once; one more is refused at once, and counted as a miss.
    #[tokio::test]
    async fn the_single_flight_is_bounded() {
        let config =
            KeyFetchConfig { misses_per_source: 10_000, max_fetches_in_flight: 8, ..KeyFetchConfig::default() };
        let fetcher = fetcher(&config, silent_host().await);
        let waiting: Vec<_> = (0..8)
            .map(|n| {
                let fetcher = fetcher.clone();
                tokio::spawn(async move { fetcher.key("sns", "sns", KeyFormat::Certificate, &url(n)).await.is_ok() })
            })
            .collect();
        while fetcher.n_in_flight() < 8 {
            tokio::task::yield_now().await;
        }
        let refused = fetcher.key("sns", "sns", KeyFormat::Certificate, &url(100)).await.expect_err("full");
        assert!(refused.after_miss);
        assert_eq!(fetcher.n_in_flight(), 8);
        for task in waiting {
            task.abort();
        }
        while fetcher.n_in_flight() > 0 {
            tokio::task::yield_now().await;
        }
    }

    /// P6: a source fetches at most `misses_per_source` keys it does not hold; past that, nothing reaches the key
    /// host and the request is refused at once with a `Retry-After` until the next one.
    #[tokio::test]
    async fn a_source_fetches_at_most_its_miss_budget() {
        let config = KeyFetchConfig { misses_per_source: 3, miss_interval_s: 60, ..KeyFetchConfig::default() };
        let fetcher = fetcher(&config, silent_host().await);
        for n in 0..3 {
            let url = url(n);
            let asked = fetcher.key("plaid", "plaid", KeyFormat::Certificate, &url);
            assert!(tokio::time::timeout(Duration::from_millis(20), asked).await.is_err(), "fetching (3 allowed)");
        }
        let refused = fetcher.key("plaid", "plaid", KeyFormat::Certificate, &url(3)).await.expect_err("budget spent");
        assert!(refused.after_miss && refused.retry_after_s >= 1, "{refused:?}");
        assert!(
            tokio::time::timeout(
                Duration::from_millis(20),
                fetcher.key("other", "sns", KeyFormat::Certificate, &url(4))
            )
            .await
            .is_err(),
            "another source's budget is its own (it fetches)"
        );
    }
}

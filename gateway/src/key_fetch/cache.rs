//! The fetched certificates, by URL: each kept for the TTL, at most `max_entries` of them and `max_bytes` in all
//! (the oldest fetched goes first), and a failed fetch remembered for `failure_hold` so that requests naming an
//! unreachable key are answered 503 at once instead of each waiting for a timeout.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use hookline_signature::fetched::{FetchedKey, KeyUrl};

#[derive(Debug)]
enum Entry {
    Ready { certificate: Arc<FetchedKey>, fetched_at: Instant, size_bytes: usize, refreshing: bool },
    Failed { until: Instant },
}

/// What the cache holds for a URL.
#[derive(Debug)]
pub enum Lookup {
    /// Fresh; `refresh` says it is past half its TTL and nobody is refreshing it yet (the caller now is).
    Hit {
        certificate: Arc<FetchedKey>,
        refresh: bool,
    },
    /// A fetch failed a moment ago.
    Failing,
    Miss,
}

#[derive(Debug)]
pub struct Cache {
    entries: HashMap<KeyUrl, Entry>,
    bytes: usize,
    ttl: Duration,
    failure_hold: Duration,
    max_entries: usize,
    max_bytes: usize,
}

impl Cache {
    pub fn new(ttl: Duration, failure_hold: Duration, max_entries: usize, max_bytes: usize) -> Self {
        Self { entries: HashMap::new(), bytes: 0, ttl, failure_hold, max_entries: max_entries.max(1), max_bytes }
    }

    pub fn lookup(&mut self, url: &KeyUrl, now: Instant) -> Lookup {
        let expired = match self.entries.get(url) {
            None => return Lookup::Miss,
            Some(Entry::Ready { fetched_at, .. }) => now.duration_since(*fetched_at) >= self.ttl,
            Some(Entry::Failed { until }) => now >= *until,
        };
        if expired {
            self.remove(url);
            return Lookup::Miss;
        }
        match self.entries.get_mut(url) {
            Some(Entry::Ready { certificate, fetched_at, refreshing, .. }) => {
                let refresh = !*refreshing && now.duration_since(*fetched_at) >= self.ttl / 2;
                *refreshing |= refresh;
                Lookup::Hit { certificate: certificate.clone(), refresh }
            }
            Some(Entry::Failed { .. }) => Lookup::Failing,
            None => Lookup::Miss,
        }
    }

    /// Keeps `certificate`, evicting the oldest entries while over a bound. One larger than `max_bytes` alone is
    /// used for its request but not kept.
    pub fn insert(&mut self, url: KeyUrl, certificate: Arc<FetchedKey>, now: Instant) {
        self.remove(&url);
        let size_bytes = certificate.size_bytes();
        if size_bytes > self.max_bytes {
            return;
        }
        while self.entries.len() >= self.max_entries || self.bytes + size_bytes > self.max_bytes {
            if !self.evict_oldest() {
                break;
            }
        }
        self.bytes += size_bytes;
        self.entries.insert(url, Entry::Ready { certificate, fetched_at: now, size_bytes, refreshing: false });
    }

    /// Remembers that fetching `url` failed; a certificate already held stays until its TTL (a refresh failed).
    pub fn failed(&mut self, url: KeyUrl, now: Instant) {
        match self.entries.get_mut(&url) {
            Some(Entry::Ready { refreshing, .. }) => *refreshing = false,
            _ => {
                self.remove(&url);
                while self.entries.len() >= self.max_entries {
                    if !self.evict_oldest() {
                        break;
                    }
                }
                self.entries.insert(url, Entry::Failed { until: now + self.failure_hold });
            }
        }
    }

    pub fn n_entries(&self) -> usize {
        self.entries.len()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn remove(&mut self, url: &KeyUrl) {
        if let Some(Entry::Ready { size_bytes, .. }) = self.entries.remove(url) {
            self.bytes -= size_bytes;
        }
    }

    /// Drops a failure first, else the certificate fetched longest ago; false when empty.
    fn evict_oldest(&mut self) -> bool {
        let victim = self
            .entries
            .iter()
            .min_by_key(|(_, entry)| match entry {
                Entry::Failed { .. } => None,
                Entry::Ready { fetched_at, .. } => Some(*fetched_at),
            })
            .map(|(url, _)| url.clone());
        match victim {
            Some(url) => {
                self.remove(&url);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use hookline_signature::fetched::{
        FetchedCertificate,
        pin::{HostPin, Pins},
    };

    use super::*;

    const PINS: Pins = Pins { hosts: &[HostPin::Exact("keys.example")], path_prefix: "/", path_suffix: "" };

    fn url(n: usize) -> KeyUrl {
        KeyUrl::pinned(&format!("https://keys.example/{n}"), &PINS, "url").expect("pinned")
    }

    fn certificate(size: usize) -> Arc<FetchedKey> {
        use base64::Engine;
        let der = vec![0x30; size];
        let pem = format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            base64::engine::general_purpose::STANDARD.encode(der)
        );
        Arc::new(FetchedKey::Certificate(FetchedCertificate::from_pem(pem.as_bytes(), &[]).expect("pem")))
    }

    #[test]
    fn the_cache_is_bounded_in_entries_and_bytes_and_drops_the_oldest() {
        let start = Instant::now();
        let mut cache = Cache::new(Duration::from_secs(60), Duration::from_secs(5), 3, 1000);
        for n in 0..5 {
            cache.insert(url(n), certificate(100), start + Duration::from_millis(n as u64));
        }
        assert_eq!((cache.n_entries(), cache.bytes()), (3, 300));
        assert!(matches!(cache.lookup(&url(0), start), Lookup::Miss), "the oldest went first");
        assert!(matches!(cache.lookup(&url(4), start), Lookup::Hit { .. }));
        cache.insert(url(9), certificate(900), start + Duration::from_secs(1));
        assert!(cache.bytes() <= 1000, "bytes bounded: {}", cache.bytes());
        cache.insert(url(10), certificate(2000), start);
        assert!(matches!(cache.lookup(&url(10), start), Lookup::Miss), "larger than the whole bound: not kept");
    }

    #[test]
    fn entries_expire_refresh_once_past_half_their_ttl_and_failures_are_held_briefly() {
        let start = Instant::now();
        let mut cache = Cache::new(Duration::from_secs(60), Duration::from_secs(5), 8, 10_000);
        cache.insert(url(1), certificate(10), start);
        assert!(matches!(cache.lookup(&url(1), start), Lookup::Hit { refresh: false, .. }));
        assert!(matches!(cache.lookup(&url(1), start + Duration::from_secs(31)), Lookup::Hit { refresh: true, .. }));
        assert!(matches!(cache.lookup(&url(1), start + Duration::from_secs(32)), Lookup::Hit { refresh: false, .. }));
        assert!(matches!(cache.lookup(&url(1), start + Duration::from_secs(60)), Lookup::Miss));
        cache.failed(url(2), start);
        assert!(matches!(cache.lookup(&url(2), start + Duration::from_secs(4)), Lookup::Failing));
        assert!(matches!(cache.lookup(&url(2), start + Duration::from_secs(5)), Lookup::Miss));
        assert_eq!(cache.bytes(), 0);
    }
}

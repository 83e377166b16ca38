//! The SNS subscription confirmations already made: a replayed capture of a genuine `SubscriptionConfirmation`
//! (valid for the scheme's timestamp window) is answered again without another `GET` of its `SubscribeURL`.
//! Remembered for [`REMEMBERED_FOR`] (twice SNS's default window of one hour, so past and future skew are both
//! covered), at most [`MAX_REMEMBERED`] of them (the oldest forgotten first). Only verified confirmations get
//! here, so nobody without a genuine SNS message can add to it.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use hookline_signature::fetched::KeyUrl;

pub const REMEMBERED_FOR: Duration = Duration::from_secs(2 * 3_600);
pub const MAX_REMEMBERED: usize = 256;

#[derive(Debug, Default)]
pub struct Confirmed {
    urls: Mutex<HashMap<KeyUrl, Instant>>,
}

impl Confirmed {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<KeyUrl, Instant>> {
        self.urls.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether `url` was confirmed within [`REMEMBERED_FOR`] of `now`.
    pub fn contains(&self, url: &KeyUrl, now: Instant) -> bool {
        self.lock().get(url).is_some_and(|at| now.saturating_duration_since(*at) < REMEMBERED_FOR)
    }

    /// Remembers that `url` was confirmed at `now`, forgetting expired ones, then the oldest past the bound.
    pub fn insert(&self, url: KeyUrl, now: Instant) {
        let mut urls = self.lock();
        urls.retain(|_, at| now.saturating_duration_since(*at) < REMEMBERED_FOR);
        while urls.len() >= MAX_REMEMBERED {
            let Some(oldest) = urls.iter().min_by_key(|(_, at)| **at).map(|(url, _)| url.clone()) else { break };
            urls.remove(&oldest);
        }
        urls.insert(url, now);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use hookline_signature::fetched::pin::{HostPin, Pins};

    use super::*;

    const PINS: Pins = Pins { hosts: &[HostPin::Exact("sns.example")], path_prefix: "/", path_suffix: "" };

    fn url(n: usize) -> KeyUrl {
        KeyUrl::pinned(&format!("https://sns.example/?Token={n}"), &PINS, "url").expect("pinned")
    }

    #[test]
    fn confirmations_are_remembered_for_the_window_and_bounded() {
        let start = Instant::now();
        let confirmed = Confirmed::default();
        confirmed.insert(url(0), start);
        assert!(confirmed.contains(&url(0), start + REMEMBERED_FOR - Duration::from_secs(1)));
        assert!(!confirmed.contains(&url(0), start + REMEMBERED_FOR));
        for n in 1..=MAX_REMEMBERED + 10 {
            confirmed.insert(url(n), start + Duration::from_millis(n as u64));
        }
        assert_eq!(confirmed.len(), MAX_REMEMBERED);
        assert!(!confirmed.contains(&url(1), start), "the oldest forgotten first");
        assert!(confirmed.contains(&url(MAX_REMEMBERED + 10), start + Duration::from_secs(1)));
    }
}

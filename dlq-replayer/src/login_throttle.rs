//! Wrong tokens per address, at the console's login form and on the JSON API (one throttle for both, so neither is
//! a way around the other): an address that keeps sending them is refused for a while without its token being
//! looked at, they are counted (`hookline_replayer_auth_failures_total{surface}`) and logged as one line per
//! interval.

use std::{
    collections::HashMap,
    net::IpAddr,
    sync::Mutex,
    time::{Duration, Instant},
};

use hookline_common::{peer::peer_key, telemetry::LogThrottle};

/// Wrong tokens an address may send per [`FAILURE_WINDOW`] before its logins are refused until the window ends.
const MAX_FAILURES: u32 = 10;
const FAILURE_WINDOW: Duration = Duration::from_secs(300);
/// Addresses tracked at most. When full (after dropping ended windows), an address not tracked yet is refused:
/// the table never fails open.
const MAX_TRACKED: usize = 10_000;

/// Wrong-token counts per address (keyed by [`peer_key`]: an IPv6 address by its /64, what one host can easily
/// hold).
#[derive(Debug)]
pub struct LoginThrottle {
    failures: Mutex<HashMap<IpAddr, (Instant, u32)>>,
    log: LogThrottle,
}

impl Default for LoginThrottle {
    fn default() -> Self {
        Self { failures: Mutex::default(), log: LogThrottle::new(Duration::from_secs(60)) }
    }
}

impl LoginThrottle {
    /// Whether `peer` may try a token now.
    pub(crate) fn admits(&self, peer: Option<IpAddr>, now: Instant) -> bool {
        let Some(peer) = peer.map(peer_key) else { return true };
        let mut failures = self.failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match failures.get(&peer) {
            Some((since, count)) if now.duration_since(*since) < FAILURE_WINDOW => *count < MAX_FAILURES,
            Some(_) => true,
            None if failures.len() < MAX_TRACKED => true,
            None => {
                failures.retain(|_, (since, _)| now.duration_since(*since) < FAILURE_WINDOW);
                failures.len() < MAX_TRACKED
            }
        }
    }

    /// Counts a wrong token from `peer` at `surface` (`console`, `api`), and logs a line if one is due.
    pub(crate) fn failed(&self, surface: &'static str, peer: Option<IpAddr>, now: Instant) {
        if let Some(peer) = peer {
            let mut failures = self.failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let full = failures.len() >= MAX_TRACKED;
            match failures.get_mut(&peer_key(peer)) {
                Some((since, count)) if now.duration_since(*since) < FAILURE_WINDOW => *count += 1,
                Some(entry) => *entry = (now, 1),
                None if !full => {
                    failures.insert(peer_key(peer), (now, 1));
                }
                None => {}
            }
        }
        if let Some(held_back) = self.log.admit("wrong token", now) {
            let peer = peer.map(|peer| peer.to_string()).unwrap_or_default();
            tracing::warn!(surface, peer = %peer, more_since_last_line = held_back, "a wrong token was presented");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_refused_after_its_wrong_tokens_until_its_window_ends() {
        let throttle = LoginThrottle::default();
        let now = Instant::now();
        let peer = Some("203.0.113.7".parse().unwrap());
        for _ in 0..MAX_FAILURES {
            assert!(throttle.admits(peer, now));
            throttle.failed("console", peer, now);
        }
        assert!(!throttle.admits(peer, now), "refused after {MAX_FAILURES} wrong tokens");
        assert!(throttle.admits(Some("203.0.113.8".parse().unwrap()), now), "another address is not");
        assert!(throttle.admits(peer, now + FAILURE_WINDOW), "the window ended");
    }

    #[test]
    fn an_ipv6_host_is_one_address_by_its_64() {
        let throttle = LoginThrottle::default();
        let now = Instant::now();
        for n in 0..MAX_FAILURES {
            throttle.failed("api", Some(format!("2001:db8:1:2::{n:x}").parse().unwrap()), now);
        }
        assert!(!throttle.admits(Some("2001:db8:1:2::ffff".parse().unwrap()), now));
        assert!(throttle.admits(Some("2001:db8:1:3::1".parse().unwrap()), now));
    }

    #[test]
    fn a_full_table_refuses_new_addresses_rather_than_forget_the_old() {
        let throttle = LoginThrottle::default();
        let now = Instant::now();
        for n in 0..MAX_TRACKED {
            let ip = std::net::Ipv4Addr::from(0x0a00_0000_u32 + u32::try_from(n).unwrap());
            throttle.failed("api", Some(IpAddr::V4(ip)), now);
        }
        assert!(!throttle.admits(Some("192.0.2.1".parse().unwrap()), now), "fails closed");
        assert!(throttle.admits(Some("192.0.2.1".parse().unwrap()), now + FAILURE_WINDOW), "ended windows make room");
    }
}

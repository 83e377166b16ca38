//! Wrong tokens per address, at the console's login form and on the JSON API (one throttle for both, so neither is
//! a way around the other). The token is looked at first: the right token is always accepted, from any address,
//! so that wrong tokens from an address (every client behind one proxy shares one) never lock out its operators.
//! A wrong token from an address that keeps sending them is answered 429 instead of 401 for the rest of its
//! window; they are counted (`hookline_replayer_auth_failures_total{surface}`) and logged as one line per
//! interval. The token has at least 32 random characters, so the throttle is for noise and detection, not what
//! makes guessing hopeless.

use std::{
    collections::HashMap,
    net::IpAddr,
    sync::Mutex,
    time::{Duration, Instant},
};

use hookline_common::{peer::peer_key, telemetry::LogThrottle};

/// Wrong tokens an address may send per [`FAILURE_WINDOW`] before the next are answered 429 until the window ends.
const MAX_FAILURES: u32 = 10;
const FAILURE_WINDOW: Duration = Duration::from_secs(300);
/// Addresses tracked at most. When full (after dropping ended windows), the addresses not tracked share one
/// budget of [`MAX_FAILURES`] times [`SHARED_BUDGET_FACTOR`] per window: the table never fails open, and a full
/// table refuses no one's right token.
const MAX_TRACKED: usize = 10_000;
const SHARED_BUDGET_FACTOR: u32 = 10;

/// Wrong-token counts per address (keyed by [`peer_key`]: an IPv6 address by its /64, what one host can easily
/// hold), and the shared count of the addresses a full table does not track.
#[derive(Debug)]
pub struct LoginThrottle {
    failures: Mutex<Failures>,
    log: LogThrottle,
}

#[derive(Debug, Default)]
struct Failures {
    by_peer: HashMap<IpAddr, (Instant, u32)>,
    untracked: Option<(Instant, u32)>,
}

impl Default for LoginThrottle {
    fn default() -> Self {
        Self { failures: Mutex::default(), log: LogThrottle::new(Duration::from_secs(60)) }
    }
}

/// A count still in its window at `now`, or none.
fn current(entry: Option<&(Instant, u32)>, now: Instant) -> u32 {
    entry.filter(|(since, _)| now.duration_since(*since) < FAILURE_WINDOW).map_or(0, |(_, count)| *count)
}

/// Adds one failure to `entry` at `now` (a new window when the last ended).
fn bump(entry: &mut (Instant, u32), now: Instant) {
    if now.duration_since(entry.0) < FAILURE_WINDOW {
        entry.1 += 1;
    } else {
        *entry = (now, 1);
    }
}

impl LoginThrottle {
    /// Counts a wrong token from `peer` at `surface` (`console`, `api`), logs a line if one is due, and returns
    /// whether the answer is 429 (the address, or the shared budget of untracked addresses, had spent its wrong
    /// tokens for the window before this one) rather than 401. Call it only once the token was found wrong.
    pub(crate) fn failed(&self, surface: &'static str, peer: Option<IpAddr>, now: Instant) -> bool {
        let throttled = peer.is_some_and(|peer| self.count(peer_key(peer), now));
        if let Some(held_back) = self.log.admit("wrong token", now) {
            let peer = peer.map(|peer| peer.to_string()).unwrap_or_default();
            tracing::warn!(surface, peer = %peer, more_since_last_line = held_back, "a wrong token was presented");
        }
        throttled
    }

    /// Counts one failure of `peer`; whether it was over its budget already.
    fn count(&self, peer: IpAddr, now: Instant) -> bool {
        let mut failures = self.failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !failures.by_peer.contains_key(&peer) && failures.by_peer.len() >= MAX_TRACKED {
            failures.by_peer.retain(|_, (since, _)| now.duration_since(*since) < FAILURE_WINDOW);
        }
        if let Some(entry) = failures.by_peer.get_mut(&peer) {
            let over = current(Some(entry), now) >= MAX_FAILURES;
            bump(entry, now);
            return over;
        }
        if failures.by_peer.len() < MAX_TRACKED {
            failures.by_peer.insert(peer, (now, 1));
            return false;
        }
        let over = current(failures.untracked.as_ref(), now) >= MAX_FAILURES * SHARED_BUDGET_FACTOR;
        bump(failures.untracked.get_or_insert((now, 0)), now);
        over
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_throttled_after_its_wrong_tokens_until_its_window_ends() {
        let throttle = LoginThrottle::default();
        let now = Instant::now();
        let peer = Some("203.0.113.7".parse().unwrap());
        for _ in 0..MAX_FAILURES {
            assert!(!throttle.failed("console", peer, now));
        }
        assert!(throttle.failed("console", peer, now), "throttled after {MAX_FAILURES} wrong tokens");
        assert!(!throttle.failed("console", Some("203.0.113.8".parse().unwrap()), now), "another address is not");
        assert!(!throttle.failed("console", peer, now + FAILURE_WINDOW), "the window ended");
    }

    #[test]
    fn an_ipv6_host_is_one_address_by_its_64() {
        let throttle = LoginThrottle::default();
        let now = Instant::now();
        for n in 0..MAX_FAILURES {
            throttle.failed("api", Some(format!("2001:db8:1:2::{n:x}").parse().unwrap()), now);
        }
        assert!(throttle.failed("api", Some("2001:db8:1:2::ffff".parse().unwrap()), now));
        assert!(!throttle.failed("api", Some("2001:db8:1:3::1".parse().unwrap()), now));
    }

    #[test]
    fn a_full_table_shares_one_budget_among_new_addresses_rather_than_forget_the_old() {
        let throttle = LoginThrottle::default();
        let now = Instant::now();
        let tracked = Some(IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000_u32)));
        for n in 0..MAX_TRACKED {
            let ip = std::net::Ipv4Addr::from(0x0a00_0000_u32 + u32::try_from(n).unwrap());
            throttle.failed("api", Some(IpAddr::V4(ip)), now);
        }
        // New addresses: not refused outright, but they share one budget.
        for n in 0..MAX_FAILURES * SHARED_BUDGET_FACTOR {
            let ip = std::net::Ipv4Addr::from(0xc000_0200_u32 + n);
            assert!(!throttle.failed("api", Some(IpAddr::V4(ip)), now), "new address {n}");
        }
        assert!(throttle.failed("api", Some("198.51.100.1".parse().unwrap()), now), "the shared budget is spent");
        // The tracked addresses keep their own counts.
        for _ in 1..MAX_FAILURES {
            assert!(!throttle.failed("api", tracked, now));
        }
        assert!(throttle.failed("api", tracked, now));
        assert!(
            !throttle.failed("api", Some("198.51.100.1".parse().unwrap()), now + FAILURE_WINDOW),
            "ended windows make room"
        );
    }
}

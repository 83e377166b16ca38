//! Requests in progress, over all clients and per client address, counted from when a request's head has arrived
//! until its answer: an HTTP/2 stream that waits for a body that never comes counts all the while.
//!
//! The total (`limits.max_requests_in_progress`) bounds the heads the gateway holds; the share of one address
//! (`limits.max_requests_in_progress_per_peer`, keyed by [`peer_key`]: an IPv6 host's whole /64 is one address)
//! keeps one flooding address from taking the total, and with it every other client's answer. Past either, a
//! request is answered 503 `too_many_requests_in_progress` with `Retry-After` at once. The table holds only
//! addresses with a request in progress, so it never holds more than the total.

use std::{collections::HashMap, net::IpAddr, sync::Mutex};

use hookline_common::peer::peer_key;

use crate::error::Rejection;

#[derive(Debug)]
pub struct InProgress {
    max_total: usize,
    max_per_peer: usize,
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_peer: HashMap<IpAddr, usize>,
}

/// One request in progress; given back when dropped.
#[derive(Debug)]
pub struct Slot<'a> {
    owner: &'a InProgress,
    peer: Option<IpAddr>,
}

impl InProgress {
    pub fn new(max_total: usize, max_per_peer: usize) -> Self {
        Self { max_total: max_total.max(1), max_per_peer: max_per_peer.max(1), counts: Mutex::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A slot for a request from `peer` (`None`: no address known, counted in the total only), or the refusal.
    pub fn take(&self, peer: Option<IpAddr>) -> Result<Slot<'_>, Rejection> {
        let peer = peer.map(peer_key);
        let mut counts = self.lock();
        let from_peer = peer.and_then(|peer| counts.per_peer.get(&peer).copied()).unwrap_or(0);
        if counts.total >= self.max_total || from_peer >= self.max_per_peer {
            return Err(Rejection::TooManyRequestsInProgress);
        }
        counts.total += 1;
        if let Some(peer) = peer {
            counts.per_peer.insert(peer, from_peer + 1);
        }
        Ok(Slot { owner: self, peer })
    }

    /// Requests in progress now: in all, and from `peer`'s address.
    pub fn counts(&self, peer: IpAddr) -> (usize, usize) {
        let counts = self.lock();
        (counts.total, counts.per_peer.get(&peer_key(peer)).copied().unwrap_or(0))
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut counts = self.owner.lock();
        counts.total -= 1;
        let Some(peer) = self.peer else { return };
        let remaining = counts.per_peer.get(&peer).map_or(0, |count| count.saturating_sub(1));
        if remaining == 0 {
            counts.per_peer.remove(&peer);
        } else {
            counts.per_peer.insert(peer, remaining);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> Option<IpAddr> {
        Some(text.parse().expect("an address"))
    }

    #[test]
    fn one_address_takes_its_share_and_no_more_and_the_rest_stays_for_others() {
        let in_progress = InProgress::new(10, 3);
        let flood: Vec<Slot<'_>> = (0..3).map(|_| in_progress.take(ip("192.0.2.1")).expect("within")).collect();
        assert!(matches!(in_progress.take(ip("192.0.2.1")), Err(Rejection::TooManyRequestsInProgress)));
        // Another host of the same IPv6 /64 is the same address; another /64 is another.
        let v6: Vec<Slot<'_>> = (0..3).map(|n| in_progress.take(ip(&format!("2001:db8::{n}"))).expect("a")).collect();
        assert!(in_progress.take(ip("2001:db8::ffff")).is_err(), "one /64, one share");
        let others: Vec<Slot<'_>> = (0..4).map(|n| in_progress.take(ip(&format!("198.51.100.{n}"))).unwrap()).collect();
        assert_eq!(in_progress.counts("192.0.2.1".parse().unwrap()), (10, 3));
        assert!(in_progress.take(ip("203.0.113.9")).is_err(), "the total is reached");
        drop(flood);
        assert_eq!(in_progress.counts("192.0.2.1".parse().unwrap()), (7, 0), "given back when dropped");
        assert!(in_progress.take(None).is_ok(), "an unknown address counts in the total only");
        assert!(in_progress.lock().per_peer.len() <= 10, "only addresses with a request in progress");
        drop((v6, others));
        assert_eq!(in_progress.lock().total, 0);
        assert!(in_progress.lock().per_peer.is_empty());
    }
}

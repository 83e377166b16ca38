//! A request rate per client address, enforced before routing, reading the body or verifying anything.
//!
//! Refusing a forged request is cheap, but not free: parsing it, routing it and answering it cost about what any
//! small request costs, so a flood of them at several thousand requests per second still takes CPU from every
//! other source. Flooders send from few addresses and providers from many, each at modest rates, so a rate per
//! address bounds what one address can cost without slowing anyone else.
//!
//! The limit is a generic cell rate ([`crate::gcra`]): each address has a theoretical arrival time that each
//! admitted request pushes one interval (`1 / rate`) ahead, with `burst` requests of tolerance. A request over the
//! rate is not refused at once: it waits for its turn, up to `max_wait`, which paces a keep-alive connection (the next
//! request is not read until this one is answered) at no cost but a timer. A request whose turn is further away
//! than that is held for `max_wait` all the same and then answered 429 with `Retry-After`, so a connection over
//! the limit gets through at most one request per `max_wait`, and holding it costs the attacker a connection slot
//! (see `limits.max_connections_per_peer`) rather than costing us CPU. Refused requests take no turn: an address
//! that stays under the rate is never refused.
//!
//! A request that fails signature verification costs its address [`FAILED_VERIFICATION_TURNS`] turns instead of
//! one: a forger's requests are the expensive ones (a public-key verification costs up to 20 HMACs), and a
//! provider's are almost never forged, so an address that sends forgeries is slowed to a tenth of the rate while
//! one that sends valid requests is not slowed at all.
//!
//! Addresses are counted by [`peer_key`]: an IPv6 host, which usually holds a whole /64, is one peer. The table
//! never fails open: once it holds [`MAX_TRACKED_PEERS`] addresses with turns pending, every address not in it
//! shares one overflow cell, so a flood of fresh addresses is limited as one peer, never admitted unlimited.
//!
//! Behind a proxy or load balancer every client shares the proxy's address: leave the limit off there
//! (`peer_rate_per_s = 0`, the default) and rate-limit at the proxy.

use std::{
    collections::HashMap,
    net::IpAddr,
    sync::Mutex,
    time::{Duration, Instant},
};

use hookline_common::peer::peer_key;

use crate::gcra::Gcra;

/// Addresses tracked at once; past it, addresses with no pending turn are forgotten (at most once a second), and
/// new addresses share the one overflow cell until there is room.
const MAX_TRACKED_PEERS: usize = 65_536;
const PRUNE_INTERVAL: Duration = Duration::from_secs(1);

/// Turns a request that failed verification costs its address, its own included.
pub const FAILED_VERIFICATION_TURNS: u32 = 10;

/// What to do with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Within the rate: serve it now.
    Now,
    /// Over the rate but within `max_wait`: serve it after this long.
    After(Duration),
    /// Too far over the rate: hold the connection for this long, then answer 429.
    Refuse(Duration),
}

#[derive(Debug)]
pub struct PeerLimiter {
    rate: Gcra,
    max_wait: Duration,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Per address ([`peer_key`]): the time from which its next request would be within the rate with no burst
    /// left.
    arrivals: HashMap<IpAddr, Instant>,
    /// The same, for every address that found the table full: they are limited together, as one peer.
    overflow: Option<Instant>,
    last_prune: Instant,
}

/// Which cell a request is counted in.
enum Cell {
    Peer(IpAddr),
    Overflow,
}

impl State {
    /// The cell `peer` is counted in: its own, or the overflow cell when it has none and the table is full.
    fn cell_of(&self, peer: IpAddr) -> Cell {
        if self.arrivals.contains_key(&peer) || self.arrivals.len() < MAX_TRACKED_PEERS {
            Cell::Peer(peer)
        } else {
            Cell::Overflow
        }
    }

    fn arrival(&self, cell: &Cell) -> Option<Instant> {
        match cell {
            Cell::Peer(peer) => self.arrivals.get(peer).copied(),
            Cell::Overflow => self.overflow,
        }
    }

    fn set_arrival(&mut self, cell: Cell, arrival: Instant) {
        match cell {
            Cell::Peer(peer) => {
                self.arrivals.insert(peer, arrival);
            }
            Cell::Overflow => self.overflow = Some(arrival),
        }
    }
}

impl PeerLimiter {
    /// `None` when `rate_per_s` is not positive (the limit is off).
    pub fn new(rate_per_s: f64, burst: u32, max_wait: Duration, now: Instant) -> Option<Self> {
        Some(Self {
            rate: Gcra::new(rate_per_s, burst)?,
            max_wait,
            state: Mutex::new(State { arrivals: HashMap::new(), overflow: None, last_prune: now }),
        })
    }

    /// Decides one request from `peer` arriving at `now`, taking its turn unless it is refused.
    pub fn admit(&self, peer: IpAddr, now: Instant) -> Admission {
        let peer = peer_key(peer);
        let mut state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if state.arrivals.len() >= MAX_TRACKED_PEERS && now.duration_since(state.last_prune) >= PRUNE_INTERVAL {
            state.arrivals.retain(|_, arrival| *arrival > now);
            state.last_prune = now;
        }
        let cell = state.cell_of(peer);
        let arrival = state.arrival(&cell);
        let wait = self.rate.wait(arrival, now);
        if wait > self.max_wait {
            return Admission::Refuse(self.max_wait);
        }
        state.set_arrival(cell, self.rate.take(arrival, now, 1));
        if wait.is_zero() { Admission::Now } else { Admission::After(wait) }
    }

    /// Charges `peer` for a request that failed verification: [`FAILED_VERIFICATION_TURNS`] turns in all (one
    /// was taken when it was admitted), from `now` at the earliest.
    pub fn charge_failed_verification(&self, peer: IpAddr, now: Instant) {
        let mut state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let cell = state.cell_of(peer_key(peer));
        if let Some(arrival) = state.arrival(&cell) {
            state.set_arrival(cell, self.rate.take(Some(arrival), now, FAILED_VERIFICATION_TURNS - 1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 2));

    #[test]
    fn the_limit_is_off_without_a_positive_rate() {
        let now = Instant::now();
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(PeerLimiter::new(rate, 10, Duration::from_secs(1), now).is_none(), "{rate}");
        }
    }

    #[test]
    fn a_burst_passes_then_requests_are_paced_then_refused_without_taking_a_turn() {
        let now = Instant::now();
        // 10/s, burst 5, waits up to 300 ms.
        let limiter = PeerLimiter::new(10.0, 5, Duration::from_millis(300), now).expect("on");
        for n in 0..5 {
            assert_eq!(limiter.admit(A, now), Admission::Now, "burst request {n}");
        }
        // Turns at 100, 200, 300 ms: waited for.
        for n in 1..=3u64 {
            assert_eq!(limiter.admit(A, now), Admission::After(Duration::from_millis(100 * n)), "paced request {n}");
        }
        // The next turn is 400 ms away: refused after being held, and it takes no turn.
        assert_eq!(limiter.admit(A, now), Admission::Refuse(Duration::from_millis(300)));
        assert_eq!(limiter.admit(A, now), Admission::Refuse(Duration::from_millis(300)));
        // Another address is not affected.
        assert_eq!(limiter.admit(B, now), Admission::Now);
        // 400 ms later A's turns have caught up by four: the next waits only for the one before it.
        let later = now + Duration::from_millis(400);
        assert_eq!(limiter.admit(A, later), Admission::Now);
        assert_eq!(limiter.admit(A, later), Admission::After(Duration::from_millis(100)));
    }

    #[test]
    fn a_failed_verification_costs_its_address_ten_turns() {
        let now = Instant::now();
        // 10/s, no burst, waits up to 2 s.
        let limiter = PeerLimiter::new(10.0, 1, Duration::from_secs(2), now).expect("on");
        assert_eq!(limiter.admit(A, now), Admission::Now);
        limiter.charge_failed_verification(A, now);
        // A's next turn is ten intervals after its first, not one; B, charged nothing, is paced one interval apart.
        let next = [A, B, B].map(|peer| limiter.admit(peer, now));
        let expected =
            [Admission::After(Duration::from_secs(1)), Admission::Now, Admission::After(Duration::from_millis(100))];
        assert_eq!(next, expected);
    }

    #[test]
    fn an_address_under_the_rate_is_never_delayed() {
        let start = Instant::now();
        let limiter = PeerLimiter::new(100.0, 1, Duration::from_millis(50), start).expect("on");
        for n in 0..1_000u32 {
            let at = start + Duration::from_millis(10) * n;
            assert_eq!(limiter.admit(A, at), Admission::Now, "request {n}");
        }
    }

    #[test]
    fn tracked_addresses_stay_bounded_and_fresh_ones_past_the_table_share_one_cell() {
        let start = Instant::now();
        // 10/s, no burst, no wait: each cell admits one request per 100 ms.
        let limiter = PeerLimiter::new(10.0, 1, Duration::ZERO, start).expect("on");
        let fresh = |n: u32| IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + n));
        let n_addresses = 70_000;
        let admitted = (0..n_addresses).filter(|&n| limiter.admit(fresh(n), start) == Admission::Now).count();
        // Every tracked address once, and the overflow cell once: not the 70,000 an untracked address would get.
        assert_eq!(admitted, MAX_TRACKED_PEERS + 1);
        assert_eq!(limiter.state.lock().expect("lock").arrivals.len(), MAX_TRACKED_PEERS);
        // Within the overflow cell's interval, fresh addresses get nothing more, however many.
        let soon = start + Duration::from_millis(50);
        let admitted_soon =
            (n_addresses..n_addresses + 10_000).filter(|&n| limiter.admit(fresh(n), soon) == Admission::Now);
        assert_eq!(admitted_soon.count(), 0);
        // One interval later, the overflow cell's next turn: exactly one of them.
        let next = start + Duration::from_millis(100);
        let admitted_next =
            (n_addresses..n_addresses + 10_000).filter(|&n| limiter.admit(fresh(n), next) == Admission::Now);
        assert_eq!(admitted_next.count(), 1);
        // Once the tracked addresses' turns have passed they are forgotten, and new addresses are tracked again.
        let later = start + Duration::from_secs(2);
        let newcomer = IpAddr::V4(std::net::Ipv4Addr::new(198, 51, 100, 7));
        assert_eq!(limiter.admit(newcomer, later), Admission::Now);
        assert_eq!(limiter.admit(newcomer, later), Admission::Refuse(Duration::ZERO));
        assert!(limiter.state.lock().expect("lock").arrivals.contains_key(&newcomer));
    }

    #[test]
    fn an_ipv6_flood_from_one_64_is_one_peer() {
        let now = Instant::now();
        // 10/s, burst 5, no wait.
        let limiter = PeerLimiter::new(10.0, 5, Duration::ZERO, now).expect("on");
        let admitted = (0..1_000u16)
            .map(|n| IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 1, 2, n, n, 0, 1)))
            .filter(|&peer| limiter.admit(peer, now) == Admission::Now)
            .count();
        assert_eq!(admitted, 5, "one burst for the whole /64");
        let neighbour = IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 1, 3, 0, 0, 0, 1));
        assert_eq!(limiter.admit(neighbour, now), Admission::Now, "another /64 is another peer");
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(limiter.admit(A, now), Admission::Now);
        for _ in 0..4 {
            assert_eq!(limiter.admit(mapped, now), Admission::Now);
        }
        assert_eq!(limiter.admit(mapped, now), Admission::Refuse(Duration::ZERO), "an IPv4-mapped address is its IPv4");
    }
}

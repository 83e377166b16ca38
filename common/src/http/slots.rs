//! The connection caps of one listener, and the answer a connection gets past them.
//!
//! Past `max_connections` (and the probe slots) a new connection is closed as soon as it is accepted: the
//! listener is full, and the cheapest answer is the right one. Past `max_connections_per_peer` while the listener
//! still has room, the peer is most likely a provider delivering faster than we answer (a slow broker holds its
//! requests): it gets a minimal `503 Service Unavailable` with `Retry-After: 1` and `Connection: close`, written
//! at once without reading its request, so it retries later instead of seeing a reset it may count as a failed
//! delivery. That answer is bounded so a connection flood still costs little: at most
//! [`MAX_REFUSALS_PER_PEER`] such answers in progress per peer and [`MAX_REFUSALS`] in all (past those, closed
//! at once), each a fixed 100-byte write, then up to [`MAX_DISCARD_BYTES`] of the request read and thrown away
//! within [`REFUSAL_TIME`] (closing a socket with unread bytes sends a reset, which can destroy the answer before
//! the client reads it).

use std::{
    collections::HashMap,
    net::IpAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// The whole answer past a peer's cap.
pub const BUSY_RESPONSE: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
/// Refusals in progress per peer at most; past it, closed at once.
pub const MAX_REFUSALS_PER_PEER: usize = 8;
/// Refusals in progress on a listener at most; past it, closed at once.
pub const MAX_REFUSALS: usize = 128;
/// How long a refusal may take in all (write the answer, read what the client sent until it closes).
pub const REFUSAL_TIME: Duration = Duration::from_secs(1);
/// How much of a refused client's request is read (and discarded) at most before the connection is closed.
pub const MAX_DISCARD_BYTES: usize = 64 * 1024;

/// The caps, in total and per peer, a peer being its [`crate::peer::peer_key`] (an IPv6 host by its /64). The
/// per-peer tables hold only peers with a connection open or a refusal in progress, so they never hold more than
/// `max_total + probe_slots + MAX_REFUSALS` entries and need no overflow: they never fail open.
#[derive(Debug, Clone)]
pub(super) struct ConnectionSlots {
    max_total: usize,
    max_per_peer: usize,
    probe_slots: usize,
    open: Arc<Mutex<SlotCounts>>,
}

#[derive(Debug, Default)]
struct SlotCounts {
    total: usize,
    probes: usize,
    per_peer: HashMap<IpAddr, usize>,
    refusing: usize,
    refusing_per_peer: HashMap<IpAddr, usize>,
}

/// What becomes of an accepted connection.
#[derive(Debug)]
pub(super) enum Admission {
    /// Served, in this slot (a full one, or a probes-only one when the listener is full).
    Serve(ConnectionSlot),
    /// Answered 503 and closed: its peer is at its cap, the listener is not.
    Refuse(Refusal),
    /// Closed at once.
    Close,
}

impl ConnectionSlots {
    pub(super) fn new(max_total: usize, max_per_peer: usize, probe_slots: usize) -> Self {
        Self { max_total: max_total.max(1), max_per_peer: max_per_peer.max(1), probe_slots, open: Arc::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SlotCounts> {
        self.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// What to do with a connection from `peer`.
    pub(super) fn take(&self, peer: IpAddr) -> Admission {
        let peer = crate::peer::peer_key(peer);
        let mut counts = self.lock();
        let from_peer = counts.per_peer.get(&peer).copied().unwrap_or(0);
        if from_peer >= self.max_per_peer {
            let refusing_peer = counts.refusing_per_peer.get(&peer).copied().unwrap_or(0);
            if counts.total >= self.max_total
                || counts.refusing >= MAX_REFUSALS
                || refusing_peer >= MAX_REFUSALS_PER_PEER
            {
                return Admission::Close;
            }
            counts.refusing += 1;
            counts.refusing_per_peer.insert(peer, refusing_peer + 1);
            return Admission::Refuse(Refusal { open: self.open.clone(), peer });
        }
        let probes_only = if counts.total < self.max_total {
            counts.total += 1;
            false
        } else if counts.probes < self.probe_slots {
            counts.probes += 1;
            true
        } else {
            return Admission::Close;
        };
        counts.per_peer.insert(peer, from_peer + 1);
        Admission::Serve(ConnectionSlot { open: self.open.clone(), peer, probes_only })
    }
}

/// One open connection's place under the caps, given back when it closes.
#[derive(Debug)]
pub(super) struct ConnectionSlot {
    open: Arc<Mutex<SlotCounts>>,
    peer: IpAddr,
    /// Taken past `max_connections`: serves probes only.
    pub(super) probes_only: bool,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut counts = self.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if self.probes_only {
            counts.probes = counts.probes.saturating_sub(1);
        } else {
            counts.total = counts.total.saturating_sub(1);
        }
        release(&mut counts.per_peer, self.peer);
    }
}

/// One refusal in progress: its place under [`MAX_REFUSALS`] and [`MAX_REFUSALS_PER_PEER`], given back when done.
#[derive(Debug)]
pub(super) struct Refusal {
    open: Arc<Mutex<SlotCounts>>,
    peer: IpAddr,
}

impl Refusal {
    /// Writes [`BUSY_RESPONSE`], ends the sending side, and reads what the client sends until it closes (at most
    /// [`MAX_DISCARD_BYTES`], within [`REFUSAL_TIME`] in all), then closes.
    pub(super) async fn answer(self, mut stream: TcpStream) {
        let _ = tokio::time::timeout(REFUSAL_TIME, async {
            stream.write_all(BUSY_RESPONSE).await?;
            stream.shutdown().await?;
            let mut buffer = [0_u8; 4096];
            let mut discarded = 0;
            while discarded < MAX_DISCARD_BYTES {
                match stream.read(&mut buffer).await? {
                    0 => break,
                    n => discarded += n,
                }
            }
            Ok::<_, std::io::Error>(())
        })
        .await;
        drop(self);
    }
}

impl Drop for Refusal {
    fn drop(&mut self) {
        let mut counts = self.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        counts.refusing = counts.refusing.saturating_sub(1);
        release(&mut counts.refusing_per_peer, self.peer);
    }
}

fn release(per_peer: &mut HashMap<IpAddr, usize>, peer: IpAddr) {
    if let Some(count) = per_peer.get_mut(&peer) {
        *count -= 1;
        if *count == 0 {
            per_peer.remove(&peer);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, SocketAddr};

    use http::{Response, StatusCode};
    use tokio::{net::TcpSocket, sync::Notify};
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::http::{Body, ServeLimits, serve};

    const PER_PEER: usize = 2;

    /// A connection from `127.0.0.<host>` (all of 127/8 is loopback on Linux).
    async fn connect_from(host: u8, server: SocketAddr) -> TcpStream {
        let socket = TcpSocket::new_v4().expect("socket");
        socket.bind(SocketAddr::from((Ipv4Addr::new(127, 0, 0, host), 0))).expect("bind a loopback address");
        socket.connect(server).await.expect("connect")
    }

    async fn send_request(stream: &mut TcpStream) {
        stream.write_all(b"POST /webhooks/x HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}").await.expect("write");
    }

    /// Everything the server sends until it closes, within 5 s.
    async fn read_to_close(stream: &mut TcpStream) -> String {
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer))
            .await
            .expect("the server closes within 5 s")
            .expect("closed, not reset");
        String::from_utf8_lossy(&answer).into_owned()
    }

    /// A server whose requests wait until `release`; each answer is 202.
    async fn held_server(max_connections: usize) -> (SocketAddr, Arc<Notify>, CancellationToken) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let release = Arc::new(Notify::new());
        let held = release.clone();
        let handler = move |_request: http::Request<hyper::body::Incoming>| {
            let held = held.clone();
            async move {
                held.notified().await;
                Response::builder().status(StatusCode::ACCEPTED).body(Body::default()).expect("response")
            }
        };
        let limits = ServeLimits { max_connections, max_connections_per_peer: PER_PEER, ..ServeLimits::default() };
        let shutdown = CancellationToken::new();
        tokio::spawn(serve(listener, handler, limits, shutdown.clone()));
        (addr, release, shutdown)
    }

    #[tokio::test]
    async fn a_peer_over_its_cap_is_answered_503_with_retry_after_while_other_peers_are_served() {
        let (server, release, shutdown) = held_server(64).await;
        // Peer 127.0.0.2 fills its cap with requests the server holds.
        let mut held = Vec::new();
        for _ in 0..PER_PEER {
            let mut stream = connect_from(2, server).await;
            send_request(&mut stream).await;
            held.push(stream);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Its next connections, with or without a request sent, are told to come back.
        for send_first in [true, false] {
            let mut over = connect_from(2, server).await;
            if send_first {
                send_request(&mut over).await;
            }
            let answer = read_to_close(&mut over).await;
            assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
            assert!(answer.contains("retry-after: 1\r\n") && answer.contains("connection: close\r\n"), "{answer}");
        }
        // Other peers are under their own caps: served.
        for host in [3, 4] {
            let mut stream = connect_from(host, server).await;
            send_request(&mut stream).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            release.notify_waiters();
            let mut head = [0_u8; 12];
            stream.read_exact(&mut head).await.expect("an answer");
            assert_eq!(&head, b"HTTP/1.1 202", "peer 127.0.0.{host}");
        }
        drop(held);
        shutdown.cancel();
    }

    #[tokio::test]
    async fn a_connection_flood_from_one_peer_costs_a_bounded_number_of_refusals() {
        let (server, _release, shutdown) = held_server(64).await;
        let mut held = Vec::new();
        for _ in 0..PER_PEER {
            let mut stream = connect_from(5, server).await;
            send_request(&mut stream).await;
            held.push(stream);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Many connections that never read nor close: only MAX_REFUSALS_PER_PEER of them can hold a refusal, the
        // rest are closed at once (and the ones holding one are closed by REFUSAL_TIME).
        let mut flood = Vec::new();
        for _ in 0..4 * MAX_REFUSALS_PER_PEER {
            flood.push(connect_from(5, server).await);
        }
        let mut answered = 0;
        let mut closed_at_once = 0;
        for mut stream in flood {
            let mut answer = Vec::new();
            match tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await {
                Ok(_) if answer.starts_with(b"HTTP/1.1 503") => answered += 1,
                Ok(_) => closed_at_once += 1,
                Err(_) => panic!("a flood connection was held past the refusal time"),
            }
        }
        assert!((1..=2 * MAX_REFUSALS_PER_PEER).contains(&answered), "{answered} answered, {closed_at_once} closed");
        assert_eq!(closed_at_once + answered, 4 * MAX_REFUSALS_PER_PEER);
        drop(held);
        shutdown.cancel();
    }

    /// The slot of a served connection, if it is served.
    fn served(admission: Admission) -> Option<ConnectionSlot> {
        match admission {
            Admission::Serve(slot) => Some(slot),
            Admission::Refuse(_) | Admission::Close => None,
        }
    }

    #[test]
    fn connections_from_one_ipv6_64_count_as_one_peer() {
        let slots = ConnectionSlots::new(100, 3, 0);
        let host = |n: u16| IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 7, 7, n, 0, 0, n));
        let held: Vec<ConnectionSlot> = (1..=3).map(|n| served(slots.take(host(n))).expect("within the cap")).collect();
        assert!(served(slots.take(host(4))).is_none(), "a fourth address of the same /64 is the same peer");
        let other = IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 7, 8, 0, 0, 0, 1));
        assert!(served(slots.take(other)).is_some(), "another /64 is another peer");
        drop(held);
        assert!(served(slots.take(host(4))).is_some(), "given back on close");
        let mapped: IpAddr = "::ffff:192.0.2.9".parse().unwrap();
        let v4: IpAddr = "192.0.2.9".parse().unwrap();
        let held: Vec<ConnectionSlot> = [v4, v4, mapped].into_iter().filter_map(|ip| served(slots.take(ip))).collect();
        assert_eq!(held.len(), 3);
        assert!(served(slots.take(v4)).is_none(), "an IPv4-mapped address is its IPv4 address");
    }

    #[test]
    fn past_the_total_cap_a_peer_at_its_own_cap_is_closed_not_answered() {
        let slots = ConnectionSlots::new(2, 2, 0);
        let peer = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
        let _held = [served(slots.take(peer)), served(slots.take(peer))];
        assert!(matches!(slots.take(peer), Admission::Close), "the listener is full: the cheapest answer");
    }

    #[test]
    fn refusals_are_bounded_per_peer_and_in_all_and_given_back() {
        let slots = ConnectionSlots::new(1_000, 1, 0);
        let peer = |host: u8| IpAddr::V4(Ipv4Addr::new(127, 0, 0, host));
        let _served = match slots.take(peer(2)) {
            Admission::Serve(slot) => slot,
            other => panic!("{other:?}"),
        };
        let refusals: Vec<Admission> = (0..MAX_REFUSALS_PER_PEER).map(|_| slots.take(peer(2))).collect();
        assert!(refusals.iter().all(|admission| matches!(admission, Admission::Refuse(_))));
        assert!(matches!(slots.take(peer(2)), Admission::Close), "past the per-peer refusal bound");
        drop(refusals);
        assert!(matches!(slots.take(peer(2)), Admission::Refuse(_)), "refusal slots are given back");
        // In all: peers at their cap, MAX_REFUSALS refusals at once.
        let mut held = Vec::new();
        for host in 10..=255_u8 {
            held.push(slots.take(peer(host)));
            for _ in 0..MAX_REFUSALS_PER_PEER {
                held.push(slots.take(peer(host)));
            }
        }
        let refusing = held.iter().filter(|admission| matches!(admission, Admission::Refuse(_))).count();
        assert_eq!(refusing, MAX_REFUSALS);
    }
}

//! The connection caps of one listener, and the answer a connection gets past them.
//!
//! Past `max_connections_per_peer`, or past `max_connections` (and the probe slots), a new connection gets a
//! minimal `503 Service Unavailable` with `Retry-After: 1` and `Connection: close`, written at once without reading
//! its request: the peer is most likely a provider delivering faster than we answer (a slow broker holds its
//! requests), and it retries later instead of seeing a reset it may count as a failed delivery. The connection is
//! then closed the lingering way ([`super::linger`]): what the client sends is read and discarded until it closes,
//! at most [`MAX_DISCARD_BYTES`] within [`REFUSAL_TIME`], so it reads the answer instead of a reset or a failed
//! write of its body.
//!
//! Every such connection is answered, and a flood still costs little: a refusal is a fixed 100-byte write, one
//! read of the request and the close (measured in `docs/benchmarks/security.md`), and at most [`MAX_REFUSALS`]
//! are in progress on a listener. When all are taken the accept loop waits for one to end (each ends within
//! [`REFUSAL_TIME`]): new connections wait in the kernel's accept queue meanwhile, answered late rather than
//! reset. A flood of clients that never read nor close thus slows every client's accept to `MAX_REFUSALS` per
//! `REFUSAL_TIME`, and holds at most `MAX_REFUSALS` file descriptors beyond the caps.

use std::{
    collections::HashMap,
    net::IpAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::{
    io::AsyncWriteExt,
    net::TcpStream,
    sync::{OwnedSemaphorePermit, Semaphore},
};

use super::linger::{self, Linger};

/// The whole answer past a cap.
pub const BUSY_RESPONSE: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
/// Refusals in progress on a listener at most; past it, the accept loop waits for one to end.
pub const MAX_REFUSALS: usize = 2048;
/// How long a refusal may take in all (write the answer, read what the client sent until it closes): nginx's
/// `lingering_timeout`. A client far away or on a busy host may write its request a second or more after its
/// connection was accepted, and a close before it has resets it.
pub const REFUSAL_TIME: Duration = Duration::from_secs(5);
/// How much of a refused client's request is read (and discarded) at most before the connection is closed.
pub const MAX_DISCARD_BYTES: usize = 64 * 1024;

/// The caps, in total and per peer, a peer being its [`crate::peer::peer_key`] (an IPv6 host by its /64). The
/// per-peer table holds only peers with a connection open, so it never holds more than `max_total + probe_slots`
/// entries and needs no overflow: it never fails open.
#[derive(Debug, Clone)]
pub(super) struct ConnectionSlots {
    max_total: usize,
    max_per_peer: usize,
    probe_slots: usize,
    open: Arc<Mutex<SlotCounts>>,
    refusals: Arc<Semaphore>,
}

#[derive(Debug, Default)]
struct SlotCounts {
    total: usize,
    probes: usize,
    per_peer: HashMap<IpAddr, usize>,
}

/// What becomes of an accepted connection.
#[derive(Debug)]
pub(super) enum Admission {
    /// Served, in this slot (a full one, or a probes-only one when the listener is full).
    Serve(ConnectionSlot),
    /// Answered 503 and closed, once a [`Refusal`] is free: its peer is at its cap, or the listener is full.
    Refuse,
}

impl ConnectionSlots {
    pub(super) fn new(max_total: usize, max_per_peer: usize, probe_slots: usize) -> Self {
        Self {
            max_total: max_total.max(1),
            max_per_peer: max_per_peer.max(1),
            probe_slots,
            open: Arc::default(),
            refusals: Arc::new(Semaphore::new(MAX_REFUSALS)),
        }
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
            return Admission::Refuse;
        }
        let probes_only = if counts.total < self.max_total {
            counts.total += 1;
            false
        } else if counts.probes < self.probe_slots {
            counts.probes += 1;
            true
        } else {
            return Admission::Refuse;
        };
        counts.per_peer.insert(peer, from_peer + 1);
        Admission::Serve(ConnectionSlot { open: self.open.clone(), peer, probes_only })
    }

    /// A place under [`MAX_REFUSALS`]: at once when one is free, else once a refusal in progress ends.
    pub(super) async fn refusal(&self) -> Refusal {
        Refusal { _permit: self.refusals.clone().acquire_owned().await.ok() }
    }

    /// A place under [`MAX_REFUSALS`] if one is free now.
    #[cfg(test)]
    fn try_refusal(&self) -> Option<Refusal> {
        self.refusals.clone().try_acquire_owned().ok().map(|permit| Refusal { _permit: Some(permit) })
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
        if let Some(count) = counts.per_peer.get_mut(&self.peer) {
            *count -= 1;
            if *count == 0 {
                counts.per_peer.remove(&self.peer);
            }
        }
    }
}

/// One refusal in progress: its place under [`MAX_REFUSALS`], given back when done. (The semaphore is never
/// closed, so the permit is always there.)
#[derive(Debug)]
pub(super) struct Refusal {
    _permit: Option<OwnedSemaphorePermit>,
}

impl Refusal {
    /// Writes [`BUSY_RESPONSE`], then closes the lingering way: ends the sending side and reads what the client
    /// sends until it closes (at most [`MAX_DISCARD_BYTES`], within [`REFUSAL_TIME`] in all).
    pub(super) async fn answer(self, mut stream: TcpStream) {
        let started = tokio::time::Instant::now();
        // A new socket's send buffer always has room for 100 bytes: this completes at once.
        if tokio::time::timeout(REFUSAL_TIME, stream.write_all(BUSY_RESPONSE))
            .await
            .is_ok_and(|written| written.is_ok())
        {
            let max_time = REFUSAL_TIME.saturating_sub(started.elapsed());
            linger::close(stream, Linger { max_bytes: MAX_DISCARD_BYTES, max_time }).await;
        }
        drop(self);
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, SocketAddr};

    use http::{Response, StatusCode};
    use tokio::{io::AsyncReadExt, net::TcpSocket, sync::Notify};
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
    async fn every_connection_of_a_flood_from_one_peer_is_answered_and_ends_within_the_refusal_time() {
        let (server, _release, shutdown) = held_server(64).await;
        let mut held = Vec::new();
        for _ in 0..PER_PEER {
            let mut stream = connect_from(5, server).await;
            send_request(&mut stream).await;
            held.push(stream);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Many connections that never close: each is answered, and closed by the server after REFUSAL_TIME.
        let mut flood = Vec::new();
        for _ in 0..32 {
            flood.push(connect_from(5, server).await);
        }
        for mut stream in flood {
            let mut answer = Vec::new();
            match tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await {
                Ok(Ok(_)) => assert!(answer.starts_with(b"HTTP/1.1 503"), "{}", String::from_utf8_lossy(&answer)),
                Ok(Err(error)) => panic!("a flood connection saw {error} instead of its answer"),
                Err(_) => panic!("a flood connection was held past the refusal time"),
            }
        }
        drop(held);
        shutdown.cancel();
    }

    /// The slot of a served connection, if it is served.
    fn served(admission: Admission) -> Option<ConnectionSlot> {
        match admission {
            Admission::Serve(slot) => Some(slot),
            Admission::Refuse => None,
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
    fn past_the_total_cap_a_connection_is_refused_too() {
        let slots = ConnectionSlots::new(2, 2, 0);
        let peer = |host: u8| IpAddr::V4(Ipv4Addr::new(127, 0, 0, host));
        let _held = [served(slots.take(peer(2))), served(slots.take(peer(3)))];
        assert!(matches!(slots.take(peer(4)), Admission::Refuse), "the listener is full: told to come back");
    }

    #[test]
    fn refusals_in_progress_are_bounded_and_given_back() {
        let slots = ConnectionSlots::new(1_000, 1, 0);
        let refusals: Vec<Refusal> = (0..MAX_REFUSALS).map_while(|_| slots.try_refusal()).collect();
        assert_eq!(refusals.len(), MAX_REFUSALS);
        assert!(slots.try_refusal().is_none(), "past the bound, the accept loop waits");
        drop(refusals);
        assert!(slots.try_refusal().is_some(), "refusal places are given back");
    }
}

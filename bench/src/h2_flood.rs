//! An HTTP/2 stream flood: connections that each open streams carrying a large request head and never a byte of
//! body, and hold them. What a stream costs the gateway while it waits for a body that never comes is its head;
//! this is what measures that cost (the `h2-flood-bench` binary, docs/benchmarks/h2-stream-flood.md) and what
//! the integration test `gateway_h2_streams` floods the gateway with.

use std::{
    net::{IpAddr, SocketAddr},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
};

use bytes::Bytes;
use http::{HeaderValue, Request, StatusCode};
use tokio::{net::TcpSocket, task::JoinHandle};

/// How each flooded stream ended, counted over every connection of a flood.
#[derive(Debug, Default)]
pub struct Outcomes {
    /// Answers, by status, with whether they carried `Retry-After`.
    answered: Mutex<Vec<(StatusCode, bool)>>,
    /// Streams the server reset with `REFUSED_STREAM` (past its `SETTINGS_MAX_CONCURRENT_STREAMS`).
    refused: AtomicUsize,
    /// Streams that ended with another error (the connection closed, another reset).
    failed: AtomicUsize,
}

impl Outcomes {
    /// Answers with this status: how many, and how many of them carried `Retry-After`.
    pub fn answered(&self, status: StatusCode) -> (usize, usize) {
        let answered = self.answered.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let with_status = answered.iter().filter(|(answer, _)| *answer == status);
        let (n, n_retry_after) = with_status.fold((0, 0), |(n, r), (_, retry)| (n + 1, r + usize::from(*retry)));
        (n, n_retry_after)
    }

    /// Every answer, whatever its status.
    pub fn n_answered(&self) -> usize {
        self.answered.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    pub fn n_refused(&self) -> usize {
        self.refused.load(Ordering::Relaxed)
    }

    pub fn n_failed(&self) -> usize {
        self.failed.load(Ordering::Relaxed)
    }
}

/// One flooding HTTP/2 connection (h2c, prior knowledge). Its streams stay open until it is dropped.
#[derive(Debug)]
pub struct FloodConnection {
    /// The server's `SETTINGS_MAX_CONCURRENT_STREAMS` as this client last saw it (h2 assumes 100 until the
    /// server's SETTINGS arrive).
    advertised_streams: Arc<AtomicUsize>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for FloodConnection {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// What each flooded stream sends: `POST uri` with `n_header_bytes` of header values spread over headers of at
/// most 8 KiB each (`x-flood-<n>`), and no body.
#[derive(Debug, Clone)]
pub struct FloodRequest {
    pub uri: String,
    pub n_header_bytes: usize,
}

impl FloodRequest {
    /// The request each stream sends (its head; the stream never sends a body).
    pub fn build(&self) -> Request<()> {
        const CHUNK: usize = 8 * 1024;
        let mut builder = Request::post(&self.uri).header("content-type", "application/json");
        let mut remaining = self.n_header_bytes;
        let mut index = 0;
        while remaining > 0 {
            let n = remaining.min(CHUNK);
            let value = HeaderValue::from_str(&"f".repeat(n)).expect("ASCII");
            builder = builder.header(format!("x-flood-{index}"), value);
            remaining -= n;
            index += 1;
        }
        builder.body(()).expect("a valid request")
    }
}

impl FloodConnection {
    /// Connects to `target` from `local_ip` (any address of 127.0.0.0/8 on loopback, so one test can be many
    /// peers) and starts `n_streams` streams of `request`, each opened as soon as the server's stream limit allows
    /// and held open without a body. Fails only if the connection cannot be made; a server that closes it (a
    /// connection cap) shows as failed streams.
    pub async fn open(
        target: SocketAddr,
        local_ip: IpAddr,
        request: &FloodRequest,
        n_streams: usize,
        outcomes: Arc<Outcomes>,
    ) -> std::io::Result<Self> {
        let socket = if local_ip.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
        socket.bind(SocketAddr::new(local_ip, 0))?;
        let stream = socket.connect(target).await?;
        let advertised_streams = Arc::new(AtomicUsize::new(0));
        let handshake =
            h2::client::Builder::new().max_header_list_size(1024 * 1024).handshake::<_, Bytes>(stream).await;
        let (send_request, mut connection) = match handshake {
            Ok(handshake) => handshake,
            Err(error) => {
                outcomes.failed.fetch_add(n_streams, Ordering::Relaxed);
                return Err(std::io::Error::other(error));
            }
        };
        let advertised = advertised_streams.clone();
        let driver = tokio::spawn(async move {
            let _ = std::future::poll_fn(|cx| {
                let polled = std::pin::Pin::new(&mut connection).poll(cx);
                advertised.store(connection.max_concurrent_send_streams(), Ordering::Relaxed);
                polled
            })
            .await;
        });
        let (request, counted) = (request.clone(), outcomes.clone());
        let opener = tokio::spawn(async move {
            let mut send_request = send_request;
            let mut held = Vec::with_capacity(n_streams);
            for _ in 0..n_streams {
                send_request = match send_request.ready().await {
                    Ok(ready) => ready,
                    Err(_) => break,
                };
                let Ok((response, body)) = send_request.send_request(request.build(), false) else { break };
                // The body's sending half is kept: dropping it would reset the stream.
                held.push(body);
                let outcomes = counted.clone();
                tokio::spawn(async move {
                    match response.await {
                        Ok(response) => {
                            let retry_after = response.headers().contains_key(http::header::RETRY_AFTER);
                            let mut answered =
                                outcomes.answered.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                            answered.push((response.status(), retry_after));
                        }
                        Err(error) if error.reason() == Some(h2::Reason::REFUSED_STREAM) => {
                            outcomes.refused.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => {
                            outcomes.failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
            // Hold every stream open until the connection is dropped.
            std::future::pending::<()>().await;
            drop(held);
        });
        Ok(Self { advertised_streams, tasks: vec![driver, opener] })
    }

    /// The server's `SETTINGS_MAX_CONCURRENT_STREAMS` as this client last saw it.
    pub fn advertised_streams(&self) -> usize {
        self.advertised_streams.load(Ordering::Relaxed)
    }
}

/// The resident set size of process `pid` (`VmRSS` of `/proc/<pid>/status`), in bytes.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    status_bytes(pid, "VmRSS:")
}

/// The largest resident set size process `pid` has had (`VmHWM`), in bytes.
pub fn peak_rss_bytes(pid: u32) -> Option<u64> {
    status_bytes(pid, "VmHWM:")
}

fn status_bytes(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = status.lines().find_map(|line| line.strip_prefix(field))?.trim().trim_end_matches("kB").trim();
    kib.parse::<u64>().ok().map(|kib| kib * 1024)
}

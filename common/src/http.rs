//! The HTTP plumbing every service shares: an accept loop with graceful drain, and the admin listener
//! (`/livez`, `/readyz`, `/metrics`) that each service keeps apart from its public traffic. Every connection is
//! bounded: see [`ServeLimits`].

use std::{
    collections::BTreeMap,
    convert::Infallible,
    future::Future,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::{body::Incoming, service::service_fn};
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::conn::auto,
};
use prometheus::{Encoder, Registry, TextEncoder};
use tokio::net::TcpListener;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

mod linger;
mod slots;

use self::slots::{Admission, ConnectionSlots};
pub use self::slots::{MAX_REFUSALS, REFUSAL_TIME};

pub type Body = Full<Bytes>;

/// Limits the accept loop applies to every connection.
///
/// A connection costs a file descriptor and a task whatever it sends, so none lives without doing work: a
/// connection that has not started a request within `header_read_timeout` of opening (this covers the HTTP/1.1 vs
/// HTTP/2 detection, which has no timer of its own) or for `idle_timeout` since its last request ended is closed;
/// HTTP/2 peers that stop answering keep-alive pings are closed; connections past `max_connections` or past
/// `max_connections_per_peer` from one peer are answered a minimal `503` with `Retry-After` and
/// `Connection: close` (at most [`MAX_REFUSALS`] at once, see [`slots`]). Every connection is closed the
/// lingering way ([`linger`]), so a client answered before its body was read reads the answer, not a reset.
#[derive(Debug, Clone, Copy)]
pub struct ServeLimits {
    /// A client that has not sent its request head by then is disconnected (slow-loris defence); also the time a
    /// new connection may stay silent.
    pub header_read_timeout: Duration,
    /// How long in-flight requests may take to finish once the listener has closed.
    pub drain_deadline: Duration,
    /// How long the listener keeps accepting and serving once shutdown starts, every HTTP/1 answer with
    /// `Connection: close`, before it closes and the drain deadline begins (zero: close at once).
    pub drain_grace: Duration,
    /// Largest request head (HTTP/1.1 read buffer; HTTP/2 header list) a client may send; at least 8192.
    pub max_header_bytes: usize,
    /// A connection with no request in progress for this long after its last one is closed.
    pub idle_timeout: Duration,
    /// Connections open at once on this listener.
    pub max_connections: usize,
    /// Connections open at once from one peer: an IPv4 address, or an IPv6 /64 (behind a proxy every client
    /// shares its address).
    pub max_connections_per_peer: usize,
    /// HTTP/2 streams a connection may have open at once.
    pub max_concurrent_streams: u32,
    /// Connections taken beyond `max_connections` when it is reached, each serving only `GET /livez`, `/readyz`
    /// and `/metrics` (anything else: 503): so clients that fill the listener (slow posts, from up to
    /// `max_connections / max_connections_per_peer` addresses) cannot lock out the kubelet and Prometheus. The
    /// per-peer cap covers them too, so the peers that filled the listener cannot take them.
    pub probe_slots: usize,
}

/// How long an admin listener's handler waits for a request body (a form, a JSON request) once its head is in:
/// a client that sends the head and then dribbles the body holds a connection no longer than the head may take.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

impl Default for ServeLimits {
    /// The admin listeners' limits: few clients (probes, Prometheus, operators).
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            drain_deadline: Duration::from_secs(15),
            drain_grace: Duration::ZERO,
            max_header_bytes: 64 * 1024,
            idle_timeout: Duration::from_secs(30),
            max_connections: 64,
            max_connections_per_peer: 32,
            max_concurrent_streams: 16,
            probe_slots: 4,
        }
    }
}

/// The address of the client a request came from, in every request's extensions (admin routes that only
/// loopback callers may use read it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub std::net::SocketAddr);

/// The token of an `Authorization: Bearer <token>` header; the scheme name is case-insensitive (RFC 9110).
pub fn bearer_token(headers: &http::HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Whether a presented token equals the expected one, in constant time (the length is not the secret).
pub fn token_matches(presented: &str, expected: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    !presented.is_empty() && bool::from(presented.as_bytes().ct_eq(expected))
}

/// How long a connection being closed for idleness may take to say goodbye (HTTP/2 GOAWAY) before it is dropped.
const IDLE_CLOSE_GRACE: Duration = Duration::from_secs(2);

/// The soft limit on open file descriptors of this process (`/proc/self/limits`), when it can be read.
pub fn open_files_limit() -> Option<usize> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|line| line.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files").split_whitespace().next()?.parse().ok()
}

/// The accept queue a public listener asks for (the kernel caps it at `net.core.somaxconn`, 4096 by default since
/// Linux 5.4). A burst of connections beyond the queue is not ours to answer: with SYN cookies on, the kernel resets
/// connections it could not queue once their clients send, before any `503` can be written. Tokio's
/// `TcpListener::bind` asks for 1024, which a provider's burst of 2,000 deliveries overflowed.
pub const LISTEN_BACKLOG: u32 = 4096;

/// A listener on `address` (the first it resolves to) with an accept queue of [`LISTEN_BACKLOG`].
pub async fn bind(address: &str) -> std::io::Result<TcpListener> {
    let resolved = tokio::net::lookup_host(address).await?.next().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("`{address}` resolves to no address"))
    })?;
    let socket = if resolved.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(resolved)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Serves `handler` on `listener` until `shutdown` is cancelled; then keeps serving for `limits.drain_grace`,
/// answering every HTTP/1 request with `Connection: close` (so a client leaves a kept-alive connection after its
/// answer, instead of sending its next request into a connection being closed: a reset and no answer), then
/// stops accepting and lets in-flight requests finish for at most `limits.drain_deadline`.
pub async fn serve<H, F>(listener: TcpListener, handler: H, limits: ServeLimits, shutdown: CancellationToken)
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // hyper panics on a read buffer under 8192 bytes.
    let max_header_bytes = limits.max_header_bytes.max(8192);
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(max_header_bytes);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(max_header_bytes).unwrap_or(u32::MAX))
        .max_concurrent_streams(limits.max_concurrent_streams.max(1))
        .keep_alive_interval(limits.header_read_timeout)
        .keep_alive_timeout(limits.header_read_timeout);
    let slots = ConnectionSlots::new(limits.max_connections, limits.max_connections_per_peer, limits.probe_slots);
    let connections = TaskTracker::new();
    let draining = Arc::new(AtomicBool::new(false));
    // Cancelled when the listener closes: each connection then shuts down gracefully.
    let closing = CancellationToken::new();
    let stop_accepting = async {
        shutdown.cancelled().await;
        draining.store(true, Ordering::Relaxed);
        tokio::time::sleep(limits.drain_grace).await;
    };
    let mut stop_accepting = std::pin::pin!(stop_accepting);
    loop {
        let (stream, peer) = tokio::select! {
            () = stop_accepting.as_mut() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let slot = match slots.take(peer.ip()) {
            Admission::Serve(slot) => slot,
            // Over its peer's cap, or the listener full: a minimal 503 with Retry-After, so a provider that opened
            // too many connections retries later instead of seeing a reset. When MAX_REFUSALS are in progress this
            // waits for one to end (at most REFUSAL_TIME), new connections waiting in the accept queue meanwhile.
            Admission::Refuse => {
                let refusal = slots.refusal().await;
                connections.spawn(refusal.answer(stream));
                continue;
            }
        };
        let activity = Arc::new(Activity::new());
        let handler = handler.clone();
        let service_activity = activity.clone();
        let service_draining = draining.clone();
        let probes_only = slot.probes_only;
        let service = service_fn(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(PeerAddr(peer));
            // HTTP/2 has no `Connection` header: its connections get a GOAWAY when the listener closes.
            let http1 = request.version() < http::Version::HTTP_2;
            let guard = RequestGuard::enter(service_activity.clone());
            let response: std::pin::Pin<Box<dyn Future<Output = Response<Body>> + Send>> =
                if probes_only && !is_probe(&request) {
                    let mut busy = text(StatusCode::SERVICE_UNAVAILABLE, "busy: this connection serves probes only\n");
                    busy.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
                    Box::pin(std::future::ready(busy))
                } else {
                    Box::pin(handler(request))
                };
            let draining = service_draining.clone();
            async move {
                let mut response = response.await;
                if http1 && draining.load(Ordering::Relaxed) {
                    // hyper closes the connection once this answer is written.
                    response.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
                }
                drop(guard);
                Ok::<_, Infallible>(response)
            }
        });
        // hyper hands the stream back when it is done, to be closed the lingering way: hyper closes a connection
        // whose request body it did not read (an answer decided from the head) at once, which would reset it.
        let (stream, returned) = linger::Returning::new(stream);
        let connection = builder.serve_connection(TokioIo::new(stream), service).into_owned();
        let shutdown = closing.clone();
        connections.spawn(async move {
            let _slot = slot;
            {
                let mut connection = std::pin::pin!(connection);
                let mut close_by: Option<tokio::time::Instant> = None;
                loop {
                    let idle_check = activity.next_check(limits.header_read_timeout, limits.idle_timeout);
                    tokio::select! {
                        result = connection.as_mut() => {
                            if let Err(error) = result {
                                tracing::debug!(error = %error, "connection ended with an error");
                            }
                            break;
                        }
                        () = shutdown.cancelled(), if close_by.is_none() => {
                            connection.as_mut().graceful_shutdown();
                            close_by = Some(tokio::time::Instant::now() + limits.drain_deadline);
                        }
                        () = tokio::time::sleep_until(idle_check), if close_by.is_none() => {
                            if activity.is_idle(limits.header_read_timeout, limits.idle_timeout) {
                                connection.as_mut().graceful_shutdown();
                                close_by = Some(tokio::time::Instant::now() + IDLE_CLOSE_GRACE);
                            }
                        }
                        () = sleep_until_some(close_by) => break,
                    }
                }
                // The connection is dropped here, and with it hyper's hold on the stream.
            }
            if let Ok(stream) = returned.await {
                linger::close(stream, linger::SERVED).await;
            }
        });
    }
    drop(listener);
    closing.cancel();
    connections.close();
    // Each connection enforces the drain deadline itself, then lingers; the margin covers their last steps.
    let wait = limits.drain_deadline + linger::SERVED.max_time + Duration::from_secs(1);
    if tokio::time::timeout(wait, connections.wait()).await.is_err() {
        tracing::warn!(deadline_s = limits.drain_deadline.as_secs(), "drain deadline passed with requests in flight");
    }
}

async fn sleep_until_some(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// What a connection is doing, for its idle timer: requests in progress, and when that last changed.
#[derive(Debug)]
struct Activity {
    state: Mutex<ActivityState>,
}

#[derive(Debug)]
struct ActivityState {
    in_progress: usize,
    n_requests: u64,
    last_change: tokio::time::Instant,
}

impl Activity {
    fn new() -> Self {
        let now = tokio::time::Instant::now();
        Self { state: Mutex::new(ActivityState { in_progress: 0, n_requests: 0, last_change: now }) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ActivityState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// When the connection may next have been idle too long: a new connection gets `first_request` to start one,
    /// an open one `idle` after its last request ended. While a request runs, its own deadlines bound it.
    fn next_check(&self, first_request: Duration, idle: Duration) -> tokio::time::Instant {
        let state = self.lock();
        if state.in_progress > 0 {
            return tokio::time::Instant::now() + idle;
        }
        state.last_change + if state.n_requests == 0 { first_request } else { idle }
    }

    fn is_idle(&self, first_request: Duration, idle: Duration) -> bool {
        let state = self.lock();
        let limit = if state.n_requests == 0 { first_request } else { idle };
        state.in_progress == 0 && state.last_change.elapsed() >= limit
    }
}

/// Counts one request as in progress on its connection for as long as it lives (hyper drops the future when the
/// client goes away).
struct RequestGuard(Arc<Activity>);

impl RequestGuard {
    fn enter(activity: Arc<Activity>) -> Self {
        {
            let mut state = activity.lock();
            state.in_progress += 1;
            state.n_requests += 1;
            state.last_change = tokio::time::Instant::now();
        }
        Self(activity)
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.in_progress = state.in_progress.saturating_sub(1);
        state.last_change = tokio::time::Instant::now();
    }
}

/// Whether `request` is a probe or a scrape: what a probes-only connection serves.
fn is_probe(request: &Request<Incoming>) -> bool {
    request.method() == Method::GET && matches!(request.uri().path(), "/livez" | "/readyz" | "/metrics")
}

/// Named readiness conditions; `/readyz` is 200 only when all hold.
#[derive(Debug, Default)]
pub struct Readiness {
    checks: Mutex<BTreeMap<&'static str, Arc<AtomicBool>>>,
    /// Who answers, when the process is one of several kinds (`service billing`): named in every answer.
    subject: Option<String>,
}

impl Readiness {
    /// Readiness that names its subject in `/readyz` (`ready: service billing`).
    pub fn of(subject: impl Into<String>) -> Self {
        Self { checks: Mutex::default(), subject: Some(subject.into()) }
    }

    /// Registers a condition (initially not ready) and returns its flag.
    pub fn check(&self, name: &'static str) -> Arc<AtomicBool> {
        let mut checks = self.checks.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        checks.entry(name).or_default().clone()
    }

    /// The names of the conditions that do not hold.
    pub fn failing(&self) -> Vec<&'static str> {
        let checks = self.checks.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        checks.iter().filter(|(_, ok)| !ok.load(Ordering::Relaxed)).map(|(name, _)| *name).collect()
    }
}

/// Serves `/livez`, `/readyz` and `/metrics` until `shutdown`.
pub async fn serve_admin(
    listener: TcpListener,
    registry: Registry,
    readiness: Arc<Readiness>,
    shutdown: CancellationToken,
) {
    let handler = move |request: Request<Incoming>| {
        let response = admin_response(&request, &registry, &readiness);
        async move { response }
    };
    let limits = ServeLimits { drain_deadline: Duration::from_secs(1), ..ServeLimits::default() };
    serve(listener, handler, limits, shutdown).await;
}

/// The answer to one admin request (`/livez`, `/readyz`, `/metrics`); services with more admin routes wrap it. It
/// reads only the method and path, so any body type will do (the replayer's router hands it its own).
pub fn admin_response<B>(request: &Request<B>, registry: &Registry, readiness: &Readiness) -> Response<Body> {
    if request.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    }
    match request.uri().path() {
        "/livez" => text(StatusCode::OK, "ok\n"),
        "/readyz" => {
            let subject = readiness.subject.as_deref().map(|subject| format!(" ({subject})")).unwrap_or_default();
            match readiness.failing().as_slice() {
                [] => text(StatusCode::OK, format!("ready{subject}\n")),
                failing => {
                    text(StatusCode::SERVICE_UNAVAILABLE, format!("not ready{subject}: {}\n", failing.join(", ")))
                }
            }
        }
        "/metrics" => {
            let mut buffer = Vec::new();
            match TextEncoder::new().encode(&registry.gather(), &mut buffer) {
                Ok(()) => Response::builder()
                    .header(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)
                    .body(Body::from(buffer))
                    .unwrap_or_else(|_| text(StatusCode::INTERNAL_SERVER_ERROR, "metrics\n")),
                Err(error) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("cannot encode metrics: {error}\n")),
            }
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

/// A plain-text response.
pub fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(Body::new(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_name_is_case_insensitive() {
        let mut headers = http::HeaderMap::new();
        for value in ["Bearer t0k", "bearer t0k", "BEARER   t0k ", "BeArEr t0k"] {
            headers.insert(header::AUTHORIZATION, header::HeaderValue::from_static(value));
            assert_eq!(bearer_token(&headers), Some("t0k"), "{value}");
        }
        for value in ["Basic t0k", "Bearer", "Bearer ", "t0k"] {
            headers.insert(header::AUTHORIZATION, header::HeaderValue::from_static(value));
            assert_eq!(bearer_token(&headers), None, "{value}");
        }
        assert!(token_matches("t0k", b"t0k"));
        assert!(!token_matches("t0k", b"t0K"));
        assert!(!token_matches("", b""));
    }
}

//! The HTTP plumbing every service shares: an accept loop with graceful drain, and the admin listener
//! (`/livez`, `/readyz`, `/metrics`) that each service keeps apart from its public traffic.

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
    server::{conn::auto, graceful::GracefulShutdown},
};
use prometheus::{Encoder, Registry, TextEncoder};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub type Body = Full<Bytes>;

/// Limits the accept loop applies to every connection.
#[derive(Debug, Clone, Copy)]
pub struct ServeLimits {
    /// A client that has not sent its request head by then is disconnected (slow-loris defence).
    pub header_read_timeout: Duration,
    /// How long in-flight requests may take to finish once shutdown starts.
    pub drain_deadline: Duration,
    /// Largest request head (HTTP/1.1 read buffer; HTTP/2 header list) a client may send; at least 8192.
    pub max_header_bytes: usize,
}

impl Default for ServeLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            drain_deadline: Duration::from_secs(15),
            max_header_bytes: 64 * 1024,
        }
    }
}

/// Serves `handler` on `listener` until `shutdown` is cancelled, then stops accepting and lets in-flight
/// requests finish for at most `limits.drain_deadline`.
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
    builder.http2().timer(TokioTimer::new()).max_header_list_size(u32::try_from(max_header_bytes).unwrap_or(u32::MAX));
    let graceful = GracefulShutdown::new();
    loop {
        let (stream, _peer) = tokio::select! {
            () = shutdown.cancelled() => break,
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
        let handler = handler.clone();
        let service = service_fn(move |request| {
            let response = handler(request);
            async move { Ok::<_, Infallible>(response.await) }
        });
        let connection = builder.serve_connection(TokioIo::new(stream), service).into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(error = %error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.drain_deadline, graceful.shutdown()).await.is_err() {
        tracing::warn!(deadline_s = limits.drain_deadline.as_secs(), "drain deadline passed with requests in flight");
    }
}

/// Named readiness conditions; `/readyz` is 200 only when all hold.
#[derive(Debug, Default)]
pub struct Readiness {
    checks: Mutex<BTreeMap<&'static str, Arc<AtomicBool>>>,
}

impl Readiness {
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

/// The answer to one admin request (`/livez`, `/readyz`, `/metrics`); services with more admin routes wrap it.
pub fn admin_response(request: &Request<Incoming>, registry: &Registry, readiness: &Readiness) -> Response<Body> {
    if request.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    }
    match request.uri().path() {
        "/livez" => text(StatusCode::OK, "ok\n"),
        "/readyz" => match readiness.failing().as_slice() {
            [] => text(StatusCode::OK, "ready\n"),
            failing => text(StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {}\n", failing.join(", "))),
        },
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

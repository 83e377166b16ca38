//! The gateway: the system's only public surface. For each `POST /webhooks/{source}` it verifies the signature
//! over the raw body, produces the body to the inbound Kafka topic, and answers 202 only after the broker's
//! acknowledgement (idempotent producer, `acks=all`). Broker trouble is a 503 with `Retry-After`, never a 2xx.
//!
//! [`run`] takes already-bound listeners so tests can run the real gateway in-process on port 0.

pub mod batching;
pub mod body;
pub mod config;
pub mod error;
pub mod gcra;
pub mod in_progress;
pub mod ingest;
pub mod key_fetch;
pub mod load;
pub mod metrics;
pub mod offline_verify;
pub mod paypal_api;
pub mod peer_limit;
pub mod produce;
pub mod quota;
pub mod rejection_log;
pub mod rejection_ring;
pub mod reload;
pub mod reply;
pub mod source;
pub mod verify;

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use hookline_common::http::{Body, PeerAddr, Readiness, ServeLimits, admin_response, serve};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use prometheus::Registry;
use tokio::net::TcpListener;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

pub use crate::{config::GatewayConfig, error::GatewayError, load::Loaded, reload::ConfigOrigin};
use crate::{error::json_response, ingest::Ingest, metrics::Metrics, produce::EventProducer, reload::Reloader};

/// The gateway's bound sockets.
#[derive(Debug)]
pub struct Listeners {
    /// Public webhook traffic.
    pub public: TcpListener,
    /// `/livez`, `/readyz`, `/metrics`, `POST /admin/reload` and `GET /admin/rejections`.
    pub admin: TcpListener,
}

const READINESS_INTERVAL: Duration = Duration::from_secs(2);
const FLUSH_DEADLINE: Duration = Duration::from_secs(10);

/// The admin route that reloads the config (see [`reload`]).
pub const RELOAD_PATH: &str = "/admin/reload";

/// Runs the gateway until `shutdown` is cancelled: then `/readyz` fails at once, the public listener keeps
/// answering (with `Connection: close`) for `drain_grace_ms`, stops accepting, drains in-flight requests (each still
/// gets its real answer), and flushes the producer. Returns an error if the producer becomes unusable.
/// A reload (SIGHUP or [`RELOAD_PATH`]) re-reads the secrets of this same config.
pub async fn run(config: GatewayConfig, listeners: Listeners, shutdown: CancellationToken) -> Result<(), GatewayError> {
    let origin = ConfigOrigin::Fixed(Box::new(config.clone()));
    run_with_origin(Loaded::build(config)?, origin, listeners, shutdown).await
}

/// [`run`] with a config already [`Loaded`], and reloads reading the config from `origin` (the config file, for
/// the binary).
pub async fn run_with_origin(
    loaded: Loaded,
    origin: ConfigOrigin,
    listeners: Listeners,
    shutdown: CancellationToken,
) -> Result<(), GatewayError> {
    let Loaded { config, sources, reload_token, rejections_token } = loaded;
    // A broker that refuses our TLS or SASL settings is a configuration error, not an outage to wait out.
    hookline_common::kafka_security::check_broker_accepts(
        &config.kafka,
        hookline_common::kafka_security::ACCEPT_CHECK_WAIT,
    )
    .await?;
    let registry = Registry::new();
    let metrics = Metrics::register(&registry)?;
    let producer = EventProducer::new(&config.kafka, &config.producer)?;
    let fetcher = key_fetch::KeyFetcher::new(&config.key_fetch, metrics.clone())?;
    let ingest = Arc::new(Ingest::new(&config.limits, sources, producer.clone(), metrics, fetcher));
    let reloader = Arc::new(Reloader::new(origin, &config, ingest.clone()));
    let readiness = Arc::new(Readiness::default());
    let tasks = TaskTracker::new();
    let fatal = Arc::new(std::sync::Mutex::new(None::<String>));

    // The admin listener outlives the public one: while the public listener drains, `/readyz` keeps answering
    // (503), so the load balancer hears the gateway is leaving instead of finding the port closed.
    let admin_shutdown = CancellationToken::new();
    tasks.spawn(serve_gateway_admin(
        listeners.admin,
        AdminState {
            registry,
            readiness: readiness.clone(),
            reloader: reloader.clone(),
            ingest: ingest.clone(),
            gateway_name: Arc::from(rejection_ring::gateway_name()),
        },
        AdminTokens { reload: reload_token.map(Arc::new), rejections: rejections_token.map(Arc::new) },
        admin_shutdown.clone(),
    ));
    tasks.spawn(fail_readiness_on_shutdown(readiness.check("accepting_traffic"), shutdown.clone()));
    tasks.spawn(watch_producer(producer.clone(), ingest.clone(), readiness, fatal.clone(), shutdown.clone()));
    tasks.spawn(reload::reload_on_sighup(reloader, shutdown.child_token()));
    tasks.spawn(summarise_rejections(ingest.clone(), shutdown.child_token()));

    let limits = public_serve_limits(&config.limits, hookline_common::http::open_files_limit());
    let handler = move |request| ingest.clone().handle(request);
    serve(listeners.public, handler, limits, shutdown.clone()).await;

    shutdown.cancel();
    admin_shutdown.cancel();
    tasks.close();
    tasks.wait().await;
    let flushed = tokio::task::spawn_blocking(move || producer.flush(FLUSH_DEADLINE)).await;
    if !matches!(flushed, Ok(Ok(()))) {
        tracing::warn!("producer flush did not complete; unacknowledged requests were already answered 503");
    }
    let fatal = fatal.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
    match fatal {
        Some(reason) => Err(GatewayError::ProducerFatal(reason)),
        None => Ok(()),
    }
}

/// Holds `/readyz`'s `accepting_traffic` condition until shutdown starts, then fails it at once: the public
/// listener still serves for `drain_grace_ms`, the load balancer learns first.
async fn fail_readiness_on_shutdown(accepting: Arc<std::sync::atomic::AtomicBool>, shutdown: CancellationToken) {
    accepting.store(true, Ordering::Relaxed);
    shutdown.cancelled().await;
    accepting.store(false, Ordering::Relaxed);
    tracing::info!("draining: /readyz fails; answering with Connection: close until the listener closes");
}

/// File descriptors kept out of the public listener's reach: the admin listener's connections, the Kafka
/// client's sockets, secret and config files.
const RESERVED_FILE_DESCRIPTORS: usize = 256;

/// The public listener's limits; `max_connections` is lowered, with a warning, to what `open_files` leaves after
/// [`RESERVED_FILE_DESCRIPTORS`] and the refusals in progress ([`hookline_common::http::MAX_REFUSALS`]), so that
/// silent connections cannot take the descriptors `/livez` and the producer need.
fn public_serve_limits(limits: &config::Limits, open_files: Option<usize>) -> ServeLimits {
    let reserve =
        RESERVED_FILE_DESCRIPTORS.max(ServeLimits::default().max_connections * 2) + hookline_common::http::MAX_REFUSALS;
    let mut max_connections = limits.max_connections;
    if let Some(open_files) = open_files {
        let room = open_files.saturating_sub(reserve).max(1);
        if max_connections > room {
            tracing::warn!(
                configured = max_connections,
                open_files,
                lowered_to = room,
                "limits.max_connections is above what the open-file limit allows; raise `ulimit -n`"
            );
            max_connections = room;
        }
    }
    ServeLimits {
        header_read_timeout: Duration::from_millis(limits.header_read_timeout_ms),
        drain_deadline: Duration::from_millis(limits.drain_deadline_ms),
        drain_grace: Duration::from_millis(limits.drain_grace_ms),
        max_header_bytes: limits.max_header_bytes,
        idle_timeout: Duration::from_millis(limits.idle_timeout_ms),
        max_connections,
        max_connections_per_peer: limits.max_connections_per_peer.min(max_connections),
        max_concurrent_streams: limits.max_concurrent_streams,
        // The public listener serves no probes: its probes go to the admin listener.
        probe_slots: 0,
    }
}

/// What the admin listener's routes read.
#[derive(Debug, Clone)]
struct AdminState {
    registry: Registry,
    readiness: Arc<Readiness>,
    reloader: Arc<Reloader>,
    ingest: Arc<Ingest>,
    /// This replica's name in `GET /admin/rejections`.
    gateway_name: Arc<str>,
}

/// The bearer tokens of the `/admin/` routes: `reload` for a reload (and a read), `rejections` for a read only.
#[derive(Clone, Default)]
struct AdminTokens {
    reload: Option<Arc<secrecy::SecretSlice<u8>>>,
    rejections: Option<Arc<secrecy::SecretSlice<u8>>>,
}

/// The admin listener: the shared `/livez`, `/readyz`, `/metrics`, plus `POST /admin/reload` and
/// `GET /admin/rejections`, both behind [`admin_refusal`] (the rejections behind [`rejections_refusal`]).
async fn serve_gateway_admin(
    listener: TcpListener,
    state: AdminState,
    tokens: AdminTokens,
    shutdown: CancellationToken,
) {
    let handler = move |request: Request<Incoming>| {
        let (state, tokens) = (state.clone(), tokens.clone());
        async move {
            let (method, message) = match request.uri().path() {
                RELOAD_PATH => (Method::POST, "POST to reload"),
                rejection_ring::REJECTIONS_PATH => (Method::GET, "GET the rejections"),
                path => {
                    if path == "/metrics" {
                        state.ingest.refresh_quota_gauges();
                    }
                    return admin_response(&request, &state.registry, &state.readiness);
                }
            };
            if request.method() != method {
                return json_response(
                    StatusCode::METHOD_NOT_ALLOWED,
                    &serde_json::json!({ "error": { "code": "method_not_allowed", "message": message } }),
                );
            }
            let peer = request.extensions().get::<PeerAddr>().map(|peer| peer.0);
            // HTTP/1.1 names the host in `Host`, HTTP/2 in the `:authority` hyper puts in the URI.
            let host = request
                .headers()
                .get(http::header::HOST)
                .and_then(|host| host.to_str().ok())
                .or_else(|| request.uri().authority().map(http::uri::Authority::as_str));
            let (reload, read) = (tokens.reload.as_deref(), tokens.rejections.as_deref());
            let refusal = if method == Method::GET {
                rejections_refusal(request.headers(), host, peer, read, reload)
            } else {
                admin_refusal(request.headers(), host, peer, reload)
            };
            if let Some(refusal) = refusal {
                return refusal;
            }
            if method == Method::GET {
                return rejection_ring::rejections_response(
                    state.ingest.rejection_ring(),
                    &state.ingest.sources(),
                    &state.gateway_name,
                    request.uri().query(),
                );
            }
            reload_response(state.reloader.reload().await)
        }
    };
    let limits = ServeLimits { drain_deadline: Duration::from_secs(1), ..ServeLimits::default() };
    serve(listener, handler, limits, shutdown).await;
}

/// The answer refusing an `/admin/` route (a reload, the rejections), if this caller may not use it. Who may: a
/// caller presenting the configured `reload_token` (`Authorization: Bearer`, any case), or, when none is
/// configured, a caller on 127.0.0.1 or ::1 exactly that sends no `Origin`. Not the rest of 127.0.0.0/8: behind a
/// service mesh sidecar every client arrives from 127.0.0.6. Never with `Origin`: a web page in the operator's
/// browser can POST to 127.0.0.1 without a preflight (or read an answer it should not), and a browser always says
/// where the page came from, except on a same-origin GET: so the `Host` must be this host's loopback name too
/// (`127.0.0.1`, `localhost`, `[::1]`, any port), which a page rebound by DNS to 127.0.0.1 cannot send (its
/// `Host` is the attacker's name), and `Sec-Fetch-Site: cross-site` is refused. A reload re-reads every secret
/// and the rejections name client addresses and secret ids, so neither may be had by anyone who reaches the admin
/// port.
fn admin_refusal(
    headers: &http::HeaderMap,
    host: Option<&str>,
    peer: Option<std::net::SocketAddr>,
    token: Option<&secrecy::SecretSlice<u8>>,
) -> Option<Response<Body>> {
    use secrecy::ExposeSecret;
    match token {
        Some(token) => {
            let presented = hookline_common::http::bearer_token(headers).unwrap_or("");
            if hookline_common::http::token_matches(presented, token.expose_secret()) {
                None
            } else {
                let mut response = json_response(
                    StatusCode::UNAUTHORIZED,
                    &serde_json::json!({ "error": { "code": "unauthorized", "message": "a valid bearer token is required" } }),
                );
                response.headers_mut().insert(http::header::WWW_AUTHENTICATE, http::HeaderValue::from_static("Bearer"));
                Some(response)
            }
        }
        None if peer.is_some_and(|peer| is_this_host(peer.ip()))
            && !headers.contains_key(http::header::ORIGIN)
            && host.is_some_and(names_this_host)
            && headers.get("sec-fetch-site").is_none_or(|site| site.as_bytes() != b"cross-site") =>
        {
            None
        }
        None => Some(json_response(
            StatusCode::FORBIDDEN,
            &serde_json::json!({ "error": {
                "code": "forbidden",
                "message": "without reload_token, /admin/ routes answer only 127.0.0.1 or ::1 and not a browser; \
                            a reload can also be sent as SIGHUP"
            } }),
        )),
    }
}

/// The answer refusing `GET /admin/rejections`, if this caller may not read it: a caller presenting the read-only
/// `rejections_token`, or else as [`admin_refusal`] with the `reload_token` (still accepted for reading, so that a
/// replayer sending it keeps working during an upgrade; it grants more, never less). With a `rejections_token`
/// and no `reload_token`, the token is required (loopback alone is not enough).
fn rejections_refusal(
    headers: &http::HeaderMap,
    host: Option<&str>,
    peer: Option<std::net::SocketAddr>,
    rejections_token: Option<&secrecy::SecretSlice<u8>>,
    reload_token: Option<&secrecy::SecretSlice<u8>>,
) -> Option<Response<Body>> {
    use secrecy::ExposeSecret;
    match rejections_token {
        Some(read) => {
            let presented = hookline_common::http::bearer_token(headers).unwrap_or("");
            if hookline_common::http::token_matches(presented, read.expose_secret()) {
                None
            } else {
                admin_refusal(headers, host, peer, Some(reload_token.unwrap_or(read)))
            }
        }
        None => admin_refusal(headers, host, peer, reload_token),
    }
}

/// Whether a request's host (`Host`, or HTTP/2's `:authority`) names this host's loopback (`127.0.0.1`,
/// `localhost`, `[::1]`), with any port.
fn names_this_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(bracketed) => bracketed.split_once(']').map_or("", |(inside, _)| inside),
        None => host.split_once(':').map_or(host, |(name, _)| name),
    };
    matches!(name.to_ascii_lowercase().as_str(), "127.0.0.1" | "localhost" | "::1")
}

/// 127.0.0.1 or ::1 (also as an IPv4-mapped address): this host's own loopback, not the other addresses of
/// 127.0.0.0/8 that proxies and sidecars use.
fn is_this_host(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => v4 == std::net::Ipv4Addr::LOCALHOST,
        std::net::IpAddr::V6(v6) => {
            v6 == std::net::Ipv6Addr::LOCALHOST || v6.to_ipv4_mapped() == Some(std::net::Ipv4Addr::LOCALHOST)
        }
    }
}

fn reload_response(result: Result<reload::Reloaded, Vec<String>>) -> Response<Body> {
    match result {
        Ok(reloaded) => {
            json_response(StatusCode::OK, &serde_json::json!({ "status": "reloaded", "sources": reloaded.n_sources }))
        }
        // Only a count: the problems name files and variables (paths to secrets), which the log has and the
        // answer must not.
        Err(problems) => json_response(
            StatusCode::UNPROCESSABLE_ENTITY,
            &serde_json::json!({
                "error": {
                    "code": "reload_rejected",
                    "message": "the previous config keeps serving; the gateway's log names each problem",
                    "problems": problems.len()
                }
            }),
        ),
    }
}

/// Writes the rate-limited rejection log's summary when an interval ends, even if no request follows.
async fn summarise_rejections(ingest: Arc<Ingest>, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(rejection_log::INTERVAL) => {}
        }
        let now = std::time::Instant::now();
        rejection_log::log_summary(&ingest.rejection_log().take_summary(now));
        rejection_log::log_handshake_summary(&ingest.handshake_log().take_summary(now));
    }
    // Whatever the last interval held back.
    let far_enough = std::time::Instant::now() + rejection_log::INTERVAL;
    rejection_log::log_summary(&ingest.rejection_log().take_summary(far_enough));
    rejection_log::log_handshake_summary(&ingest.handshake_log().take_summary(far_enough));
}

/// Marks the gateway ready while the broker answers metadata requests and every topic the sources produce to
/// exists (a source routed to a missing topic would answer 503 for ever), and samples the
/// producer's queue depth; on a fatal producer error, records it and shuts the gateway down so the orchestrator
/// restarts a clean process.
async fn watch_producer(
    producer: EventProducer,
    ingest: Arc<Ingest>,
    readiness: Arc<Readiness>,
    fatal: Arc<std::sync::Mutex<Option<String>>>,
    shutdown: CancellationToken,
) {
    let kafka_ready = readiness.check("kafka");
    loop {
        // Every topic the current sources produce to (they can change on a reload), and the inbound topic.
        let mut topics = ingest.sources().topics();
        topics.push(producer.inbound_topic().to_owned());
        topics.sort();
        topics.dedup();
        let probe = producer.clone();
        let reachable =
            tokio::task::spawn_blocking(move || probe.topics_ready(&topics, READINESS_INTERVAL)).await.unwrap_or(false);
        kafka_ready.store(reachable, Ordering::Relaxed);
        ingest.metrics().producer_queue_depth.set(i64::from(producer.queue_depth()));
        if let Some(reason) = producer.fatal_error() {
            tracing::error!(error = %reason, "fatal producer error; shutting down");
            *fatal.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(reason);
            shutdown.cancel();
            return;
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(READINESS_INTERVAL) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    async fn body_of(response: Response<Body>) -> String {
        String::from_utf8_lossy(&response.into_body().collect().await.unwrap().to_bytes()).into_owned()
    }

    const LOCAL: Option<&str> = Some("127.0.0.1:9090");

    #[test]
    fn without_a_token_a_page_rebound_to_loopback_reads_nothing() {
        let loopback = Some("127.0.0.1:5000".parse().unwrap());
        let none = http::HeaderMap::new();
        for host in ["127.0.0.1", "localhost:9090", "LOCALHOST", "[::1]:9090", "[::1]"] {
            assert!(admin_refusal(&none, Some(host), loopback, None).is_none(), "{host}");
        }
        // What a rebound page sends: the attacker's name, no Origin on a same-origin GET.
        for host in [Some("attacker.example:9090"), Some("127.0.0.1.attacker.example"), Some("[::2]:9090"), None] {
            let refusal = admin_refusal(&none, host, loopback, None).expect("refused");
            assert_eq!(refusal.status(), StatusCode::FORBIDDEN, "{host:?}");
        }
        let mut cross_site = http::HeaderMap::new();
        cross_site.insert("sec-fetch-site", http::HeaderValue::from_static("cross-site"));
        assert_eq!(admin_refusal(&cross_site, LOCAL, loopback, None).unwrap().status(), StatusCode::FORBIDDEN);
        let mut same = http::HeaderMap::new();
        same.insert("sec-fetch-site", http::HeaderValue::from_static("none"));
        assert!(admin_refusal(&same, LOCAL, loopback, None).is_none(), "typed in the address bar, or curl");
    }

    #[test]
    fn the_rejections_token_reads_the_rejections_and_cannot_reload() {
        let remote = Some("10.1.2.3:5000".parse().unwrap());
        let loopback = Some("127.0.0.1:5000".parse().unwrap());
        let read = secrecy::SecretSlice::from(b"a-read-only-rejections-token".to_vec());
        let reload = secrecy::SecretSlice::from(b"a-reload-token-of-length".to_vec());
        let bearer = |token: &'static str| {
            let mut headers = http::HeaderMap::new();
            headers.insert(http::header::AUTHORIZATION, http::HeaderValue::from_static(token));
            headers
        };
        let (with_read, with_reload) =
            (bearer("Bearer a-read-only-rejections-token"), bearer("Bearer a-reload-token-of-length"));
        let none = http::HeaderMap::new();
        // Reading: the read token, or the reload token (a replayer not yet given the read token).
        assert!(rejections_refusal(&with_read, LOCAL, remote, Some(&read), Some(&reload)).is_none());
        assert!(rejections_refusal(&with_reload, LOCAL, remote, Some(&read), Some(&reload)).is_none());
        assert!(rejections_refusal(&with_read, LOCAL, remote, Some(&read), None).is_none());
        let status = |refusal: Option<Response<Body>>| refusal.map(|response| response.status());
        assert_eq!(
            status(rejections_refusal(&none, LOCAL, loopback, Some(&read), None)),
            Some(StatusCode::UNAUTHORIZED)
        );
        assert_eq!(
            status(rejections_refusal(
                &bearer("Bearer wrong-token-of-some-length"),
                LOCAL,
                remote,
                Some(&read),
                Some(&reload)
            )),
            Some(StatusCode::UNAUTHORIZED)
        );
        // Reloading: the read token is not enough, with or without a reload token configured.
        assert_eq!(status(admin_refusal(&with_read, LOCAL, remote, Some(&reload))), Some(StatusCode::UNAUTHORIZED));
        assert_eq!(status(admin_refusal(&with_read, LOCAL, remote, None)), Some(StatusCode::FORBIDDEN));
    }

    #[tokio::test]
    async fn a_reload_needs_the_token_or_loopback_and_never_echoes_paths() {
        let loopback = Some("127.0.0.1:5000".parse().unwrap());
        let remote = Some("10.1.2.3:5000".parse().unwrap());
        let none = http::HeaderMap::new();
        assert!(admin_refusal(&none, LOCAL, loopback, None).is_none());
        assert!(admin_refusal(&none, LOCAL, Some("[::1]:5000".parse().unwrap()), None).is_none());
        assert!(admin_refusal(&none, LOCAL, Some("[::ffff:127.0.0.1]:5000".parse().unwrap()), None).is_none());
        assert_eq!(admin_refusal(&none, LOCAL, remote, None).unwrap().status(), StatusCode::FORBIDDEN);
        assert_eq!(admin_refusal(&none, LOCAL, None, None).unwrap().status(), StatusCode::FORBIDDEN);
        let sidecar = Some("127.0.0.6:5000".parse().unwrap());
        assert_eq!(
            admin_refusal(&none, LOCAL, sidecar, None).unwrap().status(),
            StatusCode::FORBIDDEN,
            "a mesh's peer"
        );
        let mut browser = http::HeaderMap::new();
        browser.insert(http::header::ORIGIN, http::HeaderValue::from_static("https://evil.example"));
        assert_eq!(
            admin_refusal(&browser, LOCAL, loopback, None).unwrap().status(),
            StatusCode::FORBIDDEN,
            "a web page"
        );

        let token = secrecy::SecretSlice::from(b"a-reload-token-of-length".to_vec());
        let mut bearer = http::HeaderMap::new();
        bearer.insert(http::header::AUTHORIZATION, http::HeaderValue::from_static("bearer a-reload-token-of-length"));
        assert!(admin_refusal(&bearer, LOCAL, remote, Some(&token)).is_none());
        assert_eq!(admin_refusal(&none, LOCAL, loopback, Some(&token)).unwrap().status(), StatusCode::UNAUTHORIZED);
        let mut wrong = http::HeaderMap::new();
        wrong.insert(http::header::AUTHORIZATION, http::HeaderValue::from_static("Bearer a-reload-token-of-lengtH"));
        assert_eq!(admin_refusal(&wrong, LOCAL, remote, Some(&token)).unwrap().status(), StatusCode::UNAUTHORIZED);

        let rejected =
            reload_response(Err(vec!["secret `a`: cannot read /run/secrets/hookline/github: No such file".into()]));
        assert_eq!(rejected.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let body = body_of(rejected).await;
        assert!(!body.contains("/run/secrets"), "{body}");
        assert!(body.contains("\"problems\":1"), "{body}");
    }
}

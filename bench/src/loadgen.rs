//! The load generator: signed webhooks against a gateway (or the HTTP ceiling), open-loop at a target rate or
//! closed-loop with N workers, over HTTP/1.1 keep-alive or HTTP/2 (h2c).
//!
//! Open-loop is coordinated-omission-safe in the way wrk2 is: every worker has a fixed schedule of intended
//! send times (rate / workers apart) and a request's latency is measured from its *intended* time, not from when
//! it could actually be sent. A server that stalls for a second therefore shows a second of latency on every
//! request that should have gone out during the stall, instead of hiding them by sending fewer.
//!
//! Every delivery is recorded (event id and outcome) so that [`crate::topic_check`] can prove afterwards that
//! every 2xx-acknowledged event is in the topic once per acknowledged delivery and no refused one is.

use std::{
    collections::{BTreeMap, VecDeque},
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use hdrhistogram::Histogram;
use http::{Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rand::{Rng, SeedableRng, rngs::StdRng};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::signing::{SignatureKind, SignedRequest, Signer};

/// How requests are paced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    /// A fixed schedule at this many requests per second in total, whatever the server does.
    Open { rate_per_s: f64 },
    /// Each worker sends its next request as soon as the previous one was answered.
    Closed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// HTTP/1.1 with keep-alive: one connection per worker.
    Http1,
    /// HTTP/2 over cleartext (prior knowledge): workers share `connections` connections as streams.
    Http2,
}

/// What a request looks like on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Envelope {
    /// The signed webhook as a provider sends it, to `POST /webhooks/<source>`.
    Webhook,
    /// The same signed request (its headers included), its body wrapped for kprf, the HTTP-to-Kafka proxy
    /// hookline is compared with (docs/benchmarks/gateway-batching.md): `POST /push` with
    /// `{"records": [{"topic", "key": <event id>, "data": <body>}], "wait_for_send": true}`. Keyed by the event id,
    /// as the gateway keys its records, so the topic check applies unchanged. kprf ignores the signature.
    Kprf { topic: String },
}

impl Envelope {
    fn path(&self, source: &str) -> String {
        match self {
            Self::Webhook => format!("/webhooks/{source}"),
            Self::Kprf { .. } => "/push".to_owned(),
        }
    }

    fn wrap(&self, event_id: &str, body: &Bytes) -> Bytes {
        match self {
            Self::Webhook => body.clone(),
            Self::Kprf { topic } => {
                let data = String::from_utf8_lossy(body);
                let push = serde_json::json!({
                    "records": [{ "topic": topic, "key": event_id, "data": data }],
                    "wait_for_send": true,
                });
                Bytes::from(serde_json::to_vec(&push).expect("JSON serialises"))
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct LoadConfig {
    pub target: SocketAddr,
    /// Served at `POST /webhooks/<source>`.
    pub source: String,
    pub signer: Signer,
    pub mode: Mode,
    pub protocol: Protocol,
    /// Workers: requests in flight at most. For HTTP/1.1 also the number of connections.
    pub concurrency: usize,
    /// HTTP/2 only: connections the workers share.
    pub connections: usize,
    pub duration: Duration,
    /// Stop after this many requests in total (over all workers), even before `duration` ends: a fixed amount of
    /// work, for measurements that divide a cost by the request count (CPU or instructions per request).
    pub max_requests: Option<u64>,
    /// Share of requests that re-deliver an event already sent (same bytes, same signature), as a provider's
    /// retry does.
    pub duplicate_share: f64,
    /// Share of requests with a forged signature (a fresh event id each), which must be refused.
    pub bad_signature_share: f64,
    /// A request not answered within this is counted as failed (its event may still land: uncertain).
    pub request_timeout: Duration,
    /// Print a progress line to stderr every second.
    pub progress: bool,
    /// Local addresses the connections are made from, round-robin over the workers (HTTP/1.1) or connections
    /// (HTTP/2); empty: the system's choice. On loopback any 127.0.0.0/8 address works, so one machine can play
    /// many clients (providers send from many addresses, a flood from few).
    pub bind: Vec<std::net::IpAddr>,
    /// Open loop: stop sending when `duration` has passed on the clock, instead of sending every request the
    /// schedule held (a flood whose connections the server paces would otherwise run on for minutes).
    pub stop_at_end: bool,
    /// The request's shape: a webhook (the default), or wrapped for kprf.
    pub envelope: Envelope,
}

impl LoadConfig {
    /// Defaults for everything but the target, source and signer: closed-loop, 32 HTTP/1.1 workers, 10 s.
    pub fn new(target: SocketAddr, source: impl Into<String>, signer: Signer) -> Self {
        Self {
            target,
            source: source.into(),
            signer,
            mode: Mode::Closed,
            protocol: Protocol::Http1,
            concurrency: 32,
            connections: 4,
            duration: Duration::from_secs(10),
            max_requests: None,
            duplicate_share: 0.0,
            bad_signature_share: 0.0,
            request_timeout: Duration::from_secs(10),
            progress: false,
            bind: Vec::new(),
            stop_at_end: false,
            envelope: Envelope::Webhook,
        }
    }
}

/// How one delivery ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Status(u16),
    /// No answer: connection error or request timeout. The event may or may not have been stored.
    Failed,
}

/// One request as sent and answered.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub event_id: String,
    pub outcome: Outcome,
    /// Sent with a forged signature: must be refused.
    pub forged: bool,
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Percentiles {
    pub count: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

impl Percentiles {
    /// From a histogram recorded in microseconds.
    pub fn from_micros(histogram: &Histogram<u64>) -> Self {
        let ms = |micros: u64| micros as f64 / 1000.0;
        if histogram.is_empty() {
            return Self::default();
        }
        Self {
            count: histogram.len(),
            mean_ms: histogram.mean() / 1000.0,
            p50_ms: ms(histogram.value_at_quantile(0.50)),
            p90_ms: ms(histogram.value_at_quantile(0.90)),
            p99_ms: ms(histogram.value_at_quantile(0.99)),
            p999_ms: ms(histogram.value_at_quantile(0.999)),
            max_ms: ms(histogram.max()),
        }
    }
}

/// A latency histogram in microseconds, 1 µs to 5 min, 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 300_000_000, 3).expect("valid histogram bounds")
}

/// What a run did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LoadReport {
    pub mode: String,
    pub target_rate_per_s: Option<f64>,
    pub protocol: Protocol,
    pub scheme: crate::signing::SchemeKind,
    pub body_bytes: usize,
    pub concurrency: usize,
    pub connections: usize,
    pub duration_s: f64,
    pub requests: u64,
    pub requests_per_s: f64,
    /// 2xx answers per second: what the gateway acknowledged as durable.
    pub acknowledged_per_s: f64,
    /// Answers by status code, plus `failed` (no answer).
    pub statuses: BTreeMap<String, u64>,
    pub time_to_2xx: Percentiles,
    #[serde(skip)]
    pub deliveries: Vec<Delivery>,
}

impl LoadReport {
    pub fn count_2xx(&self) -> u64 {
        self.statuses.iter().filter(|(status, _)| status.starts_with('2')).map(|(_, n)| n).sum()
    }

    /// One line for humans.
    pub fn summary(&self) -> String {
        let statuses: Vec<String> = self.statuses.iter().map(|(status, n)| format!("{status}={n}")).collect();
        let p = &self.time_to_2xx;
        format!(
            "{mode} {protocol:?} c={c}: {requests} requests in {d:.1}s = {rps:.0}/s ({ack:.0} 2xx/s) [{statuses}] \
             time-to-2xx p50 {p50:.2} ms, p99 {p99:.2} ms, p99.9 {p999:.2} ms, max {max:.2} ms",
            mode = self.mode,
            protocol = self.protocol,
            c = self.concurrency,
            requests = self.requests,
            d = self.duration_s,
            rps = self.requests_per_s,
            ack = self.acknowledged_per_s,
            statuses = statuses.join(" "),
            p50 = p.p50_ms,
            p99 = p.p99_ms,
            p999 = p.p999_ms,
            max = p.max_ms,
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot connect to {0}")]
    Connect(SocketAddr, #[source] std::io::Error),
    #[error("HTTP handshake with {0} failed")]
    Handshake(SocketAddr, #[source] hyper::Error),
    #[error("invalid load config: {0}")]
    Config(String),
}

/// Live counters for the progress line.
#[derive(Debug, Default)]
struct Counters {
    /// Requests claimed against `max_requests` (one more per worker than were sent, at the end).
    claimed: AtomicU64,
    sent: AtomicU64,
    ok: AtomicU64,
    refused: AtomicU64,
    server_error: AtomicU64,
    failed: AtomicU64,
}

/// What one worker measured.
struct WorkerResult {
    histogram: Histogram<u64>,
    statuses: BTreeMap<String, u64>,
    deliveries: Vec<Delivery>,
    last_answer: Instant,
}

/// Runs the load and returns what happened. Stops by itself after `config.duration` (plus the time in-flight
/// requests take to be answered, at most `request_timeout`).
pub async fn run(config: LoadConfig) -> Result<LoadReport, LoadError> {
    if config.concurrency == 0 || config.connections == 0 {
        return Err(LoadError::Config("concurrency and connections must be at least 1".into()));
    }
    if let Mode::Open { rate_per_s } = config.mode
        && rate_per_s.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
    {
        return Err(LoadError::Config("the open-loop rate must be positive".into()));
    }
    // Connect everything first, so connection set-up is not part of the measured run.
    let mut h2_senders = Vec::new();
    if config.protocol == Protocol::Http2 {
        for n in 0..config.connections {
            h2_senders.push(connect_h2(config.target, bind_addr(&config.bind, n)).await?);
        }
    }
    let mut connections = Vec::with_capacity(config.concurrency);
    for worker_idx in 0..config.concurrency {
        connections.push(match config.protocol {
            Protocol::Http1 => Connection::Http1(connect_h1(config.target, bind_addr(&config.bind, worker_idx)).await?),
            Protocol::Http2 => Connection::Http2(h2_senders[worker_idx % h2_senders.len()].clone()),
        });
    }

    let counters = Arc::new(Counters::default());
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let start = Instant::now();
    let end = start + config.duration;
    let config = Arc::new(config);
    let stop_progress = CancellationToken::new();
    let progress =
        config.progress.then(|| tokio::spawn(print_progress(counters.clone(), start, stop_progress.clone())));

    let mut workers = Vec::with_capacity(config.concurrency);
    for (worker_idx, connection) in connections.into_iter().enumerate() {
        let worker = Worker {
            worker_idx,
            config: config.clone(),
            counters: counters.clone(),
            event_prefix: format!("{}-{run_id}-{worker_idx}", config.signer.scheme().config_name()),
            start,
            end,
        };
        workers.push(tokio::spawn(worker.run(connection)));
    }
    let mut histogram = new_histogram();
    let mut statuses = BTreeMap::new();
    let mut deliveries = Vec::new();
    let mut last_answer = start;
    for worker in workers {
        let result = worker.await.expect("load worker panicked");
        histogram.add(&result.histogram).expect("histograms with the same bounds");
        for (status, n) in result.statuses {
            *statuses.entry(status).or_insert(0) += n;
        }
        deliveries.extend(result.deliveries);
        last_answer = last_answer.max(result.last_answer);
    }
    stop_progress.cancel();
    if let Some(progress) = progress {
        let _ = progress.await;
    }

    // The run lasted until the schedule ended or the last answer came, whichever is later.
    let duration_s = last_answer.max(end.min(Instant::now())).duration_since(start).as_secs_f64();
    let requests = deliveries.len() as u64;
    let n_2xx: u64 = statuses.iter().filter(|(s, _)| s.starts_with('2')).map(|(_, n)| n).sum();
    Ok(LoadReport {
        mode: match config.mode {
            Mode::Open { .. } => "open".to_owned(),
            Mode::Closed => "closed".to_owned(),
        },
        target_rate_per_s: match config.mode {
            Mode::Open { rate_per_s } => Some(rate_per_s),
            Mode::Closed => None,
        },
        protocol: config.protocol,
        scheme: config.signer.scheme(),
        body_bytes: config.signer.body_bytes(),
        concurrency: config.concurrency,
        connections: match config.protocol {
            Protocol::Http1 => config.concurrency,
            Protocol::Http2 => config.connections,
        },
        duration_s,
        requests,
        requests_per_s: requests as f64 / duration_s,
        acknowledged_per_s: n_2xx as f64 / duration_s,
        statuses,
        time_to_2xx: Percentiles::from_micros(&histogram),
        deliveries,
    })
}

enum Connection {
    Http1(http1::SendRequest<Full<Bytes>>),
    Http2(http2::SendRequest<Full<Bytes>>),
}

fn bind_addr(bind: &[std::net::IpAddr], n: usize) -> Option<std::net::IpAddr> {
    (!bind.is_empty()).then(|| bind[n % bind.len()])
}

async fn connect_tcp(target: SocketAddr, bind: Option<std::net::IpAddr>) -> Result<TokioIo<TcpStream>, LoadError> {
    let stream = match bind {
        None => TcpStream::connect(target).await,
        Some(local) => {
            let socket =
                if local.is_ipv4() { tokio::net::TcpSocket::new_v4() } else { tokio::net::TcpSocket::new_v6() };
            match socket.and_then(|socket| socket.bind(SocketAddr::new(local, 0)).map(|()| socket)) {
                Ok(socket) => socket.connect(target).await,
                Err(error) => Err(error),
            }
        }
    }
    .map_err(|error| LoadError::Connect(target, error))?;
    stream.set_nodelay(true).map_err(|error| LoadError::Connect(target, error))?;
    Ok(TokioIo::new(stream))
}

async fn connect_h1(
    target: SocketAddr,
    bind: Option<std::net::IpAddr>,
) -> Result<http1::SendRequest<Full<Bytes>>, LoadError> {
    let (sender, connection) = http1::handshake(connect_tcp(target, bind).await?)
        .await
        .map_err(|error| LoadError::Handshake(target, error))?;
    // The connection task ends when the sender is dropped or the server closes.
    tokio::spawn(connection);
    Ok(sender)
}

async fn connect_h2(
    target: SocketAddr,
    bind: Option<std::net::IpAddr>,
) -> Result<http2::SendRequest<Full<Bytes>>, LoadError> {
    let (sender, connection) = http2::Builder::new(TokioExecutor::new())
        .handshake(connect_tcp(target, bind).await?)
        .await
        .map_err(|error| LoadError::Handshake(target, error))?;
    tokio::spawn(connection);
    Ok(sender)
}

struct Worker {
    worker_idx: usize,
    config: Arc<LoadConfig>,
    counters: Arc<Counters>,
    event_prefix: String,
    start: Instant,
    end: Instant,
}

/// How many recently sent events a worker remembers to re-deliver as duplicates.
const RECENT_EVENTS: usize = 64;

impl Worker {
    async fn run(self, mut connection: Connection) -> WorkerResult {
        let config = &self.config;
        let mut result = WorkerResult {
            histogram: new_histogram(),
            statuses: BTreeMap::new(),
            deliveries: Vec::new(),
            last_answer: self.start,
        };
        let path = config.envelope.path(&config.source);
        let uri: Uri = match config.protocol {
            Protocol::Http1 => path,
            Protocol::Http2 => format!("http://{}{path}", config.target),
        }
        .parse()
        .expect("valid request URI");
        let host = config.target.to_string();
        // Open loop: this worker's share of the rate, its first slot staggered so workers do not send in step.
        let interval = match config.mode {
            Mode::Open { rate_per_s } => Some(Duration::from_secs_f64(config.concurrency as f64 / rate_per_s)),
            Mode::Closed => None,
        };
        let mut intended = match interval {
            Some(interval) => self.start + interval.mul_f64(self.worker_idx as f64 / config.concurrency as f64),
            None => self.start,
        };
        let mut recent: VecDeque<SignedRequest> = VecDeque::with_capacity(RECENT_EVENTS);
        let mut seq: u64 = 0;
        // ThreadRng is not Send; each worker owns a seeded generator.
        let mut rng = StdRng::from_rng(&mut rand::rng());
        loop {
            if interval.is_some() {
                if intended >= self.end || (config.stop_at_end && Instant::now() >= self.end) {
                    break;
                }
                tokio::time::sleep_until(intended.into()).await;
            } else {
                intended = Instant::now();
                if intended >= self.end {
                    break;
                }
            }
            if let Some(max_requests) = config.max_requests
                && self.counters.claimed.fetch_add(1, Ordering::Relaxed) >= max_requests
            {
                break;
            }
            let draw: f64 = rng.random();
            let (request, forged) = if draw < config.duplicate_share && !recent.is_empty() {
                (recent[rng.random_range(0..recent.len())].clone(), false)
            } else if draw < config.duplicate_share + config.bad_signature_share {
                seq += 1;
                let id = format!("{}-{seq}-forged", self.event_prefix);
                (config.signer.request(&id, now_s(), SignatureKind::Forged), true)
            } else {
                seq += 1;
                let id = format!("{}-{seq}", self.event_prefix);
                let request = config.signer.request(&id, now_s(), SignatureKind::Valid);
                if recent.len() == RECENT_EVENTS {
                    recent.pop_front();
                }
                recent.push_back(request.clone());
                (request, false)
            };
            let mut builder = Request::post(uri.clone());
            if config.protocol == Protocol::Http1 {
                builder = builder.header(http::header::HOST, host.as_str());
            }
            for (name, value) in &request.headers {
                builder = builder.header(name, value);
            }
            let body = config.envelope.wrap(&request.event_id, &request.body);
            let http_request = builder.body(Full::new(body)).expect("valid request");
            self.counters.sent.fetch_add(1, Ordering::Relaxed);
            let answer = tokio::time::timeout(config.request_timeout, send(&mut connection, http_request)).await;
            let answered_at = Instant::now();
            result.last_answer = answered_at;
            let outcome = match answer {
                Ok(Ok(status)) => Outcome::Status(status),
                Ok(Err(_)) | Err(_) => Outcome::Failed,
            };
            match outcome {
                Outcome::Status(status) if (200..300).contains(&status) => {
                    self.counters.ok.fetch_add(1, Ordering::Relaxed);
                    let micros = u64::try_from(answered_at.duration_since(intended).as_micros()).unwrap_or(u64::MAX);
                    result.histogram.saturating_record(micros.max(1));
                }
                Outcome::Status(status) if status < 500 => {
                    self.counters.refused.fetch_add(1, Ordering::Relaxed);
                }
                Outcome::Status(_) => {
                    self.counters.server_error.fetch_add(1, Ordering::Relaxed);
                }
                Outcome::Failed => {
                    self.counters.failed.fetch_add(1, Ordering::Relaxed);
                    // The connection may be broken: replace it (bounded by the run's end).
                    if Instant::now() < self.end
                        && let Ok(fresh) =
                            reconnect(config.protocol, config.target, bind_addr(&config.bind, self.worker_idx)).await
                    {
                        connection = fresh;
                    }
                }
            }
            let label = match outcome {
                Outcome::Status(status) => status.to_string(),
                Outcome::Failed => "failed".to_owned(),
            };
            *result.statuses.entry(label).or_insert(0) += 1;
            result.deliveries.push(Delivery { event_id: request.event_id, outcome, forged });
            if let Some(interval) = interval {
                intended += interval;
            }
        }
        result
    }
}

async fn reconnect(
    protocol: Protocol,
    target: SocketAddr,
    bind: Option<std::net::IpAddr>,
) -> Result<Connection, LoadError> {
    Ok(match protocol {
        Protocol::Http1 => Connection::Http1(connect_h1(target, bind).await?),
        Protocol::Http2 => Connection::Http2(connect_h2(target, bind).await?),
    })
}

/// Sends one request and reads the whole response; returns the status.
async fn send(connection: &mut Connection, request: Request<Full<Bytes>>) -> Result<u16, hyper::Error> {
    let response = match connection {
        Connection::Http1(sender) => {
            sender.ready().await?;
            sender.send_request(request).await?
        }
        Connection::Http2(sender) => {
            sender.ready().await?;
            sender.send_request(request).await?
        }
    };
    let status = response.status().as_u16();
    response.into_body().collect().await?;
    Ok(status)
}

fn now_s() -> i64 {
    hookline_common::wire::now_ms() / 1000
}

async fn print_progress(counters: Arc<Counters>, start: Instant, stop: CancellationToken) {
    let mut last_sent = 0;
    let mut ticker = tokio::time::interval_at((start + Duration::from_secs(1)).into(), Duration::from_secs(1));
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let sent = counters.sent.load(Ordering::Relaxed);
        eprintln!(
            "loadgen: {:>5.1}s sent {sent} ({}/s) 2xx {} 4xx {} 5xx {} failed {}",
            start.elapsed().as_secs_f64(),
            sent - last_sent,
            counters.ok.load(Ordering::Relaxed),
            counters.refused.load(Ordering::Relaxed),
            counters.server_error.load(Ordering::Relaxed),
            counters.failed.load(Ordering::Relaxed),
        );
        last_sent = sent;
    }
}

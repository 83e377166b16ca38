//! The flow of the last hour, for the console's overview: per source, requests accepted and refused per minute
//! (and the refusals' codes); per consumer service, events processed, retrying and dead-lettered per minute, its
//! lag, its oldest waiting record, its open breakers and paused routes.
//!
//! `serve` samples every [`crate::config::FlowConfig::sample_interval_s`]: each gateway of `[gateways] admin_urls`
//! and each replica of `[flow] services` is asked for its `/metrics` (the counters and gauges they already export,
//! [`prom`]), and each service's consumer group for its committed offsets ([`lag`]). The samples of the last hour
//! are kept in memory (a restart starts the charts afresh; Prometheus keeps the long history), and turned into
//! per-minute values when a page asks ([`minutes`]). What could not be read is kept as such, with the reason, and
//! shown as such: a missing reading is never a zero.

pub mod lag;
pub mod minutes;
pub mod prom;

use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use bytes::Bytes;
use futures_util::{StreamExt as _, future::join_all};
use hookline_common::{
    config::KafkaConfig,
    http_client::{self, HttpsClient},
    wire::now_ms,
};
use http::{Request, StatusCode, header};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use tokio_util::sync::CancellationToken;

use self::{
    minutes::{MINUTE_MS, MINUTES},
    prom::{ConsumerReading, GatewayReading, Outcome, SourceOutcome},
};
use crate::{
    config::ReplayerConfig,
    rejections::{FETCH_TIMEOUT, MAX_RESPONSE_BYTES, Unreachable, describe_client_error},
};

/// How many refusal codes a source lists, most frequent first.
const TOP_REFUSALS: usize = 3;
/// At most this many addresses of one admin name are asked (the first, in address order): a large headless
/// Service, or a resolver that answers hundreds of records, must not make the sampler hold hundreds of 4 MiB
/// answers at once.
const MAX_ADDRESSES_PER_NAME: usize = 64;
/// At most this many `/metrics` fetches at once, across every configured URL.
const MAX_CONCURRENT_FETCHES: usize = 16;

/// A consumer service sampled: its name, group and replicas' admin URLs.
#[derive(Debug, Clone)]
struct ServiceSource {
    name: String,
    group: String,
    admin_urls: Vec<String>,
}

/// What each endpoint answered, by the URL asked: a configured URL, or one address its host name resolved to.
type Readings<T> = BTreeMap<String, Result<T, String>>;

/// One round of readings (services in configured order).
#[derive(Debug)]
struct Sample {
    at_ms: i64,
    gateways: Readings<GatewayReading>,
    services: Vec<ServiceSample>,
}

#[derive(Debug)]
struct ServiceSample {
    replicas: Readings<ConsumerReading>,
    lag: Result<i64, String>,
}

/// The sampler and its last hour of samples.
#[derive(Debug)]
pub struct Flow {
    client: HttpsClient,
    kafka: KafkaConfig,
    gateway_urls: Vec<String>,
    services: Vec<ServiceSource>,
    interval: Duration,
    samples: Mutex<VecDeque<Sample>>,
}

/// One source's last hour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFlow {
    pub name: String,
    /// Requests accepted per minute, the current minute last.
    pub accepted: Vec<u64>,
    /// Requests refused per minute.
    pub refused: Vec<u64>,
    /// The most frequent refusal codes of the hour, with their counts.
    pub top_refusals: Vec<(String, u64)>,
    /// Requests refused in the hour because the source was over its quota (the gateway's `quota_exceeded`):
    /// shown whether or not it is among the top refusals, so who is throttled is never hidden by a louder code.
    pub throttled: u64,
}

/// The gateway's refusal code for a source over its quota (`rate_per_s`, `burst`).
pub const QUOTA_EXCEEDED: &str = "quota_exceeded";

/// One consumer service's last hour and its state at the last sample.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceFlow {
    pub name: String,
    pub group: String,
    /// Events per minute, per outcome (every outcome present).
    pub events: BTreeMap<Outcome, Vec<u64>>,
    /// The group's lag, highest per minute.
    pub lag: Vec<Option<i64>>,
    /// The group's lag at the last sample, or why it could not be read.
    pub lag_now: Result<i64, String>,
    /// Whether any admin URL is configured for its replicas.
    pub admin_urls_configured: bool,
    /// The replicas that answered at the last sample, of `replicas_asked`.
    pub replicas_answered: usize,
    pub replicas_asked: usize,
    /// The replicas that did not.
    pub unreachable: Vec<Unreachable>,
    /// Records waiting for a route, over the replicas that answered.
    pub waiting_records: f64,
    /// The oldest of them, seconds since written to Kafka.
    pub oldest_waiting_age_s: f64,
    /// Routes whose breaker is open on any replica.
    pub breaker_open: Vec<String>,
    /// Routes paused on any replica.
    pub paused_routes: Vec<String>,
    /// Whether any replica has paused processing because Redis fails.
    pub redis_paused: bool,
}

/// What the overview shows of the flow.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowView {
    /// The start of the first charted minute (ms since the epoch).
    pub first_minute_ms: i64,
    /// When the last sample was taken; `None` before the first.
    pub last_sample_ms: Option<i64>,
    pub interval_s: u64,
    /// How many gateway URLs are configured.
    pub gateways_configured: usize,
    /// The gateways that did not answer at the last sample.
    pub unreachable_gateways: Vec<Unreachable>,
    pub sources: Vec<SourceFlow>,
    pub services: Vec<ServiceFlow>,
}

/// The flow's HTTP client cannot be built: said at start, and `serve` stops.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the flow's HTTP client: {0}")]
pub struct FlowError(#[source] http_client::ClientError);

impl Flow {
    /// A sampler of `config`'s gateways and flow services (nothing is read until [`Flow::run`]).
    pub fn new(config: &ReplayerConfig) -> Result<Self, FlowError> {
        let client = http_client::client_with(http_client::ClientOptions {
            connect_timeout: Some(FETCH_TIMEOUT),
            ..http_client::ClientOptions::default()
        })
        .map_err(FlowError)?;
        let services = config
            .flow
            .services
            .iter()
            .map(|service| ServiceSource {
                name: service.name.clone(),
                group: service.group_id.clone().unwrap_or_else(|| config.lookup.group_of(&service.name).to_owned()),
                admin_urls: service.admin_urls.clone(),
            })
            .collect();
        Ok(Self {
            client,
            kafka: config.kafka.clone(),
            gateway_urls: config.gateways.admin_urls.clone(),
            services,
            interval: Duration::from_secs(config.flow.sample_interval_s),
            samples: Mutex::default(),
        })
    }

    /// Samples every interval until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        if self.gateway_urls.is_empty() && self.services.is_empty() {
            return;
        }
        loop {
            self.sample_now().await;
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(self.interval) => {}
            }
        }
    }

    /// Takes one sample now and keeps it (what [`Flow::run`] does every interval).
    pub async fn sample_now(&self) {
        let sample = self.sample().await;
        self.keep(sample);
    }

    /// One round: every endpoint and group at once.
    async fn sample(&self) -> Sample {
        let at_ms = now_ms();
        let gateways = read_all(&self.client, &self.gateway_urls, prom::gateway);
        let services = self.services.iter().map(|service| async {
            let replicas = read_all(&self.client, &service.admin_urls, prom::consumer);
            let (kafka, name, group) = (self.kafka.clone(), service.name.clone(), service.group.clone());
            let lag = tokio::task::spawn_blocking(move || lag::group_lag(&kafka, &name, &group));
            let (replicas, lag) = tokio::join!(replicas, lag);
            let lag = match lag {
                Ok(Ok(lag)) => Ok(lag),
                Ok(Err(error)) => Err(format!("Kafka: {error}")),
                Err(error) => Err(format!("the lag task failed: {error}")),
            };
            ServiceSample { replicas, lag }
        });
        let (gateways, services) = tokio::join!(gateways, join_all(services));
        Sample { at_ms, gateways, services }
    }

    /// Adds a sample and forgets those older than the charted hour.
    fn keep(&self, sample: Sample) {
        let mut samples = self.samples.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // One sample before the hour is kept: the first minute's increases are taken from it.
        let oldest_needed = sample.at_ms - (MINUTES as i64 + 1) * MINUTE_MS;
        samples.push_back(sample);
        while samples.len() > 2 && samples.get(1).is_some_and(|second| second.at_ms < oldest_needed) {
            samples.pop_front();
        }
    }

    /// The last hour, per minute, as of `now_ms`.
    pub fn view(&self, now_ms: i64) -> FlowView {
        let samples = self.samples.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let first = minutes::first_minute_ms(now_ms);
        let last = samples.back();
        let mut requests: BTreeMap<SourceOutcome, Vec<u64>> = BTreeMap::new();
        let endpoints: BTreeSet<&String> = samples.iter().flat_map(|sample| sample.gateways.keys()).collect();
        for endpoint in endpoints {
            let readings: Vec<(i64, &BTreeMap<SourceOutcome, f64>)> = samples
                .iter()
                .filter_map(|sample| match sample.gateways.get(endpoint) {
                    Some(Ok(reading)) => Some((sample.at_ms, &reading.requests)),
                    _ => None,
                })
                .collect();
            minutes::add_increases(&mut requests, &readings, first);
        }
        let services = self.services.iter().enumerate().map(|(position, source)| {
            let service_samples: Vec<(i64, &ServiceSample)> =
                samples.iter().filter_map(|sample| sample.services.get(position).map(|s| (sample.at_ms, s))).collect();
            service_flow(source, &service_samples, first)
        });
        FlowView {
            first_minute_ms: first,
            last_sample_ms: last.map(|sample| sample.at_ms),
            interval_s: self.interval.as_secs(),
            gateways_configured: self.gateway_urls.len(),
            unreachable_gateways: last.map(|sample| unreachable(&sample.gateways)).unwrap_or_default(),
            sources: source_flows(requests),
            services: services.collect(),
        }
    }
}

/// Per source: accepted and refused per minute, and the hour's most frequent refusal codes.
fn source_flows(requests: BTreeMap<SourceOutcome, Vec<u64>>) -> Vec<SourceFlow> {
    let mut sources: BTreeMap<String, SourceFlow> = BTreeMap::new();
    let mut refusals: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for ((source, outcome), per_minute) in requests {
        let flow = sources.entry(source.clone()).or_insert_with(|| SourceFlow {
            name: source.clone(),
            accepted: vec![0; MINUTES],
            refused: vec![0; MINUTES],
            top_refusals: Vec::new(),
            throttled: 0,
        });
        let into = if prom::is_accepted(&outcome) { &mut flow.accepted } else { &mut flow.refused };
        for (total, count) in into.iter_mut().zip(&per_minute) {
            *total += count;
        }
        if outcome == QUOTA_EXCEEDED {
            flow.throttled += per_minute.iter().sum::<u64>();
        }
        if !prom::is_accepted(&outcome) {
            *refusals.entry(source).or_default().entry(outcome).or_default() += per_minute.iter().sum::<u64>();
        }
    }
    for (source, codes) in refusals {
        let mut codes: Vec<(String, u64)> = codes.into_iter().filter(|(_, count)| *count > 0).collect();
        codes.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        codes.truncate(TOP_REFUSALS);
        if let Some(flow) = sources.get_mut(&source) {
            flow.top_refusals = codes;
        }
    }
    sources.into_values().collect()
}

fn service_flow(source: &ServiceSource, samples: &[(i64, &ServiceSample)], first: i64) -> ServiceFlow {
    let mut events: BTreeMap<Outcome, Vec<u64>> =
        Outcome::ALL.iter().map(|outcome| (*outcome, vec![0; MINUTES])).collect();
    let endpoints: BTreeSet<&String> = samples.iter().flat_map(|(_, sample)| sample.replicas.keys()).collect();
    for endpoint in endpoints {
        let readings: Vec<(i64, &BTreeMap<Outcome, f64>)> = samples
            .iter()
            .filter_map(|(at_ms, sample)| match sample.replicas.get(endpoint) {
                Some(Ok(reading)) => Some((*at_ms, &reading.events)),
                _ => None,
            })
            .collect();
        minutes::add_increases(&mut events, &readings, first);
    }
    let lag_points: Vec<(i64, i64)> =
        samples.iter().filter_map(|(at_ms, sample)| sample.lag.as_ref().ok().map(|lag| (*at_ms, *lag))).collect();
    let mut flow = ServiceFlow {
        name: source.name.clone(),
        group: source.group.clone(),
        events,
        lag: minutes::highest_per_minute(&lag_points, first),
        lag_now: Err("not sampled yet".to_owned()),
        admin_urls_configured: !source.admin_urls.is_empty(),
        replicas_answered: 0,
        replicas_asked: 0,
        unreachable: Vec::new(),
        waiting_records: 0.0,
        oldest_waiting_age_s: 0.0,
        breaker_open: Vec::new(),
        paused_routes: Vec::new(),
        redis_paused: false,
    };
    if let Some((_, last)) = samples.last() {
        flow.lag_now = last.lag.clone();
        flow.unreachable = unreachable(&last.replicas);
        flow.replicas_asked = last.replicas.len();
        for reading in last.replicas.values().flatten() {
            flow.replicas_answered += 1;
            flow.waiting_records += reading.waiting_records;
            flow.oldest_waiting_age_s = flow.oldest_waiting_age_s.max(reading.oldest_waiting_age_s);
            flow.breaker_open.extend(reading.breaker_open.iter().cloned());
            flow.paused_routes.extend(reading.paused_routes.iter().cloned());
            flow.redis_paused |= reading.redis_paused;
        }
        for routes in [&mut flow.breaker_open, &mut flow.paused_routes] {
            routes.sort();
            routes.dedup();
        }
    }
    flow
}

fn unreachable<T>(readings: &Readings<T>) -> Vec<Unreachable> {
    readings
        .iter()
        .filter_map(|(url, reading)| {
            reading.as_ref().err().map(|reason| Unreachable { url: url.clone(), reason: reason.clone() })
        })
        .collect()
}

/// Every endpoint behind `urls` asked for its `/metrics` at once, each answer parsed by `parse`.
async fn read_all<T>(client: &HttpsClient, urls: &[String], parse: fn(&str) -> T) -> Readings<T> {
    let mut readings = BTreeMap::new();
    let mut endpoints = Vec::new();
    for (url, found) in urls.iter().zip(join_all(urls.iter().map(|url| endpoints_of(url))).await) {
        match found {
            Ok(found) => endpoints.extend(found),
            Err(reason) => {
                readings.insert(url.clone(), Err(reason));
            }
        }
    }
    // Built first: a stream over a closure borrowing `client` is not `Send` for every lifetime the task needs.
    let fetches: Vec<_> = endpoints.iter().map(|endpoint| fetch_metrics(client, endpoint)).collect();
    let answers: Vec<_> = futures_util::stream::iter(fetches).buffered(MAX_CONCURRENT_FETCHES).collect().await;
    for (endpoint, answer) in endpoints.into_iter().zip(answers) {
        readings.insert(endpoint, answer.map(|text| parse(&text)));
    }
    readings
}

/// The endpoints behind a configured admin URL. An `http://` URL whose host name resolves to several addresses
/// (a Compose service's replicas, a Kubernetes headless Service's pods) is each address, as Prometheus's DNS service
/// discovery finds them: each replica's counters are its own, and one name balancing over them would mix them.
/// Any other URL is itself: an address, a name with one address (or only loopback ones), an `https://` URL (whose
/// certificate names the host, not its addresses).
async fn endpoints_of(url: &str) -> Result<Vec<String>, String> {
    let uri: http::Uri = url.parse().map_err(|error| format!("not a URL: {error}"))?;
    let itself = Ok(vec![url.to_owned()]);
    let Some(host) = uri.host() else { return itself };
    if uri.scheme_str() != Some("http") || host.starts_with('[') || host.parse::<std::net::IpAddr>().is_ok() {
        return itself;
    }
    let port = uri.port_u16().unwrap_or(80);
    let resolved = tokio::time::timeout(FETCH_TIMEOUT, tokio::net::lookup_host((host, port)))
        .await
        .map_err(|_| format!("no DNS answer for `{host}` within {} s", FETCH_TIMEOUT.as_secs()))?
        .map_err(|error| format!("DNS: {error}"))?;
    Ok(endpoints_from(url, uri.path(), resolved.collect()))
}

/// The endpoints of `url` (whose path is `path`) resolved to `addresses`: itself when it is one address or only
/// loopback ones, else each address, the first [`MAX_ADDRESSES_PER_NAME`] of them.
fn endpoints_from(url: &str, path: &str, addresses: BTreeSet<SocketAddr>) -> Vec<String> {
    if addresses.len() <= 1 || addresses.iter().all(|address| address.ip().is_loopback()) {
        return vec![url.to_owned()];
    }
    if addresses.len() > MAX_ADDRESSES_PER_NAME {
        tracing::warn!(
            url,
            addresses = addresses.len(),
            asked = MAX_ADDRESSES_PER_NAME,
            "an admin name resolves to more addresses than the flow sampler asks: only the first are read"
        );
    }
    let path = path.trim_end_matches('/');
    addresses.into_iter().take(MAX_ADDRESSES_PER_NAME).map(|address| format!("http://{address}{path}")).collect()
}

/// A process's `/metrics` text, or why there is none; the whole exchange within [`FETCH_TIMEOUT`].
async fn fetch_metrics(client: &HttpsClient, url: &str) -> Result<String, String> {
    let uri = format!("{}/metrics", url.trim_end_matches('/'));
    let request = Request::get(uri)
        .header(header::ACCEPT, "text/plain")
        .body(Full::<Bytes>::default())
        .map_err(|error| format!("cannot build the request: {error}"))?;
    let exchange = async {
        let response = client.request(request).await.map_err(|error| describe_client_error(&error))?;
        let status = response.status();
        if status != StatusCode::OK {
            return Err(format!("answered {}", status.as_u16()));
        }
        match Limited::new(response.into_body(), MAX_RESPONSE_BYTES).collect().await {
            Ok(collected) => String::from_utf8(collected.to_bytes().to_vec()).map_err(|_| "not UTF-8".to_owned()),
            Err(error) if error.downcast_ref::<LengthLimitError>().is_some() => {
                Err(format!("answer larger than {} MiB", MAX_RESPONSE_BYTES / (1024 * 1024)))
            }
            Err(error) => Err(format!("the answer could not be read: {error}")),
        }
    };
    tokio::time::timeout(FETCH_TIMEOUT, exchange)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {} s", FETCH_TIMEOUT.as_secs())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sources_throttled_requests_are_counted_apart_and_among_its_refusals() {
        let minutes = |count: u64| {
            let mut per_minute = vec![0; MINUTES];
            per_minute[MINUTES - 1] = count;
            per_minute
        };
        let requests = BTreeMap::from([
            (("tenant".to_owned(), "accepted".to_owned()), minutes(3)),
            (("tenant".to_owned(), QUOTA_EXCEEDED.to_owned()), minutes(7)),
            (("tenant".to_owned(), "signature_mismatch".to_owned()), minutes(20)),
            (("neighbour".to_owned(), "accepted".to_owned()), minutes(100)),
        ]);
        let flows = source_flows(requests);
        let tenant = flows.iter().find(|flow| flow.name == "tenant").expect("tenant");
        assert_eq!((tenant.throttled, tenant.refused.iter().sum::<u64>()), (7, 27));
        assert!(tenant.top_refusals.contains(&(QUOTA_EXCEEDED.to_owned(), 7)));
        let neighbour = flows.iter().find(|flow| flow.name == "neighbour").expect("neighbour");
        assert_eq!((neighbour.throttled, neighbour.accepted.iter().sum::<u64>()), (0, 100));
    }

    #[test]
    fn a_name_with_hundreds_of_addresses_is_asked_at_its_first_64() {
        let addresses: BTreeSet<SocketAddr> =
            (0..300_u32).map(|n| SocketAddr::from((std::net::Ipv4Addr::from(0x0a00_0000 + n), 9091))).collect();
        let endpoints = endpoints_from("http://gateway:9091/", "/", addresses);
        assert_eq!(endpoints.len(), MAX_ADDRESSES_PER_NAME);
        assert_eq!(endpoints[0], "http://10.0.0.0:9091");
        let two: BTreeSet<SocketAddr> =
            ["10.0.0.1:9091", "10.0.0.2:9091"].iter().map(|address| address.parse().unwrap()).collect();
        assert_eq!(
            endpoints_from("http://gateway:9091", "", two),
            vec!["http://10.0.0.1:9091", "http://10.0.0.2:9091"]
        );
    }

    #[tokio::test]
    async fn an_address_a_loopback_name_and_an_https_url_are_asked_as_configured() {
        for url in
            ["http://127.0.0.1:9091", "http://localhost:9091", "https://gateway-0.example:9091", "http://[::1]:9091"]
        {
            assert_eq!(endpoints_of(url).await, Ok(vec![url.to_owned()]), "{url}");
        }
        let unknown = endpoints_of("http://no-such-host.invalid:9091").await;
        assert!(unknown.is_err(), "a name that does not resolve is named as such: {unknown:?}");
    }
}

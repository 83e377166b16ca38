//! The operations on dead-letter entries, shared by the CLI and the HTTP API so both have the same semantics:
//! list, stats, show, replay (re-drive to the inbound topic through the consumer's normal dedupe and handler path)
//! and discard. Every fate is recorded in the status topic; nothing is ever deleted from Kafka.

use std::{collections::BTreeMap, time::Duration};

use base64::Engine as _;
use hookline_common::{
    kafka::{QuietContext, producer_config},
    wire::{EntryStatus, EntryStatusRecord, header, now_ms},
};
use rdkafka::{
    Message,
    error::KafkaError,
    message::{Header, Headers, OwnedHeaders},
    producer::{FutureProducer, FutureRecord},
    util::Timeout,
};
use serde::{Deserialize, Serialize};

use crate::{
    config::ReplayerConfig,
    filter::Filter,
    view::{Entry, Status, View},
};

#[derive(Debug, thiserror::Error)]
pub enum OpError {
    #[error("{0}")]
    BadRequest(String),
    #[error("kafka")]
    Kafka(#[from] KafkaError),
    #[error("the Kafka reader task failed")]
    Task(#[from] tokio::task::JoinError),
}

/// What `replay` should do.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReplayRequest {
    /// Entry ids to replay; or use `all` with `filter`.
    pub ids: Vec<String>,
    /// Replay every entry the filter matches (without a status in the filter: only `new` and `replay_failed`).
    pub all: bool,
    pub filter: Filter,
    /// Report what would be replayed; produce and record nothing.
    pub dry_run: bool,
    /// At most this many replays per second.
    pub rate: Option<f64>,
    /// Replay discarded and flagged entries too.
    pub force: bool,
    /// Who asked (recorded in the status topic).
    pub by: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscardRequest {
    pub ids: Vec<String>,
    pub reason: String,
    #[serde(default)]
    pub by: String,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Skipped {
    pub id: String,
    pub reason: String,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub dry_run: bool,
    /// Replayed (or, in a dry run, would be) / discarded.
    pub done: Vec<String>,
    pub skipped: Vec<Skipped>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    pub total: usize,
    pub by_source: BTreeMap<String, usize>,
    pub by_error_class: BTreeMap<String, usize>,
    pub by_status: BTreeMap<String, usize>,
}

/// Everything about one entry, for `show`.
#[derive(Debug, Clone, Serialize)]
pub struct Detail {
    #[serde(flatten)]
    pub entry: Entry,
    pub headers: Vec<(String, String)>,
    /// The raw body when it is UTF-8 text...
    pub body: Option<String>,
    /// ...or else base64.
    pub body_base64: Option<String>,
}

#[derive(Clone)]
pub struct Replayer {
    config: ReplayerConfig,
    producer: FutureProducer<QuietContext>,
}

impl std::fmt::Debug for Replayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replayer").field("dlq_topic", &self.config.kafka.dlq_topic).finish_non_exhaustive()
    }
}

const UNKNOWN: &str = "unknown";

impl Replayer {
    pub fn new(config: ReplayerConfig) -> Result<Self, KafkaError> {
        let producer = producer_config(&config.kafka).create_with_context(QuietContext::new("replayer-producer"))?;
        Ok(Self { config, producer })
    }

    pub fn config(&self) -> &ReplayerConfig {
        &self.config
    }

    pub async fn view(&self) -> Result<View, OpError> {
        let (kafka, max) = (self.config.kafka.clone(), self.config.max_failed_again);
        Ok(tokio::task::spawn_blocking(move || View::load(&kafka, max)).await??)
    }

    pub async fn list(&self, filter: &Filter) -> Result<Vec<Entry>, OpError> {
        let compiled = filter.compile().map_err(OpError::BadRequest)?;
        Ok(self.view().await?.entries.into_iter().filter(|entry| compiled.matches(entry)).collect())
    }

    pub async fn stats(&self, filter: &Filter) -> Result<Stats, OpError> {
        Ok(stats_of(&self.list(filter).await?))
    }

    pub async fn show(&self, id: &str) -> Result<Option<Detail>, OpError> {
        let view = self.view().await?;
        Ok(view.get(id).map(|entry| {
            let body = entry.body();
            let text = std::str::from_utf8(body).ok().map(str::to_owned);
            Detail {
                headers: entry.headers(),
                body_base64: text.is_none().then(|| base64::engine::general_purpose::STANDARD.encode(body)),
                body: text,
                entry: entry.clone(),
            }
        }))
    }

    /// Re-drives entries: `replayed` is recorded, then each is produced to its original topic with its original
    /// key, raw body and headers, plus `hookline-replay-of` (the entry id) and `hookline-replay-count`.
    /// The consumer's dedupe makes a second replay of the same entry a duplicate, never a second processing.
    pub async fn replay(&self, request: &ReplayRequest) -> Result<Report, OpError> {
        if request.ids.is_empty() != request.all {
            return Err(OpError::BadRequest("give entry ids, or `all` with a filter (not both)".to_owned()));
        }
        if request.rate.is_some_and(|rate| !(rate.is_finite() && rate > 0.0)) {
            return Err(OpError::BadRequest("rate must be a positive number of replays per second".to_owned()));
        }
        let compiled = request.filter.compile().map_err(OpError::BadRequest)?;
        let view = self.view().await?;
        let mut report = Report { dry_run: request.dry_run, ..Report::default() };
        let mut selected: Vec<&Entry> = Vec::new();
        if request.all {
            for entry in view.entries.iter().filter(|entry| compiled.matches(entry)) {
                if !compiled.has_status() && !matches!(entry.status, Status::New | Status::ReplayFailed) {
                    continue; // `--all` alone re-drives only entries nobody has dealt with.
                }
                selected.push(entry);
            }
        } else {
            for id in &request.ids {
                match view.get(id) {
                    Some(entry) => selected.push(entry),
                    None => report.skipped.push(Skipped { id: id.clone(), reason: "no such entry".to_owned() }),
                }
            }
        }
        let mut limiter = request.rate.map(RateLimiter::per_second);
        for entry in selected {
            let id = &entry.entry.id;
            if let Some(reason) = refusal(entry, request.force, request.all) {
                report.skipped.push(Skipped { id: id.clone(), reason });
                continue;
            }
            if request.dry_run {
                report.done.push(id.clone());
                continue;
            }
            if let Some(limiter) = &mut limiter {
                limiter.acquire().await;
            }
            self.redrive(entry, &request.by).await?;
            report.done.push(id.clone());
        }
        Ok(report)
    }

    async fn redrive(&self, entry: &Entry, by: &str) -> Result<(), OpError> {
        let id = &entry.entry.id;
        let replays = entry.replays + 1;
        let count = replays.to_string();
        let mut headers = OwnedHeaders::new();
        if let Some(original) = entry.record.headers() {
            for h in original.iter() {
                let ours =
                    h.key.starts_with("hookline-dlq-") || h.key == header::REPLAY_OF || h.key == header::REPLAY_COUNT;
                if !ours {
                    headers = headers.insert(Header { key: h.key, value: h.value });
                }
            }
        }
        headers = headers
            .insert(Header { key: header::REPLAY_OF, value: Some(id.as_str()) })
            .insert(Header { key: header::REPLAY_COUNT, value: Some(count.as_str()) });
        let topic = entry.entry.original_topic.as_deref().unwrap_or(&self.config.kafka.inbound_topic);
        let mut record = FutureRecord::<[u8], [u8]>::to(topic).headers(headers).payload(entry.body());
        if let Some(key) = entry.record.key() {
            record = record.key(key);
        }
        // The status first: the consumer records the outcome as soon as it has processed the re-driven event, and
        // in a compacted topic the outcome must be the later record.
        let status = |status, note| EntryStatusRecord {
            status,
            at_ms: now_ms(),
            by: by_or_default(by),
            event_id: entry.entry.event_id.clone(),
            new_entry: None,
            note,
            replays: Some(replays),
        };
        self.record_status(id, &status(EntryStatus::Replayed, None)).await?;
        if let Err(error) = self.send(record).await {
            let note = Some(format!("re-drive not produced: {error}"));
            let _ = self.record_status(id, &status(EntryStatus::ReplayFailed, note)).await;
            return Err(error);
        }
        tracing::info!(entry_id = %id, topic, replays, "entry replayed");
        Ok(())
    }

    /// Records entries as discarded (with the reason); they stay in Kafka and `replay --all` skips them.
    pub async fn discard(&self, request: &DiscardRequest) -> Result<Report, OpError> {
        if request.reason.trim().is_empty() {
            return Err(OpError::BadRequest("a discard needs a reason".to_owned()));
        }
        if request.ids.is_empty() {
            return Err(OpError::BadRequest("give the ids of the entries to discard".to_owned()));
        }
        let view = self.view().await?;
        let mut report = Report::default();
        for id in &request.ids {
            let Some(entry) = view.get(id) else {
                report.skipped.push(Skipped { id: id.clone(), reason: "no such entry".to_owned() });
                continue;
            };
            if entry.status == Status::Discarded {
                report.skipped.push(Skipped { id: id.clone(), reason: "already discarded".to_owned() });
                continue;
            }
            let status = EntryStatusRecord {
                status: EntryStatus::Discarded,
                at_ms: now_ms(),
                by: by_or_default(&request.by),
                event_id: entry.entry.event_id.clone(),
                new_entry: None,
                note: Some(request.reason.clone()),
                replays: Some(entry.replays),
            };
            self.record_status(id, &status).await?;
            tracing::info!(entry_id = %id, reason = %request.reason, "entry discarded");
            report.done.push(id.clone());
        }
        Ok(report)
    }

    async fn record_status(&self, id: &str, status: &EntryStatusRecord) -> Result<(), OpError> {
        let value = serde_json::to_vec(status).map_err(|error| OpError::BadRequest(error.to_string()))?;
        let record = FutureRecord::<str, [u8]>::to(&self.config.kafka.dlq_status_topic).key(id).payload(&value);
        self.send(record).await
    }

    async fn send<K, P>(&self, record: FutureRecord<'_, K, P>) -> Result<(), OpError>
    where
        K: rdkafka::message::ToBytes + ?Sized,
        P: rdkafka::message::ToBytes + ?Sized,
    {
        let deadline = Duration::from_millis(self.config.kafka.produce_timeout_ms);
        match self.producer.send(record, Timeout::After(deadline)).await {
            Ok(_) => Ok(()),
            Err((error, _)) => Err(OpError::Kafka(error)),
        }
    }
}

/// Why an entry is not replayed, if it is not.
fn refusal(entry: &Entry, force: bool, all: bool) -> Option<String> {
    if entry.status == Status::Discarded && (all || !force) {
        // `--all` never re-drives a discarded entry, even forced: discarding is how an operator says "never".
        return Some("discarded (replay it by id with force)".to_owned());
    }
    if entry.flagged && !force {
        return Some(format!("flagged: failed again {} times after replays (needs force)", entry.failed_again));
    }
    None
}

fn by_or_default(by: &str) -> String {
    if by.trim().is_empty() { "replayer".to_owned() } else { by.to_owned() }
}

pub fn stats_of(entries: &[Entry]) -> Stats {
    let mut stats = Stats { total: entries.len(), ..Stats::default() };
    for entry in entries {
        let source = entry.entry.source.clone().unwrap_or_else(|| UNKNOWN.to_owned());
        *stats.by_source.entry(source).or_default() += 1;
        let class = entry.entry.error_class.clone().unwrap_or_else(|| UNKNOWN.to_owned());
        *stats.by_error_class.entry(class).or_default() += 1;
        *stats.by_status.entry(entry.status.as_str().to_owned()).or_default() += 1;
    }
    stats
}

/// Spaces replays evenly: at most `rate` per second, the first at once.
#[derive(Debug)]
pub struct RateLimiter {
    interval: Duration,
    next: Option<tokio::time::Instant>,
}

impl RateLimiter {
    pub fn per_second(rate: f64) -> Self {
        Self { interval: Duration::from_secs_f64(1.0 / rate), next: None }
    }

    pub async fn acquire(&mut self) {
        let now = tokio::time::Instant::now();
        let at = self.next.map_or(now, |next| next.max(now));
        tokio::time::sleep_until(at).await;
        self.next = Some(at + self.interval);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_rate_limiter_grants_at_most_rate_per_second() {
        let mut limiter = RateLimiter::per_second(4.0);
        let started = tokio::time::Instant::now();
        let mut granted_in_first_second = 0;
        for _ in 0..10 {
            limiter.acquire().await;
            if started.elapsed() < Duration::from_secs(1) {
                granted_in_first_second += 1;
            }
        }
        // Virtual time: counted, not timed. Four in the first second (at 0, 250, 500, 750 ms).
        assert_eq!(granted_in_first_second, 4);
        assert_eq!(started.elapsed(), Duration::from_millis(2250));
    }
}

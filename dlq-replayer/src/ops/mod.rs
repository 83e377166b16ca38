//! The operations on dead-letter entries, shared by the CLI and the HTTP API so both have the same semantics:
//! list, stats, show, replay (re-drive to the inbound topic through the consumer's normal dedupe and handler path)
//! and discard. Every fate is recorded in the status topic; nothing is ever deleted from Kafka. Re-processing
//! events beyond the DLQ (already processed ones, re-driven to one service) is in [`reprocess`].

mod audit;
mod by_reference;
mod pause;
mod rate;
mod redrive;
mod reprocess;

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use base64::Engine as _;
use hookline_common::{
    producer::{AckedProducer, ProduceError, QueueWait},
    record_auth::{RecordKeys, RecordKind, Verdict},
    telemetry::traces::{KeyValue, Parent, SpanKind, TraceSpan, attribute},
    wire::{EntryStatus, EntryStatusRecord, FetchedRecord, UNAUTHENTICATED_RECORD_CLASS, now_ms},
};
use hookline_record::Outgoing;
use rdkafka::error::KafkaError;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

pub use self::{
    pause::PauseRequest,
    rate::RateLimiter,
    redrive::{Provenance, RedriveTopicError, VOUCHED_HEADERS},
    reprocess::{ReprocessReport, ReprocessRequest, Reprocessed},
};
pub use crate::index::{Page, Stats};
use crate::{
    config::ReplayerConfig,
    fetch::Fetcher,
    filter::Filter,
    index::{Budget, Entry, Index, IndexError, Position, Query, Status, tail},
};

#[derive(Debug, thiserror::Error)]
pub enum OpError {
    #[error("{0}")]
    BadRequest(String),
    #[error("kafka")]
    Kafka(#[from] KafkaError),
    #[error("redis")]
    Redis(#[source] redis::RedisError),
    #[error("a record was not acknowledged")]
    Produce(#[from] ProduceError),
    #[error("the Kafka reader task failed")]
    Task(#[from] tokio::task::JoinError),
    /// The service's index has not read the topics up to where they were at start yet.
    #[error("the dead-letter index is still being built")]
    NotReady,
    #[error("the dead-letter index")]
    Index(#[from] IndexError),
    /// As many event searches as may run at once are running ([`MAX_CONCURRENT_SEARCHES`]): each
    /// holds hundreds of MiB while it reads.
    #[error("an event search is running already; try again when it ends")]
    Busy,
}

/// How many event searches may run at once in one process: each holds up to a few hundred MiB of fetched records
/// (docs/benchmarks/event-search.md), in a replayer given 1 GiB beside its index.
pub const MAX_CONCURRENT_SEARCHES: usize = 1;

/// The entries a bulk action takes, in listing order. With `all`, the matching positions are read from the index
/// a batch at a time, each batch after the last position taken and up to the partitions' ends when the action
/// started: every entry matching then is taken exactly once, whatever the action changes on the way, and the
/// action holds one batch of entries, not every dead letter at once (a DLQ past the index's memory budget).
enum Selection {
    Ids(std::vec::IntoIter<Entry>),
    All { query: Query, ends: BTreeMap<i32, i64>, after: Option<Position>, batch: std::vec::IntoIter<Position> },
}

/// Positions read per batch by [`Selection::All`].
const SELECTION_BATCH: usize = 1024;

impl Selection {
    fn next(&mut self, index: &Index) -> Result<Option<Entry>, IndexError> {
        match self {
            Self::Ids(entries) => Ok(entries.next()),
            Self::All { query, ends, after, batch } => loop {
                let position = match batch.next() {
                    Some(position) => position,
                    None => {
                        *batch = index.positions_after(query, *after, ends, SELECTION_BATCH)?.into_iter();
                        match batch.next() {
                            Some(position) => position,
                            None => return Ok(None),
                        }
                    }
                };
                *after = Some(position);
                if let Some(entry) = index.get(position)? {
                    return Ok(Some(entry));
                }
            },
        }
    }
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
    /// Replay discarded and flagged entries too, and entries whose record has no valid MAC (those go to the
    /// inbound topic with their core metadata only).
    pub force: bool,
    /// Replay entries older than their service's dedupe retention too ([`redrive::past_retention`]): the operator
    /// has checked that the event's effect did not happen.
    pub past_retention: bool,
    /// The event type the re-driven record carries, chosen by the operator, instead of the entry's own: for an event
    /// whose type came from a header its provider does not sign (GitHub's `X-GitHub-Event`), dead-lettered because
    /// a copy carried a wrong one. The operator checks the type against the signed body; the replayer's MAC then
    /// vouches for it.
    pub as_event_type: Option<String>,
    /// Who asked (recorded in the status topic).
    pub by: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiscardRequest {
    pub ids: Vec<String>,
    /// Discard every entry the filter matches that is not discarded yet (instead of `ids`).
    pub all: bool,
    pub filter: Filter,
    /// Report what would be discarded; record nothing.
    pub dry_run: bool,
    pub reason: String,
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
    /// The record's MAC checked with this replayer's keys ([`hookline_common::record_auth`]): `authentic`,
    /// `unsigned_accepted`, or why it is refused (`unsigned`, `bad_mac`, ...). A refused entry, or one whose error
    /// class is `unauthenticated_record`, is not replayed without `force`.
    pub authenticity: &'static str,
}

/// Every header of a record, values as UTF-8 text (or `base64:` + base64 when they are not).
pub fn headers_of(record: &FetchedRecord) -> Vec<(String, String)> {
    let Some(headers) = record.headers() else { return Vec::new() };
    headers
        .table()
        .iter()
        .map(|h| {
            let value = h.value.map_or_else(String::new, |bytes| match std::str::from_utf8(bytes) {
                Ok(text) => text.to_owned(),
                Err(_) => format!("base64:{}", base64::engine::general_purpose::STANDARD.encode(bytes)),
            });
            (h.name.to_owned(), value)
        })
        .collect()
}

/// Where the entries come from: a live index the service keeps tailing, or (CLI, library) an index built for
/// each call from the topics as they are at that moment.
#[derive(Debug, Clone)]
enum Source {
    Live(Arc<Index>),
    PerCall,
}

#[derive(Clone)]
pub struct Replayer {
    config: ReplayerConfig,
    producer: AckedProducer,
    fetcher: Fetcher,
    source: Source,
    /// Event searches running: each holds a permit until its scan thread ends.
    pub(crate) searches: Arc<tokio::sync::Semaphore>,
    /// Set once the tokens and audit topics are known to exist ([`Replayer::ensure_identity_topics`]).
    pub(crate) identity_topics_ready: Arc<tokio::sync::OnceCell<()>>,
}

impl std::fmt::Debug for Replayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replayer").field("dlq_topic", &self.config.kafka.dlq_topic).finish_non_exhaustive()
    }
}

/// How long a write waits to show up in the live index before the call returns anyway.
const READ_YOUR_WRITES_WAIT: Duration = Duration::from_secs(10);
/// How long building an index may take before the CLI gives up.
const BUILD_TIMEOUT: Duration = Duration::from_secs(600);

impl Replayer {
    /// A replayer that reads the topics afresh for each call: the CLI's (it needs no running service).
    pub fn new(config: ReplayerConfig) -> Result<Self, KafkaError> {
        let producer = AckedProducer::new(&config.kafka, "replayer-producer")?;
        let fetcher = Fetcher::new(&config.kafka);
        let searches = Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_SEARCHES));
        let identity_topics_ready = Arc::new(tokio::sync::OnceCell::new());
        Ok(Self { config, producer, fetcher, source: Source::PerCall, searches, identity_topics_ready })
    }

    /// A replayer that answers from `index`, which the caller keeps tailing (the service).
    pub fn live(config: ReplayerConfig, index: Arc<Index>) -> Result<Self, KafkaError> {
        Ok(Self { source: Source::Live(index), ..Self::new(config)? })
    }

    pub fn config(&self) -> &ReplayerConfig {
        &self.config
    }

    /// An empty index for this configuration, checking status records with its record keys.
    pub fn empty_index(config: &ReplayerConfig) -> Result<Index, KafkaError> {
        let keys = RecordKeys::load(&config.kafka.record_auth)
            .map_err(|problems| KafkaError::ClientCreation(problems.join("; ")))?;
        let budget = Budget {
            memory_bytes: usize::try_from(config.index.memory_budget_mb.saturating_mul(1024 * 1024))
                .unwrap_or(usize::MAX),
            spill_dir: config.index.spill_dir(),
        };
        Ok(Index::new(&config.kafka.dlq_topic, config.max_failed_again, config.replay_outcome_timeout_s, keys, budget))
    }

    /// The index to answer from: the live one, or one built now up to the topics' high watermarks.
    pub async fn index(&self) -> Result<Arc<Index>, OpError> {
        match &self.source {
            Source::Live(index) if index.is_caught_up() => Ok(index.clone()),
            Source::Live(_) => Err(OpError::NotReady),
            Source::PerCall => {
                let config = self.config.clone();
                Ok(tokio::task::spawn_blocking(move || {
                    let index = Self::empty_index(&config)?;
                    tail(&config.kafka, &index, false, &CancellationToken::new(), BUILD_TIMEOUT)?;
                    Ok::<_, KafkaError>(Arc::new(index))
                })
                .await??)
            }
        }
    }

    /// Every entry the filter matches, in (partition, offset) order.
    pub async fn list(&self, filter: &Filter) -> Result<Vec<Entry>, OpError> {
        Ok(self.page(filter, None, usize::MAX).await?.entries)
    }

    /// One page of the entries the filter matches: up to `limit` after `cursor` (a previous page's
    /// `next_cursor`).
    pub async fn page(&self, filter: &Filter, cursor: Option<&str>, limit: usize) -> Result<Page, OpError> {
        let criteria = filter.compile().map_err(|error| OpError::BadRequest(error.to_string()))?;
        let after = cursor
            .filter(|cursor| !cursor.is_empty())
            .map(|cursor| {
                cursor
                    .split_once(':')
                    .and_then(|(partition, offset)| {
                        Some(Position { partition: partition.parse().ok()?, offset: offset.parse().ok()? })
                    })
                    .ok_or_else(|| OpError::BadRequest(format!("`{cursor}` is not a cursor")))
            })
            .transpose()?;
        let index = self.index().await?;
        Ok(index.page(&index.compile(&criteria), after, limit)?)
    }

    pub async fn stats(&self, filter: &Filter) -> Result<Stats, OpError> {
        let criteria = filter.compile().map_err(|error| OpError::BadRequest(error.to_string()))?;
        let index = self.index().await?;
        Ok(index.stats(&index.compile(&criteria))?)
    }

    fn position(&self, id: &str) -> Option<Position> {
        Position::parse(&self.config.kafka.dlq_topic, id)
    }

    /// One entry, from the index, with its record read from Kafka by partition and offset.
    pub async fn show(&self, id: &str) -> Result<Option<Detail>, OpError> {
        let Some(position) = self.position(id) else { return Ok(None) };
        let index = self.index().await?;
        let Some(entry) = index.get(position)? else { return Ok(None) };
        let Some(record) = self.fetch(position).await? else { return Ok(None) };
        let body = record.payload().unwrap_or_default();
        let text = std::str::from_utf8(body).ok().map(str::to_owned);
        let authenticity = self.authenticate(&record, RecordKind::DeadLetter).label();
        Ok(Some(Detail {
            authenticity,
            headers: headers_of(&record),
            body_base64: text.is_none().then(|| base64::engine::general_purpose::STANDARD.encode(body)),
            body: text,
            entry,
        }))
    }

    /// The keys records are signed and checked with.
    pub fn record_keys(&self) -> &hookline_common::record_auth::RecordKeys {
        self.producer.record_keys()
    }

    /// The MAC of a record of `kind` (a DLQ record, or an inbound one a by-reference entry or a re-processing
    /// request names), checked at this replayer's clock.
    fn authenticate(&self, record: &FetchedRecord, kind: RecordKind) -> Verdict {
        let keys = self.producer.record_keys();
        let headers = record.headers().map(|headers| headers.table());
        keys.verify_table(kind, record.topic(), record.key(), record.payload(), headers, now_ms())
    }

    async fn fetch(&self, position: Position) -> Result<Option<FetchedRecord>, OpError> {
        let fetcher = self.fetcher.clone();
        Ok(tokio::task::spawn_blocking(move || fetcher.fetch(position)).await??)
    }

    /// The entries a request names: by id (unknown ids reported as skipped), or every one the filter matches
    /// (walked a batch at a time: see [`Selection`]).
    fn select(
        &self,
        index: &Index,
        ids: &[String],
        all: bool,
        filter: &Filter,
        report: &mut Report,
    ) -> Result<(Selection, bool), OpError> {
        if ids.is_empty() != all {
            return Err(OpError::BadRequest("give entry ids, or `all` with a filter (not both)".to_owned()));
        }
        let criteria = filter.compile().map_err(|error| OpError::BadRequest(error.to_string()))?;
        let has_status = criteria.status.is_some();
        if all {
            let query = index.compile(&criteria);
            return Ok((
                Selection::All { query, ends: index.ends(), after: None, batch: Vec::new().into_iter() },
                has_status,
            ));
        }
        let mut selected = Vec::new();
        for id in ids {
            match self.position(id).map(|position| index.get(position)).transpose()?.flatten() {
                Some(entry) => selected.push(entry),
                None => report.skipped.push(Skipped { id: id.clone(), reason: "no such entry".to_owned() }),
            }
        }
        Ok((Selection::Ids(selected.into_iter()), has_status))
    }

    /// Re-drives entries: `replayed` is recorded, then each is produced to its original topic with its original
    /// key, raw body and headers, plus `hookline-replay-of` (the entry id) and `hookline-replay-count`, and
    /// `hookline-service` (the entry's service: only that service processes it; an entry without a service goes
    /// to every service, as it did before services had names). `hookline-reprocess-*` headers are kept: a
    /// re-processing that failed replays as that re-processing.
    /// The consumer's dedupe makes a second replay of the same entry a duplicate, never a second processing.
    pub async fn replay(&self, request: &ReplayRequest) -> Result<Report, OpError> {
        if request.rate.is_some_and(|rate| !(rate.is_finite() && rate > 0.0)) {
            return Err(OpError::BadRequest("rate must be a positive number of replays per second".to_owned()));
        }
        if request.as_event_type.as_deref().is_some_and(|event_type| event_type.trim().is_empty()) {
            return Err(OpError::BadRequest("as_event_type, when given, must not be empty".to_owned()));
        }
        let index = self.index().await?;
        let mut report = Report { dry_run: request.dry_run, ..Report::default() };
        let (mut selected, has_status) =
            self.select(&index, &request.ids, request.all, &request.filter, &mut report)?;
        let mut limiter = request.rate.map(RateLimiter::per_second);
        let mut written = Vec::new();
        while let Some(mut entry) = selected.next(&index)? {
            if request.all && !has_status && !entry.status.is_untriaged() {
                continue; // `--all` alone re-drives only entries nobody has dealt with (or whose replay is lost).
            }
            let id = entry.entry.id.clone();
            if let Some(reason) = refusal(&entry, request.force, request.all) {
                report.skipped.push(Skipped { id, reason });
                continue;
            }
            // The record itself, checked: a DLQ record nobody signed (or changed since) is never laundered into
            // a signed inbound record without an operator's `force`.
            let Some(record) = self.fetch(entry.position()).await? else {
                report.skipped.push(Skipped { id, reason: "no longer in the topic".to_owned() });
                continue;
            };
            // Unsigned inside `accept_unsigned_until` needs force too: re-driven, the record would come out signed
            // and stay valid after the window closes.
            let verdict = self.authenticate(&record, RecordKind::DeadLetter);
            if !matches!(verdict, Verdict::Authentic { .. }) {
                if !request.force {
                    report.skipped.push(Skipped {
                        id,
                        reason: format!("not written by hookline: {} (needs force)", verdict.label()),
                    });
                    continue;
                }
                tracing::warn!(entry_id = %id, refusal = verdict.label(), by = %request.by, "forced replay of an entry without a valid MAC: to the inbound topic, with its core metadata only");
            }
            // The record decoded once: what an unverified entry is judged by, and what its re-drive reads.
            let dead_letter = crate::fetch::dead_letter_entry(&record);
            if entry.status == Status::Unverified {
                // The index holds nothing an unverified record claims: judge it (and re-drive it) by the record.
                entry.entry = dead_letter.clone();
            }
            let past_retention = redrive::past_retention(&entry, dead_letter.dedupe_retention_days, now_ms());
            if let Some(reason) = past_retention.filter(|_| !request.past_retention) {
                report.skipped.push(Skipped { id, reason });
                continue;
            }
            let provenance = redrive::provenance_of(&verdict);
            let topic = match self.redrive_topic(&entry, provenance) {
                Ok(topic) => topic,
                Err(reason) => {
                    report.skipped.push(Skipped { id, reason: reason.to_string() });
                    continue;
                }
            };
            // A dead letter by reference: its body, key and headers are the original record's (its MAC checked).
            let record = match self.record_to_redrive(record, &dead_letter, request.force, &request.by).await? {
                Ok(record) => record,
                Err(reason) => {
                    report.skipped.push(Skipped { id, reason });
                    continue;
                }
            };
            if request.dry_run {
                report.done.push(id);
                continue;
            }
            if let Some(limiter) = &mut limiter {
                limiter.acquire().await;
            }
            let target = redrive::Target {
                topic,
                provenance,
                event_type: request.as_event_type.as_deref(),
                destination: dead_letter.destination.as_deref(),
                by: &request.by,
            };
            written.extend(self.redrive(&index, &entry, &record, target).await?);
            report.done.push(id);
        }
        self.await_visible(&index, &written).await;
        if !request.dry_run {
            let mut detail = audit::entries_detail(&report, request.all, &request.filter);
            detail["force"] = request.force.into();
            self.audit(&by_or_default(&request.by), "replay", detail).await?;
        }
        Ok(report)
    }

    /// Records entries as discarded (with the reason); they stay in Kafka and `replay --all` skips them.
    pub async fn discard(&self, request: &DiscardRequest) -> Result<Report, OpError> {
        if request.reason.trim().is_empty() {
            return Err(OpError::BadRequest("a discard needs a reason".to_owned()));
        }
        let index = self.index().await?;
        let mut report = Report { dry_run: request.dry_run, ..Report::default() };
        let (mut selected, _) = self.select(&index, &request.ids, request.all, &request.filter, &mut report)?;
        let mut written = Vec::new();
        while let Some(entry) = selected.next(&index)? {
            let id = entry.entry.id.clone();
            if entry.status == Status::Discarded {
                if !request.all {
                    report.skipped.push(Skipped { id, reason: "already discarded".to_owned() });
                }
                continue;
            }
            if request.dry_run {
                report.done.push(id);
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
            let span = action_span("discard", Parent::Root, &entry);
            written.push(span.scope(self.record_status(&index, entry.position(), &status)).await?);
            drop(span);
            tracing::info!(entry_id = %id, reason = %request.reason, "entry discarded");
            report.done.push(id);
        }
        self.await_visible(&index, &written).await;
        if !request.dry_run {
            let mut detail = audit::entries_detail(&report, request.all, &request.filter);
            detail["reason"] = request.reason.clone().into();
            self.audit(&by_or_default(&request.by), "discard", detail).await?;
        }
        Ok(report)
    }

    async fn record_status(
        &self,
        index: &Index,
        position: Position,
        status: &EntryStatusRecord,
    ) -> Result<(i32, i64), OpError> {
        let id = position.id(&self.config.kafka.dlq_topic);
        let written = self.send(status.encode(&self.config.kafka.dlq_status_topic, &id)).await?;
        if matches!(self.source, Source::PerCall) {
            index.apply_own_status(position, status);
        }
        Ok(written)
    }

    /// Waits (bounded) until the live index has read back what this call wrote, so that the next list shows it.
    async fn await_visible(&self, index: &Index, written: &[(i32, i64)]) {
        if !matches!(self.source, Source::Live(_)) || written.is_empty() {
            return;
        }
        let deadline = Instant::now() + READ_YOUR_WRITES_WAIT;
        while !written.iter().all(|(partition, offset)| index.has_status_offset(*partition, *offset)) {
            if Instant::now() > deadline {
                tracing::warn!("status records written but not read back yet; the listing will catch up");
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Produces and waits for the acknowledgement, within the produce timeout; returns where the record landed.
    pub(crate) async fn send(&self, record: Outgoing) -> Result<(i32, i64), OpError> {
        let delivery = self.producer.send_record(record, QueueWait::UpToDeadline).await?;
        Ok((delivery.partition, delivery.offset))
    }
}

/// Why an entry is not replayed, if it is not.
/// The span of an operator's action on one DLQ entry (none with traces off).
fn action_span(action: &'static str, parent: Parent<'_>, entry: &Entry) -> TraceSpan {
    TraceSpan::start(
        SpanKind::Internal,
        parent,
        || action.to_owned(),
        || {
            let mut attributes = vec![
                KeyValue::new(attribute::ACTION, action),
                KeyValue::new(attribute::ENTRY_ID, entry.entry.id.clone()),
            ];
            if let Some(event_id) = &entry.entry.event_id {
                attributes.push(KeyValue::new(attribute::MESSAGING_MESSAGE_ID, event_id.clone()));
            }
            if let Some(service) = &entry.entry.service {
                attributes.push(KeyValue::new(attribute::SERVICE, service.clone()));
            }
            attributes
        },
    )
}

fn refusal(entry: &Entry, force: bool, all: bool) -> Option<String> {
    if entry.status == Status::Discarded && (all || !force) {
        // `--all` never re-drives a discarded entry, even forced: discarding is how an operator says "never".
        return Some("discarded (replay it by id with force)".to_owned());
    }
    if entry.flagged && !force {
        return Some(format!("flagged: failed again {} times after replays (needs force)", entry.failed_again));
    }
    if entry.entry.error_class.as_deref() == Some(UNAUTHENTICATED_RECORD_CLASS) && !force {
        return Some(format!("{UNAUTHENTICATED_RECORD_CLASS}: the event was not written by hookline (needs force)"));
    }
    None
}

fn by_or_default(by: &str) -> String {
    if by.trim().is_empty() { "replayer".to_owned() } else { by.to_owned() }
}

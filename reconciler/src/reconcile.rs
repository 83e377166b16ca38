//! One reconciliation of one source over one window: list the provider's log, wait until the index covers
//! everything the inbound topic held by then, decide what hookline never accepted, and (unless it is a dry run)
//! get each missed event in, recording every action in the ledger first so that nothing is ever done twice.

use std::{collections::HashMap, sync::Arc, time::Duration};

use hookline_common::{
    config::KafkaConfig,
    producer::{AckedProducer, QueueWait},
    telemetry::traces::{KeyValue, Parent, SpanKind, TraceSpan, attribute},
    wire::{self, EventMeta},
};
use hookline_record::inbound::InboundRecord;
use hookline_signature::{Provenance, Verified};
use serde::Serialize;

use crate::{
    config::{ReconcilerConfig, SourceConfig},
    error::ReconcileError,
    index::IndexCheck,
    load::Loaded,
    metrics::Metrics,
    provider::{ProviderClient, ProviderEvent, Recovery},
    store::{Action, Store},
};

/// Whether a run acts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Report what would be done; change nothing (the ledger notes what was found, for counting once).
    DryRun,
    Apply,
}

/// A run's window and options.
#[derive(Debug, Clone)]
pub struct RunRequest {
    pub source: String,
    pub from_ms: i64,
    pub to_ms: i64,
    pub mode: Mode,
    /// Ask again for events whose redelivery the provider accepted but which still never arrived. Off by
    /// default: a second request is an operator's decision (see the runbook).
    pub again_after_request: bool,
}

/// What a run found and did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub source: String,
    pub from_ms: i64,
    pub to_ms: i64,
    pub dry_run: bool,
    /// Where the index's coverage starts: events before it (accepted, if at all, before the indexer existed
    /// and since gone from the topic) are left out of the decision.
    pub index_since_ms: i64,
    /// Events of the window before `index_since_ms`: not judged, never acted on.
    pub before_index: usize,
    /// Events in the provider's log for the window (from `index_since_ms` on).
    pub listed: usize,
    /// Of those, accepted by hookline.
    pub accepted: usize,
    /// Events hookline never accepted, and what happened to each.
    pub missed: Vec<MissedEvent>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MissedEvent {
    pub id: String,
    pub event_type: Option<String>,
    pub occurred_at_ms: i64,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Dry run: would be redelivered or fetched.
    WouldRecover,
    /// The provider is still retrying it; left alone.
    ProviderRetrying,
    /// We asked the provider to redeliver it.
    RedeliveryRequested,
    /// Fetched from the API and produced; Kafka acknowledged it.
    FetchedAndProduced,
    /// An earlier run already asked for it (or its request's outcome is unknown): not asked again.
    AlreadyRequested,
    /// The action failed; the next run tries again.
    Failed,
}

impl Report {
    pub fn count(&self, outcome: Outcome) -> usize {
        self.missed.iter().filter(|missed| missed.outcome == outcome).count()
    }

    /// Missed events not brought in by this run or an earlier one, that the provider is not retrying itself.
    pub fn unrecovered(&self) -> usize {
        self.missed
            .iter()
            .filter(|missed| {
                !matches!(
                    missed.outcome,
                    Outcome::RedeliveryRequested | Outcome::FetchedAndProduced | Outcome::ProviderRetrying
                )
            })
            .count()
    }
}

/// Everything a run needs, for every configured source.
pub struct Reconciler {
    config: ReconcilerConfig,
    store: Store,
    producer: AckedProducer,
    index: Arc<IndexCheck>,
    providers: Arc<HashMap<String, ProviderClient>>,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Reconciler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reconciler")
            .field("sources", &self.providers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Reconciler {
    /// Builds a client per source from `loaded`, then connects to Redis and Kafka.
    pub async fn connect(loaded: Loaded, metrics: Arc<Metrics>) -> Result<Self, ReconcileError> {
        let providers = Arc::new(crate::provider::clients(&loaded, &metrics)?);
        let config = loaded.config;
        let store = Store::connect(&config.redis).await?;
        let producer = AckedProducer::new(&config.kafka, "reconciler")?;
        let index = Arc::new(IndexCheck::new(&config.kafka, &config.index_group_id, &config.sources)?);
        Ok(Self { config, store, producer, index, providers, metrics })
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn config(&self) -> &ReconcilerConfig {
        &self.config
    }

    /// The API client of every source, shared with the registration check so both keep one pace per source.
    pub fn providers(&self) -> Arc<HashMap<String, ProviderClient>> {
        self.providers.clone()
    }

    /// Runs one reconciliation; the source's lock keeps two runs (two replicas, or the CLI beside the service)
    /// from deciding at once.
    pub async fn run(&self, request: &RunRequest) -> Result<Report, ReconcileError> {
        let source =
            self.config.source(&request.source).ok_or_else(|| ReconcileError::UnknownSource(request.source.clone()))?;
        let result = match self.store.lock(&source.name, Duration::from_secs(self.config.run_lease_s)).await? {
            None => Err(ReconcileError::Busy(source.name.clone())),
            Some(token) => {
                // With traces on, a run is one `reconcile` span (a new trace); each event it brings in is a child.
                let span = TraceSpan::start(
                    SpanKind::Internal,
                    Parent::Root,
                    || "reconcile".to_owned(),
                    || {
                        vec![
                            KeyValue::new(attribute::ACTION, "reconcile"),
                            KeyValue::new(attribute::SOURCE, source.name.clone()),
                            KeyValue::new("hookline.reconcile.dry_run", matches!(request.mode, Mode::DryRun)),
                        ]
                    },
                );
                let result = span.scope(self.run_locked(source, request)).await;
                if let Err(error) = &result {
                    span.fail(error.outcome(), || error.to_string());
                }
                drop(span);
                if let Err(error) = self.store.unlock(&source.name, &token).await {
                    tracing::warn!(source = %source.name, error = %error, "cannot release the run lock; it expires by itself");
                }
                result
            }
        };
        let outcome = match &result {
            Ok(report) if report.dry_run => "dry_run",
            Ok(_) => "applied",
            Err(error) => error.outcome(),
        };
        self.metrics.runs.with_label_values(&[&source.name, outcome]).inc();
        if let Ok(report) = &result {
            self.metrics.unrecovered.with_label_values(&[&source.name]).set(report.unrecovered() as i64);
            self.metrics.last_success.with_label_values(&[&source.name]).set(wire::now_ms() as f64 / 1000.0);
        }
        result
    }

    async fn run_locked(&self, source: &SourceConfig, request: &RunRequest) -> Result<Report, ReconcileError> {
        let provider =
            self.providers.get(&source.name).ok_or_else(|| ReconcileError::UnknownSource(source.name.clone()))?;
        let events = provider.list(request.from_ms, request.to_ms).await?;
        // The topic's end is read only now, after the list: anything accepted before the provider listed it is
        // below it, so once the index reaches it, "not in the index" means "never accepted".
        let index = self.index.clone();
        let timeout = Duration::from_millis(self.config.index_catch_up_timeout_ms);
        tokio::task::spawn_blocking(move || index.wait_caught_up(timeout)).await.map_err(|error| {
            ReconcileError::Provider { source_name: source.name.clone(), error: error.to_string() }
        })??;

        // Read after the wait: the indexer has seen everything up to the topic's end by now.
        let index_since_ms = self.store.index_since().await?.unwrap_or(i64::MAX);
        let (events, before): (Vec<ProviderEvent>, Vec<ProviderEvent>) =
            events.into_iter().partition(|event| event.occurred_at_ms >= index_since_ms);
        if !before.is_empty() {
            tracing::info!(
                source = %source.name,
                n_events = before.len(),
                "events older than the index's coverage are left out (see docs/reconciliation.md)"
            );
        }
        let ids: Vec<&str> = events.iter().map(|event| event.id.as_str()).collect();
        let accepted = self.store.accepted(&source.name, &ids).await?;
        let missing: Vec<&ProviderEvent> =
            events.iter().zip(&accepted).filter(|(_, accepted)| !**accepted).map(|(event, _)| event).collect();
        let missing_ids: Vec<&str> = missing.iter().map(|event| event.id.as_str()).collect();
        let actions = self.store.actions(&source.name, &missing_ids).await?;

        let mut report = Report {
            source: source.name.clone(),
            from_ms: request.from_ms,
            to_ms: request.to_ms,
            dry_run: request.mode == Mode::DryRun,
            index_since_ms,
            before_index: before.len(),
            listed: events.len(),
            accepted: events.len() - missing.len(),
            missed: Vec::with_capacity(missing.len()),
        };
        let ttl_s = source.index_ttl_s();
        for (event, action) in missing.into_iter().zip(actions) {
            let now = wire::now_ms();
            if action.is_none() && self.store.note_missed(&source.name, &event.id, now, ttl_s).await? {
                self.metrics.missed.with_label_values(&[&source.name]).inc();
            }
            let outcome = self.decide(source, request, event, action, ttl_s).await?;
            if outcome == Outcome::Failed {
                tracing::warn!(source = %source.name, event_id = %event.id, "could not recover a missed event; the next run tries again");
            }
            report.missed.push(MissedEvent {
                id: event.id.clone(),
                event_type: event.event_type.clone(),
                occurred_at_ms: event.occurred_at_ms,
                outcome,
            });
        }
        tracing::info!(
            source = %source.name,
            dry_run = report.dry_run,
            listed = report.listed,
            accepted = report.accepted,
            missed = report.missed.len(),
            unrecovered = report.unrecovered(),
            "reconciliation done"
        );
        Ok(report)
    }

    async fn decide(
        &self,
        source: &SourceConfig,
        request: &RunRequest,
        event: &ProviderEvent,
        action: Option<Action>,
        ttl_s: u64,
    ) -> Result<Outcome, ReconcileError> {
        match action {
            Some(Action::Requesting | Action::Produced) => return Ok(Outcome::AlreadyRequested),
            Some(Action::Requested) if !request.again_after_request => return Ok(Outcome::AlreadyRequested),
            _ => {}
        }
        if event.provider_still_retrying {
            return Ok(Outcome::ProviderRetrying);
        }
        if request.mode == Mode::DryRun {
            return Ok(Outcome::WouldRecover);
        }
        let now = wire::now_ms();
        if !self.store.claim_action(&source.name, &event.id, now, ttl_s, request.again_after_request).await? {
            return Ok(Outcome::AlreadyRequested);
        }
        let provider =
            self.providers.get(&source.name).ok_or_else(|| ReconcileError::UnknownSource(source.name.clone()))?;
        match provider.recover(event).await {
            Ok(Recovery::Requested) => {
                self.store.record_action(&source.name, &event.id, &Action::Requested, wire::now_ms(), ttl_s).await?;
                self.metrics.recovered.with_label_values(&[&source.name, "redelivery_requested"]).inc();
                Ok(Outcome::RedeliveryRequested)
            }
            Ok(Recovery::Fetched(body)) => match self.produce(source, event, body).await {
                Ok(()) => {
                    self.store.record_action(&source.name, &event.id, &Action::Produced, wire::now_ms(), ttl_s).await?;
                    self.metrics.recovered.with_label_values(&[&source.name, "fetched_and_produced"]).inc();
                    Ok(Outcome::FetchedAndProduced)
                }
                Err(error) => {
                    // A produce that timed out may still land: the index then shows it next run, and if it
                    // does not, producing again is safe (the consumer dedupes by the provider's event id).
                    tracing::warn!(source = %source.name, event_id = %event.id, error = %error, "produce failed");
                    self.store.record_action(&source.name, &event.id, &Action::Missed, wire::now_ms(), ttl_s).await?;
                    Ok(Outcome::Failed)
                }
            },
            Err(ReconcileError::Uncertain { error, .. }) => {
                // The provider may have redelivered it: the ledger keeps `requesting`, so no run asks again.
                tracing::warn!(source = %source.name, event_id = %event.id, error = %error, "redelivery request outcome unknown; not asking again");
                Ok(Outcome::AlreadyRequested)
            }
            Err(error @ (ReconcileError::CredentialsRefused { .. } | ReconcileError::RateLimited { .. })) => {
                self.store.record_action(&source.name, &event.id, &Action::Missed, wire::now_ms(), ttl_s).await?;
                Err(error)
            }
            Err(error) => {
                tracing::warn!(source = %source.name, event_id = %event.id, error = %error, "recovery failed");
                self.store.record_action(&source.name, &event.id, &Action::Missed, wire::now_ms(), ttl_s).await?;
                Ok(Outcome::Failed)
            }
        }
    }

    /// Produces a fetched event to the source's topic, keyed and identified by the provider's event id, so its
    /// late webhook (same id) is a duplicate; `hookline-origin: reconciled` and the API proof say where it came
    /// from.
    async fn produce(
        &self,
        source: &SourceConfig,
        event: &ProviderEvent,
        body: bytes::Bytes,
    ) -> Result<(), ReconcileError> {
        // The proof owns the fetched bytes; everything below reads them from it.
        let proof = Verified::fetched_from_provider_api(&source.credential.id, body);
        debug_assert_eq!(proof.provenance(), Provenance::ProviderApi);
        let body = proof.body();
        let meta = EventMeta {
            source: source.name.clone(),
            event_id: event.id.clone(),
            event_type: event.event_type.clone(),
            received_at_ms: wire::now_ms(),
            content_type: Some("application/json".to_owned()),
            secret_id: proof.secret_id().to_owned(),
            ordering_key: source.ordering_key.as_ref().and_then(|key| key.value(&http::HeaderMap::new(), body)),
        };
        let topic = source.topic.as_deref().unwrap_or(&self.config.kafka.inbound_topic);
        let record = InboundRecord { origin: Some(wire::origin::RECONCILED.to_owned()), ..InboundRecord::new(meta) }
            .encode(topic, body.clone());
        // One span per event brought in (a child of the run's); the record's send is its child, and the consumer's
        // processing continues it.
        let span = TraceSpan::start(
            SpanKind::Internal,
            Parent::Current,
            || "bring in".to_owned(),
            || {
                vec![
                    KeyValue::new(attribute::ACTION, "bring_in"),
                    KeyValue::new(attribute::SOURCE, source.name.clone()),
                    KeyValue::new(attribute::MESSAGING_MESSAGE_ID, event.id.clone()),
                ]
            },
        );
        let sent = span.scope(self.producer.send_record(record, QueueWait::UpToDeadline)).await;
        if let Err(error) = &sent {
            span.fail(error.kind(), || error.to_string());
        }
        sent.map(drop).map_err(ReconcileError::Produce)
    }

    pub fn kafka(&self) -> &KafkaConfig {
        &self.config.kafka
    }
}

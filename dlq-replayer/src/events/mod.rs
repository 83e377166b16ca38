//! Event search: the accepted events of one source (and type) between two times whose verified JSON body meets
//! every condition (`--where`), read from Kafka, where hookline keeps every accepted event already: the inbound
//! topic and the topics of sources that have their own (`events.source_topics`). Nothing here writes anything.
//!
//! Each match is shown with its position, accepted time and, per consumer service, its dedupe state (the state
//! `lookup` reads, [`crate::lookup::DedupeState`]). Every record that could match has its MAC checked before its
//! body is read; one that fails is counted by reason and never shown. Re-drive and re-processing copies of an event
//! in the inbound topic are counted and skipped: the accepted record is the original. The scan is bounded by
//! records read, by time and by librdkafka's fetch bytes, and says what it left unread ([`scan`]).
//!
//! At most [`MAX_CONCURRENT_SEARCHES`] searches run at once in a process (the API, the console and the CLI share
//! the bound): past it a search is refused at once ([`OpError::Busy`], 429 with `Retry-After` on the API). A search
//! whose caller goes away (the client closed the connection, the page was reloaded) stops at its next poll: its
//! scan checks a flag the dropped request sets, and its permit is released when the scan thread ends.

pub mod render;
mod scan;

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use hookline_common::redis_connection::RedisConnection;
use serde::{Deserialize, Serialize};

use crate::{
    lookup::{DedupeState, NO_LOOKUP_REDIS, RecordPosition},
    ops::{OpError, Replayer, ReprocessRequest},
};
pub use hookline_common::predicate::Condition;

pub use crate::ops::MAX_CONCURRENT_SEARCHES;

/// Sets its flag when dropped: the request that started a scan went away (or ended), so the scan stops.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// What to search for.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SearchRequest {
    /// The source (required).
    pub source: String,
    /// Only this event type.
    pub event_type: Option<String>,
    /// Records the broker timestamped at or after this RFC 3339 time (required).
    pub since: String,
    /// Records timestamped before this RFC 3339 time; default now.
    pub until: Option<String>,
    /// Conditions on the JSON body, all of which must hold ([`Condition`]).
    pub conditions: Vec<String>,
    /// At most this many matches (default [`crate::config::EventsConfig::default_limit`]); the scan stops there.
    pub limit: Option<usize>,
    /// At most this many records read (default and ceiling `events.max_records`).
    pub max_records: Option<u64>,
    /// At most this long reading (default and ceiling `events.max_seconds`).
    pub max_seconds: Option<u64>,
}

impl SearchRequest {
    /// The request from query parameters (`GET /v1/events`, the console's page): `source`, `type`, `since`,
    /// `until`, `where` (repeatable), `limit`, `max_records`, `max_seconds`; empty values are absent.
    pub fn from_query(query: &str) -> Result<Self, SearchQueryError> {
        let mut request = Self::default();
        let number = |key: &'static str, value: &str| {
            value.parse::<u64>().map_err(|source| SearchQueryError::NotANumber { key, source })
        };
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            let value = value.trim();
            if value.is_empty() {
                continue;
            }
            match key.as_ref() {
                "source" => request.source = value.to_owned(),
                "type" => request.event_type = Some(value.to_owned()),
                "since" => request.since = value.to_owned(),
                "until" => request.until = Some(value.to_owned()),
                "where" => request.conditions.push(value.to_owned()),
                "limit" => request.limit = Some(usize::try_from(number("limit", value)?).unwrap_or(usize::MAX)),
                "max_records" => request.max_records = Some(number("max_records", value)?),
                "max_seconds" => request.max_seconds = Some(number("max_seconds", value)?),
                other => return Err(SearchQueryError::Unknown(other.to_owned())),
            }
        }
        Ok(request)
    }
}

/// Why a search's query string is refused (a bad request, said to the caller).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SearchQueryError {
    #[error("unknown query parameter `{0}`")]
    Unknown(String),
    #[error("{key} must be a number")]
    NotANumber {
        key: &'static str,
        #[source]
        source: std::num::ParseIntError,
    },
}

/// A parsed request.
#[derive(Debug, Clone)]
struct Criteria {
    source: String,
    event_type: Option<String>,
    since_ms: i64,
    until_ms: i64,
    conditions: Vec<Condition>,
    limit: usize,
    max_records: u64,
    max_duration: Duration,
}

/// A record that matched, before its services' states are read.
#[derive(Debug, Clone)]
struct Found {
    position: RecordPosition,
    accepted_at_ms: Option<i64>,
    event_id: Option<String>,
    event_type: Option<String>,
}

/// One matching event.
#[derive(Debug, Clone, Serialize)]
pub struct Match {
    pub position: RecordPosition,
    /// The gateway's receive time (`hookline-received-at-ms`), or else the record's timestamp.
    pub accepted_at_ms: Option<i64>,
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    /// Per consumer service, its dedupe state for the event (empty when it could not be read: see
    /// [`SearchReport::dedupe_unread`]).
    pub services: Vec<ServiceState>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ServiceState {
    pub service: String,
    pub dedupe: DedupeState,
}

/// How far the scan got.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Progress {
    /// Records between `since` and `until` in every partition searched, as the broker's offsets say.
    pub records_to_read: u64,
    pub records_read: u64,
    /// Records of the source (and type) in the time range: those whose MAC was checked.
    pub candidates: u64,
    /// Candidates whose MAC failed, by reason (`bad_mac`, `unsigned`, ...): never shown.
    pub refused: BTreeMap<String, u64>,
    /// Re-drive and re-processing copies skipped (the original is the accepted event).
    pub copies_skipped: u64,
    /// Candidates whose body is not JSON, which no condition can match.
    pub not_json: u64,
    pub elapsed_ms: u64,
}

/// A partition's offsets the scan did not read.
#[derive(Debug, Clone, Serialize)]
pub struct Unread {
    pub topic: String,
    pub partition: i32,
    pub from_offset: i64,
    pub to_offset: i64,
}

/// The whole answer.
#[derive(Debug, Clone, Serialize)]
pub struct SearchReport {
    pub source: String,
    pub event_type: Option<String>,
    pub since_ms: i64,
    pub until_ms: i64,
    pub conditions: Vec<String>,
    pub topics: Vec<String>,
    pub matches: Vec<Match>,
    pub progress: Progress,
    /// Why the scan stopped before the end: `limit`, `max_records`, `max_seconds`, `stalled` or `cancelled`.
    pub stopped_by: Option<String>,
    /// What was left unread when it stopped early.
    pub unread: Vec<Unread>,
    /// Why no service's state was read, and how to fix it (as `lookup` says it).
    pub dedupe_unread: Option<String>,
}

impl SearchReport {
    /// Records the scan left unread.
    pub fn records_unread(&self) -> u64 {
        self.unread.iter().map(|unread| u64::try_from(unread.to_offset - unread.from_offset).unwrap_or(0)).sum()
    }
}

impl Replayer {
    /// How many event searches are running (their scan threads included, after their callers left).
    pub fn searches_running(&self) -> usize {
        MAX_CONCURRENT_SEARCHES.saturating_sub(self.searches.available_permits())
    }

    /// Searches accepted events (see the module's doc); `on_progress` is called about once a second from the
    /// scanning thread, and once when it stops (also when the caller went away: dropping the returned future stops
    /// the scan at its next poll). [`OpError::Busy`] when [`MAX_CONCURRENT_SEARCHES`] run already.
    pub async fn search_events(
        &self,
        request: &SearchRequest,
        on_progress: impl FnMut(&Progress) + Send + 'static,
    ) -> Result<SearchReport, OpError> {
        let criteria = self.criteria(request)?;
        // Held by the scan thread, so that a search whose caller left still counts until its scan has stopped.
        let permit = self.searches.clone().try_acquire_owned().map_err(|_| OpError::Busy)?;
        let config = self.config().clone();
        let mut topics = vec![config.kafka.inbound_topic.clone()];
        topics.extend(config.events.source_topics.iter().cloned());
        let keys = self.record_keys().clone();
        let cancelled = Arc::new(AtomicBool::new(false));
        let _cancel_on_drop = CancelOnDrop(cancelled.clone());
        let scanned = {
            let (kafka, topics, criteria) = (config.kafka.clone(), topics.clone(), criteria.clone());
            let mut on_progress = on_progress;
            tokio::task::spawn_blocking(move || {
                let _permit = permit;
                scan::scan(&kafka, &keys, &topics, &criteria, &cancelled, &mut on_progress)
            })
            .await??
        };

        let mut dedupe_unread = None;
        let mut matches: Vec<Match> = scanned
            .found
            .into_iter()
            .map(|found| Match {
                position: found.position,
                accepted_at_ms: found.accepted_at_ms,
                event_id: found.event_id,
                event_type: found.event_type,
                services: Vec::new(),
            })
            .collect();
        match &config.lookup.redis {
            None => dedupe_unread = Some(NO_LOOKUP_REDIS.to_owned()),
            Some(redis) if !matches.is_empty() => match RedisConnection::connect(redis).await {
                Err(error) => dedupe_unread = Some(crate::lookup::redis_unreachable(&error)),
                Ok(connection) => {
                    let services = crate::lookup::services(&config, &connection, redis).await?;
                    if services.is_empty() {
                        dedupe_unread = Some(crate::lookup::no_service_found(&redis.key_prefix));
                    }
                    for found in &mut matches {
                        let Some(event_id) = &found.event_id else { continue };
                        for service in &services {
                            let dedupe = crate::lookup::dedupe_state(
                                &connection,
                                &redis.key_prefix,
                                service,
                                &criteria.source,
                                event_id,
                            )
                            .await?;
                            found.services.push(ServiceState { service: service.clone(), dedupe });
                        }
                    }
                }
            },
            Some(_) => {}
        }
        Ok(SearchReport {
            source: criteria.source,
            event_type: criteria.event_type,
            since_ms: criteria.since_ms,
            until_ms: criteria.until_ms,
            conditions: criteria.conditions.iter().map(ToString::to_string).collect(),
            topics,
            matches,
            progress: scanned.progress,
            stopped_by: scanned.stopped_by.map(str::to_owned),
            unread: scanned.unread,
            dedupe_unread,
        })
    }

    fn criteria(&self, request: &SearchRequest) -> Result<Criteria, OpError> {
        let bad = |message: String| OpError::BadRequest(message);
        let source = request.source.trim();
        if source.is_empty() {
            return Err(bad("an event search names its source".to_owned()));
        }
        if request.since.trim().is_empty() {
            return Err(bad("an event search needs --since (an RFC 3339 time)".to_owned()));
        }
        let since_ms = rfc3339_ms(&request.since)?;
        let until_ms = match request.until.as_deref().map(str::trim).filter(|until| !until.is_empty()) {
            Some(until) => rfc3339_ms(until)?,
            None => hookline_common::wire::now_ms(),
        };
        if since_ms >= until_ms {
            return Err(bad("--since must be before --until".to_owned()));
        }
        let conditions = request
            .conditions
            .iter()
            .map(|text| text.parse::<Condition>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| bad(error.to_string()))?;
        let events = &self.config().events;
        let limit = request.limit.unwrap_or(events.default_limit);
        if limit == 0 {
            return Err(bad("limit must be at least 1".to_owned()));
        }
        Ok(Criteria {
            source: source.to_owned(),
            event_type: request.event_type.as_deref().map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned),
            since_ms,
            until_ms,
            conditions,
            limit: limit.min(events.max_matches),
            max_records: request.max_records.unwrap_or(events.max_records).min(events.max_records),
            max_duration: Duration::from_secs(
                request.max_seconds.unwrap_or(events.max_seconds).min(events.max_seconds),
            ),
        })
    }
}

/// The `reprocess` request for a search's matches in the inbound topic (`reprocess` reads only that topic): their
/// event ids, within the search's time range and source.
pub fn reprocess_request(
    report: &SearchReport,
    search: &SearchRequest,
    service: String,
    apply: bool,
    by: String,
) -> ReprocessRequest {
    let inbound = report.topics.first();
    let mut event_ids: Vec<String> = report
        .matches
        .iter()
        .filter(|found| Some(&found.position.topic) == inbound)
        .filter_map(|found| found.event_id.clone())
        .collect();
    event_ids.sort();
    event_ids.dedup();
    ReprocessRequest {
        service,
        event_ids,
        from: Some(search.since.clone()),
        to: Some(search.until.clone().unwrap_or_else(|| hookline_common::time::format_rfc3339_millis(report.until_ms))),
        source: Some(report.source.clone()),
        apply,
        rate_per_s: None,
        by,
    }
}

fn rfc3339_ms(text: &str) -> Result<i64, OpError> {
    hookline_common::time::parse_rfc3339_weak_ms(text.trim())
        .map_err(|_| OpError::BadRequest(format!("`{text}` is not an RFC 3339 time")))
}

//! Querying the index: filters compiled to interned numbers, entries rebuilt from their compact form, pages in
//! (partition, offset) order, and counts for stats, gauges and the console's chart.

use std::collections::{BTreeMap, HashMap};

use hookline_common::wire::{DeadLetterEntry, EntryStatusRecord, now_ms};

use super::{
    Criteria, Entry, Gauges, Index, Page, Position, Stats, Status, Untriaged,
    build::{Meta, State},
};

/// How counts name a string the entry has no value for (a record without a source header, say).
const UNKNOWN: &str = "unknown";

/// What a filter compiles to against the index: interned numbers, and the set of error messages the free text
/// matches (each distinct message is searched once, not once per entry).
#[derive(Debug)]
pub struct Query {
    source: Option<u32>,
    service: Option<u32>,
    event_type: Option<u32>,
    error_class: Option<u32>,
    status: Option<Status>,
    since_ms: Option<i64>,
    until_ms: Option<i64>,
    /// For a text filter: which interned error messages contain it.
    errors: Option<Vec<bool>>,
    /// A named value the index has never seen: nothing matches.
    impossible: bool,
}

impl Index {
    pub fn compile(&self, criteria: &Criteria) -> Query {
        let state = self.read();
        let mut impossible = false;
        let mut lookup = |value: &Option<String>| {
            value.as_ref().map(|value| {
                state.strings.lookup(value).unwrap_or_else(|| {
                    impossible = true;
                    0
                })
            })
        };
        let source = lookup(&criteria.source);
        let service = lookup(&criteria.service);
        let event_type = lookup(&criteria.event_type);
        let error_class = lookup(&criteria.error_class);
        let errors = criteria.text.as_ref().map(|text| {
            let text = text.to_lowercase();
            std::iter::once(false)
                .chain(state.strings.values.iter().map(|value| value.to_lowercase().contains(&text)))
                .collect()
        });
        Query {
            source,
            service,
            event_type,
            error_class,
            status: criteria.status,
            since_ms: criteria.since_ms,
            until_ms: criteria.until_ms,
            errors,
            impossible,
        }
    }

    fn matches(&self, state: &State, query: &Query, meta: &Meta, now: i64) -> bool {
        !query.impossible
            && query.source.is_none_or(|source| meta.source == source)
            && query.service.is_none_or(|service| state.origins.get(meta.origin).service == service)
            && query.event_type.is_none_or(|event_type| meta.event_type == event_type)
            && query.error_class.is_none_or(|class| meta.error_class == class)
            && query.since_ms.is_none_or(|since| meta.last_failure_at_ms >= since)
            && query.until_ms.is_none_or(|until| meta.last_failure_at_ms < until)
            && query.errors.as_ref().is_none_or(|errors| errors.get(meta.error as usize).copied().unwrap_or(false))
            && query.status.is_none_or(|status| status == state.status_of(meta, self.replay_outcome_timeout_ms, now))
    }

    fn entry_of(&self, state: &State, partition: i32, meta: &Meta, now: i64) -> Entry {
        let strings = &state.strings;
        let text = |id: u32| strings.get(id).map(str::to_owned);
        let origin = state.origins.get(meta.origin);
        let event_id = state.partitions.get(&partition).and_then(|part| part.event_id(meta)).map(str::to_owned);
        let failed_again = state.failed_again_depth(meta);
        let last_status = meta.status.map(|status| EntryStatusRecord {
            status: status.status,
            at_ms: status.at_ms,
            by: text(status.by).unwrap_or_default(),
            event_id: event_id.clone(),
            new_entry: status.new_entry.get().map(|position| position.id(&self.dlq_topic)),
            note: text(status.note),
            replays: (meta.replays > 0).then_some(meta.replays),
        });
        Entry {
            entry: DeadLetterEntry {
                id: Position { partition, offset: meta.offset }.id(&self.dlq_topic),
                partition,
                offset: meta.offset,
                source: text(meta.source),
                service: text(origin.service),
                event_id,
                event_type: text(meta.event_type),
                error_class: text(meta.error_class),
                error: text(meta.error),
                attempts: (meta.attempts > 0).then_some(meta.attempts),
                original_topic: text(origin.topic),
                original_partition: (meta.original_partition >= 0).then_some(meta.original_partition),
                original_offset: (meta.original_offset >= 0).then_some(meta.original_offset),
                first_failure_at_ms: (meta.first_failure_at_ms > 0).then_some(meta.first_failure_at_ms),
                last_failure_at_ms: (meta.last_failure_at_ms > 0).then_some(meta.last_failure_at_ms),
                body_bytes: meta.body_bytes as usize,
            },
            status: state.status_of(meta, self.replay_outcome_timeout_ms, now),
            last_status,
            replays: meta.replays,
            replay_of: meta.replay_of.get().map(|position| position.id(&self.dlq_topic)),
            failed_again,
            flagged: failed_again >= self.max_failed_again,
        }
    }

    pub fn get(&self, position: Position) -> Option<Entry> {
        let state = self.read();
        let meta = state.get(position)?;
        Some(self.entry_of(&state, position.partition, meta, now_ms()))
    }

    /// Up to `limit` matching entries after `after` (exclusive), in (partition, offset) order, and how many match
    /// in all.
    pub fn page(&self, query: &Query, after: Option<Position>, limit: usize) -> Page {
        let state = self.read();
        let now = now_ms();
        let mut entries = Vec::new();
        let mut total_matching = 0;
        let mut last = None;
        let mut more = false;
        for (&partition, part) in &state.partitions {
            for meta in &part.metas {
                if !self.matches(&state, query, meta, now) {
                    continue;
                }
                total_matching += 1;
                let position = Position { partition, offset: meta.offset };
                if after.is_some_and(|after| position <= after) {
                    continue;
                }
                if entries.len() < limit {
                    entries.push(self.entry_of(&state, partition, meta, now));
                    last = Some(position);
                } else {
                    more = true;
                }
            }
        }
        Page {
            entries,
            next_cursor: if more {
                last.map(|position| format!("{}:{}", position.partition, position.offset))
            } else {
                None
            },
            total_matching,
        }
    }

    /// The positions of every matching entry (for bulk actions), in listing order.
    pub fn positions(&self, query: &Query) -> Vec<Position> {
        let state = self.read();
        let now = now_ms();
        let mut positions = Vec::new();
        for (&partition, part) in &state.partitions {
            for meta in part.metas.iter().filter(|meta| self.matches(&state, query, meta, now)) {
                positions.push(Position { partition, offset: meta.offset });
            }
        }
        positions
    }

    pub fn stats(&self, query: &Query) -> Stats {
        let state = self.read();
        let now = now_ms();
        // Counters indexed by interned number and by status: a million entries, no hashing per entry.
        let n_strings = state.strings.values.len() + 1;
        let mut by_source = vec![0_usize; n_strings];
        let mut by_service = vec![0_usize; n_strings];
        let mut by_class = vec![0_usize; n_strings];
        let mut by_status = [0_usize; Status::ALL.len()];
        let mut total = 0;
        for part in state.partitions.values() {
            for meta in part.metas.iter().filter(|meta| self.matches(&state, query, meta, now)) {
                total += 1;
                by_source[meta.source as usize] += 1;
                by_service[state.origins.get(meta.origin).service as usize] += 1;
                by_class[meta.error_class as usize] += 1;
                let status = state.status_of(meta, self.replay_outcome_timeout_ms, now);
                by_status[Status::ALL.iter().position(|s| *s == status).unwrap_or(0)] += 1;
            }
        }
        let named = |counts: Vec<usize>| -> BTreeMap<String, usize> {
            let mut named = BTreeMap::new();
            for (id, n) in counts.into_iter().enumerate().filter(|(_, n)| *n > 0) {
                let name = state.strings.get(id as u32).unwrap_or(UNKNOWN).to_owned();
                *named.entry(name).or_default() += n;
            }
            named
        };
        Stats {
            total,
            by_source: named(by_source),
            by_service: named(by_service),
            by_error_class: named(by_class),
            by_status: Status::ALL
                .iter()
                .zip(by_status)
                .filter(|(_, n)| *n > 0)
                .map(|(status, n)| (status.as_str().to_owned(), n))
                .collect(),
        }
    }

    /// Counts by (status, source, service, error class), for the `hookline_dlq_entries` gauge, and the untriaged
    /// entries per (source, service).
    pub fn gauges(&self) -> Gauges {
        let state = self.read();
        let now = now_ms();
        let mut counts: HashMap<(Status, u32, u32, u32), usize> = HashMap::new();
        let mut untriaged: HashMap<(u32, u32), Untriaged> = HashMap::new();
        let mut by_reference: HashMap<(u32, u32), Untriaged> = HashMap::new();
        for part in state.partitions.values() {
            for meta in &part.metas {
                let status = state.status_of(meta, self.replay_outcome_timeout_ms, now);
                let service = state.origins.get(meta.origin).service;
                *counts.entry((status, meta.source, service, meta.error_class)).or_default() += 1;
                if status.is_untriaged() {
                    let seen = untriaged
                        .entry((meta.source, service))
                        .or_insert(Untriaged { count: 0, oldest_at_ms: i64::MAX });
                    seen.count += 1;
                    seen.oldest_at_ms = seen.oldest_at_ms.min(meta.last_failure_at_ms);
                }
                let resolved = matches!(status, Status::Succeeded | Status::Discarded | Status::FailedAgain);
                if meta.by_reference && !resolved {
                    let seen = by_reference
                        .entry((meta.source, service))
                        .or_insert(Untriaged { count: 0, oldest_at_ms: i64::MAX });
                    seen.count += 1;
                    let failed_at =
                        if meta.first_failure_at_ms > 0 { meta.first_failure_at_ms } else { meta.last_failure_at_ms };
                    seen.oldest_at_ms = seen.oldest_at_ms.min(failed_at);
                }
            }
        }
        let name = |id: u32| state.strings.get(id).unwrap_or(UNKNOWN).to_owned();
        Gauges {
            counts: counts
                .into_iter()
                .map(|((status, source, service, class), n)| ((status, name(source), name(service), name(class)), n))
                .collect(),
            untriaged: untriaged
                .into_iter()
                .map(|((source, service), seen)| ((name(source), name(service)), seen))
                .collect(),
            by_reference: by_reference
                .into_iter()
                .map(|((source, service), seen)| ((name(source), name(service)), seen))
                .collect(),
        }
    }

    /// Dead letters over time: per source, how many entries became dead letters in each `bucket_ms` window
    /// starting at `since_ms` (for the console's chart).
    pub fn histogram(&self, since_ms: i64, bucket_ms: i64, n_buckets: usize) -> BTreeMap<String, Vec<usize>> {
        let state = self.read();
        let mut series: HashMap<u32, Vec<usize>> = HashMap::new();
        for part in state.partitions.values() {
            for meta in part.metas.iter().filter(|meta| meta.last_failure_at_ms >= since_ms) {
                let bucket = usize::try_from((meta.last_failure_at_ms - since_ms) / bucket_ms.max(1)).unwrap_or(0);
                if bucket < n_buckets {
                    series.entry(meta.source).or_insert_with(|| vec![0; n_buckets])[bucket] += 1;
                }
            }
        }
        series
            .into_iter()
            .map(|(source, counts)| (state.strings.get(source).unwrap_or(UNKNOWN).to_owned(), counts))
            .collect()
    }
}

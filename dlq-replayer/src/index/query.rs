//! Querying the index: filters compiled to interned numbers, entries rebuilt from their compact form, pages in
//! (partition, offset) order, and counts for stats, gauges and the console's chart.

use std::collections::{BTreeMap, HashMap};

use hookline_common::wire::{DeadLetterEntry, EntryStatusRecord, now_ms};

use super::{
    Criteria, Entry, Gauges, Index, IndexError, Page, Position, Stats, Status, Untriaged,
    build::{Meta, State, event_id, inline_error},
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
    /// For a text filter: which interned error messages contain it, and the text in lower case (for the
    /// messages kept per entry, not interned).
    errors: Option<(Vec<bool>, String)>,
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
            let interned = std::iter::once(false)
                .chain(state.strings.values.iter().map(|value| value.to_lowercase().contains(&text)))
                .collect();
            (interned, text)
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

    fn matches(&self, state: &State, query: &Query, meta: &Meta, blob: &[u8], now: i64) -> bool {
        !query.impossible
            && query.source.is_none_or(|source| meta.source == source)
            && query.service.is_none_or(|service| state.origins.get(meta.origin).service == service)
            && query.event_type.is_none_or(|event_type| meta.event_type == event_type)
            && query.error_class.is_none_or(|class| meta.error_class == class)
            && query.since_ms.is_none_or(|since| meta.last_failure_at_ms >= since)
            && query.until_ms.is_none_or(|until| meta.last_failure_at_ms < until)
            && query.errors.as_ref().is_none_or(|(errors, text)| match inline_error(meta, blob) {
                Some(error) => error.to_lowercase().contains(text.as_str()),
                None => errors.get(meta.error as usize).copied().unwrap_or(false),
            })
            && query.status.is_none_or(|status| status == state.status_of(meta, self.replay_outcome_timeout_ms, now))
    }

    fn entry_of(&self, state: &State, partition: i32, meta: &Meta, blob: &[u8], now: i64) -> Result<Entry, IndexError> {
        let strings = &state.strings;
        let text = |id: u32| strings.get(id).map(str::to_owned);
        let origin = state.origins.get(meta.origin);
        let event_id = event_id(meta, blob).map(str::to_owned);
        let error = match inline_error(meta, blob) {
            Some(error) => Some(error.to_owned()),
            None => text(meta.error),
        };
        let failed_again = state.failed_again_depth(meta)?;
        let last_status = meta.status.map(|status| EntryStatusRecord {
            status: status.status,
            at_ms: status.at_ms,
            by: text(status.by).unwrap_or_default(),
            event_id: event_id.clone(),
            new_entry: status.new_entry.get().map(|position| position.id(&self.dlq_topic)),
            note: text(status.note),
            replays: (meta.replays > 0).then_some(meta.replays),
        });
        Ok(Entry {
            entry: DeadLetterEntry {
                id: Position { partition, offset: meta.offset }.id(&self.dlq_topic),
                partition,
                offset: meta.offset,
                source: text(meta.source),
                service: text(origin.service),
                event_id,
                event_type: text(meta.event_type),
                error_class: text(meta.error_class),
                error,
                attempts: (meta.attempts > 0).then_some(u32::from(meta.attempts)),
                original_topic: text(origin.topic),
                original_partition: (meta.original_partition >= 0).then_some(meta.original_partition),
                original_offset: (meta.original_offset >= 0).then_some(meta.original_offset),
                first_failure_at_ms: (meta.first_failure_at_ms > 0).then_some(meta.first_failure_at_ms),
                last_failure_at_ms: (meta.last_failure_at_ms > 0).then_some(meta.last_failure_at_ms),
                body_bytes: meta.body_bytes as usize,
                by_reference: meta.by_reference,
                replay_of: meta.replay_of.get().map(|position| position.id(&self.dlq_topic)),
                // Not kept in the index: a re-drive reads it from the record.
                dedupe_retention_days: None,
                destination: None,
            },
            status: state.status_of(meta, self.replay_outcome_timeout_ms, now),
            last_status,
            replays: meta.replays,
            replay_of: meta.replay_of.get().map(|position| position.id(&self.dlq_topic)),
            failed_again,
            flagged: failed_again >= self.max_failed_again,
        })
    }

    pub fn get(&self, position: Position) -> Result<Option<Entry>, IndexError> {
        let state = self.read();
        let Some((meta, blob)) = state.entry_at(position)? else { return Ok(None) };
        Ok(Some(self.entry_of(&state, position.partition, &meta, &blob, now_ms())?))
    }

    /// Up to `limit` matching entries after `after` (exclusive), in (partition, offset) order, and how many match
    /// in all.
    pub fn page(&self, query: &Query, after: Option<Position>, limit: usize) -> Result<Page, IndexError> {
        let state = self.read();
        let now = now_ms();
        let mut entries = Vec::new();
        let mut total_matching = 0;
        let mut last = None;
        let mut more = false;
        let mut failed = None;
        state.scan(|partition, meta, blob| {
            if !self.matches(&state, query, meta, blob, now) {
                return true;
            }
            total_matching += 1;
            let position = Position { partition, offset: meta.offset };
            if after.is_some_and(|after| position <= after) {
                return true;
            }
            if entries.len() < limit {
                match self.entry_of(&state, partition, meta, blob, now) {
                    Ok(entry) => entries.push(entry),
                    Err(error) => {
                        failed = Some(error);
                        return false;
                    }
                }
                last = Some(position);
            } else {
                more = true;
            }
            true
        })?;
        if let Some(error) = failed {
            return Err(error);
        }
        Ok(Page {
            entries,
            next_cursor: if more {
                last.map(|position| format!("{}:{}", position.partition, position.offset))
            } else {
                None
            },
            total_matching,
        })
    }

    /// The last entry of each partition now: what a bulk action started now covers (entries added while it runs,
    /// such as the new entries of re-driven events that fail again, are not its own).
    pub fn ends(&self) -> BTreeMap<i32, i64> {
        self.read().ends()
    }

    /// The positions of up to `limit` matching entries after `after` (exclusive) and at or before `ends`, in
    /// listing order: a bulk action walks them a batch at a time (each entry once, whatever it changes), instead
    /// of holding every matching entry at once.
    pub fn positions_after(
        &self,
        query: &Query,
        after: Option<Position>,
        ends: &BTreeMap<i32, i64>,
        limit: usize,
    ) -> Result<Vec<Position>, IndexError> {
        let state = self.read();
        let now = now_ms();
        let mut positions = Vec::new();
        state.scan_after(after, |partition, meta, blob| {
            let position = Position { partition, offset: meta.offset };
            if after.is_some_and(|after| position <= after)
                || ends.get(&partition).is_none_or(|end| meta.offset > *end)
                || !self.matches(&state, query, meta, blob, now)
            {
                return true;
            }
            positions.push(position);
            positions.len() < limit
        })?;
        Ok(positions)
    }

    pub fn stats(&self, query: &Query) -> Result<Stats, IndexError> {
        let state = self.read();
        let now = now_ms();
        // Counters indexed by interned number and by status: a million entries, no hashing per entry.
        let n_strings = state.strings.values.len() + 1;
        let mut by_source = vec![0_usize; n_strings];
        let mut by_service = vec![0_usize; n_strings];
        let mut by_class = vec![0_usize; n_strings];
        let mut by_status = [0_usize; Status::ALL.len()];
        let mut total = 0;
        state.scan(|_, meta, blob| {
            if self.matches(&state, query, meta, blob, now) {
                total += 1;
                by_source[meta.source as usize] += 1;
                by_service[state.origins.get(meta.origin).service as usize] += 1;
                by_class[meta.error_class as usize] += 1;
                let status = state.status_of(meta, self.replay_outcome_timeout_ms, now);
                by_status[Status::ALL.iter().position(|s| *s == status).unwrap_or(0)] += 1;
            }
            true
        })?;
        let named = |counts: Vec<usize>| -> BTreeMap<String, usize> {
            let mut named = BTreeMap::new();
            for (id, n) in counts.into_iter().enumerate().filter(|(_, n)| *n > 0) {
                let name = state.strings.get(id as u32).unwrap_or(UNKNOWN).to_owned();
                *named.entry(name).or_default() += n;
            }
            named
        };
        Ok(Stats {
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
        })
    }

    /// Counts by (status, source, service, error class), for the `hookline_dlq_entries` gauge, and the untriaged
    /// entries per (source, service).
    pub fn gauges(&self) -> Result<Gauges, IndexError> {
        let state = self.read();
        let now = now_ms();
        let mut counts: HashMap<(Status, u32, u32, u32), usize> = HashMap::new();
        let mut untriaged: HashMap<(u32, u32), Untriaged> = HashMap::new();
        let mut by_reference: HashMap<(u32, u32), Untriaged> = HashMap::new();
        state.scan(|_, meta, _| {
            let status = state.status_of(meta, self.replay_outcome_timeout_ms, now);
            let service = state.origins.get(meta.origin).service;
            *counts.entry((status, meta.source, service, meta.error_class)).or_default() += 1;
            if status.is_untriaged() {
                let seen =
                    untriaged.entry((meta.source, service)).or_insert(Untriaged { count: 0, oldest_at_ms: i64::MAX });
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
            true
        })?;
        let name = |id: u32| state.strings.get(id).unwrap_or(UNKNOWN).to_owned();
        Ok(Gauges {
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
        })
    }

    /// Dead letters over time: per source, how many entries became dead letters in each `bucket_ms` window
    /// starting at `since_ms` (for the console's chart).
    pub fn histogram(
        &self,
        since_ms: i64,
        bucket_ms: i64,
        n_buckets: usize,
    ) -> Result<BTreeMap<String, Vec<usize>>, IndexError> {
        let state = self.read();
        let mut series: HashMap<u32, Vec<usize>> = HashMap::new();
        state.scan(|_, meta, _| {
            if meta.last_failure_at_ms >= since_ms {
                let bucket = usize::try_from((meta.last_failure_at_ms - since_ms) / bucket_ms.max(1)).unwrap_or(0);
                if bucket < n_buckets {
                    series.entry(meta.source).or_insert_with(|| vec![0; n_buckets])[bucket] += 1;
                }
            }
            true
        })?;
        Ok(series
            .into_iter()
            .map(|(source, counts)| (state.strings.get(source).unwrap_or(UNKNOWN).to_owned(), counts))
            .collect())
    }
}

//! Admission: a fetched record joins its partition's window and its route's queue, or, in a fan-out service, the
//! queue of every destination that takes it (one job each, its offset handled once all have ended).

use std::collections::VecDeque;

use super::{Admission, Delayed, Job, PartitionKey, Scheduler, Work};
use crate::record::Record;

impl Scheduler {
    /// Every route that takes a record gets it (`service.routing = "fan_out"`): one job per destination, each in
    /// its own route (its own limit, rate, breaker and pause), and the record's offset handled once all have ended.
    #[must_use]
    pub fn with_fan_out(mut self, fan_out: bool) -> Self {
        self.fan_out = fan_out;
        self
    }

    /// Takes a fetched record into its partition's window and queues it (in a fan-out service, one job per
    /// destination that takes it). False when it is not ours (its partition is not assigned, or revoked) or a
    /// re-fetch: then it is dropped.
    pub fn admit(&mut self, mut record: Box<Record>, admission: Admission, now_ms: i64) -> bool {
        let partition = (record.topic().to_owned(), record.partition());
        let Some(state) = self.partitions.get_mut(&partition) else { return false };
        if state.revoked || !state.window.admit(record.offset(), crate::window::record_bytes(&record)) {
            return false;
        }
        let generation = state.generation;
        // Only a partition not held yet needs a new look: the rest of a held route's records change nothing.
        let source_topic = state.source_topic && !state.held;
        if !self.fan_out {
            // As every service ran before fan-out: its first route, addressed to no destination whatever its headers
            // say.
            record.address_to(None);
            let route = self.route_for(admission.source.as_deref(), admission.event_type.as_deref(), None);
            self.queue(record, route, (partition, generation), source_topic, admission, now_ms);
            return true;
        }
        let offset = record.offset();
        let routes = self.routes_of(&mut record, &admission);
        let first_route = routes[0].0;
        if routes.len() == 1 {
            self.queue(record, first_route, (partition, generation), source_topic, admission, now_ms);
            return true;
        }
        let mut copies = Vec::with_capacity(routes.len() - 1);
        for (route, destination) in routes.into_iter().skip(1) {
            // Only a well-formed event with destinations fans out: always a copy.
            if let Some(copy) = destination.as_deref().and_then(|destination| record.copy_for(destination)) {
                copies.push((route, Box::new(copy)));
            }
        }
        if !copies.is_empty() {
            self.fanned.insert((partition.clone(), generation, offset), copies.len() + 1);
        }
        let place = (partition, generation);
        for (route, copy) in copies {
            self.queue(copy, route, place.clone(), source_topic, admission.clone(), now_ms);
        }
        self.queue(record, first_route, place, source_topic, admission, now_ms);
        true
    }

    /// Queues `record` as a job of `route` (delayed until its due time, if any).
    fn queue(
        &mut self,
        record: Box<Record>,
        route: usize,
        (partition, generation): (PartitionKey, u64),
        source_topic: bool,
        admission: Admission,
        now_ms: i64,
    ) {
        // A held route's record in a source topic: that partition is to be held at once.
        self.holds_dirty |= source_topic && self.routes[route].held();
        // In a fan-out service each destination keeps its own order: a key's turn is per route.
        let chain = match admission.ordering_key {
            Some(key) if self.fan_out => Some(format!("{route}/{key}")),
            other => other,
        };
        let job = Job {
            record,
            partition,
            generation,
            route,
            chain,
            prior: admission.attempts,
            first_failure_at_ms: admission.first_failure_at_ms,
            admitted_at_ms: now_ms,
            parked: admission.due_at_ms.is_some(),
            work: Work::Handle,
            probe: false,
        };
        match admission.due_at_ms {
            Some(due_at_ms) if due_at_ms > now_ms => self.delay(job, due_at_ms, false),
            _ => self.enqueue(job),
        }
    }

    /// The routes `record` of a fan-out service goes to, each with the destination it is addressed to there, and the
    /// record addressed to the first: the destination its headers name (a retry, deferral or re-drive of one
    /// destination), else every route that takes it, else (none does) the route of its source, addressed to none
    /// (`[handler]`).
    fn routes_of(&mut self, record: &mut Record, admission: &Admission) -> Vec<(usize, Option<String>)> {
        let (source, event_type) = (admission.source.as_deref(), admission.event_type.as_deref());
        let destination = admission.destination.as_deref();
        record.address_to(destination);
        if destination.is_some() {
            return vec![(self.route_for(source, event_type, destination), destination.map(str::to_owned))];
        }
        let taking: Vec<(usize, Option<String>)> = self
            .rules
            .iter()
            .enumerate()
            .filter(|(_, rule)| source.is_some_and(|source| rule.matcher.takes(source, event_type)))
            .map(|(index, rule)| (index, rule.matcher.name().map(str::to_owned)))
            .collect();
        if taking.is_empty() {
            return vec![(self.route_for(source, event_type, None), None)];
        }
        record.address_to(taking[0].1.as_deref());
        let source = source.unwrap_or("unknown");
        taking.into_iter().map(|(index, destination)| (self.route_at(source, Some(index)), destination)).collect()
    }

    /// Admits a record that is handled as it arrives (addressed to another service: nothing to do for it), so
    /// that it never holds its partition's prefix nor takes a route's slot. Returns the offset to store when the
    /// prefix moved; `None` also when the record was not admitted (its partition is not ours, or it was fetched
    /// before).
    pub fn pass(&mut self, partition: &PartitionKey, offset: i64) -> Option<i64> {
        let state = self.partitions.get_mut(partition).filter(|state| !state.revoked)?;
        // Handled at once: it holds no memory.
        if !state.window.admit(offset, 0) {
            return None;
        }
        state.window.handled(offset)
    }

    /// Queues a job that does not hold its key's turn yet.
    pub(super) fn enqueue(&mut self, job: Job) {
        if let Some(key) = &job.chain {
            let chain_key = (job.partition.clone(), key.clone());
            if let Some(waiting) = self.chains.get_mut(&chain_key) {
                waiting.push_back(job);
                return;
            }
            self.chains.insert(chain_key, VecDeque::new());
        }
        let route = job.route;
        self.routes[route].queue.push_back(job);
    }

    pub(super) fn delay(&mut self, job: Job, due_at_ms: i64, owns_chain: bool) {
        self.next_sequence += 1;
        self.delayed.insert((due_at_ms, self.next_sequence), Delayed { job, owns_chain });
    }
}

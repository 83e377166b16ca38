//! Records started together run together: one task for all of them, one claim call for all of them, one done call
//! for those whose handlers succeeded together, and their completions reported together (their offsets stored
//! under one lock).
//!
//! Each record still takes its own path ([`Pipeline::process_prepared`]): the batch only makes its first claim
//! (answered key by key exactly as a lone claim, [`crate::dedupe::Dedupe::claim_together`]) and writes its done
//! marker. Everything else (a claim held by another consumer, a duplicate, a handler failure and its retry or dead
//! letter, a panic) is the record's own path as before. The records run concurrently inside the one task, and
//! whatever of them is ready is reported at once: a slow handler holds only its own record, never the batch's.
//!
//! Which records join: those the scheduler starts to be handled (not deferred), with a valid MAC and a well-formed
//! event, that are not re-drives or re-processing requests (their fate records take the lone path), on a single
//! Redis, with traces off (each record's `process` span is the lone path's). Every other record runs alone.
//!
//! Fewer than eight records claim and mark done one by one, pipelined with other tasks' calls by the dedupe's
//! batching task, as every record did before: a many-key call for two records costs Redis more than two one-key
//! calls in a shared pipeline.
//!
//! A claim or done call that fails (Redis down) fails closed as before: each record then claims, or marks
//! done, alone, retrying until Redis answers. A done call that takes longer than a third of the lease is given up
//! for the lone call too, which renews the claim while it waits; marking done twice is safe.

use std::{future::Future, pin::Pin};

use futures_util::{FutureExt, StreamExt, stream::FuturesUnordered};
use hookline_common::telemetry::traces::{self, TraceSpan};

use super::{Disposition, Handled, Interrupted, Pipeline, Prepared, Step, Unmarked, guard::panic_message};
use crate::{
    dedupe::{Claim, ClaimToken},
    metrics::event_outcome,
    record::Record,
    schedule::{Downstream, Job, Work},
};

/// Records of one batch, at most: what one claim call carries.
pub const TOGETHER_MAX: usize = 64;

/// Below this many records, claims and done markers go one per record through the dedupe's batching task instead of
/// one many-key call: measured at D = 20 ms (`http`), where records start two or so at a time, a many-key call per
/// pair cost Redis twice the time per event that the one-key calls, pipelined with every other task's, cost.
const MANY_KEYS_FROM: usize = 8;

/// A job and how it ended.
pub type Ended = (Job, Disposition, Downstream);

type Running<'a> = Pin<Box<dyn Future<Output = Vec<(Job, Step)>> + Send + 'a>>;

impl Pipeline {
    /// Whether `job` may run with others ([`Self::run_together`]); see the module for which do.
    pub fn joins_together(&self, job: &Job) -> bool {
        job.work == Work::Handle
            && job.prior.is_none()
            && !traces::enabled()
            && job.record.verdict.accepted()
            && self.dedupe.claims_together()
            && job.record.event.as_ref().is_ok_and(|event| event.replay_of.is_none() && event.reprocess_id.is_none())
    }

    /// Runs jobs [`Self::joins_together`] accepted, to their ends; `report` gets whatever ended together, as it
    /// ends (every job exactly once).
    pub async fn run_together(&self, jobs: Vec<Job>, mut report: impl FnMut(Vec<Ended>)) {
        let claims = self.claim_together(&jobs).await;
        let mut running: FuturesUnordered<Running<'_>> = FuturesUnordered::new();
        for (job, claim) in jobs.into_iter().zip(claims) {
            running.push(Box::pin(async move {
                let step = self.run_prepared(&job, claim).await;
                vec![(job, step)]
            }));
        }
        while let Some(first) = running.next().await {
            let mut ready = first;
            while let Some(Some(more)) = running.next().now_or_never() {
                ready.extend(more);
            }
            let mut ended = Vec::with_capacity(ready.len());
            let mut unmarked = Vec::new();
            for (job, step) in ready {
                match step {
                    Step::End(disposition, downstream) => ended.push((job, disposition, downstream)),
                    Step::Unmarked(done) => unmarked.push((job, *done)),
                }
            }
            if !unmarked.is_empty() {
                running.push(Box::pin(self.mark_together(unmarked)));
            }
            if !ended.is_empty() {
                report(ended);
            }
        }
    }

    /// The first claim of every job, in one call; `None` for each when it failed (each then claims alone).
    async fn claim_together(&self, jobs: &[Job]) -> Vec<Option<Claim>> {
        let tokens: Vec<Option<ClaimToken>> =
            jobs.iter().map(|job| job.record.event.as_ref().ok().map(|event| self.token_for(event))).collect();
        let claimable: Vec<&ClaimToken> = tokens.iter().flatten().collect();
        if claimable.len() < MANY_KEYS_FROM {
            // Each claims alone, pipelined with other tasks' calls.
            return jobs.iter().map(|_| None).collect();
        }
        let mut claims = match self.timed_redis("claim", self.dedupe.claim_together(&claimable)).await {
            Ok(claims) => {
                self.redis_recovered();
                claims.into_iter()
            }
            Err(error) => {
                self.redis_failed("claim", &error);
                return jobs.iter().map(|_| None).collect();
            }
        };
        // A job without a token (none joins without a well-formed event) makes its own way.
        tokens.iter().map(|token| token.as_ref().and_then(|_| claims.next())).collect()
    }

    /// One job's own path from its claim, its success left unmarked; a panic anywhere on it ends it as a failure
    /// of the record, as [`Self::run`] does.
    async fn run_prepared(&self, job: &Job, claim: Option<Claim>) -> Step {
        let prepared = Prepared { claim, done_later: true };
        let span = TraceSpan::off();
        let path = self.process_prepared(&job.record, None, &span, prepared);
        match std::panic::AssertUnwindSafe(path).catch_unwind().await {
            Ok(step) => step,
            Err(panic) => Step::End(self.recover(job, &panic_message(panic.as_ref())).await, Downstream::NotCalled),
        }
    }

    /// Marks every job done in one call, and ends them; alone (renewing each claim meanwhile) when the call fails
    /// or is slow.
    async fn mark_together(&self, unmarked: Vec<(Job, Unmarked)>) -> Vec<(Job, Step)> {
        if unmarked.len() < MANY_KEYS_FROM {
            return self.mark_each(unmarked).await;
        }
        let pairs: Vec<_> = unmarked.iter().map(|(_, done)| (&done.token, &done.marker)).collect();
        let call = tokio::time::timeout(self.dedupe.lease() / 3, self.dedupe.done_together(&pairs));
        let replies = match self.timed_redis("done", async { call.await.unwrap_or_else(|_| Err(timed_out())) }).await {
            Ok(replies) => {
                self.redis_recovered();
                Some(replies)
            }
            Err(error) => {
                self.redis_failed("done", &error);
                None
            }
        };
        drop(pairs);
        let mut ended = Vec::with_capacity(unmarked.len());
        match replies {
            Some(replies) => {
                for ((job, _), still_ours) in unmarked.into_iter().zip(replies) {
                    self.finish_unmarked(&job.record, still_ours);
                    ended.push((job, Step::End(Handled, Downstream::Answered)));
                }
            }
            None => return self.mark_each(unmarked).await,
        }
        ended
    }

    /// Marks each job done alone, all at once (their calls pipelined by the dedupe's batching task), and ends them.
    async fn mark_each(&self, unmarked: Vec<(Job, Unmarked)>) -> Vec<(Job, Step)> {
        let marks = unmarked.into_iter().map(|(job, done)| async move {
            let (disposition, downstream) = self.mark_alone(&job.record, done).await;
            (job, Step::End(disposition, downstream))
        });
        futures_util::future::join_all(marks).await
    }

    /// Marks one processed record done alone (renewing its claim until Redis answers), and ends it.
    pub(super) async fn mark_alone(&self, message: &Record, done: Unmarked) -> (Disposition, Downstream) {
        let mark = self.redis_until_done("done", || self.dedupe.mark_done(&done.token, &done.marker));
        match self.renewing(&done.token, mark).await {
            Some(still_ours) => {
                self.finish_unmarked(message, still_ours);
                (Handled, Downstream::Answered)
            }
            None => (Interrupted, Downstream::Answered),
        }
    }

    /// What the lone path does once the done marker is written: the lease warning, the event's age and its count.
    fn finish_unmarked(&self, message: &Record, still_ours: bool) {
        let Ok(event) = &message.event else { return };
        let source = event.meta.source.as_str();
        if !still_ours {
            super::calls::claim_expired(event);
        }
        let age_ms = hookline_common::wire::now_ms().saturating_sub(event.meta.received_at_ms).max(0);
        self.metrics.event_age.with_label_values(&[source]).observe(age_ms as f64 / 1000.0);
        self.count(event, event_outcome::PROCESSED);
    }
}

fn timed_out() -> crate::dedupe::DedupeError {
    crate::dedupe::DedupeError::from(redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "done call slower than a third of the lease",
    )))
}

//! Two-phase dedupe in Redis, so that a duplicate is processed at most once and a crash never loses an event.
//!
//! The naive "SET NX, then process" loses an event for good when processing fails or the process dies after the
//! SET. Instead, per event (its keys: [`hookline_common::wire::dedupe_layout`], scoped to the consumer service):
//! 1. claim: the event's claim key gets `claim:<token>` with a short lease, so a crashed consumer's claim expires,
//!    unless a bucket of the source's window records an outcome ([`scripts`]);
//! 2. done: after success (or once a route's filter skipped the event: the filtered outcome,
//!    `f<s>:<filter>;types=,<hex>,...,`), the outcome goes into the bucket of the current time slot, and the claim
//!    key is deleted, in one script;
//! 3. release: after a retryable failure, delete the claim key only if it still holds our claim
//!    (compare-and-delete), so the retry is not mistaken for a duplicate;
//! 4. dead: after the event is dead-lettered, the dead outcome (`d<s>:dead:<DLQ entry id>;types=,<hex>,...,`)
//!    goes into the bucket: a re-send of the same event (a provider's retry, or a captured delivery re-sent with
//!    another unsigned type header) is skipped rather than dead-lettered again, so one delivery cannot grow the
//!    DLQ. A re-drive by the replayer claims over it; so does, once per type, a copy whose event type is on its
//!    source's allowlist and is not among the types the marker records. A copy with a forged type dead-lettered
//!    first then does not lose the event. The dead outcome stays in its bucket while such a claim runs, so a
//!    release (a retryable failure) leaves it as it was. A filtered outcome records its types too and is claimed
//!    over by the same rule (finding P8: a copy re-sent first under another allowlisted type that a filter skips
//!    must not make the genuine delivery a duplicate); to anything else it is done.
//!
//! A claim held by another owner is not a duplicate (a rebalance race): the caller waits and tries again.
//! A Redis error or timeout is never read as "not a duplicate": the caller fails closed and retries. Because
//! claiming is one script that also accepts our own token, re-sending a claim whose reply was lost is safe.
//!
//! Records started together are claimed by one script call and marked done by another ([`together`]): the
//! one-event rule applied to each event. Other calls are coalesced into pipelines on a single Redis ([`batch`]).
//!
//! Upgrades: from the previous layout (one key per event), [`legacy`]; from the unscoped layout before services had
//! names, a service that ran on it ([`ServiceHistory`]) reads the unscoped key before claiming, for as long as such
//! a key can live, and takes its `done` as a duplicate and its claim as held by another consumer.

use std::{collections::HashMap, sync::Arc, time::Duration};

use hookline_common::{
    config::RedisConfig,
    redis_connection::RedisConnection,
    wire::{
        dedupe_layout::{self, EventHash},
        now_ms,
        redis_key::{self, DEDUPE_CLAIM_PREFIX, DoneMarker, FilteredMarker},
    },
};
use redis::{FromRedisValue, RedisResult, Script, ScriptInvocation};

mod batch;
mod destination;
mod history;
mod legacy;
mod schedule;
mod scripts;
mod together;

pub use batch::MAX_BATCH;
pub use history::{LayoutHistory, ServiceHistory};
pub use schedule::ChangeBucketsError;
/// The previous layout's scripts, as the previous build runs them (for tests that run it beside this one).
pub mod previous_layout {
    pub use crate::dedupe::legacy::{CLAIM_SCRIPT, DEAD_SCRIPT, DONE_SCRIPT, RELEASE_SCRIPT, RENEW_SCRIPT};
}

/// The outcome of trying to claim an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// We hold the claim: process the event, then [`Dedupe::mark_done`] or [`Dedupe::release`].
    Acquired(ClaimToken),
    /// The event was processed before: skip it.
    AlreadyDone,
    /// Another consumer holds a live claim: not a duplicate; wait and claim again.
    HeldByOther,
    /// The event was dead-lettered (within the window) and this is not a re-drive: skip it; its DLQ entry is
    /// the way to run it again.
    DeadLettered,
}

impl Claim {
    /// What a claim script's reply for `token` means.
    fn from_reply(token: &ClaimToken, reply: &str) -> Self {
        match reply {
            "acquired" => Claim::Acquired(token.clone()),
            "done" => Claim::AlreadyDone,
            "dead" => Claim::DeadLettered,
            reply => match reply.strip_prefix("over:") {
                Some(marker) => Claim::Acquired(ClaimToken { took_over: Some(marker.to_owned()), ..token.clone() }),
                None => Claim::HeldByOther,
            },
        }
    }
}

/// Proof of a claim: the event's keys and the unique value we wrote into its claim key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimToken {
    hash: EventHash,
    /// The claim key.
    key: String,
    value: String,
    /// The source's dedupe window.
    window_s: u64,
    /// The event's key in the previous layout, while it is read ([`legacy`]).
    legacy_key: Option<String>,
    /// The previous layout's key is claimed and written too (the upgrade period).
    legacy_writes: bool,
    /// The previous layout's dead marker our claim of its key took over (a release puts it back).
    legacy_took_over: Option<String>,
    /// The event's key in the unscoped layout, read before claiming while the service honours that layout.
    unscoped_key: Option<String>,
    /// A re-drive of a dead letter: the claim may take over a dead outcome.
    redrive: bool,
    /// The copy's event type as a dead marker records it ([`redis_key::dead_marker_type`]), if it has one.
    event_type: Option<String>,
    /// Whether the copy's type is on its source's allowlist: it may then take over a dead or filtered outcome that
    /// does not record that type yet.
    type_allowlisted: bool,
    /// The dead marker or filtered outcome this claim took over (in either layout), if it did: the types it
    /// records are kept in the next outcome.
    took_over: Option<String>,
}

impl ClaimToken {
    /// The token for a copy of type `event_type`: a dead marker it leaves records the type.
    pub fn recording_type(self, event_type: Option<&str>) -> Self {
        Self { event_type: event_type.map(redis_key::dead_marker_type), ..self }
    }

    /// The copy's type is on its source's allowlist: the claim may take over a dead or filtered outcome that does
    /// not record that type yet (the event's first copy was dead-lettered or filtered under another type, perhaps
    /// a forged one).
    pub fn allowlisted(self) -> Self {
        Self { type_allowlisted: self.event_type.is_some(), ..self }
    }

    /// The types the outcome this claim leaves records (hex): those of the dead marker or filtered outcome it
    /// took over (this layout's, or the previous layout's markers), and this copy's.
    fn types_to_record(&self) -> Vec<String> {
        let taken_over = self.took_over.as_deref();
        let mut types = taken_over
            .and_then(|value| {
                let filtered = || match dedupe_layout::Outcome::decode(value) {
                    Some(dedupe_layout::Outcome::Filtered { types, .. }) => types,
                    _ => None,
                };
                redis_key::parse_dead_marker(value)
                    .map(|(_, types)| types)
                    .or_else(|| FilteredMarker::decode(value).map(|marker| marker.types))
                    .or_else(filtered)
            })
            .unwrap_or_default();
        if let Some(event_type) = &self.event_type {
            if !types.contains(event_type) {
                types.push(event_type.clone());
            }
        }
        types
    }

    /// The dedupe window this token's claim reads.
    pub fn window(&self) -> Duration {
        Duration::from_secs(self.window_s)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("redis")]
pub struct DedupeError(#[from] redis::RedisError);

impl DedupeError {
    /// The Redis error, to tell a refused configuration from an outage ([`hookline_common::redis_security::refusal`]).
    pub fn redis_error(&self) -> &redis::RedisError {
        &self.0
    }
}

/// Which script a call runs.
#[derive(Debug, Clone)]
enum Op {
    Claim,
    /// The outcome's value, `@` standing for Redis's time ([`Outcome`](dedupe_layout::Outcome)).
    Done(String),
    Release,
    Renew,
    /// The dead outcome's value, `@` standing for Redis's time.
    Dead(String),
    /// The outcome of [`Op::Done`] or [`Op::Dead`] when the claim is ours, with two keys ([`scripts`]); -1
    /// otherwise, and the caller runs the full one.
    MarkOurs(String),
    /// The previous layout's scripts on its key ([`legacy`]).
    Legacy(legacy::Op),
}

/// The scripts, loaded once per [`Dedupe`].
#[derive(Debug)]
struct Scripts {
    claim: Script,
    done: Script,
    release: Script,
    renew: Script,
    dead: Script,
    mark_ours: Script,
    legacy: legacy::Scripts,
}

#[derive(Clone)]
pub struct Dedupe {
    connection: RedisConnection,
    prefix: String,
    service: String,
    /// Until when (ms since the epoch) unscoped keys are read before claiming; `None`: never.
    unscoped_until_ms: Option<i64>,
    /// The previous layout's keys: until when they are written and read ([`legacy::Phase`]).
    legacy: Option<legacy::Phase>,
    lease_ms: u64,
    /// The global window, and the done TTL of the previous layout.
    window_s: u64,
    /// Windows of sources that have their own.
    source_windows: Arc<HashMap<String, u64>>,
    scripts: Arc<Scripts>,
    /// The claim and done scripts over many events, for records started together.
    many: Arc<together::ManyEvents>,
    /// The batching task's queue, on a single Redis.
    batcher: Option<tokio::sync::mpsc::UnboundedSender<batch::Call>>,
    /// The service's bucket count per slot ([`schedule`]).
    schedule: Arc<schedule::ScheduleCache>,
}

impl std::fmt::Debug for Dedupe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dedupe").field("prefix", &self.prefix).field("service", &self.service).finish_non_exhaustive()
    }
}

impl Dedupe {
    /// Connects to Redis, for the consumer service `service`, and checks that its user may run what dedupe runs
    /// ([`Self::check_permissions`]). Fails when Redis cannot be reached now (the caller retries) or refuses the
    /// configuration (the caller stops). Unscoped keys are not read until [`Self::honour_unscoped_keys`] says so,
    /// nor the previous layout's until [`Self::honour_legacy_layout`].
    pub async fn connect(config: &RedisConfig, service: &str) -> Result<Self, DedupeError> {
        let connection = RedisConnection::connect(config).await?;
        let (bucket_schedule, _) = schedule::read(&connection, &config.key_prefix, service).await?;
        let mut dedupe = Self {
            connection,
            prefix: config.key_prefix.clone(),
            service: service.to_owned(),
            unscoped_until_ms: None,
            legacy: None,
            lease_ms: config.claim_lease_ms,
            window_s: config.dedupe_ttl_s,
            source_windows: Arc::new(HashMap::new()),
            scripts: Arc::new(Scripts {
                claim: Script::new(&scripts::claim()),
                done: Script::new(&scripts::done()),
                release: Script::new(&scripts::release()),
                renew: Script::new(&scripts::renew()),
                dead: Script::new(&scripts::dead()),
                mark_ours: Script::new(&scripts::mark_ours()),
                legacy: legacy::Scripts::new(),
            }),
            many: Arc::new(together::ManyEvents::new()),
            batcher: None,
            schedule: schedule::ScheduleCache::new(bucket_schedule),
        };
        dedupe.refresh_schedule();
        if let RedisConnection::Single(connection) = &dedupe.connection {
            let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
            tokio::spawn(batch::batch_calls(receiver, connection.clone(), dedupe.clone()));
            dedupe.batcher = Some(sender);
        }
        dedupe.check_permissions().await?;
        Ok(dedupe)
    }

    /// Sources whose window is not the global one, with theirs (seconds).
    pub fn with_source_windows(self, windows: HashMap<String, u64>) -> Self {
        Self { source_windows: Arc::new(windows), ..self }
    }

    /// The window of `source`.
    pub fn window_s(&self, source: &str) -> u64 {
        self.source_windows.get(source).copied().unwrap_or(self.window_s)
    }

    /// Runs every command dedupe sends (PING, SCRIPT LOAD, EVALSHA, and in the scripts GET, SET, PEXPIRE, DEL,
    /// HGET, HSET, PTTL, TIME) on this service's start-check event, so a Redis user without one of them (NOPERM)
    /// is refused at start instead of pausing the consumer at its first event. Its outcome is read for a second.
    async fn check_permissions(&self) -> Result<(), DedupeError> {
        self.ping().await?;
        // `:` is in no source's name: no event of a source shares this hash.
        let probe = Self { batcher: None, legacy: None, ..self.clone() };
        let token = ClaimToken { window_s: 1, ..probe.token_for(EventHash::new(":start-check", ""), None) };
        for script in probe.scripts() {
            script.load_async(&mut probe.connection.clone()).await?;
        }
        let _: String = probe.invoke(&probe.invocation(&Op::Claim, &token)).await?;
        let _: i64 = probe.invoke(&probe.invocation(&Op::Renew, &token)).await?;
        let _: i64 = probe.invoke(&probe.invocation(&Op::Release, &token)).await?;
        let _: String = probe.invoke(&probe.invocation(&Op::Claim, &token)).await?;
        let dead = dead_outcome(&redis_key::dead_marker("start-check", &[]));
        let _: i64 = probe.invoke(&probe.invocation(&Op::Dead(dead), &token)).await?;
        let redrive = ClaimToken { redrive: true, ..token.clone() };
        let _: String = probe.invoke(&probe.invocation(&Op::Claim, &redrive)).await?;
        let _: i64 = probe.invoke(&probe.invocation(&Op::MarkOurs(PROCESSED.to_owned()), &token)).await?;
        let _: i64 = probe.invoke(&probe.invocation(&Op::Done(PROCESSED.to_owned()), &token)).await?;
        if probe.can_claim_together(&token) {
            // The same commands through the many-event scripts, which also loads them.
            let token = ClaimToken { value: Self::claim_value(), ..token };
            let _ = probe.claim_together(&[&token]).await?;
            let marker =
                DoneMarker { processed_at_ms: 0, handling_ms: 0, topic: String::new(), partition: 0, offset: 0 };
            let _ = probe.done_together(&[(&token, &marker)]).await?;
        }
        Ok(())
    }

    /// Every script, this layout's and the previous one's (loaded at start).
    fn scripts(&self) -> Vec<&Script> {
        let scripts = &self.scripts;
        let mut all =
            vec![&scripts.claim, &scripts.done, &scripts.release, &scripts.renew, &scripts.dead, &scripts.mark_ours];
        all.extend(scripts.legacy.all());
        all
    }

    /// The script `op` runs.
    fn script_of(&self, op: &Op) -> &Script {
        match op {
            Op::Claim => &self.scripts.claim,
            Op::Done(_) => &self.scripts.done,
            Op::Dead(_) => &self.scripts.dead,
            Op::MarkOurs(_) => &self.scripts.mark_ours,
            Op::Release => &self.scripts.release,
            Op::Renew => &self.scripts.renew,
            Op::Legacy(op) => self.scripts.legacy.of(op),
        }
    }

    /// The invocation of `op` for `token`.
    fn invocation<'a>(&'a self, op: &Op, token: &ClaimToken) -> ScriptInvocation<'a> {
        if let Op::Legacy(op) = op {
            return self.legacy_invocation(op, token);
        }
        let mut invocation = self.script_of(op).prepare_invoke();
        self.push_event(&mut invocation, op, token);
        invocation
    }

    /// Adds one event's keys and arguments for `op` ([`scripts`]) to an invocation.
    fn push_event(&self, invocation: &mut ScriptInvocation<'_>, op: &Op, token: &ClaimToken) {
        let now_s = u64::try_from(now_ms() / 1000).unwrap_or(0);
        // Its freshness is checked before a call is queued ([`Self::call`], the many-event calls): a schedule that
        // went stale in the milliseconds since is still the one every other consumer uses.
        let schedule = self.schedule.fresh().unwrap_or_else(|_| self.schedule.last());
        let buckets = || token.hash.window_buckets(&self.prefix, &self.service, now_s, token.window_s, &schedule);
        match op {
            Op::Claim => {
                let buckets = buckets();
                invocation.key(&token.key);
                for bucket in &buckets {
                    invocation.key(bucket);
                }
                let redrive = if token.redrive { "1" } else { "0" };
                let new_type = token.event_type.as_deref().filter(|_| token.type_allowlisted).unwrap_or("");
                invocation.arg(1 + buckets.len()).arg(&token.value).arg(self.lease_ms).arg(token.window_s);
                invocation.arg(&token.hash.field[..]).arg(redrive).arg(new_type);
            }
            Op::Done(outcome) | Op::Dead(outcome) => {
                let buckets = buckets();
                let written = token.hash.write_bucket(&self.prefix, &self.service, now_s, &schedule);
                invocation.key(&token.key).key(&written);
                for bucket in &buckets {
                    invocation.key(bucket);
                }
                invocation.arg(2 + buckets.len()).arg(&token.value).arg(token.window_s);
                invocation.arg(&token.hash.field[..]).arg(outcome);
                invocation.arg(dedupe_layout::bucket_ttl_ms(now_s, token.window_s, &schedule));
            }
            Op::MarkOurs(outcome) => {
                invocation.key(&token.key).key(token.hash.write_bucket(&self.prefix, &self.service, now_s, &schedule));
                invocation.arg(2).arg(&token.value).arg(&token.hash.field[..]).arg(outcome);
                invocation.arg(dedupe_layout::bucket_ttl_ms(now_s, token.window_s, &schedule));
            }
            Op::Release => {
                invocation.key(&token.key).arg(1).arg(&token.value);
            }
            Op::Renew => {
                invocation.key(&token.key).arg(1).arg(&token.value).arg(self.lease_ms);
            }
            Op::Legacy(_) => unreachable!("the previous layout's calls are one-key invocations of their own"),
        }
    }

    /// Runs one script call: through the batching task on a single Redis, directly on a cluster.
    async fn call<T: FromRedisValue>(&self, op: Op, token: &ClaimToken) -> RedisResult<T> {
        self.schedule.fresh().map_err(|error| error.0)?;
        let Some(batcher) = &self.batcher else { return self.invoke(&self.invocation(&op, token)).await };
        let (reply, receiver) = tokio::sync::oneshot::channel();
        let gone = || redis::RedisError::from(std::io::Error::other("dedupe batcher stopped"));
        batcher.send(batch::Call { op, token: token.clone(), reply }).map_err(|_| gone())?;
        let value = receiver.await.map_err(|_| gone())??;
        Ok(redis::from_redis_value(value)?)
    }

    /// Reads unscoped keys before claiming until `until_ms`: for a service that ran on the unscoped layout,
    /// until every key it wrote there has expired.
    pub fn honour_unscoped_keys(&mut self, until_ms: i64) {
        self.unscoped_until_ms = Some(until_ms);
    }

    /// Until when an upgraded service must read unscoped keys: its first scoped start, plus the longest such a
    /// key lives (a done marker's TTL; a claim's lease is shorter).
    pub fn unscoped_keys_expire_at(&self, history: ServiceHistory) -> i64 {
        history.since_ms.saturating_add(self.legacy_ttl_ms())
    }

    /// How long a key of the earlier layouts lives at most: their done TTL (the global window), or a lease.
    fn legacy_ttl_ms(&self) -> i64 {
        i64::try_from((self.window_s * 1000).max(self.lease_ms)).unwrap_or(i64::MAX)
    }

    /// A token for an event named by `hash`, its window that of `source` (`None`: the global one).
    fn token_for(&self, hash: EventHash, source: Option<&str>) -> ClaimToken {
        ClaimToken {
            key: hash.claim_key(&self.prefix, &self.service),
            hash,
            value: Self::claim_value(),
            window_s: source.map_or(self.window_s, |source| self.window_s(source)),
            legacy_key: None,
            legacy_writes: false,
            legacy_took_over: None,
            unscoped_key: None,
            redrive: false,
            event_type: None,
            type_allowlisted: false,
            took_over: None,
        }
    }

    /// A new claim token for this event: unique per processing attempt.
    pub fn token(&self, source: &str, event_id: &str) -> ClaimToken {
        let honour_unscoped = self.unscoped_until_ms.is_some_and(|until| now_ms() < until);
        let token = self.token_for(EventHash::new(source, event_id), Some(source));
        self.with_legacy(
            ClaimToken {
                unscoped_key: honour_unscoped.then(|| redis_key::dedupe_unscoped(&self.prefix, source, event_id)),
                ..token
            },
            || redis_key::dedupe(&self.prefix, &self.service, source, event_id),
        )
    }

    /// A claim token for a re-drive of this event's dead letter: it may take over the event's dead marker.
    pub fn redrive_token(&self, source: &str, event_id: &str) -> ClaimToken {
        ClaimToken { redrive: true, ..self.token(source, event_id) }
    }

    /// A claim token for one re-processing run of this event: the run processes it once, whatever the event's
    /// own outcome says. Its own name (`:` is in no source's name, so no event shares it).
    pub fn reprocess_token(&self, run_id: &str, source: &str, event_id: &str) -> ClaimToken {
        let hash = EventHash::new(&format!("reprocess={run_id}:{source}"), event_id);
        self.with_legacy(self.token_for(hash, Some(source)), || {
            redis_key::reprocess(&self.prefix, &self.service, run_id, source, event_id)
        })
    }

    fn claim_value() -> String {
        format!("{DEDUPE_CLAIM_PREFIX}{}", uuid::Uuid::new_v4())
    }

    /// Tries to claim with `token`. Safe to call again with the same token after an error.
    pub async fn claim(&self, token: &ClaimToken) -> Result<Claim, DedupeError> {
        if let Some(unscoped_key) = &token.unscoped_key {
            // A separate command, not part of the claim script: the two keys may live on different cluster
            // nodes. The old layout is only ever read, so nothing can appear in it between this read and the
            // claim, except from a consumer of the old build still running (upgrade by stopping them first).
            let mut connection = self.connection.clone();
            let unscoped: Option<String> = redis::cmd("GET").arg(unscoped_key).query_async(&mut connection).await?;
            match unscoped.as_deref() {
                Some(value) if redis_key::is_done(value) => return Ok(Claim::AlreadyDone),
                Some(value) if value.starts_with(DEDUPE_CLAIM_PREFIX) => return Ok(Claim::HeldByOther),
                _ => {}
            }
        }
        let legacy_over = match self.claim_legacy(token).await? {
            legacy::Claimed::Free { took_over } => took_over,
            legacy::Claimed::Not(claim) => return Ok(claim),
        };
        let reply: Result<String, _> = self.call(Op::Claim, token).await;
        let claim = match reply {
            Ok(reply) => Claim::from_reply(token, &reply),
            Err(error) => return Err(error.into()),
        };
        match claim {
            Claim::Acquired(token) => {
                let took_over = token.took_over.clone().or_else(|| legacy_over.clone());
                let legacy_took_over = legacy_over.filter(|_| token.legacy_writes);
                Ok(Claim::Acquired(ClaimToken { took_over, legacy_took_over, ..token }))
            }
            other => {
                // Not ours in this layout: give the previous layout's key back as it was.
                let token = ClaimToken { legacy_took_over: legacy_over, ..token.clone() };
                self.release_legacy(&token).await?;
                Ok(other)
            }
        }
    }

    /// Records the event as dead-lettered (as DLQ entry `entry_id`) for its window, in place of our claim: a
    /// re-send is then skipped, and only a re-drive of the dead letter, or a copy of an allowlisted type not yet
    /// tried, claims it. The marker records this copy's type and those of the marker the claim took over. Safe to
    /// call again.
    pub async fn mark_dead(&self, token: &ClaimToken, entry_id: &str) -> Result<(), DedupeError> {
        let marker = redis_key::dead_marker(entry_id, &token.types_to_record());
        let _ = self.mark(Op::Dead(dead_outcome(&marker)), token).await?;
        self.mark_dead_legacy(token, marker).await
    }

    /// Records the event as processed for its window. Returns false when our claim had expired (another consumer
    /// may have processed the event too: the handler ran longer than the lease). `marker`'s details are not
    /// kept (docs/dedupe.md), except in the previous layout's key while it is written.
    pub async fn mark_done(&self, token: &ClaimToken, marker: &DoneMarker) -> Result<bool, DedupeError> {
        let still_ours = self.mark(Op::Done(PROCESSED.to_owned()), token).await?;
        let legacy_ours = self.mark_done_legacy(token, || marker.encode()).await?;
        Ok(still_ours == 1 && legacy_ours)
    }

    /// Records the event as skipped by a route's filter for its window, in place of our claim: the filtered
    /// outcome is a done one, so every later copy is a duplicate (only a re-processing run, with its own token,
    /// runs it), except that, as a dead outcome, it records this copy's type and those of the outcome the claim
    /// took over, and a copy of an allowlisted type it does not record claims the event over it (finding P8). The
    /// same script as [`Self::mark_done`], with the same answer. `marker`'s types are not read: the claim's are.
    pub async fn mark_filtered(&self, token: &ClaimToken, marker: &FilteredMarker) -> Result<bool, DedupeError> {
        let types = token.types_to_record();
        let outcome = format!("{}@:{}", dedupe_layout::FILTERED, dedupe_layout::filtered_value(&marker.filter, &types));
        let still_ours = self.mark(Op::Done(outcome), token).await?;
        let legacy_ours = self.mark_done_legacy(token, || FilteredMarker { types, ..marker.clone() }.encode()).await?;
        Ok(still_ours == 1 && legacy_ours)
    }

    /// Runs `full` ([`Op::Done`] or [`Op::Dead`]) as its two-key form first ([`Op::MarkOurs`]), which is all it
    /// takes while the claim is ours; the full script only when it is not.
    async fn mark(&self, full: Op, token: &ClaimToken) -> RedisResult<i64> {
        let (Op::Done(outcome) | Op::Dead(outcome)) = &full else { return self.call(full, token).await };
        let ours: i64 = self.call(Op::MarkOurs(outcome.clone()), token).await?;
        if ours == 1 {
            return Ok(1);
        }
        self.call(full, token).await
    }

    /// Gives the claim up so the event can be processed again (a retry, a replay).
    pub async fn release(&self, token: &ClaimToken) -> Result<(), DedupeError> {
        let _: i64 = self.call(Op::Release, token).await?;
        self.release_legacy(token).await
    }

    /// Extends our claim's lease by a full lease from now, if the key still holds it. Returns whether it did.
    pub async fn renew(&self, token: &ClaimToken) -> Result<bool, DedupeError> {
        let renewed: i64 = self.call(Op::Renew, token).await?;
        let legacy_renewed = self.renew_legacy(token).await?;
        Ok(renewed == 1 && legacy_renewed)
    }

    /// How long a claim lives without renewal.
    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }

    /// A PING, for readiness.
    pub async fn ping(&self) -> Result<(), DedupeError> {
        let ping = redis::cmd("PING");
        let _: String = ping.query_async(&mut self.connection.clone()).await?;
        Ok(())
    }

    /// Runs a script (EVALSHA, loading it on NOSCRIPT).
    async fn invoke<T: FromRedisValue>(&self, invocation: &ScriptInvocation<'_>) -> RedisResult<T> {
        invocation.invoke_async(&mut self.connection.clone()).await
    }
}

/// The processed outcome: Redis's time when it is written.
const PROCESSED: &str = "@";

/// The dead outcome for `marker`: Redis's time, then the marker.
fn dead_outcome(marker: &str) -> String {
    format!("{}@:{marker}", dedupe_layout::DEAD)
}

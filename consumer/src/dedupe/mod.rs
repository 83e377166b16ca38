//! Two-phase dedupe in Redis, so that a duplicate is processed at most once and a crash never loses an event.
//!
//! The naive "SET NX, then process" loses an event for good when processing fails or the process dies after the
//! SET. Instead, per event key `<prefix>:svc=<service>:<source>:<event id>` (scoped to the consumer service, so
//! that services sharing a Redis never see each other's claims or done markers):
//! 1. claim: `SET key claim:<token> NX PX <lease>` — a short lease, so a crashed consumer's claim expires;
//! 2. done: after success (or once a route's filter skipped the event: the filtered marker, a done marker naming
//!    the filter, [`FilteredMarker`]), the key becomes the done marker with the long TTL; the marker carries when the event
//!    was processed, how long the handling took and the record's position ([`DoneMarker`]), in that same `SET`,
//!    so the replayer's `lookup` can say where an event went at no cost on the hot path. Every script reads both
//!    forms of done (the plain `done` of earlier builds and the detailed `done:...`);
//! 3. release: after a retryable failure, delete the key only if it still holds our claim (compare-and-delete),
//!    so the retry is not mistaken for a duplicate;
//! 4. dead: after the event is dead-lettered, the key becomes `dead:<DLQ entry id>` with the long TTL: a re-send
//!    of the same event (a provider's retry, or a captured delivery re-sent with another unsigned type header) is
//!    skipped rather than dead-lettered again, so one delivery cannot grow the DLQ. A re-drive by the replayer
//!    (an authenticated record naming the DLQ entry it re-drives) claims over it; so does, once per type, a copy
//!    whose event type is on its source's allowlist and is not among the types the marker records
//!    (`dead:<entry>;types=,<hex>,...,`, [`redis_key::dead_marker`]). A copy with a forged type dead-lettered
//!    first then does not lose the event: the provider's genuine delivery still claims it, and at most one copy per
//!    allowlisted type can be dead-lettered per TTL, so the DLQ stays bounded. Released after such a takeover (a
//!    retryable failure), the key gets its dead marker back instead of being deleted, so the record stays.
//!
//! A key held by another owner is not a duplicate (a rebalance race): the caller waits and tries again.
//! A Redis error or timeout is never read as "not a duplicate": the caller fails closed and retries. Because
//! claiming is one script that also accepts our own token, re-sending a claim whose reply was lost is safe.
//!
//! Records started together are claimed by one script call and marked done by another ([`together`]): the
//! one-key rule applied to each key, answered key by key.
//!
//! Other round trips are coalesced on a single Redis: every script call (claim, done, release, renew) of any record goes
//! through one batching task, which sends whatever calls are waiting as one pipeline (up to [`MAX_BATCH`], a few
//! pipelines in flight at once) and hands each caller its own reply. Each call is still the same single-key
//! script with the same reply, so the rules above hold call by call; a failed pipeline fails every call in it,
//! and each caller retries on its own. On a Redis Cluster, calls go one by one to their slot's node.
//!
//! Upgrading from the unscoped layout (`<prefix>:<source>:<event id>`, before services had names): a service
//! that ran on it ([`ServiceHistory`], decided once at its first scoped start) reads the unscoped key before
//! claiming, for as long as such a key can live, and takes its `done` as a duplicate and its claim as held by
//! another consumer. A service that started on a scoped build never reads unscoped keys: they are other
//! services' work.

use std::time::Duration;

use hookline_common::{
    config::RedisConfig,
    redis_connection::RedisConnection,
    wire::redis_key::{self, DEDUPE_CLAIM_PREFIX, DEDUPE_DONE, DoneMarker, FilteredMarker},
};
use redis::{FromRedisValue, RedisResult, Script, ScriptInvocation, aio::ConnectionManager};

mod together;

/// The outcome of trying to claim an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// We hold the claim: process the event, then [`Dedupe::mark_done`] or [`Dedupe::release`].
    Acquired(ClaimToken),
    /// The event was processed before: skip it.
    AlreadyDone,
    /// Another consumer holds a live claim: not a duplicate; wait and claim again.
    HeldByOther,
    /// The event was dead-lettered (within the done TTL) and this is not a re-drive: skip it; its DLQ entry is
    /// the way to run it again.
    DeadLettered,
}

impl Claim {
    /// What [`CLAIM_SCRIPT`]'s reply for `token` means.
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

/// Proof of a claim: the key and the unique value we wrote into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimToken {
    key: String,
    value: String,
    /// The event's key in the unscoped layout, read before claiming while the service honours that layout.
    unscoped_key: Option<String>,
    /// A re-drive of a dead letter: the claim may take over a `dead:` marker.
    redrive: bool,
    /// The copy's event type as a dead marker records it ([`redis_key::dead_marker_type`]), if it has one.
    event_type: Option<String>,
    /// Whether the copy's type is on its source's allowlist: it may then take over a dead marker that does not
    /// record that type yet.
    type_allowlisted: bool,
    /// The dead marker this claim took over, if it did: the types it records are kept in the next marker, and a
    /// release puts it back.
    took_over: Option<String>,
}

impl ClaimToken {
    /// The token for a copy of type `event_type`: a dead marker it leaves records the type.
    pub fn recording_type(self, event_type: Option<&str>) -> Self {
        Self { event_type: event_type.map(redis_key::dead_marker_type), ..self }
    }

    /// The copy's type is on its source's allowlist: the claim may take over a dead or filtered marker that does
    /// not record that type yet (the event's first copy was dead-lettered or filtered under another type, perhaps a
    /// forged one).
    pub fn allowlisted(self) -> Self {
        Self { type_allowlisted: self.event_type.is_some(), ..self }
    }

    /// The types the marker this claim leaves records (hex): those of the dead or filtered marker it took over,
    /// and this copy's.
    fn types_to_record(&self) -> Vec<String> {
        let taken_over = self.took_over.as_deref();
        let mut types = taken_over
            .and_then(redis_key::parse_dead_marker)
            .map(|(_, types)| types)
            .or_else(|| taken_over.and_then(FilteredMarker::decode).map(|marker| marker.types))
            .unwrap_or_default();
        if let Some(event_type) = &self.event_type {
            if !types.contains(event_type) {
                types.push(event_type.clone());
            }
        }
        types
    }
}

/// What a service's first start on a scoped build found, recorded once in `<prefix>:svc=<service>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceHistory {
    /// The service's consumer group had committed offsets: it ran on the unscoped layout before.
    pub upgraded: bool,
    /// When it first started on a scoped build, ms since the epoch.
    pub since_ms: i64,
}

impl ServiceHistory {
    fn encode(self) -> String {
        let kind = if self.upgraded { redis_key::SERVICE_UPGRADED } else { redis_key::SERVICE_NEW };
        format!("{kind}:{}", self.since_ms)
    }

    fn decode(value: &str) -> Option<Self> {
        let (kind, since) = value.split_once(':')?;
        let upgraded = match kind {
            redis_key::SERVICE_UPGRADED => true,
            redis_key::SERVICE_NEW => false,
            _ => return None,
        };
        Some(Self { upgraded, since_ms: since.parse().ok()? })
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

/// Returns `acquired`, `over:<the dead marker taken over>`, `done`, `dead` or `held`. `SET NX` first; if the key
/// exists, our own value (a re-sent claim whose first reply was lost) counts as acquired, and a key that expired in
/// between is claimed anew. A done marker is the plain `ARGV[3]` (`done`, earlier builds) or `done:<details>`. A
/// `dead:` marker is taken over by a re-drive (`ARGV[4]` = `1`) or by a copy of an allowlisted type the marker
/// does not record (`ARGV[5]`, its hex; empty when the type is not allowlisted), and answers `dead` to anything
/// else. A filtered marker that records types (`done:filtered:...;types=,...,`) is taken over the same way by a
/// copy of an allowlisted type it does not record, and is `done` to anything else. A re-sent takeover whose first reply was lost finds its own claim: `acquired`, with the marker lost to
/// it (the next dead marker then records this copy's type alone).
pub const CLAIM_SCRIPT: &str = r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 'acquired' end
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then return 'acquired' end
if current ~= false and string.sub(current, 1, 14) == 'done:filtered:' and ARGV[5] ~= nil and ARGV[5] ~= '' then
  local types = string.find(current, ';types=,', 1, true)
  if types and not string.find(current, ',' .. ARGV[5] .. ',', types, true) then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return 'over:' .. current
  end
end
if current == ARGV[3] or (current ~= false and string.sub(current, 1, 5) == 'done:') then return 'done' end
if current == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 'acquired'
end
if string.sub(current, 1, 5) ~= 'dead:' then return 'held' end
local new_type = ARGV[5] ~= nil and ARGV[5] ~= '' and not string.find(current, ',' .. ARGV[5] .. ',', 1, true)
if ARGV[4] == '1' or new_type then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 'over:' .. current
end
return 'dead'
";

/// Marks the key done (`ARGV[2]`: the detailed marker, or the plain `done`) with the long TTL whatever it holds,
/// and says whether our claim was still there (or the key already done, in either form: a re-sent mark whose first
/// reply was lost).
pub const DONE_SCRIPT: &str = r"
local current = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
if current == ARGV[1] or current == ARGV[2] or current == 'done' then return 1 end
if current ~= false and string.sub(current, 1, 5) == 'done:' then return 1 end
return 0
";

/// Makes the key the dead marker `ARGV[2]` with the long TTL if it still holds our claim (or nothing: the lease
/// lapsed while the dead letter was produced). Never overwrites a done marker or another consumer's claim.
const DEAD_SCRIPT: &str = r"
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] or current == false or string.sub(current, 1, 5) == 'dead:' then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
";

/// Deletes the key only if it still holds our claim; a claim that took over a dead marker puts the marker
/// (`ARGV[2]`, empty otherwise) back with the long TTL (`ARGV[3]`) instead.
const RELEASE_SCRIPT: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] ~= '' then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return redis.call('DEL', KEYS[1])
";

/// Extends the lease of our claim; 0 when the key no longer holds it (done, released, expired, or taken over).
const RENEW_SCRIPT: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
";

/// Scripts a pipeline loads before its calls.
const SCRIPTS: usize = 5;

/// Script calls sent in one pipeline, at most.
pub const MAX_BATCH: usize = 256;
/// Pipelines in flight at once; while they are, new calls gather into the next one.
const BATCHES_IN_FLIGHT: usize = 4;

/// Which script a batched call runs.
#[derive(Debug, Clone)]
enum Op {
    Claim,
    /// The done marker's value ([`DoneMarker::encode`]).
    Done(String),
    Release,
    Renew,
    /// The dead marker's value ([`redis_key::dead_marker`]).
    Dead(String),
}

/// One script call waiting for the batching task.
#[derive(Debug)]
struct Call {
    op: Op,
    token: ClaimToken,
    reply: tokio::sync::oneshot::Sender<RedisResult<redis::Value>>,
}

#[derive(Clone)]
pub struct Dedupe {
    connection: RedisConnection,
    prefix: String,
    service: String,
    /// Until when (ms since the epoch) unscoped keys are read before claiming; `None`: never.
    unscoped_until_ms: Option<i64>,
    lease_ms: u64,
    done_ttl_ms: u64,
    claim: std::sync::Arc<Script>,
    done: std::sync::Arc<Script>,
    release: std::sync::Arc<Script>,
    renew: std::sync::Arc<Script>,
    dead: std::sync::Arc<Script>,
    /// The claim and done scripts over many keys, for records started together.
    many: std::sync::Arc<together::ManyKeys>,
    /// The batching task's queue, on a single Redis.
    batcher: Option<tokio::sync::mpsc::UnboundedSender<Call>>,
}

impl std::fmt::Debug for Dedupe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dedupe").field("prefix", &self.prefix).field("service", &self.service).finish_non_exhaustive()
    }
}

impl Dedupe {
    /// Connects to Redis, for the consumer service `service`, and checks that its user may run what dedupe runs
    /// ([`Self::check_permissions`]). Fails when Redis cannot be reached now (the caller retries) or refuses the
    /// configuration (the caller stops). Unscoped keys are not read until [`Self::honour_unscoped_keys`] says so.
    pub async fn connect(config: &RedisConfig, service: &str) -> Result<Self, DedupeError> {
        let connection = RedisConnection::connect(config).await?;
        let mut dedupe = Self {
            connection,
            prefix: config.key_prefix.clone(),
            service: service.to_owned(),
            unscoped_until_ms: None,
            lease_ms: config.claim_lease_ms,
            done_ttl_ms: config.dedupe_ttl_s * 1000,
            claim: std::sync::Arc::new(Script::new(CLAIM_SCRIPT)),
            done: std::sync::Arc::new(Script::new(DONE_SCRIPT)),
            release: std::sync::Arc::new(Script::new(RELEASE_SCRIPT)),
            renew: std::sync::Arc::new(Script::new(RENEW_SCRIPT)),
            dead: std::sync::Arc::new(Script::new(DEAD_SCRIPT)),
            many: std::sync::Arc::new(together::ManyKeys::new()),
            batcher: None,
        };
        if let RedisConnection::Single(connection) = &dedupe.connection {
            let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
            tokio::spawn(batch_calls(receiver, connection.clone(), dedupe.clone()));
            dedupe.batcher = Some(sender);
        }
        dedupe.check_permissions().await?;
        Ok(dedupe)
    }

    /// Runs every command dedupe sends (PING, SCRIPT LOAD, EVALSHA, and in the scripts GET, SET, PEXPIRE, DEL) on
    /// this service's start-check key, so a Redis user without one of them (NOPERM) is refused at start instead
    /// of pausing the consumer at its first event. Leaves the key `done` for a second.
    async fn check_permissions(&self) -> Result<(), DedupeError> {
        self.ping().await?;
        let token = ClaimToken {
            key: redis_key::start_check(&self.prefix, &self.service),
            value: Self::claim_value(),
            unscoped_key: None,
            redrive: false,
            event_type: None,
            type_allowlisted: false,
            took_over: None,
        };
        let probe = Self { done_ttl_ms: 1_000, batcher: None, ..self.clone() };
        for script in probe.scripts() {
            script.load_async(&mut probe.connection.clone()).await?;
        }
        let _: String = probe.invoke(&mut probe.invocation(&Op::Claim, &token)).await?;
        let _: i64 = probe.invoke(&mut probe.invocation(&Op::Renew, &token)).await?;
        let _: i64 = probe.invoke(&mut probe.invocation(&Op::Release, &token)).await?;
        let _: String = probe.invoke(&mut probe.invocation(&Op::Claim, &token)).await?;
        let marker = redis_key::dead_marker("start-check", &[]);
        let _: i64 = probe.invoke(&mut probe.invocation(&Op::Dead(marker), &token)).await?;
        let _: String =
            probe.invoke(&mut probe.invocation(&Op::Claim, &ClaimToken { redrive: true, ..token.clone() })).await?;
        let _: i64 = probe.invoke(&mut probe.invocation(&Op::Done(DEDUPE_DONE.to_owned()), &token)).await?;
        if probe.can_claim_together(&token) {
            // The same commands through the many-key scripts, which also loads them.
            let token = ClaimToken { value: Self::claim_value(), ..token };
            let _ = probe.claim_together(&[&token]).await?;
            let marker =
                DoneMarker { processed_at_ms: 0, handling_ms: 0, topic: String::new(), partition: 0, offset: 0 };
            let _ = probe.done_together(&[(&token, &marker)]).await?;
        }
        Ok(())
    }

    /// Every script, in the order a pipeline loads them.
    fn scripts(&self) -> [&Script; SCRIPTS] {
        [&self.claim, &self.done, &self.release, &self.renew, &self.dead]
    }

    /// The invocation of `op` for `token`, with this dedupe's lease and TTL.
    fn invocation<'a>(&'a self, op: &Op, token: &'a ClaimToken) -> ScriptInvocation<'a> {
        match op {
            Op::Claim => {
                let mut invocation = self.claim.key(&token.key);
                let redrive = if token.redrive { "1" } else { "0" };
                let new_type = token.event_type.as_deref().filter(|_| token.type_allowlisted).unwrap_or("");
                invocation.arg(&token.value).arg(self.lease_ms).arg(DEDUPE_DONE).arg(redrive).arg(new_type);
                invocation
            }
            Op::Dead(marker) => {
                let mut invocation = self.dead.key(&token.key);
                invocation.arg(&token.value).arg(marker).arg(self.done_ttl_ms);
                invocation
            }
            Op::Done(marker) => {
                let mut invocation = self.done.key(&token.key);
                invocation.arg(&token.value).arg(marker).arg(self.done_ttl_ms);
                invocation
            }
            Op::Release => {
                let mut invocation = self.release.key(&token.key);
                invocation.arg(&token.value).arg(token.took_over.as_deref().unwrap_or("")).arg(self.done_ttl_ms);
                invocation
            }
            Op::Renew => {
                let mut invocation = self.renew.key(&token.key);
                invocation.arg(&token.value).arg(self.lease_ms);
                invocation
            }
        }
    }

    /// Runs one script call: through the batching task on a single Redis, directly on a cluster.
    async fn call<T: FromRedisValue>(&self, op: Op, token: &ClaimToken) -> RedisResult<T> {
        let Some(batcher) = &self.batcher else { return self.invoke(&mut self.invocation(&op, token)).await };
        let (reply, receiver) = tokio::sync::oneshot::channel();
        let gone = || redis::RedisError::from(std::io::Error::other("dedupe batcher stopped"));
        batcher.send(Call { op, token: token.clone(), reply }).map_err(|_| gone())?;
        let value = receiver.await.map_err(|_| gone())??;
        Ok(redis::from_redis_value(value)?)
    }

    /// The service's history as recorded in Redis; `None` before its first scoped start.
    pub async fn recorded_history(&self) -> Result<Option<ServiceHistory>, DedupeError> {
        let key = redis_key::service(&self.prefix, &self.service);
        let recorded: Option<String> = redis::cmd("GET").arg(&key).query_async(&mut self.connection.clone()).await?;
        Ok(recorded.as_deref().and_then(ServiceHistory::decode))
    }

    /// Records the service's history at its first scoped start (`upgraded`: its consumer group had committed
    /// offsets), unless another member recorded it first; returns what is recorded.
    pub async fn record_history(&self, upgraded: bool) -> Result<ServiceHistory, DedupeError> {
        let key = redis_key::service(&self.prefix, &self.service);
        let history = ServiceHistory { upgraded, since_ms: hookline_common::wire::now_ms() };
        let mut connection = self.connection.clone();
        let _: Option<String> =
            redis::cmd("SET").arg(&key).arg(history.encode()).arg("NX").query_async(&mut connection).await?;
        Ok(self.recorded_history().await?.unwrap_or(history))
    }

    /// Reads unscoped keys before claiming until `until_ms`: for a service that ran on the unscoped layout,
    /// until every key it wrote there has expired.
    pub fn honour_unscoped_keys(&mut self, until_ms: i64) {
        self.unscoped_until_ms = Some(until_ms);
    }

    /// Until when an upgraded service must read unscoped keys: its first scoped start, plus the longest such a
    /// key lives (a done marker's TTL; a claim's lease is shorter).
    pub fn unscoped_keys_expire_at(&self, history: ServiceHistory) -> i64 {
        history.since_ms.saturating_add(i64::try_from(self.done_ttl_ms.max(self.lease_ms)).unwrap_or(i64::MAX))
    }

    /// A new claim token for this event: unique per processing attempt.
    pub fn token(&self, source: &str, event_id: &str) -> ClaimToken {
        let honour_unscoped = self.unscoped_until_ms.is_some_and(|until| hookline_common::wire::now_ms() < until);
        ClaimToken {
            key: redis_key::dedupe(&self.prefix, &self.service, source, event_id),
            value: Self::claim_value(),
            unscoped_key: honour_unscoped.then(|| redis_key::dedupe_unscoped(&self.prefix, source, event_id)),
            redrive: false,
            event_type: None,
            type_allowlisted: false,
            took_over: None,
        }
    }

    /// A claim token for a re-drive of this event's dead letter: it may take over the event's dead marker.
    pub fn redrive_token(&self, source: &str, event_id: &str) -> ClaimToken {
        ClaimToken { redrive: true, ..self.token(source, event_id) }
    }

    /// A claim token for one re-processing run of this event: the run processes it once, whatever the event's
    /// own key says.
    pub fn reprocess_token(&self, run_id: &str, source: &str, event_id: &str) -> ClaimToken {
        ClaimToken {
            key: redis_key::reprocess(&self.prefix, &self.service, run_id, source, event_id),
            value: Self::claim_value(),
            unscoped_key: None,
            redrive: false,
            event_type: None,
            type_allowlisted: false,
            took_over: None,
        }
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
        let reply: String = self.call(Op::Claim, token).await?;
        Ok(Claim::from_reply(token, &reply))
    }

    /// Records the event as dead-lettered (as DLQ entry `entry_id`) for the done TTL, in place of our claim: a
    /// re-send is then skipped, and only a re-drive of the dead letter, or a copy of an allowlisted type not yet
    /// tried, claims it. The marker records this copy's type and those of the marker the claim took over. Safe to
    /// call again.
    pub async fn mark_dead(&self, token: &ClaimToken, entry_id: &str) -> Result<(), DedupeError> {
        let types = token.types_to_record();
        let _: i64 = self.call(Op::Dead(redis_key::dead_marker(entry_id, &types)), token).await?;
        Ok(())
    }

    /// Records the event as processed for the dedupe TTL, with what `marker` says about it. Returns false when our
    /// claim had expired (another consumer may have processed the event too: the handler ran longer than the lease).
    pub async fn mark_done(&self, token: &ClaimToken, marker: &DoneMarker) -> Result<bool, DedupeError> {
        let still_ours: i64 = self.call(Op::Done(marker.encode()), token).await?;
        Ok(still_ours == 1)
    }

    /// Records the event as skipped by a route's filter for the dedupe TTL, in place of our claim: the filtered
    /// marker is a done marker, so every later copy is a duplicate (only a re-processing run, on its own key, runs
    /// it). The same script as [`Self::mark_done`], with the same answer.
    /// The marker records this copy's type and those of the marker the claim took over, as a dead marker does: a
    /// copy of an allowlisted type it does not record claims the event over.
    pub async fn mark_filtered(&self, token: &ClaimToken, marker: &FilteredMarker) -> Result<bool, DedupeError> {
        let marker = FilteredMarker { types: token.types_to_record(), ..marker.clone() };
        let still_ours: i64 = self.call(Op::Done(marker.encode()), token).await?;
        Ok(still_ours == 1)
    }

    /// Gives the claim up so the event can be processed again (a retry, a replay).
    pub async fn release(&self, token: &ClaimToken) -> Result<(), DedupeError> {
        let _: i64 = self.call(Op::Release, token).await?;
        Ok(())
    }

    /// Extends our claim's lease by a full lease from now, if the key still holds it. Returns whether it did.
    pub async fn renew(&self, token: &ClaimToken) -> Result<bool, DedupeError> {
        let renewed: i64 = self.call(Op::Renew, token).await?;
        Ok(renewed == 1)
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
    async fn invoke<T: FromRedisValue>(&self, invocation: &mut ScriptInvocation<'_>) -> RedisResult<T> {
        invocation.invoke_async(&mut self.connection.clone()).await
    }
}

/// The batching task: takes every call waiting, sends them as one pipeline, answers each. Ends when every
/// [`Dedupe`] clone is gone. The pipeline starts by loading the scripts, so a Redis that restarted (and lost its
/// script cache) needs no special case.
async fn batch_calls(
    mut receiver: tokio::sync::mpsc::UnboundedReceiver<Call>,
    connection: ConnectionManager,
    dedupe: Dedupe,
) {
    // The task's own clone must not keep the queue open.
    let dedupe = Dedupe { batcher: None, ..dedupe };
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(BATCHES_IN_FLIGHT));
    while let Some(first) = receiver.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        // Calls that arrived while waiting for a slot join this batch.
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match receiver.try_recv() {
                Ok(call) => batch.push(call),
                Err(_) => break,
            }
        }
        let (mut connection, dedupe) = (connection.clone(), dedupe.clone());
        tokio::spawn(async move {
            let mut pipeline = redis::pipe();
            pipeline.ignore_errors();
            for script in dedupe.scripts() {
                pipeline.load_script(script);
            }
            for call in &batch {
                pipeline.invoke_script(&dedupe.invocation(&call.op, &call.token));
            }
            let result: RedisResult<Vec<redis::Value>> = pipeline.query_async(&mut connection).await;
            match result {
                Ok(values) if values.len() == batch.len() + SCRIPTS => {
                    for (call, value) in batch.into_iter().zip(values.into_iter().skip(SCRIPTS)) {
                        let _ = call.reply.send(value.extract_error());
                    }
                }
                Ok(_) => {
                    let error = redis::RedisError::from(std::io::Error::other("pipeline reply count mismatch"));
                    batch.into_iter().for_each(|call| drop(call.reply.send(Err(error.clone()))));
                }
                Err(error) => batch.into_iter().for_each(|call| drop(call.reply.send(Err(error.clone())))),
            }
            drop(slot);
        });
    }
}

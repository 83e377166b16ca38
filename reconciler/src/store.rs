//! The reconciler's Redis state, laid out in [`hookline_common::wire::redis_key`]: the index of accepted events,
//! the ledger of what was done for each missed event, the per-source run lock and the first-run marker.
//!
//! Every command touches one key, so the same code runs on a single Redis (pipelined) and on a Redis Cluster
//! (one command at a time: a pipeline there would have to stay within one hash slot).

use std::time::Duration;

use hookline_common::{config::RedisConfig, redis_connection::RedisConnection, wire::redis_key};
use redis::{Cmd, FromRedisValue, Pipeline, RedisResult, Script, aio::ConnectionLike};

/// Commands per pipeline on a single Redis.
const PIPELINE_CHUNK: usize = 500;

/// Moves a ledger entry to `requesting`/`produced`-in-progress only from "found, nothing done" (`missed:`), or
/// (when the operator asks to try again) from `requested:`; never from `requesting:` (an uncertain request) or
/// `produced:`. Returns 1 when this run may act.
const CLAIM_ACTION: &str = r"
local current = redis.call('GET', KEYS[1])
if current == false or string.sub(current, 1, 7) == 'missed:'
   or (ARGV[3] == '1' and string.sub(current, 1, 10) == 'requested:') then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
  return 1
end
return 0
";

/// Lowers `index-since` to ARGV[1] (or sets it): the index covers everything accepted from then on.
const LOWER_INDEX_SINCE: &str = r"
local current = tonumber(redis.call('GET', KEYS[1]))
if current == nil or tonumber(ARGV[1]) < current then redis.call('SET', KEYS[1], ARGV[1]) end
return 1
";

/// Deletes the lock only if it still holds our token.
const UNLOCK: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
";

#[derive(Clone)]
pub struct Store {
    connection: RedisConnection,
    prefix: String,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

/// What the ledger says was done for one missed event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Found missing; nothing done yet (a dry run, or the provider was still retrying it).
    Missed,
    /// A request to the provider is under way, or its outcome was uncertain: never sent again automatically.
    Requesting,
    /// The provider accepted our redelivery/replay request.
    Requested,
    /// Fetched from the API and acknowledged by Kafka.
    Produced,
}

impl Action {
    fn parse(value: &str) -> Option<Self> {
        let (state, _) = value.split_once(':')?;
        Some(match state {
            "missed" => Self::Missed,
            "requesting" => Self::Requesting,
            "requested" => Self::Requested,
            "produced" => Self::Produced,
            _ => return None,
        })
    }

    pub fn value(&self, at_ms: i64) -> String {
        let state = match self {
            Self::Missed => "missed",
            Self::Requesting => "requesting",
            Self::Requested => "requested",
            Self::Produced => "produced",
        };
        format!("{state}:{at_ms}")
    }
}

impl Store {
    pub async fn connect(config: &RedisConfig) -> RedisResult<Self> {
        let connection = RedisConnection::connect(config).await?;
        Ok(Self { connection, prefix: config.key_prefix.clone() })
    }

    pub fn accepted_key(&self, source: &str, id: &str) -> String {
        redis_key::accepted(&self.prefix, source, id)
    }

    fn action_key(&self, source: &str, id: &str) -> String {
        redis_key::reconcile_action(&self.prefix, source, id)
    }

    async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> RedisResult<T> {
        cmd.query_async(&mut self.connection.clone()).await
    }

    /// Runs single-key commands: pipelined on a single Redis, one by one on a cluster.
    async fn many<T: FromRedisValue>(&self, commands: Vec<Cmd>) -> RedisResult<Vec<T>> {
        let mut replies = Vec::with_capacity(commands.len());
        match &self.connection {
            RedisConnection::Single(connection) => {
                for chunk in commands.chunks(PIPELINE_CHUNK) {
                    let mut pipeline = Pipeline::with_capacity(chunk.len());
                    for cmd in chunk {
                        pipeline.add_command(cmd.clone());
                    }
                    let mut connection = connection.clone();
                    let values: Vec<redis::Value> = connection_query(&pipeline, &mut connection).await?;
                    for value in values {
                        replies.push(T::from_redis_value(value)?);
                    }
                }
            }
            RedisConnection::Cluster(connection) => {
                for cmd in &commands {
                    replies.push(cmd.query_async(&mut connection.clone()).await?);
                }
            }
        }
        Ok(replies)
    }

    /// Records accepted events: `(source, id, received_at_ms, ttl_s)`.
    pub async fn index(&self, entries: &[(String, String, i64, u64)]) -> RedisResult<()> {
        let commands = entries
            .iter()
            .map(|(source, id, at_ms, ttl_s)| {
                let mut cmd = redis::cmd("SET");
                cmd.arg(self.accepted_key(source, id)).arg(at_ms).arg("EX").arg(*ttl_s);
                cmd
            })
            .collect();
        self.many::<redis::Value>(commands).await.map(drop)
    }

    /// Which of `ids` of `source` the index holds.
    pub async fn accepted(&self, source: &str, ids: &[&str]) -> RedisResult<Vec<bool>> {
        let commands = ids
            .iter()
            .map(|id| {
                let mut cmd = redis::cmd("EXISTS");
                cmd.arg(self.accepted_key(source, id));
                cmd
            })
            .collect();
        self.many(commands).await
    }

    /// The ledger's entries for `ids` of `source`.
    pub async fn actions(&self, source: &str, ids: &[&str]) -> RedisResult<Vec<Option<Action>>> {
        let commands = ids
            .iter()
            .map(|id| {
                let mut cmd = redis::cmd("GET");
                cmd.arg(self.action_key(source, id));
                cmd
            })
            .collect();
        let values: Vec<Option<String>> = self.many(commands).await?;
        Ok(values.into_iter().map(|value| value.as_deref().and_then(Action::parse)).collect())
    }

    /// Records that `id` was found missing, unless the ledger already has an entry; true when this is the first
    /// time (so it is counted once).
    pub async fn note_missed(&self, source: &str, id: &str, at_ms: i64, ttl_s: u64) -> RedisResult<bool> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.action_key(source, id)).arg(Action::Missed.value(at_ms)).arg("NX").arg("EX").arg(ttl_s);
        let reply: Option<String> = self.query(&cmd).await?;
        Ok(reply.is_some())
    }

    /// Takes the right to act on `id` (see [`CLAIM_ACTION`]); false when another run did, or the ledger says
    /// not to act again.
    pub async fn claim_action(
        &self,
        source: &str,
        id: &str,
        at_ms: i64,
        ttl_s: u64,
        again_after_request: bool,
    ) -> RedisResult<bool> {
        let key = self.action_key(source, id);
        let script = Script::new(CLAIM_ACTION);
        let mut invocation = script.key(key);
        invocation.arg(Action::Requesting.value(at_ms)).arg(ttl_s).arg(if again_after_request { "1" } else { "0" });
        let claimed: i64 = invocation.invoke_async(&mut self.connection.clone()).await?;
        Ok(claimed == 1)
    }

    /// Records the outcome of an action on `id`.
    pub async fn record_action(
        &self,
        source: &str,
        id: &str,
        action: &Action,
        at_ms: i64,
        ttl_s: u64,
    ) -> RedisResult<()> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.action_key(source, id)).arg(action.value(at_ms)).arg("EX").arg(ttl_s);
        self.query::<redis::Value>(&cmd).await.map(drop)
    }

    /// Takes `source`'s run lock for `lease`; `None` when another run holds it.
    pub async fn lock(&self, source: &str, lease: Duration) -> RedisResult<Option<String>> {
        let token = uuid::Uuid::new_v4().to_string();
        let mut cmd = redis::cmd("SET");
        cmd.arg(redis_key::reconcile_lock(&self.prefix, source))
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(u64::try_from(lease.as_millis()).unwrap_or(u64::MAX));
        let reply: Option<String> = self.query(&cmd).await?;
        Ok(reply.map(|_| token))
    }

    pub async fn unlock(&self, source: &str, token: &str) -> RedisResult<()> {
        let script = Script::new(UNLOCK);
        let mut invocation = script.key(redis_key::reconcile_lock(&self.prefix, source));
        invocation.arg(token);
        let _: i64 = invocation.invoke_async(&mut self.connection.clone()).await?;
        Ok(())
    }

    /// Whether `source` has had its first (dry) run.
    pub async fn first_run_done(&self, source: &str) -> RedisResult<bool> {
        let mut cmd = redis::cmd("EXISTS");
        cmd.arg(redis_key::reconcile_first_run(&self.prefix, source));
        self.query(&cmd).await
    }

    pub async fn mark_first_run(&self, source: &str, at_ms: i64) -> RedisResult<()> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(redis_key::reconcile_first_run(&self.prefix, source)).arg(at_ms).arg("NX");
        self.query::<redis::Value>(&cmd).await.map(drop)
    }

    /// Lowers where the index's coverage starts to `at_ms` (see [`redis_key::reconcile_index_since`]).
    pub async fn lower_index_since(&self, at_ms: i64) -> RedisResult<()> {
        let script = Script::new(LOWER_INDEX_SINCE);
        let mut invocation = script.key(redis_key::reconcile_index_since(&self.prefix));
        invocation.arg(at_ms);
        let _: i64 = invocation.invoke_async(&mut self.connection.clone()).await?;
        Ok(())
    }

    /// Where the index's coverage starts; `None` if no indexer ever ran.
    pub async fn index_since(&self) -> RedisResult<Option<i64>> {
        let mut cmd = redis::cmd("GET");
        cmd.arg(redis_key::reconcile_index_since(&self.prefix));
        self.query(&cmd).await
    }

    pub async fn ping(&self) -> RedisResult<()> {
        self.query::<String>(&redis::cmd("PING")).await.map(drop)
    }
}

async fn connection_query<C: ConnectionLike>(
    pipeline: &Pipeline,
    connection: &mut C,
) -> RedisResult<Vec<redis::Value>> {
    pipeline.query_async(connection).await
}

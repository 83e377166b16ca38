//! The chaos soak: a gateway, consumer processes with the real `http` handler and a local downstream that fails
//! and delays at random, under steady signed traffic, with faults on a seeded schedule: consumers SIGKILLed and
//! restarted, the broker SIGKILLed and restarted, Redis frozen (SIGSTOP/SIGCONT), the gateway restarted
//! gracefully. Then it drains and judges from Kafka and the downstream's log: every acknowledged event processed
//! or dead-lettered, bodies byte-identical, a double effect only where a consumer kill explains it, and only 202,
//! 401 (forged requests) or 503 with `Retry-After` answered, never a dropped request.
//!
//! The short form (about two minutes) runs in `scripts/test`. The long form, by hand, prints the figures that
//! docs/chaos.md records:
//! `CHAOS_DURATION_S=600 CHAOS_RATE=300 CHAOS_SEED=7 cargo test -p hookline-tests --test faults -- --nocapture chaos_soak::`
//!
//! `CHAOS_HANDLER=postgres` runs the consumers with the `postgres` handler instead, against the stack's PostgreSQL:
//! each event's effect is a row of a counter table (a second application shows as `applied = 2`), written with its
//! body, in a transaction that also waits up to 20 ms and fails retryably (`40001`) about 8% of the time; the judge
//! reads the effects from the database and allows no double effect at all, consumer kills or not.
//!
//! This binary kills the shared broker and freezes the shared Redis, so it holds a single test (cargo runs test
//! binaries one after another).

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    io::Write,
    process::{Child, Command},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use hookline_gateway::config::Limits;
use hookline_tests::{Delivery, StackRestore, TEST_SECRET, TestStack, eventually, stack_script};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use rdkafka::Message;
use tokio_util::sync::CancellationToken;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

/// A small seeded generator (xorshift64*): the schedule and the downstream's failures repeat with the seed.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [0, n).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

// ---------------------------------------------------------------- the downstream

/// One request the downstream received: event id, body, the status it answered, when.
#[derive(Debug, Clone)]
struct Effect {
    event_id: String,
    body: Bytes,
    status: u16,
    at: Instant,
}

/// The `http` handler's target: answers 503 to about 8% of requests, delays about 10% by up to 300 ms, and
/// records everything.
async fn start_downstream(seed: u64) -> (String, Arc<Mutex<Vec<Effect>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/events", listener.local_addr().expect("addr"));
    let effects = Arc::new(Mutex::new(Vec::new()));
    let rng = Arc::new(Mutex::new(Rng(seed ^ 0x9e37_79b9_7f4a_7c15)));
    let (log, handler_rng) = (effects.clone(), rng.clone());
    let handler = move |request: Request<hyper::body::Incoming>| {
        let (log, rng) = (log.clone(), handler_rng.clone());
        async move {
            let event_id = request
                .headers()
                .get("x-hookline-event-id")
                .and_then(|value| value.to_str().ok())
                .unwrap_or("")
                .to_owned();
            let body = request.into_body().collect().await.map(|body| body.to_bytes()).unwrap_or_default();
            let (roll, delay_ms) = {
                let mut rng = rng.lock().expect("rng");
                (rng.below(100), rng.below(300))
            };
            if (8..18).contains(&roll) {
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            }
            let status = if roll < 8 { 503 } else { 200 };
            log.lock().expect("effects").push(Effect { event_id, body, status, at: Instant::now() });
            let mut response = Response::new(hookline_common::http::Body::new(Bytes::from_static(b"ok")));
            *response.status_mut() = StatusCode::from_u16(status).expect("status");
            response
        }
    };
    let limits = hookline_common::http::ServeLimits {
        max_connections: 1024,
        max_connections_per_peer: 1024,
        ..hookline_common::http::ServeLimits::default()
    };
    tokio::spawn(hookline_common::http::serve(listener, handler, limits, CancellationToken::new()));
    (url, effects)
}

// ---------------------------------------------------------------- consumer processes

/// A `test-consumer` process in `router` mode, SIGKILLed when dropped.
struct ConsumerProcess(Option<Child>);

impl ConsumerProcess {
    fn spawn(config_file: &std::path::Path, log_file: &std::path::Path) -> Self {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(log_file).expect("consumer log");
        let child = Command::new(env!("CARGO_BIN_EXE_test-consumer"))
            .arg(config_file)
            .arg("router")
            .env("RUST_LOG", "warn")
            .env("NO_COLOR", "1")
            .stdout(log.try_clone().expect("consumer log"))
            .stderr(log)
            .spawn()
            .expect("start a consumer process");
        Self(Some(child))
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM and wait: a graceful stop, at the end of the run.
    fn terminate(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
            let _ = child.wait();
        }
    }
}

impl Drop for ConsumerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Where the consumers' effects land: the `http` handler's downstream, or the `postgres` handler's table.
enum Target {
    Http { url: String, effects: Arc<Mutex<Vec<Effect>>> },
    Postgres { db: tokio_postgres::Client, schema: String },
}

impl Target {
    async fn start(seed: u64) -> Self {
        if std::env::var("CHAOS_HANDLER").as_deref() != Ok("postgres") {
            let (url, effects) = start_downstream(seed).await;
            return Self::Http { url, effects };
        }
        let (db, connection) =
            hookline_tests::postgres_config().connect(tokio_postgres::NoTls).await.expect("the stack's PostgreSQL");
        tokio::spawn(connection);
        let schema = format!("chaos_{}", uuid::Uuid::new_v4().simple());
        let dedupe = hookline_consumer::handler::postgres::gate::DedupeTable::new(&format!("{schema}.processed"))
            .expect("a valid name")
            .create_sql();
        db.batch_execute(&format!(
            "CREATE SCHEMA {schema};
             CREATE TABLE {schema}.effects (event_id text PRIMARY KEY, body bytea NOT NULL, applied int NOT NULL);
             {dedupe};
             CREATE FUNCTION {schema}.downstream() RETURNS int LANGUAGE plpgsql AS $$
             BEGIN
               IF random() < 0.08 THEN RAISE EXCEPTION 'chaos: try again' USING ERRCODE = '40001'; END IF;
               IF random() < 0.10 THEN PERFORM pg_sleep(random() * 0.02); END IF;
               RETURN 1;
             END $$;"
        ))
        .await
        .expect("the chaos schema");
        Self::Postgres { db, schema }
    }

    /// The `[handler]` table of the consumers' config.
    fn handler_toml(&self) -> String {
        match self {
            Self::Http { url, .. } => format!("[handler]\nkind = \"http\"\nurl = \"{url}\"\ntimeout_ms = 3000\n"),
            Self::Postgres { schema, .. } => {
                let base = hookline_tests::postgres_handler_config(schema);
                let password = base.password.as_ref().and_then(|secret| secret.file.clone()).expect("password file");
                format!(
                    "[handler]\nkind = \"postgres\"\ntimeout_ms = 3000\n[handler.postgres]\nurl = \"{}\"\n\
                     password = {{ id = \"postgres\", file = \"{password}\" }}\nca_file = \"{}\"\n\
                     dedupe_table = \"{schema}.processed\"\nstatement_timeout_ms = 2000\nlock_timeout_ms = 1000\n\
                     [[handler.postgres.statements]]\n\
                     sql = \"INSERT INTO {schema}.effects (event_id, body, applied) VALUES ($1, $2, 1) \
                     ON CONFLICT (event_id) DO UPDATE SET applied = effects.applied + 1\"\n\
                     params = [\"event.id\", \"event.body\"]\nrows = 1\n\
                     [[handler.postgres.statements]]\nsql = \"SELECT {schema}.downstream()\"\nrows = 1\n",
                    base.url.as_deref().expect("url"),
                    base.ca_file.as_ref().expect("ca file").display(),
                )
            }
        }
    }

    /// Event id → (the body it was applied with, how many times it was applied): from the downstream's 2xx answers,
    /// or from the table.
    async fn applied(&self) -> HashMap<String, (Bytes, usize)> {
        let mut applied: HashMap<String, (Bytes, usize)> = HashMap::new();
        match self {
            Self::Http { effects, .. } => {
                for effect in effects.lock().expect("effects").iter().filter(|e| e.status == 200) {
                    applied.entry(effect.event_id.clone()).or_insert_with(|| (effect.body.clone(), 0)).1 += 1;
                }
            }
            Self::Postgres { db, schema } => {
                for row in db
                    .query(&format!("SELECT event_id, body, applied FROM {schema}.effects"), &[])
                    .await
                    .expect("effects")
                {
                    let times = usize::try_from(row.get::<_, i32>(2)).unwrap_or(0);
                    applied.insert(row.get(0), (Bytes::from(row.get::<_, Vec<u8>>(1)), times));
                }
            }
        }
        applied
    }
}

fn write_consumer_config(stack: &TestStack, handler_toml: &str) -> std::path::PathBuf {
    let config = &stack.consumer_config;
    let file = std::env::temp_dir().join(format!("hookline-chaos-{}.toml", uuid::Uuid::new_v4().simple()));
    let mut out = std::fs::File::create(&file).expect("config file");
    write!(
        out,
        "[kafka]\nbrokers = \"{}\"\ninbound_topic = \"{}\"\ndlq_topic = \"{}\"\ndlq_status_topic = \"{}\"\n\
         retry_topic = \"{}\"\ngroup_id = \"{}\"\n\
         [kafka.record_auth]\nkeys = [{{ id = \"{}\", file = \"{}\" }}]\n\
         [redis]\nurl = \"{}\"\nkey_prefix = \"{}\"\nclaim_lease_ms = 6000\n\
         {handler_toml}\
         [retry]\ninitial_backoff_ms = 200\nmax_backoff_ms = 2000\nmax_attempts = 12\nmax_total_ms = 120000\n",
        config.kafka.brokers,
        config.kafka.inbound_topic,
        config.kafka.dlq_topic,
        config.kafka.dlq_status_topic,
        config.kafka.retry_topic,
        config.kafka.group_id,
        config.kafka.record_auth.keys[0].id,
        config.kafka.record_auth.keys[0].file.as_deref().expect("the stack's record key is a file"),
        config.redis.url,
        config.redis.key_prefix,
    )
    .expect("write config");
    file
}

// ---------------------------------------------------------------- the load

#[derive(Debug, Default)]
struct LoadLog {
    /// Event id → body, of every signed delivery sent.
    sent: HashMap<String, Bytes>,
    acknowledged: HashSet<String>,
    /// Status → count, of every answer; forged requests apart.
    statuses: BTreeMap<u16, u64>,
    forged_statuses: BTreeMap<u16, u64>,
    /// 503s without `Retry-After`, and answers the judge does not allow.
    bad_answers: Vec<String>,
    /// Requests whose connection was refused (the gateway restarting): retried, no answer expected.
    refused: u64,
    /// Requests sent and never answered (a reset, a connection closed under them), with when they were sent.
    dropped: Vec<(Instant, String)>,
    /// Sent time of every 202, for the recovery figures.
    accepted_at: Vec<Instant>,
}

/// Open-loop-ish signed traffic at `rate` requests/s over `n_workers` workers; a delivery answered 503, refused
/// or dropped is sent again later (as a provider retries) until acknowledged or the load stops. One request in
/// 50 is forged (a wrong signature) and must get 401.
fn start_load(
    addr: std::net::SocketAddr,
    rate: u64,
    n_workers: u64,
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<LoadLog>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let client = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(64).build_http::<Full<Bytes>>();
    let run = uuid::Uuid::new_v4().simple().to_string();
    let per_worker = Duration::from_micros(1_000_000 * n_workers / rate.max(1));
    (0..n_workers)
        .map(|worker| {
            let (client, stop, log, run) = (client.clone(), stop.clone(), log.clone(), run.clone());
            tokio::spawn(async move {
                let mut pending: Vec<Delivery> = Vec::new();
                let mut n = 0u64;
                let mut ticker = tokio::time::interval(per_worker);
                ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                while !stop.load(Ordering::Relaxed) {
                    ticker.tick().await;
                    n += 1;
                    let forged = n % 50 == 0;
                    let delivery = match pending.pop() {
                        Some(delivery) if !forged => delivery,
                        other => {
                            if let Some(delivery) = other {
                                pending.push(delivery);
                            }
                            Delivery::new(format!(r#"{{"chaos":"{run}","worker":{worker},"n":{n}}}"#))
                        }
                    };
                    let signature =
                        if forged { delivery.signature("not-the-secret") } else { delivery.signature(TEST_SECRET) };
                    if !forged {
                        log.lock().expect("log").sent.insert(delivery.delivery_id.clone(), delivery.body.clone());
                    }
                    let request = Request::post(format!("http://{addr}/webhooks/github"))
                        .header("content-type", "application/json")
                        .header("x-github-delivery", &delivery.delivery_id)
                        .header("x-github-event", "push")
                        .header("x-hub-signature-256", signature)
                        .body(Full::new(delivery.body.clone()))
                        .expect("request");
                    let sent_at = Instant::now();
                    let result = tokio::time::timeout(Duration::from_secs(20), client.request(request)).await;
                    let mut log = log.lock().expect("log");
                    match result {
                        Ok(Ok(response)) => {
                            let status = response.status().as_u16();
                            if forged {
                                *log.forged_statuses.entry(status).or_default() += 1;
                                if status != 401 {
                                    log.bad_answers.push(format!("forged request answered {status}"));
                                }
                                continue;
                            }
                            *log.statuses.entry(status).or_default() += 1;
                            match status {
                                202 => {
                                    log.acknowledged.insert(delivery.delivery_id.clone());
                                    log.accepted_at.push(sent_at);
                                }
                                503 if response.headers().contains_key(http::header::RETRY_AFTER) => {
                                    pending.push(delivery)
                                }
                                _ => log.bad_answers.push(format!("{status} for {}", delivery.delivery_id)),
                            }
                        }
                        Ok(Err(error)) if error.is_connect() => {
                            log.refused += 1;
                            if !forged {
                                pending.push(delivery);
                            }
                        }
                        Ok(Err(error)) => {
                            log.dropped.push((sent_at, format!("{}: {error:?}", delivery.delivery_id)));
                            if !forged {
                                pending.push(delivery);
                            }
                        }
                        Err(_elapsed) => {
                            log.dropped.push((sent_at, format!("{}: no answer in 20 s", delivery.delivery_id)));
                            if !forged {
                                pending.push(delivery);
                            }
                        }
                    }
                }
            })
        })
        .collect()
}

// ---------------------------------------------------------------- the schedule

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    KillConsumer,
    KillBroker,
    FreezeRedis,
    RestartGateway,
}

/// Faults at seconds into the run: a consumer every 15 s (±3 s), the broker once at 40% of the run for 15 s, Redis
/// frozen for 3 s at 70%, the gateway restarted at 20% and 85% (the long form repeats the cycle every 120 s).
fn schedule(duration_s: u64, rng: &mut Rng) -> Vec<(u64, Fault)> {
    let mut faults = Vec::new();
    let mut at = 10 + rng.below(6);
    while at + 5 < duration_s {
        faults.push((at, Fault::KillConsumer));
        at += 12 + rng.below(7);
    }
    let cycle = duration_s.min(120);
    let mut start = 0;
    while start + cycle <= duration_s {
        faults.push((start + cycle * 2 / 10 + rng.below(3), Fault::RestartGateway));
        faults.push((start + cycle * 4 / 10 + rng.below(3), Fault::KillBroker));
        faults.push((start + cycle * 7 / 10 + rng.below(3), Fault::FreezeRedis));
        faults.push((start + cycle * 85 / 100 + rng.below(3), Fault::RestartGateway));
        start += cycle;
    }
    faults.sort();
    faults
}

const BROKER_DOWN: Duration = Duration::from_secs(15);
const REDIS_FROZEN: Duration = Duration::from_secs(3);

async fn stack_async(verb: &'static str) {
    tokio::task::spawn_blocking(move || stack_script(verb)).await.expect("scripts/stack");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chaos_soak_every_acknowledged_event_is_processed_or_dead_lettered_and_nothing_is_dropped() {
    let duration_s: u64 = env_or("CHAOS_DURATION_S", 60);
    let rate: u64 = env_or("CHAOS_RATE", 100);
    let seed: u64 = env_or("CHAOS_SEED", 13);
    let n_consumers: usize = env_or("CHAOS_CONSUMERS", 2);
    let mut rng = Rng(seed.max(1));
    let faults = schedule(duration_s, &mut rng);
    eprintln!("chaos: {duration_s} s at {rate} requests/s, {n_consumers} consumers, seed {seed}, faults {faults:?}");

    let mut stack = TestStack::builder()
        .partitions(6)
        .produce_timeout_ms(3_000)
        .gateway_limits(Limits { drain_grace_ms: 2_000, drain_deadline_ms: 10_000, ..Limits::default() })
        .build()
        .await;
    let target = Target::start(seed).await;
    let config_file = write_consumer_config(&stack, &target.handler_toml());
    let log_file = std::env::temp_dir().join(format!("hookline-chaos-{}.log", stack.kafka.group_id));
    let mut consumers: Vec<ConsumerProcess> =
        (0..n_consumers).map(|_| ConsumerProcess::spawn(&config_file, &log_file)).collect();

    let stop = Arc::new(AtomicBool::new(false));
    let load_log = Arc::new(Mutex::new(LoadLog::default()));
    let workers = start_load(stack.gateway_addr, rate, 16, stop.clone(), load_log.clone());

    // The faults, in order; each records when it ended, for the judge and the recovery figures.
    let started = Instant::now();
    let mut consumer_kills: Vec<Instant> = Vec::new();
    let mut broker_back: Vec<Instant> = Vec::new();
    let mut redis_thawed: Vec<Instant> = Vec::new();
    let mut gateway_restarts: Vec<(Instant, Instant)> = Vec::new();
    for (at_s, fault) in &faults {
        let at = started + Duration::from_secs(*at_s);
        tokio::time::sleep_until(at.into()).await;
        match fault {
            Fault::KillConsumer => {
                let victim = usize::try_from(rng.below(n_consumers as u64)).expect("index");
                consumers[victim].kill();
                consumer_kills.push(Instant::now());
                tokio::time::sleep(Duration::from_millis(500 + rng.below(2_000))).await;
                consumers[victim] = ConsumerProcess::spawn(&config_file, &log_file);
            }
            Fault::KillBroker => {
                let guard = StackRestore("start-kafka");
                stack_async("kill-kafka").await;
                tokio::time::sleep(BROKER_DOWN).await;
                tokio::task::spawn_blocking(move || drop(guard)).await.expect("start-kafka");
                broker_back.push(Instant::now());
            }
            Fault::FreezeRedis => {
                let guard = StackRestore("thaw-redis");
                stack_async("freeze-redis").await;
                tokio::time::sleep(REDIS_FROZEN).await;
                tokio::task::spawn_blocking(move || drop(guard)).await.expect("thaw-redis");
                redis_thawed.push(Instant::now());
            }
            Fault::RestartGateway => {
                let begun = Instant::now();
                stack.restart_gateway().await;
                gateway_restarts.push((begun, Instant::now()));
            }
        }
    }
    tokio::time::sleep_until((started + Duration::from_secs(duration_s)).into()).await;
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await.expect("load worker");
    }
    let load_ended = Instant::now();

    // Drain: every acknowledged event processed (a 2xx from the downstream) or dead-lettered.
    let acknowledged = load_log.lock().expect("log").acknowledged.clone();
    let effected = || async { target.applied().await.into_keys().collect::<HashSet<String>>() };
    let dead_lettered = || async {
        stack
            .records(&stack.kafka.dlq_topic)
            .await
            .iter()
            .filter_map(|record| record.key().map(|key| String::from_utf8_lossy(key).into_owned()))
            .collect::<HashSet<String>>()
    };
    eventually(Duration::from_secs(240), "every acknowledged event processed or dead-lettered", || async {
        let done = effected().await;
        if acknowledged.iter().all(|id| done.contains(id)) {
            return true;
        }
        let dlq = dead_lettered().await;
        acknowledged.iter().all(|id| done.contains(id) || dlq.contains(id))
    })
    .await;
    let drained_after = load_ended.elapsed();
    for consumer in &mut consumers {
        consumer.terminate();
    }

    // The judge.
    let log = std::mem::take(&mut *load_log.lock().expect("log"));
    let effects = match &target {
        Target::Http { effects, .. } => effects.lock().expect("effects").clone(),
        Target::Postgres { .. } => Vec::new(),
    };
    // The postgres handler's effects, from its table (the http handler's are the downstream's log, above).
    let applied = match &target {
        Target::Http { .. } => HashMap::new(),
        Target::Postgres { .. } => target.applied().await,
    };
    let dlq = dead_lettered().await;
    let mut successes: HashMap<&str, Vec<&Effect>> = HashMap::new();
    for effect in effects.iter().filter(|e| e.status == 200) {
        successes.entry(effect.event_id.as_str()).or_default().push(effect);
    }
    let mut altered = Vec::new();
    let bodies = effects.iter().map(|e| (&e.event_id, &e.body)).chain(applied.iter().map(|(id, (body, _))| (id, body)));
    for (event_id, body) in bodies {
        match log.sent.get(event_id) {
            Some(sent) if sent == body => {}
            _ => altered.push(event_id.clone()),
        }
    }
    // The postgres handler: every application counted in the table; no double effect is ever explained.
    let database_doubles: Vec<(&String, usize)> =
        applied.iter().filter(|(_, (_, times))| *times > 1).map(|(id, (_, times))| (id, *times)).collect();
    // A consumer killed after the downstream's 2xx and before the done marker: the event is processed again.
    // The done marker follows the 2xx within milliseconds, unless Redis is frozen (3 s): allow 6 s.
    let explained =
        |first: Instant| consumer_kills.iter().any(|kill| *kill >= first && *kill - first < Duration::from_secs(6));
    let doubles: Vec<(&str, usize, bool)> = successes
        .iter()
        .filter(|(_, list)| list.len() > 1)
        .map(|(id, list)| (*id, list.len(), explained(list.iter().map(|e| e.at).min().expect("an effect"))))
        .collect();
    let unexplained: Vec<_> = doubles.iter().filter(|(_, _, explained)| !explained).collect();
    let lost: Vec<_> = acknowledged
        .iter()
        .filter(|id| !successes.contains_key(id.as_str()) && !applied.contains_key(*id) && !dlq.contains(*id))
        .collect();
    let recovery = |backs: &[Instant]| -> Vec<Duration> {
        backs
            .iter()
            .filter_map(|back| log.accepted_at.iter().filter(|at| *at >= back).min().map(|at| *at - *back))
            .collect()
    };
    let processing_recovery = |backs: &[Instant]| -> Vec<Duration> {
        backs
            .iter()
            .filter_map(|back| {
                effects.iter().filter(|e| e.at >= *back && e.status == 200).map(|e| e.at).min().map(|at| at - *back)
            })
            .collect()
    };
    // HTTP/1.1 cannot tell a client that an idle kept-alive connection is about to close: one the client did not
    // use during the whole drain grace is closed when the listener closes, and a request the client sends on it
    // at that instant meets the close (a reset; nothing was read, nothing acknowledged, the client sends it
    // again). Only that is allowed, within a gateway restart.
    let unexplained_drops: Vec<_> = log
        .dropped
        .iter()
        .filter(|(sent_at, _)| {
            !gateway_restarts
                .iter()
                .any(|(begun, ended)| *sent_at >= *begun && *sent_at <= *ended + Duration::from_secs(1))
        })
        .collect();
    // What the consumers logged (warnings and errors) over the whole run: an outage costs summaries, not a line per
    // failure.
    let consumer_log = std::fs::read_to_string(&log_file).unwrap_or_default();
    let log_lines = |what: &str| consumer_log.lines().filter(|line| line.contains(what)).count();
    eprintln!(
        "chaos consumer logs: {} lines in all, {} `fetch failed`, {} `redis failed`, {} librdkafka",
        consumer_log.lines().count(),
        log_lines("fetch failed"),
        log_lines("redis failed"),
        log_lines("librdkafka"),
    );
    let handler = match &target {
        Target::Http { .. } => "http",
        Target::Postgres { .. } => "postgres",
    };
    eprintln!(
        "chaos result: {handler} handler, seed {seed}, {duration_s} s at {rate}/s, {n_consumers} consumers; answers {:?} (forged {:?}), \
         refused connections {}, dropped requests {} ({} outside a gateway restart); acknowledged {}, processed {}, dead-lettered {}, lost {}; \
         double effects {} ({} explained by a consumer kill; in the database {}); downstream calls {} ({} answered 503); \
         consumer kills {}; after the broker's return: first 2xx {:?}, first processed {:?}; after Redis thawed: \
         first processed {:?}; drained {:?} after the load stopped",
        log.statuses,
        log.forged_statuses,
        log.refused,
        log.dropped.len(),
        unexplained_drops.len(),
        acknowledged.len(),
        successes.len() + applied.len(),
        acknowledged.iter().filter(|id| dlq.contains(*id)).count(),
        lost.len(),
        doubles.len(),
        doubles.len() - unexplained.len(),
        database_doubles.len(),
        effects.len(),
        effects.iter().filter(|e| e.status == 503).count(),
        consumer_kills.len(),
        recovery(&broker_back),
        processing_recovery(&broker_back),
        processing_recovery(&redis_thawed),
        drained_after,
    );
    assert!(lost.is_empty(), "acknowledged and neither processed nor dead-lettered: {lost:?}");
    assert!(altered.is_empty(), "bodies that reached the downstream altered (or never sent): {altered:?}");
    assert!(unexplained.is_empty(), "double effects no consumer kill explains: {unexplained:?}");
    assert!(database_doubles.is_empty(), "double effects of the postgres handler: {database_doubles:?}");
    assert!(
        log.bad_answers.is_empty(),
        "answers other than 202, 401 (forged), 503 + Retry-After: {:?}",
        log.bad_answers
    );
    assert!(
        unexplained_drops.is_empty(),
        "requests sent and never answered outside a gateway restart: {unexplained_drops:?}"
    );
    assert!(!acknowledged.is_empty() && log.statuses.contains_key(&503), "the faults were felt and traffic flowed");
    if let Target::Postgres { db, schema } = &target {
        db.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.expect("drop");
    }
    let _ = std::fs::remove_file(&config_file);
    let _ = std::fs::remove_file(&log_file);
    stack.shutdown().await;
}

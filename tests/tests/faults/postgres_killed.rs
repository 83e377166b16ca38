//! Consumers with the `postgres` handler SIGKILLed: every event's effect happens exactly once, counted in the
//! database. With the Redis gate alone, a kill between a handler's success and its done marker repeats the effect
//! (tests/tests/suite/consumer_killed.rs bounds how often); here the dedupe row commits with the work, so a redelivered
//! event finds it and does nothing. One test holds a consumer exactly in that window (its transaction committed,
//! Redis stopped so the done marker cannot land) and kills it; the other kills consumers in a loop while events
//! flow, each kill landing while transactions are open (checked in `pg_stat_activity`). Each runs twice: with two
//! statements (two round trips per event) and with the same work as one statement (the one-round-trip path, its
//! dedupe row, work and outcome in one data-modifying statement).
//!
//! The window test stops the shared Redis: the tests of this binary run one at a time.

use std::time::Duration;

use hookline_consumer::config::{
    HandlerConfig,
    postgres::{PostgresConfig, StatementConfig, ZeroRows},
};
use hookline_tests::{
    StackRestore, TestStack, eventually, postgres_config, postgres_handler_config,
    process::{self, ConsumerProcess},
    push_meta, stack_script,
};
use tokio_postgres::NoTls;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const N_EVENTS: usize = 1_500;
const KILLS: usize = 6;

fn spawn(stack: &TestStack) -> ConsumerProcess {
    process::spawn_consumer_process(env!("CARGO_BIN_EXE_test-consumer").as_ref(), &stack.consumer_config, "router").0
}

/// How the work is configured: the same effect and the same sleep either way.
#[derive(Debug, Clone, Copy)]
enum WorkForm {
    /// The upsert, then `SELECT pg_sleep(...)`: two statements, two round trips per event.
    TwoStatements,
    /// The upsert selecting from `pg_sleep(...)`: one statement, one round trip per event.
    OneStatement,
}

/// A stack whose consumers run the `postgres` handler: a non-idempotent upsert into `<schema>.effects` (a second
/// application shows as `applied = 2`) and `sleep` seconds inside the transaction (a downstream's worth of time).
async fn effects_stack(schema: &str, sleep: f64, form: WorkForm) -> TestStack {
    let for_config = schema.to_owned();
    let upsert = |rows: &str| {
        format!(
            "INSERT INTO {schema}.effects (event_id, n, applied) {rows} \
             ON CONFLICT (event_id) DO UPDATE SET applied = effects.applied + 1"
        )
    };
    let statements = match form {
        WorkForm::TwoStatements => vec![
            StatementConfig {
                sql: upsert("VALUES ($1, $2, 1)"),
                params: vec!["event.id".into(), "/n".into()],
                rows: Some(1),
                on_zero_rows: ZeroRows::Poison,
            },
            StatementConfig { sql: format!("SELECT pg_sleep({sleep})"), rows: Some(1), ..StatementConfig::default() },
        ],
        WorkForm::OneStatement => vec![StatementConfig {
            sql: upsert(&format!("SELECT $1::text, $2::int, 1 FROM pg_sleep({sleep})")),
            params: vec!["event.id".into(), "/n".into()],
            rows: Some(1),
            on_zero_rows: ZeroRows::Poison,
        }],
    };
    let stack = TestStack::builder()
        .partitions(3)
        .consumer_config(move |config| {
            config.redis.claim_lease_ms = 3_000;
            config.retry.max_attempts = 100;
            config.handler = HandlerConfig {
                kind: "postgres".into(),
                timeout_ms: 2_500,
                postgres: Some(PostgresConfig {
                    statement_timeout_ms: 2_000,
                    lock_timeout_ms: 1_000,
                    pool_wait_ms: 1_000,
                    statements: statements.clone(),
                    ..postgres_handler_config(&for_config)
                }),
                ..HandlerConfig::default()
            };
        })
        .build()
        .await;
    for (place, handler) in hookline_consumer::handler::postgres::configured(&stack.consumer_config).expect("handler") {
        handler.migrate().await.unwrap_or_else(|problem| panic!("{place}: {problem}"));
    }
    stack
}

async fn effects_schema(db: &tokio_postgres::Client) -> String {
    let schema = format!("killed_{}", uuid::Uuid::new_v4().simple());
    db.batch_execute(&format!(
        "CREATE SCHEMA {schema}; CREATE TABLE {schema}.effects (event_id text PRIMARY KEY, n int NOT NULL, applied int NOT NULL)"
    ))
    .await
    .expect("schema");
    schema
}

#[tokio::test]
async fn a_consumer_killed_after_commit_before_its_done_marker_applies_nothing_twice() {
    killed_after_commit_before_its_done_marker(WorkForm::TwoStatements).await;
}

#[tokio::test]
async fn a_consumer_killed_after_its_one_statement_committed_before_its_done_marker_applies_nothing_twice() {
    killed_after_commit_before_its_done_marker(WorkForm::OneStatement).await;
}

async fn killed_after_commit_before_its_done_marker(form: WorkForm) {
    let _serial = SERIAL.lock().await;
    let (db, connection) = postgres_config().connect(NoTls).await.expect("connect");
    tokio::spawn(connection);
    let schema = effects_schema(&db).await;
    let mut stack = effects_stack(&schema, 1.5, form).await;
    stack
        .produce_raw_batch(vec![(
            0,
            "window".into(),
            hookline_common::wire::event_headers(&push_meta("window")),
            br#"{"n":1}"#.to_vec(),
        )])
        .await;
    let mut consumer = spawn(&stack);
    eventually(Duration::from_secs(60), "the event's transaction is open", || async {
        db.query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'hookline-consumer' \
             AND query LIKE '%pg_sleep%' AND state = 'active'",
            &[],
        )
        .await
        .expect("pg_stat_activity")
        .get::<_, i64>(0)
            == 1
    })
    .await;
    // The claim is taken and the work is under way: stop Redis (it keeps the claim on disk), so the done marker
    // cannot follow the COMMIT.
    let restart = StackRestore("start-redis");
    stack_script("stop-redis");
    let committed = || async {
        db.query_opt(&format!("SELECT applied FROM {schema}.effects WHERE event_id = 'window'"), &[])
            .await
            .expect("select")
            .map(|row| row.get::<_, i32>(0))
    };
    eventually(Duration::from_secs(10), "the transaction committed", || async { committed().await.is_some() }).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    consumer.kill();
    drop(restart);

    // The survivor gets the record again (no offset was committed past it) and the claim once its lease expires.
    let config = stack.consumer_config.clone();
    let handler = hookline_consumer::Loaded::build(config.clone()).expect("valid config").handler;
    stack.start_consumer_with(config, handler).await;
    eventually(Duration::from_secs(60), "the redelivery found the committed dedupe row", || async {
        stack.consumer_metric(0, "hookline_consumer_postgres_transactions_total", &[("outcome", "duplicate")]).await
            >= 1.0
    })
    .await;
    assert_eq!(committed().await, Some(1), "the effect happened once");
    assert_eq!(
        stack.consumer_metric(0, "hookline_consumer_events_total", &[("outcome", "processed")]).await,
        1.0,
        "the survivor processed the redelivery (as a no-op)"
    );
    stack.shutdown().await;
    db.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.expect("drop");
}

#[tokio::test]
async fn consumers_killed_in_a_loop_apply_every_event_exactly_once() {
    killed_in_a_loop(WorkForm::TwoStatements).await;
}

#[tokio::test]
async fn consumers_killed_in_a_loop_apply_every_one_statement_event_exactly_once() {
    killed_in_a_loop(WorkForm::OneStatement).await;
}

async fn killed_in_a_loop(form: WorkForm) {
    let _serial = SERIAL.lock().await;
    let (db, connection) = postgres_config().connect(NoTls).await.expect("connect");
    tokio::spawn(connection);
    let schema = effects_schema(&db).await;
    let stack = effects_stack(&schema, 0.03, form).await;
    let records = (0..N_EVENTS)
        .map(|n| {
            let id = format!("pg-kill-{n}");
            (
                i32::try_from(n % 3).expect("partition"),
                id.clone(),
                hookline_common::wire::event_headers(&push_meta(&id)),
                format!("{{\"n\":{n}}}").into_bytes(),
            )
        })
        .collect();
    stack.produce_raw_batch(records).await;

    let applied = || async {
        let row = db.query_one(&format!("SELECT count(*), coalesce(max(applied), 0) FROM {schema}.effects"), &[]).await;
        let row = row.expect("count");
        (row.get::<_, i64>(0), row.get::<_, i32>(1))
    };
    let open_transactions = || async {
        db.query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'hookline-consumer' \
             AND datname = current_database() AND xact_start IS NOT NULL",
            &[],
        )
        .await
        .expect("pg_stat_activity")
        .get::<_, i64>(0)
    };
    let mut consumers = vec![spawn(&stack), spawn(&stack)];
    let mut open_at_kills = Vec::new();
    let mut applied_at_kills = Vec::new();
    for kill in 0..KILLS {
        // Wait until work is flowing through the members (after a rebalance), then kill one mid-stream.
        let before = applied().await.0;
        eventually(Duration::from_secs(60), "events applied since the last kill", || async {
            applied().await.0 >= before + 40 || applied().await.0 == i64::try_from(N_EVENTS).expect("n")
        })
        .await;
        open_at_kills.push(open_transactions().await);
        applied_at_kills.push(applied().await.0);
        consumers[kill % 2].kill();
        consumers[kill % 2] = spawn(&stack);
    }
    eventually(Duration::from_secs(180), "every event applied", || async {
        applied().await.0 == i64::try_from(N_EVENTS).expect("n")
    })
    .await;
    // Redeliveries after the last kill may still be running: let them find their rows.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (count, max_applied) = applied().await;
    let doubles: Vec<(String, i32)> = db
        .query(&format!("SELECT event_id, applied FROM {schema}.effects WHERE applied <> 1"), &[])
        .await
        .expect("doubles")
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let dedupe_rows: i64 =
        db.query_one(&format!("SELECT count(*) FROM {schema}.processed"), &[]).await.expect("rows").get(0);
    println!(
        "{KILLS} kills; open transactions at each kill {open_at_kills:?}; events applied at each kill \
         {applied_at_kills:?}; {count} events applied, max applications {max_applied}, dedupe rows {dedupe_rows}"
    );
    assert!(doubles.is_empty(), "events whose effect happened more than once: {doubles:?}");
    assert_eq!((count, max_applied, dedupe_rows), (i64::try_from(N_EVENTS).expect("n"), 1, count));
    assert!(
        open_at_kills.iter().filter(|open| **open > 0).count() >= KILLS / 2,
        "most kills land while transactions are open: {open_at_kills:?}"
    );
    assert!(stack.records(&stack.kafka.dlq_topic).await.is_empty(), "nothing dead-lettered");
    drop(consumers);
    stack.shutdown().await;
    db.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.expect("drop");
}

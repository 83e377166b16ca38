//! The `postgres` handler through the database's own faults, events flowing: a fast restart of the server (what a
//! failover looks like to clients: `57P01`, then refused connections) and DDL that invalidates a prepared statement
//! (`0A000`, re-prepared once) cost retries, never an event or a double effect; and a dead letter (its order did not
//! exist yet) is applied exactly once when the replayer re-drives it; a restart while the consumer prepares its
//! statements at start is waited out.
//!
//! It restarts the shared PostgreSQL: the tests of this binary run one at a time.

use std::time::Duration;

use hookline_consumer::config::{
    HandlerConfig,
    postgres::{PostgresConfig, StatementConfig, ZeroRows},
};
use hookline_dlq_replayer::{
    ReplayerConfig,
    filter::Filter,
    index::Status,
    ops::{ReplayRequest, Replayer},
};
use hookline_tests::{
    Delivery, StackRestore, TestStack, eventually,
    postgres::{connect, migrate, postgres_handler, start_configured_consumer},
    postgres_handler_config, push_meta, stack_script,
};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A fresh schema `<prefix>_<uuid>` with an `effects (event_id, applied)` table, and a stack (built, migrated, its
/// consumer not started) whose `postgres` handler runs `statement(schema)` once per event, with `max_attempts`.
async fn effects_stack(
    prefix: &str,
    max_attempts: u32,
    statement: fn(&str) -> String,
) -> (tokio_postgres::Client, String, TestStack) {
    let db = connect().await;
    let schema = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
    db.batch_execute(&format!(
        "CREATE SCHEMA {schema}; CREATE TABLE {schema}.effects (event_id text PRIMARY KEY, applied int NOT NULL)"
    ))
    .await
    .expect("schema");
    let for_config = schema.clone();
    let stack = TestStack::builder()
        .consumer_config(move |config| {
            config.retry.max_attempts = max_attempts;
            config.handler = postgres_handler(PostgresConfig {
                statements: vec![StatementConfig {
                    sql: statement(&for_config),
                    params: vec!["event.id".into()],
                    rows: Some(1),
                    on_zero_rows: ZeroRows::Poison,
                }],
                ..postgres_handler_config(&for_config)
            });
        })
        .build()
        .await;
    migrate(&stack.consumer_config).await;
    (db, schema, stack)
}

#[tokio::test]
async fn a_server_restart_and_ddl_mid_stream_cost_retries_never_an_event_or_a_double() {
    const N: usize = 800;
    let _serial = SERIAL.lock().await;
    // `RETURNING *`: its result type changes when a column is added, which invalidates the plan.
    let (db, schema, mut stack) = effects_stack("faults", 100, |schema| {
        format!(
            "INSERT INTO {schema}.effects (event_id, applied) VALUES ($1, 1) \
             ON CONFLICT (event_id) DO UPDATE SET applied = effects.applied + 1 RETURNING *"
        )
    })
    .await;
    // The first 600 events before the DDL, the last 200 after it: each of those runs a plan made stale by it.
    let batch = |range: std::ops::Range<usize>| {
        range
            .map(|n| {
                let id = format!("fault-{n}");
                (
                    i32::try_from(n % 3).expect("partition"),
                    id.clone(),
                    hookline_common::wire::event_headers(&push_meta(&id)),
                    b"{}".to_vec(),
                )
            })
            .collect()
    };
    // The consumer started (its statements prepared), then the table locked before the events arrive: their
    // transactions are in flight, waiting, when the server restarts under them, however fast the consumer is.
    start_configured_consumer(&mut stack).await;
    eventually(Duration::from_secs(60), "the consumer started and joined its group", || async {
        stack.consumer_metric(0, "hookline_consumer_assigned_partitions", &[]).await >= 1.0
    })
    .await;
    db.batch_execute(&format!("BEGIN; LOCK TABLE {schema}.effects IN EXCLUSIVE MODE")).await.expect("lock");
    stack.produce_raw_batch(batch(0..N - 200)).await;
    // Another session: the locking one sees pg_stat_activity as of its transaction's first look.
    let observer = connect().await;
    eventually(Duration::from_secs(60), "transactions waiting on the lock", || async {
        let waiting: i64 = observer
            .query_one("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'", &[])
            .await
            .expect("pg_stat_activity")
            .get(0);
        waiting >= 1
    })
    .await;
    let restore = StackRestore("start-postgres");
    stack_script("restart-postgres");
    drop(restore);
    let db = connect().await;
    let applied = || async {
        let row = db.query_one(&format!("SELECT count(*), coalesce(max(applied), 0) FROM {schema}.effects"), &[]).await;
        row.map(|row| (row.get::<_, i64>(0), row.get::<_, i32>(1))).unwrap_or((-1, 0))
    };
    eventually(Duration::from_secs(60), "the first batch applied after the restart", || async {
        applied().await.0 == i64::try_from(N - 200).expect("n")
    })
    .await;
    db.batch_execute(&format!("ALTER TABLE {schema}.effects ADD COLUMN note text")).await.expect("DDL");
    stack.produce_raw_batch(batch(N - 200..N)).await;
    eventually(Duration::from_secs(120), "every event applied", || async {
        applied().await.0 == i64::try_from(N).expect("n")
    })
    .await;
    let metric = |outcome: &'static str| {
        let stack = &stack;
        async move {
            stack.consumer_metric(0, "hookline_consumer_postgres_transactions_total", &[("outcome", outcome)]).await
        }
    };
    println!(
        "applied {:?}; retryable {}, reprepared {}, schema_changed {}",
        applied().await,
        metric("retryable").await,
        metric("reprepared").await,
        metric("schema_changed").await
    );
    assert_eq!(applied().await, (i64::try_from(N).expect("n"), 1), "every event applied exactly once");
    assert!(metric("retryable").await >= 1.0, "the restart cost retries");
    assert!(metric("reprepared").await >= 1.0, "the stale plan was prepared again");
    assert!(stack.records(&stack.kafka.dlq_topic).await.is_empty(), "nothing dead-lettered");
    stack.shutdown().await;
    db.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.expect("drop");
}

#[tokio::test]
async fn a_dead_letter_is_applied_exactly_once_when_re_driven() {
    let _serial = SERIAL.lock().await;
    let db = connect().await;
    let schema = format!("redrive_{}", uuid::Uuid::new_v4().simple());
    db.batch_execute(&format!(
        "CREATE SCHEMA {schema}; CREATE TABLE {schema}.orders (id text PRIMARY KEY, paid int NOT NULL DEFAULT 0)"
    ))
    .await
    .expect("schema");
    let for_config = schema.clone();
    let mut stack = TestStack::builder()
        .consumer_config(move |config| {
            config.handler = postgres_handler(PostgresConfig {
                statements: vec![StatementConfig {
                    sql: format!("UPDATE {for_config}.orders SET paid = paid + 1 WHERE id = $1"),
                    params: vec!["/order".into()],
                    rows: Some(1),
                    on_zero_rows: ZeroRows::Poison,
                }],
                ..postgres_handler_config(&for_config)
            });
        })
        .build()
        .await;
    migrate(&stack.consumer_config).await;
    start_configured_consumer(&mut stack).await;
    let payment = Delivery::new(&br#"{"order":"late"}"#[..]);
    stack.post_accepted(&payment).await;
    let replayer =
        Replayer::new(ReplayerConfig { kafka: stack.kafka.clone(), ..ReplayerConfig::default() }).expect("replayer");
    let entry = || async {
        replayer
            .list(&Filter::default())
            .await
            .expect("list")
            .into_iter()
            .find(|entry| entry.entry.event_id.as_deref() == Some(payment.delivery_id.as_str()))
    };
    eventually(Duration::from_secs(30), "dead-lettered: the order did not exist", || async { entry().await.is_some() })
        .await;

    db.batch_execute(&format!("INSERT INTO {schema}.orders (id) VALUES ('late')")).await.expect("the order arrives");
    let id = entry().await.expect("entry").entry.id;
    let request = ReplayRequest { ids: vec![id.clone()], by: "test".into(), ..ReplayRequest::default() };
    assert_eq!(replayer.replay(&request).await.expect("replay").done, vec![id]);
    eventually(Duration::from_secs(30), "the re-drive succeeded", || async {
        entry().await.is_some_and(|entry| entry.status == Status::Succeeded)
    })
    .await;
    // The provider retries the same payment too: Redis and the dedupe row both say it was applied.
    stack.post_accepted(&payment).await;
    stack.forget_dedupe_markers().await;
    stack.post_accepted(&payment).await;
    eventually(Duration::from_secs(30), "the retries found the dedupe row", || async {
        stack.consumer_metric(0, "hookline_consumer_postgres_transactions_total", &[("outcome", "duplicate")]).await
            >= 1.0
    })
    .await;
    let paid: i32 =
        db.query_one(&format!("SELECT paid FROM {schema}.orders WHERE id = 'late'"), &[]).await.expect("order").get(0);
    assert_eq!(paid, 1, "applied exactly once: by the re-drive");
    stack.shutdown().await;
    db.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.expect("drop");
}

#[tokio::test]
async fn a_handler_timeout_during_commit_applies_the_event_once() {
    let _serial = SERIAL.lock().await;
    let db = connect().await;
    let schema = format!("commit_{}", uuid::Uuid::new_v4().simple());
    // A deferred constraint trigger runs at COMMIT: it holds the COMMIT for 1.8 s, so the handler's 2.5 s timeout
    // (0.8 s of work before it) fires while the COMMIT is in flight.
    db.batch_execute(&format!(
        "CREATE SCHEMA {schema};
         CREATE TABLE {schema}.effects (event_id text PRIMARY KEY, applied int NOT NULL);
         CREATE FUNCTION {schema}.slow_commit() RETURNS trigger LANGUAGE plpgsql AS
           $$ BEGIN PERFORM pg_sleep(1.8); RETURN NULL; END $$;
         CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT OR UPDATE ON {schema}.effects
           DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {schema}.slow_commit();"
    ))
    .await
    .expect("schema");
    let for_config = schema.clone();
    let mut stack = TestStack::builder()
        .consumer_config(move |config| {
            config.redis.claim_lease_ms = 4_000;
            config.retry.max_attempts = 10;
            config.handler = HandlerConfig {
                timeout_ms: 2_500,
                ..postgres_handler(PostgresConfig {
                    statement_timeout_ms: 2_000,
                    lock_timeout_ms: 1_000,
                    pool_wait_ms: 1_000,
                    statements: vec![
                        StatementConfig {
                            sql: format!(
                                "INSERT INTO {for_config}.effects (event_id, applied) VALUES ($1, 1) \
                                 ON CONFLICT (event_id) DO UPDATE SET applied = effects.applied + 1"
                            ),
                            params: vec!["event.id".into()],
                            rows: Some(1),
                            on_zero_rows: ZeroRows::Poison,
                        },
                        StatementConfig {
                            sql: "SELECT pg_sleep(0.8)".into(),
                            rows: Some(1),
                            ..StatementConfig::default()
                        },
                    ],
                    ..postgres_handler_config(&for_config)
                })
            };
        })
        .build()
        .await;
    migrate(&stack.consumer_config).await;
    start_configured_consumer(&mut stack).await;
    let delivery = Delivery::new(&br#"{"slow":"commit"}"#[..]);
    stack.post_accepted(&delivery).await;
    eventually(Duration::from_secs(60), "the event processed after its timed-out attempt", || async {
        stack.consumer_metric(0, "hookline_consumer_events_total", &[("outcome", "processed")]).await >= 1.0
    })
    .await;
    let timeouts =
        stack.consumer_metric(0, "hookline_consumer_handler_failures_total", &[("class", "retryable")]).await;
    let applied: i32 = db
        .query_one(&format!("SELECT applied FROM {schema}.effects WHERE event_id = $1"), &[&delivery.delivery_id])
        .await
        .expect("the effect")
        .get(0);
    let duplicates =
        stack.consumer_metric(0, "hookline_consumer_postgres_transactions_total", &[("outcome", "duplicate")]).await;
    println!("timed-out attempts {timeouts}, applied {applied}, found applied by the next attempt {duplicates}");
    assert!(timeouts >= 1.0, "the first attempt timed out during its COMMIT");
    assert_eq!(applied, 1, "applied exactly once");
    stack.shutdown().await;
    db.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.expect("drop");
}

/// A restart while the consumer prepares its statements at start (the server going away under the prepare) is
/// waited out like an unreachable server, never taken as a configuration the database refuses.
#[tokio::test]
async fn a_restart_while_the_consumer_prepares_its_statements_is_waited_out() {
    let _serial = SERIAL.lock().await;
    let (db, schema, mut stack) = effects_stack("prepare", 5, |schema| {
        format!("INSERT INTO {schema}.effects (event_id, applied) VALUES ($1, 1)")
    })
    .await;
    // Preparing the INSERT waits on this lock; the server restarts under it.
    db.batch_execute(&format!("BEGIN; LOCK TABLE {schema}.effects IN ACCESS EXCLUSIVE MODE")).await.expect("lock");
    start_configured_consumer(&mut stack).await;
    let observer = connect().await;
    eventually(Duration::from_secs(60), "the consumer's prepare waiting on the lock", || async {
        let waiting: i64 = observer
            .query_one("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'", &[])
            .await
            .expect("pg_stat_activity")
            .get(0);
        waiting >= 1
    })
    .await;
    let restore = StackRestore("start-postgres");
    stack_script("restart-postgres");
    drop(restore);
    let db = connect().await;
    let meta = push_meta("after-the-restart");
    stack.produce_raw(0, meta.record_key(), hookline_common::wire::event_headers(&meta), b"{}").await;
    eventually(Duration::from_secs(60), "the consumer started after all and applied the event", || async {
        let applied = db.query_one(&format!("SELECT count(*) FROM {schema}.effects"), &[]).await;
        applied.is_ok_and(|row| row.get::<_, i64>(0) == 1)
    })
    .await;
    stack.shutdown().await;
    db.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.expect("drop");
}

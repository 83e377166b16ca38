//! The `postgres` handler end to end: webhooks through the gateway, Kafka and a consumer whose work runs in the
//! stack's PostgreSQL (over TLS, the password from a file). Each event's effect happens once, even when Redis has
//! forgotten it; each `on_zero_rows` mode does what it says; a body without the value a parameter points at is
//! poison; the inbox mode stores each event once; and a configuration the database can never run (a statement that
//! does not prepare, a type hookline cannot bind, a missing dedupe table) stops the consumer at start.

use std::time::Duration;

use hookline_consumer::{
    ConsumerConfig,
    config::{
        HandlerConfig, RouteConfig,
        postgres::{PostgresConfig, StatementConfig, ZeroRows},
    },
    handler::postgres,
};
use hookline_tests::{
    Delivery, TestStack, eventually,
    postgres::{connect, migrate, postgres_handler, start_configured_consumer},
    postgres_handler_config, read,
};
use rdkafka::message::Message;
use tokio_postgres::Client;

/// A schema of the test's own with an `orders` and a `ledger` table.
async fn fresh_schema(client: &Client) -> String {
    let schema = format!("handler_{}", uuid::Uuid::new_v4().simple());
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema};
             CREATE TABLE {schema}.orders (id text PRIMARY KEY, status text NOT NULL, paid int);
             CREATE TABLE {schema}.ledger (order_id text NOT NULL, amount int NOT NULL, event_id text NOT NULL);
             INSERT INTO {schema}.orders VALUES ('o1', 'pending', NULL), ('o3', 'pending', NULL), ('o5', 'pending', NULL);"
        ))
        .await
        .expect("schema");
    schema
}

fn statement(sql: String, params: &[&str], rows: Option<u64>, on_zero_rows: ZeroRows) -> StatementConfig {
    StatementConfig { sql, params: params.iter().map(|param| (*param).to_owned()).collect(), rows, on_zero_rows }
}

fn route(event_type: &str, handler: HandlerConfig) -> RouteConfig {
    RouteConfig {
        source: "github".into(),
        event_types: Some(vec![event_type.into()]),
        handler,
        ..RouteConfig::default()
    }
}

/// `push`: a ledger line, then the order moves from `pending` to `paid` (a guard: 0 rows is `skip`, which undoes
/// the ledger line). `refund`: `paid` to `refunded`, 0 rows is `retry` (the payment may not have arrived yet).
/// `cancel`: 0 rows is poison.
fn orders_config(config: &mut ConsumerConfig, schema: &str) {
    let base = postgres_handler_config(schema);
    config.handler = postgres_handler(PostgresConfig {
        statements: vec![
            statement(
                format!("INSERT INTO {schema}.ledger (order_id, amount, event_id) VALUES ($1, $2, $3)"),
                &["/order", "/amount", "event.id"],
                Some(1),
                ZeroRows::Poison,
            ),
            statement(
                format!("UPDATE {schema}.orders SET status = 'paid', paid = $2 WHERE id = $1 AND status = 'pending'"),
                &["/order", "/amount"],
                Some(1),
                ZeroRows::Skip,
            ),
        ],
        ..base.clone()
    });
    config.routes = vec![
        route(
            "refund",
            postgres_handler(PostgresConfig {
                statements: vec![statement(
                    format!("UPDATE {schema}.orders SET status = 'refunded' WHERE id = $1 AND status = 'paid'"),
                    &["/order"],
                    Some(1),
                    ZeroRows::Retry,
                )],
                ..base.clone()
            }),
        ),
        // `close`: a guard that matches no row (skip) before a statement that would fail: sent together, the
        // failure is undone with the rest and the event is skipped, not poison.
        route(
            "close",
            postgres_handler(PostgresConfig {
                statements: vec![
                    statement(
                        format!("UPDATE {schema}.orders SET status = 'closed' WHERE id = $1 AND status = 'open'"),
                        &["/order"],
                        Some(1),
                        ZeroRows::Skip,
                    ),
                    statement(
                        format!("INSERT INTO {schema}.ledger (order_id, amount, event_id) VALUES ($1, NULL, $2)"),
                        &["/order", "event.id"],
                        Some(1),
                        ZeroRows::Poison,
                    ),
                ],
                ..base.clone()
            }),
        ),
        route(
            "cancel",
            postgres_handler(PostgresConfig {
                statements: vec![statement(
                    format!("UPDATE {schema}.orders SET status = 'cancelled' WHERE id = $1"),
                    &["/order"],
                    None,
                    ZeroRows::Poison,
                )],
                ..base
            }),
        ),
    ];
    config.retry.max_attempts = 100;
}

fn typed(body: &str, event: &str) -> Delivery {
    Delivery { event: event.to_owned(), ..Delivery::new(body.to_owned()) }
}

#[tokio::test]
async fn statements_apply_each_event_once_and_each_zero_rows_mode_does_what_it_says() {
    let db = connect().await;
    let schema = fresh_schema(&db).await;
    let for_config = schema.clone();
    let mut stack =
        TestStack::builder().consumer_config(move |config| orders_config(config, &for_config)).build().await;
    migrate(&stack.consumer_config).await;
    start_configured_consumer(&mut stack).await;

    let paid = typed(r#"{"order":"o1","amount":10}"#, "push");
    let paid_again = typed(r#"{"order":"o1","amount":11}"#, "push");
    let no_amount = typed(r#"{"order":"o2"}"#, "push");
    let cancel_missing = typed(r#"{"order":"o404"}"#, "cancel");
    // `cancel` names no `rows`: its count is not known before it runs, so the dedupe row is written a second time.
    let cancel = typed(r#"{"order":"o5"}"#, "cancel");
    let early_refund = typed(r#"{"order":"o3"}"#, "refund");
    let close_unopened = typed(r#"{"order":"o1","close":true}"#, "close");
    stack.post_accepted(&paid).await;
    stack.post_accepted(&early_refund).await;
    eventually(Duration::from_secs(30), "o1 paid", || async {
        db.query_one(&format!("SELECT status FROM {schema}.orders WHERE id = 'o1'"), &[])
            .await
            .expect("select")
            .get::<_, String>(0)
            == "paid"
    })
    .await;
    for delivery in [&paid_again, &no_amount, &cancel_missing, &close_unopened, &cancel] {
        stack.post_accepted(delivery).await;
    }
    // The refund came before its payment: retried until the payment lands.
    eventually(Duration::from_secs(30), "the early refund was retried", || async {
        stack.consumer_metric(0, "hookline_consumer_postgres_transactions_total", &[("outcome", "retryable")]).await
            >= 1.0
    })
    .await;
    db.batch_execute(&format!("UPDATE {schema}.orders SET status = 'paid', paid = 5 WHERE id = 'o3'"))
        .await
        .expect("pay o3");
    eventually(Duration::from_secs(30), "o3 refunded once its payment landed", || async {
        db.query_one(&format!("SELECT status FROM {schema}.orders WHERE id = 'o3'"), &[])
            .await
            .expect("select")
            .get::<_, String>(0)
            == "refunded"
    })
    .await;
    eventually(Duration::from_secs(30), "two poison events dead-lettered", || async {
        stack.records(&stack.kafka.dlq_topic).await.len() >= 2
    })
    .await;

    // Redis forgets every marker; the same payment arrives again (a provider's retry): the dedupe row says it was
    // applied, so nothing happens twice.
    stack.forget_dedupe_markers().await;
    stack.post_accepted(&paid).await;
    eventually(Duration::from_secs(30), "the re-delivery is found in the database", || async {
        stack.consumer_metric(0, "hookline_consumer_postgres_transactions_total", &[("outcome", "duplicate")]).await
            >= 1.0
    })
    .await;

    let ledger: Vec<(String, i32, String)> = db
        .query(&format!("SELECT order_id, amount, event_id FROM {schema}.ledger ORDER BY order_id"), &[])
        .await
        .expect("ledger")
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect();
    assert_eq!(
        ledger,
        vec![("o1".to_owned(), 10, paid.delivery_id.clone())],
        "one ledger line: the skip undid its own"
    );
    let order =
        db.query_one(&format!("SELECT status, paid FROM {schema}.orders WHERE id = 'o1'"), &[]).await.expect("o1");
    assert_eq!((order.get::<_, String>(0), order.get::<_, Option<i32>>(1)), ("paid".to_owned(), Some(10)));
    let rows: Vec<(String, String, Vec<i64>)> = db
        .query(&format!("SELECT event_id, outcome, row_counts FROM {schema}.processed ORDER BY processed_at"), &[])
        .await
        .expect("dedupe rows")
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect();
    let service = stack.consumer_config.service_name().to_owned();
    let row_of = |id: &str| {
        rows.iter().find(|(event_id, ..)| event_id == id).map(|(_, outcome, counts)| (outcome.as_str(), counts.clone()))
    };
    assert_eq!(row_of(&paid.delivery_id), Some(("applied", vec![1, 1])), "{rows:?}");
    assert_eq!(row_of(&paid_again.delivery_id), Some(("skipped", vec![1, 0])), "{rows:?}");
    assert_eq!(row_of(&early_refund.delivery_id), Some(("applied", vec![1])), "{rows:?}");
    assert_eq!(
        row_of(&close_unopened.delivery_id),
        Some(("skipped", vec![0, -1])),
        "the skip decides; the failing statement behind it is undone: {rows:?}"
    );
    assert_eq!(row_of(&cancel.delivery_id), Some(("applied", vec![1])), "{rows:?}");
    assert_eq!(rows.len(), 5, "poison events leave no dedupe row, so a re-drive can apply them: {rows:?}");
    let keyed: i64 = db
        .query_one(
            &format!("SELECT count(*) FROM {schema}.processed WHERE service = $1 AND source = 'github'"),
            &[&service],
        )
        .await
        .expect("count")
        .get(0);
    assert_eq!(keyed, 5, "rows are keyed by the consumer service and the source");

    let dlq = stack.records(&stack.kafka.dlq_topic).await;
    let error_of = |delivery: &Delivery| {
        dlq.iter()
            .find(|record| record.key() == Some(delivery.delivery_id.as_bytes()))
            .map(|record| read::dead_letter_failure(record).error)
            .unwrap_or_default()
    };
    assert!(error_of(&no_amount).contains("no value at JSON pointer `/amount`"), "{}", error_of(&no_amount));
    assert!(
        error_of(&cancel_missing).contains("matched no row (on_zero_rows = \"poison\")"),
        "{}",
        error_of(&cancel_missing)
    );
    assert_eq!(dlq.len(), 2, "nothing else dead-lettered");
    stack.shutdown().await;
    db.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.expect("drop");
}

/// The start error of a consumer whose only handler is `postgres` as `work` says, in a fresh schema that has the
/// dedupe table unless `migrated` is false.
async fn start_error(statements: Vec<StatementConfig>, migrated: bool) -> String {
    let db = connect().await;
    let schema = format!("start_{}", uuid::Uuid::new_v4().simple());
    db.batch_execute(&format!("CREATE SCHEMA {schema}; CREATE TABLE {schema}.orders (id text, amount numeric)"))
        .await
        .expect("schema");
    let statements: Vec<StatementConfig> = statements
        .into_iter()
        .map(|statement| StatementConfig { sql: statement.sql.replace("SCHEMA", &schema), ..statement })
        .collect();
    let for_config = schema.clone();
    let stack = TestStack::builder()
        .consumer_config(move |config| {
            config.handler = postgres_handler(PostgresConfig {
                statements: statements.clone(),
                ..postgres_handler_config(&for_config)
            });
        })
        .build()
        .await;
    if migrated {
        migrate(&stack.consumer_config).await;
    }
    let loaded = hookline_consumer::Loaded::build(stack.consumer_config.clone()).expect("a config that builds");
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let shutdown = tokio_util::sync::CancellationToken::new();
    let ended = tokio::time::timeout(Duration::from_secs(30), hookline_consumer::run(loaded, admin, shutdown))
        .await
        .expect("the consumer stops at start");
    stack.shutdown().await;
    db.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.expect("drop");
    ended.expect_err("the start fails").to_string()
}

#[tokio::test]
async fn a_configuration_the_database_cannot_run_stops_the_consumer_at_start() {
    let unknown_table = start_error(
        vec![statement("UPDATE SCHEMA.nope SET x = 1 WHERE id = $1".into(), &["/id"], None, ZeroRows::Poison)],
        true,
    )
    .await;
    assert!(unknown_table.contains("statements[0] does not prepare: 42P01"), "{unknown_table}");

    let numeric = start_error(
        vec![statement(
            "UPDATE SCHEMA.orders SET amount = $2 WHERE id = $1".into(),
            &["/id", "/amount"],
            None,
            ZeroRows::Poison,
        )],
        true,
    )
    .await;
    assert!(numeric.contains("parameter $2") && numeric.contains("$n::text::numeric"), "{numeric}");

    let wrong_count = start_error(
        vec![statement("UPDATE SCHEMA.orders SET id = $1".into(), &["/id", "/other"], None, ZeroRows::Poison)],
        true,
    )
    .await;
    assert!(wrong_count.contains("takes 1 parameters, `params` gives 2"), "{wrong_count}");

    let no_migration = start_error(
        vec![statement("UPDATE SCHEMA.orders SET id = $1".into(), &["/id"], None, ZeroRows::Poison)],
        false,
    )
    .await;
    assert!(no_migration.contains("run `hookline-consumer migrate`"), "{no_migration}");
}

#[test]
fn settings_that_cannot_work_are_refused_with_the_config() {
    let config = ConsumerConfig {
        handler: postgres_handler(PostgresConfig {
            url: Some("postgres://app:hunter2@db.internal/app".into()),
            pool_size: 512,
            statement_timeout_ms: 20_000,
            statements: vec![statement("SELECT 1".into(), &["data.id"], Some(0), ZeroRows::Poison)],
            ..PostgresConfig::default()
        }),
        ..ConsumerConfig::default()
    };
    let problems = hookline_consumer::Loaded::build(config).expect_err("refused").to_string();
    for expected in [
        "carries a password",
        "pool_size = 512",
        "statement_timeout_ms (20000) < [handler] timeout_ms",
        "`data.id` is neither a JSON pointer",
        "`rows = 0` never succeeds",
    ] {
        assert!(problems.contains(expected), "{expected}: {problems}");
    }
    assert!(!problems.contains("hunter2"), "the password is never printed: {problems}");
}

#[tokio::test]
async fn dedupe_rows_past_retention_are_deleted_and_the_rest_kept() {
    let db = connect().await;
    let schema = fresh_schema(&db).await;
    let for_config = schema.clone();
    let mut stack = TestStack::builder()
        .consumer_config(move |config| {
            config.handler = postgres_handler(PostgresConfig {
                retention_days: 10,
                retention_interval_ms: 200,
                statements: vec![statement(
                    format!("UPDATE {for_config}.orders SET paid = 1 WHERE id = $1"),
                    &["/order"],
                    None,
                    ZeroRows::Poison,
                )],
                ..postgres_handler_config(&for_config)
            });
            config.redis.dedupe_ttl_s = 3 * 86_400;
        })
        .build()
        .await;
    migrate(&stack.consumer_config).await;
    db.batch_execute(&format!(
        "INSERT INTO {schema}.processed (service, source, event_id, processed_at)
         SELECT 's', 'github', 'old-' || n, now() - interval '11 days' FROM generate_series(1, 12) AS n;
         INSERT INTO {schema}.processed (service, source, event_id, processed_at)
         SELECT 's', 'github', 'recent-' || n, now() - interval '9 days' FROM generate_series(1, 3) AS n;"
    ))
    .await
    .expect("rows");
    start_configured_consumer(&mut stack).await;
    let table = format!("{schema}.processed");
    eventually(Duration::from_secs(30), "the rows past retention deleted", || async {
        stack.consumer_metric(0, "hookline_consumer_postgres_rows_deleted_total", &[("table", &table)]).await >= 12.0
    })
    .await;
    let left: Vec<String> = db
        .query(&format!("SELECT event_id FROM {schema}.processed ORDER BY event_id"), &[])
        .await
        .expect("rows")
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(left, vec!["recent-1", "recent-2", "recent-3"]);
    let oldest =
        stack.consumer_metric(0, "hookline_consumer_postgres_oldest_row_age_seconds", &[("table", &table)]).await;
    assert!((9.0 * 86_400.0..9.1 * 86_400.0).contains(&oldest), "the oldest row is the 9-day one: {oldest}");
    assert_eq!(
        stack.consumer_metric(0, "hookline_consumer_postgres_rows_deleted_total", &[("table", &table)]).await,
        12.0
    );

    // A retention shorter than the Redis TTL plus the replay horizon is refused with the config.
    let mut config = stack.consumer_config.clone();
    if let Some(postgres) = config.handler.postgres.as_mut() {
        postgres.retention_days = 9;
    }
    let refused = hookline_consumer::Loaded::build(config).expect_err("refused").to_string();
    assert!(refused.contains("retention_days = 9 must be at least 10"), "{refused}");
    stack.shutdown().await;
    db.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.expect("drop");
}

#[tokio::test]
async fn a_server_certificate_the_ca_file_does_not_sign_stops_the_consumer_at_start() {
    let schema = format!("tls_{}", uuid::Uuid::new_v4().simple());
    let for_config = schema.clone();
    let stack = TestStack::builder()
        .consumer_config(move |config| {
            let base = postgres_handler_config(&for_config);
            let other_ca = std::path::Path::new(&base.ca_file.clone().expect("ca")).with_file_name("other-ca.pem");
            config.handler = postgres_handler(PostgresConfig {
                ca_file: Some(other_ca),
                statements: vec![statement("SELECT $1::text".into(), &["event.id"], None, ZeroRows::Poison)],
                ..base
            });
        })
        .build()
        .await;
    let loaded = hookline_consumer::Loaded::build(stack.consumer_config.clone()).expect("a config that builds");
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let ended = tokio::time::timeout(
        Duration::from_secs(30),
        hookline_consumer::run(loaded, admin, tokio_util::sync::CancellationToken::new()),
    )
    .await
    .expect("a certificate that does not verify is not waited for");
    let error = ended.expect_err("the start fails").to_string();
    println!("{error}");
    assert!(error.contains("certificate") || error.contains("UnknownIssuer"), "{error}");
    stack.shutdown().await;
}

#[tokio::test]
async fn the_compose_database_gets_the_tables_the_orders_service_needs() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let init = std::fs::read_to_string(root.join("deploy/config/postgres-init.sql")).expect("postgres-init.sql");
    let config = ConsumerConfig::read(Some(&root.join("deploy/config/consumer-orders.toml"))).expect("orders config");
    let tables = postgres::configured_tables(&config).expect("a valid postgres route");
    assert_eq!(tables.len(), 1, "one postgres handler");
    let migration = postgres::PostgresHandler::migration_sql_of(tables[0].1).expect("its migration");
    assert!(init.contains(&migration), "postgres-init.sql holds what `migrate --print` prints:\n{migration}");

    // The file runs (twice: idempotent), and the service's statement prepares against what it creates.
    let db = connect().await;
    let schema = format!("compose_{}", uuid::Uuid::new_v4().simple());
    db.batch_execute(&format!("CREATE SCHEMA {schema}; SET search_path = {schema}; {init}; {init}"))
        .await
        .expect("postgres-init.sql runs");
    for statement in &tables[0].1.statements {
        db.prepare(&statement.sql).await.unwrap_or_else(|error| panic!("{}: {error}", statement.sql));
    }
    db.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.expect("drop");
}

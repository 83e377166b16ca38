//! The example's Rust handler end to end against the stack (`scripts/stack up`): payment webhooks through the
//! gateway and Kafka to a consumer built with `Loaded::build_with_work`, in a schema of the test's own (the URL's
//! `search_path`). A payment is applied once, even after Redis forgets it; a second payment of a paid order is
//! skipped and recorded; a payment that arrives before its order is retried until the order exists; a body without
//! an order is dead-lettered.

use std::{sync::Arc, time::Duration};

use hookline_consumer::config::{HandlerConfig, postgres::PostgresConfig};
use hookline_example_orders_consumer::{PayOrder, SCHEMA_SQL};
use hookline_tests::{Delivery, TestStack, eventually, postgres_config, postgres_handler_config, prometheus::Scrape};
use tokio_postgres::NoTls;

/// `hookline_consumer_postgres_transactions_total{outcome="duplicate"}` from the consumer's admin listener.
async fn duplicates(admin: std::net::SocketAddr) -> u64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(admin).await.expect("admin listener");
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: test\r\n\r\n").await.expect("request");
    let mut text = String::new();
    stream.read_to_string(&mut text).await.expect("response");
    let scrape = Scrape::parse(&text);
    scrape.sum("hookline_consumer_postgres_transactions_total", &[("outcome", "duplicate")]) as u64
}

#[tokio::test]
async fn each_payment_moves_its_order_exactly_once() {
    let (db, connection) = postgres_config().connect(NoTls).await.expect("the stack's PostgreSQL");
    tokio::spawn(connection);
    let schema = format!("orders_{}", uuid::Uuid::new_v4().simple());
    db.batch_execute(&format!(
        "CREATE SCHEMA {schema}; SET search_path = {schema}; {SCHEMA_SQL}; \
         INSERT INTO orders (id, status) VALUES ('o1', 'pending'), ('o2', 'refunded')"
    ))
    .await
    .expect("schema");
    let stack = TestStack::builder().build().await;

    // The consumer binary's config: `[handler] kind = "postgres"`, the database in `[handler.postgres]`.
    let mut config = stack.consumer_config.clone();
    let base = postgres_handler_config(&schema);
    let url = format!("{}&options=-c%20search_path%3D{schema}", base.url.clone().expect("url"));
    config.handler = HandlerConfig {
        kind: "postgres".into(),
        postgres: Some(PostgresConfig { url: Some(url), dedupe_table: "processed".into(), ..base }),
        ..config.handler
    };
    config.retry.max_attempts = 100;
    let postgres = config.handler.postgres.clone().expect("postgres");
    let migration = hookline_consumer::handler::postgres::PostgresHandler::with_work(
        &postgres,
        &config.config_dir,
        Arc::new(PayOrder),
    )
    .expect("handler");
    migration.migrate().await.expect("the dedupe table");

    let loaded = hookline_consumer::Loaded::build_with_work(config, Arc::new(PayOrder)).expect("a valid config");
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let admin_addr = admin.local_addr().expect("addr");
    let shutdown = tokio_util::sync::CancellationToken::new();
    let consumer = tokio::spawn(hookline_consumer::run(loaded, admin, shutdown.clone()));

    let pay_o1 = Delivery::new(&br#"{"order":"o1","amount":10}"#[..]);
    let pay_o1_again = Delivery::new(&br#"{"order":"o1","amount":99}"#[..]);
    let pay_refunded = Delivery::new(&br#"{"order":"o2","amount":5}"#[..]);
    let pay_early = Delivery::new(&br#"{"order":"o3","amount":7}"#[..]);
    let no_order = Delivery::new(&br#"{"amount":1}"#[..]);
    for delivery in [&pay_o1, &pay_early] {
        stack.post_accepted(delivery).await;
    }
    let status = |id: &'static str| {
        let db = &db;
        let schema = &schema;
        async move {
            db.query_opt(&format!("SELECT status, paid FROM {schema}.orders WHERE id = $1"), &[&id])
                .await
                .expect("select")
                .map(|row| (row.get::<_, String>(0), row.get::<_, Option<i64>>(1)))
        }
    };
    eventually(Duration::from_secs(30), "o1 paid", || async { status("o1").await.is_some_and(|(s, _)| s == "paid") })
        .await;
    for delivery in [&pay_o1_again, &pay_refunded, &no_order] {
        stack.post_accepted(delivery).await;
    }
    // The payment came before its order: retried until the order exists.
    tokio::time::sleep(Duration::from_millis(500)).await;
    db.batch_execute(&format!("INSERT INTO {schema}.orders (id) VALUES ('o3')")).await.expect("o3 arrives");
    eventually(Duration::from_secs(30), "o3 paid once it exists", || async {
        status("o3").await.is_some_and(|(s, _)| s == "paid")
    })
    .await;
    eventually(Duration::from_secs(30), "the bad payment dead-lettered", || async {
        !stack.records(&stack.kafka.dlq_topic).await.is_empty()
    })
    .await;
    let outcomes = || async {
        let mut rows: Vec<(String, String)> = db
            .query(&format!("SELECT event_id, outcome FROM {schema}.processed"), &[])
            .await
            .expect("dedupe rows")
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        rows.sort();
        rows
    };
    eventually(Duration::from_secs(30), "four dedupe rows", || async { outcomes().await.len() == 4 }).await;

    // Redis forgets; the first payment is delivered again: the dedupe row keeps it from being applied twice.
    stack.forget_dedupe_markers().await;
    stack.post_accepted(&pay_o1).await;
    eventually(Duration::from_secs(30), "the re-delivery found its dedupe row", || async {
        duplicates(admin_addr).await >= 1
    })
    .await;

    assert_eq!(status("o1").await, Some(("paid".to_owned(), Some(10))), "the first payment, once");
    assert_eq!(status("o2").await, Some(("refunded".to_owned(), None)), "a refunded order is left alone");
    assert_eq!(status("o3").await, Some(("paid".to_owned(), Some(7))));
    let mut expected = vec![
        (pay_o1.delivery_id.clone(), "applied".to_owned()),
        (pay_o1_again.delivery_id.clone(), "skipped".to_owned()),
        (pay_refunded.delivery_id.clone(), "skipped".to_owned()),
        (pay_early.delivery_id.clone(), "applied".to_owned()),
    ];
    expected.sort();
    assert_eq!(outcomes().await, expected, "the bad payment left no row");
    let dlq = stack.records(&stack.kafka.dlq_topic).await;
    assert_eq!(dlq.len(), 1);
    assert_eq!(rdkafka::Message::key(&dlq[0]), Some(no_order.delivery_id.as_bytes()));

    shutdown.cancel();
    consumer.await.expect("joined").expect("a clean stop");
    stack.shutdown().await;
    db.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.expect("drop");
}

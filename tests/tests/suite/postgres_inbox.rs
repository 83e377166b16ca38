//! The `postgres` handler's `inbox` mode end to end: each verified event becomes one row of the user's table, that
//! row its dedupe record. Rows are stored once even when Redis has forgotten them; rows of events waiting together
//! go in one statement, and a row the database refuses fails its own event only.

use std::time::Duration;

use hookline_consumer::config::postgres::{BodyColumn, InboxConfig, PostgresConfig};
use hookline_tests::{
    Delivery, TestStack, eventually,
    postgres::{connect, migrate, postgres_handler, start_configured_consumer},
    postgres_handler_config, read,
};
use rdkafka::message::Message;

fn typed(body: &str, event: &str) -> Delivery {
    Delivery { event: event.to_owned(), ..Delivery::new(body.to_owned()) }
}

/// A stack whose consumer (not started) stores every event in `{schema}.inbox`, the body as `jsonb`.
async fn inbox_stack(schema: &str) -> TestStack {
    let for_config = schema.to_owned();
    TestStack::builder()
        .consumer_config(move |config| {
            config.handler = postgres_handler(PostgresConfig {
                inbox: Some(InboxConfig {
                    table: format!("{for_config}.inbox"),
                    body: BodyColumn::Jsonb,
                    headers: vec!["X-GitHub-Hook-ID".into()],
                }),
                ..postgres_handler_config(&for_config)
            });
        })
        .build()
        .await
}

#[tokio::test]
async fn the_inbox_stores_each_event_once() {
    let db = connect().await;
    let schema = format!("inbox_{}", uuid::Uuid::new_v4().simple());
    db.batch_execute(&format!("CREATE SCHEMA {schema}")).await.expect("schema");
    let mut stack = inbox_stack(&schema).await;
    migrate(&stack.consumer_config).await;
    start_configured_consumer(&mut stack).await;

    let first = typed(r#"{"n":1,"nested":{"ok":true}}"#, "push");
    let second = typed(r#"{"n":2}"#, "issues");
    stack.post_accepted(&first).await;
    stack.post_accepted(&second).await;
    eventually(Duration::from_secs(30), "two inbox rows", || async {
        db.query_one(&format!("SELECT count(*) FROM {schema}.inbox"), &[]).await.expect("count").get::<_, i64>(0) == 2
    })
    .await;
    stack.forget_dedupe_markers().await;
    stack.post_accepted(&first).await;
    eventually(Duration::from_secs(30), "the re-delivery found in the inbox", || async {
        stack.consumer_metric(0, "hookline_consumer_postgres_transactions_total", &[("outcome", "duplicate")]).await
            >= 1.0
    })
    .await;
    let rows = db
        .query(&format!("SELECT event_id, event_type, body->'nested'->>'ok', source FROM {schema}.inbox ORDER BY event_type DESC"), &[])
        .await
        .expect("rows");
    let rows: Vec<(String, String, Option<String>, String)> =
        rows.iter().map(|row| (row.get(0), row.get(1), row.get(2), row.get(3))).collect();
    assert_eq!(
        rows,
        vec![
            (first.delivery_id.clone(), "push".to_owned(), Some("true".to_owned()), "github".to_owned()),
            (second.delivery_id.clone(), "issues".to_owned(), None, "github".to_owned()),
        ]
    );
    stack.shutdown().await;
    db.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.expect("drop");
}

/// A backlog of 200 events reaches a consumer at once: their rows go in far fewer statements than events, each
/// row once; one body the table's CHECK refuses (`23514`, poison) dead-letters that event alone.
#[tokio::test]
async fn waiting_rows_go_in_together_and_a_refused_row_fails_alone() {
    let db = connect().await;
    let schema = format!("inbox_{}", uuid::Uuid::new_v4().simple());
    db.batch_execute(&format!("CREATE SCHEMA {schema}")).await.expect("schema");
    let mut stack = inbox_stack(&schema).await;
    migrate(&stack.consumer_config).await;
    db.batch_execute(&format!("ALTER TABLE {schema}.inbox ADD CONSTRAINT no_refusal CHECK (NOT body ? 'refuse')"))
        .await
        .expect("constraint");

    let refused = typed(r#"{"refuse":true}"#, "push");
    let mut deliveries: Vec<Delivery> = (0..199).map(|n| typed(&format!(r#"{{"n":{n}}}"#), "push")).collect();
    deliveries.insert(77, refused.clone());
    // Accepted before the consumer starts: it finds a backlog, as after an outage.
    futures_util::future::join_all(deliveries.iter().map(|delivery| stack.post_accepted(delivery))).await;
    start_configured_consumer(&mut stack).await;

    eventually(Duration::from_secs(60), "199 rows stored and one event dead-lettered", || async {
        let rows: i64 = db.query_one(&format!("SELECT count(*) FROM {schema}.inbox"), &[]).await.expect("count").get(0);
        rows == 199 && !stack.records(&stack.kafka.dlq_topic).await.is_empty()
    })
    .await;
    let ids: Vec<String> = db
        .query(&format!("SELECT event_id FROM {schema}.inbox"), &[])
        .await
        .expect("ids")
        .iter()
        .map(|row| row.get(0))
        .collect();
    let mut expected: Vec<String> =
        deliveries.iter().filter(|d| d.delivery_id != refused.delivery_id).map(|d| d.delivery_id.clone()).collect();
    let mut stored = ids.clone();
    expected.sort();
    stored.sort();
    assert_eq!(stored, expected, "every accepted event but the refused one, each once");

    let dlq = stack.records(&stack.kafka.dlq_topic).await;
    assert_eq!(dlq.len(), 1, "only the refused row's event is dead-lettered");
    assert_eq!(dlq[0].key(), Some(refused.delivery_id.as_bytes()));
    let error = read::dead_letter_failure(&dlq[0]).error;
    assert!(error.contains("23514"), "the CHECK's SQLSTATE says why: {error}");

    let statements = stack.consumer_metric(0, "hookline_consumer_postgres_batch_rows_count", &[]).await;
    let rows = stack.consumer_metric(0, "hookline_consumer_postgres_batch_rows_sum", &[]).await;
    assert!(rows >= 200.0, "every event's row was sent at least once: {rows} rows in {statements} statements");
    assert!(statements < 100.0, "a backlog is stored in batches: {rows} rows in {statements} statements");
    stack.shutdown().await;
    db.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.expect("drop");
}

//! The one-round-trip form of a single statement (`consumer/src/handler/postgres/one_trip.rs`) against the stack's
//! PostgreSQL: the dedupe row and the effect commit together; a duplicate, zero rows or another row count fail the
//! statement (SQLSTATE 22P02) and leave nothing behind, so the event can take the two-round-trip path; of two
//! transactions racing one event id exactly one applies the effect, whichever way the first one ends; and a
//! statement that cannot be wrapped does not prepare (the handler then keeps two round trips).

use std::time::Duration;

use hookline_consumer::{
    config::postgres::ZeroRows,
    handler::postgres::{
        gate::DedupeTable,
        params::ParamSource,
        work::{Statement, one_trip::OneTrip},
    },
};
use hookline_tests::postgres::connect;
use tokio_postgres::{Client, error::SqlState};

/// A schema of the test's own: `orders` (two pending, one paid) and the dedupe table.
async fn fresh_schema(client: &Client) -> (DedupeTable, String) {
    let schema = format!("one_trip_{}", uuid::Uuid::new_v4().simple());
    let table = DedupeTable::new(&format!("{schema}.processed")).expect("a valid name");
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; {}
             CREATE TABLE {schema}.orders (id text PRIMARY KEY, status text NOT NULL, n int NOT NULL);
             INSERT INTO {schema}.orders VALUES ('o1', 'pending', 0), ('o2', 'pending', 0), ('o3', 'paid', 0);",
            table.create_sql()
        ))
        .await
        .expect("schema");
    (table, schema)
}

/// The guarded update of the postgres benchmark: one row, only while pending.
fn guarded_update(schema: &str) -> Statement {
    Statement {
        sql: format!("UPDATE {schema}.orders SET n = n + 1 WHERE id = $1 AND status = 'pending'"),
        params: vec![ParamSource::parse("/order").expect("a pointer")],
        rows: Some(1),
        on_zero_rows: ZeroRows::Skip,
    }
}

/// Runs the one statement for `event_id` on order `order`: `Ok` when it committed as applied, the SQLSTATE else.
async fn run(client: &Client, one: &OneTrip, order: &str, event_id: &str) -> Result<(), SqlState> {
    client
        .query_one(one.sql(), &[&order, &"billing", &"stripe", &event_id])
        .await
        .map(drop)
        .map_err(|error| error.code().expect("a server error").clone())
}

async fn n_of(client: &Client, schema: &str, order: &str) -> i32 {
    client.query_one(&format!("SELECT n FROM {schema}.orders WHERE id = $1"), &[&order]).await.expect("n").get(0)
}

async fn row_of(client: &Client, table: &DedupeTable, event_id: &str) -> Option<(String, Vec<i64>)> {
    client
        .query_opt(&format!("SELECT outcome, row_counts FROM {} WHERE event_id = $1", table.name()), &[&event_id])
        .await
        .expect("the row")
        .map(|row| (row.get(0), row.get(1)))
}

#[tokio::test]
async fn the_row_and_the_effect_commit_together_and_anything_not_as_configured_leaves_nothing() {
    let client = connect().await;
    let (table, schema) = fresh_schema(&client).await;
    let one = OneTrip::new(&table, &guarded_update(&schema));

    assert_eq!(run(&client, &one, "o1", "evt_1").await, Ok(()));
    assert_eq!(n_of(&client, &schema, "o1").await, 1);
    assert_eq!(row_of(&client, &table, "evt_1").await, Some(("applied".to_owned(), vec![1])));

    // A duplicate: the row is there, the statement fails, the update is undone with it.
    assert_eq!(run(&client, &one, "o1", "evt_1").await, Err(SqlState::INVALID_TEXT_REPRESENTATION));
    assert_eq!(n_of(&client, &schema, "o1").await, 1, "a duplicate applies nothing");

    // Zero rows (the guard is past pending) and a missing order: no row, so the two-round-trip path decides.
    for (order, event_id) in [("o3", "evt_paid"), ("o9", "evt_missing")] {
        assert_eq!(run(&client, &one, order, event_id).await, Err(SqlState::INVALID_TEXT_REPRESENTATION));
        assert_eq!(row_of(&client, &table, event_id).await, None, "{event_id}");
    }

    // More rows than configured: nothing applied, no row.
    let all_pending = Statement {
        sql: format!("UPDATE {schema}.orders SET n = n + 1 WHERE status = 'pending' AND $1::text IS NOT NULL"),
        ..guarded_update(&schema)
    };
    let one_too_many = OneTrip::new(&table, &all_pending);
    assert_eq!(run(&client, &one_too_many, "o1", "evt_many").await, Err(SqlState::INVALID_TEXT_REPRESENTATION));
    assert_eq!((n_of(&client, &schema, "o1").await, n_of(&client, &schema, "o2").await), (1, 0));
    assert_eq!(row_of(&client, &table, "evt_many").await, None);

    // Without `rows`, any count but 0 is applied, and the count is what the row stores.
    let any_count = Statement { rows: None, ..all_pending };
    assert_eq!(run(&client, &OneTrip::new(&table, &any_count), "o1", "evt_any").await, Ok(()));
    assert_eq!(row_of(&client, &table, "evt_any").await, Some(("applied".to_owned(), vec![2])));
    client.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.expect("drop");
}

#[tokio::test]
async fn of_two_transactions_racing_one_event_id_exactly_one_applies_the_effect() {
    let client = connect().await;
    let (table, schema) = fresh_schema(&client).await;
    let one = OneTrip::new(&table, &guarded_update(&schema));
    let mut expected_n = 0;
    for first_commits in [true, false] {
        let event_id = format!("evt_race_{first_commits}");
        let (first, second) = (connect().await, connect().await);
        first.batch_execute("BEGIN").await.expect("begin");
        assert_eq!(run(&first, &one, "o2", &event_id).await, Ok(()));
        // The second waits on the first transaction's uncommitted row (and its row lock on the order).
        let racing = run(&second, &one, "o2", &event_id);
        tokio::pin!(racing);
        assert!(
            tokio::time::timeout(Duration::from_millis(300), &mut racing).await.is_err(),
            "the second statement must wait for the first transaction, not decide on its own"
        );
        first.batch_execute(if first_commits { "COMMIT" } else { "ROLLBACK" }).await.expect("end the first");
        let expected = if first_commits { Err(SqlState::INVALID_TEXT_REPRESENTATION) } else { Ok(()) };
        assert_eq!(racing.await, expected, "{event_id}");
        expected_n += 1;
        assert_eq!(n_of(&client, &schema, "o2").await, expected_n, "{event_id}: applied once");
        assert_eq!(row_of(&client, &table, &event_id).await, Some(("applied".to_owned(), vec![1])), "{event_id}");
    }
    client.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.expect("drop");
}

#[tokio::test]
async fn a_statement_that_cannot_be_wrapped_does_not_prepare() {
    let client = connect().await;
    let (table, schema) = fresh_schema(&client).await;
    for sql in [
        format!("UPDATE {schema}.orders SET n = n + 1 WHERE id = $1 RETURNING n"),
        format!("SELECT n FROM {schema}.orders WHERE id = $1"),
    ] {
        let statement = Statement { sql: sql.clone(), ..guarded_update(&schema) };
        client.prepare(&statement.sql).await.expect("the statement alone prepares");
        let error = client.prepare(OneTrip::new(&table, &statement).sql()).await.expect_err("wrapped, it does not");
        assert_eq!(error.code(), Some(&SqlState::SYNTAX_ERROR), "{sql}");
    }
    client.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.expect("drop");
}

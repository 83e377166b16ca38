//! The dedupe row of the `postgres` handler (`consumer/src/handler/postgres/gate.rs`) against the stack's
//! PostgreSQL: the first transaction to insert an event's row does the work, a committed row makes every later
//! attempt a duplicate, a transaction that rolls back or whose connection dies leaves nothing behind, and of two
//! transactions racing one event id exactly one does the work, whichever way the first one ends.

use std::time::Duration;

use hookline_consumer::handler::postgres::gate::{DedupeTable, EventKey, Gate, Outcome};
use hookline_tests::postgres::connect;
use tokio_postgres::Client;

/// A dedupe table of the test's own (in a schema dropped by the caller), created by the migration's SQL.
async fn fresh_table(client: &Client) -> (DedupeTable, String) {
    let schema = format!("gate_{}", uuid::Uuid::new_v4().simple());
    let table = DedupeTable::new(&format!("{schema}.processed")).expect("a valid name");
    client.batch_execute(&format!("CREATE SCHEMA {schema}; {}", table.create_sql())).await.expect("migration");
    client.batch_execute(&table.create_sql()).await.expect("the migration runs twice");
    (table, schema)
}

const KEY: EventKey<'static> = EventKey { service: "billing", source: "stripe", event_id: "evt_1" };

/// Opens a transaction on `client` by hand (BEGIN), so two of them can be held open at once in one test.
async fn begin(client: &Client) {
    client.batch_execute("BEGIN").await.expect("begin");
}

#[tokio::test]
async fn a_committed_row_makes_every_later_attempt_a_duplicate_and_records_its_outcome() {
    let mut client = connect().await;
    let (table, schema) = fresh_table(&client).await;

    let transaction = client.transaction().await.expect("begin");
    assert_eq!(table.acquire(&transaction, table.acquire_sql(), &KEY).await.expect("acquire"), Gate::Acquired);
    table.record_outcome(&transaction, table.record_sql(), &KEY, Outcome::Skipped, &[0, 1]).await.expect("record");
    transaction.commit().await.expect("commit");

    let transaction = client.transaction().await.expect("begin");
    assert_eq!(table.acquire(&transaction, table.acquire_sql(), &KEY).await.expect("acquire"), Gate::AlreadyApplied);
    transaction.rollback().await.expect("rollback");

    // Another service on the same stream does its own work once; so does the same event id from another source.
    let transaction = client.transaction().await.expect("begin");
    let analytics = EventKey { service: "analytics", ..KEY };
    let other_source = EventKey { source: "github", ..KEY };
    assert_eq!(table.acquire(&transaction, table.acquire_sql(), &analytics).await.expect("acquire"), Gate::Acquired);
    assert_eq!(table.acquire(&transaction, table.acquire_sql(), &other_source).await.expect("acquire"), Gate::Acquired);
    transaction.commit().await.expect("commit");

    let row = client
        .query_one(
            &format!(
                "SELECT outcome, row_counts FROM {} WHERE service = 'billing' AND source = 'stripe' AND event_id = 'evt_1'",
                table.name()
            ),
            &[],
        )
        .await
        .expect("the row");
    assert_eq!((row.get::<_, String>(0), row.get::<_, Vec<i64>>(1)), ("skipped".to_owned(), vec![0, 1]));
    let rows: i64 =
        client.query_one(&format!("SELECT count(*) FROM {}", table.name()), &[]).await.expect("count").get(0);
    assert_eq!(rows, 3);
    client.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.expect("drop");
}

#[tokio::test]
async fn a_rolled_back_transaction_or_a_dead_connection_leaves_no_row_and_the_next_attempt_does_the_work() {
    let mut client = connect().await;
    let (table, schema) = fresh_table(&client).await;

    let transaction = client.transaction().await.expect("begin");
    assert_eq!(table.acquire(&transaction, table.acquire_sql(), &KEY).await.expect("acquire"), Gate::Acquired);
    transaction.rollback().await.expect("rollback: the handler failed");

    // A consumer killed mid-transaction: its connection ends, the server rolls the transaction back.
    let killed = connect().await;
    begin(&killed).await;
    assert_eq!(table.acquire(&killed, table.acquire_sql(), &KEY).await.expect("acquire"), Gate::Acquired);
    drop(killed);

    let transaction = client.transaction().await.expect("begin");
    assert_eq!(table.acquire(&transaction, table.acquire_sql(), &KEY).await.expect("the row is gone"), Gate::Acquired);
    transaction.commit().await.expect("commit");
    client.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.expect("drop");
}

#[tokio::test]
async fn of_two_transactions_racing_one_event_id_exactly_one_does_the_work() {
    let client = connect().await;
    let (table, schema) = fresh_table(&client).await;
    for first_commits in [true, false] {
        let event_id = format!("evt_race_{first_commits}");
        let key = EventKey { event_id: &event_id, ..KEY };
        let (first, second) = (connect().await, connect().await);
        begin(&first).await;
        begin(&second).await;
        assert_eq!(table.acquire(&first, table.acquire_sql(), &key).await.expect("acquire"), Gate::Acquired);
        // The second insert waits on the first transaction's uncommitted row: it has no answer while that is open.
        let racing = table.acquire(&second, table.acquire_sql(), &key);
        tokio::pin!(racing);
        assert!(
            tokio::time::timeout(Duration::from_millis(300), &mut racing).await.is_err(),
            "the second transaction must wait for the first, not decide on its own"
        );
        first.batch_execute(if first_commits { "COMMIT" } else { "ROLLBACK" }).await.expect("end the first");
        let expected = if first_commits { Gate::AlreadyApplied } else { Gate::Acquired };
        assert_eq!(racing.await.expect("the second decides once the first ended"), expected, "{event_id}");
        second.batch_execute("COMMIT").await.expect("end the second");
        let rows: i64 = client
            .query_one(&format!("SELECT count(*) FROM {} WHERE event_id = $1", table.name()), &[&event_id])
            .await
            .expect("count")
            .get(0);
        assert_eq!(rows, 1, "{event_id}: one row, whichever transaction wrote it");
    }
    client.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.expect("drop");
}

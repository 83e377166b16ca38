//! The SQLSTATE policy of the `postgres` handler (`consumer/src/handler/postgres/sqlstate.rs`) against the errors a
//! real PostgreSQL raises, each provoked the way it happens in production: a duplicate key, a body value that is not
//! a number, a dropped table, a statement or lock timeout, a serialization failure, a read-only server, a user's
//! trigger refusing, a cached plan gone stale after DDL, a wrong password, and a fast restart (a failover as its
//! clients see it). Needs the stack's PostgreSQL (`scripts/stack up`).

use std::time::Duration;

use hookline_consumer::handler::postgres::sqlstate::{Disposition, classify_error};
use hookline_tests::{StackRestore, postgres::connect, postgres_config, stack_script};
use tokio_postgres::{Client, NoTls};

/// The restart case ends every connection to the server: the cases run one at a time.
static SERVER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A schema of the test's own, dropped at the end by the caller's `drop_schema`.
async fn fresh_schema(client: &Client) -> String {
    let schema = format!("errors_{}", uuid::Uuid::new_v4().simple());
    client.batch_execute(&format!("CREATE SCHEMA {schema}; SET search_path = {schema}")).await.expect("schema");
    schema
}

async fn drop_schema(client: &Client, schema: &str) {
    client.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.expect("drop schema");
}

fn code_and_disposition(error: &tokio_postgres::Error) -> (Option<String>, Disposition) {
    (error.code().map(|code| code.code().to_owned()), classify_error(error))
}

#[track_caller]
fn assert_classified(result: Result<impl std::fmt::Debug, tokio_postgres::Error>, code: &str, expected: Disposition) {
    let error = result.expect_err("the statement must fail");
    assert_eq!(code_and_disposition(&error), (Some(code.to_owned()), expected), "{error:?}");
}

#[tokio::test]
async fn errors_a_real_server_raises_are_classified_by_sqlstate() {
    let _one_at_a_time = SERVER.lock().await;
    let client = connect().await;
    let schema = fresh_schema(&client).await;
    client
        .batch_execute(
            "CREATE TABLE orders (id text PRIMARY KEY, state text NOT NULL, amount int);
             INSERT INTO orders VALUES ('o1', 'pending', 10);
             CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN RAISE EXCEPTION 'order % is closed', NEW.id; END $$;
             CREATE TABLE closed (id text);
             CREATE TRIGGER closed_refuses BEFORE INSERT ON closed FOR EACH ROW EXECUTE FUNCTION refuse();",
        )
        .await
        .expect("tables");

    // The same event's data fails the same way every time: poison.
    assert_classified(
        client.execute("INSERT INTO orders VALUES ('o1', 'paid', 1)", &[]).await,
        "23505",
        Disposition::Poison,
    );
    assert_classified(
        client.execute("UPDATE orders SET amount = $1::text::int", &[&"ten"]).await,
        "22P02",
        Disposition::Poison,
    );
    assert_classified(client.execute("INSERT INTO closed VALUES ('o1')", &[]).await, "P0001", Disposition::Poison);

    // The schema changed under the consumer: every event would fail alike.
    assert_classified(
        client.execute("UPDATE missing SET state = 'paid'", &[]).await,
        "42P01",
        Disposition::SchemaChanged,
    );

    // Timeouts: the next attempt may succeed.
    client.batch_execute("SET statement_timeout = '50ms'").await.expect("set");
    assert_classified(client.execute("SELECT pg_sleep(5)", &[]).await, "57014", Disposition::Retryable);
    client.batch_execute("SET statement_timeout = 0").await.expect("reset");

    let holder = connect().await;
    holder.batch_execute(&format!("SET search_path = {schema}; BEGIN; LOCK TABLE orders")).await.expect("lock");
    client.batch_execute("SET lock_timeout = '50ms'").await.expect("set");
    assert_classified(client.execute("UPDATE orders SET state = 'paid'", &[]).await, "55P03", Disposition::Retryable);
    holder.batch_execute("ROLLBACK").await.expect("unlock");
    client.batch_execute("SET lock_timeout = 0").await.expect("reset");

    // Two SERIALIZABLE transactions that each read what the other writes: one of them fails with 40001.
    let other = connect().await;
    other.batch_execute(&format!("SET search_path = {schema}")).await.expect("path");
    for session in [&client, &other] {
        session
            .batch_execute("BEGIN ISOLATION LEVEL SERIALIZABLE; SELECT sum(amount) FROM orders")
            .await
            .expect("read");
    }
    client.execute("INSERT INTO orders VALUES ('o2', 'pending', 1)", &[]).await.expect("first writer");
    other.execute("INSERT INTO orders VALUES ('o3', 'pending', 1)", &[]).await.expect("second writer");
    client.batch_execute("COMMIT").await.expect("the first commit wins");
    assert_classified(other.batch_execute("COMMIT").await, "40001", Disposition::Retryable);

    // A server that became read-only (a standby after a failover) refuses writes with 25006.
    client.batch_execute("SET default_transaction_read_only = on").await.expect("set");
    assert_classified(client.execute("UPDATE orders SET state = 'paid'", &[]).await, "25006", Disposition::Retryable);
    client.batch_execute("SET default_transaction_read_only = off").await.expect("reset");

    // A prepared statement whose result type DDL changed: re-prepared once, then it runs.
    let statement = client.prepare("SELECT * FROM orders WHERE id = $1").await.expect("prepare");
    client.batch_execute("ALTER TABLE orders ADD COLUMN note text").await.expect("ddl");
    assert_classified(client.query(&statement, &[&"o1"]).await, "0A000", Disposition::Reprepare);
    let statement = client.prepare("SELECT * FROM orders WHERE id = $1").await.expect("prepare again");
    assert_eq!(client.query(&statement, &[&"o1"]).await.expect("the new plan runs").len(), 1);

    drop_schema(&client, &schema).await;
}

#[tokio::test]
async fn a_wrong_password_is_a_schema_or_grants_problem_not_poison() {
    let _one_at_a_time = SERVER.lock().await;
    let mut config = postgres_config();
    config.password("not the password");
    let error = config.connect(NoTls).await.err().expect("a wrong password is refused");
    assert_eq!(code_and_disposition(&error), (Some("28P01".to_owned()), Disposition::SchemaChanged), "{error:?}");
}

#[tokio::test]
async fn a_fast_restart_fails_the_open_connection_as_retryable_and_a_new_one_works() {
    let _one_at_a_time = SERVER.lock().await;
    let _restore = StackRestore("start-postgres");
    let client = connect().await;
    client.execute("SELECT 1", &[]).await.expect("connected");
    stack_script("restart-postgres");
    let error = client.execute("SELECT 1", &[]).await.expect_err("the restart ended this connection");
    // 57P01 when the server's goodbye was read first, no code when the closed socket was: retryable either way.
    let (code, disposition) = code_and_disposition(&error);
    assert!(matches!(code.as_deref(), None | Some("57P01")), "{error:?}");
    assert_eq!(disposition, Disposition::Retryable, "{error:?}");
    let mut reconnected = None;
    for _ in 0..50 {
        if let Ok((client, connection)) = postgres_config().connect(NoTls).await {
            tokio::spawn(connection);
            reconnected = Some(client);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let client = reconnected.expect("the server accepts connections again within 5 s");
    client.execute("SELECT 1", &[]).await.expect("a new connection works");
}

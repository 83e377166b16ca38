//! No customer data in places that outlive it: a PostgreSQL error caused by an event is stored in the DLQ (kept for
//! ever), logged, put in a span and shown by the replayer with its SQLSTATE and the names the server reports
//! (constraint, table, column), never with a DETAIL (`Failing row contains (...)`, `Key (id)=(...)`) or a message
//! that quotes a value. Each case plants a secret value in the failing row, or in the value that fails, and looks
//! for it. Needs the stack's PostgreSQL (`scripts/stack up`, `scripts/stack start-postgres`).

use std::time::Duration;

use hookline_consumer::{
    config::postgres::{PostgresConfig, StatementConfig, ZeroRows},
    handler::postgres::describe,
};
use hookline_dlq_replayer::{ReplayerConfig, ops::Replayer};
use hookline_tests::{
    Delivery, TestStack, eventually,
    postgres::{connect, migrate, postgres_handler, start_configured_consumer},
    postgres_handler_config, read,
};

fn secret() -> String {
    format!("secret-{}@example.com", uuid::Uuid::new_v4().simple())
}

#[tokio::test]
async fn database_errors_name_the_sqlstate_and_constraint_but_never_a_value() {
    let client = connect().await;
    let schema = format!("redaction_{}", uuid::Uuid::new_v4().simple());
    let planted = secret();
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; SET search_path = {schema};
             CREATE TABLE customers (id int PRIMARY KEY, email text UNIQUE, balance int CHECK (balance >= 0),
                                     tier text NOT NULL DEFAULT 'basic');
             INSERT INTO customers VALUES (42, '{planted}', 10);
             CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN RAISE EXCEPTION 'refused %', NEW.email; END $$;
             CREATE TABLE refusing (email text);
             CREATE TRIGGER refuses BEFORE INSERT ON refusing FOR EACH ROW EXECUTE FUNCTION refuse();
             CREATE FUNCTION refuse_as_server() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN RAISE EXCEPTION USING MESSAGE = format('bad %s', NEW.email), ERRCODE = '55000'; END $$;
             CREATE TABLE refusing_as_server (email text);
             CREATE TRIGGER refuses BEFORE INSERT ON refusing_as_server FOR EACH ROW EXECUTE FUNCTION refuse_as_server();
             CREATE FUNCTION refuse_naming() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN RAISE EXCEPTION 'denied' USING ERRCODE = '42501', COLUMN = NEW.email; END $$;
             CREATE TABLE refusing_naming (email text);
             CREATE TRIGGER refuses BEFORE INSERT ON refusing_naming FOR EACH ROW EXECUTE FUNCTION refuse_naming();"
        ))
        .await
        .expect("schema");

    let check = client.execute("UPDATE customers SET balance = balance - 100 WHERE id = 42", &[]).await;
    let unique = client.execute("INSERT INTO customers VALUES (43, $1, 1)", &[&planted]).await;
    let not_null = client.execute("UPDATE customers SET tier = NULL WHERE id = 42", &[]).await;
    let bad_input = client.execute("UPDATE customers SET balance = $1::text::int", &[&planted]).await;
    let raised = client.execute("INSERT INTO refusing VALUES ($1)", &[&planted]).await;
    // A user RAISE with a code in a class whose server messages quote no value (object state, access): the
    // message, or a name, is the function's own and held the row's email before the fix.
    let raised_as_server = client.execute("INSERT INTO refusing_as_server VALUES ($1)", &[&planted]).await;
    let raised_naming = client.execute("INSERT INTO refusing_naming VALUES ($1)", &[&planted]).await;
    for (result, code, name) in [
        (check, "23514", "customers_balance_check"),
        (unique, "23505", "customers_email_key"),
        (not_null, "23502", "tier"),
        (bad_input, "22P02", "22P02"),
        (raised, "P0001", "P0001"),
        (raised_as_server, "55000", "55000"),
        (raised_naming, "42501", "42501"),
    ] {
        let error = result.expect_err("the statement fails");
        // The server did send the value: the test would prove nothing otherwise.
        let db = error.as_db_error().expect("a server error");
        let sent = [Some(db.message()), db.detail(), db.where_(), db.column()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(sent.contains(&planted), "{code}: the server sent no value to leak: {sent}");
        let line = describe(&error);
        assert!(line.starts_with(code), "{line}");
        assert!(line.contains(name), "{line}");
        assert!(!line.contains(&planted), "{code} leaks the row's value: {line}");
    }
    client.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.expect("drop");
}

#[tokio::test]
async fn a_failing_row_never_reaches_the_dlq_or_the_console() {
    let db = connect().await;
    let schema = format!("redaction_{}", uuid::Uuid::new_v4().simple());
    let planted = secret();
    db.batch_execute(&format!(
        "CREATE SCHEMA {schema};
         CREATE TABLE {schema}.customers (id int PRIMARY KEY, email text, balance int CHECK (balance >= 0));
         INSERT INTO {schema}.customers VALUES (42, '{planted}', 10);"
    ))
    .await
    .expect("schema");
    let for_config = schema.clone();
    let mut stack = TestStack::builder()
        .consumer_config(move |config| {
            config.handler = postgres_handler(PostgresConfig {
                statements: vec![StatementConfig {
                    sql: format!("UPDATE {for_config}.customers SET balance = balance - $2 WHERE id = $1"),
                    params: vec!["/customer".to_owned(), "/amount".to_owned()],
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

    stack.post_accepted(&Delivery::new(r#"{"customer":42,"amount":100}"#.to_owned())).await;
    eventually(Duration::from_secs(30), "the overdraft dead-lettered", || async {
        !stack.records(&stack.kafka.dlq_topic).await.is_empty()
    })
    .await;
    let dead = stack.records(&stack.kafka.dlq_topic).await.remove(0);
    let error = read::dead_letter_failure(&dead).error;
    assert!(error.contains("23514") && error.contains("customers_balance_check"), "{error}");
    assert!(!error.contains(&planted), "the DLQ keeps the customer's row for ever: {error}");
    for h in read::headers(&dead).iter() {
        let value = String::from_utf8_lossy(h.value.unwrap_or_default());
        assert!(!value.contains(&planted), "header {} holds the row: {value}", h.name);
    }

    // What the replayer (CLI, API, console) shows comes from that header.
    let replayer = Replayer::new(ReplayerConfig { kafka: stack.kafka.clone(), ..ReplayerConfig::default() }).unwrap();
    let entries = replayer.list(&Default::default()).await.expect("list");
    let shown = replayer.show(&entries[0].entry.id).await.expect("show").expect("the entry");
    let as_json = serde_json::to_string(&shown).expect("json");
    assert!(!as_json.contains(&planted), "{as_json}");
    stack.shutdown().await;
    db.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).await.expect("drop");
}

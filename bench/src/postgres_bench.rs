//! The `postgres` handler's benches (issue 22): the ceiling, a bare `INSERT ... ON CONFLICT DO NOTHING RETURNING`
//! loop into a dedupe table over as many connections as the handler's pool, each insert its own transaction, over
//! the same TLS connection as the handler; and the tables a consumer run needs, created from its overlay's
//! `[handler.postgres]` as `hookline-consumer migrate` would.

use std::{sync::Arc, time::Duration};

use hookline_common::{config::Table, http_client};
use hookline_consumer::{
    config::postgres::PostgresConfig,
    handler::postgres::{PostgresHandler, gate::DedupeTable},
};
use serde::Serialize;
use tokio::time::Instant;

/// Where the database is: the stack's variables (`scripts/stack env`).
#[derive(Debug, Clone)]
pub struct Database {
    pub url: String,
    pub password_file: String,
    pub ca_file: String,
}

#[derive(Debug, Serialize)]
pub struct CeilingReport {
    pub connections: usize,
    pub duration_s: f64,
    pub inserts: u64,
    pub inserts_per_s: f64,
}

async fn connect(database: &Database) -> anyhow::Result<tokio_postgres::Client> {
    let mut config: tokio_postgres::Config = database.url.parse()?;
    config.password(std::fs::read_to_string(&database.password_file)?.trim());
    config.ssl_mode(tokio_postgres::config::SslMode::Require);
    let tls = http_client::tls_client_config(Some(database.ca_file.as_ref()), None)?;
    let (client, connection) = config.connect(tokio_postgres_rustls::MakeRustlsConnect::new(tls)).await?;
    tokio::spawn(connection);
    Ok(client)
}

/// `connections` loops of single-statement transactions inserting new dedupe rows into `table` for `duration`.
pub async fn ceiling(
    database: &Database,
    table: &str,
    connections: usize,
    duration: Duration,
) -> anyhow::Result<CeilingReport> {
    let table = DedupeTable::new(table).map_err(anyhow::Error::msg)?;
    let setup = connect(database).await?;
    if let Some((schema, _)) = table.name().split_once('.') {
        setup.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}")).await?;
    }
    setup.batch_execute(&table.create_sql()).await?;
    let table = Arc::new(table);
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::new();
    for connection in 0..connections {
        let client = connect(database).await?;
        let table = table.clone();
        tasks.push(tokio::spawn(async move {
            let statement = client.prepare(table.acquire_sql()).await?;
            let mut inserted = 0_u64;
            while Instant::now() < deadline {
                let event_id = format!("ceiling-{connection}-{inserted}-{}", uuid::Uuid::new_v4().simple());
                let row = client.query_opt(&statement, &[&"bench", &"github", &event_id]).await?;
                anyhow::ensure!(row.is_some(), "a new event id must insert its row");
                inserted += 1;
            }
            anyhow::Ok(inserted)
        }));
    }
    let mut inserts = 0;
    for task in tasks {
        inserts += task.await??;
    }
    let duration_s = started.elapsed().as_secs_f64();
    Ok(CeilingReport { connections, duration_s, inserts, inserts_per_s: inserts as f64 / duration_s })
}

/// Creates the tables of the overlay's `[handler.postgres]` (its dedupe or inbox table) and runs its `setup` SQL
/// (the tables its statements touch), if it has a postgres handler. Relative paths resolve from `config_dir`.
pub async fn prepare_overlay(overlay: &Table, setup: Option<&str>, config_dir: &std::path::Path) -> anyhow::Result<()> {
    let Some(postgres) = overlay.get("handler").and_then(|handler| handler.get("postgres")) else { return Ok(()) };
    let postgres: PostgresConfig = postgres.clone().try_into()?;
    let handler = PostgresHandler::from_config(&postgres, config_dir).map_err(anyhow::Error::msg)?;
    if let Some(setup) = setup {
        handler.batch_execute(setup).await.map_err(anyhow::Error::msg)?;
    }
    handler.migrate().await.map_err(anyhow::Error::msg)
}

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
    /// CPU per insert of the database's processes and of the bench (the clients), over the whole run.
    pub cpu: crate::cpu::CpuPerEvent,
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

/// `connections` loops of single-statement transactions inserting new dedupe rows into `table` for `duration`;
/// with `work_sql`, transactions of the insert and that statement (`$1` the event id), sent as the handler sends
/// them (BEGIN, the insert and the statement at once, then COMMIT) but with nothing checked: the same work done
/// by hand.
pub async fn ceiling(
    database: &Database,
    table: &str,
    connections: usize,
    duration: Duration,
    work_sql: Option<&str>,
) -> anyhow::Result<CeilingReport> {
    let table = DedupeTable::new(table).map_err(anyhow::Error::msg)?;
    let setup = connect(database).await?;
    if let Some((schema, _)) = table.name().split_once('.') {
        setup.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}")).await?;
    }
    setup.batch_execute(&table.create_sql()).await?;
    let table = Arc::new(table);
    // Connected and prepared before the clock and the CPU count start; every loop starts at once.
    let mut clients = Vec::new();
    for _ in 0..connections {
        let client = connect(database).await?;
        let statement = client.prepare(table.acquire_sql()).await?;
        let work = match work_sql {
            Some(sql) => Some(client.prepare(sql).await?),
            None => None,
        };
        clients.push((client, statement, work));
    }
    let cpu_before = crate::cpu::Sample::now("postgres", None);
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::new();
    for (connection, (client, statement, work)) in clients.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            let mut inserted = 0_u64;
            while Instant::now() < deadline {
                let event_id = format!("ceiling-{connection}-{inserted}-{}", uuid::Uuid::new_v4().simple());
                let row = match &work {
                    None => client.query_opt(&statement, &[&"bench", &"github", &event_id]).await?,
                    Some(work) => {
                        let key: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&"bench", &"github", &event_id];
                        let work_params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&event_id];
                        let (began, row, worked) = tokio::join!(
                            client.batch_execute("BEGIN"),
                            client.query_opt(&statement, &key),
                            client.execute(work, &work_params),
                        );
                        began?;
                        worked?;
                        client.batch_execute("COMMIT").await?;
                        row?
                    }
                };
                anyhow::ensure!(row.is_some(), "a new event id must insert its row");
                inserted += 1;
            }
            // The connection stays open until every loop is done, so its backend's time is counted.
            anyhow::Ok((inserted, client))
        }));
    }
    let mut inserts = 0;
    let mut open = Vec::new();
    for task in tasks {
        let (inserted, client) = task.await??;
        inserts += inserted;
        open.push(client);
    }
    let duration_s = started.elapsed().as_secs_f64();
    let cpu = cpu_before.per_event(&crate::cpu::Sample::now("postgres", None), inserts);
    drop(open);
    Ok(CeilingReport { connections, duration_s, inserts, inserts_per_s: inserts as f64 / duration_s, cpu })
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

//! `orders-consumer`: the hookline consumer with [`PayOrder`] as its `[handler]`, configured like
//! `hookline-consumer` (the same file: `[handler] kind = "postgres"` and a `[handler.postgres]` table with the
//! database, and no `statements`). `orders-consumer migrate` creates the dedupe table and the example's `orders`.

use std::sync::Arc;

use anyhow::Context;
use hookline_consumer::{ConsumerConfig, Loaded, handler::postgres::PostgresHandler};
use hookline_example_orders_consumer::{PayOrder, SCHEMA_SQL};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    hookline_common::telemetry::init_tracing();
    let mut args = std::env::args().skip(1);
    let (migrate, path) = match (args.next(), args.next()) {
        (Some(command), Some(path)) if command == "migrate" => (true, path),
        (Some(path), None) => (false, path),
        _ => anyhow::bail!("usage: orders-consumer [migrate] <consumer.toml>"),
    };
    let config = ConsumerConfig::read(Some(path.as_ref()))?;
    if migrate {
        let postgres = config.handler.postgres.as_ref().context("the config has no [handler.postgres]")?;
        let handler =
            PostgresHandler::with_work(postgres, &config.config_dir, Arc::new(PayOrder)).map_err(anyhow::Error::msg)?;
        handler.migrate().await.map_err(anyhow::Error::msg)?;
        handler.batch_execute(SCHEMA_SQL).await.map_err(anyhow::Error::msg)?;
        return Ok(());
    }
    let loaded = Loaded::build_with_work(config, Arc::new(PayOrder))?;
    let admin = tokio::net::TcpListener::bind(&loaded.config.admin_addr).await?;
    hookline_consumer::run(loaded, admin, hookline_common::signals::shutdown_on_signals()).await?;
    Ok(())
}

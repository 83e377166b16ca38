use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use hookline_common::{
    config::{self, env},
    metrics_catalog, telemetry,
};
use hookline_gateway::{ConfigOrigin, Listeners, Loaded, metrics::Metrics};
use tokio::net::TcpListener;

/// The hookline webhook gateway.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// TOML config file.
    #[arg(long, env = env::CONFIG)]
    config: Option<PathBuf>,
    /// Print the effective config (the file, every default, environment overrides; inline credentials
    /// redacted) as TOML and exit. Reads no secret and connects to nothing; an invalid config exits non-zero.
    #[arg(long)]
    print_config: bool,
    /// Print every metric family this binary exports (name, type, help, label names) as JSON and exit.
    #[arg(long)]
    print_metrics: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    telemetry::init_tracing();
    let args = Args::parse();
    if args.print_metrics {
        println!("{}", metrics_catalog::to_json(&Metrics::describe()?)?);
        return Ok(());
    }
    if args.print_config {
        print!("{}", config::effective_toml(&Loaded::read_checked(args.config.as_deref())?)?);
        return Ok(());
    }
    let loaded = Loaded::load(args.config.as_deref())?;
    let config = &loaded.config;
    let public =
        TcpListener::bind(&config.listen_addr).await.with_context(|| format!("bind {}", config.listen_addr))?;
    let admin = TcpListener::bind(&config.admin_addr).await.with_context(|| format!("bind {}", config.admin_addr))?;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        listen = %public.local_addr()?,
        admin = %admin.local_addr()?,
        brokers = %config.kafka.brokers,
        topic = %config.kafka.inbound_topic,
        sources = loaded.sources.len(),
        "gateway starting"
    );
    let shutdown = hookline_common::signals::shutdown_on_signals();
    let origin = match &args.config {
        Some(path) => ConfigOrigin::File(path.clone()),
        None => ConfigOrigin::Fixed(Box::new(config.clone())),
    };
    hookline_gateway::run_with_origin(loaded, origin, Listeners { public, admin }, shutdown).await?;
    tracing::info!("gateway stopped");
    Ok(())
}

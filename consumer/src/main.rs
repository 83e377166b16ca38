use anyhow::Context;
use clap::Parser;
use hookline_common::{cli::ServiceArgs, telemetry};
use hookline_consumer::{Loaded, metrics::Metrics};
use tokio::net::TcpListener;

/// A hookline consumer-group member.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    #[command(flatten)]
    service: ServiceArgs,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    hookline_common::cli::exit_code(run().await)
}

async fn run() -> anyhow::Result<()> {
    telemetry::init_tracing();
    let args = Args::parse();
    if args.service.print_requested(Metrics::describe, Loaded::read_checked)? {
        return Ok(());
    }
    let loaded = Loaded::load(args.service.config())?;
    let config = &loaded.config;
    let admin = TcpListener::bind(&config.admin_addr).await.with_context(|| format!("bind {}", config.admin_addr))?;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        admin = %admin.local_addr()?,
        brokers = %config.kafka.brokers,
        topic = %config.kafka.inbound_topic,
        group = %config.kafka.group_id,
        default_handler = %config.handler.kind,
        routes = config.routes.len(),
        "consumer starting"
    );
    let shutdown = hookline_common::signals::shutdown_on_signals();
    hookline_consumer::run(loaded, admin, shutdown).await?;
    Ok(())
}

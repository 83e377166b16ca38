use anyhow::Context;
use clap::Parser;
use hookline_common::{cli::ServiceArgs, telemetry};
use hookline_gateway::{ConfigOrigin, Listeners, Loaded, metrics::Metrics};
use tokio::net::TcpListener;

/// The hookline webhook gateway.
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
    let origin = match &args.service.config {
        Some(path) => ConfigOrigin::File(path.clone()),
        None => ConfigOrigin::Fixed(Box::new(config.clone())),
    };
    let telemetry = config.telemetry.clone();
    // Traces flushed after the producer's flush: the last requests' spans are exported too.
    let run = hookline_gateway::run_with_origin(loaded, origin, Listeners { public, admin }, shutdown);
    telemetry::traces::with_traces("hookline-gateway", &telemetry, run)?.await?;
    tracing::info!("gateway stopped");
    Ok(())
}

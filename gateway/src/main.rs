use anyhow::Context;
use clap::Parser;
use hookline_common::{cli::ServiceArgs, telemetry};
use hookline_gateway::{ConfigOrigin, Listeners, Loaded, metrics::Metrics, offline_verify};
use tokio::net::TcpListener;

/// The hookline webhook gateway.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    #[command(flatten)]
    service: ServiceArgs,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Check a captured request against a source's config, offline, and say which step fails (exit 1 if one does).
    Verify {
        /// The source's name in the config.
        #[arg(long)]
        source: String,
        /// A file holding the request as sent: request line, headers, an empty line, the body.
        #[arg(long)]
        request: std::path::PathBuf,
        /// Judge timestamps as of this time (RFC 3339, or Unix seconds) instead of now: when the request was sent.
        #[arg(long)]
        at: Option<String>,
    },
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
    if let Some(Command::Verify { source, request, at }) = &args.command {
        return verify_offline(args.service.config(), source, request, at.as_deref());
    }
    let loaded = Loaded::load(args.service.config())?;
    let config = &loaded.config;
    let public = hookline_common::http::bind(&config.listen_addr)
        .await
        .with_context(|| format!("bind {}", config.listen_addr))?;
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

/// `hookline-gateway verify`: prints one line per step; an error (exit 1) when the gateway would refuse it.
fn verify_offline(
    config: Option<&std::path::Path>,
    source: &str,
    request: &std::path::Path,
    at: Option<&str>,
) -> anyhow::Result<()> {
    let config = hookline_gateway::GatewayConfig::read(config)?;
    let bytes = std::fs::read(request).with_context(|| format!("read {}", request.display()))?;
    let captured = offline_verify::CapturedRequest::parse(&bytes)
        .map_err(|problem| anyhow::anyhow!("{}: {problem}", request.display()))?;
    let at_ms = match at {
        None => hookline_common::wire::now_ms(),
        Some(text) => match text.parse::<i64>() {
            Ok(seconds) => seconds.saturating_mul(1000),
            Err(_) => hookline_common::time::parse_rfc3339_ms(text).with_context(|| format!("--at `{text}`"))?,
        },
    };
    let report = offline_verify::check(&config, source, &captured, at_ms);
    for line in &report.lines {
        println!("{line}");
    }
    anyhow::ensure!(report.accepted, "the gateway would refuse this request");
    println!("the gateway would accept this request");
    Ok(())
}

use std::{io::Write, sync::Arc};

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand, error::ErrorKind};
use hookline_common::{cli::ServiceArgs, config, telemetry, wire};
use hookline_reconciler::{Loaded, Mode, Reconciler, ReconcilerConfig, RunRequest, metrics::Metrics, registration};
use tokio::net::TcpListener;

/// Find the events a provider sent that never reached hookline, and bring them in exactly once.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    #[command(flatten)]
    service: ServiceArgs,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Reconcile one source over a window. A dry run unless --apply.
    Run {
        #[arg(long)]
        source: String,
        /// Start of the window: an RFC 3339 time, or an age such as `6h` (default: the source's lookback).
        #[arg(long)]
        since: Option<String>,
        /// End of the window (same forms; default: now minus the source's settle time).
        #[arg(long)]
        until: Option<String>,
        /// Act: ask for redeliveries / fetch and produce. Without it nothing changes.
        #[arg(long)]
        apply: bool,
        /// Also ask again for events whose earlier redelivery the provider accepted but which never arrived.
        #[arg(long)]
        again_after_request: bool,
        /// The report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Ask each provider whether the source's `webhook_url` is registered, enabled and subscribed to the expected
    /// event types. Reads only: nothing is changed at any provider. Exit status 0: as expected; 2: drift found;
    /// 1: a source could not be checked.
    Registrations {
        /// Only this source (default: every source with a `webhook_url`).
        #[arg(long)]
        source: Option<String>,
        /// The report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run the indexer and the schedules, with /livez, /readyz and /metrics on `admin_addr`.
    Serve,
}

fn time_arg(text: &str, now_ms: i64) -> anyhow::Result<i64> {
    if let Ok(age) = humantime::parse_duration(text) {
        return Ok(now_ms - i64::try_from(age.as_millis())?);
    }
    hookline_common::time::parse_rfc3339_weak_ms(text)
        .with_context(|| format!("`{text}` is neither an age nor an RFC 3339 time"))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        // `registrations` found drift, or could not check a source: its report is printed, and says which.
        Ok(Some(status)) => std::process::ExitCode::from(status),
        result => hookline_common::cli::exit_code(result.map(drop)),
    }
}

/// `Some(status)`: the command's own non-zero exit status.
async fn run() -> anyhow::Result<Option<u8>> {
    let args = Args::parse();
    // The service logs like the others; a command keeps stdout for its output.
    if matches!(args.command, Some(Command::Serve)) {
        telemetry::init_tracing();
    } else {
        telemetry::init_cli_tracing();
    }
    let read_checked = |path: Option<&std::path::Path>| {
        let config = ReconcilerConfig::read(path)?;
        let mut problems = config::Problems::default();
        config.check_settings(&mut problems);
        problems.into_result().map(|()| config)
    };
    if args.service.print_requested(Metrics::describe, read_checked)? {
        return Ok(None);
    }
    let Some(command) = args.command else {
        Args::command().error(ErrorKind::MissingSubcommand, "a subcommand is required").exit()
    };
    let loaded = Loaded::load(args.service.config())?;
    if let Command::Registrations { source, json } = &command {
        // Only the providers' APIs are asked: no broker or Redis is needed to check a registration.
        let metrics = Arc::new(Metrics::register(&prometheus::Registry::new())?);
        let providers = hookline_reconciler::provider::clients(&loaded, &metrics)?;
        let report = registration::check_all(&loaded.config.sources, &providers, source.as_deref(), &metrics).await?;
        anyhow::ensure!(
            !report.sources.is_empty(),
            "no source has a webhook_url: nothing to check (see docs/operations.md#webhook-registrations)"
        );
        let mut out = std::io::stdout().lock();
        if *json {
            writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
        } else {
            write!(out, "{}", report.to_text())?;
        }
        let status = report.exit_status();
        return Ok((status != 0).then_some(status));
    }
    let telemetry = loaded.config.telemetry.clone();
    // Every command's spans are flushed before the process exits, whatever the command returned.
    let done = async {
        let config = &loaded.config;
        match command {
            Command::Serve => {
                let admin = TcpListener::bind(&config.admin_addr)
                    .await
                    .with_context(|| format!("bind {}", config.admin_addr))?;
                tracing::info!(
                    version = env!("CARGO_PKG_VERSION"),
                    admin = %admin.local_addr()?,
                    sources = config.sources.len(),
                    "reconciler starting"
                );
                hookline_reconciler::run(loaded, admin, hookline_common::signals::shutdown_on_signals()).await?;
            }
            Command::Registrations { .. } => unreachable!("answered above"),
            Command::Run { source, since, until, apply, again_after_request, json } => {
                // A broker that refuses our TLS or SASL settings: one clear line, not a run that times out.
                hookline_common::kafka_security::check_broker_accepts(
                    &config.kafka,
                    hookline_common::kafka_security::ACCEPT_CHECK_WAIT,
                )
                .await?;
                let source_config =
                    config.source(&source).with_context(|| format!("source `{source}` is not configured"))?;
                let now = wire::now_ms();
                let from_ms = match since {
                    Some(text) => time_arg(&text, now)?,
                    None => now - i64::try_from(source_config.lookback().as_millis())?,
                };
                let to_ms = match until {
                    Some(text) => time_arg(&text, now)?,
                    None => now - i64::try_from(source_config.settle_s * 1000)?,
                };
                anyhow::ensure!(from_ms < to_ms, "the window is empty: --since must be before --until");
                let metrics = Arc::new(Metrics::register(&prometheus::Registry::new())?);
                let reconciler = Reconciler::connect(loaded, metrics).await?;
                let mode = if apply { Mode::Apply } else { Mode::DryRun };
                let report = reconciler.run(&RunRequest { source, from_ms, to_ms, mode, again_after_request }).await?;
                let mut out = std::io::stdout().lock();
                if json {
                    writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
                } else {
                    writeln!(
                        out,
                        "{}: {} listed, {} accepted, {} missed{}",
                        report.source,
                        report.listed,
                        report.accepted,
                        report.missed.len(),
                        if report.dry_run { " (dry run: nothing changed; --apply to act)" } else { "" }
                    )?;
                    for missed in &report.missed {
                        writeln!(
                            out,
                            "  {} {} {:?}",
                            missed.id,
                            missed.event_type.as_deref().unwrap_or("-"),
                            missed.outcome
                        )?;
                    }
                }
            }
        }
        Ok::<(), anyhow::Error>(())
    };
    telemetry::traces::with_traces("hookline-reconciler", &telemetry, done)?.await.map(|()| None)
}

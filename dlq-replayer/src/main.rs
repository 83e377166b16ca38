use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use hookline_common::{config::env, telemetry};
use hookline_dlq_replayer::{ReplayerConfig, entries};
use tokio::net::TcpListener;

/// Inspect the hookline dead-letter topic.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// TOML config file.
    #[arg(long, env = env::CONFIG, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print every entry of the dead-letter topic.
    List {
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Run the admin listener (/livez, /readyz, /metrics).
    Serve,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    telemetry::init_tracing();
    let args = Args::parse();
    let config = ReplayerConfig::load(args.config.as_deref())?;
    match args.command {
        Command::List { json } => {
            let kafka = config.kafka.clone();
            let entries = tokio::task::spawn_blocking(move || entries::read_all(&kafka))
                .await?
                .with_context(|| format!("cannot read dead-letter topic {}", config.kafka.dlq_topic))?;
            print_entries(&entries, json)?;
        }
        Command::Serve => {
            let admin =
                TcpListener::bind(&config.admin_addr).await.with_context(|| format!("bind {}", config.admin_addr))?;
            tracing::info!(
                version = env!("CARGO_PKG_VERSION"),
                admin = %admin.local_addr()?,
                brokers = %config.kafka.brokers,
                topic = %config.kafka.dlq_topic,
                "dlq-replayer starting"
            );
            hookline_dlq_replayer::serve(config, admin, hookline_common::signals::shutdown_on_signals()).await?;
        }
    }
    Ok(())
}

fn print_entries(entries: &[hookline_common::wire::DeadLetterEntry], json: bool) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if json {
        for entry in entries {
            writeln!(out, "{}", serde_json::to_string(entry)?)?;
        }
        return Ok(());
    }
    writeln!(out, "{} dead-letter entries", entries.len())?;
    let dash = || "-".to_owned();
    for entry in entries {
        writeln!(
            out,
            "{}  source={}  event_id={}  class={}  attempts={}  error={}",
            entry.id,
            entry.source.clone().unwrap_or_else(dash),
            entry.event_id.clone().unwrap_or_else(dash),
            entry.error_class.clone().unwrap_or_else(dash),
            entry.attempts.map_or_else(dash, |n| n.to_string()),
            entry.error.clone().unwrap_or_else(dash),
        )?;
    }
    Ok(())
}

//! The command line: [`run`] reads the arguments and the config, and hands each subcommand to the module of its
//! concern: the dead-letter entries ([`entries`]), the events of the inbound topic ([`events`]: search,
//! re-process, lookup), the routes' pauses ([`routes`]). Each prints to stdout, as a table or as JSON.

mod args;
mod entries;
mod events;
mod identity;
mod routes;

use std::io::Write;

use anyhow::Context;
use clap::{CommandFactory, Parser, error::ErrorKind};
use hookline_common::telemetry;
use hookline_dlq_replayer::{
    ReplayerConfig,
    events::SearchRequest,
    metrics::Metrics,
    ops::{DiscardRequest, PauseRequest, ReplayRequest, Replayer, ReprocessRequest},
};
use tokio::net::TcpListener;

use self::args::{Args, Command};

/// The exit code of a lookup that found nothing: distinct from an error's 1 and a usage error's 2.
const EXIT_UNKNOWN_EVENT: u8 = 3;

/// `Some(code)` when the command ends with a code other than success's though nothing failed.
pub(crate) async fn run() -> anyhow::Result<Option<std::process::ExitCode>> {
    let args = Args::parse();
    // The service logs like the others; a command keeps stdout for its output.
    if matches!(args.command, Some(Command::Serve)) {
        telemetry::init_tracing();
    } else {
        telemetry::init_cli_tracing();
    }
    // The replayer's config names its API token but reads it only when serving: loading it reads no secret.
    if args.service.print_requested(Metrics::describe, ReplayerConfig::load)? {
        return Ok(None);
    }
    let Some(command) = args.command else {
        Args::command().error(ErrorKind::MissingSubcommand, "a subcommand is required").exit()
    };
    let config = ReplayerConfig::load(args.service.config())?;
    if !matches!(command, Command::Serve) {
        // A broker that refuses our TLS or SASL settings: one clear line, not a command that times out.
        hookline_common::kafka_security::check_broker_accepts(
            &config.kafka,
            hookline_common::kafka_security::ACCEPT_CHECK_WAIT,
        )
        .await?;
    }
    let telemetry = config.telemetry.clone();
    // Every command's spans are flushed before the process exits, whatever the command returned.
    telemetry::traces::with_traces("hookline-dlq-replayer", &telemetry, dispatch(command, config))?.await
}

/// Runs one subcommand.
async fn dispatch(command: Command, config: ReplayerConfig) -> anyhow::Result<Option<std::process::ExitCode>> {
    // Not locked for the whole command: a lock held across the awaits below would deadlock against anything else
    // writing to stdout from another thread (logs once did).
    let mut out = std::io::stdout();
    let out = &mut out;
    match command {
        Command::Serve => serve(config).await?,
        Command::List { filter, limit, cursor, json } => {
            entries::list(&replayer(config)?, &filter.into(), cursor.as_deref(), limit, json, out).await?
        }
        Command::Stats { filter, json } => entries::stats(&replayer(config)?, &filter.into(), json, out).await?,
        Command::Show { id, json } => entries::show(&replayer(config)?, &id, json, out).await?,
        Command::Replay { ids, all, filter, dry_run, rate, force, past_retention, as_event_type, by, json } => {
            let filter = filter.into();
            let by = operator(by);
            let request = ReplayRequest { ids, all, filter, dry_run, rate, force, past_retention, as_event_type, by };
            entries::replay(&replayer(config)?, &request, json, out).await?
        }
        Command::Discard { ids, all, filter, dry_run, reason, by, json } => {
            let request = DiscardRequest { ids, all, filter: filter.into(), dry_run, reason, by: operator(by) };
            entries::discard(&replayer(config)?, &request, json, out).await?
        }
        Command::Reprocess { service, event_ids, from, to, source, apply, rate_per_s, by, json } => {
            let request =
                ReprocessRequest { service, event_ids, from, to, source, apply, rate_per_s, by: operator(by) };
            events::reprocess(&replayer(config)?, &request, json, out).await?
        }
        Command::Events {
            source,
            event_type,
            since,
            until,
            conditions,
            limit,
            max_records,
            max_seconds,
            reprocess,
            apply,
            by,
            json,
        } => {
            let request =
                SearchRequest { source, event_type, since, until, conditions, limit, max_records, max_seconds };
            let reprocess = reprocess.map(|service| events::ReprocessMatches { service, apply, by: operator(by) });
            events::search(&replayer(config)?, &request, reprocess, json, out).await?
        }
        Command::Lookup { source, event_id, json, trace } => {
            if !events::lookup(replayer(config)?, &source, &event_id, json, trace, out).await? {
                return Ok(Some(std::process::ExitCode::from(EXIT_UNKNOWN_EVENT)));
            }
        }
        Command::Pause { service, route, reason, by } => {
            let request = PauseRequest { service, route, reason, by: operator(by) };
            routes::pause(&replayer(config)?, &request, out).await?
        }
        Command::Resume { service, route, reason, by } => {
            let request = PauseRequest { service, route, reason, by: operator(by) };
            routes::resume(&replayer(config)?, &request, out).await?
        }
        Command::Paused { json } => routes::paused(&replayer(config)?, json, out).await?,
        Command::Tokens { command } => identity::tokens(&replayer(config)?, command, operator, out).await?,
        Command::Audit { who, what, since, limit, json } => {
            let query = hookline_dlq_replayer::identity::audit::AuditQuery { who, what, since, limit };
            identity::audit(&replayer(config)?, &query, json, out).await?
        }
    }
    Ok(None)
}

/// `serve`: the HTTP admin API (and /livez, /readyz, /metrics) on `admin_addr`, until a signal.
async fn serve(config: ReplayerConfig) -> anyhow::Result<()> {
    let admin = TcpListener::bind(&config.admin_addr).await.with_context(|| format!("bind {}", config.admin_addr))?;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        admin = %admin.local_addr()?,
        brokers = %config.kafka.brokers,
        topic = %config.kafka.dlq_topic,
        "dlq-replayer starting"
    );
    hookline_dlq_replayer::serve_api(config, admin, hookline_common::signals::shutdown_on_signals()).await?;
    Ok(())
}

/// Who runs the command, as recorded (status and control records, the audit trail): `cli:` and `--by`, else
/// `$USER`, else nothing more. Self-asserted: the CLI's credential is the Kafka account and record key it runs with,
/// which no name can be checked against; the `cli:` prefix says so, and keeps it apart from verified subjects.
fn operator(by: Option<String>) -> String {
    let name = by.or_else(|| std::env::var("USER").ok()).unwrap_or_default();
    if name.is_empty() { "cli".to_owned() } else { format!("cli:{name}") }
}

fn replayer(config: ReplayerConfig) -> anyhow::Result<Replayer> {
    Replayer::new(config).context("cannot create the Kafka producer")
}

/// Writes `value` as pretty JSON, one document.
fn write_json(out: &mut impl Write, value: &impl serde::Serialize) -> anyhow::Result<()> {
    writeln!(out, "{}", serde_json::to_string_pretty(value)?)?;
    Ok(())
}

/// Text safe to print on a terminal: control characters (escape sequences) are shown escaped.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() && c != '\n' && c != '\t' { c.escape_default().to_string() } else { c.to_string() })
        .collect()
}

use std::io::Write;

use anyhow::Context;
use clap::{Args as ClapArgs, CommandFactory, Parser, Subcommand, error::ErrorKind};
use hookline_common::time::format_rfc3339_millis;
use hookline_common::{cli::ServiceArgs, telemetry};
use hookline_dlq_replayer::{
    ReplayerConfig,
    events::{self, SearchRequest},
    filter::Filter,
    index::Entry,
    lookup::{Lookup, render_text},
    metrics::Metrics,
    ops::{DiscardRequest, PauseRequest, ReplayRequest, Replayer, Report, ReprocessReport, ReprocessRequest},
};
use tokio::net::TcpListener;

/// Inspect, re-drive and discard hookline dead-letter entries.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    #[command(flatten)]
    service: ServiceArgs,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, ClapArgs)]
struct FilterArgs {
    /// Only entries of this source.
    #[arg(long)]
    source: Option<String>,
    /// Only entries dead-lettered by this consumer service.
    #[arg(long)]
    service: Option<String>,
    #[arg(long)]
    event_type: Option<String>,
    /// `poison` or `retryable_exhausted`.
    #[arg(long)]
    error_class: Option<String>,
    /// `new`, `replayed`, `replay_overdue`, `replay_failed`, `succeeded`, `failed_again`, `discarded` or `unverified`.
    #[arg(long)]
    status: Option<String>,
    /// Failed at or after: ms since the epoch, an RFC 3339 time, or an age such as `2h`.
    #[arg(long)]
    since: Option<String>,
    /// Failed before (same forms as --since).
    #[arg(long)]
    until: Option<String>,
    /// Text to find in the error message (case-insensitive).
    #[arg(long)]
    text: Option<String>,
}

impl From<FilterArgs> for Filter {
    fn from(args: FilterArgs) -> Self {
        Self {
            source: args.source,
            service: args.service,
            event_type: args.event_type,
            error_class: args.error_class,
            status: args.status,
            since: args.since,
            until: args.until,
            text: args.text,
        }
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List entries (all, or those matching the filter), in (partition, offset) order.
    List {
        #[command(flatten)]
        filter: FilterArgs,
        /// At most this many entries (the last line then says the cursor of the next page).
        #[arg(long)]
        limit: Option<usize>,
        /// Start after this cursor (from a previous page).
        #[arg(long)]
        cursor: Option<String>,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Count entries by source, service, error class and status.
    Stats {
        #[command(flatten)]
        filter: FilterArgs,
        #[arg(long)]
        json: bool,
    },
    /// Everything about one entry: headers, attempts, error, timestamps and the raw body.
    Show {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Re-drive entries to the inbound topic; the consumer processes each at most once.
    Replay {
        /// Entry ids (`<dlq topic>:<partition>:<offset>`).
        ids: Vec<String>,
        /// Every entry the filter matches (without --status: only `new` ones).
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        filter: FilterArgs,
        /// Show what would be replayed; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// At most this many replays per second.
        #[arg(long)]
        rate: Option<f64>,
        /// Also replay flagged entries (and discarded ones named by id), and entries without a valid MAC (to the
        /// inbound topic, with their core metadata only).
        #[arg(long)]
        force: bool,
        /// Also replay entries older than their service's dedupe retention: a re-drive could then apply an effect
        /// that already happened, so check the database first.
        #[arg(long)]
        past_retention: bool,
        /// The event type the re-driven record carries instead of the entry's own (an event whose provider does
        /// not sign its type, dead-lettered because a copy carried a wrong one): check it against the body.
        #[arg(long)]
        as_event_type: Option<String>,
        /// Who is replaying (recorded); default: $USER.
        #[arg(long)]
        by: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Record entries as discarded (they stay in Kafka; `replay --all` skips them).
    Discard {
        ids: Vec<String>,
        /// Every entry the filter matches that is not discarded yet.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        filter: FilterArgs,
        /// Show what would be discarded; change nothing.
        #[arg(long)]
        dry_run: bool,
        #[arg(long)]
        reason: String,
        #[arg(long)]
        by: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Re-process events of the inbound topic a service already processed: re-drive them to that service only,
    /// which runs its handler once per run. A dry run (lists what would be re-driven) unless --apply.
    Reprocess {
        /// The consumer service to re-process for.
        #[arg(long)]
        service: String,
        /// Only this event id (repeatable); without --from/--to the topic's whole retention is searched.
        #[arg(long = "event-id")]
        event_ids: Vec<String>,
        /// Records the broker timestamped at or after this RFC 3339 time.
        #[arg(long)]
        from: Option<String>,
        /// Records the broker timestamped before this RFC 3339 time.
        #[arg(long)]
        to: Option<String>,
        /// Only records of this source.
        #[arg(long)]
        source: Option<String>,
        /// Record the request and re-drive; without it nothing changes.
        #[arg(long)]
        apply: bool,
        /// At most this many records per second.
        #[arg(long)]
        rate_per_s: Option<f64>,
        /// Who is asking (recorded); default: $USER.
        #[arg(long)]
        by: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Where is this event? Per service: processed (when, how long, which record), being processed, waiting in
    /// its retry topic, dead-lettered (and replayed, with the outcome); and when and where it was accepted.
    /// Exits 3 when hookline knows nothing of the event.
    Lookup {
        source: String,
        event_id: String,
        #[arg(long)]
        json: bool,
        /// Also print the trace id of the records read (their `traceparent` header), or `no trace`.
        #[arg(long)]
        trace: bool,
    },
    /// Search accepted events in Kafka: one source's records (and type's) between two times whose JSON body
    /// meets every --where, each MAC-checked, with its position, accepted time and each service's state.
    Events {
        #[arg(long)]
        source: String,
        #[arg(long = "type")]
        event_type: Option<String>,
        /// Records timestamped at or after this RFC 3339 time.
        #[arg(long)]
        since: String,
        /// Records timestamped before this RFC 3339 time; default now.
        #[arg(long)]
        until: Option<String>,
        /// '<json pointer> <op> <value>', op one of == != in exists prefix < <= > >= (repeatable: all must hold).
        #[arg(long = "where")]
        conditions: Vec<String>,
        /// At most this many matches (default events.default_limit).
        #[arg(long)]
        limit: Option<usize>,
        /// Stop after reading this many records (at most events.max_records).
        #[arg(long)]
        max_records: Option<u64>,
        /// Stop after this many seconds (at most events.max_seconds).
        #[arg(long)]
        max_seconds: Option<u64>,
        /// Hand the matches of the inbound topic to `reprocess` for this service: a dry run unless --apply.
        #[arg(long)]
        reprocess: Option<String>,
        /// With --reprocess: record the request and re-drive.
        #[arg(long, requires = "reprocess")]
        apply: bool,
        #[arg(long)]
        by: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Pause one route of a consumer service (a downstream's maintenance): every instance stops calling its
    /// handler for that route within seconds; its events wait, none is lost, skipped or sent twice.
    Pause {
        service: String,
        /// The route as the service's metrics label it: the source, or `source:type,type`.
        route: String,
        /// Why (required; shown to other operators).
        #[arg(long)]
        reason: String,
        /// Who is pausing (recorded); default: $USER.
        #[arg(long)]
        by: Option<String>,
    },
    /// Resume a paused route: its waiting events run at full speed, each with a fresh retry budget.
    Resume {
        service: String,
        route: String,
        #[arg(long)]
        reason: String,
        #[arg(long)]
        by: Option<String>,
    },
    /// The routes paused now: service, route, since when, by whom and why.
    Paused {
        #[arg(long)]
        json: bool,
    },
    /// Run the HTTP admin API (and /livez, /readyz, /metrics) on `admin_addr`.
    Serve,
}

/// The exit code of a lookup that found nothing: distinct from an error's 1 and a usage error's 2.
const EXIT_UNKNOWN_EVENT: u8 = 3;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(Some(code)) => code,
        Ok(None) => std::process::ExitCode::SUCCESS,
        Err(error) => hookline_common::cli::exit_code(Err(error)),
    }
}

/// `Some(code)` when the command ends with a code other than success's though nothing failed.
async fn run() -> anyhow::Result<Option<std::process::ExitCode>> {
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
    let operator = |by: Option<String>| by.or_else(|| std::env::var("USER").ok()).unwrap_or_else(|| "cli".to_owned());
    // Not locked for the whole command: a lock held across the awaits below would deadlock against anything else
    // writing to stdout from another thread (logs once did).
    let mut out = std::io::stdout();
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
    let done = async {
        match command {
            Command::Serve => {
                let admin = TcpListener::bind(&config.admin_addr)
                    .await
                    .with_context(|| format!("bind {}", config.admin_addr))?;
                tracing::info!(
                    version = env!("CARGO_PKG_VERSION"),
                    admin = %admin.local_addr()?,
                    brokers = %config.kafka.brokers,
                    topic = %config.kafka.dlq_topic,
                    "dlq-replayer starting"
                );
                hookline_dlq_replayer::serve_api(config, admin, hookline_common::signals::shutdown_on_signals())
                    .await?;
            }
            Command::List { filter, limit, cursor, json } => {
                let page =
                    replayer(config)?.page(&filter.into(), cursor.as_deref(), limit.unwrap_or(usize::MAX)).await?;
                if json {
                    for entry in &page.entries {
                        writeln!(out, "{}", serde_json::to_string(entry)?)?;
                    }
                } else {
                    print_table(&mut out, &page.entries, page.total_matching)?;
                }
                if let Some(next) = &page.next_cursor {
                    eprintln!("more: --cursor {next}");
                }
            }
            Command::Stats { filter, json } => {
                let stats = replayer(config)?.stats(&filter.into()).await?;
                if json {
                    writeln!(out, "{}", serde_json::to_string_pretty(&stats)?)?;
                } else {
                    writeln!(out, "{} entries", stats.total)?;
                    for (title, counts) in [
                        ("by source", &stats.by_source),
                        ("by service", &stats.by_service),
                        ("by error class", &stats.by_error_class),
                        ("by status", &stats.by_status),
                    ] {
                        writeln!(out, "{title}:")?;
                        for (name, count) in counts {
                            writeln!(out, "  {name:<24} {count}")?;
                        }
                    }
                }
            }
            Command::Show { id, json } => {
                let detail = replayer(config)?.show(&id).await?.with_context(|| format!("no entry `{id}`"))?;
                if json {
                    writeln!(out, "{}", serde_json::to_string_pretty(&detail)?)?;
                } else {
                    let entry = &detail.entry;
                    writeln!(out, "entry      {}", entry.entry.id)?;
                    writeln!(out, "service    {}", entry.entry.service.as_deref().unwrap_or("- (every service)"))?;
                    writeln!(
                        out,
                        "status     {}{}",
                        entry.status.as_str(),
                        if entry.flagged { " (flagged)" } else { "" }
                    )?;
                    writeln!(out, "replays    {}   failed again: {}", entry.replays, entry.failed_again)?;
                    writeln!(out, "record mac {}", detail.authenticity)?;
                    if let Some(last) = &entry.last_status {
                        writeln!(
                            out,
                            "last       {:?} at {} by {}",
                            last.status,
                            format_rfc3339_millis(last.at_ms),
                            last.by
                        )?;
                    }
                    writeln!(out, "headers")?;
                    for (key, value) in &detail.headers {
                        writeln!(out, "  {key}: {}", printable(value))?;
                    }
                    match (&detail.body, &detail.body_base64) {
                        (Some(text), _) => {
                            writeln!(out, "body ({} bytes, text)\n{}", entry.entry.body_bytes, printable(text))?
                        }
                        (None, Some(b64)) => {
                            writeln!(out, "body ({} bytes, binary, base64)\n{b64}", entry.entry.body_bytes)?
                        }
                        (None, None) => writeln!(out, "body (empty)")?,
                    }
                }
            }
            Command::Replay { ids, all, filter, dry_run, rate, force, past_retention, as_event_type, by, json } => {
                let request = ReplayRequest {
                    ids,
                    all,
                    filter: filter.into(),
                    dry_run,
                    rate,
                    force,
                    past_retention,
                    as_event_type,
                    by: operator(by),
                };
                let report = replayer(config)?.replay(&request).await?;
                print_report(&mut out, &report, if dry_run { "would replay" } else { "replayed" }, json)?;
            }
            Command::Reprocess { service, event_ids, from, to, source, apply, rate_per_s, by, json } => {
                let request =
                    ReprocessRequest { service, event_ids, from, to, source, apply, rate_per_s, by: operator(by) };
                let report = replayer(config)?.reprocess(&request).await?;
                print_reprocess(&mut out, &report, json)?;
            }
            Command::Discard { ids, all, filter, dry_run, reason, by, json } => {
                let request = DiscardRequest { ids, all, filter: filter.into(), dry_run, reason, by: operator(by) };
                let report = replayer(config)?.discard(&request).await?;
                print_report(&mut out, &report, if dry_run { "would discard" } else { "discarded" }, json)?;
            }
            Command::Pause { service, route, reason, by } => {
                let request = PauseRequest { service, route, reason, by: operator(by) };
                let pause = replayer(config)?.pause(&request).await?;
                writeln!(out, "paused {} {} (by {}: {})", pause.service, pause.route, pause.by, pause.reason)?;
            }
            Command::Resume { service, route, reason, by } => {
                let request = PauseRequest { service, route, reason, by: operator(by) };
                let pause = replayer(config)?.resume(&request).await?;
                writeln!(out, "resumed {} {} (by {}: {})", pause.service, pause.route, pause.by, pause.reason)?;
            }
            Command::Paused { json } => {
                let pauses = replayer(config)?.pauses().await?;
                if json {
                    writeln!(out, "{}", serde_json::to_string_pretty(&pauses)?)?;
                } else if pauses.is_empty() {
                    writeln!(out, "no route is paused")?;
                } else {
                    writeln!(out, "{:<20} {:<32} {:<22} {:<12} reason", "service", "route", "since", "by")?;
                    for pause in &pauses {
                        writeln!(
                            out,
                            "{:<20} {:<32} {:<22} {:<12} {}",
                            pause.service,
                            pause.route,
                            format_rfc3339_millis(pause.at_ms),
                            pause.by,
                            printable(&pause.reason)
                        )?;
                    }
                }
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
                let replayer = replayer(config)?;
                let report = replayer
                    .search_events(&request, |progress| eprintln!("{}", events::render::progress_line(progress)))
                    .await?;
                if json {
                    writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
                } else {
                    for found in &report.matches {
                        writeln!(out, "{}", printable(&events::render::match_line(found)))?;
                    }
                    for line in events::render::summary_lines(&report) {
                        writeln!(out, "{}", printable(&line))?;
                    }
                }
                if let Some(service) = reprocess {
                    let request = events::reprocess_request(&report, &request, service, apply, operator(by));
                    if request.event_ids.is_empty() {
                        writeln!(out, "nothing to re-process: no match in the inbound topic")?;
                    } else {
                        let report = replayer.reprocess(&request).await?;
                        print_reprocess(&mut out, &report, json)?;
                    }
                }
            }
            Command::Lookup { source, event_id, json, trace } => {
                let answer = Lookup::new(replayer(config)?).lookup(&source, &event_id).await?;
                if json {
                    writeln!(out, "{}", serde_json::to_string_pretty(&answer)?)?;
                } else {
                    for line in render_text(&answer, trace) {
                        writeln!(out, "{}", printable(&line))?;
                    }
                }
                if !answer.found {
                    return Ok(Some(std::process::ExitCode::from(EXIT_UNKNOWN_EVENT)));
                }
            }
        }
        Ok::<Option<std::process::ExitCode>, anyhow::Error>(None)
    };
    telemetry::traces::with_traces("hookline-dlq-replayer", &telemetry, done)?.await
}

fn replayer(config: ReplayerConfig) -> anyhow::Result<Replayer> {
    Replayer::new(config).context("cannot create the Kafka producer")
}

fn print_table(out: &mut impl Write, entries: &[Entry], total_matching: usize) -> anyhow::Result<()> {
    writeln!(out, "{} dead-letter entries ({} shown)", total_matching, entries.len())?;
    let dash = || "-".to_owned();
    for entry in entries {
        let e = &entry.entry;
        writeln!(
            out,
            "{}  {}{}  source={}  service={}  event_id={}  type={}  class={}  attempts={}  failed={}  error={}",
            e.id,
            entry.status.as_str(),
            if entry.flagged { "(flagged)" } else { "" },
            e.source.clone().unwrap_or_else(dash),
            e.service.clone().unwrap_or_else(dash),
            e.event_id.clone().unwrap_or_else(dash),
            e.event_type.clone().unwrap_or_else(dash),
            e.error_class.clone().unwrap_or_else(dash),
            e.attempts.map_or_else(dash, |n| n.to_string()),
            e.last_failure_at_ms.map_or_else(dash, format_rfc3339_millis),
            printable(e.error.as_deref().unwrap_or("-")),
        )?;
    }
    Ok(())
}

fn print_report(out: &mut impl Write, report: &Report, verb: &str, json: bool) -> anyhow::Result<()> {
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(report)?)?;
        return Ok(());
    }
    writeln!(out, "{verb} {} entries", report.done.len())?;
    for id in &report.done {
        writeln!(out, "  {id}")?;
    }
    if !report.skipped.is_empty() {
        writeln!(out, "skipped {}", report.skipped.len())?;
        for skipped in &report.skipped {
            writeln!(out, "  {}: {}", skipped.id, skipped.reason)?;
        }
    }
    Ok(())
}

fn print_reprocess(out: &mut impl Write, report: &ReprocessReport, json: bool) -> anyhow::Result<()> {
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(report)?)?;
        return Ok(());
    }
    let n = report.records.len();
    match &report.run_id {
        Some(run_id) => {
            writeln!(out, "re-processing run {run_id}: {n} records re-driven to service {}", report.service)?
        }
        None if report.applied => writeln!(out, "nothing to re-process for service {}", report.service)?,
        None => writeln!(out, "would re-process {n} records for service {} (dry run: add --apply)", report.service)?,
    }
    let dash = || "-".to_owned();
    for record in &report.records {
        writeln!(
            out,
            "  {}  source={}  event_id={}  received={}",
            record.position,
            printable(record.source.as_deref().unwrap_or("-")),
            printable(record.event_id.as_deref().unwrap_or("-")),
            record.received_at_ms.map_or_else(dash, format_rfc3339_millis),
        )?;
    }
    Ok(())
}

/// Text safe to print on a terminal: control characters (escape sequences) are shown escaped.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() && c != '\n' && c != '\t' { c.escape_default().to_string() } else { c.to_string() })
        .collect()
}

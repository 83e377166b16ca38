//! The command line's arguments: one subcommand per operator task.

use clap::{Args as ClapArgs, Parser, Subcommand};
use hookline_common::cli::ServiceArgs;
use hookline_dlq_replayer::filter::Filter;

/// Inspect, re-drive and discard hookline dead-letter entries.
#[derive(Debug, Parser)]
#[command(version, about)]
pub(super) struct Args {
    #[command(flatten)]
    pub(super) service: ServiceArgs,
    #[command(subcommand)]
    pub(super) command: Option<Command>,
}

#[derive(Debug, ClapArgs)]
pub(super) struct FilterArgs {
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
pub(super) enum Command {
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
    /// The API tokens: create (the first admin's too), revoke, list. Writes the tokens topic directly, with this
    /// config's Kafka credentials and record key, as an admin.
    Tokens {
        #[command(subcommand)]
        command: TokensCommand,
    },
    /// The audit trail (who did what, when), newest first.
    Audit {
        /// Only actions of this subject (`token:alice`, `oidc:...`, `cli:...`).
        #[arg(long)]
        who: Option<String>,
        /// Only this action (`replay`, `discard`, `pause`, `resume`, `reprocess`, `token.create`, `token.revoke`),
        /// or a family ending with a dot (`token.`).
        #[arg(long)]
        what: Option<String>,
        /// Since: an RFC 3339 time or an age such as `24h` or `7d`; default: the whole retention (30 days).
        #[arg(long)]
        since: Option<String>,
        /// At most this many records.
        #[arg(long)]
        limit: Option<usize>,
        #[arg(long)]
        json: bool,
    },
    /// Run the HTTP admin API (and /livez, /readyz, /metrics) on `admin_addr`.
    Serve,
}

#[derive(Debug, Subcommand)]
pub(super) enum TokensCommand {
    /// Create a token and print it (the only time it is shown; only its SHA-256 is kept).
    Create {
        /// Who holds it: the audit trail records its actions as `token:<name>`.
        #[arg(long)]
        name: String,
        /// `read`, `operate` or `admin`.
        #[arg(long)]
        scope: String,
        /// Who is creating it (recorded as `cli:<by>`); default: $USER.
        #[arg(long)]
        by: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token, by its id or its name: every replayer refuses it within seconds.
    Revoke {
        id_or_name: String,
        /// Who is revoking it (recorded as `cli:<by>`); default: $USER.
        #[arg(long)]
        by: Option<String>,
    },
    /// Every token (never the tokens themselves).
    List {
        #[arg(long)]
        json: bool,
    },
}

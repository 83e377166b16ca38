use anyhow::Context;
use clap::Parser;
use hookline_common::{cli::ServiceArgs, telemetry};
use hookline_consumer::{Loaded, metrics::Metrics};
use tokio::net::TcpListener;

/// Every Rust allocation of the consumer (docs/benchmarks/consumer.md, "A third of the CPU per event").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A hookline consumer-group member.
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
    /// Create the tables of every `postgres` handler in the config (its dedupe table, or its inbox table), if they
    /// do not exist yet, and exit. Run it once, as a role allowed to create tables; the consumer itself needs only
    /// SELECT, INSERT and UPDATE on them.
    Migrate {
        /// Print the SQL instead of running it (to review it, or to run it with your own migration tool).
        #[arg(long)]
        print: bool,
    },
    /// Print this service's dedupe bucket schedule (how many buckets each 6-hour slot has), or change it with
    /// `--set`: from the first slot that starts at least 15 minutes from now, every slot has that many buckets.
    /// Size it so a slot's buckets hold about 64 outcomes each (docs/dedupe.md, "Buckets per slot"): past 128 a
    /// bucket costs about three times the bytes. Slots already begun keep their count.
    DedupeBuckets {
        /// The new bucket count: a power of two from 16384 to 16777216.
        #[arg(long)]
        set: Option<u64>,
        /// With `--set`: how many 6-hour slots one bucket spans, 1 to 12 (default: the span in force). A claim
        /// reads one bucket per span its window covers: 4 (a day) reads 4 or 5 for a 72-hour window instead of 13
        /// or 14, and keeps an outcome up to a day past its window instead of 6 hours.
        #[arg(long, requires = "set")]
        span: Option<u64>,
    },
    /// Run a route's transform on a body from a file and print what its handler would get (compact JSON), offline:
    /// no Kafka, no Redis, no secret read. Exits non-zero, saying why, when the transform does not compile or the
    /// event would be poison.
    TransformTest {
        /// The route: its index in [[routes]] (from 0) or its label (`github`, `github:issues,push`).
        #[arg(long)]
        route: String,
        /// A file holding the event's body, as the provider sent it.
        #[arg(long)]
        event: std::path::PathBuf,
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
    match &args.command {
        Some(Command::Migrate { print }) => return migrate(&args.service, *print).await,
        Some(Command::DedupeBuckets { set, span }) => return dedupe_buckets(&args.service, *set, *span).await,
        Some(Command::TransformTest { route, event }) => {
            // Only the routes matter here: a config whose Kafka or Redis settings would not pass still shows its
            // transforms.
            let config = hookline_consumer::ConsumerConfig::read(args.service.config())?;
            let output = hookline_consumer::transform_test::run(&config, route, event)?;
            println!("{}", String::from_utf8_lossy(&output));
            return Ok(());
        }
        None => {}
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
    let telemetry = config.telemetry.clone();
    let run = hookline_consumer::run(loaded, admin, shutdown);
    telemetry::traces::with_traces("hookline-consumer", &telemetry, run)?.await?;
    Ok(())
}

async fn migrate(service: &ServiceArgs, print: bool) -> anyhow::Result<()> {
    use hookline_consumer::handler::postgres::{self, PostgresHandler};
    let config = Loaded::read_checked(service.config())?;
    if print {
        // Reads no secret and connects to nothing, like --print-config.
        let tables = postgres::configured_tables(&config).map_err(anyhow::Error::msg)?;
        anyhow::ensure!(!tables.is_empty(), "no `postgres` handler in this config: nothing to migrate");
        for (place, postgres) in tables {
            let sql = PostgresHandler::migration_sql_of(postgres).map_err(anyhow::Error::msg)?;
            println!("-- {place}\n{sql}");
        }
        return Ok(());
    }
    let handlers = postgres::configured(&config).map_err(anyhow::Error::msg)?;
    anyhow::ensure!(!handlers.is_empty(), "no `postgres` handler in this config: nothing to migrate");
    for (place, handler) in handlers {
        handler.migrate().await.map_err(|problem| anyhow::anyhow!("{place}: {problem}"))?;
        tracing::info!(handler = %place, "postgres tables present");
    }
    Ok(())
}

async fn dedupe_buckets(service: &ServiceArgs, set: Option<u64>, span: Option<u64>) -> anyhow::Result<()> {
    use hookline_common::wire::dedupe_layout::{BUCKETS, SLOT_S};
    let config = Loaded::read_checked(service.config())?;
    let name = config.service_name();
    let dedupe = hookline_consumer::dedupe::Dedupe::connect(&config.redis, name)
        .await
        .map_err(|error| anyhow::anyhow!("redis: {}", error.redis_error()))?;
    if let Some(buckets) = set {
        let change = dedupe.change_buckets(buckets, span).await?;
        println!(
            "service {name}: {} buckets per span of {} slots from slot {}",
            change.buckets, change.span, change.from_slot
        );
    }
    let slot_time = |slot: u64| {
        let time = std::time::UNIX_EPOCH + std::time::Duration::from_secs(slot * SLOT_S);
        hookline_common::time::Rfc3339::of_time(time, hookline_common::time::Precision::Seconds).to_string()
    };
    let schedule = dedupe.bucket_schedule().map_err(|error| anyhow::anyhow!("redis: {}", error.redis_error()))?;
    println!("service {name}: {BUCKETS} buckets per 6-hour slot unless changed below");
    for change in schedule.changes() {
        println!(
            "  from slot {} ({}): {} buckets, each spanning {} slots",
            change.from_slot,
            slot_time(change.from_slot),
            change.buckets,
            change.span
        );
    }
    Ok(())
}

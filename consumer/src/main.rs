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

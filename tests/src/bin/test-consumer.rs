//! A consumer process for the crash tests: the real consumer with a handler that announces each event on stdout,
//! so a test can SIGKILL it at a known point.
//! Usage: `test-consumer <consumer.toml> [mode]`, where mode is
//! - `hang` (default): print `handling <id>`, then hang (a kill lands between claim and done);
//! - `slow-head:<id>`: hang on that event; print `done <id>` for every other one as soon as it succeeds;
//! - `work:<ms>`: print `handling <id>`, work for 1 to 8 times that long (fixed per event id, so events finish
//!   at different times), print `done <id>` on success (before the done marker is written: those are the only
//!   events a kill may let be processed twice);
//! - `router`: the handlers the config names (`[handler]`, `[[routes]]`), as the `hookline-consumer` binary runs
//!   them, for the chaos soak's `http` downstream; it exports traces, as the binary does, when
//!   `OTEL_EXPORTER_OTLP_ENDPOINT` is set.

use std::{io::Write, sync::Arc, time::Duration};

use hookline_common::wire::InboundEvent;
use hookline_consumer::{
    Loaded,
    handler::{BoxFuture, Handler, HandlerError},
};

#[derive(Debug)]
enum Mode {
    Hang,
    SlowHead(String),
    Work(Duration),
    Router,
}

#[derive(Debug)]
struct AnnouncingHandler {
    mode: Mode,
}

fn announce(what: &str, event_id: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{what} {event_id}");
    let _ = stdout.flush();
}

impl Handler for AnnouncingHandler {
    fn name(&self) -> &str {
        "announcing"
    }

    fn handle<'a>(&'a self, event: &'a InboundEvent) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            let event_id = event.meta.event_id.as_str();
            match &self.mode {
                Mode::Hang => {
                    announce("handling", event_id);
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
                Mode::SlowHead(head) if head == event_id => {
                    announce("handling", event_id);
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
                Mode::SlowHead(_) => announce("done", event_id),
                Mode::Router => unreachable!("the router mode runs the configured handlers"),
                Mode::Work(work) => {
                    announce("handling", event_id);
                    // FNV-1a of the id: a spread of durations without a random number generator.
                    let hash = event_id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
                        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
                    });
                    tokio::time::sleep(*work * (1 + u32::try_from(hash % 8).unwrap_or(0))).await;
                    announce("done", event_id);
                }
            }
            Ok(())
        })
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    hookline_common::cli::exit_code(run().await)
}

async fn run() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or_else(|| anyhow::anyhow!("usage: test-consumer <consumer.toml> [mode]"))?;
    let mode = match args.next() {
        None => Mode::Hang,
        Some(mode) if mode == "hang" => Mode::Hang,
        Some(mode) if mode == "router" => Mode::Router,
        Some(mode) => match mode.split_once(':') {
            Some(("slow-head", id)) => Mode::SlowHead(id.to_owned()),
            Some(("work", ms)) => Mode::Work(Duration::from_millis(ms.parse()?)),
            _ => anyhow::bail!("unknown mode `{mode}`"),
        },
    };
    let loaded = Loaded::load(Some(std::path::Path::new(&path)))?;
    let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    if matches!(mode, Mode::Router) {
        hookline_common::telemetry::init_tracing();
        // Traces as the real binary has them: off unless OTEL_EXPORTER_OTLP_ENDPOINT is set.
        let telemetry = loaded.config.telemetry.clone();
        let run = hookline_consumer::run(loaded, admin, hookline_common::signals::shutdown_on_signals());
        hookline_common::telemetry::traces::with_traces("hookline-consumer", &telemetry, run)?.await?;
        return Ok(());
    }
    let loaded = loaded.with_handler(Arc::new(AnnouncingHandler { mode }));
    hookline_consumer::run(loaded, admin, tokio_util::sync::CancellationToken::new()).await?;
    Ok(())
}

//! The real gateway as its own process, for tests that measure what the gateway process itself holds (its RSS)
//! apart from the test's clients. Usage: `test-gateway <gateway.toml>`; it binds the config's `listen_addr` and
//! `admin_addr` (port 0 is fine) and prints `listening <public address> <admin address>` once both are bound.
//! Like the real binary, it exports traces when `OTEL_EXPORTER_OTLP_ENDPOINT` is set.

use std::io::Write;

use hookline_gateway::{ConfigOrigin, Listeners, Loaded};
use tokio::net::TcpListener;

#[tokio::main]
async fn main() {
    hookline_common::telemetry::init_tracing();
    let path = std::env::args_os().nth(1).expect("usage: test-gateway <gateway.toml>");
    let loaded = Loaded::load(Some(path.as_ref())).expect("a valid gateway config");
    let public = TcpListener::bind(&loaded.config.listen_addr).await.expect("bind the public listener");
    let admin = TcpListener::bind(&loaded.config.admin_addr).await.expect("bind the admin listener");
    {
        let mut stdout = std::io::stdout().lock();
        let public_addr = public.local_addr().expect("public address");
        let admin_addr = admin.local_addr().expect("admin address");
        writeln!(stdout, "listening {public_addr} {admin_addr}").expect("stdout");
        stdout.flush().expect("stdout");
    }
    let origin = ConfigOrigin::Fixed(Box::new(loaded.config.clone()));
    let shutdown = hookline_common::signals::shutdown_on_signals();
    // Traces as the real binary has them: off unless OTEL_EXPORTER_OTLP_ENDPOINT is set.
    let telemetry = loaded.config.telemetry.clone();
    let run = hookline_gateway::run_with_origin(loaded, origin, Listeners { public, admin }, shutdown);
    let traced = hookline_common::telemetry::traces::with_traces("hookline-gateway", &telemetry, run);
    traced.expect("the traces settings").await.expect("gateway runs");
}

//! Logging set-up shared by every binary. `RUST_LOG` filters (default `info`); `HOOKLINE_LOG_FORMAT=json`
//! switches to one JSON object per line for log shippers.

use std::io::IsTerminal;

use tracing_subscriber::{EnvFilter, fmt};

pub fn init_tracing() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("HOOKLINE_LOG_FORMAT").is_ok_and(|format| format == "json");
    // Colours only on a terminal: log files and collectors get plain `key=value` text.
    let builder = fmt().with_env_filter(filter).with_target(false).with_ansi(std::io::stdout().is_terminal());
    // A second initialisation (tests that start several services in one process) is not an error.
    let _ = if json { builder.json().try_init() } else { builder.try_init() };
}

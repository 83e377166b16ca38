//! Logging set-up shared by every binary. `RUST_LOG` filters (default `info`); `HOOKLINE_LOG_FORMAT=json`
//! switches to one JSON object per line for log shippers. Traces (OpenTelemetry, off unless an OTLP endpoint is
//! set) are in [`traces`].

mod export;
pub mod line;
pub mod traces;

use std::io::IsTerminal;

use tracing_subscriber::{EnvFilter, fmt};

pub fn init_tracing() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("HOOKLINE_LOG_FORMAT").is_ok_and(|format| format == "json");
    // Colours only on a terminal: log files and collectors get plain `key=value` text.
    let builder = fmt().with_env_filter(filter).with_target(false).with_ansi(std::io::stdout().is_terminal());
    // A second initialisation (tests that start several services in one process) is not an error.
    let initialised = if json { builder.json().try_init() } else { builder.try_init() };
    if initialised.is_ok() {
        line::set_layout(json);
    }
}

/// Logging for a command-line command (the replayer's and the reconciler's `list`, `run`, ...): warnings and
/// errors only unless `RUST_LOG` says otherwise, on stderr, so that stdout carries nothing but the command's
/// output (a `--json` report stays parseable).
pub fn init_cli_tracing() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let builder = fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = builder.try_init();
}

/// Rate limit for log lines that an outage repeats (a broker down, Redis frozen): per kind of line, at most one
/// per `interval`, and that line carries how many were held back since the previous one. Metrics, not logs,
/// count every occurrence: a 20 s outage must cost a handful of lines, not one per record or per retry.
#[derive(Debug)]
pub struct LogThrottle {
    interval: std::time::Duration,
    windows: std::sync::Mutex<std::collections::HashMap<&'static str, ThrottleWindow>>,
}

#[derive(Debug)]
struct ThrottleWindow {
    last_logged: std::time::Instant,
    held_back: u64,
}

impl LogThrottle {
    pub fn new(interval: std::time::Duration) -> Self {
        Self { interval, windows: std::sync::Mutex::default() }
    }

    /// Whether a line of this `kind` may be written at `now`: `Some(n)` with the number of lines held back since
    /// the last one written, `None` when it must only be counted.
    pub fn admit(&self, kind: &'static str, now: std::time::Instant) -> Option<u64> {
        let mut windows = self.windows.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match windows.get_mut(kind) {
            Some(window) if now.saturating_duration_since(window.last_logged) < self.interval => {
                window.held_back += 1;
                None
            }
            Some(window) => {
                window.last_logged = now;
                Some(std::mem::take(&mut window.held_back))
            }
            None => {
                windows.insert(kind, ThrottleWindow { last_logged: now, held_back: 0 });
                Some(0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn an_outage_costs_one_line_per_interval_per_kind_with_the_count_held_back() {
        let throttle = LogThrottle::new(Duration::from_secs(10));
        let start = Instant::now();
        let mut written = Vec::new();
        // 25 s of a failure repeated every 200 ms, of two kinds.
        for tick in 0..125u64 {
            let now = start + Duration::from_millis(tick * 200);
            for kind in ["fetch failed", "redis failed"] {
                if let Some(held_back) = throttle.admit(kind, now) {
                    written.push((kind, tick, held_back));
                }
            }
        }
        let fetch: Vec<_> = written.iter().filter(|(kind, ..)| *kind == "fetch failed").collect();
        assert_eq!(fetch.len(), 3, "at 0 s, 10 s and 20 s: {fetch:?}");
        assert_eq!(fetch[0].2, 0);
        assert_eq!(fetch[1].2, 49, "the 49 lines held back between 0 s and 10 s are counted");
        assert_eq!(written.len(), 6, "each kind has its own window");
    }
}

//! The flags every hookline binary takes, and what the two that describe the binary print.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::{
    config::{self, ConfigError, env},
    metrics_catalog::{self, MetricDescription},
};

/// `--config`, `--print-config` and `--print-metrics`, flattened into each binary's arguments.
#[derive(Debug, clap::Args)]
pub struct ServiceArgs {
    /// TOML config file.
    #[arg(long, env = env::CONFIG, global = true)]
    pub config: Option<PathBuf>,
    /// Print the effective config (the file, every default, environment overrides; inline credentials
    /// redacted) as TOML and exit. Reads no secret and connects to nothing; an invalid config exits non-zero.
    #[arg(long, global = true)]
    pub print_config: bool,
    /// Print every metric family this binary exports (name, type, help, label names and fixed label values) as
    /// JSON and exit.
    #[arg(long, global = true)]
    pub print_metrics: bool,
}

/// Why a binary could not print what it was asked for.
#[derive(Debug, thiserror::Error)]
pub enum DescribeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Metrics(#[from] prometheus::Error),
    #[error("cannot print the config: {0}")]
    Toml(#[from] config::PrintError),
    #[error("cannot print the metrics: {0}")]
    Json(#[from] serde_json::Error),
}

impl ServiceArgs {
    pub fn config(&self) -> Option<&Path> {
        self.config.as_deref()
    }

    /// If `--print-metrics` or `--print-config` was given, prints the metrics `describe` gives or the config `read`
    /// returns for `--config`, and returns true: the binary then exits without starting anything.
    pub fn print_requested<C: Serialize>(
        &self,
        describe: impl FnOnce() -> Result<Vec<MetricDescription>, prometheus::Error>,
        read: impl FnOnce(Option<&Path>) -> Result<C, ConfigError>,
    ) -> Result<bool, DescribeError> {
        if self.print_metrics {
            println!("{}", metrics_catalog::to_json(&describe()?)?);
        } else if self.print_config {
            print!("{}", config::effective_toml(&read(self.config())?)?);
        }
        Ok(self.print_metrics || self.print_config)
    }
}

/// What a binary's `main` returns for `result`: on an error, its whole chain on one line (`Error: a: b: c`, the
/// alternate form) and exit code 1. Never a backtrace, which `RUST_BACKTRACE` would add to the report a `main`
/// returning the error prints: a service that cannot start says why in one log line.
pub fn exit_code<E: std::fmt::Display>(result: Result<(), E>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("Error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

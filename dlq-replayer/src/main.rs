//! `hookline-replayer`: the dead-letter queue's command line and, with `serve`, its admin API and console. The
//! commands live in [`cli`]; the work in the `hookline_dlq_replayer` library.

mod cli;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match cli::run().await {
        Ok(Some(code)) => code,
        Ok(None) => std::process::ExitCode::SUCCESS,
        Err(error) => hookline_common::cli::exit_code(Err(error)),
    }
}

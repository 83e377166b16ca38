//! What makes a `[handler.postgres]` unusable, found without a connection: the config's checks, run by
//! [`crate::load::Loaded::build`] with the rest of the config.

use hookline_common::config::redact;

use super::{gate::DedupeTable, params::ParamSource};
use crate::config::postgres::PostgresConfig;

/// Every problem a config can have without a connection, as lines for the config error. `handler_timeout_ms`
/// is `[handler] timeout_ms`; `max_in_flight` is `processing.max_in_flight`.
pub fn problems(
    config: &PostgresConfig,
    handler_timeout_ms: u64,
    max_in_flight: usize,
    custom_work: bool,
) -> Vec<String> {
    let mut problems = Vec::new();
    match config.url.as_deref() {
        None => problems.push("`url` is required".to_owned()),
        Some(url) => match url.parse::<tokio_postgres::Config>() {
            Err(error) => problems.push(format!("url `{}`: {error}", redact::url_password(url))),
            Ok(parsed) if parsed.get_password().is_some() => problems.push(format!(
                "url `{}` carries a password: give it as `password = {{ id = ..., env = ... }}` or `file`",
                redact::url_password(url)
            )),
            Ok(_) => {}
        },
    }
    if config.client_certificate.is_some() != config.client_key.is_some() {
        problems.push("client_certificate and client_key go together".to_owned());
    }
    if config.pool_size == 0 || config.pool_size >= max_in_flight.max(2) {
        problems.push(format!(
            "pool_size = {} must be at least 1 and below processing.max_in_flight ({max_in_flight})",
            config.pool_size
        ));
    }
    if !(config.lock_timeout_ms < config.statement_timeout_ms && config.statement_timeout_ms < handler_timeout_ms) {
        problems.push(format!(
            "need lock_timeout_ms ({}) < statement_timeout_ms ({}) < [handler] timeout_ms ({handler_timeout_ms}), \
             so the server gives up before the consumer does",
            config.lock_timeout_ms, config.statement_timeout_ms
        ));
    }
    if let Err(error) = DedupeTable::new(&config.dedupe_table) {
        problems.push(error.to_string());
    }
    let ways =
        usize::from(!config.statements.is_empty()) + usize::from(config.inbox.is_some()) + usize::from(custom_work);
    if ways != 1 {
        problems.push("say what the work is: `statements` or `inbox` (exactly one)".to_owned());
    }
    for (index, statement) in config.statements.iter().enumerate() {
        if statement.sql.trim().is_empty() {
            problems.push(format!("statements[{index}]: `sql` is empty"));
        }
        if statement.rows == Some(0) {
            problems.push(format!("statements[{index}]: `rows = 0` never succeeds; say `on_zero_rows` instead"));
        }
        for (position, param) in statement.params.iter().enumerate() {
            if let Err(problem) = ParamSource::parse(param) {
                problems.push(format!("statements[{index}].params[{position}]: {problem}"));
            }
        }
    }
    if let Some(inbox) = &config.inbox {
        if let Err(error) = DedupeTable::new(&inbox.table) {
            problems.push(format!("inbox: {error}"));
        }
        for name in &inbox.headers {
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                problems.push(format!("inbox.headers: `{name}` is not a header name"));
            }
        }
    }
    problems
}

//! What makes a `[handler.postgres]` unusable, found without a connection: the config's checks, run by
//! [`crate::load::Loaded::build`] with the rest of the config.

use hookline_common::config::redact;

use super::{gate::DedupeTable, params::ParamSource};
use crate::config::{ConsumerConfig, postgres::PostgresConfig};

/// The rest of the consumer's config a `[handler.postgres]` must fit.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// `[handler] timeout_ms`.
    pub handler_timeout_ms: u64,
    /// `processing.max_in_flight`.
    pub max_in_flight: usize,
    /// `redis.dedupe_ttl_s`.
    pub dedupe_ttl_s: u64,
}

impl Limits {
    pub fn of(config: &ConsumerConfig) -> Self {
        Self {
            handler_timeout_ms: config.handler.timeout_ms,
            max_in_flight: config.processing.max_in_flight,
            dedupe_ttl_s: config.redis.dedupe_ttl_s,
        }
    }
}

/// Every problem a config can have without a connection, as lines for the config error; `custom_work`: the work
/// is a Rust handler, so `statements` and `inbox` stay empty.
pub fn problems(config: &PostgresConfig, limits: &Limits, custom_work: bool) -> Vec<String> {
    let Limits { handler_timeout_ms, max_in_flight, dedupe_ttl_s } = *limits;
    let mut problems = Vec::new();
    problems.extend(retention_problem(config, dedupe_ttl_s));
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

/// How long after the Redis marker expires a dedupe row must still be there: a provider's retry window, a
/// reconciliation or a replay of an event already applied.
pub const REPLAY_HORIZON_DAYS: u64 = 7;

/// Whether `retention_days` keeps rows long enough beside Redis's `dedupe_ttl_s`.
fn retention_problem(config: &PostgresConfig, dedupe_ttl_s: u64) -> Option<String> {
    let minimum_days = dedupe_ttl_s.div_ceil(86_400) + REPLAY_HORIZON_DAYS;
    (u64::from(config.retention_days) < minimum_days || config.retention_interval_ms == 0).then(|| {
        format!(
            "retention_days = {} must be at least {minimum_days} (redis.dedupe_ttl_s in days, plus \
             {REPLAY_HORIZON_DAYS} days for retries, reconciliation and replays), and retention_interval_ms positive",
            config.retention_days
        )
    })
}

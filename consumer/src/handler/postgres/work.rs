//! What an event's work is, inside the transaction that inserted its dedupe row: the configured statements
//! ([`Statements`]), or a Rust handler's code ([`TransactionalHandler`]).

use std::fmt;

use hookline_common::wire::InboundEvent;
use serde_json::Value;
use tokio_postgres::types::ToSql;

use super::{
    Failure,
    gate::Outcome,
    params::{Bound, ParamSource},
};
use crate::{
    config::postgres::{StatementConfig, ZeroRows},
    handler::{BoxFuture, HandlerError},
};

/// What the work did: stored in the dedupe row with the row counts, so "what did event X do" has an answer in
/// the database itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    pub outcome: Outcome,
    /// Rows each statement changed, in order.
    pub row_counts: Vec<i64>,
}

impl Effect {
    pub fn applied(row_counts: Vec<i64>) -> Self {
        Self { outcome: Outcome::Applied, row_counts }
    }

    pub fn skipped(row_counts: Vec<i64>) -> Self {
        Self { outcome: Outcome::Skipped, row_counts }
    }
}

/// How a Rust handler's work failed: a database error (its SQLSTATE decides: see
/// [`super::sqlstate::classify`]) or the handler's own verdict.
#[derive(Debug, thiserror::Error)]
pub enum WorkError {
    #[error(transparent)]
    Database(#[from] tokio_postgres::Error),
    #[error(transparent)]
    Handler(#[from] HandlerError),
}

/// A Rust handler whose work runs in the transaction that inserted the event's dedupe row: return `Ok` and the
/// row and the work commit together; return an error (or panic, or time out) and neither happens. It is never
/// called for an event whose row is already committed. Use it through
/// [`super::PostgresHandler::with_work`]; `examples/orders-consumer` is one, built and tested.
pub trait TransactionalHandler: Send + Sync + fmt::Debug + 'static {
    /// Called once at start with a connection: prepare statements here, so a mistake stops the consumer there.
    fn prepare<'a>(&'a self, _client: &'a tokio_postgres::Client) -> BoxFuture<'a, Result<(), tokio_postgres::Error>> {
        Box::pin(async { Ok(()) })
    }

    /// The event's work. Do not COMMIT or ROLLBACK: the handler does, after recording the [`Effect`].
    fn apply<'a>(
        &'a self,
        transaction: &'a tokio_postgres::Transaction<'a>,
        event: &'a InboundEvent,
    ) -> BoxFuture<'a, Result<Effect, WorkError>>;
}

/// One configured statement, its parameters' sources parsed.
#[derive(Debug)]
pub struct Statement {
    pub sql: String,
    pub params: Vec<ParamSource>,
    pub rows: Option<u64>,
    pub on_zero_rows: ZeroRows,
}

/// The configured statements of a `statements` handler.
#[derive(Debug)]
pub struct Statements {
    pub list: Vec<Statement>,
    /// Whether any parameter needs the body as JSON (parsed once per event, before a connection is taken).
    pub needs_json: bool,
    /// Whether a `skip` after the first statement must undo the statements before it (a savepoint).
    savepoint: bool,
}

const SAVEPOINT: &str = "SAVEPOINT hookline_work";
const ROLLBACK_TO_SAVEPOINT: &str = "ROLLBACK TO SAVEPOINT hookline_work";

impl Statements {
    /// The statements of `configs`; their parameter sources were checked with the config.
    pub fn new(configs: &[StatementConfig]) -> Result<Self, String> {
        let mut list = Vec::new();
        for (index, config) in configs.iter().enumerate() {
            let params = config
                .params
                .iter()
                .map(|text| ParamSource::parse(text))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|problem| format!("statements[{index}]: {problem}"))?;
            list.push(Statement {
                sql: config.sql.clone(),
                params,
                rows: config.rows,
                on_zero_rows: config.on_zero_rows,
            });
        }
        let needs_json = list.iter().flat_map(|statement| &statement.params).any(ParamSource::needs_json);
        let savepoint = list.iter().skip(1).any(|statement| statement.on_zero_rows == ZeroRows::Skip);
        Ok(Self { list, needs_json, savepoint })
    }

    /// Prepares every statement on `client` and checks its parameters against what the server infers: the start
    /// check. A problem is a line naming the statement.
    pub async fn prepare(&self, client: &tokio_postgres::Client) -> Result<(), Vec<String>> {
        let mut problems = Vec::new();
        for (index, statement) in self.list.iter().enumerate() {
            let prepared = match client.prepare(&statement.sql).await {
                Ok(prepared) => prepared,
                Err(error) => {
                    problems.push(format!("statements[{index}] does not prepare: {}", super::describe(&error)));
                    continue;
                }
            };
            if prepared.params().len() != statement.params.len() {
                problems.push(format!(
                    "statements[{index}] takes {} parameters, `params` gives {}",
                    prepared.params().len(),
                    statement.params.len()
                ));
                continue;
            }
            for (position, (source, ty)) in statement.params.iter().zip(prepared.params()).enumerate() {
                if let Err(problem) = source.check_type(ty) {
                    problems.push(format!("statements[{index}] parameter ${}: {problem}", position + 1));
                }
            }
        }
        if problems.is_empty() { Ok(()) } else { Err(problems) }
    }

    /// Runs the statements in `transaction`, after the dedupe row.
    pub async fn run(
        &self,
        transaction: &deadpool_postgres::Transaction<'_>,
        event: &InboundEvent,
        json: Option<&Value>,
        service: &str,
    ) -> Result<Effect, Failure> {
        if self.savepoint {
            transaction.batch_execute(SAVEPOINT).await.map_err(|error| Failure::database("savepoint", error))?;
        }
        let mut row_counts = Vec::with_capacity(self.list.len());
        for (index, statement) in self.list.iter().enumerate() {
            let context = || format!("statements[{index}]");
            let prepared = transaction
                .prepare_cached(&statement.sql)
                .await
                .map_err(|error| Failure::database(context(), error))?;
            let mut values: Vec<Bound> = Vec::with_capacity(statement.params.len());
            for (position, (source, ty)) in statement.params.iter().zip(prepared.params()).enumerate() {
                let value = source.bind(event, json, service, ty).map_err(|problem| {
                    Failure::Handler(HandlerError::poison(format!(
                        "{} parameter ${}: {problem}",
                        context(),
                        position + 1
                    )))
                })?;
                values.push(value);
            }
            let refs: Vec<&(dyn ToSql + Sync)> = values.iter().map(|value| value as &(dyn ToSql + Sync)).collect();
            let rows =
                transaction.execute(&prepared, &refs).await.map_err(|error| Failure::database(context(), error))?;
            row_counts.push(i64::try_from(rows).unwrap_or(i64::MAX));
            if rows == 0 {
                let said = |mode: &str| format!("{} matched no row (on_zero_rows = \"{mode}\")", context());
                match statement.on_zero_rows {
                    ZeroRows::Poison => return Err(Failure::Handler(HandlerError::poison(said("poison")))),
                    ZeroRows::Retry => return Err(Failure::Handler(HandlerError::retryable(said("retry")))),
                    ZeroRows::Skip => {
                        if self.savepoint {
                            transaction
                                .batch_execute(ROLLBACK_TO_SAVEPOINT)
                                .await
                                .map_err(|error| Failure::database("rollback to savepoint", error))?;
                        }
                        return Ok(Effect::skipped(row_counts));
                    }
                }
            }
            if let Some(expected) = statement.rows.filter(|expected| *expected != rows) {
                return Err(Failure::Handler(HandlerError::poison(format!(
                    "{} changed {rows} rows, expected {expected}",
                    context()
                ))));
            }
        }
        Ok(Effect::applied(row_counts))
    }
}

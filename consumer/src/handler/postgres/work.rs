//! What an event's work is, inside the transaction that inserted its dedupe row: the configured statements
//! ([`Statements`]), or a Rust handler's code ([`TransactionalHandler`]).

pub mod one_trip;

use std::{
    fmt,
    sync::atomic::{AtomicBool, Ordering},
};

use hookline_common::wire::InboundEvent;
use serde_json::Value;
use tokio_postgres::types::ToSql;

use self::one_trip::{OneTrip, Settled};
use super::{
    Failure,
    gate::{DedupeTable, EventKey, Outcome},
    params::{Bound, ParamSource},
};
use crate::{
    config::postgres::{StatementConfig, ZeroRows},
    handler::{BoxFuture, HandlerError},
    metrics::postgres_outcome,
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
    /// Whether a `skip` must undo the other statements (a savepoint): every statement is sent at once, so those after
    /// the one that matched no row ran too.
    savepoint: bool,
    /// The row counts of an event applied as configured, when every statement names its `rows`: the dedupe row is
    /// inserted with them and `applied`, and written a second time only when the work did something else.
    presumed: Option<Vec<i64>>,
    /// The one-statement form of a single statement ([`OneTrip`]), used once it prepared at start.
    one_trip: Option<OneTrip>,
    one_trip_ready: AtomicBool,
}

/// Why the statements or the inbox as configured do not build.
#[derive(Debug, thiserror::Error)]
pub enum WorkConfigError {
    #[error("statements[{index}]: {source}")]
    Param {
        index: usize,
        #[source]
        source: super::params::ParamError,
    },
    #[error("inbox: {0}")]
    InboxTable(#[source] super::gate::InvalidTableName),
}

const SAVEPOINT: &str = "SAVEPOINT hookline_work";
const ROLLBACK_TO_SAVEPOINT: &str = "ROLLBACK TO SAVEPOINT hookline_work";

impl Statements {
    /// The statements of `configs`, their dedupe rows in `gate`; their parameter sources were checked with the
    /// config.
    pub fn new(configs: &[StatementConfig], gate: &DedupeTable) -> Result<Self, WorkConfigError> {
        let mut list = Vec::new();
        for (index, config) in configs.iter().enumerate() {
            let params = config
                .params
                .iter()
                .map(|text| ParamSource::parse(text))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|source| WorkConfigError::Param { index, source })?;
            list.push(Statement {
                sql: config.sql.clone(),
                params,
                rows: config.rows,
                on_zero_rows: config.on_zero_rows,
            });
        }
        let needs_json = list.iter().flat_map(|statement| &statement.params).any(ParamSource::needs_json);
        let savepoint = list.len() > 1 && list.iter().any(|statement| statement.on_zero_rows == ZeroRows::Skip);
        let presumed = list
            .iter()
            .map(|statement| statement.rows.map(|rows| i64::try_from(rows).unwrap_or(i64::MAX)))
            .collect::<Option<Vec<_>>>();
        let one_trip = match &list[..] {
            [statement] => Some(OneTrip::new(gate, statement)),
            _ => None,
        };
        Ok(Self { list, needs_json, savepoint, presumed, one_trip, one_trip_ready: AtomicBool::new(false) })
    }

    /// Prepares every statement on `client` and checks its parameters against what the server infers: the start
    /// check. A problem is a line naming the statement; every refusal is said at once, a lost connection at once.
    pub async fn prepare(&self, client: &tokio_postgres::Client) -> Result<(), super::StartProblem> {
        let mut problems = Vec::new();
        for (index, statement) in self.list.iter().enumerate() {
            let prepared = match client.prepare(&statement.sql).await {
                Ok(prepared) => prepared,
                Err(error) => {
                    let line = format!("statements[{index}] does not prepare: {}", super::describe(&error));
                    match super::StartProblem::of(&error, line) {
                        lost @ super::StartProblem::Lost(_) => return Err(lost),
                        super::StartProblem::Refused(line) => problems.push(line),
                    }
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
        if !problems.is_empty() {
            return Err(super::StartProblem::Refused(problems.join("; ")));
        }
        if let Some(one_trip) = &self.one_trip {
            let ready = match client.prepare(one_trip.sql()).await {
                Ok(_) => true,
                Err(error) => {
                    if let lost @ super::StartProblem::Lost(_) =
                        super::StartProblem::of(&error, super::describe(&error))
                    {
                        return Err(lost);
                    }
                    // Its own RETURNING, a rule, a SELECT: the statement cannot be wrapped, and runs as before.
                    tracing::info!(
                        error = %super::describe(&error),
                        "statements[0] cannot share its dedupe row's statement; two round trips per event"
                    );
                    false
                }
            };
            self.one_trip_ready.store(ready, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Runs the event's work on `client`: in one round trip when the work is one statement that could be wrapped
    /// ([`OneTrip`]) and came out as configured; else a duplicate if the event's row is committed, else (and for
    /// work of several statements) in two round trips ([`Self::run`]), which decide the skip, retry or poison.
    #[allow(clippy::too_many_arguments)] // The same arguments as `run`, which it may call.
    pub async fn run_fastest(
        &self,
        client: deadpool_postgres::Object,
        begin: &str,
        gate: &DedupeTable,
        key: &EventKey<'_>,
        event: &InboundEvent,
        json: Option<&Value>,
    ) -> Result<&'static str, Failure> {
        let (Some(one_trip), [statement]) = (&self.one_trip, &self.list[..]) else {
            return self.run(client, begin, gate, key, event, json).await;
        };
        if !self.one_trip_ready.load(Ordering::Relaxed) {
            return self.run(client, begin, gate, key, event, json).await;
        }
        match one_trip.run(client, begin, statement, key, event, json).await? {
            Settled::Applied => Ok(postgres_outcome::APPLIED),
            Settled::NotAsPresumed(client) => {
                // Most often a redelivery of an applied event: a look at its row settles it without running the
                // work again (which for a slow statement would cost its time twice).
                let committed = client
                    .prepare_cached(gate.committed_sql())
                    .await
                    .map_err(|error| Failure::database("dedupe row", error))?;
                let key_params: [&(dyn ToSql + Sync); 3] = [&key.service, &key.source, &key.event_id];
                let found = client
                    .query_opt(&committed, &key_params)
                    .await
                    .map_err(|error| Failure::database("dedupe row", error))?;
                if found.is_some() {
                    return Ok(postgres_outcome::DUPLICATE);
                }
                self.run(*client, begin, gate, key, event, json).await
            }
        }
    }

    /// Runs the event's transaction on `client` in two round trips: BEGIN, the dedupe insert (`acquire`, with its
    /// key parameters; with the outcome presumed when every statement names its `rows`), a savepoint when a `skip`
    /// must undo the others, and every statement, pipelined; then, once the dedupe result and every row count are
    /// checked, the outcome update (unless the presumed one came true) and COMMIT, pipelined (or a ROLLBACK). Statements sent behind the dedupe insert are undone with the transaction when it finds the event
    /// applied before. If this future is dropped mid-way (the handler's timeout), the connection is closed rather
    /// than returned to the pool inside a transaction, and the server rolls it back.
    #[allow(clippy::too_many_arguments)]
    pub async fn run(
        &self,
        client: deadpool_postgres::Object,
        begin: &str,
        gate: &DedupeTable,
        key: &EventKey<'_>,
        event: &InboundEvent,
        json: Option<&Value>,
    ) -> Result<&'static str, Failure> {
        let acquire_sql = if self.presumed.is_some() { gate.acquire_applied_sql() } else { gate.acquire_sql() };
        let acquire =
            client.prepare_cached(acquire_sql).await.map_err(|error| Failure::database("dedupe row", error))?;
        let record =
            client.prepare_cached(gate.record_sql()).await.map_err(|error| Failure::database("dedupe row", error))?;
        let mut prepared = Vec::with_capacity(self.list.len());
        let mut values: Vec<Vec<Bound>> = Vec::with_capacity(self.list.len());
        for (index, statement) in self.list.iter().enumerate() {
            let context = || format!("statements[{index}]");
            let ready =
                client.prepare_cached(&statement.sql).await.map_err(|error| Failure::database(context(), error))?;
            let mut bound = Vec::with_capacity(statement.params.len());
            for (position, (source, ty)) in statement.params.iter().zip(ready.params()).enumerate() {
                bound.push(source.bind(event, json, key.service, ty).map_err(|problem| {
                    Failure::Handler(HandlerError::poison(format!(
                        "{} parameter ${}: {problem}",
                        context(),
                        position + 1
                    )))
                })?);
            }
            prepared.push(ready);
            values.push(bound);
        }
        let mut open = OpenTransaction::new(client);
        let client = open.client();

        // Round trip 1: everything up to the last statement.
        let key_params: Vec<&(dyn ToSql + Sync)> = match &self.presumed {
            Some(presumed) => vec![&key.service, &key.source, &key.event_id, presumed],
            None => vec![&key.service, &key.source, &key.event_id],
        };
        let refs: Vec<Vec<&(dyn ToSql + Sync)>> =
            values.iter().map(|bound| bound.iter().map(|value| value as &(dyn ToSql + Sync)).collect()).collect();
        let (began, acquired, savepoint, executed) = tokio::join!(
            client.batch_execute(begin),
            client.query_opt(&acquire, &key_params[..]),
            async { if self.savepoint { client.batch_execute(SAVEPOINT).await } else { Ok(()) } },
            futures_util::future::join_all(
                prepared.iter().zip(&refs).map(|(statement, params)| client.execute(statement, params))
            ),
        );
        began.map_err(|error| Failure::database("begin", error))?;
        let acquired = match acquired {
            Ok(row) => row.is_some(),
            Err(error) => return Err(open.rollback(Failure::database("dedupe row", error)).await),
        };
        if !acquired {
            // Applied before: what the statements did behind the insert is undone.
            client.batch_execute("ROLLBACK").await.map_err(|error| Failure::database("rollback", error))?;
            open.finish();
            return Ok(postgres_outcome::DUPLICATE);
        }
        if let Err(error) = savepoint {
            return Err(open.rollback(Failure::database("savepoint", error)).await);
        }
        let mut row_counts = Vec::with_capacity(executed.len());
        let mut verdict = Ok(Outcome::Applied);
        for (index, (statement, rows)) in self.list.iter().zip(executed).enumerate() {
            if verdict.is_err() || verdict == Ok(Outcome::Skipped) {
                // Decided by an earlier statement; this one ran only because every statement is sent at once (an
                // error here is undone with the rest: -1 in the row counts).
                row_counts.push(rows.map_or(-1, |rows| i64::try_from(rows).unwrap_or(i64::MAX)));
                continue;
            }
            let rows = match rows {
                Ok(rows) => rows,
                Err(error) => {
                    return Err(open.rollback(Failure::database(format!("statements[{index}]"), error)).await);
                }
            };
            row_counts.push(i64::try_from(rows).unwrap_or(i64::MAX));
            if rows == 0 {
                let said = |mode: &str| format!("statements[{index}] matched no row (on_zero_rows = \"{mode}\")");
                verdict = match statement.on_zero_rows {
                    ZeroRows::Poison => Err(HandlerError::poison(said("poison"))),
                    ZeroRows::Retry => Err(HandlerError::retryable(said("retry"))),
                    ZeroRows::Skip => Ok(Outcome::Skipped),
                };
            } else if let Some(expected) = statement.rows.filter(|expected| *expected != rows) {
                verdict =
                    Err(HandlerError::poison(format!("statements[{index}] changed {rows} rows, expected {expected}")));
            }
        }
        let outcome = match verdict {
            Ok(outcome) => outcome,
            Err(error) => return Err(open.rollback(Failure::Handler(error)).await),
        };
        // Round trip 2: undo a skipped event's statements, record the outcome (unless presumed right), commit.
        let presumed_right = outcome == Outcome::Applied && self.presumed.as_ref() == Some(&row_counts);
        let outcome_text = outcome.as_str();
        let record_params: [&(dyn ToSql + Sync); 5] =
            [&key.service, &key.source, &key.event_id, &outcome_text, &row_counts];
        let (undone, recorded, committed) = tokio::join!(
            async {
                if outcome == Outcome::Skipped && self.savepoint {
                    client.batch_execute(ROLLBACK_TO_SAVEPOINT).await
                } else {
                    Ok(())
                }
            },
            async { if presumed_right { Ok(0) } else { client.execute(&record, &record_params).await } },
            client.batch_execute("COMMIT"),
        );
        undone.map_err(|error| Failure::database("rollback to savepoint", error))?;
        recorded.map_err(|error| Failure::database("dedupe row", error))?;
        committed.map_err(|error| Failure::database("commit", error))?;
        open.finish();
        Ok(match outcome {
            Outcome::Applied => postgres_outcome::APPLIED,
            Outcome::Skipped => postgres_outcome::SKIPPED,
        })
    }
}

/// A pooled connection with a transaction open on it: back to the pool once it ended ([`Self::finish`]); closed
/// if dropped before, so no other event ever gets a connection inside someone else's transaction.
pub(super) struct OpenTransaction(Option<deadpool_postgres::Object>);

impl OpenTransaction {
    pub(super) fn new(client: deadpool_postgres::Object) -> Self {
        Self(Some(client))
    }

    pub(super) fn client(&self) -> &deadpool_postgres::Object {
        self.0.as_ref().expect("open until finished")
    }

    /// The transaction ended (COMMIT or ROLLBACK answered): the connection may serve the next event.
    pub(super) fn finish(&mut self) {
        self.0.take();
    }

    /// The transaction ended: the connection, idle, for the same event's next transaction.
    pub(super) fn into_idle(mut self) -> deadpool_postgres::Object {
        self.0.take().expect("open until finished")
    }

    /// Rolls back after `failure` and returns it. If even the ROLLBACK fails, the connection is dropped.
    async fn rollback(mut self, failure: Failure) -> Failure {
        if self.client().batch_execute("ROLLBACK").await.is_ok() {
            self.finish();
        }
        failure
    }
}

impl Drop for OpenTransaction {
    fn drop(&mut self) {
        if let Some(object) = self.0.take() {
            // Out of the pool: closing the connection makes the server roll the transaction back.
            drop(deadpool_postgres::Object::take(object));
        }
    }
}

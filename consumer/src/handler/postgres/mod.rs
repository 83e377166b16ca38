//! The `postgres` handler: each event's dedupe record is a row in the user's database, inserted first in the
//! transaction that does the event's work ([`gate`]), so the work happens exactly once whatever crashes: a row
//! already there means the effect happened (a duplicate, counted, never poison). The Redis claim stays as the lease
//! and the fast path; the row is the truth, so a lost done marker, a handler dropped by its timeout or a COMMIT
//! whose reply never arrived are harmless. The work is configured ([`config`]: `statements`, or an `inbox` table
//! whose row is itself the dedupe record) or Rust code ([`work::TransactionalHandler`]). A failure's fate follows
//! its SQLSTATE alone ([`sqlstate`]).

pub mod checks;
pub mod gate;
mod inbox;
pub mod params;
mod pool;
pub mod retention;
pub mod sqlstate;
pub mod work;

use std::{
    path::Path,
    sync::{Arc, OnceLock},
    time::{Duration, Instant},
};

use deadpool_postgres::{Pool, PoolError};
use hookline_common::wire::InboundEvent;
use tokio_postgres::IsolationLevel;

use self::{
    gate::{DedupeTable, EventKey, Gate},
    inbox::Inbox,
    sqlstate::{Disposition, classify_error},
    work::{Effect, Statements, TransactionalHandler, WorkError},
};
use super::{BoxFuture, Handler, HandlerError, StartContext, StartError};
use crate::config::postgres::{Isolation, PostgresConfig};
use crate::metrics::{Metrics, postgres_outcome};

const NO_LABELS: &[&str] = &[];

/// How long start waits between attempts to reach an unreachable database.
const START_RETRY: Duration = Duration::from_secs(1);

pub struct PostgresHandler {
    pool: Pool,
    /// `BEGIN ISOLATION LEVEL ...`: the statements' transactions begin pipelined with their first statements.
    begin: String,
    retention: retention::Retention,
    isolation: IsolationLevel,
    gate: DedupeTable,
    work: Work,
    started: OnceLock<Started>,
}

enum Work {
    Statements(Statements),
    Inbox(Inbox),
    Custom(Arc<dyn TransactionalHandler>),
}

struct Started {
    service: String,
    metrics: Metrics,
}

impl std::fmt::Debug for PostgresHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let work = match &self.work {
            Work::Statements(statements) => format!("{} statements", statements.list.len()),
            Work::Inbox(inbox) => format!("inbox {}", inbox.table()),
            Work::Custom(handler) => format!("{handler:?}"),
        };
        f.debug_struct("PostgresHandler").field("dedupe_table", &self.gate.name()).field("work", &work).finish()
    }
}

/// Why preparing at start failed.
#[derive(Debug)]
pub enum StartProblem {
    /// The database refuses what the configuration asks: the start ends with this line.
    Refused(String),
    /// The connection was lost (a restart, a failover): wait and prepare again.
    Lost(String),
}

impl StartProblem {
    /// `error`'s kind (by its SQLSTATE, or none: the connection itself failed), with `line` to say it.
    pub fn of(error: &tokio_postgres::Error, line: String) -> Self {
        if error.code().is_none() || classify_error(error) == Disposition::Retryable {
            Self::Lost(line)
        } else {
            Self::Refused(line)
        }
    }
}

/// Why one transaction failed, before its fate is decided.
#[derive(Debug)]
pub enum Failure {
    /// A database error; `context` says which step (a statement, the dedupe row, the commit).
    Database { context: String, error: tokio_postgres::Error },
    /// The work's own verdict (a parameter that does not convert, a row count).
    Handler(HandlerError),
    /// No connection within `pool_wait_ms`.
    PoolWait(String),
}

impl Failure {
    pub fn database(context: impl Into<String>, error: tokio_postgres::Error) -> Self {
        Self::Database { context: context.into(), error }
    }
}

/// A database error in one line, as it may be stored and shown (the DLQ's `hookline-dlq-error`, which Kafka keeps
/// for ever, log lines, span status, the replayer's console): the SQLSTATE, the names the server reports (schema,
/// table, column, data type, constraint), and the message only for classes whose messages name objects and never
/// carry values. A DETAIL (`Failing row contains (...)`, `Key (id)=(42)`), HINT or WHERE, and the message of a
/// data exception (22), an integrity violation (23, whose message a trigger may also set), a PL/pgSQL `RAISE`
/// (P0) or any other class, can hold the user's row data: they go to the debug log at most
/// ([`describe_in_full`]). A PL/pgSQL `RAISE` or `ASSERT` chooses its code, message and names itself
/// (`RAISE ... USING ERRCODE = '55000', COLUMN = NEW.email`), from whatever its function holds: only its SQLSTATE
/// is kept, whatever the class. Without a SQLSTATE, the client's error and its cause.
pub fn describe(error: &tokio_postgres::Error) -> String {
    let Some(db) = error.as_db_error() else { return describe_client_error(error) };
    let code = db.code().code();
    if db.routine().is_some_and(|routine| USER_RAISED.contains(&routine)) {
        return format!("{code} (raised by a PL/pgSQL function)");
    }
    let mut line = code.to_owned();
    if message_names_no_values(code) {
        line.push(' ');
        line.push_str(db.message());
    }
    let names = [
        ("constraint", db.constraint()),
        ("schema", db.schema()),
        ("table", db.table()),
        ("column", db.column()),
        ("type", db.datatype()),
    ];
    let named: Vec<String> =
        names.iter().filter_map(|(what, name)| name.map(|name| format!("{what} \"{name}\""))).collect();
    if !named.is_empty() {
        line.push_str(&format!(" ({})", named.join(", ")));
    }
    line
}

/// Every part of a database error the server sent, DETAIL and HINT included: for the debug log only (it can hold
/// the user's row data; see [`describe`]).
pub fn describe_in_full(error: &tokio_postgres::Error) -> String {
    let Some(db) = error.as_db_error() else { return describe_client_error(error) };
    let mut line = format!("{} {}", db.code().code(), db.message());
    for (what, part) in [("detail", db.detail()), ("hint", db.hint()), ("where", db.where_())] {
        if let Some(part) = part {
            line.push_str(&format!(" ({what}: {part})"));
        }
    }
    line
}

fn describe_client_error(error: &tokio_postgres::Error) -> String {
    match std::error::Error::source(error) {
        Some(cause) => format!("{error}: {cause}"),
        None => error.to_string(),
    }
}

/// The server routines (the `R` field of an error) that report what a PL/pgSQL function raised: the code, the
/// message and the names are the function's, not the server's.
const USER_RAISED: [&str; 2] = ["exec_stmt_raise", "exec_stmt_assert"];

/// SQLSTATE classes whose server messages name objects (a relation, a column, a role) or state a condition
/// (a timeout, a shutdown, a serialization failure), and never quote a value: connection (08), invalid
/// transaction state (25), transaction rollback (40, not 40002, an integrity violation at commit), insufficient
/// resources (53), object state (55), operator intervention (57), system error (58), syntax and access (42),
/// authorization (28), catalog (3D, 3F), feature or statement (0A, 26), role (0L, 0P, 2B).
fn message_names_no_values(code: &str) -> bool {
    code != "40002"
        && matches!(
            code.get(..2),
            Some(
                "08" | "25"
                    | "40"
                    | "53"
                    | "55"
                    | "57"
                    | "58"
                    | "42"
                    | "28"
                    | "3D"
                    | "3F"
                    | "0A"
                    | "26"
                    | "0L"
                    | "0P"
                    | "2B"
            )
        )
}

/// Why a `postgres` handler cannot be built, or its SQL run outside an event's path (a migration).
#[derive(Debug, thiserror::Error)]
pub enum PostgresError {
    /// The configuration's problems, each one line (said joined by `; `).
    #[error("{}", .0.join("; "))]
    Config(Vec<String>),
    #[error(transparent)]
    Table(#[from] gate::InvalidTableName),
    /// The statements or the inbox as configured do not build: every problem found, in one line.
    #[error(transparent)]
    Work(#[from] work::WorkConfigError),
    /// No connection from the pool: the line says why (without the credentials).
    #[error("{line}")]
    Pool {
        line: String,
        #[source]
        source: PoolError,
    },
    /// The database refused the SQL: the line says it, with its SQLSTATE.
    #[error("{line}")]
    Database {
        line: String,
        #[source]
        source: tokio_postgres::Error,
    },
    /// The handler of one place of the consumer's configuration (`[handler]`, or a route's). (Its Display says
    /// the problem, so it is not also its source: an error chain prints it once.)
    #[error("{place}.postgres: {problem}")]
    In { place: String, problem: Box<PostgresError> },
}

impl PostgresHandler {
    /// A configured handler (`statements` or `inbox`); nothing is connected until [`Handler::start`].
    pub fn from_config(config: &PostgresConfig, config_dir: &Path) -> Result<Self, PostgresError> {
        let work = match &config.inbox {
            Some(inbox) => Work::Inbox(Inbox::new(inbox).map_err(PostgresError::from)?),
            None => {
                let gate = DedupeTable::new(&config.dedupe_table)?;
                Work::Statements(Statements::new(&config.statements, &gate).map_err(PostgresError::from)?)
            }
        };
        Self::build(config, config_dir, work)
    }

    /// A handler running `work` (Rust code) in each event's transaction, after its dedupe row. `config` gives the
    /// database and pool; its `statements` and `inbox` must be empty.
    pub fn with_work(
        config: &PostgresConfig,
        config_dir: &Path,
        work: Arc<dyn TransactionalHandler>,
    ) -> Result<Self, PostgresError> {
        let limits = checks::Limits { handler_timeout_ms: u64::MAX, max_in_flight: usize::MAX, dedupe_ttl_s: 0 };
        let problems = checks::problems(config, &limits, true);
        if !problems.is_empty() {
            return Err(PostgresError::Config(problems));
        }
        Self::build(config, config_dir, Work::Custom(work))
    }

    fn build(config: &PostgresConfig, config_dir: &Path, work: Work) -> Result<Self, PostgresError> {
        let gate = DedupeTable::new(&config.dedupe_table)?;
        let pool = pool::build(config, config_dir, "hookline-consumer").map_err(PostgresError::Config)?;
        let (isolation, level) = match config.isolation {
            Isolation::ReadCommitted => (IsolationLevel::ReadCommitted, "READ COMMITTED"),
            Isolation::RepeatableRead => (IsolationLevel::RepeatableRead, "REPEATABLE READ"),
            Isolation::Serializable => (IsolationLevel::Serializable, "SERIALIZABLE"),
        };
        let begin = format!("BEGIN ISOLATION LEVEL {level}");
        let retention = retention::Retention {
            table: gate.clone(),
            keep_days: config.retention_days,
            interval: Duration::from_millis(config.retention_interval_ms),
        };
        Ok(Self { pool, begin, retention, isolation, gate, work, started: OnceLock::new() })
    }

    /// The SQL a user runs once (what `hookline-consumer migrate` runs): the dedupe table, or the inbox table.
    pub fn migration_sql(&self) -> String {
        match &self.work {
            Work::Inbox(inbox) => inbox.create_sql(),
            Work::Statements(_) | Work::Custom(_) => self.gate.create_sql(),
        }
    }

    /// [`Self::migration_sql`] of a configured handler, without building it: no secret is read, nothing connects.
    pub fn migration_sql_of(config: &PostgresConfig) -> Result<String, PostgresError> {
        match &config.inbox {
            Some(inbox) => Ok(Inbox::new(inbox).map_err(PostgresError::from)?.create_sql()),
            None => Ok(DedupeTable::new(&config.dedupe_table)?.create_sql()),
        }
    }

    /// Runs [`Self::migration_sql`] on the database (idempotent).
    pub async fn migrate(&self) -> Result<(), PostgresError> {
        self.batch_execute(&self.migration_sql()).await
    }

    /// Runs `sql` (one or more statements, no parameters) on a connection of the pool: a Rust handler's own
    /// migration, for example.
    pub async fn batch_execute(&self, sql: &str) -> Result<(), PostgresError> {
        let client =
            self.pool.get().await.map_err(|source| PostgresError::Pool { line: pool_error_line(&source), source })?;
        client.batch_execute(sql).await.map_err(|source| PostgresError::Database { line: describe(&source), source })
    }

    /// Connects (waiting while the database is unreachable) and prepares everything the work will run. A
    /// connection lost while preparing (a restart, a failover) is waited out too; what the database refuses (a
    /// missing table, a statement that does not prepare, wrong credentials) ends the start.
    async fn prepare(&self, context: &StartContext) -> Result<(), StartError> {
        loop {
            let client = loop {
                match self.pool.get().await {
                    Ok(client) => break client,
                    Err(error) if start_refusal(&error) => {
                        return Err(StartError::Connect { line: pool_error_line(&error), source: error });
                    }
                    Err(error) => tracing::warn!(error = %pool_error_line(&error), "postgres unreachable; waiting"),
                }
                tokio::select! {
                    () = context.shutdown.cancelled() => return Ok(()),
                    () = tokio::time::sleep(START_RETRY) => {}
                }
            };
            match self.prepare_on(&client).await {
                Ok(()) => return Ok(()),
                Err(StartProblem::Refused(line)) => return Err(StartError::Refused(line)),
                Err(StartProblem::Lost(line)) => {
                    tracing::warn!(error = %line, "postgres connection lost while preparing; waiting");
                }
            }
            drop(client);
            tokio::select! {
                () = context.shutdown.cancelled() => return Ok(()),
                () = tokio::time::sleep(START_RETRY) => {}
            }
        }
    }

    /// Prepares the dedupe or inbox statements and the work's on `client`.
    async fn prepare_on(&self, client: &deadpool_postgres::Object) -> Result<(), StartProblem> {
        let missing_table = |error: &tokio_postgres::Error, table: &str| {
            let line = if error.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) {
                format!("table {table} does not exist: run `hookline-consumer migrate` once ({})", describe(error))
            } else {
                describe(error)
            };
            StartProblem::of(error, line)
        };
        match &self.work {
            Work::Inbox(inbox) => {
                for sql in inbox.insert_sql() {
                    client.prepare(sql).await.map_err(|error| missing_table(&error, inbox.table()))?;
                }
            }
            Work::Statements(_) | Work::Custom(_) => {
                let gate = &self.gate;
                for sql in [gate.acquire_sql(), gate.acquire_applied_sql(), gate.record_sql(), gate.committed_sql()] {
                    client.prepare(sql).await.map_err(|error| missing_table(&error, self.gate.name()))?;
                }
            }
        }
        match &self.work {
            Work::Statements(statements) => statements.prepare(client).await,
            Work::Custom(handler) => {
                handler.prepare(client).await.map_err(|error| StartProblem::of(&error, describe(&error)))
            }
            Work::Inbox(_) => Ok(()),
        }
    }

    /// One attempt: a connection, the transaction, its outcome label.
    async fn transact(
        &self,
        started: &Started,
        event: &InboundEvent,
        json: Option<&serde_json::Value>,
    ) -> Result<&'static str, Failure> {
        let reprocess_key;
        let event_id = match &event.reprocess_id {
            // A re-processing run re-does the work once per run.
            Some(run) => {
                reprocess_key = format!("{}#reprocess:{run}", event.meta.event_id);
                &reprocess_key
            }
            None => &event.meta.event_id,
        };
        let key = EventKey { service: &started.service, source: &event.meta.source, event_id };
        let pool_wait = started.metrics.postgres_pool_wait.with_label_values(NO_LABELS);
        let result = if let Work::Inbox(inbox) = &self.work {
            // Its rows are inserted in batches, each on the connection of whichever event got one first.
            let began = Instant::now();
            let batch_rows = started.metrics.postgres_batch_rows.with_label_values(NO_LABELS);
            let result = inbox.insert(&self.pool, &pool_wait, &batch_rows, &key, event).await;
            started.metrics.postgres_transaction.with_label_values(NO_LABELS).observe(began.elapsed().as_secs_f64());
            result
        } else {
            let waited = Instant::now();
            let client = self.pool.get().await.map_err(|error| match error {
                PoolError::Backend(error) => Failure::database("connect", error),
                other => Failure::PoolWait(pool_error_line(&other)),
            })?;
            pool_wait.observe(waited.elapsed().as_secs_f64());
            let began = Instant::now();
            let result = match &self.work {
                Work::Statements(statements) => {
                    statements.run_fastest(client, &self.begin, &self.gate, &key, event, json).await
                }
                Work::Custom(_) => {
                    let mut client = client;
                    self.in_transaction(&mut client, &key, event).await
                }
                Work::Inbox(_) => unreachable!("handled above"),
            };
            started.metrics.postgres_transaction.with_label_values(NO_LABELS).observe(began.elapsed().as_secs_f64());
            result
        };
        if let Err(Failure::Database { error, .. }) = &result {
            if classify_error(error) == Disposition::Reprepare {
                // DDL made every connection's prepared statements stale, not only this one's.
                self.pool.manager().statement_caches.clear();
            }
        }
        result
    }

    /// A Rust handler's transaction: BEGIN, the dedupe row, its work, the outcome, COMMIT.
    async fn in_transaction(
        &self,
        client: &mut deadpool_postgres::Object,
        key: &EventKey<'_>,
        event: &InboundEvent,
    ) -> Result<&'static str, Failure> {
        let transaction = client
            .build_transaction()
            .isolation_level(self.isolation)
            .start()
            .await
            .map_err(|error| Failure::database("begin", error))?;
        let acquire = transaction
            .prepare_cached(self.gate.acquire_sql())
            .await
            .map_err(|error| Failure::database("dedupe row", error))?;
        match self
            .gate
            .acquire(&*transaction, &acquire, key)
            .await
            .map_err(|error| Failure::database("dedupe row", error))?
        {
            Gate::AlreadyApplied => {
                transaction.rollback().await.map_err(|error| Failure::database("rollback", error))?;
                return Ok(postgres_outcome::DUPLICATE);
            }
            Gate::Acquired => {}
        }
        let Work::Custom(handler) = &self.work else { unreachable!("only a Rust handler's work runs here") };
        let effect = handler.apply(&transaction, event).await.map_err(|error| match error {
            WorkError::Database(error) => Failure::database("handler", error),
            WorkError::Handler(error) => Failure::Handler(error),
        })?;
        let record = transaction
            .prepare_cached(self.gate.record_sql())
            .await
            .map_err(|error| Failure::database("dedupe row", error))?;
        self.gate
            .record_outcome(&*transaction, &record, key, effect.outcome, &effect.row_counts)
            .await
            .map_err(|error| Failure::database("dedupe row", error))?;
        transaction.commit().await.map_err(|error| Failure::database("commit", error))?;
        Ok(outcome_label(&effect))
    }
}

/// Every `postgres` handler's table of a consumer config (the default's and each route's), by where it is
/// configured: what `hookline-consumer migrate` needs. Checked, not built.
pub fn configured_tables(
    config: &crate::config::ConsumerConfig,
) -> Result<Vec<(String, &PostgresConfig)>, PostgresError> {
    let handlers = std::iter::once(("[handler]".to_owned(), &config.handler)).chain(
        config.routes.iter().enumerate().map(|(index, route)| (format!("routes[{index}].handler"), &route.handler)),
    );
    let mut found = Vec::new();
    for (place, handler) in handlers {
        if let (Some(postgres), "postgres") = (&handler.postgres, handler.kind.as_str()) {
            let problems = checks::problems(postgres, &checks::Limits::of(config), false);
            if !problems.is_empty() {
                return Err(PostgresError::In { place, problem: Box::new(PostgresError::Config(problems)) });
            }
            found.push((place, postgres));
        }
    }
    Ok(found)
}

/// The shortest `retention_days` of the config's `postgres` handlers, if it has any: how long every dedupe row of
/// the service is kept at least, which its dead letters carry ([`crate::dlq::DeadLetters::keeping_dedupe_rows_for`]).
pub fn shortest_retention_days(config: &crate::config::ConsumerConfig) -> Option<u32> {
    configured_tables(config).ok()?.iter().map(|(_, postgres)| postgres.retention_days).min()
}

/// Every `postgres` handler of a consumer config, built (nothing connects until used): what `hookline-consumer
/// migrate` runs the tables of.
pub fn configured(config: &crate::config::ConsumerConfig) -> Result<Vec<(String, PostgresHandler)>, PostgresError> {
    configured_tables(config)?
        .into_iter()
        .map(|(place, postgres)| {
            PostgresHandler::from_config(postgres, &config.config_dir)
                .map(|handler| (place.clone(), handler))
                .map_err(|problem| PostgresError::In { place: place.clone(), problem: Box::new(problem) })
        })
        .collect()
}

fn outcome_label(effect: &Effect) -> &'static str {
    match effect.outcome {
        gate::Outcome::Applied => postgres_outcome::APPLIED,
        gate::Outcome::Skipped => postgres_outcome::SKIPPED,
    }
}

pub(super) fn pool_error_line(error: &PoolError) -> String {
    match error {
        PoolError::Backend(error) => describe(error),
        PoolError::Timeout(_) => {
            "no database connection within pool_wait_ms (pool full, or the server slow to accept)".to_owned()
        }
        other => other.to_string(),
    }
}

/// Whether a connection error at start is a configuration the server will never accept (a wrong password, an
/// unknown database or role, a certificate that does not verify) rather than a server not reachable yet.
fn start_refusal(error: &PoolError) -> bool {
    let PoolError::Backend(error) = error else { return false };
    if error.code().is_some() {
        return classify_error(error) != Disposition::Retryable;
    }
    let mut cause = std::error::Error::source(error);
    while let Some(current) = cause {
        if current.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        if let Some(io) = current.downcast_ref::<std::io::Error>() {
            if io.get_ref().is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some()) {
                return true;
            }
        }
        cause = current.source();
    }
    false
}

impl Handler for PostgresHandler {
    fn name(&self) -> &str {
        "postgres"
    }

    fn start<'a>(&'a self, context: &'a StartContext) -> BoxFuture<'a, Result<(), StartError>> {
        Box::pin(async move {
            self.prepare(context).await?;
            if !matches!(self.work, Work::Inbox(_)) && self.started.get().is_none() {
                tokio::spawn(self.retention.clone().run(
                    self.pool.clone(),
                    context.metrics.clone(),
                    context.shutdown.clone(),
                ));
            }
            let _ = self.started.set(Started { service: context.service.clone(), metrics: context.metrics.clone() });
            Ok(())
        })
    }

    fn handle<'a>(&'a self, event: &'a InboundEvent) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            let started =
                self.started.get().ok_or_else(|| HandlerError::retryable("the postgres handler has not started"))?;
            let count = |outcome: &str| {
                started.metrics.postgres_transactions.with_label_values(&[event.meta.source.as_str(), outcome]).inc();
            };
            let json = match &self.work {
                Work::Statements(statements) if statements.needs_json => Some(
                    serde_json::from_slice::<serde_json::Value>(&event.body)
                        .map_err(|error| HandlerError::poison(format!("body is not valid JSON: {error}")))?,
                ),
                _ => None,
            };
            let mut reprepared = false;
            loop {
                let failure = match self.transact(started, event, json.as_ref()).await {
                    Ok(outcome) => {
                        count(outcome);
                        return Ok(());
                    }
                    Err(failure) => failure,
                };
                let (outcome, error) = match failure {
                    Failure::Handler(error) => {
                        let outcome = match &error {
                            HandlerError::Poison(_) => postgres_outcome::POISON,
                            HandlerError::Retryable { .. } => postgres_outcome::RETRYABLE,
                        };
                        (outcome, error)
                    }
                    Failure::PoolWait(line) => (postgres_outcome::RETRYABLE, HandlerError::retryable(line)),
                    Failure::Database { context, error } => {
                        tracing::debug!(
                            event_id = %event.meta.event_id,
                            error = %describe_in_full(&error),
                            "{context}: the database error in full (debug only: it may hold row data)"
                        );
                        let line = format!("{context}: {}", describe(&error));
                        match classify_error(&error) {
                            Disposition::Reprepare if !reprepared => {
                                reprepared = true;
                                count(postgres_outcome::REPREPARED);
                                continue;
                            }
                            Disposition::Reprepare | Disposition::SchemaChanged => (
                                postgres_outcome::SCHEMA_CHANGED,
                                HandlerError::retryable(format!("the schema or grants changed: {line}")),
                            ),
                            Disposition::Retryable => (postgres_outcome::RETRYABLE, HandlerError::retryable(line)),
                            Disposition::Poison => (postgres_outcome::POISON, HandlerError::poison(line)),
                        }
                    }
                };
                count(outcome);
                return Err(error);
            }
        })
    }
}

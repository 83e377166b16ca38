//! `inbox` mode: each verified event becomes one row of the user's inbox table, and that row is the dedupe record
//! (its primary key is service, source, event id). One `INSERT ... ON CONFLICT DO NOTHING RETURNING` is atomic,
//! so no explicit transaction is needed: a row back means this event is new, none means it was stored before.
//!
//! The rows of events waiting at the same time go in one such statement ([`Batcher`]): a batch commits whole or
//! not at all, and its `RETURNING` names the rows that were new. Nothing waits to fill a batch: at low load each
//! event's row goes alone, as soon as a connection is free.

use std::{
    collections::{HashSet, VecDeque},
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime},
};

use deadpool_postgres::{Object, Pool, PoolError};
use hookline_common::wire::InboundEvent;
use tokio::sync::oneshot;
use tokio_postgres::types::ToSql;

use super::{
    Failure,
    gate::{DedupeTable, EventKey},
    params::Bound,
};
use crate::{
    config::postgres::{BodyColumn, InboxConfig},
    handler::HandlerError,
    metrics::postgres_outcome,
};

pub struct Inbox {
    table: DedupeTable,
    body: BodyColumn,
    /// Lower-case header names kept in the row's `headers`.
    headers: Vec<String>,
    statements: InsertSql,
    batcher: Arc<Batcher>,
}

impl std::fmt::Debug for Inbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbox").field("table", &self.table.name()).field("body", &self.body).finish_non_exhaustive()
    }
}

impl Inbox {
    pub fn new(config: &InboxConfig) -> Result<Self, super::work::WorkConfigError> {
        let table = DedupeTable::new(&config.table).map_err(super::work::WorkConfigError::InboxTable)?;
        let columns = "INSERT INTO {table} (service, source, event_id, event_type, received_at, body, headers)"
            .replace("{table}", table.name());
        let conflict = "ON CONFLICT (service, source, event_id) DO NOTHING RETURNING source, event_id";
        let one = format!("{columns} VALUES ($1, $2, $3, $4, $5, $6, $7) {conflict}");
        let many = format!(
            "{columns} SELECT $1::text, * FROM unnest($2::text[], $3::text[], $4::text[], $5::timestamptz[], \
             $6::{body}[], $7::jsonb[]) {conflict}",
            body = config.body.sql_type()
        );
        let headers = config.headers.iter().map(|name| name.to_ascii_lowercase()).collect();
        let statements = InsertSql { one: one.into(), many: many.into() };
        Ok(Self { table, body: config.body, headers, statements, batcher: Arc::default() })
    }

    pub fn table(&self) -> &str {
        self.table.name()
    }

    /// The statements every event's row is inserted with (one row, many rows): prepared at start.
    pub fn insert_sql(&self) -> [&str; 2] {
        [&self.statements.one, &self.statements.many]
    }

    /// The inbox table's definition (idempotent), for `hookline-consumer migrate`.
    pub fn create_sql(&self) -> String {
        let name = self.table.name();
        let index = format!("{}_received_at", name.rsplit('.').next().unwrap_or(name));
        format!(
            "CREATE TABLE IF NOT EXISTS {name} (
    service     text        NOT NULL,
    source      text        NOT NULL,
    event_id    text        NOT NULL,
    event_type  text,
    received_at timestamptz NOT NULL,
    body        {body}       NOT NULL,
    headers     jsonb       NOT NULL DEFAULT '{{}}',
    inserted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (service, source, event_id)
);
CREATE INDEX IF NOT EXISTS {index} ON {name} (received_at);",
            body = self.body.sql_type()
        )
    }

    /// Stores the event's row; the outcome label says whether it was new. Rows of events waiting at the same time
    /// go in together: see [`Self`]'s batching.
    pub async fn insert(
        &self,
        pool: &Pool,
        pool_wait: &prometheus::Histogram,
        batch_rows: &prometheus::Histogram,
        key: &EventKey<'_>,
        event: &InboundEvent,
    ) -> Result<&'static str, Failure> {
        let row = self.row(key, event);
        let (reply, answer) = oneshot::channel();
        let mut waiting = Batcher::enqueue(&self.batcher, Pending { row, reply });
        let waited = Instant::now();
        match pool.get().await {
            Ok(client) => {
                pool_wait.observe(waited.elapsed().as_secs_f64());
                // Its own task: an event whose handler times out does not take the others' rows with it.
                tokio::spawn(drain(
                    client,
                    self.batcher.clone(),
                    self.statements.clone(),
                    key.service.to_owned(),
                    batch_rows.clone(),
                ));
            }
            // No connection: unless another event's connection took this row already, it fails as the wait did.
            Err(error) if waiting.withdraw() => {
                return Err(match error {
                    PoolError::Backend(error) => Failure::database("connect", error),
                    other => Failure::PoolWait(super::pool_error_line(&other)),
                });
            }
            Err(_) => {}
        }
        waiting.taken();
        let new = answer.await.map_err(|_| {
            Failure::Handler(HandlerError::retryable("the inbox insert ended without an answer (its task panicked)"))
        })??;
        Ok(if new { postgres_outcome::APPLIED } else { postgres_outcome::DUPLICATE })
    }

    /// The event's row, every value owned (it may be inserted by another event's task).
    fn row(&self, key: &EventKey<'_>, event: &InboundEvent) -> Row {
        let mut headers = serde_json::Map::new();
        for (name, value) in &event.forwarded_headers {
            if self.headers.iter().any(|kept| kept == name) {
                let value = String::from_utf8_lossy(value).into_owned();
                match headers.get_mut(name) {
                    // A header sent more than once: its values joined, as HTTP allows.
                    Some(serde_json::Value::String(first)) => {
                        first.push_str(", ");
                        first.push_str(&value);
                    }
                    _ => {
                        headers.insert(name.clone(), serde_json::Value::String(value));
                    }
                }
            }
        }
        let body = match self.body {
            // The server checks the JSON: a body that is not is `22P02`, poison.
            BodyColumn::Jsonb => Bound::Json(event.body.to_vec()),
            BodyColumn::Bytea => Bound::Bytes(event.body.to_vec()),
        };
        Row {
            source: key.source.to_owned(),
            event_id: key.event_id.to_owned(),
            event_type: event.meta.event_type.clone(),
            received_at: std::time::UNIX_EPOCH
                + Duration::from_millis(u64::try_from(event.meta.received_at_ms).unwrap_or_default()),
            body,
            headers: Bound::Json(serde_json::Value::Object(headers).to_string().into_bytes()),
        }
    }
}

/// One event's inbox row.
#[derive(Debug)]
struct Row {
    source: String,
    event_id: String,
    event_type: Option<String>,
    received_at: SystemTime,
    body: Bound,
    headers: Bound,
}

impl Row {
    fn bytes(&self) -> usize {
        let len = |bound: &Bound| match bound {
            Bound::Json(bytes) | Bound::Bytes(bytes) => bytes.len(),
            _ => 0,
        };
        len(&self.body) + len(&self.headers) + self.event_id.len()
    }
}

/// An event waiting for its row to be stored: whether it was new, or why not.
struct Pending {
    row: Row,
    reply: oneshot::Sender<Result<bool, Failure>>,
}

/// The events waiting for a connection. Whichever of them gets one first takes every row waiting (up to
/// [`MAX_BATCH_ROWS`] and [`MAX_BATCH_BYTES`]) and stores them in one statement; the others find their row taken
/// and wait for its answer. At low load a batch is one row and nothing waits for company; under load the
/// batches grow by themselves, and a database transaction, a round trip and a commit serve many events.
#[derive(Default)]
struct Batcher {
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    next_id: u64,
    waiting: VecDeque<(u64, Pending)>,
}

/// Rows per statement at most (7 array parameters each).
const MAX_BATCH_ROWS: usize = 128;
/// Bytes of bodies and headers per statement at most; a larger row still goes, alone.
const MAX_BATCH_BYTES: usize = 1 << 20;

impl Batcher {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn enqueue(this: &Arc<Self>, pending: Pending) -> Waiting {
        let mut queue = this.lock();
        let id = queue.next_id;
        queue.next_id += 1;
        queue.waiting.push_back((id, pending));
        Waiting { batcher: this.clone(), id: Some(id) }
    }

    /// The rows waiting, oldest first, within the batch's bounds.
    fn take(&self) -> Vec<Pending> {
        let mut queue = self.lock();
        let mut batch = Vec::new();
        let mut bytes = 0;
        while let Some((_, pending)) = queue.waiting.front() {
            let size = pending.row.bytes();
            if !batch.is_empty() && (batch.len() == MAX_BATCH_ROWS || bytes + size > MAX_BATCH_BYTES) {
                break;
            }
            bytes += size;
            batch.push(queue.waiting.pop_front().expect("front exists").1);
        }
        batch
    }
}

/// An event's place in the queue: withdrawn if its handler is dropped (a timeout) before a batch took it, so a
/// row is never stored for an attempt that already gave up.
struct Waiting {
    batcher: Arc<Batcher>,
    id: Option<u64>,
}

impl Waiting {
    /// Takes the row out of the queue; false if a batch has it already.
    fn withdraw(&mut self) -> bool {
        self.remove()
    }

    /// A connection is draining the queue, so the row will be stored: keep it queued if this attempt is dropped
    /// (its answer is then lost; the next attempt finds the row).
    fn taken(mut self) {
        self.id = None;
    }

    fn remove(&mut self) -> bool {
        let Some(id) = self.id.take() else { return false };
        let mut queue = self.batcher.lock();
        let Some(position) = queue.waiting.iter().position(|(queued, _)| *queued == id) else { return false };
        queue.waiting.remove(position);
        true
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.remove();
    }
}

/// The inbox's two statements: one row, and many at once (each column an array).
#[derive(Debug, Clone)]
struct InsertSql {
    one: Arc<str>,
    many: Arc<str>,
}

/// Stores the rows waiting on `client`, batch after batch, until none is left: the event that got the connection
/// may find its own row taken by another, or behind a full batch.
async fn drain(client: Object, batcher: Arc<Batcher>, sql: InsertSql, service: String, rows: prometheus::Histogram) {
    loop {
        let batch = batcher.take();
        if batch.is_empty() {
            return;
        }
        #[allow(clippy::cast_precision_loss)]
        rows.observe(batch.len() as f64);
        run_batch(&client, &sql, &service, batch).await;
    }
}

/// Stores `batch` on `client` and answers each event. A batch of several rows that fails is tried again row by
/// row (pipelined on the same connection), so each event gets its own answer: one body the server refuses
/// (`22P02`) fails its own event only.
async fn run_batch(client: &Object, sql: &InsertSql, service: &str, batch: Vec<Pending>) {
    if batch.len() > 1 {
        match insert_many(client, &sql.many, service, &batch).await {
            Ok(mut new) => {
                for pending in batch {
                    // A row sent twice in one batch is new once.
                    let inserted = new.remove(&(pending.row.source.clone(), pending.row.event_id.clone()));
                    let _ = pending.reply.send(Ok(inserted));
                }
                return;
            }
            Err(error) => {
                tracing::debug!(error = %super::describe(&error), rows = batch.len(), "inbox batch failed; row by row");
            }
        }
    }
    let answers =
        futures_util::future::join_all(batch.iter().map(|pending| insert_one(client, &sql.one, service, &pending.row)))
            .await;
    for (pending, answer) in batch.into_iter().zip(answers) {
        let _ = pending.reply.send(answer.map_err(|error| Failure::database("inbox", error)));
    }
}

async fn insert_one(client: &Object, sql: &str, service: &str, row: &Row) -> Result<bool, tokio_postgres::Error> {
    let statement = client.prepare_cached(sql).await?;
    let params: [&(dyn ToSql + Sync); 7] =
        [&service, &row.source, &row.event_id, &row.event_type, &row.received_at, &row.body, &row.headers];
    Ok(client.query_opt(&statement, &params).await?.is_some())
}

/// The keys (source, event id) of the rows `batch` inserted.
async fn insert_many(
    client: &Object,
    sql: &str,
    service: &str,
    batch: &[Pending],
) -> Result<HashSet<(String, String)>, tokio_postgres::Error> {
    let statement = client.prepare_cached(sql).await?;
    let rows = batch.iter().map(|pending| &pending.row);
    let sources: Vec<&str> = rows.clone().map(|row| row.source.as_str()).collect();
    let event_ids: Vec<&str> = rows.clone().map(|row| row.event_id.as_str()).collect();
    let event_types: Vec<Option<&str>> = rows.clone().map(|row| row.event_type.as_deref()).collect();
    let received: Vec<SystemTime> = rows.clone().map(|row| row.received_at).collect();
    let bodies: Vec<&Bound> = rows.clone().map(|row| &row.body).collect();
    let headers: Vec<&Bound> = rows.map(|row| &row.headers).collect();
    let params: [&(dyn ToSql + Sync); 7] = [&service, &sources, &event_ids, &event_types, &received, &bodies, &headers];
    let inserted = client.query(&statement, &params).await?;
    Ok(inserted.iter().map(|row| (row.get(0), row.get(1))).collect())
}

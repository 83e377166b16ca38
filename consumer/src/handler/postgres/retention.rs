//! Retention of dedupe rows: rows older than `retention_days` are deleted in batches, by one consumer at a time
//! (a transaction-scoped advisory lock per batch, so members of a group, and services sharing the table, never
//! delete side by side), and the table's size and oldest row are exported as gauges. Runs every
//! `retention_interval_ms` until shutdown; a failure is logged and tried again next time.

use std::time::Duration;

use deadpool_postgres::Pool;
use tokio_util::sync::CancellationToken;

use super::{PostgresError, describe, gate::DedupeTable, pool_error_line};
use crate::metrics::Metrics;

/// Rows deleted per transaction: short transactions, so retention never holds locks long beside live traffic.
const BATCH: i64 = 5_000;

#[derive(Debug, Clone)]
pub struct Retention {
    pub table: DedupeTable,
    pub keep_days: u32,
    pub interval: Duration,
}

impl Retention {
    pub async fn run(self, pool: Pool, metrics: Metrics, shutdown: CancellationToken) {
        loop {
            if let Err(problem) = self.once(&pool, &metrics).await {
                tracing::warn!(table = %self.table.name(), problem = %problem, "dedupe row retention failed; will retry");
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(self.interval) => {}
            }
        }
    }

    /// Deletes what is due (unless another consumer is doing it) and refreshes the gauges.
    pub async fn once(&self, pool: &Pool, metrics: &Metrics) -> Result<u64, PostgresError> {
        let name = self.table.name();
        let mut client =
            pool.get().await.map_err(|source| PostgresError::Pool { line: pool_error_line(&source), source })?;
        let delete = format!(
            "DELETE FROM {name} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {name} \
             WHERE processed_at < now() - make_interval(days => $1) LIMIT {BATCH}))"
        );
        let days = i32::try_from(self.keep_days).unwrap_or(i32::MAX);
        let mut deleted = 0;
        loop {
            let transaction = client.transaction().await.map_err(database)?;
            let mine: bool = transaction
                .query_one("SELECT pg_try_advisory_xact_lock(hashtext($1))", &[&format!("hookline retention {name}")])
                .await
                .map_err(database)?
                .get(0);
            if !mine {
                break;
            }
            let batch = transaction.execute(delete.as_str(), &[&days]).await.map_err(database)?;
            transaction.commit().await.map_err(database)?;
            deleted += batch;
            metrics.postgres_rows_deleted.with_label_values(&[name]).inc_by(batch);
            if batch < u64::try_from(BATCH).unwrap_or(u64::MAX) {
                break;
            }
        }
        // The planner's estimate of the row count (a count(*) of a large table costs a scan); the oldest row
        // through the `processed_at` index.
        let row = client
            .query_one(
                &format!(
                    "SELECT (SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = to_regclass($1)), \
                     (SELECT coalesce(extract(epoch FROM now() - min(processed_at)), 0)::bigint FROM {name})"
                ),
                &[&name],
            )
            .await
            .map_err(database)?;
        metrics.postgres_dedupe_rows.with_label_values(&[name]).set(row.get::<_, Option<i64>>(0).unwrap_or(0));
        metrics.postgres_oldest_row_age.with_label_values(&[name]).set(row.get::<_, i64>(1));
        Ok(deleted)
    }
}

/// A database error as the retention task reports it: described without the values it may name.
fn database(source: tokio_postgres::Error) -> PostgresError {
    PostgresError::Database { line: describe(&source), source }
}

//! The dedupe record in the user's database: a row keyed by service, source and event id, inserted first in the
//! transaction that does the event's work, so the work and the record commit together or not at all.
//!
//! `INSERT ... ON CONFLICT DO NOTHING RETURNING` settles every race through the primary key, at READ COMMITTED:
//! - no row yet: this transaction inserts it and goes on to do the work ([`Gate::Acquired`]);
//! - a committed row: the work was done, the event is a duplicate ([`Gate::AlreadyApplied`]), never poison;
//! - a row another open transaction inserted: the insert waits for that transaction. If it commits, this one sees
//!   the conflict (a duplicate); if it rolls back or its connection dies, this one inserts the row and does the work.
//!
//! So a crash anywhere before COMMIT leaves no row and the next attempt does the work; a crash after COMMIT (a lost
//! done marker in Redis, a handler timeout during COMMIT, a COMMIT whose reply never arrived) leaves the row, and
//! the next attempt finds it.

use tokio_postgres::{GenericClient, ToStatement, types::ToSql};
/// The key of one event's dedupe row. The service is part of it: two services on one stream each do their own work
/// once, as with the Redis claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventKey<'a> {
    pub service: &'a str,
    pub source: &'a str,
    pub event_id: &'a str,
}

/// What the dedupe insert found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// The row is this transaction's: do the work, then commit.
    Acquired,
    /// A committed row: the event's effect already happened. Roll back; count a duplicate.
    AlreadyApplied,
}

/// How the work ended, stored in the row beside the statements' row counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The statements ran and matched the rows they expected.
    Applied,
    /// A state-machine guard matched no row (`on_zero_rows = "skip"`): nothing to do, recorded so a re-delivery
    /// is a duplicate too.
    Skipped,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Applied => "applied",
            Self::Skipped => "skipped",
        }
    }
}

/// A table name that is not a plain (optionally schema-qualified) SQL identifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "table `{0}`: use a lower-case identifier of letters, digits and `_` (not starting with a digit), \
     optionally schema-qualified (`schema.table`)"
)]
pub struct InvalidTableName(pub String);

/// The dedupe table and the statements that use it. The name is checked once, so it can be written into SQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DedupeTable {
    name: String,
    acquire: String,
    acquire_applied: String,
    record: String,
    committed: String,
}

impl DedupeTable {
    pub fn new(name: &str) -> Result<Self, InvalidTableName> {
        let identifier = |part: &str| {
            let mut chars = part.chars();
            chars.next().is_some_and(|first| first.is_ascii_lowercase() || first == '_')
                && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                && part.len() <= 63
        };
        let parts: Vec<&str> = name.split('.').collect();
        if parts.len() > 2 || !parts.iter().all(|part| identifier(part)) {
            return Err(InvalidTableName(name.to_owned()));
        }
        Ok(Self {
            name: name.to_owned(),
            acquire: format!(
                "INSERT INTO {name} (service, source, event_id) VALUES ($1, $2, $3) \
                 ON CONFLICT (service, source, event_id) DO NOTHING RETURNING 1"
            ),
            acquire_applied: format!(
                "INSERT INTO {name} (service, source, event_id, outcome, row_counts) VALUES ($1, $2, $3, 'applied', $4) \
                 ON CONFLICT (service, source, event_id) DO NOTHING RETURNING 1"
            ),
            record: format!(
                "UPDATE {name} SET outcome = $4, row_counts = $5 WHERE service = $1 AND source = $2 AND event_id = $3"
            ),
            committed: format!("SELECT 1 FROM {name} WHERE service = $1 AND source = $2 AND event_id = $3"),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The table's definition, for `hookline-consumer migrate` and the documented SQL a user runs once. Idempotent.
    /// `processed_at` is what retention deletes by (never sooner than the Redis TTL plus the replay horizon).
    pub fn create_sql(&self) -> String {
        let name = &self.name;
        let index = format!("{}_processed_at", name.rsplit('.').next().unwrap_or(name));
        format!(
            "CREATE TABLE IF NOT EXISTS {name} (
    service      text        NOT NULL,
    source       text        NOT NULL,
    event_id     text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    outcome      text        NOT NULL DEFAULT 'applied' CHECK (outcome IN ('applied', 'skipped')),
    row_counts   bigint[],
    PRIMARY KEY (service, source, event_id)
);
CREATE INDEX IF NOT EXISTS {index} ON {name} (processed_at);"
        )
    }

    /// The dedupe insert: parameters service, source, event id; a row back when this transaction inserted it.
    pub fn acquire_sql(&self) -> &str {
        &self.acquire
    }

    /// The dedupe insert with the outcome presumed `applied` and the row counts the work is expected to change
    /// (parameters service, source, event id, row counts): when the work does exactly that, the row needs no
    /// second write ([`Self::record_sql`]) before COMMIT.
    pub fn acquire_applied_sql(&self) -> &str {
        &self.acquire_applied
    }

    /// The outcome update: parameters service, source, event id, outcome, row counts.
    pub fn record_sql(&self) -> &str {
        &self.record
    }

    /// Whether the event's row is committed: parameters service, source, event id; a row back if it is. Run on its
    /// own (outside a transaction), it sees only committed rows, so a row back means the effect happened.
    pub fn committed_sql(&self) -> &str {
        &self.committed
    }

    /// Inserts the event's row inside `transaction` (which must be open: the row and the work commit together),
    /// with `statement`: [`Self::acquire_sql`] or its prepared form.
    pub async fn acquire<S>(
        &self,
        transaction: &impl GenericClient,
        statement: &S,
        key: &EventKey<'_>,
    ) -> Result<Gate, tokio_postgres::Error>
    where
        S: ToStatement + Sync + Send + ?Sized,
    {
        let params: [&(dyn ToSql + Sync); 3] = [&key.service, &key.source, &key.event_id];
        let inserted = transaction.query_opt(statement, &params).await?;
        Ok(if inserted.is_some() { Gate::Acquired } else { Gate::AlreadyApplied })
    }

    /// Records how the work ended in the row [`Self::acquire`] inserted, in the same transaction, with
    /// `statement`: [`Self::record_sql`] or its prepared form.
    pub async fn record_outcome<S>(
        &self,
        transaction: &impl GenericClient,
        statement: &S,
        key: &EventKey<'_>,
        outcome: Outcome,
        row_counts: &[i64],
    ) -> Result<(), tokio_postgres::Error>
    where
        S: ToStatement + Sync + Send + ?Sized,
    {
        let outcome = outcome.as_str();
        let params: [&(dyn ToSql + Sync); 5] = [&key.service, &key.source, &key.event_id, &outcome, &row_counts];
        transaction.execute(statement, &params).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_plain_identifiers_or_schema_qualified_ones() {
        for good in ["hookline_processed_events", "billing.processed", "_t1"] {
            assert_eq!(DedupeTable::new(good).map(|table| table.name().to_owned()), Ok(good.to_owned()));
        }
        for bad in ["", "Orders", "1t", "a.b.c", "t; DROP TABLE orders", "\"quoted\"", "a-b", "a.", &"t".repeat(64)] {
            assert_eq!(DedupeTable::new(bad), Err(InvalidTableName(bad.to_owned())), "{bad}");
        }
    }

    #[test]
    fn the_index_is_named_after_the_table_without_its_schema() {
        let sql = DedupeTable::new("billing.processed").expect("valid").create_sql();
        assert!(sql.contains("CREATE INDEX IF NOT EXISTS processed_processed_at ON billing.processed"), "{sql}");
    }
}

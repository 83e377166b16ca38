//! One round trip per event when the work is one statement: the dedupe row, the statement and the outcome in one
//! data-modifying statement, sent with its BEGIN and COMMIT at once.
//!
//! ```sql
//! WITH hookline_work AS (<the statement> RETURNING 1),
//!      hookline_row AS (INSERT INTO <dedupe table> (..., outcome, row_counts)
//!                       VALUES (..., 'applied', ARRAY[(SELECT count(*) FROM hookline_work)])
//!                       ON CONFLICT (service, source, event_id) DO NOTHING RETURNING 1)
//! SELECT CASE WHEN <one row inserted and the count as configured> THEN 1 ELSE (<a message>)::int END
//! ```
//!
//! The statement commits only what the two-round-trip transaction ([`super::Statements::run`]) would have
//! committed as `applied`: when the dedupe row was new and the statement changed the rows it must. Anything else
//! (a duplicate, zero rows, another count) makes the final cast fail (SQLSTATE 22P02, with a message that says why
//! in the server's log), which aborts the transaction, so the COMMIT sent behind it rolls back, the statement's
//! effect with it. The event is then a duplicate if its row is committed; else it takes the two-round-trip path,
//! which decides the skip, the retry or the poison exactly as before. Why these guarantees hold:
//! - the dedupe row and the effect are one statement in one transaction: both or neither;
//! - a duplicate applies nothing: the insert finds the committed row (or waits for the open transaction that
//!   inserted it, as the two-round-trip insert does), the cast fails, everything rolls back;
//! - the zero-rows and row-count dispositions are the two-round-trip path's own: it runs for every event whose
//!   count is not the configured one.
//!
//! Only for one statement: the parts of one SQL statement see one snapshot, so a second statement could not see
//! the first one's writes as it does in its own statement. And only when the wrapped statement prepares (an INSERT,
//! UPDATE or DELETE without its own RETURNING, no `DO INSTEAD` rule): checked at start, else the two round trips.

use hookline_common::wire::InboundEvent;
use serde_json::Value;
use tokio_postgres::{error::SqlState, types::ToSql};

use super::{
    super::{
        Failure,
        gate::{DedupeTable, EventKey},
        params::Bound,
    },
    Statement,
};
use crate::handler::HandlerError;

/// The one statement of an event whose work is one configured statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OneTrip {
    sql: String,
}

/// How the one round trip ended.
pub(super) enum Settled {
    /// Committed: the dedupe row, `applied`, and the statement's effect.
    Applied,
    /// Rolled back because something was not as presumed (a duplicate, another row count): the connection, idle,
    /// for the two-round-trip path to decide.
    NotAsPresumed(Box<deadpool_postgres::Object>),
}

impl OneTrip {
    pub fn new(gate: &DedupeTable, statement: &Statement) -> Self {
        let work = statement.sql.trim_end().trim_end_matches(';').trim_end();
        let count_is_right = match statement.rows {
            Some(rows) => format!("= {rows}"),
            None => "> 0".to_owned(),
        };
        let n_params = statement.params.len();
        let (service, source, event_id) = (n_params + 1, n_params + 2, n_params + 3);
        let table = gate.name();
        // The work's text ends on its own line, so a trailing `--` comment cannot swallow `RETURNING`.
        let sql = format!(
            "WITH hookline_work AS (\n{work}\nRETURNING 1\n), hookline_row AS (\
             INSERT INTO {table} (service, source, event_id, outcome, row_counts) \
             VALUES (${service}, ${source}, ${event_id}, 'applied', ARRAY[(SELECT count(*) FROM hookline_work)]) \
             ON CONFLICT (service, source, event_id) DO NOTHING RETURNING 1) \
             SELECT CASE WHEN (SELECT count(*) FROM hookline_row) = 1 \
             AND (SELECT count(*) FROM hookline_work) {count_is_right} THEN 1 \
             ELSE ('hookline: rolled back, not applied as presumed (dedupe rows inserted: ' \
             || (SELECT count(*) FROM hookline_row) || ', rows changed: ' \
             || (SELECT count(*) FROM hookline_work) || ')')::int END"
        );
        Self { sql }
    }

    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// Sends BEGIN, the one statement and COMMIT at once, on `client` (idle, from the pool). If this future is
    /// dropped mid-way (the handler's timeout), the connection is closed, not returned to the pool.
    pub(super) async fn run(
        &self,
        client: deadpool_postgres::Object,
        begin: &str,
        statement: &Statement,
        key: &EventKey<'_>,
        event: &InboundEvent,
        json: Option<&Value>,
    ) -> Result<Settled, Failure> {
        let prepared =
            client.prepare_cached(&self.sql).await.map_err(|error| Failure::database("statements[0]", error))?;
        let mut bound: Vec<Bound> = Vec::with_capacity(statement.params.len());
        for (position, (source, ty)) in statement.params.iter().zip(prepared.params()).enumerate() {
            bound.push(source.bind(event, json, key.service, ty).map_err(|problem| {
                Failure::Handler(HandlerError::poison(format!("statements[0] parameter ${}: {problem}", position + 1)))
            })?);
        }
        let mut params: Vec<&(dyn ToSql + Sync)> = bound.iter().map(|value| value as &(dyn ToSql + Sync)).collect();
        params.extend([&key.service as &(dyn ToSql + Sync), &key.source, &key.event_id]);

        let open = super::OpenTransaction::new(client);
        let client = open.client();
        let (began, settled, committed) = tokio::join!(
            client.batch_execute(begin),
            client.query_one(&prepared, &params[..]),
            client.batch_execute("COMMIT"),
        );
        began.map_err(|error| Failure::database("begin", error))?;
        // A COMMIT of a transaction the statement aborted answers ROLLBACK, not an error.
        committed.map_err(|error| Failure::database("commit", error))?;
        let client = open.into_idle();
        match settled {
            Ok(_) => Ok(Settled::Applied),
            Err(error) if error.code() == Some(&SqlState::INVALID_TEXT_REPRESENTATION) => {
                Ok(Settled::NotAsPresumed(Box::new(client)))
            }
            Err(error) => Err(Failure::database("statements[0]", error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::postgres::ZeroRows;
    use crate::handler::postgres::params::ParamSource;

    fn statement(sql: &str, n_params: usize, rows: Option<u64>) -> Statement {
        Statement {
            sql: sql.to_owned(),
            params: (0..n_params).map(|_| ParamSource::parse("event.id").expect("valid")).collect(),
            rows,
            on_zero_rows: ZeroRows::Poison,
        }
    }

    #[test]
    fn the_dedupe_key_follows_the_statements_own_parameters() {
        let gate = DedupeTable::new("processed").expect("valid");
        let one = OneTrip::new(&gate, &statement("UPDATE orders SET n = n + 1 WHERE id = $1 AND k = $2", 2, Some(1)));
        assert!(one.sql().contains("VALUES ($3, $4, $5, 'applied'"), "{}", one.sql());
        assert!(one.sql().contains("(SELECT count(*) FROM hookline_work) = 1 THEN 1"), "{}", one.sql());
        assert!(one.sql().starts_with("WITH hookline_work AS (\nUPDATE orders"), "{}", one.sql());
    }

    #[test]
    fn a_trailing_semicolon_or_comment_does_not_swallow_returning() {
        let gate = DedupeTable::new("processed").expect("valid");
        let one = OneTrip::new(&gate, &statement("DELETE FROM t WHERE id = $1 ; \n", 1, None));
        assert!(one.sql().contains("WHERE id = $1\nRETURNING 1\n)"), "{}", one.sql());
        assert!(one.sql().contains("(SELECT count(*) FROM hookline_work) > 0 THEN 1"), "{}", one.sql());
        let commented = OneTrip::new(&gate, &statement("DELETE FROM t WHERE id = $1 -- the order", 1, None));
        assert!(commented.sql().contains("-- the order\nRETURNING 1"), "{}", commented.sql());
    }
}

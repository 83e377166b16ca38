//! `inbox` mode: each verified event becomes one row of the user's inbox table, and that row is the dedupe record
//! (its primary key is service, source, event id). One `INSERT ... ON CONFLICT DO NOTHING RETURNING` is atomic,
//! so no explicit transaction is needed: a row back means this event is new, none means it was stored before.

use deadpool_postgres::Object;
use hookline_common::wire::InboundEvent;
use tokio_postgres::types::ToSql;

use super::{
    Failure,
    gate::{DedupeTable, EventKey},
    params::Bound,
};
use crate::{
    config::postgres::{BodyColumn, InboxConfig},
    metrics::postgres_outcome,
};

#[derive(Debug)]
pub struct Inbox {
    table: DedupeTable,
    body: BodyColumn,
    /// Lower-case header names kept in the row's `headers`.
    headers: Vec<String>,
    insert: String,
}

impl Inbox {
    pub fn new(config: &InboxConfig) -> Result<Self, String> {
        let table = DedupeTable::new(&config.table).map_err(|error| format!("inbox: {error}"))?;
        let insert = format!(
            "INSERT INTO {} (service, source, event_id, event_type, received_at, body, headers) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (service, source, event_id) DO NOTHING RETURNING 1",
            table.name()
        );
        let headers = config.headers.iter().map(|name| name.to_ascii_lowercase()).collect();
        Ok(Self { table, body: config.body, headers, insert })
    }

    pub fn table(&self) -> &str {
        self.table.name()
    }

    pub fn insert_sql(&self) -> &str {
        &self.insert
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

    /// Inserts the event's row; the outcome label says whether it was new.
    pub async fn insert(
        &self,
        client: &Object,
        key: &EventKey<'_>,
        event: &InboundEvent,
    ) -> Result<&'static str, Failure> {
        let statement = client.prepare_cached(&self.insert).await.map_err(|error| Failure::database("inbox", error))?;
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
        let headers = Bound::Json(serde_json::Value::Object(headers).to_string().into_bytes());
        let received_at = std::time::UNIX_EPOCH
            + std::time::Duration::from_millis(u64::try_from(event.meta.received_at_ms).unwrap_or_default());
        let event_type = event.meta.event_type.as_deref();
        let params: [&(dyn ToSql + Sync); 7] =
            [&key.service, &key.source, &key.event_id, &event_type, &received_at, &body, &headers];
        let inserted =
            client.query_opt(&statement, &params).await.map_err(|error| Failure::database("inbox", error))?;
        Ok(if inserted.is_some() { postgres_outcome::APPLIED } else { postgres_outcome::DUPLICATE })
    }
}

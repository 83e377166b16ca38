//! `[handler.postgres]` (the `postgres` handler, `crate::handler::postgres`): where the database is, how to reach it, and what an event's work is: rows of an inbox
//! table, or statements with parameters taken from the verified body and the event's metadata.

use std::path::PathBuf;

use hookline_common::config::{SecretRef, redact};
use serde::{Deserialize, Serialize};

/// The dedupe table's default name; `dedupe_table` may name another (schema-qualified or not).
pub const DEFAULT_DEDUPE_TABLE: &str = "hookline_processed_events";

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PostgresConfig {
    /// `postgres://user@host:port/database`, without a password (it comes from `password`). TLS is required
    /// unless the URL says `sslmode=disable`: `prefer`, libpq's default, would fall back to plain text when a
    /// network peer refuses TLS, so it is read as `require`. The server's certificate is always verified (the
    /// Mozilla roots and `ca_file`) against the host name, as libpq's `verify-full`.
    #[serde(serialize_with = "redact::optional_url_password")]
    pub url: Option<String>,
    /// The role's password, from a secret; read anew for every new connection, so a rotated secret file is
    /// picked up without a restart.
    pub password: Option<SecretRef>,
    /// A PEM file of CA certificates trusted besides the built-in Mozilla roots (a private CA, RDS's bundle).
    /// Relative to the config file's folder.
    pub ca_file: Option<PathBuf>,
    /// A PEM certificate chain presented for client-certificate authentication, with `client_key`.
    pub client_certificate: Option<PathBuf>,
    /// The PEM private key of `client_certificate`, from a secret.
    pub client_key: Option<SecretRef>,
    /// Connections to the database, at most: well below `processing.max_in_flight` (a database takes a few
    /// dozen busy connections well, not hundreds).
    pub pool_size: usize,
    /// How long an event waits for a free connection before its attempt fails, retryably.
    pub pool_wait_ms: u64,
    /// `statement_timeout` of every connection: below `[handler] timeout_ms`, so the server gives up first.
    pub statement_timeout_ms: u64,
    /// `lock_timeout` of every connection: below `statement_timeout_ms`. Also bounds the wait on another
    /// consumer's open transaction for the same event.
    pub lock_timeout_ms: u64,
    /// The work's transaction isolation: `read_committed` (the default), `repeatable_read` or `serializable`.
    /// Serialization failures are retried.
    pub isolation: Isolation,
    /// The dedupe table (statements mode and Rust handlers), created by `hookline-consumer migrate`.
    pub dedupe_table: String,
    /// Dedupe rows older than this are deleted (in batches, by one consumer at a time). At least the Redis
    /// `dedupe_ttl_s` plus 7 days: a provider's retry, a reconciliation or a replay of an event applied before must
    /// still find its row. The `inbox` table is yours: hookline never deletes from it.
    pub retention_days: u32,
    /// How often the retention runs and the row gauges are refreshed.
    pub retention_interval_ms: u64,
    /// The work, as statements run in the event's transaction after its dedupe row is inserted.
    pub statements: Vec<StatementConfig>,
    /// The work, as a row of an inbox table that is itself the dedupe record.
    pub inbox: Option<InboxConfig>,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        Self {
            url: None,
            password: None,
            ca_file: None,
            client_certificate: None,
            client_key: None,
            pool_size: 8,
            pool_wait_ms: 2_000,
            statement_timeout_ms: 5_000,
            lock_timeout_ms: 2_000,
            isolation: Isolation::ReadCommitted,
            dedupe_table: DEFAULT_DEDUPE_TABLE.to_owned(),
            retention_days: 30,
            retention_interval_ms: 60_000,
            statements: Vec::new(),
            inbox: None,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    #[default]
    ReadCommitted,
    RepeatableRead,
    Serializable,
}

/// One statement of an event's work.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct StatementConfig {
    /// The SQL, with `$1`, `$2`... for `params`. Prepared at start: an error in it stops the consumer there.
    pub sql: String,
    /// What each `$n` is bound to: a JSON pointer into the verified body (`/data/object/id`; `""` is the whole
    /// body), or the event's metadata: `event.id`, `event.source`, `event.type`, `event.received_at`,
    /// `event.body` (the raw bytes), `event.service`, `event.provider_event_id`. A pointer the body lacks is
    /// poison; a JSON `null` binds SQL `NULL`.
    pub params: Vec<String>,
    /// The row count the statement must report, when it must be exact (an UPDATE of one order: 1). Absent: any
    /// count but 0. A different count (not 0) is poison: the statement matched rows it was not meant to.
    pub rows: Option<u64>,
    /// What 0 rows means.
    pub on_zero_rows: ZeroRows,
}

/// What a statement that matched no row means.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ZeroRows {
    /// Dead-letter the event (re-drivable): the row it should change is not there and will not come.
    #[default]
    Poison,
    /// Nothing to do: a state-machine guard that the row is already past (`WHERE status = 'pending'`). The work
    /// of the event is undone (to a savepoint taken after the dedupe row), the dedupe row is committed marked
    /// `skipped`, and a re-delivery is a duplicate.
    Skip,
    /// The row is not there yet (providers do not keep order): roll back and retry later, then dead-letter.
    Retry,
}

/// `[handler.postgres.inbox]`: each verified event becomes one row of a table the user's services read.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct InboxConfig {
    /// The inbox table, created by `hookline-consumer migrate`; its primary key (service, source, event_id) is the
    /// dedupe record.
    pub table: String,
    /// The body column's type: `jsonb` (a body that is not JSON is poison) or `bytea` (any body, as received).
    pub body: BodyColumn,
    /// Provider request headers stored in the row's `headers` (a JSON object), when the record carries them (the
    /// gateway source's `forward_headers` must carry them into Kafka).
    pub headers: Vec<String>,
}

impl Default for InboxConfig {
    fn default() -> Self {
        Self { table: "hookline_inbox".to_owned(), body: BodyColumn::Jsonb, headers: Vec::new() }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BodyColumn {
    #[default]
    Jsonb,
    Bytea,
}

impl BodyColumn {
    pub fn sql_type(self) -> &'static str {
        match self {
            Self::Jsonb => "jsonb",
            Self::Bytea => "bytea",
        }
    }
}

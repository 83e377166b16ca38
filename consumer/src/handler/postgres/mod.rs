//! The `postgres` handler (issue 22), being built: each event's dedupe record is a row in the user's database,
//! inserted in the same transaction as the event's work. What exists so far is how a database error decides the
//! event's fate ([`sqlstate`]); the handler, its configuration and its Rust API are not built yet.

pub mod sqlstate;

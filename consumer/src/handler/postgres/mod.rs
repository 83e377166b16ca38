//! The `postgres` handler (issue 22), being built: each event's dedupe record is a row in the user's database,
//! inserted in the same transaction as the event's work. What exists so far: the dedupe row and the race rules it
//! settles ([`gate`]), and how a database error decides the event's fate ([`sqlstate`]). The handler itself, its
//! configuration, pool and TLS, and the Rust API are not built yet.

pub mod gate;
pub mod sqlstate;

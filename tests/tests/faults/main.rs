//! The tests that stop, kill or freeze the shared broker, Redis or PostgreSQL, or start a cluster of their own: one
//! binary, so the dependency graph is linked once for all of them, run one test at a time
//! (`scripts/test` passes `--test-threads 1`), since each fault would disturb any test beside it. Cargo runs one
//! test binary at a time, so none of them runs beside the suite either.
//!
//! Run one module: `cargo test -p hookline-tests --test faults -- --test-threads 1 chaos_soak::` (a name filter).

mod broker_restart;
mod chaos_soak;
mod cluster_faults;
mod consumer_outage_start;
mod gateway_broker_outage;
mod postgres_errors;
mod postgres_faults;
mod postgres_killed;
mod redis_outage;

//! The cross-service suite's tests that share the stack without disturbing it: one binary, so the dependency graph
//! is linked once for all of them instead of once per file (each debug test binary is ~120 MB), and tests of
//! different files overlap their waits on the broker. Each module is one topic of the suite, with its own topics,
//! consumer groups and Redis prefixes, so they run in parallel.
//!
//! The tests that stop, kill or freeze the shared broker, Redis or PostgreSQL are the modules of another binary,
//! `faults` (run one test at a time); those that install the process-wide tracer (traces, traces_collector,
//! traces_off) and the one that reads its own process's peak memory (consumer_memory) stay binaries of their own:
//! cargo runs one test binary at a time, so none of them runs beside this one.
//!
//! Run one module: `cargo test -p hookline-tests --test suite replayer::` (a name filter).

mod alert_https;
mod config_reference;
mod console_browser;
mod console_flow_browser;
mod console_oidc_browser;
mod consumer;
mod consumer_concurrency;
mod consumer_killed;
mod consumer_lag;
mod consumer_services;
mod dead_letter_resend;
mod dedupe_buckets;
mod dedupe_dead_marker;
mod dedupe_previous_layout;
mod dedupe_together;
mod doc_links;
mod fan_out;
mod forward_signed;
mod gateway_connections;
mod gateway_drain;
mod gateway_fetched_keys;
mod gateway_fetched_keys_plaid;
mod gateway_flood;
mod gateway_h2_streams;
mod gateway_handshakes;
mod gateway_identity;
mod gateway_public_key_schemes;
mod gateway_quota;
mod gateway_rejections;
mod gateway_reload;
mod gateway_sdk_crosscheck;
mod gateway_shutdown;
mod gateway_status;
mod kafka_tls;
mod loadgen_smoke;
mod module_graph;
mod nothing_stalls;
mod pipeline;
mod postgres_dedupe_row;
mod postgres_error_redaction;
mod postgres_handler;
mod postgres_inbox;
mod postgres_one_trip;
mod reconciler;
mod reconciler_hostile_api;
mod reconciler_registrations;
mod record_auth;
mod record_golden;
mod redis_aof_restart;
mod redis_tls;
mod replayer;
mod replayer_admin_listener;
mod replayer_events;
mod replayer_identity;
mod replayer_index;
mod replayer_lookup;
mod replayer_rejections;
mod replayer_services;
mod replayer_trust;
mod route_filters;
mod route_hold;
mod route_transforms;
mod signature_time;

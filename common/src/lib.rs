//! What the hookline services share at run time: the wire format of the Kafka records and Redis keys ([`wire`]),
//! Kafka client settings that keep data safe ([`kafka`]) with their TLS and SASL settings
//! ([`kafka_security`]), and the one producer every writer uses ([`producer`]), which signs every record
//! ([`record_auth`]), one Redis connection type
//! ([`redis_connection`]) and the dedupe bucket schedule read through it ([`dedupe_schedule`]), configuration loading ([`config`]), HTTP/admin plumbing and logging ([`http`],
//! [`telemetry`]), the key per-client limits count by ([`peer`]), the description of a service's metrics
//! ([`metrics_catalog`]), and the conditions on an event's JSON body that event search and the consumer's route
//! filters share ([`predicate`]); RFC 3339 times read and written one way ([`time`]).
//!
//! This crate knows nothing about any one service or public route, and nothing of the provider signature schemes:
//! those are the `hookline-signature` crate, which needs nothing from here.

pub mod cli;
pub mod config;
pub mod control;
pub mod dedupe_schedule;
pub mod http;
pub mod http_client;
pub mod kafka;
pub mod kafka_security;
pub mod metrics_catalog;
pub mod peer;
pub mod predicate;
pub mod producer;
pub mod prometheus_text;
pub mod record_auth;
pub mod redis_connection;
pub mod redis_security;
pub mod signals;
pub mod telemetry;
pub mod time;
pub mod wire;

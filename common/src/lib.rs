//! What the hookline services share: the wire format of the Kafka records and Redis keys ([`wire`]), the
//! signature schemes that decide authenticity ([`signature`]), Kafka client settings that keep data safe
//! ([`kafka`]) and the one producer every writer uses ([`producer`]), one Redis connection type
//! ([`redis_connection`]), configuration loading ([`config`]), HTTP/admin plumbing and logging ([`http`],
//! [`telemetry`]), and the description of a service's metrics ([`metrics_catalog`]).
//!
//! This crate knows nothing about any one service or public route.

pub mod cli;
pub mod config;
pub mod http;
pub mod http_client;
pub mod kafka;
pub mod metrics_catalog;
pub mod producer;
pub mod redis_connection;
pub mod redis_security;
pub mod signals;
pub mod signature;
pub mod telemetry;
pub mod wire;

//! Every way a reconciliation can fail, named after what failed. None of them changes anything already done: a
//! run that fails part-way has recorded each action it took in the ledger, and the next run starts over from the
//! provider's list.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("source `{0}` is not configured for reconciliation")]
    UnknownSource(String),
    #[error("source `{0}` has no webhook_url: its registration is not checked")]
    NoWebhookUrl(String),
    #[error("source `{source_name}`: cannot set up its API client: {error}")]
    Setup { source_name: String, error: String },
    /// The provider answered 401 or 403: the credential is wrong, revoked, or lacks a permission.
    #[error(
        "source `{source_name}`: the provider refused our credential (HTTP {status}): check the source's \
         `credential` and its permissions ({detail})"
    )]
    CredentialsRefused { source_name: String, status: u16, detail: String },
    #[error("source `{source_name}`: rate limited by the provider for {retry_after:?}, longer than max_retry_after_s")]
    RateLimited { source_name: String, retry_after: Duration },
    #[error("source `{source_name}`: {request} answered HTTP {status} ({detail})")]
    Status { source_name: String, request: String, status: u16, detail: String },
    #[error("source `{source_name}`: provider API: {error}")]
    Provider { source_name: String, error: String },
    /// A request asking the provider to act may or may not have been carried out.
    #[error("source `{source_name}`: no certain answer from the provider ({error})")]
    Uncertain { source_name: String, error: String },
    #[error("source `{source_name}`: the provider's answer is not what its API documents: {error}")]
    Decode { source_name: String, error: String },
    #[error("source `{0}`: another run holds its lock")]
    Busy(String),
    #[error(
        "the indexer has not indexed the inbound topic up to its end within {0:?} (is `hookline-reconciler serve` \
         running?): nothing was decided"
    )]
    IndexBehind(Duration),
    #[error("Redis")]
    Redis(#[source] redis::RedisError),
    #[error("Kafka")]
    Kafka(#[source] rdkafka::error::KafkaError),
    #[error("cannot produce the fetched event to Kafka")]
    Produce(#[source] hookline_common::producer::ProduceError),
}

impl From<redis::RedisError> for ReconcileError {
    fn from(error: redis::RedisError) -> Self {
        Self::Redis(error)
    }
}

impl From<rdkafka::error::KafkaError> for ReconcileError {
    fn from(error: rdkafka::error::KafkaError) -> Self {
        Self::Kafka(error)
    }
}

impl ReconcileError {
    /// Bounded label for the `hookline_reconciler_runs_total{outcome}` metric.
    pub fn outcome(&self) -> &'static str {
        match self {
            Self::UnknownSource(_) | Self::NoWebhookUrl(_) | Self::Setup { .. } => "config",
            Self::CredentialsRefused { .. } => "credentials_refused",
            Self::RateLimited { .. } => "rate_limited",
            Self::Status { .. } | Self::Provider { .. } | Self::Decode { .. } | Self::Uncertain { .. } => {
                "provider_error"
            }
            Self::Busy(_) => "busy",
            Self::IndexBehind(_) => "index_behind",
            Self::Redis(_) => "redis_error",
            Self::Kafka(_) | Self::Produce(_) => "kafka_error",
        }
    }
}

//! Who is asking: every caller of the API and the console is a [`Principal`], a verified subject with a [`Scope`],
//! and every mutating action is recorded under that subject (in the status and control records it writes, and in
//! the audit trail, [`audit`]), never under a name the caller sends.
//!
//! - Scoped API tokens ([`tokens`]): created and revoked by an admin (API or CLI), shown once at creation, kept as a
//!   SHA-256 only, in a compacted topic under the replayer's record MAC. Every instance tails that topic, so a token
//!   created or revoked on one is known to all within about a second, and a restart reads it back.
//! - The shared `api_token` of the configuration: one admin token for everyone, subject `shared-token`, for a local
//!   demo only (a warning at start; docs/security.md, F14).
//!
//! Why Kafka and not a database: the replayer keeps all its state in Kafka already (fates, pauses), so the tokens
//! need no new store, every instance sees the same set, a restart loses nothing, and the record MAC means only a
//! holder of the replayer's record key can write a token (the same trust as a pause or a re-drive).

pub mod audit;
pub mod tokens;

use std::time::Duration;

use hookline_common::{
    config::KafkaConfig,
    kafka::{QuietContext, admin_config},
};
use rdkafka::{
    admin::{AdminClient, AdminOptions, NewTopic, TopicReplication},
    client::DefaultClientContext,
    consumer::{BaseConsumer, Consumer},
    error::{KafkaError, RDKafkaErrorCode},
};
use serde::{Deserialize, Serialize};

/// What a principal may do. Each scope includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// List, show, search, look up, read the audit trail.
    Read,
    /// Besides reading: replay, discard, pause, resume, reprocess.
    Operate,
    /// Besides operating: create and revoke tokens.
    Admin,
}

impl Scope {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "read" => Some(Self::Read),
            "operate" => Some(Self::Operate),
            "admin" => Some(Self::Admin),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Operate => "operate",
            Self::Admin => "admin",
        }
    }

    /// Whether this scope may do what `needed` guards.
    pub fn allows(self, needed: Self) -> bool {
        self >= needed
    }
}

/// A verified caller: the subject its actions are recorded under, and what it may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// `token:<name>` for an API token, `oidc:<subject>` for a console login, `shared-token` for the demo token.
    pub subject: String,
    pub scope: Scope,
}

/// The subject of the shared `api_token` (local demo only).
pub const SHARED_TOKEN_SUBJECT: &str = "shared-token";

/// How long topic metadata and creation may take.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

/// One topic the replayer creates when it is missing: its name and its settings.
pub(crate) struct IdentityTopic<'a> {
    pub name: &'a str,
    pub settings: Vec<(&'static str, String)>,
}

/// Creates the tokens and audit topics when they do not exist: one partition each, the inbound topic's replication
/// factor, the tokens topic compacted and the audit topic deleted by retention. (The deployments' topic jobs create
/// them with the other topics; this covers a stack that predates them, and tests.) Blocking: call off the runtime.
pub(crate) fn ensure_topics(kafka: &KafkaConfig, topics: &[IdentityTopic<'_>]) -> Result<(), KafkaError> {
    let client: BaseConsumer<QuietContext> = admin_config(kafka).create_with_context(QuietContext::new("identity"))?;
    let metadata = client.fetch_metadata(None, ADMIN_TIMEOUT)?;
    let existing = metadata.topics();
    let missing: Vec<&IdentityTopic<'_>> = topics
        .iter()
        .filter(|wanted| !existing.iter().any(|topic| topic.name() == wanted.name && topic.error().is_none()))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let replication = existing
        .iter()
        .find(|topic| topic.name() == kafka.inbound_topic)
        .and_then(|topic| topic.partitions().first())
        .map_or(1, |partition| partition.replicas().len().max(1));
    let replication = i32::try_from(replication).unwrap_or(1);
    let new_topics: Vec<NewTopic<'_>> = missing
        .iter()
        .map(|topic| {
            topic
                .settings
                .iter()
                .fold(NewTopic::new(topic.name, 1, TopicReplication::Fixed(replication)), |new, (name, value)| {
                    new.set(name, value)
                })
        })
        .collect();
    let admin: AdminClient<DefaultClientContext> = admin_config(kafka).create()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| KafkaError::AdminOpCreation(error.to_string()))?;
    let options = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT));
    for result in runtime.block_on(admin.create_topics(&new_topics, &options))? {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => return Err(KafkaError::AdminOp(code)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_scope_includes_the_ones_before_it() {
        assert!(Scope::Admin.allows(Scope::Operate) && Scope::Admin.allows(Scope::Read));
        assert!(Scope::Operate.allows(Scope::Read) && !Scope::Operate.allows(Scope::Admin));
        assert!(!Scope::Read.allows(Scope::Operate));
        for scope in [Scope::Read, Scope::Operate, Scope::Admin] {
            assert_eq!(Scope::parse(scope.as_str()), Some(scope));
        }
        assert_eq!(Scope::parse("root"), None);
    }
}

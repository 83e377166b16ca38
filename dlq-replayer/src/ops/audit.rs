//! What the operations record besides their own records: one audit record per mutating action ([`Replayer::audit`],
//! read back by `crate::identity::audit`), and the topics that hold the audit trail and the API tokens, created
//! when missing ([`Replayer::ensure_identity_topics`]).

use std::time::Duration;

use hookline_common::{
    config::KafkaConfig,
    kafka::{QuietContext, admin_config},
    wire::now_ms,
};
use hookline_record::identity::AuditRecord;
use rdkafka::{
    admin::{AdminClient, AdminOptions, NewTopic, TopicReplication},
    client::DefaultClientContext,
    consumer::{BaseConsumer, Consumer},
    error::{KafkaError, RDKafkaErrorCode},
};

use super::{OpError, Replayer, Report};
use crate::filter::Filter;

/// Entries an audit record names at most; the counts say how many there were.
const AUDIT_IDS_KEPT: usize = 100;

/// What a replay or discard did, as its audit record keeps it: the entries (the first [`AUDIT_IDS_KEPT`]), the counts,
/// and the filter of an `all`.
pub(crate) fn entries_detail(report: &Report, all: bool, filter: &Filter) -> serde_json::Value {
    let mut detail = serde_json::json!({
        "entries": report.done.iter().take(AUDIT_IDS_KEPT).collect::<Vec<_>>(),
        "done": report.done.len(),
        "skipped": report.skipped.len(),
    });
    if all {
        detail["all"] = true.into();
        detail["filter"] = serde_json::to_value(filter).unwrap_or_default();
    }
    detail
}

/// How long topic metadata and creation may take.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

/// One topic the replayer creates when it is missing: its name and its settings.
struct IdentityTopic<'a> {
    pub name: &'a str,
    pub settings: Vec<(&'static str, String)>,
}

/// Creates the tokens and audit topics when they do not exist: one partition each, the inbound topic's replication
/// factor, the tokens topic compacted and the audit topic deleted by retention. (The deployments' topic jobs create
/// them with the other topics; this covers a stack that predates them, and tests.) Blocking: call off the runtime.
fn ensure_topics(kafka: &KafkaConfig, topics: &[IdentityTopic<'_>]) -> Result<(), KafkaError> {
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

impl Replayer {
    /// Creates the tokens and audit topics when they are missing (once per replayer).
    pub async fn ensure_identity_topics(&self) -> Result<(), OpError> {
        let config = self.config().clone();
        self.identity_topics_ready
            .get_or_try_init(|| async move {
                tokio::task::spawn_blocking(move || {
                    let retention_ms = (config.identity.audit_retention_days * 24 * 3600 * 1000).to_string();
                    let (tokens_topic, audit_topic) = (config.tokens_topic(), config.audit_topic());
                    ensure_topics(
                        &config.kafka,
                        &[
                            IdentityTopic {
                                name: &tokens_topic,
                                settings: vec![("cleanup.policy", "compact".to_owned())],
                            },
                            IdentityTopic {
                                name: &audit_topic,
                                settings: vec![("cleanup.policy", "delete".to_owned()), ("retention.ms", retention_ms)],
                            },
                        ],
                    )
                })
                .await?
                .map_err(OpError::from)
            })
            .await
            .map(|_| ())
    }

    /// Records one mutating action in the audit trail ([`super::audit`]).
    pub(crate) async fn audit(&self, subject: &str, action: &str, detail: serde_json::Value) -> Result<(), OpError> {
        self.ensure_identity_topics().await?;
        let record = AuditRecord { at_ms: now_ms(), subject: subject.to_owned(), action: action.to_owned(), detail };
        self.send(record.encode(&self.config().audit_topic())).await?;
        Ok(())
    }
}

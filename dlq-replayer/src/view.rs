//! The replayer's view of the dead-letter queue, built from Kafka alone: every record of the DLQ topic, and the
//! fate of each from the compacted status topic (the latest record per entry id wins). Nothing is kept between
//! calls; two replayers, or a restarted one, see the same thing.

use std::{collections::HashMap, time::Duration};

use base64::Engine as _;
use hookline_common::{
    config::KafkaConfig,
    kafka::read_topic,
    wire::{DeadLetterEntry, EntryStatus, EntryStatusRecord, header, header_str},
};
use rdkafka::{
    Message,
    error::KafkaError,
    message::{Headers, OwnedMessage},
};
use serde::Serialize;

const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// An entry's status as the operator sees it: the latest status record's, or `new`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    New,
    Replayed,
    ReplayFailed,
    Succeeded,
    FailedAgain,
    Discarded,
}

impl Status {
    pub const ALL: [Status; 6] =
        [Self::New, Self::Replayed, Self::ReplayFailed, Self::Succeeded, Self::FailedAgain, Self::Discarded];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::New => "new",
            Self::Replayed => "replayed",
            Self::ReplayFailed => "replay_failed",
            Self::Succeeded => "succeeded",
            Self::FailedAgain => "failed_again",
            Self::Discarded => "discarded",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == text)
    }
}

impl From<EntryStatus> for Status {
    fn from(status: EntryStatus) -> Self {
        match status {
            EntryStatus::Replayed => Self::Replayed,
            EntryStatus::ReplayFailed => Self::ReplayFailed,
            EntryStatus::Succeeded => Self::Succeeded,
            EntryStatus::FailedAgain => Self::FailedAgain,
            EntryStatus::Discarded => Self::Discarded,
        }
    }
}

/// One DLQ entry with its fate.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    #[serde(flatten)]
    pub entry: DeadLetterEntry,
    pub status: Status,
    /// The latest status record, if any.
    pub last_status: Option<EntryStatusRecord>,
    /// How many times this entry has been re-driven.
    pub replays: u32,
    /// The entry this one came from, when its event was a replay that failed again.
    pub replay_of: Option<String>,
    /// How many times this event has failed again after replays (0 for a first failure).
    pub failed_again: u32,
    /// `failed_again` reached `max_failed_again`: replaying needs `force`.
    pub flagged: bool,
    #[serde(skip)]
    pub record: OwnedMessage,
}

impl Entry {
    /// Every header of the DLQ record, values as UTF-8 text (or base64 when they are not).
    pub fn headers(&self) -> Vec<(String, String)> {
        let Some(headers) = self.record.headers() else { return Vec::new() };
        headers
            .iter()
            .map(|h| {
                let value = h.value.map_or_else(String::new, |bytes| match std::str::from_utf8(bytes) {
                    Ok(text) => text.to_owned(),
                    Err(_) => format!("base64:{}", base64::engine::general_purpose::STANDARD.encode(bytes)),
                });
                (h.key.to_owned(), value)
            })
            .collect()
    }

    pub fn body(&self) -> &[u8] {
        self.record.payload().unwrap_or_default()
    }
}

/// All entries, in partition then offset order.
#[derive(Debug, Clone)]
pub struct View {
    pub entries: Vec<Entry>,
}

impl View {
    /// Reads the DLQ and status topics. Blocking: call off the runtime.
    pub fn load(kafka: &KafkaConfig, max_failed_again: u32) -> Result<Self, KafkaError> {
        let records = read_topic(&kafka.brokers, &kafka.dlq_topic, READ_TIMEOUT)?;
        let statuses = read_topic(&kafka.brokers, &kafka.dlq_status_topic, READ_TIMEOUT)?;
        let mut latest: HashMap<String, EntryStatusRecord> = HashMap::new();
        let mut replays: HashMap<String, u32> = HashMap::new();
        for status in &statuses {
            let (Some(key), Some(value)) = (status.key(), status.payload()) else { continue };
            let key = String::from_utf8_lossy(key).into_owned();
            match serde_json::from_slice::<EntryStatusRecord>(value) {
                Ok(record) => {
                    if let Some(n) = record.replays {
                        let seen = replays.entry(key.clone()).or_default();
                        *seen = (*seen).max(n);
                    }
                    latest.insert(key, record);
                }
                Err(error) => tracing::warn!(entry_id = %key, error = %error, "unreadable status record skipped"),
            }
        }
        let mut entries: Vec<Entry> = records
            .into_iter()
            .map(|record| {
                let entry = DeadLetterEntry::from_message(&record);
                let last_status = latest.remove(&entry.id);
                let replay_of = header_str(record.headers(), header::REPLAY_OF).and_then(Result::ok);
                Entry {
                    status: last_status.as_ref().map_or(Status::New, |s| s.status.into()),
                    replays: replays.get(&entry.id).copied().unwrap_or(0),
                    last_status,
                    replay_of,
                    failed_again: 0,
                    flagged: false,
                    entry,
                    record,
                }
            })
            .collect();
        // An entry's failure count: one more than the entry it was replayed from (entries are in offset order per
        // partition, but a chain can cross partitions, so resolve by id).
        let parents: HashMap<String, Option<String>> =
            entries.iter().map(|e| (e.entry.id.clone(), e.replay_of.clone())).collect();
        for entry in &mut entries {
            let mut depth = 0_u32;
            let mut cursor = entry.replay_of.clone();
            while let Some(parent) = cursor {
                depth += 1;
                if depth > 1_000 {
                    break; // A cycle cannot happen (offsets only grow), but never loop forever on bad data.
                }
                cursor = parents.get(&parent).cloned().flatten();
            }
            entry.failed_again = depth;
            entry.flagged = depth >= max_failed_again;
        }
        Ok(Self { entries })
    }

    pub fn get(&self, id: &str) -> Option<&Entry> {
        self.entries.iter().find(|entry| entry.entry.id == id)
    }
}

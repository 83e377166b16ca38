//! The status record (the compacted DLQ status topic): the fate of a dead-letter entry. Key: the entry id
//! ([`crate::dead_letter::DeadLetterEntry::entry_id`]), or for a re-processing fate
//! [`REPROCESS_STATUS_KEY_PREFIX`]`<run id>...`; body: [`EntryStatusRecord`] as JSON; headers: its MAC only. The
//! latest record of an entry is its current status; an entry with no record is new.

use bytes::Bytes;

use crate::{Outgoing, table::HeaderTable};

/// Status-topic keys of re-processing fates start with this (`reprocess:<run id>:<topic>:<partition>:<offset>`,
/// and `reprocess:<run id>` for the request itself): they are not DLQ entries.
pub const REPROCESS_STATUS_KEY_PREFIX: &str = "reprocess:";

/// The fate of a dead-letter entry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EntryStatusRecord {
    pub status: EntryStatus,
    /// When it was recorded, ms since the epoch.
    pub at_ms: i64,
    /// Who recorded it: `consumer:<group>` or `replayer:<operator>`.
    pub by: String,
    /// The event's id, for reading the status topic on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
    /// For `failed_again`: the id of the new DLQ entry the event landed in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_entry: Option<String>,
    /// Free text: a discard reason, or why a replay was a duplicate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// For `replayed`: how many times the entry has been re-driven, this time included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replays: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryStatus {
    /// The replayer is re-producing the entry to the inbound topic. Written *before* the produce, so the
    /// consumer's outcome record (which can follow within milliseconds) is always the later one.
    Replayed,
    /// The re-drive could not be produced (`note` says why); the entry is as it was before.
    ReplayFailed,
    /// A consumer processed the re-driven event (or found it already processed).
    Succeeded,
    /// The re-driven event failed again and landed in a new entry (`new_entry`).
    FailedAgain,
    /// An operator discarded the entry (`note` = reason); it stays in Kafka.
    Discarded,
}

impl EntryStatusRecord {
    /// The status record to `topic` under `key` (an entry id, or a re-processing key).
    pub fn encode(&self, topic: &str, key: &str) -> Outgoing {
        // Strings, integers and an enum: serialising cannot fail.
        let value = serde_json::to_vec(self).expect("a status record serialises");
        Outgoing::new(topic, Some(Bytes::copy_from_slice(key.as_bytes())), Some(value.into()), HeaderTable::new())
    }

    /// Decodes a status record's body.
    pub fn decode(body: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(body)
    }
}

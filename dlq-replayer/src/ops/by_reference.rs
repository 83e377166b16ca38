//! Re-driving a dead letter *by reference*: a record whose copy the broker refused as too large was dead-lettered
//! as a small record with an empty body that names where the body is ([`DeadLetterEntry::by_reference`], and the
//! original topic, partition and offset). Its re-drive reads that original record and sends its key, body and
//! headers, exactly as an ordinary entry's re-drive sends the DLQ record's.

use hookline_common::{
    record_auth::{RecordKind, Verdict},
    wire::{DeadLetterEntry, FetchedRecord},
};
use hookline_record::inbound::InboundSummary;

use super::{OpError, Replayer};
use crate::{fetch::Fetcher, index::Position};

impl Replayer {
    /// The record a re-drive of the entry whose DLQ record is `dlq_record` (decoded: `entry`) sends: that record, or for a dead
    /// letter by reference the original it names, read from its topic and checked like any record a re-drive
    /// sends: its MAC (one hookline did not write is refused without `force`), and its event id, which must be the
    /// entry's. `Ok(Err(reason))` when it cannot be re-driven: the original is gone (past its topic's retention),
    /// is not that event, or is not hookline's.
    pub(super) async fn record_to_redrive(
        &self,
        dlq_record: FetchedRecord,
        entry: &DeadLetterEntry,
        force: bool,
        by: &str,
    ) -> Result<Result<FetchedRecord, String>, OpError> {
        if !entry.by_reference {
            return Ok(Ok(dlq_record));
        }
        let (Some(topic), Some(partition), Some(offset)) =
            (entry.original_topic.as_deref(), entry.original_partition, entry.original_offset)
        else {
            return Ok(Err("a dead letter by reference that names no original position".to_owned()));
        };
        let fetcher = Fetcher::of_topic(&self.config.kafka, topic);
        let position = Position { partition, offset };
        let original = tokio::task::spawn_blocking(move || fetcher.fetch(position)).await??;
        let Some(original) = original else {
            return Ok(Err(format!(
                "dead-lettered by reference (its copy was too large), and its body is no longer at {topic}:{partition}:{offset} \
                 (past the topic's retention, or the topic was re-created): it cannot be re-driven; discard it"
            )));
        };
        let headers = original.headers().into_iter().flat_map(|headers| headers.table().iter());
        let original_event_id = InboundSummary::text(InboundSummary::read(headers).event_id);
        if original_event_id != entry.event_id {
            return Ok(Err(format!(
                "dead-lettered by reference, but the record at {topic}:{partition}:{offset} is another event ({}): \
                 not re-driven",
                original_event_id.as_deref().unwrap_or("no event id")
            )));
        }
        if let Verdict::Refused(why) = self.authenticate(&original, RecordKind::Inbound) {
            if !force {
                return Ok(Err(format!(
                    "the record its reference names, {topic}:{partition}:{offset}, was not written by hookline: {} \
                     (needs force)",
                    why.as_str()
                )));
            }
            tracing::warn!(entry_id = %entry.id, refusal = why.as_str(), by = %by, "forced replay of a referenced record without a valid MAC");
        }
        Ok(Ok(original))
    }
}

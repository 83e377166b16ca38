//! A record a service wrote, read back as its readers read it: through the `record` crate's types, so that tests
//! assert on typed fields and never name a header (only `record` does; `hookline_record::raw` is for the tests
//! that forge hostile records).

use hookline_common::wire::kafka::{headers_of, table_of};
use hookline_record::{
    HeaderTable,
    dead_letter::{DeadLetterEntry, DeadLetterFailure, Position},
    inbound::InboundRecord,
    retry::RetryHeaders,
    status::EntryStatusRecord,
};
use rdkafka::message::Message;

/// An inbound record (the gateway's, the reconciler's, a re-drive), decoded; panics on one no writer of ours made.
pub fn inbound<M: Message>(record: &M) -> InboundRecord {
    InboundRecord::decode(headers_of(record.headers())).expect("an inbound record")
}

/// A dead letter as the replayer lists it.
pub fn dead_letter<M: Message>(record: &M) -> DeadLetterEntry {
    let position = Position {
        topic: record.topic(),
        partition: record.partition(),
        offset: record.offset(),
        timestamp_ms: record.timestamp().to_millis(),
    };
    DeadLetterEntry::decode(position, record.payload().map_or(0, <[u8]>::len), headers_of(record.headers()))
}

/// A dead letter's failure headers, every one as the consumer writes them; panics when one is missing.
pub fn dead_letter_failure<M: Message>(record: &M) -> DeadLetterFailure {
    DeadLetterFailure::decode(headers_of(record.headers())).expect("a dead letter's failure headers")
}

/// A retry record's retry headers; `None` for a record that carries none (or damaged ones).
pub fn retry<M: Message>(record: &M) -> Option<RetryHeaders> {
    RetryHeaders::decode(headers_of(record.headers()))
}

/// Whether any header of the record is a retry header ([`hookline_record::retry::is_retry_header`]).
pub fn has_retry_header<M: Message>(record: &M) -> bool {
    headers_of(record.headers()).any(|header| hookline_record::retry::is_retry_header(header.name))
}

/// A status record: its key (the entry id) and its fate.
pub fn status<M: Message>(record: &M) -> (String, EntryStatusRecord) {
    let key = String::from_utf8_lossy(record.key().expect("a status record is keyed")).into_owned();
    (key, EntryStatusRecord::decode(record.payload().expect("a status record has a body")).expect("status JSON"))
}

/// Every header of the record, in one table (to compare with what a writer builds).
pub fn headers<M: Message>(record: &M) -> HeaderTable {
    table_of(record.headers())
}

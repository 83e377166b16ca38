//! Non-blocking retries: an event whose handler failed retryably is parked in the retry topic (the original key,
//! body and headers, plus the `hookline-retry-*` headers of [`hookline_common::wire::header::retry`]) with its
//! attempt count, first-failure time, due time and last error, and its original offset is stored only once the
//! broker acknowledged that record. The consumers read the retry topic like the inbound one; a record not yet due
//! waits in the scheduler's timer list (its partition pauses when its window fills), then takes the same dedupe
//! and handler path. Nothing sleeps in a partition's path, and nothing holds handler capacity while it waits.

use hookline_common::wire::{FetchedRecord, header::retry, header_str};
use rdkafka::message::{Header, Headers};

/// Handler attempts already made for an event, carried into its next attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempts {
    pub attempts: u32,
    pub first_failure_at_ms: i64,
    pub last_error: String,
}

/// Where an event first was, before any retry: what its DLQ record names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// What a retry record says about the attempts so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryHeaders {
    pub attempts: Attempts,
    pub due_at_ms: i64,
    pub origin: Origin,
}

impl RetryHeaders {
    /// The retry headers in a record's headers; `None` for a record that was never retried (or whose retry
    /// headers are damaged: it then starts counting again, which only lengthens its retries). Read once, at the
    /// door ([`Record::retry`]).
    pub fn from_headers<H: Headers>(headers: Option<&H>) -> Option<Self> {
        let text = |name: &'static str| header_str(headers, name).and_then(Result::ok);
        let number = |name: &'static str| text(name).and_then(|value| value.parse::<i64>().ok());
        Some(Self {
            attempts: Attempts {
                attempts: u32::try_from(number(retry::ATTEMPTS)?).ok()?,
                first_failure_at_ms: number(retry::FIRST_FAILURE_AT_MS)?,
                last_error: text(retry::ERROR).unwrap_or_default(),
            },
            due_at_ms: number(retry::DUE_AT_MS)?,
            origin: Origin {
                topic: text(retry::ORIGINAL_TOPIC)?,
                partition: i32::try_from(number(retry::ORIGINAL_PARTITION)?).ok()?,
                offset: number(retry::ORIGINAL_OFFSET)?,
            },
        })
    }
}

/// Whether a header is one of ours for retries (dropped when the record is copied again).
pub fn is_retry_header(name: &str) -> bool {
    name.starts_with(retry::PREFIX)
}

/// The headers of `record` without its retry headers, in record order: the original event's, to copy into the
/// next retry or the DLQ record.
pub fn original_headers(record: &FetchedRecord) -> impl Iterator<Item = Header<'_, &[u8]>> {
    record.headers().into_iter().flat_map(Headers::iter).filter(|header| !is_retry_header(header.key))
}

#[cfg(test)]
mod tests {
    use rdkafka::{
        Message, Timestamp,
        message::{Header, OwnedHeaders, OwnedMessage},
    };

    use super::*;

    fn message(headers: OwnedHeaders) -> OwnedMessage {
        OwnedMessage::new(None, None, "webhooks.retry".into(), Timestamp::NotAvailable, 2, 40, Some(headers))
    }

    #[test]
    fn retry_headers_are_read_back_and_the_origin_survives() {
        let mut headers = OwnedHeaders::new().insert(Header { key: "hookline-source", value: Some("github") });
        for (key, value) in [
            (retry::ATTEMPTS, "2"),
            (retry::FIRST_FAILURE_AT_MS, "1000"),
            (retry::DUE_AT_MS, "5000"),
            (retry::ERROR, "503"),
            (retry::ORIGINAL_TOPIC, "webhooks.inbound"),
            (retry::ORIGINAL_PARTITION, "1"),
            (retry::ORIGINAL_OFFSET, "7"),
        ] {
            headers = headers.insert(Header { key, value: Some(value) });
        }
        let record = message(headers);
        let read = RetryHeaders::from_headers(record.headers()).expect("retry headers");
        assert_eq!(read.attempts.attempts, 2);
        assert_eq!(read.due_at_ms, 5000);
        assert_eq!(read.origin, Origin { topic: "webhooks.inbound".into(), partition: 1, offset: 7 });
        let fetched = FetchedRecord::copy_of(&record, "webhooks.retry".into());
        let kept: Vec<&str> = original_headers(&fetched).map(|header| header.key).collect();
        assert_eq!(kept, vec!["hookline-source"]);
    }

    #[test]
    fn a_first_time_record_is_its_own_origin() {
        let record = message(OwnedHeaders::new());
        assert!(RetryHeaders::from_headers(record.headers()).is_none());
        let record = crate::record::Record::parse(FetchedRecord::copy_of(&record, "webhooks.retry".into()), |_| {
            hookline_common::record_auth::Verdict::UnsignedAccepted
        });
        assert_eq!(record.origin(), Origin { topic: "webhooks.retry".into(), partition: 2, offset: 40 });
    }
}

//! The retry record (a service's retry topic): the original record (key, body and headers unchanged, but its
//! earlier retry headers) plus the `hookline-retry-*` headers, which say when to try again and what happened so
//! far, and [`header::SERVICE`], so that only the service that parked it takes it back (and, for a destination of a
//! fan-out service, [`header::DESTINATION`], so that only that destination takes it back).

use crate::{
    MAX_DLQ_ERROR_BYTES, Original, Outgoing, header,
    table::{Header, first_text},
    truncate_utf8,
};

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
    /// The retry record of `original` for `service` (and, in a fan-out service, its `destination`), to `topic`:
    /// the original's key, body and headers (but its retry headers, [`header::SERVICE`] and
    /// [`header::DESTINATION`]), then these (the error truncated to [`MAX_DLQ_ERROR_BYTES`]).
    pub fn encode(&self, topic: &str, service: &str, destination: Option<&str>, original: Original<'_>) -> Outgoing {
        let error = truncate_utf8(&self.attempts.last_error, MAX_DLQ_ERROR_BYTES);
        let mut fields = vec![
            (header::retry::ATTEMPTS, self.attempts.attempts.to_string()),
            (header::retry::FIRST_FAILURE_AT_MS, self.attempts.first_failure_at_ms.to_string()),
            (header::retry::DUE_AT_MS, self.due_at_ms.to_string()),
            (header::retry::ERROR, error.to_owned()),
            (header::retry::ORIGINAL_TOPIC, self.origin.topic.clone()),
            (header::retry::ORIGINAL_PARTITION, self.origin.partition.to_string()),
            (header::retry::ORIGINAL_OFFSET, self.origin.offset.to_string()),
            // Only this service takes it back, wherever the record is read.
            (header::SERVICE, service.to_owned()),
        ];
        // Only this destination takes it back; a copied one is replaced, never kept beside it.
        if let Some(destination) = destination {
            fields.push((header::DESTINATION, destination.to_owned()));
        }
        original.copy_with(topic, &fields)
    }

    /// The retry headers among a record's headers; `None` for a record that was never retried (or whose retry
    /// headers are damaged: it then starts counting again, which only lengthens its retries).
    pub fn decode<'a>(headers: impl Iterator<Item = Header<'a>> + Clone) -> Option<Self> {
        let text = |name: &'static str| first_text(headers.clone(), name).and_then(Result::ok);
        let number = |name: &'static str| text(name).and_then(|value| value.parse::<i64>().ok());
        Some(Self {
            attempts: Attempts {
                attempts: u32::try_from(number(header::retry::ATTEMPTS)?).ok()?,
                first_failure_at_ms: number(header::retry::FIRST_FAILURE_AT_MS)?,
                last_error: text(header::retry::ERROR).unwrap_or_default(),
            },
            due_at_ms: number(header::retry::DUE_AT_MS)?,
            origin: Origin {
                topic: text(header::retry::ORIGINAL_TOPIC)?,
                partition: i32::try_from(number(header::retry::ORIGINAL_PARTITION)?).ok()?,
                offset: number(header::retry::ORIGINAL_OFFSET)?,
            },
        })
    }
}

/// Whether a header is one of ours for retries (dropped when the record is copied again).
pub fn is_retry_header(name: &str) -> bool {
    name.starts_with(header::retry::PREFIX)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::HeaderTable;

    fn destinations(record: &Outgoing) -> Vec<&[u8]> {
        record.headers.iter().filter(|h| h.name == header::DESTINATION).filter_map(|h| h.value).collect()
    }

    #[test]
    fn a_retry_names_its_destination_once_and_a_first_match_retry_names_none() {
        let retry = RetryHeaders {
            attempts: Attempts { attempts: 1, first_failure_at_ms: 1, last_error: "503".into() },
            due_at_ms: 2,
            origin: Origin { topic: "in".into(), partition: 0, offset: 3 },
        };
        // A retry of a retry of destination `audit`: the copied destination is replaced, never kept beside it.
        let mut headers = HeaderTable::new();
        headers.push_str(header::EVENT_ID, "e1");
        headers.push_str(header::DESTINATION, "audit");
        let original = || Original { key: None, body: Some(Bytes::from_static(b"{}")), headers: &headers };
        let to_ledger = retry.encode("retry.billing", "billing", Some("ledger"), original());
        assert_eq!(destinations(&to_ledger), vec![&b"ledger"[..]]);
        let first_match = retry.encode("retry.billing", "billing", None, original());
        assert!(destinations(&first_match).is_empty());
        assert_eq!(RetryHeaders::decode(to_ledger.headers.iter()), Some(retry));
    }
}

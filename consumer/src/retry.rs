//! Non-blocking retries: an event whose handler failed retryably is parked in the retry topic (the retry record
//! of the `record` crate: the original key, body and headers plus the retry headers) with its attempt count,
//! first-failure time, due time and last error, and its original offset is stored only once the broker
//! acknowledged that record. The consumers read the retry topic like the inbound one; a record not yet due waits in
//! the scheduler's timer list (its partition pauses when its window fills), then takes the same dedupe and handler
//! path. Nothing sleeps in a partition's path, and nothing holds handler capacity while it waits.

pub use hookline_record::retry::{Attempts, Origin, RetryHeaders};

#[cfg(test)]
mod tests {
    use hookline_common::wire::FetchedRecord;
    use rdkafka::{Timestamp, message::OwnedMessage};

    use super::*;

    #[test]
    fn a_first_time_record_is_its_own_origin() {
        let record = OwnedMessage::new(None, None, "webhooks.retry".into(), Timestamp::NotAvailable, 2, 40, None);
        let record = crate::record::Record::parse(FetchedRecord::copy_of(&record, "webhooks.retry".into()), |_| {
            hookline_common::record_auth::Verdict::UnsignedAccepted
        });
        assert!(record.retry.is_none());
        assert_eq!(record.origin(), Origin { topic: "webhooks.retry".into(), partition: 2, offset: 40 });
    }
}

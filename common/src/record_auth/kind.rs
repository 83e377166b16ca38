//! What kind of record a key may sign: an inbound-only key (`kafka.record_auth.inbound_only_keys`, the gateway's)
//! signs, and is believed for, inbound records as the gateway writes them, nothing that gives a record powers.

use rdkafka::message::Headers;

use crate::wire::header;

/// Whether a record is an inbound record as the gateway writes it, what an inbound-only key may sign: it names its
/// source and event id, and carries none of the headers that give a record powers or make it another kind (a
/// re-drive's, a re-processing request's, a service address, an origin, retry or DLQ metadata). A status record
/// (no hookline headers at all) is not one.
pub(super) fn is_inbound_record<H: Headers>(headers: Option<&H>) -> bool {
    let mut source = false;
    let mut event_id = false;
    for h in headers.into_iter().flat_map(|headers| headers.iter()) {
        match h.key {
            header::SOURCE => source = true,
            header::EVENT_ID => event_id = true,
            header::REPLAY_OF
            | header::REPLAY_COUNT
            | header::REPROCESS_ID
            | header::REPROCESS_OF
            | header::SERVICE
            | header::ORIGIN => return false,
            other if other.starts_with(header::retry::PREFIX) || other.starts_with("hookline-dlq-") => return false,
            _ => {}
        }
    }
    source && event_id
}

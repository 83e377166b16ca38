//! The replayer's copies of an inbound record: a *re-drive* of a dead letter ([`Redrive`]) and a *re-processing*
//! request of an event its service already processed ([`Reprocess`]). Each is the copied record's key and body and
//! some of its headers, then the headers that say what the copy is; which headers are copied is decided here,
//! once, because the replayer's signature makes whatever the copy carries hookline's word.
//!
//! Re-drive provenance rules:
//! - [`Provenance::Verified`] (the dead letter's MAC verifies: a hookline consumer wrote it): every header is
//!   copied but the dead letter's own (`hookline-dlq-*`), the earlier replay's ([`header::REPLAY_OF`],
//!   [`header::REPLAY_COUNT`]) and the service and destination it was addressed to ([`header::SERVICE`],
//!   [`header::DESTINATION`]). A re-processing that
//!   failed keeps its `hookline-reprocess-*` headers: it replays as that re-processing.
//! - [`Provenance::Vouched`] (no valid MAC: an operator forced it and vouches for the event, not its routing):
//!   only [`VOUCHED_HEADERS`] and the forwarded `http-*` headers are copied. Whatever could make a consumer re-run
//!   an event already processed (`hookline-reprocess-*`), choose a service, an ordering or an origin is left out.
//! - Then, on both: [`header::REPLAY_OF`] (the entry id), [`header::REPLAY_COUNT`], [`header::SERVICE`] when the
//!   entry names its service (only that service processes it; without one every service does, as before services
//!   had names; a vouched record's service is its own claim, but addressing one service only narrows who runs it),
//!   [`header::DESTINATION`] when the entry names the destination of a fan-out service that failed (only that
//!   destination runs it again; the same reasoning: it only narrows),
//!   and [`header::EVENT_TYPE`] last when the operator chose one (any copied one dropped).
//!
//! A copied MAC or trace context is replaced by the producer when it signs the copy. A copy always has a body (an
//! empty one for a record without): the re-drive has always been produced so.

use crate::{
    Original, Outgoing, header,
    table::{Header, HeaderTable, first_text},
};

/// The headers a re-drive of a dead letter without a valid MAC keeps: what the gateway writes on every inbound
/// record, nothing that gives a record powers (re-processing, service, ordering, origin, retry, replay).
pub const VOUCHED_HEADERS: &[&str] = &[
    header::SOURCE,
    header::EVENT_ID,
    header::EVENT_TYPE,
    header::RECEIVED_AT_MS,
    header::CONTENT_TYPE,
    header::SECRET_ID,
    header::FORMAT_VERSION,
    header::PROVIDER_EVENT_ID,
];

/// How much of a dead letter is believed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provenance {
    /// Its MAC verifies: a hookline consumer wrote it.
    Verified,
    /// No valid MAC; an operator forced the re-drive and vouches for the event, not for its routing.
    Vouched,
}

/// The re-drive of one dead-letter entry (see the module's rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Redrive<'a> {
    /// The entry re-driven: `<dlq topic>:<partition>:<offset>`.
    pub entry_id: &'a str,
    /// How many times the entry has been re-driven, this time included.
    pub replays: u32,
    /// The entry's service, when it names one.
    pub service: Option<&'a str>,
    /// The entry's destination (a fan-out service's route that failed), when it names one.
    pub destination: Option<&'a str>,
    pub provenance: Provenance,
    /// The operator's event type, replacing the record's.
    pub event_type: Option<&'a str>,
}

impl Redrive<'_> {
    /// The re-driven record to `topic`: `original`'s key and body (the dead letter's, or for a dead letter by
    /// reference the record it names), its headers as the provenance allows, then this re-drive's.
    pub fn encode(&self, topic: &str, original: Original<'_>) -> Outgoing {
        let keep = |name: &str| {
            let copied = match self.provenance {
                Provenance::Verified => {
                    !(name.starts_with(crate::dead_letter::HEADER_PREFIX)
                        || name == header::REPLAY_OF
                        || name == header::REPLAY_COUNT
                        || name == header::SERVICE
                        || name == header::DESTINATION)
                }
                Provenance::Vouched => VOUCHED_HEADERS.contains(&name) || name.starts_with(header::FORWARDED_PREFIX),
            };
            copied && !(self.event_type.is_some() && name == header::EVENT_TYPE)
        };
        let mut headers = HeaderTable::with_capacity(original.headers.len() + 5);
        headers.extend_from(original.headers, keep);
        headers.push_str(header::REPLAY_OF, self.entry_id);
        headers.push_str(header::REPLAY_COUNT, &self.replays.to_string());
        if let Some(service) = self.service {
            headers.push_str(header::SERVICE, service);
        }
        if let Some(destination) = self.destination {
            headers.push_str(header::DESTINATION, destination);
        }
        if let Some(event_type) = self.event_type {
            headers.push_str(header::EVENT_TYPE, event_type);
        }
        Outgoing::new(topic, original.key, Some(original.body.unwrap_or_default()), headers)
    }
}

/// A re-processing request for one processed record: its service processes it again, once per run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reprocess<'a> {
    /// The one service that processes it again.
    pub service: &'a str,
    /// The request's run id ([`header::REPROCESS_ID`]).
    pub run_id: &'a str,
    /// Where the re-processed record is, `<topic>:<partition>:<offset>` ([`header::REPROCESS_OF`]).
    pub of: &'a str,
}

impl Reprocess<'_> {
    /// The copy to `topic`: `original`'s key, body and headers but any service, destination, re-processing or replay
    /// header it carried (a re-processing runs for every destination of a fan-out service that takes the event),
    /// then [`header::SERVICE`], [`header::REPROCESS_ID`] and [`header::REPROCESS_OF`].
    pub fn encode(&self, topic: &str, original: Original<'_>) -> Outgoing {
        let mut headers = HeaderTable::with_capacity(original.headers.len() + 3);
        headers.extend_from(original.headers, |name| {
            !(name == header::SERVICE
                || name == header::DESTINATION
                || name.starts_with("hookline-reprocess-")
                || name.starts_with("hookline-replay-"))
        });
        headers.push_str(header::SERVICE, self.service);
        headers.push_str(header::REPROCESS_ID, self.run_id);
        headers.push_str(header::REPROCESS_OF, self.of);
        Outgoing::new(topic, original.key, Some(original.body.unwrap_or_default()), headers)
    }
}

/// A re-processing copy's own headers ([`Reprocess::encode`]), read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReprocessHeaders {
    pub service: String,
    pub run_id: String,
    pub of: String,
}

impl ReprocessHeaders {
    /// `None` for a record that is not a re-processing copy (or whose re-processing headers are not text).
    pub fn decode<'a>(headers: impl Iterator<Item = Header<'a>> + Clone) -> Option<Self> {
        let text = |name: &'static str| first_text(headers.clone(), name).and_then(Result::ok);
        Some(Self {
            service: text(header::SERVICE)?,
            run_id: text(header::REPROCESS_ID)?,
            of: text(header::REPROCESS_OF)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    /// A dead letter of a re-processing copy that was replayed once before, with a forwarded header.
    fn dead_letter() -> HeaderTable {
        let mut headers = HeaderTable::new();
        for (name, value) in [
            (header::SOURCE, "github"),
            (header::EVENT_ID, "e1"),
            (header::EVENT_TYPE, "push"),
            (header::ORDERING_KEY, "k"),
            (header::REPROCESS_ID, "r1"),
            (header::SERVICE, "billing"),
            (header::DESTINATION, "audit"),
            (header::REPLAY_OF, "dlq:0:1"),
            (header::REPLAY_COUNT, "1"),
            ("http-x-github-event", "push"),
            (header::dlq::ERROR_CLASS, "poison"),
            (header::MAC, "v1,k1,x"),
        ] {
            headers.push_str(name, value);
        }
        headers
    }

    fn names(record: &Outgoing) -> Vec<(&str, &str)> {
        record.headers.iter().map(|h| (h.name, std::str::from_utf8(h.value.unwrap_or_default()).unwrap())).collect()
    }

    #[test]
    fn a_verified_redrive_keeps_all_but_the_dead_letters_and_replays_own_headers() {
        let headers = dead_letter();
        let redrive = Redrive {
            entry_id: "dlq:0:9",
            replays: 2,
            service: Some("billing"),
            destination: Some("ledger"),
            provenance: Provenance::Verified,
            event_type: Some("ping"),
        };
        let out = redrive.encode("in", Original { key: Some(Bytes::from_static(b"k")), body: None, headers: &headers });
        assert_eq!(
            names(&out),
            vec![
                (header::SOURCE, "github"),
                (header::EVENT_ID, "e1"),
                (header::ORDERING_KEY, "k"),
                (header::REPROCESS_ID, "r1"),
                ("http-x-github-event", "push"),
                (header::MAC, "v1,k1,x"),
                (header::REPLAY_OF, "dlq:0:9"),
                (header::REPLAY_COUNT, "2"),
                (header::SERVICE, "billing"),
                (header::DESTINATION, "ledger"),
                (header::EVENT_TYPE, "ping"),
            ]
        );
        assert_eq!((out.topic.as_str(), out.key.as_deref(), out.body), ("in", Some(&b"k"[..]), Some(Bytes::new())));
    }

    #[test]
    fn a_vouched_redrive_keeps_only_the_core_metadata_and_forwarded_headers() {
        let headers = dead_letter();
        let redrive = Redrive {
            entry_id: "dlq:0:9",
            replays: 1,
            service: None,
            destination: None,
            provenance: Provenance::Vouched,
            event_type: None,
        };
        let out =
            redrive.encode("in", Original { key: None, body: Some(Bytes::from_static(b"{}")), headers: &headers });
        assert_eq!(
            names(&out),
            vec![
                (header::SOURCE, "github"),
                (header::EVENT_ID, "e1"),
                (header::EVENT_TYPE, "push"),
                ("http-x-github-event", "push"),
                (header::REPLAY_OF, "dlq:0:9"),
                (header::REPLAY_COUNT, "1"),
            ]
        );
    }

    #[test]
    fn a_reprocessing_copy_is_addressed_to_its_service_and_reads_back() {
        let headers = dead_letter();
        let copy = Reprocess { service: "orders", run_id: "run-2", of: "in:0:3" };
        let out = copy.encode("in", Original { key: None, body: None, headers: &headers });
        let kept: Vec<&str> = out.headers.iter().map(|h| h.name).collect();
        assert!(!kept.contains(&header::REPLAY_OF) && !kept.contains(&header::REPLAY_COUNT));
        assert!(!kept.contains(&header::DESTINATION), "a re-processing is for every destination");
        assert_eq!(
            ReprocessHeaders::decode(out.headers.iter()),
            Some(ReprocessHeaders { service: "orders".into(), run_id: "run-2".into(), of: "in:0:3".into() })
        );
        assert_eq!(ReprocessHeaders::decode(headers.iter()), None, "not a re-processing copy: no reprocess-of");
    }
}

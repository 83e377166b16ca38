//! The inbound record (the inbound topic and the source topics): a verified webhook, or a re-drive or a
//! re-processing request of one.
//!
//! - key: the source's ordering key when it has one (format version 2), otherwise the event id, so every delivery
//!   of one event (and, with an ordering key, every event of one key) lands on one partition;
//! - body: the raw request body, byte for byte as received (never re-serialized);
//! - headers: [`EventMeta`]'s, then the optional ones of [`InboundRecord`], then the forwarded provider headers
//!   (`http-<lowercase name>`, one per value). Only the gateway writes a fresh one, and only after verification.

use bytes::Bytes;

use crate::{
    FORMAT_VERSION, Outgoing, READABLE_FORMAT_VERSIONS, WireError, header,
    table::{Header, HeaderTable},
};

/// The metadata of a verified webhook, as carried in the inbound record's headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventMeta {
    pub source: String,
    pub event_id: String,
    pub event_type: Option<String>,
    pub received_at_ms: i64,
    pub content_type: Option<String>,
    pub secret_id: String,
    /// The source's ordering key for this event, when it has one ([`header::ORDERING_KEY`]).
    pub ordering_key: Option<String>,
}

impl EventMeta {
    /// The Kafka record key: the ordering key when the source has one, otherwise the event id.
    pub fn record_key(&self) -> &str {
        self.ordering_key.as_deref().unwrap_or(&self.event_id)
    }

    /// Appends this metadata's headers to `headers`, in the order every writer has always used.
    pub fn encode_into(&self, headers: &mut HeaderTable) {
        headers.push_str(header::SOURCE, &self.source);
        headers.push_str(header::EVENT_ID, &self.event_id);
        headers.push_str(header::RECEIVED_AT_MS, &self.received_at_ms.to_string());
        headers.push_str(header::SECRET_ID, &self.secret_id);
        headers.push_str(header::FORMAT_VERSION, FORMAT_VERSION);
        if let Some(event_type) = &self.event_type {
            headers.push_str(header::EVENT_TYPE, event_type);
        }
        if let Some(content_type) = &self.content_type {
            headers.push_str(header::CONTENT_TYPE, content_type);
        }
        if let Some(ordering_key) = &self.ordering_key {
            headers.push_str(header::ORDERING_KEY, ordering_key);
        }
    }

    /// Reads the metadata back from an inbound record's headers. Fails on a record that no gateway wrote
    /// (missing source or event id, unknown format version): the consumer treats that as poison.
    pub fn decode<'a>(headers: impl Iterator<Item = Header<'a>>) -> Result<Self, WireError> {
        Self::from_slots(&Slots::read(headers))
    }

    fn from_slots(slots: &Slots<'_>) -> Result<Self, WireError> {
        let get = |name: &'static str| slots.text(name).transpose();
        let required = |name: &'static str| get(name)?.ok_or(WireError::MissingHeader(name));
        let version = required(header::FORMAT_VERSION)?;
        if !READABLE_FORMAT_VERSIONS.contains(&version.as_str()) {
            return Err(WireError::UnsupportedVersion(version));
        }
        let received_at = required(header::RECEIVED_AT_MS)?;
        Ok(Self {
            source: required(header::SOURCE)?,
            event_id: required(header::EVENT_ID)?,
            event_type: get(header::EVENT_TYPE)?,
            received_at_ms: received_at.parse().map_err(|_| WireError::BadHeader(header::RECEIVED_AT_MS))?,
            content_type: get(header::CONTENT_TYPE)?,
            secret_id: required(header::SECRET_ID)?,
            ordering_key: get(header::ORDERING_KEY)?,
        })
    }
}

/// One inbound record's headers, decoded: the event's metadata and everything else an inbound record may carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboundRecord {
    pub meta: EventMeta,
    /// The provider's own id when it is not the dedupe id (it was not signed): metadata, for searching logs by
    /// the id a provider's dashboard shows ([`header::PROVIDER_EVENT_ID`]).
    pub provider_event_id: Option<String>,
    /// Set when the replayer re-drove this record from a DLQ entry.
    pub replay_of: Option<String>,
    /// With `replay_of`: how many times that entry has been re-driven.
    pub replay_count: Option<u32>,
    /// [`header::ORIGIN`]: `Some("reconciled")` when the reconciler fetched the event from the provider's API.
    pub origin: Option<String>,
    /// [`header::SERVICE`]: the only consumer service that may process this record, when it is addressed to one.
    pub service: Option<String>,
    /// [`header::REPROCESS_ID`]: the re-processing run this record belongs to, if any.
    pub reprocess_id: Option<String>,
    /// [`header::DESTINATION`]: the one destination of its service (a fan-out service's route) it is for.
    pub destination: Option<String>,
    /// The provider's request headers the gateway carried ([`header::FORWARDED_PREFIX`]): lowercase name without
    /// the prefix, and value, one entry per value, in record order.
    pub forwarded_headers: Vec<(String, Bytes)>,
}

impl InboundRecord {
    /// A fresh event as the gateway writes it: its metadata, nothing else yet.
    pub fn new(meta: EventMeta) -> Self {
        Self {
            meta,
            provider_event_id: None,
            replay_of: None,
            replay_count: None,
            origin: None,
            service: None,
            reprocess_id: None,
            destination: None,
            forwarded_headers: Vec::new(),
        }
    }

    /// The record to `topic` with `body`: keyed by [`EventMeta::record_key`]; the metadata's headers, then the
    /// provider's id, the origin, service, re-drive and re-processing headers that are set, then the forwarded
    /// headers.
    pub fn encode(&self, topic: &str, body: Bytes) -> Outgoing {
        let mut headers = HeaderTable::with_capacity(9 + self.forwarded_headers.len());
        self.meta.encode_into(&mut headers);
        let optional = [
            (header::PROVIDER_EVENT_ID, self.provider_event_id.clone()),
            (header::ORIGIN, self.origin.clone()),
            (header::SERVICE, self.service.clone()),
            (header::REPLAY_OF, self.replay_of.clone()),
            (header::REPLAY_COUNT, self.replay_count.map(|count| count.to_string())),
            (header::REPROCESS_ID, self.reprocess_id.clone()),
            (header::DESTINATION, self.destination.clone()),
        ];
        for (name, value) in optional {
            if let Some(value) = value {
                headers.push_str(name, &value);
            }
        }
        for (name, value) in &self.forwarded_headers {
            headers.push(&format!("{}{name}", header::FORWARDED_PREFIX), Some(value));
        }
        Outgoing::new(topic, Some(Bytes::copy_from_slice(self.meta.record_key().as_bytes())), Some(body), headers)
    }

    /// Decodes an inbound record's headers, found in one pass: an error for a record no gateway wrote. An optional
    /// header that is not UTF-8 is left out, but for `replay_of`, which fails the record.
    pub fn decode<'a>(headers: impl Iterator<Item = Header<'a>> + Clone) -> Result<Self, WireError> {
        let slots = Slots::read(headers.clone());
        let text = |name| slots.text(name).and_then(Result::ok);
        Ok(Self {
            meta: EventMeta::from_slots(&slots)?,
            replay_of: slots.text(header::REPLAY_OF).transpose()?,
            replay_count: text(header::REPLAY_COUNT).and_then(|n| n.parse().ok()),
            provider_event_id: text(header::PROVIDER_EVENT_ID),
            origin: text(header::ORIGIN),
            service: text(header::SERVICE),
            reprocess_id: text(header::REPROCESS_ID),
            destination: text(header::DESTINATION),
            forwarded_headers: forwarded_headers(headers),
        })
    }
}

/// What the replayer's searches and listings read of a record of an inbound or source topic: a few of its headers,
/// borrowed, found in one pass (the first value of each name, as every reader here takes it), never failing, so a
/// record no gateway wrote is still seen (and judged by its MAC after). Values are raw bytes; [`Self::text`] reads
/// one as UTF-8.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InboundSummary<'a> {
    pub source: Option<&'a [u8]>,
    pub event_id: Option<&'a [u8]>,
    pub event_type: Option<&'a [u8]>,
    pub received_at_ms: Option<&'a [u8]>,
    /// [`header::TRACEPARENT`].
    pub traceparent: Option<&'a [u8]>,
    /// It carries [`header::REPLAY_OF`] or [`header::REPROCESS_ID`], whatever their values: a copy the replayer
    /// made (a re-drive or a re-processing), not the record the gateway accepted.
    pub is_copy: bool,
}

impl<'a> InboundSummary<'a> {
    pub fn read(headers: impl Iterator<Item = Header<'a>>) -> Self {
        let mut summary = Self::default();
        let mut seen = [false; 5];
        for header in headers {
            let slot = match header.name {
                header::SOURCE => (0, &mut summary.source),
                header::EVENT_ID => (1, &mut summary.event_id),
                header::EVENT_TYPE => (2, &mut summary.event_type),
                header::RECEIVED_AT_MS => (3, &mut summary.received_at_ms),
                header::TRACEPARENT => (4, &mut summary.traceparent),
                header::REPLAY_OF | header::REPROCESS_ID => {
                    summary.is_copy = true;
                    continue;
                }
                _ => continue,
            };
            if !seen[slot.0] {
                seen[slot.0] = true;
                *slot.1 = header.value;
            }
        }
        summary
    }

    /// A value as text: `None` when absent, null or not UTF-8.
    pub fn text(value: Option<&[u8]>) -> Option<String> {
        value.and_then(|bytes| std::str::from_utf8(bytes).ok()).map(str::to_owned)
    }

    /// [`header::RECEIVED_AT_MS`] as a number, when it is one.
    pub fn received_at_ms(&self) -> Option<i64> {
        std::str::from_utf8(self.received_at_ms?).ok()?.parse().ok()
    }
}

/// The record's `http-*` headers ([`header::FORWARDED_PREFIX`]) as (lowercase name without the prefix, value).
fn forwarded_headers<'a>(headers: impl Iterator<Item = Header<'a>>) -> Vec<(String, Bytes)> {
    headers
        .filter_map(|header| {
            let name = header.name.strip_prefix(header::FORWARDED_PREFIX)?;
            Some((name.to_ascii_lowercase(), Bytes::copy_from_slice(header.value.unwrap_or_default())))
        })
        .collect()
}

/// The headers an inbound event is read from, found in one pass over a record's headers (each a first value of
/// its name), instead of one scan per name.
struct Slots<'a> {
    values: [Option<Option<&'a [u8]>>; SLOT_NAMES.len()],
}

const SLOT_NAMES: [&str; 15] = [
    header::FORMAT_VERSION,
    header::RECEIVED_AT_MS,
    header::SOURCE,
    header::EVENT_ID,
    header::EVENT_TYPE,
    header::CONTENT_TYPE,
    header::SECRET_ID,
    header::ORDERING_KEY,
    header::REPLAY_OF,
    header::REPLAY_COUNT,
    header::PROVIDER_EVENT_ID,
    header::ORIGIN,
    header::SERVICE,
    header::REPROCESS_ID,
    header::DESTINATION,
];

impl<'a> Slots<'a> {
    fn read(headers: impl Iterator<Item = Header<'a>>) -> Self {
        let mut slots = Self { values: [None; SLOT_NAMES.len()] };
        for header in headers {
            // Every name of ours starts `hookline-`: the rest (forwarded `http-*` headers) is passed over at once.
            if !header.name.starts_with("hookline-") {
                continue;
            }
            if let Some(index) = SLOT_NAMES.iter().position(|name| *name == header.name) {
                slots.values[index].get_or_insert(header.value);
            }
        }
        slots
    }

    /// `None` when absent (or null), an error when present but not UTF-8.
    fn text(&self, name: &'static str) -> Option<Result<String, WireError>> {
        let index = SLOT_NAMES.iter().position(|slot| *slot == name)?;
        let value = self.values[index]??;
        Some(std::str::from_utf8(value).map(str::to_owned).map_err(|_| WireError::BadHeader(name)))
    }
}

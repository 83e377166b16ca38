//! The bytes a record's MAC covers (version 1) and the `hookline-mac` header's value: one encoding for signing and
//! verifying, with a fixed test vector in the parent module's tests.

use base64::Engine as _;
use hmac::{Hmac, Mac};
use rdkafka::message::Headers;
use sha2::Sha256;

use crate::wire::{RECORD_MAC_DOMAIN, RECORD_MAC_VERSION, header};

/// `v1,<key id>,<base64>` → (key id, MAC bytes).
pub(super) fn parse_mac_header(value: &[u8]) -> Option<(&str, Vec<u8>)> {
    let text = std::str::from_utf8(value).ok()?;
    let mut parts = text.splitn(3, ',');
    let (version, key_id, tag) = (parts.next()?, parts.next()?, parts.next()?);
    if version != RECORD_MAC_VERSION || key_id.is_empty() {
        return None;
    }
    let tag = base64::engine::general_purpose::STANDARD.decode(tag).ok()?;
    (tag.len() == 32).then_some((key_id, tag))
}

pub(super) fn compute<H: Headers>(
    keyed: &Hmac<Sha256>,
    key_id: &str,
    topic: &str,
    key: Option<&[u8]>,
    payload: Option<&[u8]>,
    headers: Option<&H>,
) -> [u8; 32] {
    let mut mac = keyed.clone();
    feed(&mut mac, key_id, topic, key, payload, headers);
    mac.finalize().into_bytes().into()
}

/// Feeds [`mac_input`]'s bytes into `mac` without building them.
pub(super) fn feed<H: Headers>(
    mac: &mut Hmac<Sha256>,
    key_id: &str,
    topic: &str,
    key: Option<&[u8]>,
    payload: Option<&[u8]>,
    headers: Option<&H>,
) {
    visit(key_id, topic, key, payload, headers, &mut |bytes| mac.update(bytes));
}

/// The exact bytes a record's MAC covers (version 1), for the documentation and the test vector:
///
/// ```text
/// "hookline-record-mac" 0x00 "v1" 0x00           RECORD_MAC_DOMAIN, RECORD_MAC_VERSION
/// field(key id) field(topic) optional(record key) optional(body)
/// u32be(number of headers)                       every header except `hookline-mac`, in record order:
///   field(name) optional(value)
/// field(b)    = u64be(len(b)) || b
/// optional(x) = 0x00 when absent, 0x01 || field(x) when present (an empty key is not an absent key)
/// ```
pub fn mac_input<H: Headers>(
    key_id: &str,
    topic: &str,
    key: Option<&[u8]>,
    payload: Option<&[u8]>,
    headers: Option<&H>,
) -> Vec<u8> {
    let mut out = Vec::new();
    visit(key_id, topic, key, payload, headers, &mut |bytes| out.extend_from_slice(bytes));
    out
}

fn visit<H: Headers>(
    key_id: &str,
    topic: &str,
    key: Option<&[u8]>,
    payload: Option<&[u8]>,
    headers: Option<&H>,
    sink: &mut dyn FnMut(&[u8]),
) {
    let field = |sink: &mut dyn FnMut(&[u8]), bytes: &[u8]| {
        sink(&(bytes.len() as u64).to_be_bytes());
        sink(bytes);
    };
    let optional = |sink: &mut dyn FnMut(&[u8]), bytes: Option<&[u8]>| match bytes {
        None => sink(&[0]),
        Some(bytes) => {
            sink(&[1]);
            field(sink, bytes);
        }
    };
    sink(RECORD_MAC_DOMAIN.as_bytes());
    sink(&[0]);
    sink(RECORD_MAC_VERSION.as_bytes());
    sink(&[0]);
    field(sink, key_id.as_bytes());
    field(sink, topic.as_bytes());
    optional(sink, key);
    optional(sink, payload);
    let covered = || headers.into_iter().flat_map(|headers| headers.iter()).filter(|h| h.key != header::MAC);
    let count = u32::try_from(covered().count()).unwrap_or(u32::MAX);
    sink(&count.to_be_bytes());
    for h in covered() {
        field(sink, h.key.as_bytes());
        optional(sink, h.value);
    }
}

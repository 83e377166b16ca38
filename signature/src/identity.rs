//! Where a verified request's event id (the dedupe key) and event type come from: a header, a JSON pointer into
//! the body, or the body's SHA-256 for providers that send no stable id. Each scheme has defaults (tried in order);
//! a source's config can replace either with its own.
//!
//! Read only after the request verified: the body is trusted by then, and is bounded by the source's limit.
//!
//! The dedupe id must depend only on signed bytes ([`IdentityRule::identify_signed`]): a header the signature does
//! not cover (GitHub's `X-GitHub-Delivery`, Shopify's `X-Shopify-Event-Id`, ...) can be changed by anyone holding
//! one genuine request, who could then have it processed again under a fresh id. Such a header is skipped in
//! favour of a later signed source; when there is none, the event id is the body's SHA-256 and the header's value
//! is kept as the provider's id (metadata only).

use http::HeaderMap;
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// One place a value can come from.
///
/// In TOML: `{ header = "X-Request-Id" }`, `{ json_pointer = "/data/id" }`, or `"body_sha256"`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum FieldSource {
    /// A request header (case-insensitive).
    Header(String),
    /// An RFC 6901 pointer into a JSON body (`/id`, `/event/type`, `/0/eventId`); strings and numbers are taken.
    JsonPointer(String),
    /// `sha256:<hex>` of the raw body: identical retries share it. For providers with no stable delivery id.
    BodySha256,
    /// `sha256:<hex>` of a JSON body with the value at this pointer removed (then re-serialized), for providers
    /// whose retries re-sign the same event with a new time inside the body (Linear's `/webhookTimestamp`). A body
    /// that is not JSON, or lacks the field, is hashed as it is.
    BodySha256Without(String),
}

impl FieldSource {
    pub fn header(name: &str) -> Self {
        Self::Header(name.to_owned())
    }

    pub fn pointer(pointer: &str) -> Self {
        Self::JsonPointer(pointer.to_owned())
    }

    /// The value this source gives for a verified request, if any (the body is parsed here if a pointer asks).
    pub fn value(&self, headers: &HeaderMap, body: &[u8]) -> Option<String> {
        resolve(self, headers, body, &mut None).filter(|value| !value.is_empty())
    }

    /// A problem with this source's spelling, for config validation.
    pub fn problem(&self) -> Option<String> {
        match self {
            Self::Header(name) => http::HeaderName::from_bytes(name.as_bytes())
                .err()
                .map(|_| format!("`{name}` is not a valid header name")),
            Self::JsonPointer(pointer) => (!pointer.is_empty() && !pointer.starts_with('/'))
                .then(|| format!("JSON pointer `{pointer}` must be empty or start with `/`")),
            Self::BodySha256 => None,
            Self::BodySha256Without(pointer) => {
                (!pointer.starts_with('/')).then(|| format!("JSON pointer `{pointer}` must start with `/`"))
            }
        }
    }
}

/// Where to look for the event id and type, each a list tried in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdentityRule {
    pub event_id: Vec<FieldSource>,
    pub event_type: Vec<FieldSource>,
    /// Whether a header the signature does not cover may give the event type ([`Self::identify_signed`]).
    pub header_type: HeaderType,
}

/// Whether an event type may come from a header the signature does not cover. Such a header is the only type some
/// providers send (GitHub's `X-GitHub-Event`, Shopify's `X-Shopify-Topic`), but anyone holding one genuine
/// delivery can re-send it with another value and so pick the route of the event's first copy; a source takes it
/// only when its config says so (`type_from_header = true`, docs/security.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HeaderType {
    /// The type comes from signed bytes only; without one the event has no type.
    #[default]
    Refused,
    /// An unsigned header gives the type when no signed source does.
    Accepted,
}

impl IdentityRule {
    pub fn new(event_id: Vec<FieldSource>, event_type: Vec<FieldSource>) -> Self {
        Self { event_id, event_type, header_type: HeaderType::Refused }
    }

    /// The headers this rule would take the event type from that a scheme able to sign only `signable` (lowercase
    /// names) cannot cover: where the type comes from unsigned bytes when [`HeaderType::Accepted`].
    pub fn unsigned_type_headers(&self, signable: &[std::borrow::Cow<'static, str>]) -> Vec<&str> {
        self.event_type
            .iter()
            .filter_map(|source| match source {
                FieldSource::Header(name) => Some(name.as_str()),
                _ => None,
            })
            .filter(|name| !signable.iter().any(|signed| signed.eq_ignore_ascii_case(name)))
            .collect()
    }

    /// The event id and type of a verified request. The body is parsed as JSON at most once, and only if a
    /// pointer is asked for.
    pub fn identify(&self, headers: &HeaderMap, body: &[u8]) -> Identity {
        let mut json: Option<Option<serde_json::Value>> = None;
        let mut first = |sources: &[FieldSource]| {
            sources.iter().find_map(|source| resolve(source, headers, body, &mut json)).filter(|v| !v.is_empty())
        };
        let event_id = first(&self.event_id);
        let event_type = first(&self.event_type);
        Identity { event_id, event_type }
    }
}

/// Longest event id or type carried into Kafka; a longer value is treated as absent (it is no provider's id).
pub const MAX_FIELD_BYTES: usize = 256;

fn resolve(
    source: &FieldSource,
    headers: &HeaderMap,
    body: &[u8],
    json: &mut Option<Option<serde_json::Value>>,
) -> Option<String> {
    let value = match source {
        FieldSource::Header(name) => headers.get(name.as_str())?.to_str().ok()?.trim().to_owned(),
        FieldSource::JsonPointer(pointer) => {
            let parsed = json.get_or_insert_with(|| serde_json::from_slice(body).ok()).as_ref()?;
            match parsed.pointer(pointer)? {
                serde_json::Value::String(text) => text.clone(),
                serde_json::Value::Number(number) => number.to_string(),
                _ => return None,
            }
        }
        FieldSource::BodySha256 => body_sha256(body),
        FieldSource::BodySha256Without(pointer) => {
            let parsed = json.get_or_insert_with(|| serde_json::from_slice(body).ok()).as_ref();
            let mut value = parsed.cloned();
            let removed = value.as_mut().and_then(|value| remove_at(value, pointer)).is_some();
            match value.filter(|_| removed).and_then(|value| serde_json::to_vec(&value).ok()) {
                Some(without) => body_sha256(&without),
                None => body_sha256(body),
            }
        }
    };
    (value.len() <= MAX_FIELD_BYTES && !value.chars().any(char::is_control)).then_some(value)
}

fn body_sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Removes the value at `pointer` (an object member) from `value`; `Some` if there was one.
fn remove_at(value: &mut serde_json::Value, pointer: &str) -> Option<serde_json::Value> {
    let (parent, key) = pointer.rsplit_once('/')?;
    let key = key.replace("~1", "/").replace("~0", "~");
    value.pointer_mut(parent)?.as_object_mut()?.remove(&key)
}

/// The identity of a verified request, from signed bytes only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SignedIdentity {
    /// The dedupe id: a signed value, or the body's SHA-256 when the provider's id is unsigned.
    pub event_id: Option<String>,
    /// The value of the first unsigned id header the rule names, when it is not the dedupe id: the provider's own
    /// id, as metadata for handlers (anyone relaying the request could have changed it).
    pub provider_event_id: Option<String>,
    /// The event type: a signed value when one of the rule's sources gives one, else, only when the rule says
    /// [`HeaderType::Accepted`], the first unsigned header (a provider whose body does not carry its type, such as
    /// GitHub's `X-GitHub-Event`).
    pub event_type: Option<String>,
}

impl IdentityRule {
    /// Like [`Self::identify`], but a header for which `is_signed` says no is never the event id: the first such
    /// value becomes [`SignedIdentity::provider_event_id`], and the event id is the first signed source's value or,
    /// when there is none, the body's SHA-256. For the event type, an unsigned header is used only when no signed
    /// source gives a value and the rule accepts one ([`HeaderType::Accepted`]).
    pub fn identify_signed(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        is_signed: &dyn Fn(&str) -> bool,
    ) -> SignedIdentity {
        let mut json: Option<Option<serde_json::Value>> = None;
        let mut first = |sources: &[FieldSource]| {
            let mut unsigned = None;
            for source in sources {
                let Some(value) = resolve(source, headers, body, &mut json).filter(|v| !v.is_empty()) else { continue };
                match source {
                    FieldSource::Header(name) if !is_signed(name) => {
                        unsigned.get_or_insert(value);
                    }
                    _ => return (Some(value), unsigned),
                }
            }
            (None, unsigned)
        };
        let (event_id, provider_event_id) = match first(&self.event_id) {
            (Some(signed), unsigned) => (Some(signed), unsigned),
            (None, Some(unsigned)) => (Some(body_sha256(body)), Some(unsigned)),
            (None, None) => (None, None),
        };
        let event_type = match (first(&self.event_type), self.header_type) {
            ((Some(signed), _), _) => Some(signed),
            ((None, unsigned), HeaderType::Accepted) => unsigned,
            ((None, _), HeaderType::Refused) => None,
        };
        SignedIdentity { event_id, provider_event_id, event_type }
    }
}

/// The event id and type of a request, as its source's rule found them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    pub event_id: Option<String>,
    pub event_type: Option<String>,
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    #[test]
    fn sources_are_tried_in_order_and_numbers_count() {
        let mut headers = HeaderMap::new();
        headers.insert("x-id", HeaderValue::from_static("from-header"));
        let body = br#"{"id":42,"nested":{"type":"a.b"},"empty":""}"#;
        let rule = IdentityRule::new(
            vec![FieldSource::header("X-Missing"), FieldSource::pointer("/id")],
            vec![FieldSource::pointer("/empty"), FieldSource::pointer("/nested/type")],
        );
        let identity = rule.identify(&headers, body);
        assert_eq!(identity.event_id.as_deref(), Some("42"));
        assert_eq!(identity.event_type.as_deref(), None, "an empty string is a value, and an empty one is absent");
        let rule = IdentityRule::new(vec![FieldSource::header("X-Id")], vec![FieldSource::pointer("/nested/type")]);
        assert_eq!(
            rule.identify(&headers, body),
            Identity { event_id: Some("from-header".into()), event_type: Some("a.b".into()) }
        );
    }

    #[test]
    fn body_sha256_is_stable_and_not_json_dependent() {
        let rule = IdentityRule::new(vec![FieldSource::BodySha256], vec![]);
        let id = rule.identify(&HeaderMap::new(), b"not json").event_id;
        assert_eq!(id.as_deref(), Some("sha256:7ccfa1fbf3940e6f0c0375d87c0f9235a50514e14cb427bdfaf5077987b26ccf"));
    }

    #[test]
    fn oversized_or_control_values_are_absent() {
        let long = format!(r#"{{"id":"{}"}}"#, "x".repeat(MAX_FIELD_BYTES + 1));
        let rule = IdentityRule::new(vec![FieldSource::pointer("/id")], vec![]);
        assert_eq!(rule.identify(&HeaderMap::new(), long.as_bytes()).event_id, None);
        assert_eq!(rule.identify(&HeaderMap::new(), br#"{"id":"a\nb"}"#).event_id, None);
    }

    #[test]
    fn unsigned_headers_never_make_the_dedupe_id() {
        let mut headers = HeaderMap::new();
        headers.insert("x-delivery", HeaderValue::from_static("attacker-chosen"));
        headers.insert("x-signed-id", HeaderValue::from_static("signed-1"));
        headers.insert("x-kind", HeaderValue::from_static("steered"));
        let body = br#"{"type":"from.body"}"#;
        let signed = |name: &str| name == "x-signed-id";
        let rule = IdentityRule::new(
            vec![FieldSource::header("x-delivery")],
            vec![FieldSource::header("x-kind"), FieldSource::pointer("/type")],
        );
        let identity = rule.identify_signed(&headers, body, &signed);
        assert_eq!(identity.event_id, Some(body_sha256(body)), "the body's digest, not the unsigned header");
        assert_eq!(identity.provider_event_id.as_deref(), Some("attacker-chosen"));
        assert_eq!(identity.event_type.as_deref(), Some("from.body"), "the signed body wins over a header");
        let fresh_id = {
            let mut headers = headers.clone();
            headers.insert("x-delivery", HeaderValue::from_static("fresh"));
            rule.identify_signed(&headers, body, &signed).event_id
        };
        assert_eq!(fresh_id, identity.event_id, "a changed unsigned id is the same event");

        let rule = IdentityRule::new(
            vec![FieldSource::header("x-delivery"), FieldSource::header("x-signed-id")],
            vec![FieldSource::header("x-kind")],
        );
        let identity = rule.identify_signed(&headers, body, &signed);
        assert_eq!(identity.event_id.as_deref(), Some("signed-1"));
        assert_eq!(identity.provider_event_id.as_deref(), Some("attacker-chosen"), "kept, as metadata only");
        assert_eq!(identity.event_type, None, "no signed type, and the rule takes none from a header");
        let opted_in = IdentityRule { header_type: HeaderType::Accepted, ..rule };
        let identity = opted_in.identify_signed(&headers, body, &signed);
        assert_eq!(identity.event_type.as_deref(), Some("steered"), "opted in: the unsigned header is the type");
        assert_eq!(opted_in.unsigned_type_headers(&[]), vec!["x-kind"]);
        assert!(opted_in.unsigned_type_headers(&["X-Kind".into()]).is_empty(), "a signable header is signed bytes");
    }

    #[test]
    fn a_digest_without_a_field_ignores_only_that_field() {
        let rule = IdentityRule::new(vec![FieldSource::BodySha256Without("/webhookTimestamp".into())], vec![]);
        let id = |body: &[u8]| rule.identify(&HeaderMap::new(), body).event_id;
        let first = id(br#"{"type":"Issue","webhookTimestamp":1,"data":{"id":"x"}}"#);
        assert_eq!(first, id(br#"{"type":"Issue","webhookTimestamp":2,"data":{"id":"x"}}"#));
        assert_ne!(first, id(br#"{"type":"Issue","webhookTimestamp":1,"data":{"id":"y"}}"#));
        assert_eq!(id(b"not json"), Some(body_sha256(b"not json")));
    }

    #[test]
    fn config_spellings_parse() {
        #[derive(Deserialize)]
        struct Holder {
            a: FieldSource,
            b: FieldSource,
            c: FieldSource,
        }
        let holder: Holder =
            toml::from_str("a = { header = \"X-Id\" }\nb = { json_pointer = \"/id\" }\nc = \"body_sha256\"\n").unwrap();
        assert_eq!(holder.a, FieldSource::header("X-Id"));
        assert_eq!(holder.b, FieldSource::pointer("/id"));
        assert_eq!(holder.c, FieldSource::BodySha256);
        assert!(FieldSource::pointer("id").problem().is_some());
        assert!(FieldSource::header("bad header").problem().is_some());
    }
}

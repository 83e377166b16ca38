//! Where a verified request's event id (the dedupe key) and event type come from: a header, a JSON pointer into
//! the body, or the body's SHA-256 for providers that send no stable id. Each scheme has defaults (tried in order);
//! a source's config can replace either with its own.
//!
//! Read only after the request verified: the body is trusted by then, and is bounded by the source's limit.

use http::HeaderMap;
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// One place a value can come from.
///
/// In TOML: `{ header = "X-Request-Id" }`, `{ json_pointer = "/data/id" }`, or `"body_sha256"`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum FieldSource {
    /// A request header (case-insensitive).
    Header(String),
    /// An RFC 6901 pointer into a JSON body (`/id`, `/event/type`, `/0/eventId`); strings and numbers are taken.
    JsonPointer(String),
    /// `sha256:<hex>` of the raw body: identical retries share it. For providers with no stable delivery id.
    BodySha256,
}

impl FieldSource {
    pub fn header(name: &str) -> Self {
        Self::Header(name.to_owned())
    }

    pub fn pointer(pointer: &str) -> Self {
        Self::JsonPointer(pointer.to_owned())
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
        }
    }
}

/// Where to look for the event id and type, each a list tried in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdentityRule {
    pub event_id: Vec<FieldSource>,
    pub event_type: Vec<FieldSource>,
}

impl IdentityRule {
    pub fn new(event_id: Vec<FieldSource>, event_type: Vec<FieldSource>) -> Self {
        Self { event_id, event_type }
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
        FieldSource::BodySha256 => format!("sha256:{}", hex::encode(Sha256::digest(body))),
    };
    (value.len() <= MAX_FIELD_BYTES && !value.chars().any(char::is_control)).then_some(value)
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

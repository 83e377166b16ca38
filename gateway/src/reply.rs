//! What the gateway answers a request that went well: the default `202` acknowledgement, a provider's own
//! (Discord's interaction response, Zoom's 204, a preset's such as Adyen's `[accepted]`), a source's configured
//! `reply`, and a handshake's answer. Errors are [`crate::error`]'s.

use bytes::Bytes;
use hookline_common::http::Body;
use hookline_signature::{AcceptedReply, Handshake};
use http::{HeaderValue, Response, StatusCode, header};

use crate::config::ReplyConfig;

/// A configured accepted reply, ready to send.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: StatusCode,
    pub content_type: HeaderValue,
    pub body: Bytes,
}

impl Reply {
    pub(crate) fn from_config(config: &ReplyConfig, problems: &mut Vec<String>) -> Option<Self> {
        let status = StatusCode::from_u16(config.status).ok().filter(StatusCode::is_success);
        let content_type = HeaderValue::from_str(&config.content_type).ok();
        if status.is_none() {
            problems.push(format!("reply.status {} must be a 2xx status", config.status));
        }
        if content_type.is_none() {
            problems.push(format!("reply.content_type `{}` is not a valid header value", config.content_type));
        }
        Some(Self { status: status?, content_type: content_type?, body: Bytes::from(config.body.clone()) })
    }

    /// The answer, with its content type when it has a body.
    pub fn response(&self) -> Response<Body> {
        let mut response = Response::new(Body::new(self.body.clone()));
        *response.status_mut() = self.status;
        if !self.body.is_empty() {
            response.headers_mut().insert(header::CONTENT_TYPE, self.content_type.clone());
        }
        response
    }
}

/// `202 {"status":"accepted","event_id":"..."}`, written directly (no JSON value per request). Event ids hold
/// no control characters (see `identity::MAX_FIELD_BYTES` and the check beside it), so quotes and backslashes are
/// all there is to escape.
pub fn accepted(event_id: &str) -> Response<Body> {
    let mut body = String::with_capacity(40 + event_id.len());
    body.push_str(r#"{"status":"accepted","event_id":""#);
    for c in event_id.chars() {
        match c {
            '"' => body.push_str("\\\""),
            '\\' => body.push_str("\\\\"),
            c if c.is_control() => body.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => body.push(c),
        }
    }
    body.push_str(r#""}"#);
    let mut response = Response::new(Body::new(Bytes::from(body)));
    *response.status_mut() = StatusCode::ACCEPTED;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A provider's own accepted answer (Discord's interaction response, Zoom's 204).
pub fn provider(reply: AcceptedReply) -> Response<Body> {
    let has_body = !reply.body.is_empty();
    let mut response = Response::new(Body::new(Bytes::from(reply.body)));
    *response.status_mut() = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
    if has_body {
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(reply.content_type));
    }
    response
}

/// A handshake's answer: 200 with its body. `nosniff`: an echoed challenge is never read as HTML.
pub fn handshake(handshake: Handshake) -> Response<Body> {
    let mut response = Response::new(Body::new(Bytes::from(handshake.body)));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(handshake.content_type));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    response
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    #[tokio::test]
    async fn the_acknowledgement_is_the_same_json_without_serde() {
        for event_id in ["evt_1", "sha256:ab", r#"quote"and\back"#] {
            let response = accepted(event_id);
            assert_eq!(response.status(), StatusCode::ACCEPTED);
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(value, serde_json::json!({ "status": "accepted", "event_id": event_id }));
        }
    }
}

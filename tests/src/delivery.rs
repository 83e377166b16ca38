//! What a test sends and gets back: a GitHub delivery signed with the test secret, and the gateway's reply.

use bytes::Bytes;
use http::{HeaderMap, StatusCode};

/// The secret every test source is configured with.
pub const TEST_SECRET: &str = "integration-test-secret";

/// A response as the test saw it.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    /// The stable error code of a JSON error response.
    pub fn error_code(&self) -> Option<String> {
        let value: serde_json::Value = serde_json::from_slice(&self.body).ok()?;
        value["error"]["code"].as_str().map(str::to_owned)
    }
}

/// The event id the gateway gives a body whose provider id is unsigned: `sha256:<hex>` of the body.
pub fn body_event_id(body: &[u8]) -> String {
    use sha2::Digest;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(body)))
}

/// A GitHub delivery: the headers GitHub sends, signed with `secret`.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub delivery_id: String,
    pub event: String,
    pub body: Bytes,
}

impl Delivery {
    /// A delivery of `body`. GitHub does not sign `X-GitHub-Delivery`, so the gateway's event id (the dedupe key)
    /// is the body's SHA-256 ([`body_event_id`]); the delivery id is that same value here, so `delivery_id` is the
    /// event id the consumer sees. Two deliveries with the same body are one event.
    pub fn new(body: impl Into<Bytes>) -> Self {
        let body = body.into();
        Self { delivery_id: body_event_id(&body), event: "push".to_owned(), body }
    }

    pub fn signature(&self, secret: &str) -> String {
        hookline_signature::github::sign(secret.as_bytes(), &self.body)
    }

    /// The request GitHub would send to the `github` source of the gateway at `gateway`, carrying `signature` as
    /// its `X-Hub-Signature-256`.
    pub fn request(
        &self,
        gateway: std::net::SocketAddr,
        signature: &str,
    ) -> http::Request<http_body_util::Full<Bytes>> {
        http::Request::post(format!("http://{gateway}/webhooks/github"))
            .header("content-type", "application/json")
            .header("x-github-delivery", &self.delivery_id)
            .header("x-github-event", &self.event)
            .header("x-hub-signature-256", signature)
            .body(http_body_util::Full::new(self.body.clone()))
            .expect("request")
    }
}

/// The metadata the gateway gives a GitHub `push` event with this id (secret `primary`, JSON, a fixed receive
/// time): for records a test produces straight into the inbound topic.
pub fn push_meta(event_id: &str) -> hookline_common::wire::EventMeta {
    hookline_common::wire::EventMeta {
        source: "github".into(),
        event_id: event_id.into(),
        event_type: Some("push".into()),
        received_at_ms: 1_700_000_000_000,
        content_type: Some("application/json".into()),
        secret_id: "primary".into(),
        ordering_key: None,
    }
}

//! Every way a webhook request can end other than "accepted", and the one mapping from each to its HTTP status,
//! machine-readable code and `Retry-After`. Nothing else in the gateway picks a status code.
//!
//! The rule: the sender's mistake is a 4xx and changes nothing; our own trouble (broker slow or down, too busy)
//! is a 503 with `Retry-After`, so the provider retries; never a 2xx for anything the broker has not acknowledged.

use bytes::Bytes;
use hookline_common::http::Body;
use hookline_signature::VerifyError;
use http::{HeaderValue, Response, StatusCode, header};

use crate::produce::ProduceError;

#[derive(Debug, thiserror::Error)]
pub enum Rejection {
    #[error("no route for this path")]
    NotFound,
    #[error("unknown source")]
    UnknownSource,
    #[error("only POST is accepted")]
    MethodNotAllowed,
    #[error("body is larger than this source accepts ({limit_bytes} bytes)")]
    BodyTooLarge { limit_bytes: usize },
    #[error("the body did not arrive in time")]
    BodyTimeout,
    #[error("the body could not be read")]
    BodyRead(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("{0}")]
    Verify(#[source] VerifyError),
    #[error("the request carries no event id where this source expects one")]
    MissingEventId,
    #[error("the gateway is at its concurrency limit")]
    Overloaded,
    #[error("the gateway holds as many request bodies as it may")]
    BodyBufferFull,
    #[error("the gateway has as many requests in progress as it may")]
    TooManyRequestsInProgress,
    #[error("this source's signature verifications are at their limit")]
    VerifyBusy,
    #[error("this client address sends faster than the gateway's limit for one address")]
    PeerRateLimited,
    /// A verified request of a source past its quota (`rate_per_s`, `burst`): `retry_after_s` until its next turn.
    #[error("this source sends faster than its quota; retry later")]
    QuotaExceeded { retry_after_s: u64 },
    #[error("the broker did not acknowledge the event")]
    Produce(#[source] ProduceError),
    /// The provider's key (or its subscription confirmation URL) cannot be fetched now: our trouble, never a 401.
    /// `after_miss`: the request named a key not held and got none (charged to its address like a failed
    /// verification, see `crate::key_fetch::KeyUnavailable`).
    #[error("the provider's key could not be fetched; retry later")]
    KeyUnavailable { retry_after_s: u64, after_miss: bool },
}

impl Rejection {
    pub fn status(&self) -> StatusCode {
        match self {
            Self::NotFound | Self::UnknownSource => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::PeerRateLimited | Self::QuotaExceeded { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::BodyTooLarge { .. } | Self::Verify(VerifyError::FormTooLarge { .. }) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::BodyRead(_) => StatusCode::BAD_REQUEST,
            Self::Verify(VerifyError::MalformedSignature(_)) | Self::MissingEventId => StatusCode::BAD_REQUEST,
            Self::Verify(VerifyError::UnsupportedContentType(_)) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::Verify(
                VerifyError::MissingSignature(_)
                | VerifyError::Mismatch
                | VerifyError::TimestampStale { .. }
                | VerifyError::TimestampFuture { .. }
                | VerifyError::MissingTimestamp(_)
                | VerifyError::KeyUrlNotPinned(_)
                | VerifyError::CertificateUntrusted
                | VerifyError::NotConfirmed,
            ) => StatusCode::UNAUTHORIZED,
            Self::Verify(VerifyError::KeyNotFetched) | Self::KeyUnavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::Overloaded
            | Self::BodyBufferFull
            | Self::TooManyRequestsInProgress
            | Self::VerifyBusy
            | Self::Produce(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// Stable machine-readable code, also the `outcome` metric label.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound => "not_found",
            Self::UnknownSource => "unknown_source",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::BodyTooLarge { .. } => "body_too_large",
            Self::BodyTimeout => "body_timeout",
            Self::BodyRead(_) => "body_unreadable",
            Self::Verify(error) => error.reason(),
            Self::MissingEventId => "event_id_missing",
            Self::Overloaded => "overloaded",
            Self::BodyBufferFull => "body_buffer_full",
            Self::TooManyRequestsInProgress => "too_many_requests_in_progress",
            Self::VerifyBusy => "verify_busy",
            Self::PeerRateLimited => "rate_limited",
            Self::QuotaExceeded { .. } => "quota_exceeded",
            Self::Produce(ProduceError::QueueFull) => "broker_queue_full",
            Self::Produce(_) => "broker_unavailable",
            Self::KeyUnavailable { .. } => "key_unavailable",
        }
    }

    /// Every value [`Self::code`] can return (the `outcome` label's values besides the metrics' own).
    pub fn codes() -> Vec<&'static str> {
        // A new variant fails to compile here until it is listed in `each` too.
        let listed = |rejection: &Self| match rejection {
            Self::NotFound
            | Self::UnknownSource
            | Self::MethodNotAllowed
            | Self::BodyTooLarge { .. }
            | Self::BodyTimeout
            | Self::BodyRead(_)
            | Self::Verify(_)
            | Self::MissingEventId
            | Self::Overloaded
            | Self::BodyBufferFull
            | Self::TooManyRequestsInProgress
            | Self::VerifyBusy
            | Self::PeerRateLimited
            | Self::QuotaExceeded { .. }
            | Self::Produce(_)
            | Self::KeyUnavailable { .. } => rejection.code(),
        };
        let each = [
            Self::NotFound,
            Self::UnknownSource,
            Self::MethodNotAllowed,
            Self::BodyTooLarge { limit_bytes: 0 },
            Self::BodyTimeout,
            Self::BodyRead("unreadable".into()),
            Self::MissingEventId,
            Self::Overloaded,
            Self::BodyBufferFull,
            Self::TooManyRequestsInProgress,
            Self::VerifyBusy,
            Self::PeerRateLimited,
            Self::QuotaExceeded { retry_after_s: 1 },
            Self::Produce(ProduceError::QueueFull),
            Self::Produce(ProduceError::Timeout),
            Self::KeyUnavailable { retry_after_s: 1, after_miss: false },
        ];
        let mut codes: Vec<&'static str> = each.iter().map(listed).collect();
        codes.extend(VerifyError::reasons());
        codes
    }

    /// Whether the client address is charged [`crate::peer_limit::FAILED_VERIFICATION_TURNS`] turns for it: a
    /// failed verification, and a request that named a key not held and got none (it cost, or would have cost, an
    /// outbound fetch: so one address cannot spend a source's miss budget at the rate a valid sender may send).
    pub fn charges_peer(&self) -> bool {
        matches!(self, Self::Verify(_) | Self::KeyUnavailable { after_miss: true, .. })
    }

    /// Whether the sender should retry later: then `Retry-After` is set.
    fn is_retryable(&self) -> bool {
        matches!(self.status(), StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS)
    }

    /// The JSON error response. The message never carries a secret, a signature or the body.
    pub fn into_response(&self, retry_after_s: u64) -> Response<Body> {
        let body = serde_json::json!({ "error": { "code": self.code(), "message": self.to_string() } });
        let mut response = json_response(self.status(), &body);
        if self.is_retryable() {
            let retry_after_s = match self {
                Self::KeyUnavailable { retry_after_s, .. } | Self::QuotaExceeded { retry_after_s } => *retry_after_s,
                _ => retry_after_s,
            };
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(retry_after_s));
        }
        if matches!(self, Self::MethodNotAllowed) {
            response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST"));
        }
        response
    }
}

pub fn json_response(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    let mut response = Response::new(Body::new(Bytes::from(value.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// Errors that stop the gateway from starting or running.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("configuration")]
    Config(#[from] hookline_common::config::ConfigError),
    #[error("cannot create the Kafka producer")]
    Kafka(#[from] rdkafka::error::KafkaError),
    #[error("cannot register metrics")]
    Metrics(#[from] prometheus::Error),
    #[error("the Kafka producer hit a fatal error and must be restarted: {0}")]
    ProducerFatal(String),
    #[error("cannot build the key fetcher")]
    KeyFetch(#[from] KeyFetchBuildError),
}

/// Why the key fetcher cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum KeyFetchBuildError {
    /// The test-only trust roots do not parse.
    #[error("{0}")]
    Roots(String),
    #[error("a fixed address for {host} must be loopback, not {addr}")]
    NotLoopback { host: String, addr: std::net::SocketAddr },
    #[error("{0}")]
    Tls(#[source] rustls::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_trouble_is_503_with_retry_after_and_theirs_is_4xx_without() {
        let ours = Rejection::Produce(ProduceError::Timeout);
        let response = ours.into_response(7);
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers().get(header::RETRY_AFTER).map(|v| v.as_bytes()), Some(&b"7"[..]));

        let theirs = Rejection::Verify(VerifyError::Mismatch);
        let response = theirs.into_response(7);
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert!(response.headers().get(header::RETRY_AFTER).is_none());
    }

    #[test]
    fn each_verification_failure_has_its_status_and_code() {
        let cases = [
            (VerifyError::MalformedSignature("h".into()), StatusCode::BAD_REQUEST, "signature_malformed"),
            (VerifyError::MissingSignature("h".into()), StatusCode::UNAUTHORIZED, "signature_missing"),
            (VerifyError::Mismatch, StatusCode::UNAUTHORIZED, "signature_mismatch"),
            (VerifyError::TimestampStale { skew_ms: -1 }, StatusCode::UNAUTHORIZED, "timestamp_stale"),
            (VerifyError::TimestampFuture { skew_ms: 1 }, StatusCode::UNAUTHORIZED, "timestamp_future"),
            (VerifyError::MissingTimestamp("t"), StatusCode::UNAUTHORIZED, "timestamp_missing"),
            (VerifyError::UnsupportedContentType("x"), StatusCode::UNSUPPORTED_MEDIA_TYPE, "content_type_unsupported"),
            (
                VerifyError::FormTooLarge { max_bytes: 1, max_params: 1 },
                StatusCode::PAYLOAD_TOO_LARGE,
                "form_too_large",
            ),
            (VerifyError::KeyUrlNotPinned("u"), StatusCode::UNAUTHORIZED, "key_url_not_pinned"),
            (VerifyError::CertificateUntrusted, StatusCode::UNAUTHORIZED, "certificate_untrusted"),
        ];
        for (error, status, code) in cases {
            let rejection = Rejection::Verify(error);
            assert_eq!((rejection.status(), rejection.code()), (status, code));
        }
        assert_eq!(Rejection::MissingEventId.status(), StatusCode::BAD_REQUEST);
        assert_eq!(Rejection::UnknownSource.status(), StatusCode::NOT_FOUND);
        assert_eq!(Rejection::MethodNotAllowed.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(Rejection::BodyTooLarge { limit_bytes: 1 }.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(Rejection::Overloaded.status(), StatusCode::SERVICE_UNAVAILABLE);
        let unavailable = Rejection::KeyUnavailable { retry_after_s: 9, after_miss: false }.into_response(1);
        assert_eq!(unavailable.status(), StatusCode::SERVICE_UNAVAILABLE, "a key we cannot fetch is never a 401");
        assert_eq!(unavailable.headers().get(header::RETRY_AFTER).map(|v| v.as_bytes()), Some(&b"9"[..]));
    }

    #[test]
    fn a_client_over_its_rate_gets_429_with_retry_after() {
        let response = Rejection::PeerRateLimited.into_response(3);
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers().get(header::RETRY_AFTER).map(|v| v.as_bytes()), Some(&b"3"[..]));
        assert_eq!(Rejection::PeerRateLimited.code(), "rate_limited");
    }

    #[tokio::test]
    async fn a_source_over_its_quota_gets_429_with_its_own_retry_after_and_a_json_error() {
        use http_body_util::BodyExt;
        let rejection = Rejection::QuotaExceeded { retry_after_s: 7 };
        assert!(!rejection.charges_peer(), "the address did nothing wrong: the source is over its quota");
        let response = rejection.into_response(3);
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers().get(header::RETRY_AFTER).map(|v| v.as_bytes()), Some(&b"7"[..]));
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(body["error"]["code"], "quota_exceeded");
    }

    #[tokio::test]
    async fn error_bodies_are_small_json_with_a_stable_code_and_no_detail() {
        use http_body_util::BodyExt;
        let response = Rejection::Verify(VerifyError::Mismatch).into_response(5);
        assert_eq!(response.headers().get(header::CONTENT_TYPE).map(|v| v.as_bytes()), Some(&b"application/json"[..]));
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(body["error"]["code"], "signature_mismatch");
        assert_eq!(body["error"].as_object().map(|o| o.len()), Some(2));
    }

    /// P6: a request that named a key not held and got none is charged like a failed verification; one naming a
    /// key known to be failing (a provider retrying through an outage) is not.
    #[test]
    fn a_miss_that_ended_unavailable_is_charged_like_a_failed_verification() {
        assert!(Rejection::Verify(VerifyError::Mismatch).charges_peer());
        assert!(Rejection::KeyUnavailable { retry_after_s: 1, after_miss: true }.charges_peer());
        assert!(!Rejection::KeyUnavailable { retry_after_s: 1, after_miss: false }.charges_peer());
        assert!(!Rejection::Overloaded.charges_peer());
    }
}

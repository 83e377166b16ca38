//! The `http` handler: POSTs the raw body, with the event's metadata as headers, to an internal URL.
//!
//! Classification: 2xx is success; 408, 429, 5xx, timeouts and connection errors are retryable (a
//! `Retry-After` in seconds is honoured); any other status is poison: the downstream said the event itself is
//! wrong, and retrying would not change its mind.

use std::time::Duration;

use bytes::Bytes;
use hookline_common::wire::InboundEvent;
use http::{HeaderValue, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full};
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};

use super::{BoxFuture, Handler, HandlerError};

/// Request headers carrying the event's metadata to the downstream service.
pub mod header_name {
    pub const SOURCE: &str = "x-hookline-source";
    pub const EVENT_ID: &str = "x-hookline-event-id";
    pub const EVENT_TYPE: &str = "x-hookline-event-type";
    pub const RECEIVED_AT_MS: &str = "x-hookline-received-at-ms";
    pub const REPLAY_OF: &str = "x-hookline-replay-of";
}

/// How much of an error response body is kept in the error message.
const ERROR_BODY_BYTES: usize = 256;

#[derive(Debug, Clone)]
pub struct HttpHandler {
    url: Uri,
    timeout: Duration,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl HttpHandler {
    /// `url` must be `http://` (plain HTTP to an internal service; TLS is not built in).
    pub fn new(url: &str, timeout: Duration) -> Result<Self, String> {
        let url: Uri = url.parse().map_err(|error| format!("handler url `{url}`: {error}"))?;
        if url.scheme_str() != Some("http") || url.host().is_none() {
            return Err(format!("handler url `{url}` must be an http:// URL with a host"));
        }
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(timeout));
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(Self { url, timeout, client })
    }

    fn request(&self, event: &InboundEvent) -> Result<Request<Full<Bytes>>, HandlerError> {
        let mut request = Request::post(self.url.clone())
            .header(header::CONTENT_TYPE, event.meta.content_type.as_deref().unwrap_or("application/octet-stream"))
            .header(header_name::SOURCE, &event.meta.source)
            .header(header_name::EVENT_ID, &event.meta.event_id)
            .header(header_name::RECEIVED_AT_MS, event.meta.received_at_ms.to_string());
        if let Some(event_type) = &event.meta.event_type {
            request = request.header(header_name::EVENT_TYPE, event_type);
        }
        if let Some(replay_of) = &event.replay_of {
            request = request.header(header_name::REPLAY_OF, replay_of);
        }
        request
            .body(Full::new(event.body.clone()))
            .map_err(|error| HandlerError::poison(format!("event metadata cannot be sent as HTTP headers: {error}")))
    }
}

impl Handler for HttpHandler {
    fn name(&self) -> &str {
        "http"
    }

    fn handle<'a>(&'a self, event: &'a InboundEvent) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            let request = self.request(event)?;
            let response = match tokio::time::timeout(self.timeout, self.client.request(request)).await {
                Err(_) => return Err(HandlerError::retryable(format!("POST {} timed out", self.url))),
                Ok(Err(error)) => return Err(HandlerError::retryable(format!("POST {} failed: {error}", self.url))),
                Ok(Ok(response)) => response,
            };
            let status = response.status();
            if status.is_success() {
                return Ok(());
            }
            let retry_after = response.headers().get(header::RETRY_AFTER).and_then(parse_retry_after);
            let body = tokio::time::timeout(self.timeout, response.into_body().collect())
                .await
                .ok()
                .and_then(Result::ok)
                .map(|collected| collected.to_bytes())
                .unwrap_or_default();
            let snippet = String::from_utf8_lossy(&body[..body.len().min(ERROR_BODY_BYTES)]).into_owned();
            let message = format!("POST {} answered {status}: {snippet}", self.url);
            Err(classify(status, message, retry_after))
        })
    }
}

fn classify(status: StatusCode, message: String, retry_after: Option<Duration>) -> HandlerError {
    let retryable = status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error()
        // 1xx/3xx are not an answer we can act on; a retry may reach a healthy instance.
        || status.is_informational()
        || status.is_redirection();
    if retryable { HandlerError::Retryable { message, retry_after } } else { HandlerError::Poison(message) }
}

/// `Retry-After` as delay-seconds (an HTTP date is not honoured: internal services send seconds).
fn parse_retry_after(value: &HeaderValue) -> Option<Duration> {
    value.to_str().ok()?.trim().parse::<u64>().ok().map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_classified_as_the_issue_says() {
        for retryable in [408, 429, 500, 502, 503, 504] {
            let status = StatusCode::from_u16(retryable).unwrap();
            assert!(matches!(classify(status, String::new(), None), HandlerError::Retryable { .. }), "{retryable}");
        }
        for poison in [400, 401, 403, 404, 409, 410, 422] {
            let status = StatusCode::from_u16(poison).unwrap();
            assert!(matches!(classify(status, String::new(), None), HandlerError::Poison(_)), "{poison}");
        }
    }

    #[test]
    fn retry_after_seconds_are_read() {
        assert_eq!(parse_retry_after(&HeaderValue::from_static("7")), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after(&HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT")), None);
    }

    #[test]
    fn only_plain_http_urls_are_accepted() {
        assert!(HttpHandler::new("http://127.0.0.1:9000/hooks", Duration::from_secs(1)).is_ok());
        assert!(HttpHandler::new("https://example.invalid/hooks", Duration::from_secs(1)).is_err());
        assert!(HttpHandler::new("not a url", Duration::from_secs(1)).is_err());
    }
}

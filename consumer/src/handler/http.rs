//! The `http` handler: POSTs the raw body, with the event's metadata as headers, to the downstream service, over
//! `https://` (the Mozilla roots or a CA file, optionally a client certificate; HTTP/2 when the downstream offers
//! it through ALPN) or, in-cluster, plain `http://`. One pooled client per route: connections are reused.
//!
//! Each forward can be verified by the downstream: it is signed per Standard Webhooks ([`forward_signing`]:
//! `webhook-id` = the event id, a fresh `webhook-timestamp` and `webhook-signature` on every attempt), carries
//! `Idempotency-Key: <event id>` (the same for every attempt, replay and re-processing run of the event), an
//! optional `Authorization` from a secret, and the allowlisted provider headers the record carries
//! (`forward_headers`).
//!
//! Classification: 2xx is success; 408, 429, 5xx, timeouts and connection errors are retryable (a
//! `Retry-After` in seconds is honoured); any other status is poison: the downstream said the event itself is
//! wrong, and retrying would not change its mind. A 401 from a downstream that refuses the signature is poison
//! too: the event lands in the DLQ, alerted, and is replayed once the route's secret is fixed.
//!
//! A response body is read within the same `timeout_ms` as the response head, and never past
//! [`MAX_RESPONSE_BODY_BYTES`]: its first [`ERROR_BODY_BYTES`] go into the error message, the rest is only
//! counted; a longer body is abandoned (its connection closed) rather than read.

use std::{path::Path, time::Duration};

use bytes::Bytes;
use hookline_common::{
    config::redact,
    http_client::{self, ClientIdentity, ClientOptions, HttpsClient},
    telemetry::traces,
    wire::{self, InboundEvent},
};
use http::{HeaderName, HeaderValue, Request, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full};
use tokio::time::{Instant, timeout_at};

use super::{
    BoxFuture, Handler, HandlerError,
    forward_signing::{self, SigningKeys},
};
use crate::config::HandlerConfig;

/// Request headers carrying the event's metadata to the downstream service.
pub mod header_name {
    pub const SOURCE: &str = "x-hookline-source";
    pub const EVENT_ID: &str = "x-hookline-event-id";
    pub const EVENT_TYPE: &str = "x-hookline-event-type";
    pub const RECEIVED_AT_MS: &str = "x-hookline-received-at-ms";
    pub const REPLAY_OF: &str = "x-hookline-replay-of";
    /// Set on a re-processing run's forward: the run id. `Idempotency-Key` stays the event id, so a downstream
    /// that wants a deliberate re-run to take effect keys on (event id, run id).
    pub const REPROCESS_ID: &str = "x-hookline-reprocess-id";
    /// The event id, the same on every attempt, replay and re-processing run of the event.
    pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
}

/// How much of an error response body is kept in the error message.
pub const ERROR_BODY_BYTES: usize = 256;

/// The most of a response body (error or success) that is read; past it the response is dropped and its
/// connection closed. Success bodies are read (and discarded) so that their connection can be reused.
pub const MAX_RESPONSE_BODY_BYTES: usize = 16 * 1024;

#[derive(Debug, Clone)]
pub struct HttpHandler {
    url: Uri,
    /// `url` without a password it may carry: what error messages and logs show.
    shown_url: String,
    timeout: Duration,
    client: HttpsClient,
    signing: Option<std::sync::Arc<SigningKeys>>,
    /// Marked sensitive: never printed.
    authorization: Option<HeaderValue>,
    forward_headers: Vec<HeaderName>,
}

/// Why an `http` handler cannot be built from its configuration.
#[derive(Debug, thiserror::Error)]
pub enum HttpConfigError {
    #[error("an `http` handler needs `url`")]
    NoUrl,
    /// The URL is refused (shown without its password).
    #[error("handler url `{shown_url}` {source}")]
    Url {
        shown_url: String,
        #[source]
        source: http_client::UrlError,
    },
    /// Every other problem found (secrets, certificates, headers, the client), each one line, said joined by `; `.
    #[error("{}", .0.join("; "))]
    Problems(Vec<String>),
}

impl HttpHandler {
    /// Builds the handler of one route (or of `[handler]`): checks the URL, reads the secrets and certificates,
    /// and builds the route's client. Every problem is reported, joined.
    pub fn from_config(config: &HandlerConfig, timeout: Duration, config_dir: &Path) -> Result<Self, HttpConfigError> {
        let mut problems = Vec::new();
        let url = config.url.as_deref().ok_or(HttpConfigError::NoUrl)?;
        let shown_url = redact::url_password(url);
        let url = http_client::check_url(url)
            .map_err(|source| HttpConfigError::Url { shown_url: shown_url.to_string(), source })?;
        let https = url.scheme_str() == Some("https");
        if !https && (config.ca_file.is_some() || config.client_certificate.is_some() || config.client_key.is_some()) {
            problems
                .push(format!("ca_file, client_certificate and client_key need an https:// url, not `{shown_url}`"));
        }
        let identity = match (&config.client_certificate, &config.client_key) {
            (None, None) => None,
            (Some(certificate), Some(key)) => match key.load() {
                Ok(pem) => ClientIdentity::from_pem(&config_dir.join(certificate), &key.id, &pem)
                    .map_err(|error| problems.push(error_chain(&error)))
                    .ok(),
                Err(problem) => {
                    problems.push(problem.to_string());
                    None
                }
            },
            _ => {
                problems.push("client_certificate and client_key go together".to_owned());
                None
            }
        };
        let signing = if config.signing_secrets.is_empty() {
            None
        } else {
            SigningKeys::load(&config.signing_secrets, wire::now_ms())
                .map_err(|found| problems.extend(found))
                .ok()
                .map(std::sync::Arc::new)
        };
        let authorization = match &config.authorization {
            None => None,
            Some(secret) => match secret.load() {
                Ok(value) => match HeaderValue::from_bytes(&value) {
                    Ok(mut value) => {
                        value.set_sensitive(true);
                        Some(value)
                    }
                    Err(_) => {
                        problems.push(format!("authorization secret `{}` is not a valid header value", secret.id));
                        None
                    }
                },
                Err(problem) => {
                    problems.push(problem.to_string());
                    None
                }
            },
        };
        let mut forward_headers = Vec::new();
        for name in &config.forward_headers {
            match HeaderName::from_bytes(name.as_bytes()) {
                Ok(header) if is_reserved(header.as_str()) => problems.push(format!(
                    "forward_headers: `{name}` is set by the handler itself (or is hop-by-hop) and cannot be forwarded"
                )),
                Ok(header) => forward_headers.push(header),
                Err(_) => problems.push(format!("forward_headers: `{name}` is not a valid header name")),
            }
        }
        let ca_file = config.ca_file.as_ref().map(|path| config_dir.join(path));
        let client = http_client::client_with(ClientOptions {
            extra_roots: ca_file.as_deref(),
            identity,
            offer_http2: true,
            connect_timeout: Some(timeout),
        })
        .map_err(|error| problems.push(error_chain(&error)))
        .ok();
        let client = match client {
            Some(client) if problems.is_empty() => client,
            _ => return Err(HttpConfigError::Problems(problems)),
        };
        if signing.is_none() {
            tracing::warn!(
                url = %shown_url,
                "http handler without signing_secrets: the downstream cannot tell hookline's forwards from anyone else's"
            );
        }
        if !https && authorization.is_some() {
            tracing::warn!(url = %shown_url, "http handler sends its authorization secret over plain http://");
        }
        Ok(Self { url, shown_url, timeout, client, signing, authorization, forward_headers })
    }

    fn request(&self, event: &InboundEvent, now_ms: i64) -> Result<Request<Full<Bytes>>, HandlerError> {
        let mut request = Request::post(self.url.clone())
            .header(header::CONTENT_TYPE, event.meta.content_type.as_deref().unwrap_or("application/octet-stream"))
            .header(header_name::SOURCE, &event.meta.source)
            .header(header_name::EVENT_ID, &event.meta.event_id)
            .header(header_name::IDEMPOTENCY_KEY, &event.meta.event_id)
            .header(header_name::RECEIVED_AT_MS, event.meta.received_at_ms.to_string());
        if let Some(event_type) = &event.meta.event_type {
            request = request.header(header_name::EVENT_TYPE, event_type);
        }
        if let Some(replay_of) = &event.replay_of {
            request = request.header(header_name::REPLAY_OF, replay_of);
        }
        if let Some(reprocess_id) = &event.reprocess_id {
            request = request.header(header_name::REPROCESS_ID, reprocess_id);
        }
        if let Some(signing) = &self.signing {
            let timestamp_s = now_ms.div_euclid(1000);
            let signature = signing
                .signature(&event.meta.event_id, timestamp_s, &event.body, now_ms)
                .map_err(|error| HandlerError::retryable(error.to_string()))?;
            request = request
                .header(forward_signing::header_name::ID, &event.meta.event_id)
                .header(forward_signing::header_name::TIMESTAMP, timestamp_s.to_string())
                .header(forward_signing::header_name::SIGNATURE, signature);
        }
        if let Some(authorization) = &self.authorization {
            request = request.header(header::AUTHORIZATION, authorization.clone());
        }
        for (name, value) in &event.forwarded_headers {
            let Some(allowed) = self.forward_headers.iter().find(|allowed| allowed.as_str() == name) else { continue };
            // The gateway took the value from a valid request header; one that is not is left out, not fatal.
            if let Ok(value) = HeaderValue::from_bytes(value) {
                request = request.header(allowed, value);
            }
        }
        // With traces on, the downstream joins the trace: the context of this call's span (never a provider's
        // forwarded `traceparent`, which this replaces).
        if let Some(span_context) = traces::current_span_context() {
            if let (Some(headers), Ok(value)) =
                (request.headers_mut(), HeaderValue::from_str(&traces::format_traceparent(&span_context)))
            {
                headers.insert(traces::http_traceparent().clone(), value);
            }
        }
        request
            .body(Full::new(event.body.clone()))
            .map_err(|error| HandlerError::poison(format!("event metadata cannot be sent as HTTP headers: {error}")))
    }
}

/// Header names the allowlist may not name: the ones the handler sets, and hop-by-hop ones.
fn is_reserved(name: &str) -> bool {
    const EXACT: &[&str] = &[
        "host",
        "content-type",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "authorization",
        "proxy-authorization",
        header_name::IDEMPOTENCY_KEY,
        forward_signing::header_name::ID,
        forward_signing::header_name::TIMESTAMP,
        forward_signing::header_name::SIGNATURE,
    ];
    EXACT.contains(&name) || name.starts_with("x-hookline-") || name.starts_with("proxy-")
}

/// An error and its causes, one line: what a config problem shows.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        text.push_str(&format!(": {inner}"));
        cause = inner.source();
    }
    text
}

/// What was read of a response body.
#[derive(Debug, Default)]
struct BodyPrefix {
    /// The first [`ERROR_BODY_BYTES`].
    kept: Vec<u8>,
    /// Why reading stopped before the end, if it did.
    stopped: Option<&'static str>,
}

/// Reads `body` until its end, [`MAX_RESPONSE_BODY_BYTES`] or `deadline`, whichever comes first, keeping only
/// its first [`ERROR_BODY_BYTES`]: an endless or huge body costs a bounded read.
async fn read_bounded(mut body: hyper::body::Incoming, deadline: Instant) -> BodyPrefix {
    let mut prefix = BodyPrefix::default();
    let mut n_read = 0_usize;
    loop {
        match timeout_at(deadline, body.frame()).await {
            Err(_) => prefix.stopped = Some("timed out"),
            Ok(None) => {}
            Ok(Some(Err(_))) => prefix.stopped = Some("failed"),
            Ok(Some(Ok(frame))) => {
                let Ok(data) = frame.into_data() else { continue };
                let room = ERROR_BODY_BYTES.saturating_sub(prefix.kept.len());
                prefix.kept.extend_from_slice(&data[..data.len().min(room)]);
                n_read = n_read.saturating_add(data.len());
                if n_read > MAX_RESPONSE_BODY_BYTES {
                    prefix.stopped = Some("too long");
                } else {
                    continue;
                }
            }
        }
        return prefix;
    }
}

impl Handler for HttpHandler {
    fn name(&self) -> &str {
        "http"
    }

    fn handle<'a>(&'a self, event: &'a InboundEvent) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            // One deadline for the whole exchange: connect, TLS, request, response head and body.
            let deadline = Instant::now() + self.timeout;
            let request = self.request(event, wire::now_ms())?;
            let url = &self.shown_url;
            let response = match timeout_at(deadline, self.client.request(request)).await {
                Err(_) => return Err(HandlerError::retryable(format!("POST {url} timed out"))),
                Ok(Err(error)) => {
                    return Err(HandlerError::retryable(format!("POST {url} failed: {}", error_chain(&error))));
                }
                Ok(Ok(response)) => response,
            };
            let status = response.status();
            let retry_after = response.headers().get(header::RETRY_AFTER).and_then(parse_retry_after);
            let body = read_bounded(response.into_body(), deadline).await;
            if status.is_success() {
                return Ok(());
            }
            let snippet = String::from_utf8_lossy(&body.kept);
            let message = match body.stopped {
                None => format!("POST {url} answered {status}: {snippet}"),
                Some(why) => format!("POST {url} answered {status}: {snippet}... (body read {why})"),
            };
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

    fn build(config: HandlerConfig) -> Result<HttpHandler, String> {
        HttpHandler::from_config(&config, Duration::from_secs(1), Path::new("/nonexistent"))
            .map_err(|error| error.to_string())
    }

    fn http(url: &str) -> HandlerConfig {
        HandlerConfig { kind: "http".into(), url: Some(url.into()), ..HandlerConfig::default() }
    }

    #[test]
    fn http_and_https_urls_are_accepted_and_others_refused() {
        assert!(build(http("http://127.0.0.1:9000/hooks")).is_ok());
        assert!(build(http("https://billing.internal/hooks")).is_ok());
        for bad in ["not a url", "ftp://example.com/x", "https://"] {
            assert!(build(http(bad)).is_err(), "{bad}");
        }
        assert!(build(HandlerConfig { url: None, ..http("") }).is_err());
    }

    #[test]
    fn tls_settings_and_header_allowlist_problems_are_all_reported() {
        use hookline_common::config::SecretRef;
        let config = HandlerConfig {
            ca_file: Some("ca.pem".into()),
            client_certificate: Some("client.pem".into()),
            forward_headers: vec![
                "X-GitHub-Event".into(),
                "Idempotency-Key".into(),
                "webhook-signature".into(),
                "X-Hookline-Source".into(),
                "bad header".into(),
            ],
            authorization: Some(SecretRef::from_env("auth", "HOOKLINE_TEST_UNSET_AUTHORIZATION")),
            ..http("http://127.0.0.1:9000/hooks")
        };
        let problems = build(config).unwrap_err();
        for expected in [
            "need an https:// url",
            "go together",
            "`Idempotency-Key` is set by the handler",
            "`webhook-signature` is set by the handler",
            "`X-Hookline-Source` is set by the handler",
            "`bad header` is not a valid header name",
            "HOOKLINE_TEST_UNSET_AUTHORIZATION is not set",
        ] {
            assert!(problems.contains(expected), "{expected}: {problems}");
        }
        assert!(!problems.contains("X-GitHub-Event"), "{problems}");
    }
}

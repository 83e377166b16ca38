//! Calls to a provider's API: one client per source, paced to the source's `requests_per_s`, honouring
//! `Retry-After` (and GitHub's rate-limit reset) up to `max_retry_after_s`, and classifying every failure once:
//! credentials refused, rate limited for too long, the provider failing, or (for a `POST`) an uncertain outcome.
//!
//! The credential goes only to the configured API origin: a pagination link to anywhere else is refused.

use std::{
    sync::Arc,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use bytes::Bytes;
use hookline_common::http_client::{self, HttpsClient};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use tokio::sync::Mutex;

use crate::{error::ReconcileError, metrics::Metrics};

/// Each attempt's bound.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Attempts of one call that failed retryably (rate limits within the wait budget, 5xx, network errors on reads).
const MAX_ATTEMPTS: u32 = 5;
/// A provider's answer is read up to this size (a page of 100 Stripe events is a few MiB at most); a larger one
/// is an error, never buffered whole.
const MAX_RESPONSE_BYTES: usize = 32 << 20;

/// An answer from the provider with a 2xx status.
#[derive(Debug)]
pub struct ApiResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

#[derive(Debug)]
pub struct ApiClient {
    source: String,
    client: HttpsClient,
    base: String,
    headers: HeaderMap,
    pace: Mutex<Instant>,
    interval: Duration,
    max_retry_after: Duration,
    metrics: Arc<Metrics>,
}

impl ApiClient {
    /// `headers` are sent with every call (the credential among them, marked sensitive).
    pub fn new(
        source: &str,
        base: &str,
        headers: HeaderMap,
        ca_file: Option<&std::path::Path>,
        requests_per_s: f64,
        max_retry_after: Duration,
        metrics: Arc<Metrics>,
    ) -> Result<Self, ReconcileError> {
        let client = http_client::client(ca_file)
            .map_err(|error| ReconcileError::Setup { source_name: source.to_owned(), error: error.to_string() })?;
        Ok(Self {
            source: source.to_owned(),
            client,
            base: base.trim_end_matches('/').to_owned(),
            headers,
            pace: Mutex::new(Instant::now()),
            interval: Duration::from_secs_f64(1.0 / requests_per_s),
            max_retry_after,
            metrics,
        })
    }

    /// The absolute URL of `path_or_url`: a path is joined to the base; a full URL must be on the base's origin.
    pub fn url(&self, path_or_url: &str) -> Result<String, ReconcileError> {
        if path_or_url.starts_with('/') {
            return Ok(format!("{}{path_or_url}", self.base));
        }
        let same_origin = path_or_url
            .strip_prefix(&self.base)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/') || rest.starts_with('?'));
        if same_origin {
            Ok(path_or_url.to_owned())
        } else {
            Err(ReconcileError::Provider {
                source_name: self.source.clone(),
                error: "a pagination link points outside the configured api_url; not followed".to_owned(),
            })
        }
    }

    pub async fn get(&self, path_or_url: &str) -> Result<ApiResponse, ReconcileError> {
        self.call(Method::GET, path_or_url, None).await
    }

    /// A `POST` that asks the provider to act. A network failure after the request may have been sent is
    /// [`ReconcileError::Uncertain`], never retried here: the caller records it and does not ask again.
    pub async fn post(&self, path: &str, body: Option<Bytes>) -> Result<ApiResponse, ReconcileError> {
        self.call(Method::POST, path, body).await
    }

    async fn call(
        &self,
        method: Method,
        path_or_url: &str,
        body: Option<Bytes>,
    ) -> Result<ApiResponse, ReconcileError> {
        let url = self.url(path_or_url)?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            self.wait_turn().await;
            let mut request = Request::builder().method(method.clone()).uri(&url);
            if let Some(headers) = request.headers_mut() {
                headers.extend(self.headers.clone());
                if body.is_some() {
                    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
                }
            }
            let request = request
                .body(Full::new(body.clone().unwrap_or_default()))
                .map_err(|error| self.provider_error(format!("cannot build the request: {error}")))?;
            let sent = tokio::time::timeout(REQUEST_TIMEOUT, self.client.request(request)).await;
            let response = match sent {
                Ok(Ok(response)) => response,
                Ok(Err(error)) => {
                    self.metrics.api_requests.with_label_values(&[&self.source, "network_error"]).inc();
                    let connect = error.is_connect();
                    if method == Method::POST && !connect {
                        return Err(ReconcileError::Uncertain {
                            source_name: self.source.clone(),
                            error: error.to_string(),
                        });
                    }
                    if attempt >= MAX_ATTEMPTS {
                        return Err(self.provider_error(format!("{method} {}: {error}", redact(&url))));
                    }
                    tokio::time::sleep(backoff(attempt)).await;
                    continue;
                }
                Err(_) => {
                    self.metrics.api_requests.with_label_values(&[&self.source, "timeout"]).inc();
                    if method == Method::POST {
                        return Err(ReconcileError::Uncertain {
                            source_name: self.source.clone(),
                            error: "no answer within 30 s".to_owned(),
                        });
                    }
                    if attempt >= MAX_ATTEMPTS {
                        return Err(self.provider_error(format!("{method} {}: timed out", redact(&url))));
                    }
                    continue;
                }
            };
            let (parts, incoming) = response.into_parts();
            let read = http_body_util::Limited::new(incoming, MAX_RESPONSE_BYTES).collect();
            let body = match tokio::time::timeout(REQUEST_TIMEOUT, read).await {
                Ok(Ok(collected)) => collected.to_bytes(),
                _ if method == Method::POST && parts.status.is_success() => Bytes::new(),
                _ => {
                    if attempt >= MAX_ATTEMPTS {
                        return Err(self.provider_error("the response body did not arrive".to_owned()));
                    }
                    continue;
                }
            };
            let status = parts.status;
            if status.is_success() {
                self.metrics.api_requests.with_label_values(&[&self.source, "ok"]).inc();
                return Ok(ApiResponse { status, headers: parts.headers, body });
            }
            if let Some(wait) = rate_limit_wait(status, &parts.headers) {
                self.metrics.api_requests.with_label_values(&[&self.source, "rate_limited"]).inc();
                if wait > self.max_retry_after || attempt >= MAX_ATTEMPTS {
                    return Err(ReconcileError::RateLimited { source_name: self.source.clone(), retry_after: wait });
                }
                tracing::info!(source = %self.source, wait_ms = wait.as_millis() as u64, "rate limited; waiting as told");
                tokio::time::sleep(wait).await;
                continue;
            }
            if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
                self.metrics.api_requests.with_label_values(&[&self.source, "refused"]).inc();
                return Err(ReconcileError::CredentialsRefused {
                    source_name: self.source.clone(),
                    status: status.as_u16(),
                    detail: excerpt(&body),
                });
            }
            if status.is_server_error() && attempt < MAX_ATTEMPTS {
                self.metrics.api_requests.with_label_values(&[&self.source, "server_error"]).inc();
                tokio::time::sleep(backoff(attempt)).await;
                continue;
            }
            self.metrics.api_requests.with_label_values(&[&self.source, "error"]).inc();
            return Err(ReconcileError::Status {
                source_name: self.source.clone(),
                request: format!("{method} {}", redact(&url)),
                status: status.as_u16(),
                detail: excerpt(&body),
            });
        }
    }

    /// Paces calls to `requests_per_s`: each call takes the next slot.
    async fn wait_turn(&self) {
        let slot = {
            let mut next = self.pace.lock().await;
            let now = Instant::now();
            let slot = (*next).max(now);
            *next = slot + self.interval;
            slot
        };
        tokio::time::sleep_until(slot.into()).await;
    }

    fn provider_error(&self, error: String) -> ReconcileError {
        ReconcileError::Provider { source_name: self.source.clone(), error }
    }
}

/// The credential cannot be sent as a header value (it holds a control character, a line break...).
#[derive(Debug, thiserror::Error)]
#[error("the credential holds characters a header cannot")]
pub struct CredentialError(#[source] http::header::InvalidHeaderValue);

/// The credential header, marked sensitive so no debug output shows it.
pub fn credential_header(name: HeaderName, value: &str) -> Result<(HeaderName, HeaderValue), CredentialError> {
    let mut value = HeaderValue::from_str(value).map_err(CredentialError)?;
    value.set_sensitive(true);
    Ok((name, value))
}

/// How long a refusal asks us to wait, if it is a rate limit: `429`, or `403`/`503` with `Retry-After`, or
/// GitHub's `403` with `x-ratelimit-remaining: 0` (wait until `x-ratelimit-reset`, seconds since the epoch).
fn rate_limit_wait(status: StatusCode, headers: &HeaderMap) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|value| value.to_str().ok()).map(str::trim);
    let retry_after = text("retry-after").and_then(|value| value.parse::<u64>().ok()).map(Duration::from_secs);
    let reset = (text("x-ratelimit-remaining") == Some("0"))
        .then(|| text("x-ratelimit-reset").and_then(|value| value.parse::<u64>().ok()))
        .flatten()
        .map(|reset_s| {
            let now_s = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
            Duration::from_secs(reset_s.saturating_sub(now_s) + 1)
        });
    match status {
        StatusCode::TOO_MANY_REQUESTS => Some(retry_after.or(reset).unwrap_or(Duration::from_secs(1))),
        StatusCode::FORBIDDEN | StatusCode::SERVICE_UNAVAILABLE => retry_after.or(reset),
        _ => None,
    }
}

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(200 * 2_u64.pow(attempt.min(6)))
}

/// The first 200 characters of an error body, on one line: enough to tell what the provider said.
fn excerpt(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(200)]).replace(['\n', '\r'], " ")
}

/// A URL without its query string (which can name customers).
fn redact(url: &str) -> &str {
    url.split('?').next().unwrap_or(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limits_are_read_from_retry_after_or_the_reset_time() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", HeaderValue::from_static("7"));
        assert_eq!(rate_limit_wait(StatusCode::TOO_MANY_REQUESTS, &headers), Some(Duration::from_secs(7)));
        assert_eq!(rate_limit_wait(StatusCode::FORBIDDEN, &headers), Some(Duration::from_secs(7)));
        assert_eq!(rate_limit_wait(StatusCode::BAD_REQUEST, &headers), None);
        let mut github = HeaderMap::new();
        github.insert("x-ratelimit-remaining", HeaderValue::from_static("0"));
        let reset = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() + 30;
        github.insert(
            "x-ratelimit-reset",
            HeaderValue::from_str(&reset.to_string()).unwrap_or(HeaderValue::from_static("0")),
        );
        let wait = rate_limit_wait(StatusCode::FORBIDDEN, &github).unwrap_or_default();
        assert!((Duration::from_secs(29)..=Duration::from_secs(32)).contains(&wait), "{wait:?}");
        // A plain 403 is refused credentials, not a rate limit.
        assert_eq!(rate_limit_wait(StatusCode::FORBIDDEN, &HeaderMap::new()), None);
    }
}

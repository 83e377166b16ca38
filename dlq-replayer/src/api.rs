//! The HTTP admin API: the CLI's operations with the same semantics, under `/v1/`, behind a bearer token
//! (compared in constant time; wrong ones go through the console login's throttle, per address, and are counted
//! and logged). `/livez`, `/readyz` and `/metrics` stay open for probes and Prometheus.
//!
//! - `GET  /v1/entries?source=&service=&event_type=&error_class=&status=&since=&until=&text=&cursor=&limit=` —
//!   one page (`{"entries": [...], "next_cursor": "...", "total_matching": n}`), in stable (partition, offset) order;
//!   `limit` defaults to 100 (at most 1000); pass `next_cursor` back as `cursor` for the next page
//! - `GET  /v1/stats?<same filter>` — counts by source, service, error class and status
//! - `GET  /v1/entries/{id}` — one entry with every header and its body (text, or base64), read from Kafka
//! - `POST /v1/replay`  body: `{"ids": [...]}` or `{"all": true, "filter": {...}}`, plus `dry_run`, `rate`,
//!   `force`, `past_retention`, `as_event_type`, `by`
//! - `POST /v1/reprocess` body: `{"service": "...", "from": "<RFC 3339>", "to": "<RFC 3339>"}` and/or
//!   `"event_ids": [...]`, plus `source`, `apply` (without it a dry run), `rate_per_s`, `by` — re-drives already
//!   processed events of the inbound topic to that one service; answers the run id and the records
//! - `GET  /v1/events/{source}/{event id}` — where that event is: per service its dedupe state, a waiting retry,
//!   its dead letters with their replay outcomes, and when and where it was accepted ([`crate::lookup`]);
//!   404 with the same answer (`"found": false`) for an event hookline knows nothing of
//! - `GET  /v1/events?source=&type=&since=&until=&where=&where=&limit=&max_records=&max_seconds=` — event search
//!   ([`crate::events`]): the matches with their positions, accepted times and each service's state, the counts
//!   (records read, MAC refusals by reason) and what a bound left unread
//! - `GET  /v1/rejections?source=` — every configured gateway's recent rejections (`[gateways]`), merged per
//!   source newest first, each entry naming its gateway; gateways that did not answer are listed in `unreachable`
//! - `POST /v1/discard` body: `{"ids": [...]}` or `{"all": true, "filter": {...}}`, plus `reason`, `dry_run`,
//!   `by`
//! - `POST /v1/pause`, `POST /v1/resume` body: `{"service": "...", "route": "...", "reason": "...", "by": "..."}` —
//!   pauses or resumes one route of one consumer service (the control topic; every instance obeys within
//!   seconds); `GET /v1/pauses` — the routes paused now, with who, why and since when
//!
//! Every answer but the rejections' comes from the replayer's index, which a background tail keeps current; a write is visible in
//! the next read once the call returns.

use std::{sync::Arc, time::Instant};

use bytes::Bytes;
use hookline_common::http::{Body, PeerAddr, Readiness, admin_response};
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use prometheus::Registry;
use secrecy::{ExposeSecret, SecretSlice};
use serde::Serialize;

use crate::{
    filter::Filter,
    lookup::Lookup,
    metrics::Metrics,
    ops::{DiscardRequest, OpError, PauseRequest, ReplayRequest, Replayer, ReprocessRequest},
    rejections::Gatherer,
    session::Console,
};

const MAX_REQUEST_BYTES: usize = 1024 * 1024;

#[derive(Debug)]
pub struct Api {
    pub replayer: Replayer,
    pub token: SecretSlice<u8>,
    pub registry: Registry,
    pub readiness: Arc<Readiness>,
    pub metrics: Metrics,
    pub console: Console,
    /// Gathers the gateways' recent rejections (`GET /v1/rejections`, the console's Rejections page).
    pub rejections: Gatherer,
    /// Answers "where is event X?" (`GET /v1/events/...`, the console's search box).
    pub lookup: Lookup,
}

impl Api {
    pub async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Response<Body> {
        let path = request.uri().path().to_owned();
        if !path.starts_with("/v1/") {
            return admin_response(&request, &self.registry, &self.readiness);
        }
        // Wrong tokens go through the console login's throttle: an address that keeps guessing is refused for a
        // while without its token being looked at, counted and logged.
        let peer = request.extensions().get::<PeerAddr>().map(|peer| peer.0.ip());
        if !self.console.logins.admits(peer, Instant::now()) {
            let mut response = error(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_wrong_tokens",
                "too many wrong tokens from this address",
            );
            response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("300"));
            return response;
        }
        if !self.authorized(request.headers()) {
            self.console.logins.failed("api", peer, Instant::now());
            self.metrics.auth_failures.with_label_values(&["api"]).inc();
            let mut response = error(StatusCode::UNAUTHORIZED, "unauthorized", "a valid bearer token is required");
            response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
            return response;
        }
        let method = request.method().clone();
        let query = request.uri().query().unwrap_or("").to_owned();
        let result = match (method, path.as_str()) {
            (Method::GET, "/v1/entries") => match parse_query(&query) {
                Ok(ListQuery { filter, cursor, limit }) => self
                    .replayer
                    .page(&filter, cursor.as_deref(), limit.unwrap_or(DEFAULT_PAGE))
                    .await
                    .map(|page| json(StatusCode::OK, &page)),
                Err(problem) => Err(OpError::BadRequest(problem)),
            },
            (Method::GET, "/v1/stats") => match parse_query(&query) {
                Ok(ListQuery { filter, cursor: None, limit: None }) => {
                    self.replayer.stats(&filter).await.map(|stats| json(StatusCode::OK, &stats))
                }
                Ok(_) => Err(OpError::BadRequest("stats take no cursor or limit".to_owned())),
                Err(problem) => Err(OpError::BadRequest(problem)),
            },
            (Method::GET, "/v1/rejections") => match rejections_query(&query) {
                Ok(source) => Ok(json(StatusCode::OK, &self.rejections.gather(source.as_deref()).await)),
                Err(problem) => Err(OpError::BadRequest(problem)),
            },
            (Method::GET, "/v1/events") => match crate::events::SearchRequest::from_query(&query) {
                Ok(search) => {
                    self.replayer.search_events(&search, |_| {}).await.map(|report| json(StatusCode::OK, &report))
                }
                Err(problem) => Err(OpError::BadRequest(problem)),
            },
            (Method::GET, path) if path.starts_with("/v1/events/") => {
                match path["/v1/events/".len()..].split_once('/') {
                    Some((source, event_id)) => {
                        let (source, event_id) = (decode_path_segment(source), decode_path_segment(event_id));
                        self.lookup.lookup(&source, &event_id).await.map(|answer| {
                            json(if answer.found { StatusCode::OK } else { StatusCode::NOT_FOUND }, &answer)
                        })
                    }
                    None => Err(OpError::BadRequest("the path is /v1/events/{source}/{event id}".to_owned())),
                }
            }
            (Method::GET, path) if path.starts_with("/v1/entries/") => {
                let id = decode_path_segment(&path["/v1/entries/".len()..]);
                self.replayer.show(&id).await.map(|detail| match detail {
                    Some(detail) => json(StatusCode::OK, &detail),
                    None => error(StatusCode::NOT_FOUND, "no_such_entry", &format!("no entry `{id}`")),
                })
            }
            (Method::POST, "/v1/replay") => match read_json::<ReplayRequest>(request).await {
                Ok(mut replay) => {
                    if replay.by.is_empty() {
                        replay.by = "api".to_owned();
                    }
                    self.replayer.replay(&replay).await.map(|report| {
                        if !report.dry_run {
                            self.metrics.replays.inc_by(report.done.len() as u64);
                        }
                        json(StatusCode::OK, &report)
                    })
                }
                Err(response) => return response,
            },
            (Method::POST, "/v1/reprocess") => match read_json::<ReprocessRequest>(request).await {
                Ok(mut reprocess) => {
                    if reprocess.by.is_empty() {
                        reprocess.by = "api".to_owned();
                    }
                    self.replayer.reprocess(&reprocess).await.map(|report| json(StatusCode::OK, &report))
                }
                Err(response) => return response,
            },
            (Method::POST, "/v1/discard") => match read_json::<DiscardRequest>(request).await {
                Ok(mut discard) => {
                    if discard.by.is_empty() {
                        discard.by = "api".to_owned();
                    }
                    self.replayer.discard(&discard).await.map(|report| {
                        self.metrics.discards.inc_by(report.done.len() as u64);
                        json(StatusCode::OK, &report)
                    })
                }
                Err(response) => return response,
            },
            (Method::GET, "/v1/pauses") => self.replayer.pauses().await.map(|pauses| json(StatusCode::OK, &pauses)),
            (Method::POST, action @ ("/v1/pause" | "/v1/resume")) => match read_json::<PauseRequest>(request).await {
                Ok(mut pause) => {
                    if pause.by.is_empty() {
                        pause.by = "api".to_owned();
                    }
                    let written = if action == "/v1/pause" {
                        self.replayer.pause(&pause).await
                    } else {
                        self.replayer.resume(&pause).await
                    };
                    written.map(|state| json(StatusCode::OK, &state))
                }
                Err(response) => return response,
            },
            _ => Ok(error(StatusCode::NOT_FOUND, "not_found", "no such API route")),
        };
        result.unwrap_or_else(|op_error| match op_error {
            OpError::BadRequest(problem) => error(StatusCode::BAD_REQUEST, "bad_request", &problem),
            OpError::NotReady => {
                let mut response =
                    error(StatusCode::SERVICE_UNAVAILABLE, "not_ready", "the dead-letter index is still being built");
                response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
                response
            }
            OpError::Redis(redis_error) => {
                tracing::warn!(error = %redis_error, "lookup could not read Redis");
                error(StatusCode::SERVICE_UNAVAILABLE, "redis_unavailable", "Redis could not be read")
            }
            other => {
                tracing::warn!(error = %other, cause = ?std::error::Error::source(&other), "admin API operation failed");
                error(StatusCode::SERVICE_UNAVAILABLE, "kafka_unavailable", "Kafka could not be read or written")
            }
        })
    }

    fn authorized(&self, headers: &HeaderMap) -> bool {
        // The scheme name is case-insensitive (RFC 9110): `bearer` and `BEARER` are accepted too.
        self.token_matches(hookline_common::http::bearer_token(headers).unwrap_or(""))
    }

    /// Whether `presented` is the API token (constant-time); the console's login form checks the same token.
    pub fn token_matches(&self, presented: &str) -> bool {
        hookline_common::http::token_matches(presented, self.token.expose_secret())
    }
}

async fn read_json<T: serde::de::DeserializeOwned>(request: Request<Incoming>) -> Result<T, Response<Body>> {
    let read = Limited::new(request.into_body(), MAX_REQUEST_BYTES).collect();
    let body = tokio::time::timeout(hookline_common::http::BODY_READ_TIMEOUT, read)
        .await
        .map_err(|_| error(StatusCode::REQUEST_TIMEOUT, "body_timeout", "the request body did not arrive in time"))?
        .map_err(|_| error(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", "request body too large or unreadable"))?
        .to_bytes();
    serde_json::from_slice(&body).map_err(|problem| error(StatusCode::BAD_REQUEST, "bad_request", &problem.to_string()))
}

const DEFAULT_PAGE: usize = 100;
const MAX_PAGE: usize = 1000;

/// A listing's filter and page.
#[derive(Debug, Default)]
pub struct ListQuery {
    pub filter: Filter,
    pub cursor: Option<String>,
    pub limit: Option<usize>,
}

/// The filter from query parameters named like its fields, plus `cursor` and `limit`.
pub fn parse_query(query: &str) -> Result<ListQuery, String> {
    let mut list = ListQuery::default();
    let filter = &mut list.filter;
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        let value = Some(value.into_owned());
        match key.as_ref() {
            "source" => filter.source = value,
            "service" => filter.service = value,
            "event_type" => filter.event_type = value,
            "error_class" => filter.error_class = value,
            "status" => filter.status = value,
            "since" => filter.since = value,
            "until" => filter.until = value,
            "text" => filter.text = value,
            "cursor" => list.cursor = value,
            "limit" => {
                let limit =
                    value.as_deref().and_then(|v| v.parse::<usize>().ok()).filter(|n| (1..=MAX_PAGE).contains(n));
                list.limit = Some(limit.ok_or_else(|| format!("limit must be a number from 1 to {MAX_PAGE}"))?);
            }
            other => return Err(format!("unknown query parameter `{other}`")),
        }
    }
    Ok(list)
}

/// The `source` of `GET /v1/rejections?source=<name>` (and of the console's page), the only parameter it takes.
pub fn rejections_query(query: &str) -> Result<Option<String>, String> {
    let mut source = None;
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        match key.as_ref() {
            "source" if !value.is_empty() => source = Some(value.into_owned()),
            "source" => {}
            other => return Err(format!("unknown query parameter `{other}`")),
        }
    }
    Ok(source)
}

/// A path segment with its `%XX` escapes decoded (a `+` stays a `+` in a path).
pub fn decode_path_segment(text: &str) -> String {
    percent_encoding::percent_decode_str(text).decode_utf8_lossy().into_owned()
}

fn json<T: Serialize>(status: StatusCode, value: &T) -> Response<Body> {
    let body = serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec());
    let mut response = Response::new(Body::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    response
}

fn error(status: StatusCode, code: &str, message: &str) -> Response<Body> {
    json(status, &serde_json::json!({ "error": { "code": code, "message": message } }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_and_path_decoding() {
        assert_eq!(decode_path_segment("webhooks.dlq%3A0%3A5"), "webhooks.dlq:0:5");
        assert_eq!(decode_path_segment("a+b%20c"), "a+b c");
        assert_eq!(decode_path_segment("100%"), "100%");
        assert_eq!(decode_path_segment("%zz"), "%zz");
        let filter =
            parse_query("source=github&service=billing&status=new&text=time%20out+now&limit=5").unwrap().filter;
        assert_eq!(filter.source.as_deref(), Some("github"));
        assert_eq!(filter.service.as_deref(), Some("billing"));
        assert_eq!(filter.text.as_deref(), Some("time out now"));
        assert!(parse_query("colour=red").is_err());
        assert!(parse_query("limit=0").is_err() && parse_query("limit=1001").is_err());
    }
}

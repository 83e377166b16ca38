//! The HTTP admin API: the CLI's operations with the same semantics, under `/v1/`, behind a bearer token: a scoped
//! API token ([`crate::identity::tokens`]) or the shared demo token, each compared in constant time and always
//! accepted when right; wrong ones go through the console login's throttle, per address, and are counted and
//! logged. Each route needs a scope ([`required_scope`]): `read` to list, show, search and look up (and read the
//! audit trail), `operate` to replay, discard, pause, resume and reprocess, `admin` for the tokens; a token without
//! it gets 403 and changes nothing. Every mutating action is recorded under the token's subject (`token:<name>`):
//! a `by` in the body is ignored. `/livez`, `/readyz` and `/metrics` stay open for probes and Prometheus.
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
//! - `GET  /v1/audit?who=&what=&since=&limit=` — the audit trail, newest first ([`crate::identity::audit`])
//! - `GET  /v1/tokens`, `POST /v1/tokens` body `{"name": "...", "scope": "read|operate|admin"}` (201, the token
//!   shown this once), `DELETE /v1/tokens/{id or name}` — the API tokens (admin)
//!
//! Every answer but the rejections' comes from the replayer's index, which a background tail keeps current; a write is visible in
//! the next read once the call returns.

use std::{sync::Arc, time::Instant};

use axum::{
    Extension, Router,
    body::Body,
    extract::{RawQuery, Request, State},
    handler::Handler,
    http::Uri,
    middleware::Next,
    response::Response,
    routing::{MethodRouter, delete, get, post},
};
use hookline_common::http::{PeerAddr, Readiness};
use http::{Method, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use prometheus::Registry;
use secrecy::{ExposeSecret, SecretSlice};
use serde::Serialize;

use crate::{
    filter::Filter,
    identity::{
        Principal, SHARED_TOKEN_SUBJECT, Scope,
        audit::AuditQuery,
        tokens::{LiveTokens, TokenInfo},
    },
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
    /// The shared demo token, when configured.
    pub token: Option<SecretSlice<u8>>,
    /// The scoped API tokens, kept current by a thread tailing their topic.
    pub tokens: Arc<LiveTokens>,
    /// The console's single sign-on, when `[oidc]` is configured.
    pub oidc: Option<crate::identity::oidc::OidcClient>,
    pub registry: Registry,
    pub readiness: Arc<Readiness>,
    pub metrics: Metrics,
    pub console: Console,
    /// Gathers the gateways' recent rejections (`GET /v1/rejections`, the console's Rejections page).
    pub rejections: Gatherer,
    /// Answers "where is event X?" (`GET /v1/events/...`, the console's search box).
    pub lookup: Lookup,
    /// The flow of the last hour (the console's overview), sampled in the background by `serve`.
    pub flow: Arc<crate::flow::Flow>,
}

/// What a presented token is.
pub(crate) enum Authenticated {
    As(Principal),
    /// Not a token we know, but the tokens topic has not been read to its end yet: it may be one.
    NotYet,
    Nobody,
}

impl Api {
    /// Who `presented` is: a scoped token's principal, the shared token's, or nobody. Both comparisons are
    /// constant-time; the console's login form checks the same tokens.
    pub(crate) fn authenticate(&self, presented: &str) -> Authenticated {
        if let Some(principal) = self.tokens.authenticate(presented) {
            return Authenticated::As(principal);
        }
        let shared = self
            .token
            .as_ref()
            .is_some_and(|token| hookline_common::http::token_matches(presented, token.expose_secret()));
        if shared {
            return Authenticated::As(Principal { subject: SHARED_TOKEN_SUBJECT.to_owned(), scope: Scope::Admin });
        }
        // Only a token of the scoped tokens' shape may be one not read yet; anything else is nobody at once.
        if self.tokens.is_caught_up() || crate::identity::tokens::id_of(presented).is_none() {
            Authenticated::Nobody
        } else {
            Authenticated::NotYet
        }
    }
}

/// The scope a `/v1/` request needs: `admin` for the tokens, `read` for every other `GET`, `operate` for the rest.
pub(crate) fn required_scope(method: &Method, path: &str) -> Scope {
    if path == "/v1/tokens" || path.starts_with("/v1/tokens/") {
        Scope::Admin
    } else if method == Method::GET {
        Scope::Read
    } else {
        Scope::Operate
    }
}

/// The `/v1/` routes. A path that is not one of them, or a method a path does not take, is a JSON 404, as before the
/// router (no 405): [`guard`] runs first for every `/v1/` path, so an unknown one still needs the token.
pub(crate) fn routes() -> Router<Arc<Api>> {
    Router::new()
        .route("/v1/entries", only_get(list_entries))
        .route("/v1/stats", only_get(stats))
        .route("/v1/rejections", only_get(rejections))
        .route("/v1/events", only_get(search_events))
        // The event id may hold a `/`: the rest of the path after the source is the id, as the CLI's lookup takes it.
        .route("/v1/events/", only_get(lookup_event))
        .route("/v1/events/{*source_and_id}", only_get(lookup_event))
        .route("/v1/entries/", only_get(show_entry))
        .route("/v1/entries/{*id}", only_get(show_entry))
        .route("/v1/pauses", only_get(pauses))
        .route("/v1/replay", only_post(replay))
        .route("/v1/reprocess", only_post(reprocess))
        .route("/v1/discard", only_post(discard))
        .route("/v1/pause", only_post(pause))
        .route("/v1/resume", only_post(resume))
        .route("/v1/audit", only_get(audit))
        .route("/v1/tokens", get(list_tokens).post(create_token).head(not_found).fallback(not_found))
        .route("/v1/tokens/{*id}", delete(revoke_token).fallback(not_found))
}

/// `GET` only; `HEAD` and every other method fall to [`not_found`] (axum would answer `HEAD` like `GET`).
fn only_get<H: Handler<T, Arc<Api>>, T: 'static>(handler: H) -> MethodRouter<Arc<Api>> {
    get(handler).head(not_found).fallback(not_found)
}

fn only_post<H: Handler<T, Arc<Api>>, T: 'static>(handler: H) -> MethodRouter<Arc<Api>> {
    post(handler).fallback(not_found)
}

/// The answer for a `/v1/` path or method that does not exist.
pub(crate) async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "not_found", "no such API route")
}

/// The bearer token check in front of every `/v1/` path (other paths pass untouched): who the caller is, and whether
/// its scope allows the route; the [`Principal`] goes on to the handler as an extension. A right token always
/// passes; wrong ones go through the console login's throttle: counted, logged, and answered 429 once an address
/// keeps guessing.
pub(crate) async fn guard(State(api): State<Arc<Api>>, mut request: Request, next: Next) -> Response {
    if !request.uri().path().starts_with("/v1/") {
        return next.run(request).await;
    }
    let peer = request.extensions().get::<PeerAddr>().map(|peer| peer.0.ip());
    let presented = hookline_common::http::bearer_token(request.headers()).unwrap_or("");
    let principal = match api.authenticate(presented) {
        Authenticated::As(principal) => principal,
        Authenticated::NotYet => {
            let mut response =
                error(StatusCode::SERVICE_UNAVAILABLE, "not_ready", "the API tokens are still being read");
            response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            return response;
        }
        Authenticated::Nobody => return refused(&api, peer),
    };
    let needed = required_scope(request.method(), request.uri().path());
    if !principal.scope.allows(needed) {
        tracing::warn!(subject = %principal.subject, scope = principal.scope.as_str(), needed = needed.as_str(), path = request.uri().path(), "API request refused: scope too narrow");
        return error(
            StatusCode::FORBIDDEN,
            "forbidden",
            &format!(
                "this needs the `{}` scope; `{}` has `{}`",
                needed.as_str(),
                principal.subject,
                principal.scope.as_str()
            ),
        );
    }
    request.extensions_mut().insert(principal);
    next.run(request).await
}

fn refused(api: &Api, peer: Option<std::net::IpAddr>) -> Response {
    api.metrics.auth_failures.with_label_values(&["api"]).inc();
    if api.console.logins.failed("api", peer, Instant::now()) {
        let mut response =
            error(StatusCode::TOO_MANY_REQUESTS, "too_many_wrong_tokens", "too many wrong tokens from this address");
        response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("300"));
        return response;
    }
    let mut response = error(StatusCode::UNAUTHORIZED, "unauthorized", "a valid bearer token is required");
    response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
    response
}

/// The verified caller, as [`guard`] left it.
type Caller = Extension<Principal>;

type ApiState = State<Arc<Api>>;

async fn list_entries(State(api): ApiState, RawQuery(query): RawQuery) -> Response {
    match parse_query(query.as_deref().unwrap_or("")) {
        Ok(ListQuery { filter, cursor, limit }) => {
            answer(api.replayer.page(&filter, cursor.as_deref(), limit.unwrap_or(DEFAULT_PAGE)).await, |page| {
                json(StatusCode::OK, &page)
            })
        }
        Err(problem) => op_error(OpError::BadRequest(problem.to_string())),
    }
}

async fn stats(State(api): ApiState, RawQuery(query): RawQuery) -> Response {
    match parse_query(query.as_deref().unwrap_or("")) {
        Ok(ListQuery { filter, cursor: None, limit: None }) => {
            answer(api.replayer.stats(&filter).await, |stats| json(StatusCode::OK, &stats))
        }
        Ok(_) => op_error(OpError::BadRequest("stats take no cursor or limit".to_owned())),
        Err(problem) => op_error(OpError::BadRequest(problem.to_string())),
    }
}

async fn rejections(State(api): ApiState, RawQuery(query): RawQuery) -> Response {
    match rejections_query(query.as_deref().unwrap_or("")) {
        Ok(source) => json(StatusCode::OK, &api.rejections.gather(source.as_deref()).await),
        Err(problem) => op_error(OpError::BadRequest(problem.to_string())),
    }
}

async fn search_events(State(api): ApiState, RawQuery(query): RawQuery) -> Response {
    match crate::events::SearchRequest::from_query(query.as_deref().unwrap_or("")) {
        Ok(search) => answer(api.replayer.search_events(&search, |_| {}).await, |report| json(StatusCode::OK, &report)),
        Err(problem) => op_error(OpError::BadRequest(problem.to_string())),
    }
}

/// `GET /v1/events/{source}/{event id}`, split on the raw path's first `/` and then decoded (an encoded `%2F` stays
/// part of its segment).
async fn lookup_event(State(api): ApiState, uri: Uri) -> Response {
    let rest = uri.path().strip_prefix("/v1/events/").unwrap_or("");
    let Some((source, event_id)) = rest.split_once('/') else {
        return op_error(OpError::BadRequest("the path is /v1/events/{source}/{event id}".to_owned()));
    };
    let (source, event_id) = (decode_path_segment(source), decode_path_segment(event_id));
    answer(api.lookup.lookup(&source, &event_id).await, |answer| {
        json(if answer.found { StatusCode::OK } else { StatusCode::NOT_FOUND }, &answer)
    })
}

async fn show_entry(State(api): ApiState, uri: Uri) -> Response {
    let id = decode_path_segment(uri.path().strip_prefix("/v1/entries/").unwrap_or(""));
    answer(api.replayer.show(&id).await, |detail| match detail {
        Some(detail) => json(StatusCode::OK, &detail),
        None => error(StatusCode::NOT_FOUND, "no_such_entry", &format!("no entry `{id}`")),
    })
}

async fn pauses(State(api): ApiState) -> Response {
    answer(api.replayer.pauses().await, |pauses| json(StatusCode::OK, &pauses))
}

async fn replay(State(api): ApiState, Extension(caller): Caller, request: Request) -> Response {
    let mut replay = match read_json::<ReplayRequest>(request).await {
        Ok(replay) => replay,
        Err(response) => return response,
    };
    replay.by = caller.subject;
    answer(api.replayer.replay(&replay).await, |report| {
        if !report.dry_run {
            api.metrics.replays.inc_by(report.done.len() as u64);
        }
        json(StatusCode::OK, &report)
    })
}

async fn reprocess(State(api): ApiState, Extension(caller): Caller, request: Request) -> Response {
    let mut reprocess = match read_json::<ReprocessRequest>(request).await {
        Ok(reprocess) => reprocess,
        Err(response) => return response,
    };
    reprocess.by = caller.subject;
    answer(api.replayer.reprocess(&reprocess).await, |report| json(StatusCode::OK, &report))
}

async fn discard(State(api): ApiState, Extension(caller): Caller, request: Request) -> Response {
    let mut discard = match read_json::<DiscardRequest>(request).await {
        Ok(discard) => discard,
        Err(response) => return response,
    };
    discard.by = caller.subject;
    answer(api.replayer.discard(&discard).await, |report| {
        api.metrics.discards.inc_by(report.done.len() as u64);
        json(StatusCode::OK, &report)
    })
}

async fn pause(State(api): ApiState, Extension(caller): Caller, request: Request) -> Response {
    match read_json::<PauseRequest>(request).await {
        Ok(pause) => answer(api.replayer.pause(&as_caller(pause, caller)).await, |state| json(StatusCode::OK, &state)),
        Err(response) => response,
    }
}

async fn resume(State(api): ApiState, Extension(caller): Caller, request: Request) -> Response {
    match read_json::<PauseRequest>(request).await {
        Ok(resume) => {
            answer(api.replayer.resume(&as_caller(resume, caller)).await, |state| json(StatusCode::OK, &state))
        }
        Err(response) => response,
    }
}

/// The request with its `by` replaced by the verified subject.
fn as_caller(mut pause: PauseRequest, caller: Principal) -> PauseRequest {
    pause.by = caller.subject;
    pause
}

async fn audit(State(api): ApiState, RawQuery(query): RawQuery) -> Response {
    match AuditQuery::from_query(query.as_deref().unwrap_or("")) {
        Ok(query) => answer(api.replayer.audit_trail(&query).await, |trail| json(StatusCode::OK, &trail)),
        Err(problem) => op_error(OpError::BadRequest(problem)),
    }
}

async fn list_tokens(State(api): ApiState) -> Response {
    json(StatusCode::OK, &serde_json::json!({ "tokens": api.tokens.book().list() }))
}

/// What `POST /v1/tokens` takes.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NewToken {
    name: String,
    scope: String,
}

async fn create_token(State(api): ApiState, Extension(caller): Caller, request: Request) -> Response {
    let new = match read_json::<NewToken>(request).await {
        Ok(new) => new,
        Err(response) => return response,
    };
    let created = api.replayer.create_token(&api.tokens.book(), &new.name, &new.scope, &caller.subject).await;
    answer(created, |(issued, record)| {
        api.tokens.apply_own(&record);
        json(StatusCode::CREATED, &issued)
    })
}

async fn revoke_token(State(api): ApiState, Extension(caller): Caller, uri: Uri) -> Response {
    let id = decode_path_segment(uri.path().strip_prefix("/v1/tokens/").unwrap_or(""));
    answer(api.replayer.revoke_token(&api.tokens.book(), &id, &caller.subject).await, |revoked| match revoked {
        Some(record) => {
            api.tokens.apply_own(&record);
            json(StatusCode::OK, &TokenInfo::from(&record))
        }
        None => error(StatusCode::NOT_FOUND, "no_such_token", &format!("no token `{id}`")),
    })
}

/// An operation's answer, or its error as the status and JSON every route answers it with.
fn answer<T>(result: Result<T, OpError>, ok: impl FnOnce(T) -> Response) -> Response {
    result.map_or_else(op_error, ok)
}

/// How the API answers a failed operation: one place, so every route says the same.
fn op_error(op_error: OpError) -> Response {
    match op_error {
        OpError::BadRequest(problem) => error(StatusCode::BAD_REQUEST, "bad_request", &problem),
        OpError::NotReady => {
            let mut response =
                error(StatusCode::SERVICE_UNAVAILABLE, "not_ready", "the dead-letter index is still being built");
            response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            response
        }
        OpError::Index(index_error) => {
            tracing::error!(error = %index_error, cause = ?std::error::Error::source(&index_error), "the dead-letter index could not be read");
            error(StatusCode::INTERNAL_SERVER_ERROR, "index_unavailable", "the dead-letter index could not be read")
        }
        OpError::Busy => {
            let mut response = error(StatusCode::TOO_MANY_REQUESTS, "busy", &op_error.to_string());
            response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
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
    }
}

async fn read_json<T: serde::de::DeserializeOwned>(request: Request) -> Result<T, Response> {
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

/// Why a query string is refused (a bad request, said to the caller).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    #[error("unknown query parameter `{0}`")]
    Unknown(String),
    #[error("limit must be a number from 1 to {MAX_PAGE}")]
    Limit,
}

/// The filter from query parameters named like its fields, plus `cursor` and `limit`.
pub fn parse_query(query: &str) -> Result<ListQuery, QueryError> {
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
                list.limit = Some(limit.ok_or(QueryError::Limit)?);
            }
            other => return Err(QueryError::Unknown(other.to_owned())),
        }
    }
    Ok(list)
}

/// The `source` of `GET /v1/rejections?source=<name>` (and of the console's page), the only parameter it takes.
pub fn rejections_query(query: &str) -> Result<Option<String>, QueryError> {
    let mut source = None;
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        match key.as_ref() {
            "source" if !value.is_empty() => source = Some(value.into_owned()),
            "source" => {}
            other => return Err(QueryError::Unknown(other.to_owned())),
        }
    }
    Ok(source)
}

/// A path segment with its `%XX` escapes decoded (a `+` stays a `+` in a path).
pub fn decode_path_segment(text: &str) -> String {
    percent_encoding::percent_decode_str(text).decode_utf8_lossy().into_owned()
}

fn json<T: Serialize>(status: StatusCode, value: &T) -> Response {
    let body = serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec());
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    response
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
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

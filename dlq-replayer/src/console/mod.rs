//! The DLQ console: server-rendered HTML on the admin port, under `/ui/`, behind the API's token.
//!
//! - Login: a form that takes the API token and sets a session cookie (`Secure`, `HttpOnly`, `SameSite=Strict`,
//!   path `/ui`); sessions live in this process's memory for 12 h (a restart logs everyone out).
//! - Every state-changing form is a POST carrying the session's CSRF token (compared in constant time), and is
//!   refused when an `Origin` header names another host; the cookie's `SameSite=Strict` is the second lock.
//! - A strict Content-Security-Policy: nothing but this origin's own stylesheet and script, no inline code, no
//!   frames. Both assets are compiled into the binary; nothing comes from a CDN.
//! - Actions (replay, discard) always go through a dry-run preview that says how many entries they will touch,
//!   then a confirmation; the confirmed action runs in the background and its page shows the report.
//!
//! `pages` renders what a GET shows (overview, entries, one entry, a job); `pauses` the paused routes with their
//! Resume and Pause forms; `rejections` the gateways' recent
//! refusals, gathered from them on request; `lookup` the search box "where is event X?"; `forms` handles what a POST asks
//! (log in, preview an action, run it); this module routes, lays pages out and escapes.
//!
//! Pages read the same index as the JSON API and call the same operations ([`crate::ops`]).

mod forms;
mod login;
mod lookup;
mod pages;
mod pauses;
mod rejections;
mod search;

use std::{fmt::Write as _, sync::Arc, time::Duration};

use bytes::Bytes;
use hookline_common::http::Body;
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;

use self::{
    forms::{field, preview, read_form, run},
    login::{login, login_page},
    lookup::lookup_page,
    pages::{entry_page, job_page, list, overview},
    pauses::{pause_route, pauses_page, resume_route},
    rejections::rejections_page,
    search::search_page,
};
use crate::{
    api::{Api, decode_path_segment},
    filter::Filter,
    index::Entry,
    ops::{OpError, Report},
    session::COOKIE,
};

const CSS: &str = include_str!("../../assets/console.css");
const JS: &str = include_str!("../../assets/console.js");
const ICON: &str = include_str!("../../assets/favicon.svg");
// A hyphen, not an underscore: a `hookline_` name looks like a metric to check-deploy's scan of exported metrics.
const PAGE_SIZE: usize = 50;
const MAX_FORM_BYTES: usize = 4 * 1024 * 1024;
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; \
                   frame-ancestors 'none'; base-uri 'none'";

/// What [`enc`] escapes: everything but RFC 3986's unreserved characters, and `:` (entry ids keep readable).
const URL_COMPONENT: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~').remove(b':');

/// HTML-escapes text for element content and quoted attribute values.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Percent-encodes a query or path value.
fn enc(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, URL_COMPONENT).to_string()
}

fn time(ms: Option<i64>) -> String {
    match ms.and_then(|ms| u64::try_from(ms).ok()) {
        Some(ms) if ms > 0 => {
            humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_millis(ms)).to_string()
        }
        _ => "–".to_owned(),
    }
}

fn with_security_headers(mut response: Response<Body>) -> Response<Body> {
    let headers = response.headers_mut();
    for (name, value) in [
        ("content-security-policy", CSP),
        ("x-content-type-options", "nosniff"),
        // `same-origin`, not `no-referrer`: with `no-referrer` a browser sends `Origin: null` on the console's own form
        // posts, which the origin check refuses.
        ("referrer-policy", "same-origin"),
        ("x-frame-options", "DENY"),
        ("cache-control", "no-store"),
    ] {
        headers.insert(name, header::HeaderValue::from_static(value));
    }
    response
}

fn respond(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(Body::new(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static(content_type));
    with_security_headers(response)
}

fn redirect(location: &str) -> Response<Body> {
    let mut response = respond(StatusCode::SEE_OTHER, "text/plain; charset=utf-8", "");
    if let Ok(value) = header::HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
}

/// The page layout: navigation, a logout form (with the CSRF token), and the content.
fn page(status: StatusCode, title: &str, csrf: Option<&str>, content: &str, refresh: bool) -> Response<Body> {
    let nav = match csrf {
        Some(csrf) => format!(
            r#"<a class="brand" href="/ui/">hookline DLQ</a><a href="/ui/">Overview</a><a href="/ui/entries">Entries</a><a href="/ui/rejections">Rejections</a><a href="/ui/pauses">Routes</a><a href="/ui/events">Find event</a><a href="/ui/search">Search events</a>
<form method="post" action="/ui/logout"><input type="hidden" name="csrf" value="{}"><button type="submit">Log out</button></form>"#,
            esc(csrf)
        ),
        None => r#"<span class="brand">hookline DLQ</span>"#.to_owned(),
    };
    let refresh = if refresh { r#"<meta http-equiv="refresh" content="1">"# } else { "" };
    let html = format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">{refresh}
<title>{} · hookline DLQ</title><link rel="icon" href="/ui/assets/favicon.svg"><link rel="stylesheet" href="/ui/assets/console.css"><script src="/ui/assets/console.js" defer></script></head>
<body><header>{nav}</header><main>
{content}
</main></body></html>"#,
        esc(title)
    );
    respond(status, "text/html; charset=utf-8", html)
}

/// A POST's `Origin`, when present, must be this host (a form posted from another site is refused even before
/// its CSRF token is looked at).
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|value| value.to_str().ok()) else { return true };
    let host = headers.get(header::HOST).and_then(|value| value.to_str().ok()).unwrap_or("");
    let origin_host = origin.split_once("://").map_or(origin, |(_, rest)| rest);
    !host.is_empty() && origin_host == host
}

/// The filter as query parameters (for links) and as hidden form fields (for bulk actions).
fn filter_query(filter: &Filter) -> String {
    filter_pairs(filter).iter().map(|(key, value)| format!("{key}={}", enc(value))).collect::<Vec<_>>().join("&")
}

fn filter_hidden(filter: &Filter) -> String {
    filter_pairs(filter)
        .iter()
        .map(|(key, value)| format!(r#"<input type="hidden" name="{key}" value="{}">"#, esc(value)))
        .collect()
}

fn filter_pairs(filter: &Filter) -> Vec<(&'static str, String)> {
    [
        ("source", &filter.source),
        ("service", &filter.service),
        ("event_type", &filter.event_type),
        ("error_class", &filter.error_class),
        ("status", &filter.status),
        ("since", &filter.since),
        ("until", &filter.until),
        ("text", &filter.text),
    ]
    .into_iter()
    .filter_map(|(key, value)| value.clone().map(|value| (key, value)))
    .collect()
}

fn status_badge(entry: &Entry) -> String {
    let status = entry.status.as_str();
    let flagged = if entry.flagged { r#" <span class="status status-failed_again">flagged</span>"# } else { "" };
    format!(r#"<span class="status status-{status}" data-status="{status}">{status}</span>{flagged}"#)
}

fn problem_page(csrf: &str, status: StatusCode, message: &str) -> Response<Body> {
    page(
        status,
        "Problem",
        Some(csrf),
        &format!(r#"<h1>Cannot do that</h1><p class="problem">{}</p>"#, esc(message)),
        false,
    )
}

/// Serves everything under `/ui`.
pub async fn handle(api: Arc<Api>, request: Request<Incoming>) -> Response<Body> {
    let path = request.uri().path().to_owned();
    let method = request.method().clone();
    match (&method, path.as_str()) {
        (&Method::GET, "/ui/assets/console.css") => return respond(StatusCode::OK, "text/css; charset=utf-8", CSS),
        (&Method::GET, "/ui/assets/console.js") => {
            return respond(StatusCode::OK, "text/javascript; charset=utf-8", JS);
        }
        (&Method::GET, "/ui/assets/favicon.svg") => return respond(StatusCode::OK, "image/svg+xml", ICON),
        (&Method::GET, "/ui/login") => return login_page(StatusCode::OK, None),
        (&Method::POST, "/ui/login") => return login(&api, request).await,
        _ => {}
    }
    let Some(session) = api.console.session(request.headers()) else {
        return if method == Method::GET { redirect("/ui/login") } else { login_page(StatusCode::UNAUTHORIZED, None) };
    };
    if method == Method::POST {
        if !same_origin(request.headers()) {
            return problem_page(&session.csrf, StatusCode::FORBIDDEN, "this form was posted from another site");
        }
        let headers = request.headers().clone();
        let Some(form) = read_form(request, MAX_FORM_BYTES).await else {
            return problem_page(&session.csrf, StatusCode::BAD_REQUEST, "the form could not be read");
        };
        let presented = field(&form, "csrf").unwrap_or("");
        if !hookline_common::http::token_matches(presented, session.csrf.as_bytes()) {
            return problem_page(
                &session.csrf,
                StatusCode::FORBIDDEN,
                "the form's CSRF token is missing or stale: reload the page",
            );
        }
        return match path.as_str() {
            "/ui/logout" => {
                api.console.logout(&headers);
                let mut response = redirect("/ui/login");
                let expired = format!("{COOKIE}=; Path=/ui; Max-Age=0; Secure; HttpOnly; SameSite=Strict");
                if let Ok(value) = header::HeaderValue::from_str(&expired) {
                    response.headers_mut().insert(header::SET_COOKIE, value);
                }
                response
            }
            "/ui/actions/preview" => preview(&api, &session, &form).await,
            "/ui/actions/run" => run(&api, &session, &form).await,
            "/ui/pauses/pause" => pause_route(&api, &session, &form).await,
            "/ui/pauses/resume" => resume_route(&api, &session, &form).await,
            _ => problem_page(&session.csrf, StatusCode::NOT_FOUND, "no such action"),
        };
    }
    if method != Method::GET {
        return problem_page(&session.csrf, StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
    }
    let query = request.uri().query().unwrap_or("").to_owned();
    match path.as_str() {
        "/ui" | "/ui/" => overview(&api, &session).await,
        "/ui/entries" => list(&api, &session, &query).await,
        "/ui/rejections" => rejections_page(&api, &session, &query).await,
        "/ui/events" => lookup_page(&api, &session, &query).await,
        "/ui/search" => search_page(&api, &session, &query).await,
        "/ui/pauses" => pauses_page(&api, &session, None).await,
        other if other.starts_with("/ui/entries/") => {
            entry_page(&api, &session, &decode_path_segment(&other["/ui/entries/".len()..])).await
        }
        other if other.starts_with("/ui/jobs/") => job_page(&api, &session, &other["/ui/jobs/".len()..]),
        _ => problem_page(&session.csrf, StatusCode::NOT_FOUND, "no such page"),
    }
}

fn op_problem(csrf: &str, error: &OpError) -> Response<Body> {
    match error {
        OpError::BadRequest(problem) => problem_page(csrf, StatusCode::BAD_REQUEST, problem),
        OpError::NotReady => {
            problem_page(csrf, StatusCode::SERVICE_UNAVAILABLE, "the index is still being built: reload in a moment")
        }
        OpError::Redis(error) => {
            tracing::warn!(error = %error, "console lookup could not read Redis");
            problem_page(csrf, StatusCode::SERVICE_UNAVAILABLE, "Redis could not be read; try again")
        }
        other => {
            tracing::warn!(error = %other, "console operation failed");
            problem_page(csrf, StatusCode::SERVICE_UNAVAILABLE, "Kafka could not be read or written; try again")
        }
    }
}

fn skipped_list(report: &Report) -> String {
    if report.skipped.is_empty() {
        return String::new();
    }
    let mut out = format!("<h2>Skipped ({})</h2><ul id=\"skipped\">", report.skipped.len());
    for skipped in report.skipped.iter().take(50) {
        let _ = write!(out, "<li><code>{}</code>: {}</li>", esc(&skipped.id), esc(&skipped.reason));
    }
    out.push_str("</ul>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_markup_and_attributes() {
        assert_eq!(
            esc(r#"<script>"x" & 'y'</script>"#),
            "&lt;script&gt;&quot;x&quot; &amp; &#39;y&#39;&lt;/script&gt;"
        );
        assert_eq!(enc("webhooks.dlq:0:5"), "webhooks.dlq:0:5");
        assert_eq!(enc("a b&c"), "a%20b%26c");
    }

    #[test]
    fn cross_site_posts_are_refused() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, "127.0.0.1:9092".parse().unwrap());
        assert!(same_origin(&headers), "no Origin: a same-origin navigation or a non-browser client");
        headers.insert(header::ORIGIN, "http://127.0.0.1:9092".parse().unwrap());
        assert!(same_origin(&headers));
        headers.insert(header::ORIGIN, "https://evil.example".parse().unwrap());
        assert!(!same_origin(&headers));
    }
}

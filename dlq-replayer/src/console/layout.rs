//! The frame every console page shares (navigation, logout form, assets), the headers every console answer
//! carries (CSP and friends), and the fragments several pages use. All markup is `maud`: a value spliced into a
//! template is escaped by construction.

use axum::{body::Body, response::Response};
use bytes::Bytes;
use http::{HeaderMap, StatusCode, header};
use maud::{DOCTYPE, Markup, html};

use crate::{
    filter::Filter,
    index::Entry,
    ops::{OpError, Report},
};

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; \
                   frame-ancestors 'none'; base-uri 'none'";

/// What [`enc`] escapes: everything but RFC 3986's unreserved characters, and `:` (entry ids keep readable).
const URL_COMPONENT: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~').remove(b':');

/// Percent-encodes a query or path value (a URL's part; the template then escapes the attribute it goes in).
pub(super) fn enc(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, URL_COMPONENT).to_string()
}

pub(super) fn time(ms: Option<i64>) -> String {
    match ms {
        Some(ms) if ms > 0 => hookline_common::time::format_rfc3339_seconds(ms),
        _ => "–".to_owned(),
    }
}

fn with_security_headers(mut response: Response) -> Response {
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

pub(super) fn respond(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response {
    let mut response = Response::new(Body::from(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static(content_type));
    with_security_headers(response)
}

pub(super) fn redirect(location: &str) -> Response {
    let mut response = respond(StatusCode::SEE_OTHER, "text/plain; charset=utf-8", "");
    if let Ok(value) = header::HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
}

/// Whether a page reloads itself: every second (a running job's, a meta refresh), or every `every_s` seconds as
/// long as nothing was typed in it (the overview's; by the console's script, so a half-typed form is not lost).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refresh {
    No,
    /// Go to this path of the console at once (a navigation of this origin's own page, so `SameSite=Strict`
    /// cookies set with it are sent).
    GoTo(&'static str),
    EverySecond,
    UnlessEditing {
        every_s: u32,
    },
}

/// The page layout: navigation, a logout form (with the CSRF token), and the content.
pub(super) fn page(status: StatusCode, title: &str, csrf: Option<&str>, content: Markup, refresh: Refresh) -> Response {
    let html = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                @if refresh == Refresh::EverySecond { meta http-equiv="refresh" content="1"; }
                @if let Refresh::GoTo(path) = refresh { meta http-equiv="refresh" content={ "0; url=" (path) }; }
                title { (title) " · hookline DLQ" }
                link rel="icon" href="/ui/assets/favicon.svg";
                link rel="stylesheet" href="/ui/assets/console.css";
                script src="/ui/assets/console.js" defer {}
            }
            body data-refresh-s=[match refresh { Refresh::UnlessEditing { every_s } => Some(every_s), _ => None }] {
                header {
                    @if let Some(csrf) = csrf {
                        a.brand href="/ui/" { "hookline DLQ" }
                        a href="/ui/" { "Overview" }
                        a href="/ui/entries" { "Entries" }
                        a href="/ui/rejections" { "Rejections" }
                        a href="/ui/pauses" { "Routes" }
                        a href="/ui/events" { "Find event" }
                        a href="/ui/search" { "Search events" }
                        a href="/ui/audit" { "Audit" }
                        form method="post" action="/ui/logout" {
                            (csrf_field(csrf))
                            button type="submit" { "Log out" }
                        }
                    } @else {
                        span.brand { "hookline DLQ" }
                    }
                }
                main { (content) }
            }
        }
    };
    respond(status, "text/html; charset=utf-8", html.into_string())
}

/// The hidden field every state-changing form carries.
pub(super) fn csrf_field(csrf: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(csrf); }
}

/// A POST's `Origin`, when present, must be this host (a form posted from another site is refused even before
/// its CSRF token is looked at).
pub(super) fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|value| value.to_str().ok()) else { return true };
    let host = headers.get(header::HOST).and_then(|value| value.to_str().ok()).unwrap_or("");
    let origin_host = origin.split_once("://").map_or(origin, |(_, rest)| rest);
    !host.is_empty() && origin_host == host
}

/// The filter as query parameters (for links).
pub(super) fn filter_query(filter: &Filter) -> String {
    filter_pairs(filter).iter().map(|(key, value)| format!("{key}={}", enc(value))).collect::<Vec<_>>().join("&")
}

/// The filter as hidden form fields (for bulk actions).
pub(super) fn filter_hidden(filter: &Filter) -> Markup {
    html! {
        @for (key, value) in filter_pairs(filter) { input type="hidden" name=(key) value=(value); }
    }
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

pub(super) fn status_badge(entry: &Entry) -> Markup {
    let status = entry.status.as_str();
    html! {
        span class=(format!("status status-{status}")) data-status=(status) { (status) }
        @if entry.flagged { " " span.status.status-failed_again { "flagged" } }
    }
}

pub(super) fn problem_page(csrf: &str, status: StatusCode, message: &str) -> Response {
    let content = html! { h1 { "Cannot do that" } p.problem { (message) } };
    page(status, "Problem", Some(csrf), content, Refresh::No)
}

pub(super) fn op_problem(csrf: &str, error: &OpError) -> Response {
    match error {
        OpError::BadRequest(problem) => problem_page(csrf, StatusCode::BAD_REQUEST, problem),
        OpError::NotReady => {
            problem_page(csrf, StatusCode::SERVICE_UNAVAILABLE, "the index is still being built: reload in a moment")
        }
        OpError::Busy => {
            let mut response = problem_page(csrf, StatusCode::TOO_MANY_REQUESTS, &error.to_string());
            response.headers_mut().insert(header::RETRY_AFTER, http::HeaderValue::from_static("5"));
            response
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

/// The skipped entries of a report (the first 50), headed by `total` (a finished job's list may have been cut).
pub(super) fn skipped_list(report: &Report, total: usize) -> Markup {
    html! {
        @if !report.skipped.is_empty() {
            h2 { "Skipped (" (total) ")" }
            ul #skipped {
                @for skipped in report.skipped.iter().take(50) {
                    li { code { (skipped.id) } ": " (skipped.reason) }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_values_are_percent_encoded_and_entry_ids_stay_readable() {
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

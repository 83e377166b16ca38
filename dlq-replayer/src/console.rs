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
//! Pages read the same index as the JSON API and call the same operations ([`crate::ops`]).

use std::{fmt::Write as _, sync::Arc, time::Duration};

use base64::Engine as _;
use bytes::Bytes;
use hookline_common::{http::Body, wire::now_ms};
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use crate::{
    api::{Api, decode_path_segment, parse_query},
    filter::Filter,
    index::{Entry, Status},
    ops::{DiscardRequest, OpError, ReplayRequest, Report},
    session::{Action, COOKIE, Job, SESSION_TTL, Session},
};

const CSS: &str = include_str!("../assets/console.css");
const JS: &str = include_str!("../assets/console.js");
const ICON: &str = include_str!("../assets/favicon.svg");
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
            r#"<a class="brand" href="/ui/">hookline DLQ</a><a href="/ui/">Overview</a><a href="/ui/entries">Entries</a>
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

type Form = Vec<(String, String)>;

async fn read_form(request: Request<Incoming>) -> Option<Form> {
    let body = Limited::new(request.into_body(), MAX_FORM_BYTES).collect().await.ok()?.to_bytes();
    Some(form_urlencoded::parse(&body).into_owned().collect())
}

fn field<'a>(form: &'a Form, name: &str) -> Option<&'a str> {
    form.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str())
}

fn filter_of(form: &Form) -> Filter {
    let get = |name: &str| field(form, name).filter(|value| !value.is_empty()).map(str::to_owned);
    Filter {
        source: get("source"),
        event_type: get("event_type"),
        error_class: get("error_class"),
        status: get("status"),
        since: get("since"),
        until: get("until"),
        text: get("text"),
    }
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
        let Some(form) = read_form(request).await else {
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
        other if other.starts_with("/ui/entries/") => {
            entry_page(&api, &session, &decode_path_segment(&other["/ui/entries/".len()..])).await
        }
        other if other.starts_with("/ui/jobs/") => job_page(&api, &session, &other["/ui/jobs/".len()..]),
        _ => problem_page(&session.csrf, StatusCode::NOT_FOUND, "no such page"),
    }
}

fn login_page(status: StatusCode, problem: Option<&str>) -> Response<Body> {
    let problem =
        problem.map(|text| format!(r#"<p class="problem" id="login-problem">{}</p>"#, esc(text))).unwrap_or_default();
    let content = format!(
        r#"<div class="login"><h1>Log in</h1>{problem}
<form method="post" action="/ui/login"><label for="token">Replayer API token</label>
<input id="token" name="token" type="password" autocomplete="current-password" required autofocus>
<button class="primary" type="submit">Log in</button></form>
<p class="muted">The token is the replayer's <code>api_token</code>, the same one the JSON API takes.</p></div>"#
    );
    page(status, "Log in", None, &content, false)
}

async fn login(api: &Api, request: Request<Incoming>) -> Response<Body> {
    if !same_origin(request.headers()) {
        return login_page(StatusCode::FORBIDDEN, Some("this form was posted from another site"));
    }
    let Some(form) = read_form(request).await else {
        return login_page(StatusCode::BAD_REQUEST, Some("the form could not be read"));
    };
    if !api.token_matches(field(&form, "token").unwrap_or("")) {
        tracing::warn!("console login with a wrong token");
        return login_page(StatusCode::UNAUTHORIZED, Some("wrong token"));
    }
    let (id, _) = api.console.login();
    let mut response = redirect("/ui/");
    let cookie =
        format!("{COOKIE}={id}; Path=/ui; Max-Age={}; Secure; HttpOnly; SameSite=Strict", SESSION_TTL.as_secs());
    if let Ok(value) = header::HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

fn op_problem(csrf: &str, error: &OpError) -> Response<Body> {
    match error {
        OpError::BadRequest(problem) => problem_page(csrf, StatusCode::BAD_REQUEST, problem),
        OpError::NotReady => {
            problem_page(csrf, StatusCode::SERVICE_UNAVAILABLE, "the index is still being built: reload in a moment")
        }
        other => {
            tracing::warn!(error = %other, "console operation failed");
            problem_page(csrf, StatusCode::SERVICE_UNAVAILABLE, "Kafka could not be read or written; try again")
        }
    }
}

async fn overview(api: &Api, session: &Session) -> Response<Body> {
    let stats = match api.replayer.stats(&Filter::default()).await {
        Ok(stats) => stats,
        Err(error) => return op_problem(&session.csrf, &error),
    };
    let index = match api.replayer.index().await {
        Ok(index) => index,
        Err(error) => return op_problem(&session.csrf, &error),
    };
    let mut content =
        format!("<h1>Overview</h1><p>{} dead-letter entries in all.</p><div class=\"cards\">", stats.total);
    for (title, key, counts) in [
        ("By source", "source", &stats.by_source),
        ("By error class", "error_class", &stats.by_error_class),
        ("By status", "status", &stats.by_status),
    ] {
        let _ = write!(content, r#"<div class="card"><h2>{title}</h2><table id="by-{key}">"#);
        for (name, count) in counts {
            let _ = write!(
                content,
                r#"<tr><td><a href="/ui/entries?{key}={}">{}</a></td><td class="num">{count}</td></tr>"#,
                enc(name),
                esc(name)
            );
        }
        content.push_str("</table></div>");
    }
    content.push_str("</div>");
    // Dead letters per hour over the last 24 hours, stacked by source.
    let hour = 3_600_000_i64;
    let now = now_ms();
    let since = (now / hour - 23) * hour;
    let series = index.histogram(since, hour, 24);
    content.push_str("<h2>Dead letters per hour, last 24 hours</h2>");
    content.push_str(&chart(&series, since, hour));
    page(StatusCode::OK, "Overview", Some(&session.csrf), &content, false)
}

/// A stacked bar chart as inline SVG (presentation attributes only: the CSP forbids inline styles).
fn chart(series: &std::collections::BTreeMap<String, Vec<usize>>, since_ms: i64, bucket_ms: i64) -> String {
    let (width, height, left, bottom) = (960.0_f64, 200.0_f64, 40.0_f64, 20.0_f64);
    let n = series.values().map(Vec::len).max().unwrap_or(24);
    let totals: Vec<usize> =
        (0..n).map(|i| series.values().map(|counts| counts.get(i).copied().unwrap_or(0)).sum()).collect();
    let max = totals.iter().copied().max().unwrap_or(0).max(1);
    let bar = (width - left) / n as f64;
    let mut svg = format!(
        r#"<svg class="chart" id="chart" viewBox="0 0 {width} {}" width="100%" role="img" aria-label="dead letters per hour by source">"#,
        height + bottom
    );
    let _ = write!(svg, r#"<text x="0" y="12">{max}</text><text x="0" y="{height}">0</text>"#);
    for i in 0..n {
        let mut y = height;
        for (color, counts) in series.values().enumerate() {
            let count = counts.get(i).copied().unwrap_or(0);
            if count == 0 {
                continue;
            }
            let h = (count as f64 / max as f64) * (height - 16.0);
            y -= h;
            let _ = write!(
                svg,
                r#"<rect class="c{}" x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}"><title>{count}</title></rect>"#,
                color % 8,
                left + i as f64 * bar + 1.0,
                y,
                (bar - 2.0).max(1.0),
                h
            );
        }
        if i % 4 == 0 {
            let at = time(Some(since_ms + i as i64 * bucket_ms));
            let label = at.get(11..16).unwrap_or("");
            let _ = write!(svg, r#"<text x="{:.1}" y="{}">{label}</text>"#, left + i as f64 * bar, height + 14.0);
        }
    }
    svg.push_str("</svg><div class=\"legend\">");
    for (color, source) in series.keys().enumerate() {
        let _ = write!(svg, r#"<span><span class="swatch c{}"></span>{}</span>"#, color % 8, esc(source));
    }
    if series.is_empty() {
        svg.push_str("<span class=\"muted\">no dead letters in the last 24 hours</span>");
    }
    svg.push_str("</div>");
    svg
}

async fn list(api: &Api, session: &Session, query: &str) -> Response<Body> {
    let list = match parse_query(query) {
        Ok(list) => list,
        Err(problem) => return problem_page(&session.csrf, StatusCode::BAD_REQUEST, &problem),
    };
    let filter = list.filter;
    let page_result = api.replayer.page(&filter, list.cursor.as_deref(), list.limit.unwrap_or(PAGE_SIZE)).await;
    let entries_page = match page_result {
        Ok(page) => page,
        Err(error) => return op_problem(&session.csrf, &error),
    };
    let csrf = esc(&session.csrf);
    let value = |v: &Option<String>| esc(v.as_deref().unwrap_or(""));
    let mut status_options = String::from(r#"<option value="">any</option>"#);
    for status in Status::ALL {
        let selected = if filter.status.as_deref() == Some(status.as_str()) { " selected" } else { "" };
        let _ = write!(status_options, r#"<option{selected}>{}</option>"#, status.as_str());
    }
    let mut content = format!(
        r#"<h1>Entries</h1>
<form class="filters" method="get" action="/ui/entries" id="filters">
<label>Source<input name="source" value="{}"></label>
<label>Event type<input name="event_type" value="{}"></label>
<label>Error class<input name="error_class" value="{}" list="classes"></label>
<datalist id="classes"><option>poison</option><option>retryable_exhausted</option></datalist>
<label>Status<select name="status">{status_options}</select></label>
<label>Since<input name="since" value="{}" placeholder="2h or RFC 3339"></label>
<label>Until<input name="until" value="{}"></label>
<label>Text in the error<input name="text" value="{}"></label>
<button type="submit" class="primary">Filter</button> <a href="/ui/entries">clear</a></form>
<p id="matching">{} entries match.</p>"#,
        value(&filter.source),
        value(&filter.event_type),
        value(&filter.error_class),
        value(&filter.since),
        value(&filter.until),
        value(&filter.text),
        entries_page.total_matching
    );
    let _ = write!(
        content,
        r#"<form method="post" action="/ui/actions/preview" id="selection"><input type="hidden" name="csrf" value="{csrf}">
<table id="entries"><thead><tr><th><input type="checkbox" id="select-page" aria-label="select every entry on this page"></th>
<th>Entry</th><th>Status</th><th>Source</th><th>Event type</th><th>Class</th><th class="num">Attempts</th><th>Dead-lettered</th><th>Error</th></tr></thead><tbody>"#
    );
    for entry in &entries_page.entries {
        let e = &entry.entry;
        let error: String = e.error.as_deref().unwrap_or("").chars().take(160).collect();
        let _ = write!(
            content,
            r#"<tr data-entry="{id}"><td><input type="checkbox" name="ids" value="{id}" aria-label="select {id}"></td>
<td><a href="/ui/entries/{link}">{id}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class="num">{}</td><td>{}</td><td class="error">{}</td></tr>"#,
            status_badge(entry),
            esc(e.source.as_deref().unwrap_or("–")),
            esc(e.event_type.as_deref().unwrap_or("–")),
            esc(e.error_class.as_deref().unwrap_or("–")),
            e.attempts.map_or_else(|| "–".to_owned(), |n| n.to_string()),
            time(e.last_failure_at_ms),
            esc(&error),
            id = esc(&e.id),
            link = enc(&e.id),
        );
    }
    content.push_str("</tbody></table>");
    let _ = write!(
        content,
        r#"<div class="actions"><label>Reason (discard) <input name="reason"></label><label>Rate /s (replay) <input name="rate" size="4"></label>
<button type="submit" name="action" value="replay" class="primary">Replay selected…</button>
<button type="submit" name="action" value="discard" class="danger">Discard selected…</button></div></form>"#
    );
    let mut pager = String::from(r#"<div class="pager">"#);
    let query_of = filter_query(&filter);
    if list.cursor.is_some() {
        let _ = write!(pager, r#"<a href="/ui/entries?{query_of}">First page</a>"#);
    }
    if let Some(next) = &entries_page.next_cursor {
        let _ = write!(
            pager,
            r#"<a id="next-page" href="/ui/entries?{query_of}{}cursor={}">Next page</a>"#,
            if query_of.is_empty() { "" } else { "&" },
            enc(next)
        );
    }
    pager.push_str("</div>");
    content.push_str(&pager);
    let _ = write!(
        content,
        r#"<h2>Everything matching this filter ({} entries)</h2>
<form method="post" action="/ui/actions/preview" id="all-matching"><input type="hidden" name="csrf" value="{csrf}"><input type="hidden" name="all" value="1">{}
<div class="actions"><label>Reason (discard) <input name="reason"></label><label>Rate /s (replay) <input name="rate" size="4"></label>
<button type="submit" name="action" value="replay" class="primary">Replay all matching…</button>
<button type="submit" name="action" value="discard" class="danger">Discard all matching…</button></div>
<p class="muted">Without a status filter, "replay all" takes only entries nobody has dealt with (new, replay_failed, replay_overdue).</p></form>"#,
        entries_page.total_matching,
        filter_hidden(&filter)
    );
    page(StatusCode::OK, "Entries", Some(&session.csrf), &content, false)
}

async fn entry_page(api: &Api, session: &Session, id: &str) -> Response<Body> {
    let detail = match api.replayer.show(id).await {
        Ok(Some(detail)) => detail,
        Ok(None) => return problem_page(&session.csrf, StatusCode::NOT_FOUND, &format!("no entry `{id}`")),
        Err(error) => return op_problem(&session.csrf, &error),
    };
    let entry = &detail.entry;
    let e = &entry.entry;
    let csrf = esc(&session.csrf);
    let link = |id: &str| format!(r#"<a href="/ui/entries/{}">{}</a>"#, enc(id), esc(id));
    let mut content = format!(r#"<h1>Entry <code id="entry-id">{}</code> {}</h1>"#, esc(&e.id), status_badge(entry));

    content.push_str(r#"<h2>Fate</h2><ol class="timeline" id="timeline">"#);
    if let Some(parent) = &entry.replay_of {
        let _ = write!(
            content,
            r#"<li id="replayed-from">Replayed from {} (failed again {} time(s) since the first failure)</li>"#,
            link(parent),
            entry.failed_again
        );
    }
    let _ = write!(content, "<li>First failure: {}</li>", time(e.first_failure_at_ms));
    let _ = write!(
        content,
        "<li>Dead-lettered: {} after {} attempt(s), {}: {}</li>",
        time(e.last_failure_at_ms),
        e.attempts.unwrap_or(0),
        esc(e.error_class.as_deref().unwrap_or("unknown class")),
        esc(e.error.as_deref().unwrap_or(""))
    );
    if let Some(last) = &entry.last_status {
        let status = entry.status.as_str();
        let mut line = format!(
            "<li id=\"last-status\"><span class=\"status status-{status}\">{status}</span> at {} by {}",
            time(Some(last.at_ms)),
            esc(&last.by)
        );
        if entry.replays > 0 {
            let _ = write!(line, ", re-driven {} time(s)", entry.replays);
        }
        if let Some(new_entry) = &last.new_entry {
            let _ = write!(line, r#"; failed again as <span id="failed-again-as">{}</span>"#, link(new_entry));
        }
        if let Some(note) = &last.note {
            let _ = write!(line, ": {}", esc(note));
        }
        line.push_str("</li>");
        content.push_str(&line);
    } else {
        content.push_str("<li>Not dealt with yet.</li>");
    }
    content.push_str("</ol>");

    let _ = write!(
        content,
        r#"<div class="actions">
<form method="post" action="/ui/actions/preview" id="replay-one"><input type="hidden" name="csrf" value="{csrf}"><input type="hidden" name="ids" value="{id}">
<button type="submit" name="action" value="replay" class="primary">Replay…</button></form>
<form method="post" action="/ui/actions/preview" id="discard-one"><input type="hidden" name="csrf" value="{csrf}"><input type="hidden" name="ids" value="{id}">
<input name="reason" placeholder="why discard it" aria-label="discard reason" required><button type="submit" name="action" value="discard" class="danger">Discard…</button></form></div>"#,
        id = esc(&e.id)
    );

    content.push_str(r#"<h2>Event</h2><table id="facts">"#);
    for (name, value) in [
        ("source", e.source.clone()),
        ("event id", e.event_id.clone()),
        ("event type", e.event_type.clone()),
        ("error class", e.error_class.clone()),
        ("attempts", e.attempts.map(|n| n.to_string())),
        ("error", e.error.clone()),
        ("first failure", Some(time(e.first_failure_at_ms))),
        ("last failure", Some(time(e.last_failure_at_ms))),
        (
            "original",
            e.original_topic.as_ref().map(|topic| {
                format!("{topic}:{}:{}", e.original_partition.unwrap_or(-1), e.original_offset.unwrap_or(-1))
            }),
        ),
        ("body", Some(format!("{} bytes", e.body_bytes))),
    ] {
        let _ = write!(content, "<tr><th>{name}</th><td>{}</td></tr>", esc(value.as_deref().unwrap_or("–")));
    }
    content.push_str(
        "</table><h2>Headers</h2><table id=\"headers\"><thead><tr><th>Name</th><th>Value</th></tr></thead><tbody>",
    );
    for (name, value) in &detail.headers {
        let _ = write!(content, "<tr><td><code>{}</code></td><td><code>{}</code></td></tr>", esc(name), esc(value));
    }
    content.push_str("</tbody></table><h2>Body</h2>");
    let raw_bytes: Vec<u8> = match (&detail.body, &detail.body_base64) {
        (Some(text), _) => text.as_bytes().to_vec(),
        (None, Some(b64)) => base64::engine::general_purpose::STANDARD.decode(b64).unwrap_or_default(),
        (None, None) => Vec::new(),
    };
    let pretty = serde_json::from_slice::<serde_json::Value>(&raw_bytes)
        .ok()
        .and_then(|json| serde_json::to_string_pretty(&json).ok());
    if let Some(pretty) = &pretty {
        let _ = write!(
            content,
            r#"<details open id="body-pretty"><summary>JSON, pretty-printed</summary><pre>{}</pre></details>"#,
            esc(pretty)
        );
    }
    if let Some(text) = &detail.body {
        let open = if pretty.is_none() { " open" } else { "" };
        let _ =
            write!(content, r#"<details{open} id="body-raw"><summary>Raw</summary><pre>{}</pre></details>"#, esc(text));
    }
    let _ = write!(
        content,
        r#"<details{} id="body-base64"><summary>Base64</summary><pre>{}</pre></details>"#,
        if detail.body.is_none() { " open" } else { "" },
        esc(&base64::engine::general_purpose::STANDARD.encode(&raw_bytes))
    );
    page(StatusCode::OK, &e.id, Some(&session.csrf), &content, false)
}

/// What a form asks for: replay or discard, of ids or of every entry a filter matches.
struct Ask {
    action: Action,
    ids: Vec<String>,
    all: bool,
    filter: Filter,
    reason: String,
    rate: Option<f64>,
}

fn ask_of(form: &Form) -> Result<Ask, String> {
    let action = field(form, "action").and_then(Action::parse).ok_or("choose replay or discard")?;
    let ids: Vec<String> = form.iter().filter(|(key, _)| key == "ids").map(|(_, value)| value.clone()).collect();
    let all = field(form, "all") == Some("1");
    if !all && ids.is_empty() {
        return Err("select at least one entry".to_owned());
    }
    let rate = match field(form, "rate").map(str::trim).filter(|rate| !rate.is_empty()) {
        Some(rate) => Some(rate.parse::<f64>().map_err(|_| format!("`{rate}` is not a rate"))?),
        None => None,
    };
    Ok(Ask {
        action,
        ids: if all { Vec::new() } else { ids },
        all,
        filter: if all { filter_of(form) } else { Filter::default() },
        reason: field(form, "reason").unwrap_or("").trim().to_owned(),
        rate,
    })
}

async fn execute(api: &Api, ask: &Ask, dry_run: bool) -> Result<Report, OpError> {
    match ask.action {
        Action::Replay => {
            let request = ReplayRequest {
                ids: ask.ids.clone(),
                all: ask.all,
                filter: ask.filter.clone(),
                dry_run,
                rate: ask.rate,
                force: false,
                by: "console".to_owned(),
            };
            api.replayer.replay(&request).await
        }
        Action::Discard => {
            let request = DiscardRequest {
                ids: ask.ids.clone(),
                all: ask.all,
                filter: ask.filter.clone(),
                dry_run,
                reason: ask.reason.clone(),
                by: "console".to_owned(),
            };
            api.replayer.discard(&request).await
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

async fn preview(api: &Api, session: &Session, form: &Form) -> Response<Body> {
    let ask = match ask_of(form) {
        Ok(ask) => ask,
        Err(problem) => return problem_page(&session.csrf, StatusCode::BAD_REQUEST, &problem),
    };
    let report = match execute(api, &ask, true).await {
        Ok(report) => report,
        Err(error) => return op_problem(&session.csrf, &error),
    };
    let n = report.done.len();
    let verb = if ask.action == Action::Replay { "replay" } else { "discard" };
    let mut content = format!(
        r#"<h1>Confirm: {verb} {n} entr{}</h1><p class="notice" id="preview-count">This will {verb} <strong>{n}</strong> entr{} (dry run: nothing has changed yet).</p>"#,
        if n == 1 { "y" } else { "ies" },
        if n == 1 { "y" } else { "ies" }
    );
    if ask.all {
        content.push_str("<p class=\"muted\">The filter is applied again when you confirm: entries that arrive meanwhile and match are included.</p>");
    }
    if ask.action == Action::Replay {
        let _ = write!(
            content,
            "<p>Rate: {}.</p>",
            ask.rate
                .map_or_else(|| "as fast as Kafka takes them".to_owned(), |rate| format!("at most {rate} per second"))
        );
    } else {
        let _ = write!(content, "<p>Reason: {}</p>", esc(&ask.reason));
    }
    if !report.done.is_empty() {
        content.push_str("<ul id=\"preview-ids\">");
        for id in report.done.iter().take(20) {
            let _ = write!(content, "<li><code>{}</code></li>", esc(id));
        }
        if n > 20 {
            let _ = write!(content, "<li>… and {} more</li>", n - 20);
        }
        content.push_str("</ul>");
    }
    content.push_str(&skipped_list(&report));
    if n > 0 {
        let mut hidden = format!(
            r#"<input type="hidden" name="csrf" value="{}"><input type="hidden" name="action" value="{}"><input type="hidden" name="reason" value="{}">"#,
            esc(&session.csrf),
            ask.action.as_str(),
            esc(&ask.reason)
        );
        if let Some(rate) = ask.rate {
            let _ = write!(hidden, r#"<input type="hidden" name="rate" value="{rate}">"#);
        }
        if ask.all {
            hidden.push_str(r#"<input type="hidden" name="all" value="1">"#);
            hidden.push_str(&filter_hidden(&ask.filter));
        } else {
            for id in &ask.ids {
                let _ = write!(hidden, r#"<input type="hidden" name="ids" value="{}">"#, esc(id));
            }
        }
        let _ = write!(
            content,
            r#"<form method="post" action="/ui/actions/run" id="confirm">{hidden}<div class="actions"><button type="submit" class="{}" id="confirm-button">Yes, {verb} {n}</button> <a href="/ui/entries">Cancel</a></div></form>"#,
            if ask.action == Action::Replay { "primary" } else { "danger" }
        );
    } else {
        content.push_str(r#"<p><a href="/ui/entries">Back to the entries</a></p>"#);
    }
    page(StatusCode::OK, "Confirm", Some(&session.csrf), &content, false)
}

async fn run(api: &Arc<Api>, session: &Session, form: &Form) -> Response<Body> {
    let ask = match ask_of(form) {
        Ok(ask) => ask,
        Err(problem) => return problem_page(&session.csrf, StatusCode::BAD_REQUEST, &problem),
    };
    if ask.action == Action::Discard && ask.reason.is_empty() {
        return problem_page(&session.csrf, StatusCode::BAD_REQUEST, "a discard needs a reason");
    }
    let id = uuid::Uuid::new_v4().simple().to_string();
    let jobs = api.console.jobs.clone();
    jobs.lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .insert(id.clone(), Job { action: ask.action, started_ms: now_ms(), outcome: None });
    let (api, job_id) = (api.clone(), id.clone());
    // A bulk replay at a rate can take long: it runs on, and its page shows the report when it is done.
    tokio::spawn(async move {
        let outcome = execute(&api, &ask, false).await.map_err(|error| match error {
            OpError::BadRequest(problem) => problem,
            other => {
                tracing::warn!(error = %other, "console action failed");
                "Kafka could not be read or written; what was done is recorded, run it again for the rest".to_owned()
            }
        });
        if let Ok(report) = &outcome {
            match ask.action {
                Action::Replay => api.metrics.replays.inc_by(report.done.len() as u64),
                Action::Discard => api.metrics.discards.inc_by(report.done.len() as u64),
            }
        }
        if let Some(job) = jobs.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get_mut(&job_id) {
            job.outcome = Some(outcome);
        }
    });
    redirect(&format!("/ui/jobs/{id}"))
}

fn job_page(api: &Api, session: &Session, id: &str) -> Response<Body> {
    let job = api.console.jobs.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get(id).cloned();
    let Some(job) = job else { return problem_page(&session.csrf, StatusCode::NOT_FOUND, "no such action") };
    let verb = job.action.as_str();
    let (content, running) = match &job.outcome {
        None => (
            format!(
                r#"<h1>{verb}: running</h1><p id="job-state" data-state="running">Started at {}; this page refreshes itself.</p>"#,
                time(Some(job.started_ms))
            ),
            true,
        ),
        Some(Ok(report)) => {
            let mut content = format!(
                r#"<h1>{verb}: done</h1><p class="notice" id="job-state" data-state="done">{} entr{} {}.</p><ul id="job-done">"#,
                report.done.len(),
                if report.done.len() == 1 { "y" } else { "ies" },
                if job.action == Action::Replay {
                    "re-driven; their outcome appears on each entry once a consumer has handled it"
                } else {
                    "discarded"
                }
            );
            for done in report.done.iter().take(50) {
                let _ = write!(content, r#"<li><a href="/ui/entries/{}">{}</a></li>"#, enc(done), esc(done));
            }
            content.push_str("</ul>");
            content.push_str(&skipped_list(report));
            content.push_str(r#"<p><a href="/ui/entries">Back to the entries</a></p>"#);
            (content, false)
        }
        Some(Err(problem)) => (
            format!(
                r#"<h1>{verb}: failed</h1><p class="problem" id="job-state" data-state="failed">{}</p>"#,
                esc(problem)
            ),
            false,
        ),
    };
    page(StatusCode::OK, verb, Some(&session.csrf), &content, running)
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

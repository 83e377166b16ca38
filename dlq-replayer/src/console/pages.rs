//! The console's pages: the overview with its chart, the filtered list of entries, one entry with its fate,
//! headers and body, and the page of a background action.

use std::{collections::BTreeMap, sync::Arc};

use axum::{
    extract::{RawQuery, State},
    http::Uri,
    response::Response,
};
use base64::Engine as _;
use hookline_common::wire::now_ms;
use http::StatusCode;
use maud::{Markup, html};

use super::{
    LoggedIn, PAGE_SIZE,
    layout::{
        Refresh, csrf_field, enc, filter_hidden, filter_query, op_problem, page, problem_page, skipped_list,
        status_badge, time,
    },
};
use crate::{
    api::{Api, decode_path_segment, parse_query},
    filter::Filter,
    index::Status,
    ops::OpError,
    session::Action,
};

/// How long the overview waits for the paused routes: with Kafka unreachable, the flow is still worth showing.
const PAUSES_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// `GET /ui/`: the flow of the last hour, then the dead letters. The flow does not wait for the index: during an
/// incident it is what an operator opens the console for, and the index may still be catching up.
pub(super) async fn overview(State(api): State<Arc<Api>>, LoggedIn(session): LoggedIn) -> Response {
    let view = api.flow.view(now_ms());
    let pauses = match tokio::time::timeout(PAUSES_WAIT, api.replayer.pauses()).await {
        Ok(Ok(pauses)) => Ok(pauses),
        Ok(Err(error)) => {
            tracing::warn!(error = %error, "the overview could not read the paused routes");
            Err("Kafka could not be read; reload in a moment".to_owned())
        }
        Err(_) => Err(format!("no answer from Kafka within {} s", PAUSES_WAIT.as_secs())),
    };
    let flow = super::flow::flow_section(&view, pauses.as_deref().map_err(String::as_str), &session.csrf);
    let dead_letters = match dead_letters(&api).await {
        Ok(markup) => markup,
        Err(OpError::NotReady) => {
            html! { p.muted #index-not-ready { "The dead-letter index is still being built: its counts appear in a moment." } }
        }
        Err(error) => {
            tracing::warn!(error = %error, "the overview could not read the dead-letter index");
            html! { p.problem #index-unreadable { "The dead-letter index could not be read: " (error) } }
        }
    };
    let content = html! {
        h1 { "Overview" }
        (super::lookup::search_form("", ""))
        (flow)
        h2 { "Dead letters" }
        (dead_letters)
    };
    page(StatusCode::OK, "Overview", Some(&session.csrf), content, Refresh::UnlessEditing { every_s: 30 })
}

/// The dead letters' counts and their chart of the last 24 hours.
async fn dead_letters(api: &Api) -> Result<Markup, OpError> {
    let stats = api.replayer.stats(&Filter::default()).await?;
    let index = api.replayer.index().await?;
    // Dead letters per hour over the last 24 hours, stacked by source.
    let hour = 3_600_000_i64;
    let since = (now_ms() / hour - 23) * hour;
    let series = index.histogram(since, hour, 24)?;
    Ok(html! {
        p { (stats.total) " dead-letter entries in all." }
        div.cards {
            @for (title, key, counts) in [
                ("By service", "service", &stats.by_service),
                ("By source", "source", &stats.by_source),
                ("By error class", "error_class", &stats.by_error_class),
                ("By status", "status", &stats.by_status),
            ] {
                div.card {
                    h3 { (title) }
                    table id=(format!("by-{key}")) {
                        @for (name, count) in counts {
                            tr {
                                td { a href=(format!("/ui/entries?{key}={}", enc(name))) { (name) } }
                                td.num { (count) }
                            }
                        }
                    }
                }
            }
        }
        h3 { "Dead letters per hour, last 24 hours" }
        (chart(&series, since, hour))
    })
}

/// A stacked bar chart as inline SVG (presentation attributes only: the CSP forbids inline styles).
fn chart(series: &BTreeMap<String, Vec<usize>>, since_ms: i64, bucket_ms: i64) -> Markup {
    let (width, height, left, bottom) = (960.0_f64, 200.0_f64, 40.0_f64, 20.0_f64);
    let n = series.values().map(Vec::len).max().unwrap_or(24);
    let totals: Vec<usize> =
        (0..n).map(|i| series.values().map(|counts| counts.get(i).copied().unwrap_or(0)).sum()).collect();
    let max = totals.iter().copied().max().unwrap_or(0).max(1);
    let bar = (width - left) / n as f64;
    // Each bucket's bars, stacked from the bottom: (colour, x, y, height, count).
    let mut rects = Vec::new();
    for i in 0..n {
        let mut y = height;
        for (color, counts) in series.values().enumerate() {
            let count = counts.get(i).copied().unwrap_or(0);
            if count > 0 {
                let h = (count as f64 / max as f64) * (height - 16.0);
                y -= h;
                rects.push((color % 8, left + i as f64 * bar + 1.0, y, h, count));
            }
        }
    }
    html! {
        svg.chart #chart viewBox=(format!("0 0 {width} {}", height + bottom)) width="100%" role="img"
            aria-label="dead letters per hour by source" {
            text x="0" y="12" { (max) }
            text x="0" y=(height) { "0" }
            @for (color, x, y, h, count) in rects {
                rect class=(format!("c{color}")) x=(format!("{x:.1}")) y=(format!("{y:.1}"))
                    width=(format!("{:.1}", (bar - 2.0).max(1.0))) height=(format!("{h:.1}")) { title { (count) } }
            }
            @for i in (0..n).step_by(4) {
                @let at = time(Some(since_ms + i as i64 * bucket_ms));
                text x=(format!("{:.1}", left + i as f64 * bar)) y=(height + 14.0) { (at.get(11..16).unwrap_or("")) }
            }
        }
        div.legend {
            @for (color, source) in series.keys().enumerate() {
                span { span class=(format!("swatch c{}", color % 8)) {} (source) }
            }
            @if series.is_empty() { span.muted { "no dead letters in the last 24 hours" } }
        }
    }
}

/// `GET /ui/entries?<filter>&cursor=`.
pub(super) async fn list(
    State(api): State<Arc<Api>>,
    LoggedIn(session): LoggedIn,
    RawQuery(query): RawQuery,
) -> Response {
    let list = match parse_query(query.as_deref().unwrap_or("")) {
        Ok(list) => list,
        Err(problem) => return problem_page(&session.csrf, StatusCode::BAD_REQUEST, &problem.to_string()),
    };
    let filter = list.filter;
    let page_result = api.replayer.page(&filter, list.cursor.as_deref(), list.limit.unwrap_or(PAGE_SIZE)).await;
    let entries_page = match page_result {
        Ok(page) => page,
        Err(error) => return op_problem(&session.csrf, &error),
    };
    let value = |v: &Option<String>| v.clone().unwrap_or_default();
    let query_of = filter_query(&filter);
    let bulk_actions = |what: &str| {
        html! {
            div.actions {
                label { "Reason (discard) " input name="reason"; }
                label { "Rate /s (replay) " input name="rate" size="4"; }
                button type="submit" name="action" value="replay" class="primary" { "Replay " (what) "…" }
                button type="submit" name="action" value="discard" class="danger" { "Discard " (what) "…" }
            }
        }
    };
    let content = html! {
        h1 { "Entries" }
        form.filters method="get" action="/ui/entries" #filters {
            label { "Source" input name="source" value=(value(&filter.source)); }
            label { "Service" input name="service" value=(value(&filter.service)); }
            label { "Event type" input name="event_type" value=(value(&filter.event_type)); }
            label { "Error class" input name="error_class" value=(value(&filter.error_class)) list="classes"; }
            datalist #classes { option { "poison" } option { "retryable_exhausted" } }
            label { "Status" select name="status" {
                option value="" { "any" }
                @for status in Status::ALL {
                    option selected[filter.status.as_deref() == Some(status.as_str())] { (status.as_str()) }
                }
            } }
            label { "Since" input name="since" value=(value(&filter.since)) placeholder="2h or RFC 3339"; }
            label { "Until" input name="until" value=(value(&filter.until)); }
            label { "Text in the error" input name="text" value=(value(&filter.text)); }
            button type="submit" class="primary" { "Filter" } " " a href="/ui/entries" { "clear" }
        }
        p #matching { (entries_page.total_matching) " entries match." }
        form method="post" action="/ui/actions/preview" #selection {
            (csrf_field(&session.csrf))
            table #entries {
                thead { tr {
                    th { input type="checkbox" #select-page aria-label="select every entry on this page"; }
                    th { "Entry" } th { "Status" } th { "Source" } th { "Service" } th { "Event type" } th { "Class" }
                    th.num { "Attempts" } th { "Dead-lettered" } th { "Error" }
                } }
                tbody {
                    @for entry in &entries_page.entries {
                        @let e = &entry.entry;
                        @let error: String = e.error.as_deref().unwrap_or("").chars().take(160).collect();
                        tr data-entry=(e.id) {
                            td { input type="checkbox" name="ids" value=(e.id) aria-label=(format!("select {}", e.id)); }
                            td { a href=(format!("/ui/entries/{}", enc(&e.id))) { (e.id) } }
                            td { (status_badge(entry)) }
                            td { (e.source.as_deref().unwrap_or("–")) }
                            td.service { (e.service.as_deref().unwrap_or("–")) }
                            td { (e.event_type.as_deref().unwrap_or("–")) }
                            td { (e.error_class.as_deref().unwrap_or("–")) }
                            td.num { (e.attempts.map_or_else(|| "–".to_owned(), |n| n.to_string())) }
                            td { (time(e.last_failure_at_ms)) }
                            td.error { (error) }
                        }
                    }
                }
            }
            (bulk_actions("selected"))
        }
        div.pager {
            @if list.cursor.is_some() { a href=(format!("/ui/entries?{query_of}")) { "First page" } }
            @if let Some(next) = &entries_page.next_cursor {
                a #next-page href=(format!("/ui/entries?{query_of}{}cursor={}", if query_of.is_empty() { "" } else { "&" }, enc(next))) {
                    "Next page"
                }
            }
        }
        h2 { "Everything matching this filter (" (entries_page.total_matching) " entries)" }
        form method="post" action="/ui/actions/preview" #all-matching {
            (csrf_field(&session.csrf))
            input type="hidden" name="all" value="1";
            (filter_hidden(&filter))
            (bulk_actions("all matching"))
            p.muted { "Without a status filter, \"replay all\" takes only entries nobody has dealt with (new, replay_failed, replay_overdue)." }
        }
    };
    page(StatusCode::OK, "Entries", Some(&session.csrf), content, Refresh::No)
}

/// `GET /ui/entries/{id}`.
pub(super) async fn entry_page(State(api): State<Arc<Api>>, LoggedIn(session): LoggedIn, uri: Uri) -> Response {
    let id = decode_path_segment(uri.path().strip_prefix("/ui/entries/").unwrap_or(""));
    let detail = match api.replayer.show(&id).await {
        Ok(Some(detail)) => detail,
        Ok(None) => return problem_page(&session.csrf, StatusCode::NOT_FOUND, &format!("no entry `{id}`")),
        Err(error) => return op_problem(&session.csrf, &error),
    };
    let entry = &detail.entry;
    let e = &entry.entry;
    let link = |id: &str| html! { a href=(format!("/ui/entries/{}", enc(id))) { (id) } };
    let facts = [
        ("source", e.source.clone()),
        ("service", Some(e.service.clone().unwrap_or_else(|| "– (a replay goes to every service)".to_owned()))),
        ("event id", e.event_id.clone()),
        ("event type", e.event_type.clone()),
        ("error class", e.error_class.clone()),
        ("record MAC", Some(detail.authenticity.to_owned())),
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
    ];
    let raw_bytes: Vec<u8> = match (&detail.body, &detail.body_base64) {
        (Some(text), _) => text.as_bytes().to_vec(),
        (None, Some(b64)) => base64::engine::general_purpose::STANDARD.decode(b64).unwrap_or_default(),
        (None, None) => Vec::new(),
    };
    let pretty = serde_json::from_slice::<serde_json::Value>(&raw_bytes)
        .ok()
        .and_then(|json| serde_json::to_string_pretty(&json).ok());
    let content = html! {
        h1 { "Entry " code #entry-id { (e.id) } " " (status_badge(entry)) }
        h2 { "Fate" }
        ol.timeline #timeline {
            @if let Some(parent) = &entry.replay_of {
                li #replayed-from {
                    "Replayed from " (link(parent)) " (failed again " (entry.failed_again) " time(s) since the first failure)"
                }
            }
            li { "First failure: " (time(e.first_failure_at_ms)) }
            li {
                "Dead-lettered: " (time(e.last_failure_at_ms)) " after " (e.attempts.unwrap_or(0)) " attempt(s), "
                (e.error_class.as_deref().unwrap_or("unknown class")) ": " (e.error.as_deref().unwrap_or(""))
            }
            @if let Some(last) = &entry.last_status {
                @let status = entry.status.as_str();
                li #last-status {
                    span class=(format!("status status-{status}")) { (status) }
                    " at " (time(Some(last.at_ms))) " by " (last.by)
                    @if entry.replays > 0 { ", re-driven " (entry.replays) " time(s)" }
                    @if let Some(new_entry) = &last.new_entry { "; failed again as " span #failed-again-as { (link(new_entry)) } }
                    @if let Some(note) = &last.note { ": " (note) }
                }
            } @else {
                li { "Not dealt with yet." }
            }
        }
        div.actions {
            form method="post" action="/ui/actions/preview" #replay-one {
                (csrf_field(&session.csrf))
                input type="hidden" name="ids" value=(e.id);
                button type="submit" name="action" value="replay" class="primary" { "Replay…" }
            }
            form method="post" action="/ui/actions/preview" #discard-one {
                (csrf_field(&session.csrf))
                input type="hidden" name="ids" value=(e.id);
                input name="reason" placeholder="why discard it" aria-label="discard reason" required;
                button type="submit" name="action" value="discard" class="danger" { "Discard…" }
            }
        }
        h2 { "Event" }
        table #facts {
            @for (name, value) in &facts { tr { th { (name) } td { (value.as_deref().unwrap_or("–")) } } }
        }
        h2 { "Headers" }
        table #headers {
            thead { tr { th { "Name" } th { "Value" } } }
            tbody { @for (name, value) in &detail.headers { tr { td { code { (name) } } td { code { (value) } } } } }
        }
        h2 { "Body" }
        @if let Some(pretty) = &pretty {
            details open #body-pretty { summary { "JSON, pretty-printed" } pre { (pretty) } }
        }
        @if let Some(text) = &detail.body {
            details open[pretty.is_none()] #body-raw { summary { "Raw" } pre { (text) } }
        }
        details open[detail.body.is_none()] #body-base64 {
            summary { "Base64" }
            pre { (base64::engine::general_purpose::STANDARD.encode(&raw_bytes)) }
        }
    };
    page(StatusCode::OK, &e.id, Some(&session.csrf), content, Refresh::No)
}

/// `GET /ui/jobs/{id}`: a background action, running (the page reloads itself) or done.
pub(super) async fn job_page(State(api): State<Arc<Api>>, LoggedIn(session): LoggedIn, uri: Uri) -> Response {
    let id = uri.path().strip_prefix("/ui/jobs/").unwrap_or("");
    let job = api.console.jobs.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get(id).cloned();
    let Some(job) = job else { return problem_page(&session.csrf, StatusCode::NOT_FOUND, "no such action") };
    let verb = job.action.as_str();
    let content = html! {
        @match &job.outcome {
            None => {
                h1 { (verb) ": running" }
                p #job-state data-state="running" { "Started at " (time(Some(job.started_ms))) "; this page refreshes itself." }
            }
            Some(Ok(report)) => {
                h1 { (verb) ": done" }
                p.notice #job-state data-state="done" {
                    (job.done_total) " " (if job.done_total == 1 { "entry" } else { "entries" }) " "
                    (if job.action == Action::Replay {
                        "re-driven; their outcome appears on each entry once a consumer has handled it"
                    } else {
                        "discarded"
                    })
                    "."
                }
                ul #job-done {
                    @for done in report.done.iter().take(50) {
                        li { a href=(format!("/ui/entries/{}", enc(done))) { (done) } }
                    }
                }
                (skipped_list(report, job.skipped_total))
                p { a href="/ui/entries" { "Back to the entries" } }
            }
            Some(Err(problem)) => {
                h1 { (verb) ": failed" }
                p.problem #job-state data-state="failed" { (problem) }
            }
        }
    };
    let refresh = if job.outcome.is_none() { Refresh::EverySecond } else { Refresh::No };
    page(StatusCode::OK, verb, Some(&session.csrf), content, refresh)
}

//! The console's pages: the overview with its chart, the filtered list of entries, one entry with its fate,
//! headers and body, and the page of a background action.

use std::fmt::Write as _;

use base64::Engine as _;
use hookline_common::{http::Body, wire::now_ms};
use http::{Response, StatusCode};

use super::{
    PAGE_SIZE, enc, esc, filter_hidden, filter_query, op_problem, page, problem_page, skipped_list, status_badge, time,
};
use crate::{
    api::{Api, parse_query},
    filter::Filter,
    index::Status,
    session::{Action, Session},
};

pub(super) async fn overview(api: &Api, session: &Session) -> Response<Body> {
    let stats = match api.replayer.stats(&Filter::default()).await {
        Ok(stats) => stats,
        Err(error) => return op_problem(&session.csrf, &error),
    };
    let index = match api.replayer.index().await {
        Ok(index) => index,
        Err(error) => return op_problem(&session.csrf, &error),
    };
    let mut content = format!(
        "<h1>Overview</h1>{}<p>{} dead-letter entries in all.</p><div class=\"cards\">",
        super::lookup::search_form("", ""),
        stats.total
    );
    for (title, key, counts) in [
        ("By service", "service", &stats.by_service),
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

pub(super) async fn list(api: &Api, session: &Session, query: &str) -> Response<Body> {
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
<label>Service<input name="service" value="{}"></label>
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
        value(&filter.service),
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
<th>Entry</th><th>Status</th><th>Source</th><th>Service</th><th>Event type</th><th>Class</th><th class="num">Attempts</th><th>Dead-lettered</th><th>Error</th></tr></thead><tbody>"#
    );
    for entry in &entries_page.entries {
        let e = &entry.entry;
        let error: String = e.error.as_deref().unwrap_or("").chars().take(160).collect();
        let _ = write!(
            content,
            r#"<tr data-entry="{id}"><td><input type="checkbox" name="ids" value="{id}" aria-label="select {id}"></td>
<td><a href="/ui/entries/{link}">{id}</a></td><td>{}</td><td>{}</td><td class="service">{}</td><td>{}</td><td>{}</td><td class="num">{}</td><td>{}</td><td class="error">{}</td></tr>"#,
            status_badge(entry),
            esc(e.source.as_deref().unwrap_or("–")),
            esc(e.service.as_deref().unwrap_or("–")),
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

pub(super) async fn entry_page(api: &Api, session: &Session, id: &str) -> Response<Body> {
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

pub(super) fn job_page(api: &Api, session: &Session, id: &str) -> Response<Body> {
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
                job.done_total,
                if job.done_total == 1 { "y" } else { "ies" },
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
            content.push_str(&skipped_list(report).replacen(
                &format!("Skipped ({})", report.skipped.len()),
                &format!("Skipped ({})", job.skipped_total),
                1,
            ));
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

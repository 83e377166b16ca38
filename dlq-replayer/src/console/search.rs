//! The Search events page: the same search as `hookline-replayer events` and `GET /v1/events`
//! ([`crate::events`]), a form in and a table of matches out, each linked to its `lookup`. Every value shown comes
//! from a record or the request and is escaped.

use std::fmt::Write as _;

use hookline_common::http::Body;
use http::{Response, StatusCode};

use super::{enc, esc, op_problem, page, problem_page, time};
use crate::{
    api::Api,
    events::{SearchRequest, render},
    session::Session,
};

pub(super) async fn search_page(api: &Api, session: &Session, query: &str) -> Response<Body> {
    let request = match SearchRequest::from_query(query) {
        Ok(request) => request,
        Err(problem) => return problem_page(&session.csrf, StatusCode::BAD_REQUEST, &problem),
    };
    let mut content = String::from("<h1>Search events</h1>");
    let mut conditions: Vec<&str> = request.conditions.iter().map(String::as_str).collect();
    conditions.resize(conditions.len().max(3), "");
    let mut where_inputs = String::new();
    for condition in conditions {
        let _ = write!(
            where_inputs,
            r#"<label>Where<input name="where" value="{}" placeholder="/customer == &quot;cus_123&quot;"></label>"#,
            esc(condition)
        );
    }
    let _ = write!(
        content,
        r#"<form class="filters" method="get" action="/ui/search" id="event-search-form"><label>Source<input name="source" value="{}" required></label><label>Type<input name="type" value="{}"></label><label>Since<input name="since" value="{}" placeholder="2026-12-06T09:00:00Z" required></label><label>Until<input name="until" value="{}" placeholder="now"></label>{where_inputs}<label>Limit<input name="limit" value="{}"></label><button type="submit" class="primary">Search</button></form>"#,
        esc(&request.source),
        esc(request.event_type.as_deref().unwrap_or("")),
        esc(&request.since),
        esc(request.until.as_deref().unwrap_or("")),
        request.limit.map_or_else(String::new, |limit| limit.to_string()),
    );
    if request.source.is_empty() || request.since.is_empty() {
        content.push_str(r#"<p class="muted">A source and a time range, and conditions on the verified JSON body (<code>/pointer op value</code>, op one of <code>== != in exists prefix &lt; &lt;= &gt; &gt;=</code>): every accepted event that matches, read from Kafka, with each service's state.</p>"#);
        return page(StatusCode::OK, "Search events", Some(&session.csrf), &content, false);
    }
    let report = match api.replayer.search_events(&request, |_| {}).await {
        Ok(report) => report,
        Err(error) => return op_problem(&session.csrf, &error),
    };
    let _ = write!(
        content,
        r#"<table id="event-matches" data-matches="{}"><thead><tr><th>Accepted</th><th>Position</th><th>Type</th><th>Event id</th><th>Services</th></tr></thead><tbody>"#,
        report.matches.len()
    );
    for found in &report.matches {
        let services: Vec<String> = found
            .services
            .iter()
            .map(|service| format!("{} {}", esc(&service.service), esc(&render::state(&service.dedupe))))
            .collect();
        let event_id = found.event_id.as_deref().unwrap_or("");
        let _ = write!(
            content,
            r#"<tr><td>{}</td><td class="code">{} {}@{}</td><td>{}</td><td><a href="/ui/events?source={}&amp;event_id={}">{}</a></td><td>{}</td></tr>"#,
            time(found.accepted_at_ms),
            esc(&found.position.topic),
            found.position.partition,
            found.position.offset,
            esc(found.event_type.as_deref().unwrap_or("–")),
            enc(&report.source),
            enc(event_id),
            esc(event_id),
            services.join("<br>"),
        );
    }
    content.push_str(r#"</tbody></table><pre id="event-search-summary">"#);
    for line in render::summary_lines(&report) {
        let _ = writeln!(content, "{}", esc(&line));
    }
    content.push_str("</pre>");
    page(StatusCode::OK, "Search events", Some(&session.csrf), &content, false)
}

//! The Search events page: the same search as `hookline-replayer events` and `GET /v1/events`
//! ([`crate::events`]), a form in and a table of matches out, each linked to its `lookup`. Every value shown comes
//! from a record or the request; the template escapes it.

use std::sync::Arc;

use axum::{
    extract::{RawQuery, State},
    response::Response,
};
use http::StatusCode;
use maud::html;

use super::{
    LoggedIn,
    layout::{Refresh, enc, op_problem, page, problem_page, time},
};
use crate::{
    api::Api,
    events::{SearchRequest, render},
};

/// `GET /ui/search?source=&type=&since=&until=&where=&limit=`.
pub(super) async fn search_page(
    State(api): State<Arc<Api>>,
    LoggedIn(session): LoggedIn,
    RawQuery(query): RawQuery,
) -> Response {
    let request = match SearchRequest::from_query(query.as_deref().unwrap_or("")) {
        Ok(request) => request,
        Err(problem) => return problem_page(&session.csrf, StatusCode::BAD_REQUEST, &problem.to_string()),
    };
    let mut conditions: Vec<&str> = request.conditions.iter().map(String::as_str).collect();
    conditions.resize(conditions.len().max(3), "");
    let form = html! {
        h1 { "Search events" }
        form.filters method="get" action="/ui/search" #event-search-form {
            label { "Source" input name="source" value=(request.source) required; }
            label { "Type" input name="type" value=(request.event_type.as_deref().unwrap_or("")); }
            label { "Since" input name="since" value=(request.since) placeholder="2026-12-06T09:00:00Z" required; }
            label { "Until" input name="until" value=(request.until.as_deref().unwrap_or("")) placeholder="now"; }
            @for condition in &conditions {
                label { "Where" input name="where" value=(condition) placeholder="/customer == \"cus_123\""; }
            }
            label { "Limit" input name="limit" value=(request.limit.map_or_else(String::new, |limit| limit.to_string())); }
            button type="submit" class="primary" { "Search" }
        }
    };
    if request.source.is_empty() || request.since.is_empty() {
        let content = html! {
            (form)
            p.muted {
                "A source and a time range, and conditions on the verified JSON body (" code { "/pointer op value" }
                ", op one of " code { "== != in exists prefix < <= > >=" }
                "): every accepted event that matches, read from Kafka, with each service's state."
            }
        };
        return page(StatusCode::OK, "Search events", Some(&session.csrf), content, Refresh::No);
    }
    let report = match api.replayer.search_events(&request, |_| {}).await {
        Ok(report) => report,
        Err(error) => return op_problem(&session.csrf, &error),
    };
    let content = html! {
        (form)
        table #event-matches data-matches=(report.matches.len()) {
            thead { tr { th { "Accepted" } th { "Position" } th { "Type" } th { "Event id" } th { "Services" } } }
            tbody {
                @for found in &report.matches {
                    @let event_id = found.event_id.as_deref().unwrap_or("");
                    tr {
                        td { (time(found.accepted_at_ms)) }
                        td.code { (found.position.topic) " " (found.position.partition) "@" (found.position.offset) }
                        td { (found.event_type.as_deref().unwrap_or("–")) }
                        td { a href=(format!("/ui/events?source={}&event_id={}", enc(&report.source), enc(event_id))) { (event_id) } }
                        td {
                            @for (i, service) in found.services.iter().enumerate() {
                                @if i > 0 { br; }
                                (service.service) " " (render::state(&service.dedupe))
                            }
                        }
                    }
                }
            }
        }
        pre #event-search-summary { @for line in render::summary_lines(&report) { (line) "\n" } }
    };
    page(StatusCode::OK, "Search events", Some(&session.csrf), content, Refresh::No)
}

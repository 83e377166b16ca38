//! The search box's page, "where is event X?": a source and an event id in, the same answer as
//! `hookline-replayer lookup` and `GET /v1/events/...` out ([`crate::lookup`]), with links to the event's DLQ
//! entries.

use std::sync::Arc;

use axum::{
    extract::{RawQuery, State},
    response::Response,
};
use http::StatusCode;
use maud::{Markup, html};

use super::{
    LoggedIn,
    layout::{Refresh, enc, op_problem, page},
};
use crate::{
    api::Api,
    lookup::{Answer, render_text},
};

/// The search form, shown on the page and on the overview.
pub(super) fn search_form(source: &str, event_id: &str) -> Markup {
    html! {
        form.filters method="get" action="/ui/events" #event-search {
            label { "Source" input name="source" value=(source) required; }
            label { "Event id" input name="event_id" value=(event_id) required; }
            button type="submit" class="primary" { "Find event" }
        }
    }
}

/// `GET /ui/events?source=&event_id=`.
pub(super) async fn lookup_page(
    State(api): State<Arc<Api>>,
    LoggedIn(session): LoggedIn,
    RawQuery(query): RawQuery,
) -> Response {
    let mut source = String::new();
    let mut event_id = String::new();
    for (key, value) in form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes()) {
        match key.as_ref() {
            "source" => source = value.trim().to_owned(),
            "event_id" => event_id = value.trim().to_owned(),
            _ => {}
        }
    }
    if source.is_empty() || event_id.is_empty() {
        let content = html! {
            h1 { "Where is event X?" }
            (search_form(&source, &event_id))
            p.muted { "A source and an event id: the answer says, per service, whether it was processed (when, in how long, which record), is waiting in its retry topic, or was dead-lettered and replayed." }
        };
        return page(StatusCode::OK, "Find event", Some(&session.csrf), content, Refresh::No);
    }
    let answer = match api.lookup.lookup(&source, &event_id).await {
        Ok(answer) => answer,
        Err(error) => return op_problem(&session.csrf, &error),
    };
    let content = html! {
        h1 { "Where is event X?" }
        (search_form(&source, &event_id))
        (answer_html(&answer))
    };
    let status = if answer.found { StatusCode::OK } else { StatusCode::NOT_FOUND };
    page(status, "Find event", Some(&session.csrf), content, Refresh::No)
}

fn answer_html(answer: &Answer) -> Markup {
    let entries: Vec<_> = answer
        .services
        .iter()
        .flat_map(|service| service.dead_letters.iter())
        .chain(answer.unattributed_dead_letters.iter())
        .collect();
    html! {
        pre #lookup-answer data-found=(if answer.found { "true" } else { "false" }) {
            @for line in render_text(answer, true) { (line) "\n" }
        }
        @if !entries.is_empty() {
            h2 { "Dead letters" }
            ul #lookup-entries {
                @for entry in entries {
                    li { a href=(format!("/ui/entries/{}", enc(&entry.entry.id))) { (entry.entry.id) } " " (entry.status.as_str()) }
                }
            }
        }
    }
}

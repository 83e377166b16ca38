//! The search box's page, "where is event X?": a source and an event id in, the same answer as
//! `hookline-replayer lookup` and `GET /v1/events/...` out ([`crate::lookup`]), with links to the event's DLQ
//! entries. Every value shown is escaped.

use std::fmt::Write as _;

use hookline_common::http::Body;
use http::{Response, StatusCode};

use super::{enc, esc, op_problem, page};
use crate::{
    api::Api,
    lookup::{Answer, render_text},
    session::Session,
};

/// The search form, shown on the page and in every page's header.
pub(super) fn search_form(source: &str, event_id: &str) -> String {
    format!(
        r#"<form class="filters" method="get" action="/ui/events" id="event-search"><label>Source<input name="source" value="{}" required></label><label>Event id<input name="event_id" value="{}" required></label><button type="submit" class="primary">Find event</button></form>"#,
        esc(source),
        esc(event_id)
    )
}

pub(super) async fn lookup_page(api: &Api, session: &Session, query: &str) -> Response<Body> {
    let mut source = String::new();
    let mut event_id = String::new();
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        match key.as_ref() {
            "source" => source = value.trim().to_owned(),
            "event_id" => event_id = value.trim().to_owned(),
            _ => {}
        }
    }
    let mut content = String::from("<h1>Where is event X?</h1>");
    content.push_str(&search_form(&source, &event_id));
    if source.is_empty() || event_id.is_empty() {
        content.push_str(r#"<p class="muted">A source and an event id: the answer says, per service, whether it was processed (when, in how long, which record), is waiting in its retry topic, or was dead-lettered and replayed.</p>"#);
        return page(StatusCode::OK, "Find event", Some(&session.csrf), &content, false);
    }
    let answer = match api.lookup.lookup(&source, &event_id).await {
        Ok(answer) => answer,
        Err(error) => return op_problem(&session.csrf, &error),
    };
    content.push_str(&answer_html(&answer));
    let status = if answer.found { StatusCode::OK } else { StatusCode::NOT_FOUND };
    page(status, "Find event", Some(&session.csrf), &content, false)
}

fn answer_html(answer: &Answer) -> String {
    let mut html = format!(r#"<pre id="lookup-answer" data-found="{}">"#, if answer.found { "true" } else { "false" });
    for line in render_text(answer, true) {
        let _ = writeln!(html, "{}", esc(&line));
    }
    html.push_str("</pre>");
    let entries: Vec<_> = answer
        .services
        .iter()
        .flat_map(|service| service.dead_letters.iter())
        .chain(answer.unattributed_dead_letters.iter())
        .collect();
    if !entries.is_empty() {
        html.push_str(r#"<h2>Dead letters</h2><ul id="lookup-entries">"#);
        for entry in entries {
            let _ = write!(
                html,
                r#"<li><a href="/ui/entries/{}">{}</a> {}</li>"#,
                enc(&entry.entry.id),
                esc(&entry.entry.id),
                esc(entry.status.as_str())
            );
        }
        html.push_str("</ul>");
    }
    html
}

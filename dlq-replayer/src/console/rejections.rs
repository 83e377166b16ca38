//! The Rejections page: every configured gateway's recent refusals per source, gathered when the page is asked
//! for ([`crate::rejections`]), with a note naming each gateway that did not answer. Every value comes from
//! another process's answer; the template escapes it.

use std::sync::Arc;

use axum::{
    extract::{RawQuery, State},
    response::Response,
};
use http::StatusCode;
use maud::{Markup, html};

use super::{
    LoggedIn,
    layout::{Refresh, enc, page, problem_page, time},
};
use crate::{
    api::{Api, rejections_query},
    rejections::GatheredEntry,
};

/// `GET /ui/rejections?source=`.
pub(super) async fn rejections_page(
    State(api): State<Arc<Api>>,
    LoggedIn(session): LoggedIn,
    RawQuery(query): RawQuery,
) -> Response {
    let source = match rejections_query(query.as_deref().unwrap_or("")) {
        Ok(source) => source,
        Err(problem) => return problem_page(&session.csrf, StatusCode::BAD_REQUEST, &problem.to_string()),
    };
    if !api.rejections.is_configured() {
        let content = html! {
            h1 { "Rejections" }
            p.muted #no-gateways {
                "No gateway is configured: set " code { "[gateways] admin_urls" } " in the replayer's config to gather their rejections here."
            }
        };
        return page(StatusCode::OK, "Rejections", Some(&session.csrf), content, Refresh::No);
    }
    let gathered = api.rejections.gather(source.as_deref()).await;
    let content = html! {
        h1 { "Rejections" }
        form.filters method="get" action="/ui/rejections" #filters {
            label { "Source" input name="source" value=(source.as_deref().unwrap_or("")); }
            button type="submit" class="primary" { "Filter" } " " a href="/ui/rejections" { "all sources" }
        }
        @if !gathered.unreachable.is_empty() {
            div.problem #unreachable {
                p { "Some gateways did not answer; their rejections are missing below:" }
                ul { @for gateway in &gathered.unreachable { li { code { (gateway.url) } ": " (gateway.reason) } } }
            }
        }
        p #answered {
            (gathered.gateways.len()) " gateway(s) answered"
            @if !gathered.gateways.is_empty() { ": " (gathered.gateways.join(", ")) }
            ". Each keeps its last 100 rejections per source."
        }
        @if gathered.sources.values().all(Vec::is_empty) { p.muted { "No rejections." } }
        @for (name, entries) in &gathered.sources {
            h2 {
                a href=(format!("/ui/rejections?source={}", enc(name))) { (name) }
                " (" (counted(entries)) ")"
            }
            (entries_table(name, entries))
        }
    };
    page(StatusCode::OK, "Rejections", Some(&session.csrf), content, Refresh::No)
}

/// "3 rejections", "1 rejection, 2 handshakes": an answered handshake is kept beside the rejections, never one.
fn counted(entries: &[GatheredEntry]) -> String {
    let handshakes = entries.iter().filter(|entry| entry.handshake.is_some()).count();
    let rejections = entries.len() - handshakes;
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    match handshakes {
        0 => plural(rejections, "rejection"),
        _ => format!("{}, {}", plural(rejections, "rejection"), plural(handshakes, "handshake")),
    }
}

fn entries_table(source: &str, entries: &[GatheredEntry]) -> Markup {
    html! {
        table.rejections data-source=(source) {
            thead { tr {
                th { "Time" } th { "Gateway" } th { "Code" } th.num { "Status" } th { "Secrets tried" } th.num { "Skew" }
                th { "Peer" } th { "Event id" }
            } }
            tbody {
                @for entry in entries {
                    tr {
                        td { (time(Some(entry.at_ms))) }
                        td { (entry.gateway) }
                        td.code {
                            (entry.code)
                            @if let Some(kind) = &entry.handshake { " (" (kind) ")" }
                        }
                        td.num { (entry.status) }
                        td { (if entry.secrets_tried.is_empty() { "–".to_owned() } else { entry.secrets_tried.join(", ") }) }
                        td.num { (entry.skew_ms.map_or_else(|| "–".to_owned(), |ms| format!("{:+.1} s", ms as f64 / 1000.0))) }
                        td.peer { (entry.peer.as_deref().unwrap_or("–")) }
                        td { (entry.event_id.as_deref().unwrap_or("–")) }
                    }
                }
            }
        }
    }
}

//! The Rejections page: every configured gateway's recent refusals per source, gathered when the page is asked
//! for ([`crate::rejections`]), with a note naming each gateway that did not answer. Every value comes from
//! another process's answer and is escaped.

use std::fmt::Write as _;

use hookline_common::http::Body;
use http::{Response, StatusCode};

use super::{enc, esc, page, problem_page, time};
use crate::{
    api::{Api, rejections_query},
    rejections::GatheredEntry,
    session::Session,
};

pub(super) async fn rejections_page(api: &Api, session: &Session, query: &str) -> Response<Body> {
    let source = match rejections_query(query) {
        Ok(source) => source,
        Err(problem) => return problem_page(&session.csrf, StatusCode::BAD_REQUEST, &problem),
    };
    let mut content = String::from("<h1>Rejections</h1>");
    if !api.rejections.is_configured() {
        content.push_str(
            r#"<p class="muted" id="no-gateways">No gateway is configured: set <code>[gateways] admin_urls</code> in the replayer's config to gather their rejections here.</p>"#,
        );
        return page(StatusCode::OK, "Rejections", Some(&session.csrf), &content, false);
    }
    let gathered = api.rejections.gather(source.as_deref()).await;
    let _ = write!(
        content,
        r#"<form class="filters" method="get" action="/ui/rejections" id="filters"><label>Source<input name="source" value="{}"></label>
<button type="submit" class="primary">Filter</button> <a href="/ui/rejections">all sources</a></form>"#,
        esc(source.as_deref().unwrap_or(""))
    );
    if !gathered.unreachable.is_empty() {
        content.push_str(
            r#"<div class="problem" id="unreachable"><p>Some gateways did not answer; their rejections are missing below:</p><ul>"#,
        );
        for gateway in &gathered.unreachable {
            let _ = write!(content, "<li><code>{}</code>: {}</li>", esc(&gateway.url), esc(&gateway.reason));
        }
        content.push_str("</ul></div>");
    }
    let names: Vec<String> = gathered.gateways.iter().map(|name| esc(name)).collect();
    let _ = write!(
        content,
        r#"<p id="answered">{} gateway(s) answered{}{}. Each keeps its last 100 rejections per source.</p>"#,
        names.len(),
        if names.is_empty() { "" } else { ": " },
        names.join(", ")
    );
    if gathered.sources.values().all(Vec::is_empty) {
        content.push_str(r#"<p class="muted">No rejections.</p>"#);
    }
    for (name, entries) in &gathered.sources {
        let _ = write!(
            content,
            r#"<h2><a href="/ui/rejections?source={}">{}</a> ({} rejection{})</h2>"#,
            enc(name),
            esc(name),
            entries.len(),
            if entries.len() == 1 { "" } else { "s" }
        );
        content.push_str(&entries_table(name, entries));
    }
    page(StatusCode::OK, "Rejections", Some(&session.csrf), &content, false)
}

fn entries_table(source: &str, entries: &[GatheredEntry]) -> String {
    let mut table = format!(
        r#"<table class="rejections" data-source="{}"><thead><tr><th>Time</th><th>Gateway</th><th>Code</th><th class="num">Status</th><th>Secrets tried</th><th class="num">Skew</th><th>Peer</th><th>Event id</th></tr></thead><tbody>"#,
        esc(source)
    );
    for entry in entries {
        let skew = entry.skew_ms.map_or_else(|| "–".to_owned(), |ms| format!("{:+.1} s", ms as f64 / 1000.0));
        let _ = write!(
            table,
            r#"<tr><td>{}</td><td>{}</td><td class="code">{}</td><td class="num">{}</td><td>{}</td><td class="num">{}</td><td class="peer">{}</td><td>{}</td></tr>"#,
            time(Some(entry.at_ms)),
            esc(&entry.gateway),
            esc(&entry.code),
            entry.status,
            esc(&if entry.secrets_tried.is_empty() { "–".to_owned() } else { entry.secrets_tried.join(", ") }),
            esc(&skew),
            esc(entry.peer.as_deref().unwrap_or("–")),
            esc(entry.event_id.as_deref().unwrap_or("–")),
        );
    }
    table.push_str("</tbody></table>");
    table
}

//! The Audit page: who did what, when ([`crate::identity::audit`]), newest first, filtered by who, what and since
//! as the API's `GET /v1/audit` is. Every viewer may read it: it holds subjects and what they touched, no secret.

use std::sync::Arc;

use axum::{
    extract::{RawQuery, State},
    response::Response,
};
use http::StatusCode;
use maud::html;

use super::{
    LoggedIn,
    layout::{Refresh, op_problem, page, problem_page, time},
};
use crate::{api::Api, identity::audit::AuditQuery};

/// `GET /ui/audit?who=&what=&since=`.
pub(super) async fn audit_page(
    State(api): State<Arc<Api>>,
    LoggedIn(session): LoggedIn,
    RawQuery(query): RawQuery,
) -> Response {
    let mut query = match AuditQuery::from_query(query.as_deref().unwrap_or("")) {
        Ok(query) => query,
        Err(problem) => return problem_page(&session.csrf, StatusCode::BAD_REQUEST, &problem),
    };
    if query.since.is_none() {
        query.since = Some("7d".to_owned());
    }
    let trail = match api.replayer.audit_trail(&query).await {
        Ok(trail) => trail,
        Err(error) => return op_problem(&session.csrf, &error),
    };
    let field = |value: &Option<String>| value.clone().unwrap_or_default();
    let content = html! {
        h1 { "Audit trail" }
        form.filters method="get" action="/ui/audit" #audit-filters {
            label { "Who" input name="who" placeholder="token:alice, oidc:…" value=(field(&query.who)); }
            label { "What" input name="what" placeholder="replay, token." value=(field(&query.what)); }
            label { "Since" input name="since" placeholder="7d, or RFC 3339" value=(field(&query.since)); }
            button type="submit" class="primary" { "Filter" }
        }
        p.muted { "You are " code #me { (session.principal.subject) } " (" (session.principal.scope.as_str()) ")." }
        @if trail.records.is_empty() { p.muted #no-audit { "Nothing recorded." } }
        @else {
            table #audit {
                thead { tr { th { "When" } th { "Who" } th { "What" } th { "Detail" } } }
                tbody {
                    @for record in &trail.records {
                        tr {
                            td { (time(Some(record.at_ms))) }
                            td.subject { (record.subject) }
                            td.action { (record.action) }
                            td { code { (record.detail.to_string()) } }
                        }
                    }
                }
            }
        }
        @if trail.refused > 0 { p.problem { (trail.refused) " records without a valid MAC were not shown." } }
    };
    page(StatusCode::OK, "Audit", Some(&session.csrf), content, Refresh::No)
}

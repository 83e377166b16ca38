//! The Routes page: which routes of which consumer services an operator has paused (who, why, since when), a
//! Resume button on each, and a form to pause one. Both forms are POSTs with the session's CSRF token and call the
//! same operations as `hookline-replayer pause` / `resume` and the API ([`crate::ops`]).

use std::sync::Arc;

use axum::{extract::State, response::Response};
use http::StatusCode;
use maud::{Markup, html};

use super::{
    CheckedForm, LoggedIn, OperatorForm,
    forms::field,
    layout::{Refresh, csrf_field, op_problem, page, problem_page, time},
};
use crate::{api::Api, ops::PauseRequest, session::Session};

/// `GET /ui/pauses`.
pub(super) async fn pauses_page(State(api): State<Arc<Api>>, LoggedIn(session): LoggedIn) -> Response {
    render(&api, &session, None).await
}

async fn render(api: &Api, session: &Session, notice: Option<&str>) -> Response {
    let pauses = match api.replayer.pauses().await {
        Ok(pauses) => pauses,
        Err(error) => return op_problem(&session.csrf, &error),
    };
    let content = html! {
        h1 { "Paused routes" }
        @if let Some(notice) = notice { p.notice #pause-notice { (notice) } }
        p.muted {
            "A paused route calls nothing: its events wait (in memory, or in its service's retry topic) and run when it is resumed, none lost, skipped or sent twice. Each service's "
            code { "hookline_consumer_route_waiting_records" } " and " code { "hookline_consumer_route_oldest_waiting_age_seconds" }
            " show what waits."
        }
        @if pauses.is_empty() {
            p #no-pauses { "No route is paused." }
        } @else {
            table #pauses {
                tr { th { "Service" } th { "Route" } th { "Since" } th { "By" } th { "Why" } th {} }
                @for pause in &pauses {
                    tr data-service=(pause.service) data-route=(pause.route) {
                        td { (pause.service) } td { code { (pause.route) } } td { (time(Some(pause.at_ms))) }
                        td { (pause.by) } td { (pause.reason) }
                        td { (resume_form(&session.csrf, &pause.service, &pause.route)) }
                    }
                }
            }
        }
        h2 { "Pause a route" }
        (pause_form(&session.csrf, None))
    };
    page(StatusCode::OK, "Paused routes", Some(&session.csrf), content, Refresh::No)
}

/// The Resume button of a paused route (with the reason it asks for): posts to `/ui/pauses/resume`.
pub(super) fn resume_form(csrf: &str, service: &str, route: &str) -> Markup {
    html! {
        form.resume method="post" action="/ui/pauses/resume" data-service=(service) data-route=(route) {
            (csrf_field(csrf))
            input type="hidden" name="service" value=(service);
            input type="hidden" name="route" value=(route);
            input name="reason" placeholder="why resume" aria-label="why resume" required;
            button type="submit" class="primary" { "Resume" }
        }
    }
}

/// The form that pauses a route: of any service, or of `service` (then a hidden field). Posts to `/ui/pauses/pause`.
pub(super) fn pause_form(csrf: &str, service: Option<&str>) -> Markup {
    html! {
        form.filters.pause method="post" action="/ui/pauses/pause" id=[service.is_none().then_some("pause-form")]
            data-service=[service] {
            (csrf_field(csrf))
            @if let Some(service) = service {
                input type="hidden" name="service" value=(service);
            } @else {
                label { "Service" input name="service" required; }
            }
            label { "Route" input name="route" placeholder="source or source:type,type" required; }
            label { "Why" input name="reason" required; }
            button type="submit" class="primary" { "Pause" }
        }
    }
}

/// `POST /ui/pauses/pause`.
pub(super) async fn pause_route(State(api): State<Arc<Api>>, OperatorForm(checked): OperatorForm) -> Response {
    let written = api.replayer.pause(&request_of(&checked)).await;
    answer(&api, &checked.session, written).await
}

/// `POST /ui/pauses/resume`.
pub(super) async fn resume_route(State(api): State<Arc<Api>>, OperatorForm(checked): OperatorForm) -> Response {
    let written = api.replayer.resume(&request_of(&checked)).await;
    answer(&api, &checked.session, written).await
}

/// The pause or resume a form asks for, by the session's subject.
fn request_of(CheckedForm { form, session, .. }: &CheckedForm) -> PauseRequest {
    PauseRequest {
        service: field(form, "service").unwrap_or("").to_owned(),
        route: field(form, "route").unwrap_or("").to_owned(),
        reason: field(form, "reason").unwrap_or("").to_owned(),
        by: session.principal.subject.clone(),
    }
}

async fn answer(
    api: &Api,
    session: &Session,
    written: Result<hookline_common::control::RoutePause, crate::ops::OpError>,
) -> Response {
    match written {
        Ok(state) => {
            let what = if state.paused { "paused" } else { "resumed" };
            let notice = format!("{what} route {} of service {}", state.route, state.service);
            render(api, session, Some(&notice)).await
        }
        Err(crate::ops::OpError::BadRequest(problem)) => problem_page(&session.csrf, StatusCode::BAD_REQUEST, &problem),
        Err(error) => op_problem(&session.csrf, &error),
    }
}

//! The Routes page: which routes of which consumer services an operator has paused (who, why, since when), a
//! Resume button on each, and a form to pause one. Both forms are POSTs with the session's CSRF token and call the
//! same operations as `hookline-replayer pause` / `resume` and the API ([`crate::ops`]). Every value shown is
//! escaped.

use std::fmt::Write as _;

use hookline_common::http::Body;
use http::{Response, StatusCode};

use super::{esc, field, forms::Form, op_problem, page, problem_page, time};
use crate::{api::Api, ops::PauseRequest, session::Session};

pub(super) async fn pauses_page(api: &Api, session: &Session, notice: Option<&str>) -> Response<Body> {
    let pauses = match api.replayer.pauses().await {
        Ok(pauses) => pauses,
        Err(error) => return op_problem(&session.csrf, &error),
    };
    let csrf = esc(&session.csrf);
    let mut content = String::from("<h1>Paused routes</h1>");
    if let Some(notice) = notice {
        let _ = write!(content, r#"<p class="notice" id="pause-notice">{}</p>"#, esc(notice));
    }
    content.push_str(
        r#"<p class="muted">A paused route calls nothing: its events wait (in memory, or in its service's retry topic) and run when it is resumed, none lost, skipped or sent twice. Each service's <code>hookline_consumer_route_waiting_records</code> and <code>hookline_consumer_route_oldest_waiting_age_seconds</code> show what waits.</p>"#,
    );
    if pauses.is_empty() {
        content.push_str(r#"<p id="no-pauses">No route is paused.</p>"#);
    } else {
        content.push_str(
            r#"<table id="pauses"><tr><th>Service</th><th>Route</th><th>Since</th><th>By</th><th>Why</th><th></th></tr>"#,
        );
        for pause in &pauses {
            let _ = write!(
                content,
                r#"<tr data-service="{service}" data-route="{route}"><td>{service}</td><td><code>{route}</code></td><td>{since}</td><td>{by}</td><td>{reason}</td><td><form method="post" action="/ui/pauses/resume"><input type="hidden" name="csrf" value="{csrf}"><input type="hidden" name="service" value="{service}"><input type="hidden" name="route" value="{route}"><input name="reason" placeholder="why resume" required><button type="submit" class="primary">Resume</button></form></td></tr>"#,
                service = esc(&pause.service),
                route = esc(&pause.route),
                since = time(Some(pause.at_ms)),
                by = esc(&pause.by),
                reason = esc(&pause.reason),
            );
        }
        content.push_str("</table>");
    }
    let _ = write!(
        content,
        r#"<h2>Pause a route</h2><form class="filters" method="post" action="/ui/pauses/pause" id="pause-form"><input type="hidden" name="csrf" value="{csrf}"><label>Service<input name="service" required></label><label>Route<input name="route" placeholder="source or source:type,type" required></label><label>Why<input name="reason" required></label><button type="submit" class="primary">Pause</button></form>"#
    );
    page(StatusCode::OK, "Paused routes", Some(&session.csrf), &content, false)
}

/// `POST /ui/pauses/pause`.
pub(super) async fn pause_route(api: &Api, session: &Session, form: &Form) -> Response<Body> {
    let written = api.replayer.pause(&request_of(form)).await;
    answer(api, session, written).await
}

/// `POST /ui/pauses/resume`.
pub(super) async fn resume_route(api: &Api, session: &Session, form: &Form) -> Response<Body> {
    let written = api.replayer.resume(&request_of(form)).await;
    answer(api, session, written).await
}

fn request_of(form: &Form) -> PauseRequest {
    PauseRequest {
        service: field(form, "service").unwrap_or("").to_owned(),
        route: field(form, "route").unwrap_or("").to_owned(),
        reason: field(form, "reason").unwrap_or("").to_owned(),
        by: "console".to_owned(),
    }
}

async fn answer(
    api: &Api,
    session: &Session,
    written: Result<hookline_common::control::RoutePause, crate::ops::OpError>,
) -> Response<Body> {
    match written {
        Ok(state) => {
            let what = if state.paused { "paused" } else { "resumed" };
            let notice = format!("{what} route {} of service {}", state.route, state.service);
            pauses_page(api, session, Some(&notice)).await
        }
        Err(crate::ops::OpError::BadRequest(problem)) => problem_page(&session.csrf, StatusCode::BAD_REQUEST, &problem),
        Err(error) => op_problem(&session.csrf, &error),
    }
}

//! The console's forms: the replay and discard actions (a dry-run preview, then the confirmed run in the
//! background). Logging in is `login.rs`; the checks every state-changing form passes are `CheckedForm`.

use std::sync::Arc;

use axum::{
    extract::{Request, State},
    response::Response,
};
use hookline_common::{http::BODY_READ_TIMEOUT, wire::now_ms};
use http::StatusCode;
use http_body_util::{BodyExt, Limited};
use maud::html;

use super::{
    CheckedForm, OperatorForm,
    layout::{Refresh, csrf_field, filter_hidden, op_problem, page, problem_page, redirect, skipped_list},
};
use crate::{
    api::Api,
    filter::Filter,
    ops::{DiscardRequest, OpError, ReplayRequest, Report},
    session::Action,
};

pub(super) type Form = Vec<(String, String)>;

/// The posted form, read up to `limit` bytes within [`BODY_READ_TIMEOUT`]; `None` if larger, slower or broken.
pub(super) async fn read_form(request: Request, limit: usize) -> Option<Form> {
    let read = Limited::new(request.into_body(), limit).collect();
    let body = tokio::time::timeout(BODY_READ_TIMEOUT, read).await.ok()?.ok()?.to_bytes();
    Some(form_urlencoded::parse(&body).into_owned().collect())
}

pub(super) fn field<'a>(form: &'a Form, name: &str) -> Option<&'a str> {
    form.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str())
}

pub(super) fn filter_of(form: &Form) -> Filter {
    let get = |name: &str| field(form, name).filter(|value| !value.is_empty()).map(str::to_owned);
    Filter {
        source: get("source"),
        service: get("service"),
        event_type: get("event_type"),
        error_class: get("error_class"),
        status: get("status"),
        since: get("since"),
        until: get("until"),
        text: get("text"),
    }
}

/// What a form asks for: replay or discard, of ids or of every entry a filter matches.
struct Ask {
    action: Action,
    ids: Vec<String>,
    all: bool,
    filter: Filter,
    reason: String,
    rate: Option<f64>,
}

fn ask_of(form: &Form) -> Result<Ask, String> {
    let action = field(form, "action").and_then(Action::parse).ok_or("choose replay or discard")?;
    let ids: Vec<String> = form.iter().filter(|(key, _)| key == "ids").map(|(_, value)| value.clone()).collect();
    let all = field(form, "all") == Some("1");
    if !all && ids.is_empty() {
        return Err("select at least one entry".to_owned());
    }
    let rate = match field(form, "rate").map(str::trim).filter(|rate| !rate.is_empty()) {
        Some(rate) => Some(rate.parse::<f64>().map_err(|_| format!("`{rate}` is not a rate"))?),
        None => None,
    };
    Ok(Ask {
        action,
        ids: if all { Vec::new() } else { ids },
        all,
        filter: if all { filter_of(form) } else { Filter::default() },
        reason: field(form, "reason").unwrap_or("").trim().to_owned(),
        rate,
    })
}

async fn execute(api: &Api, ask: &Ask, by: &str, dry_run: bool) -> Result<Report, OpError> {
    match ask.action {
        Action::Replay => {
            let request = ReplayRequest {
                ids: ask.ids.clone(),
                all: ask.all,
                filter: ask.filter.clone(),
                dry_run,
                rate: ask.rate,
                force: false,
                // The console never re-drives past retention: that takes a check of the database first, and the
                // CLI or API.
                past_retention: false,
                as_event_type: None,
                by: by.to_owned(),
            };
            api.replayer.replay(&request).await
        }
        Action::Discard => {
            let request = DiscardRequest {
                ids: ask.ids.clone(),
                all: ask.all,
                filter: ask.filter.clone(),
                dry_run,
                reason: ask.reason.clone(),
                by: by.to_owned(),
            };
            api.replayer.discard(&request).await
        }
    }
}

/// `POST /ui/actions/preview`: the dry run, and the form that confirms it.
pub(super) async fn preview(
    State(api): State<Arc<Api>>,
    OperatorForm(CheckedForm { session, form, .. }): OperatorForm,
) -> Response {
    let ask = match ask_of(&form) {
        Ok(ask) => ask,
        Err(problem) => return problem_page(&session.csrf, StatusCode::BAD_REQUEST, &problem),
    };
    let report = match execute(&api, &ask, &session.principal.subject, true).await {
        Ok(report) => report,
        Err(error) => return op_problem(&session.csrf, &error),
    };
    let n = report.done.len();
    let verb = if ask.action == Action::Replay { "replay" } else { "discard" };
    let entries = if n == 1 { "entry" } else { "entries" };
    let content = html! {
        h1 { "Confirm: " (verb) " " (n) " " (entries) }
        p.notice #preview-count {
            "This will " (verb) " " strong { (n) } " " (entries) " (dry run: nothing has changed yet)."
        }
        @if ask.all {
            p.muted { "The filter is applied again when you confirm: entries that arrive meanwhile and match are included." }
        }
        @if ask.action == Action::Replay {
            p { "Rate: " (ask.rate.map_or_else(|| "as fast as Kafka takes them".to_owned(), |rate| format!("at most {rate} per second"))) "." }
        } @else {
            p { "Reason: " (ask.reason) }
        }
        @if !report.done.is_empty() {
            ul #preview-ids {
                @for id in report.done.iter().take(20) { li { code { (id) } } }
                @if n > 20 { li { "… and " (n - 20) " more" } }
            }
        }
        (skipped_list(&report, report.skipped.len()))
        @if n > 0 {
            form method="post" action="/ui/actions/run" #confirm {
                (csrf_field(&session.csrf))
                input type="hidden" name="action" value=(ask.action.as_str());
                input type="hidden" name="reason" value=(ask.reason);
                @if let Some(rate) = ask.rate { input type="hidden" name="rate" value=(rate); }
                @if ask.all {
                    input type="hidden" name="all" value="1";
                    (filter_hidden(&ask.filter))
                } @else {
                    @for id in &ask.ids { input type="hidden" name="ids" value=(id); }
                }
                div.actions {
                    button type="submit" class=(if ask.action == Action::Replay { "primary" } else { "danger" }) #confirm-button {
                        "Yes, " (verb) " " (n)
                    }
                    " "
                    a href="/ui/entries" { "Cancel" }
                }
            }
        } @else {
            p { a href="/ui/entries" { "Back to the entries" } }
        }
    };
    page(StatusCode::OK, "Confirm", Some(&session.csrf), content, Refresh::No)
}

/// `POST /ui/actions/run`: starts the confirmed action in the background and sends the browser to its page.
pub(super) async fn run(
    State(api): State<Arc<Api>>,
    OperatorForm(CheckedForm { session, form, .. }): OperatorForm,
) -> Response {
    let ask = match ask_of(&form) {
        Ok(ask) => ask,
        Err(problem) => return problem_page(&session.csrf, StatusCode::BAD_REQUEST, &problem),
    };
    if ask.action == Action::Discard && ask.reason.is_empty() {
        return problem_page(&session.csrf, StatusCode::BAD_REQUEST, "a discard needs a reason");
    }
    let id = uuid::Uuid::new_v4().simple().to_string();
    api.console.start_job(&id, ask.action, now_ms());
    let job_id = id.clone();
    let by = session.principal.subject.clone();
    // A bulk replay at a rate can take long: it runs on, and its page shows the report when it is done.
    tokio::spawn(async move {
        let outcome = execute(&api, &ask, &by, false).await.map_err(|error| match error {
            OpError::BadRequest(problem) => problem,
            other => {
                tracing::warn!(error = %other, "console action failed");
                "Kafka could not be read or written; what was done is recorded, run it again for the rest".to_owned()
            }
        });
        if let Ok(report) = &outcome {
            match ask.action {
                Action::Replay => api.metrics.replays.inc_by(report.done.len() as u64),
                Action::Discard => api.metrics.discards.inc_by(report.done.len() as u64),
            }
        }
        api.console.finish_job(&job_id, outcome);
    });
    redirect(&format!("/ui/jobs/{id}"))
}

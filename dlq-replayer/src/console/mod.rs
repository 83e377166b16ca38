//! The DLQ console: server-rendered HTML on the admin port, under `/ui/`, behind the API's tokens or single sign-on.
//!
//! - Login: a form that takes an API token, or single sign-on through an OpenID Connect provider (`oidc`); either
//!   sets a session cookie (`Secure`, `HttpOnly`, `SameSite=Strict`, path `/ui`) for a subject and a scope; sessions
//!   live in this process's memory for 12 h (a restart logs everyone out; a revoked token's sessions end). Pages
//!   need a session ([`LoggedIn`]); actions that change something also need the operate scope ([`OperatorForm`]).
//! - Every state-changing form is a POST carrying the session's CSRF token (compared in constant time), and is
//!   refused when an `Origin` header names another host; the cookie's `SameSite=Strict` is the second lock. Both
//!   checks are the [`CheckedForm`] extractor: a POST handler cannot be written without them.
//! - A strict Content-Security-Policy: nothing but this origin's own stylesheet and script, no inline code, no
//!   frames. Both assets are compiled into the binary; nothing comes from a CDN.
//! - Pages are `maud` templates: every value spliced into one is escaped by construction; markup built elsewhere
//!   goes in only as `Markup`, itself a template's output.
//! - Actions (replay, discard) always go through a dry-run preview that says how many entries they will touch,
//!   then a confirmation; the confirmed action runs in the background and its page shows the report.
//!
//! `pages` renders what a GET shows (overview, entries, one entry, a job); `flow` the overview's flow of the last
//! hour per source and per service ([`crate::flow`]); `pauses` the paused routes with their
//! Resume and Pause forms; `rejections` the gateways' recent refusals, gathered from them on request; `lookup` the
//! search box "where is event X?"; `search` the event search; `forms` handles what a POST asks (preview an action,
//! run it); `login` the login form; `oidc` single sign-on; `audit` the audit trail; `layout` the page frame,
//! headers and shared fragments; this module routes.
//!
//! Pages read the same index as the JSON API and call the same operations ([`crate::ops`]).

mod audit;
mod flow;
mod forms;
mod layout;
mod login;
mod lookup;
mod oidc;
mod pages;
mod pauses;
mod rejections;
mod search;

use std::sync::Arc;

use axum::{
    Router,
    extract::{FromRequest, FromRequestParts, Request, State},
    handler::Handler,
    response::Response,
    routing::{MethodRouter, get, post},
};
use http::{HeaderMap, Method, StatusCode, header, request::Parts};

use self::{
    forms::{Form, field, read_form},
    layout::{problem_page, redirect, respond, same_origin},
    login::login_page,
};
use crate::{
    api::Api,
    identity::Scope,
    session::{COOKIE, Session},
};

const CSS: &str = include_str!("../../assets/console.css");
const JS: &str = include_str!("../../assets/console.js");
const ICON: &str = include_str!("../../assets/favicon.svg");
const PAGE_SIZE: usize = 50;
const MAX_FORM_BYTES: usize = 4 * 1024 * 1024;

type ApiState = State<Arc<Api>>;

/// Every `/ui` route. A path not listed, or a method a path does not take, goes to [`fallback`].
pub(crate) fn routes() -> Router<Arc<Api>> {
    Router::new()
        .route("/ui/assets/console.css", page(|| async { respond(StatusCode::OK, "text/css; charset=utf-8", CSS) }))
        .route(
            "/ui/assets/console.js",
            page(|| async { respond(StatusCode::OK, "text/javascript; charset=utf-8", JS) }),
        )
        .route("/ui/assets/favicon.svg", page(|| async { respond(StatusCode::OK, "image/svg+xml", ICON) }))
        .route(
            "/ui/login",
            get(|| async { login_page(StatusCode::OK, None) }).post(login::login).head(fallback).fallback(fallback),
        )
        .route("/ui/oidc/login", page(oidc::start))
        .route("/ui/oidc/callback", page(oidc::callback))
        .route("/ui", page(pages::overview))
        .route("/ui/", page(pages::overview))
        .route("/ui/entries", page(pages::list))
        .route("/ui/entries/{*id}", page(pages::entry_page))
        .route("/ui/jobs/{*id}", page(pages::job_page))
        .route("/ui/rejections", page(rejections::rejections_page))
        .route("/ui/events", page(lookup::lookup_page))
        .route("/ui/search", page(search::search_page))
        .route("/ui/pauses", page(pauses::pauses_page))
        .route("/ui/audit", page(audit::audit_page))
        .route("/ui/logout", action(logout))
        .route("/ui/actions/preview", action(forms::preview))
        .route("/ui/actions/run", action(forms::run))
        .route("/ui/pauses/pause", action(pauses::pause_route))
        .route("/ui/pauses/resume", action(pauses::resume_route))
}

/// A page: `GET` only (`HEAD` is not answered like `GET`, as before the router).
fn page<H: Handler<T, Arc<Api>>, T: 'static>(handler: H) -> MethodRouter<Arc<Api>> {
    get(handler).head(fallback).fallback(fallback)
}

/// A form's target: `POST` only.
fn action<H: Handler<T, Arc<Api>>, T: 'static>(handler: H) -> MethodRouter<Arc<Api>> {
    post(handler).fallback(fallback)
}

/// A logged-in session, or the answer for a request without one: a `GET` is sent to the login page, anything else
/// is answered the login page with 401.
pub(crate) struct LoggedIn(pub(crate) Session);

impl FromRequestParts<Arc<Api>> for LoggedIn {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, api: &Arc<Api>) -> Result<Self, Response> {
        session_of(api, &parts.headers).map(LoggedIn).ok_or_else(|| not_logged_in(&parts.method))
    }
}

/// The request's session, unless there is none or the API token it logged in with has been revoked since (then
/// the session ends).
fn session_of(api: &Api, headers: &HeaderMap) -> Option<Session> {
    let session = api.console.session(headers)?;
    if session.token_id.as_deref().is_some_and(|id| !api.tokens.is_active(id)) {
        api.console.logout(headers);
        return None;
    }
    Some(session)
}

fn not_logged_in(method: &Method) -> Response {
    if method == Method::GET { redirect("/ui/login") } else { login_page(StatusCode::UNAUTHORIZED, None) }
}

/// A posted form that passed every check a state-changing form must: a session, a same-origin `Origin` (when
/// present), a body read within its limit and time, and the session's CSRF token (constant-time).
pub(crate) struct CheckedForm {
    pub(crate) session: Session,
    pub(crate) form: Form,
    pub(crate) headers: HeaderMap,
}

impl FromRequest<Arc<Api>> for CheckedForm {
    type Rejection = Response;

    async fn from_request(request: Request, api: &Arc<Api>) -> Result<Self, Response> {
        let Some(session) = session_of(api, request.headers()) else {
            return Err(not_logged_in(request.method()));
        };
        if !same_origin(request.headers()) {
            return Err(problem_page(&session.csrf, StatusCode::FORBIDDEN, "this form was posted from another site"));
        }
        let headers = request.headers().clone();
        let Some(form) = read_form(request, MAX_FORM_BYTES).await else {
            return Err(problem_page(&session.csrf, StatusCode::BAD_REQUEST, "the form could not be read"));
        };
        let presented = field(&form, "csrf").unwrap_or("");
        if !hookline_common::http::token_matches(presented, session.csrf.as_bytes()) {
            return Err(problem_page(
                &session.csrf,
                StatusCode::FORBIDDEN,
                "the form's CSRF token is missing or stale: reload the page",
            ));
        }
        Ok(Self { session, form, headers })
    }
}

/// A [`CheckedForm`] whose session may operate (replay, discard, pause, resume): a viewer gets 403 and nothing
/// changes.
pub(crate) struct OperatorForm(pub(crate) CheckedForm);

impl FromRequest<Arc<Api>> for OperatorForm {
    type Rejection = Response;

    async fn from_request(request: Request, api: &Arc<Api>) -> Result<Self, Response> {
        let checked = CheckedForm::from_request(request, api).await?;
        let principal = &checked.session.principal;
        if !principal.scope.allows(Scope::Operate) {
            tracing::warn!(subject = %principal.subject, scope = principal.scope.as_str(), "console action refused: scope too narrow");
            let problem = format!("`{}` may only look: this needs the operator role", principal.subject);
            return Err(problem_page(&checked.session.csrf, StatusCode::FORBIDDEN, &problem));
        }
        Ok(Self(checked))
    }
}

/// `POST /ui/logout`: ends the session and expires its cookie.
async fn logout(State(api): ApiState, checked: CheckedForm) -> Response {
    api.console.logout(&checked.headers);
    let mut response = redirect("/ui/login");
    let expired = format!("{COOKIE}=; Path=/ui; Max-Age=0; Secure; HttpOnly; SameSite=Strict");
    if let Ok(value) = header::HeaderValue::from_str(&expired) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// A `/ui` path no route took, or a method its route does not take: without a session, the login (as for any
/// page); a POST passes the form checks first and is then "no such action"; other methods 405; a GET "no such page".
pub(crate) async fn fallback(State(api): ApiState, request: Request) -> Response {
    let Some(session) = session_of(&api, request.headers()) else { return not_logged_in(request.method()) };
    if request.method() == Method::POST {
        return match CheckedForm::from_request(request, &api).await {
            Ok(checked) => problem_page(&checked.session.csrf, StatusCode::NOT_FOUND, "no such action"),
            Err(refused) => refused,
        };
    }
    if request.method() != Method::GET {
        return problem_page(&session.csrf, StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
    }
    problem_page(&session.csrf, StatusCode::NOT_FOUND, "no such page")
}

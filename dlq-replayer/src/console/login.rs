//! Logging in to the console: the one form anyone who reaches the listener may post, so it costs what it must
//! and no more. Its body is read up to [`MAX_LOGIN_BYTES`] within the body timeout. The right token always logs in;
//! an address that keeps sending wrong ones gets 429 instead of 401 for a while (`login_throttle.rs`).

use std::{sync::Arc, time::Instant};

use axum::{
    extract::{Request, State},
    response::Response,
};
use hookline_common::http::PeerAddr;
use http::{StatusCode, header};
use maud::html;

use super::{
    forms::{field, read_form},
    layout::{Refresh, page, redirect, same_origin},
};
use crate::{
    api::{Api, Authenticated},
    session::{COOKIE, SESSION_TTL},
};

/// The login form holds one token: a few KiB is plenty, and all an unauthenticated client may make us buffer.
pub(super) const MAX_LOGIN_BYTES: usize = 4 * 1024;

pub(super) fn login_page(status: StatusCode, problem: Option<&str>) -> Response {
    let content = html! {
        div.login {
            h1 { "Log in" }
            @if let Some(problem) = problem { p.problem #login-problem { (problem) } }
            p { a.primary #sso href="/ui/oidc/login" { "Log in with single sign-on" } }
            form method="post" action="/ui/login" {
                label for="token" { "Replayer API token" }
                input #token name="token" type="password" autocomplete="current-password" required autofocus;
                button.primary type="submit" { "Log in" }
            }
            p.muted { "Your API token (" code { "hookline-replayer tokens create" } "), the same one the JSON API takes." }
        }
    };
    page(status, "Log in", None, content, Refresh::No)
}

/// `POST /ui/login`.
pub(super) async fn login(State(api): State<Arc<Api>>, request: Request) -> Response {
    if !same_origin(request.headers()) {
        return login_page(StatusCode::FORBIDDEN, Some("this form was posted from another site"));
    }
    let peer = request.extensions().get::<PeerAddr>().map(|peer| peer.0.ip());
    let Some(form) = read_form(request, MAX_LOGIN_BYTES).await else {
        return login_page(StatusCode::BAD_REQUEST, Some("the form could not be read"));
    };
    // The right token always logs in: wrong ones from the same address (a shared proxy) lock no one out.
    let presented = field(&form, "token").unwrap_or("");
    let principal = match api.authenticate(presented) {
        Authenticated::As(principal) => principal,
        Authenticated::NotYet => {
            let mut response =
                login_page(StatusCode::SERVICE_UNAVAILABLE, Some("the API tokens are still being read; try again"));
            response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            return response;
        }
        Authenticated::Nobody => {
            api.metrics.auth_failures.with_label_values(&["console"]).inc();
            if api.console.logins.failed("console", peer, Instant::now()) {
                let mut response = login_page(
                    StatusCode::TOO_MANY_REQUESTS,
                    Some("too many wrong tokens from this address; try later"),
                );
                response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("300"));
                return response;
            }
            return login_page(StatusCode::UNAUTHORIZED, Some("wrong token"));
        }
    };
    let token_id = crate::identity::tokens::id_of(presented).map(str::to_owned);
    tracing::info!(subject = %principal.subject, scope = principal.scope.as_str(), "console login");
    let (id, _) = api.console.login(principal, token_id);
    let mut response = redirect("/ui/");
    let cookie =
        format!("{COOKIE}={id}; Path=/ui; Max-Age={}; Secure; HttpOnly; SameSite=Strict", SESSION_TTL.as_secs());
    if let Ok(value) = header::HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

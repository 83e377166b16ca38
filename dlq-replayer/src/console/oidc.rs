//! Logging in through the OpenID Connect provider ([`crate::identity::oidc`]): `GET /ui/oidc/login` sends the
//! browser to the provider with a fresh state, PKCE challenge and nonce, the state also set in a cookie
//! (`HttpOnly`, `Secure`, `SameSite=Lax` so that the provider's redirect back carries it, path `/ui/oidc`, 10
//! minutes); `GET /ui/oidc/callback` takes the code only when its state is the cookie's (a login started in this
//! browser), exchanges it, checks the ID token, and opens a session with the subject and the role the token gives.
//! The session cookie is the console's (`SameSite=Strict`): the callback answers a page of this origin that moves on
//! to the console, so the first page the browser asks for with it is a same-site navigation.

use std::sync::Arc;

use axum::{
    extract::{RawQuery, State},
    response::Response,
};
use http::{HeaderMap, StatusCode, header};
use maud::html;

use super::{
    layout::{Refresh, page, redirect},
    login::login_page,
};
use crate::{
    api::Api,
    session::{COOKIE, SESSION_TTL},
};

/// The cookie that binds a login at the provider to this browser.
const STATE_COOKIE: &str = "hookline-oidc";

/// `GET /ui/oidc/login`.
pub(super) async fn start(State(api): State<Arc<Api>>) -> Response {
    let Some(oidc) = api.oidc.as_ref() else {
        return login_page(StatusCode::NOT_FOUND, Some("single sign-on is not configured"));
    };
    match oidc.begin().await {
        Ok((state, url)) => {
            let mut response = redirect(&url);
            let cookie = format!(
                "{STATE_COOKIE}={state}; Path=/ui/oidc; Max-Age={}; Secure; HttpOnly; SameSite=Lax",
                crate::identity::oidc::PENDING_TTL.as_secs()
            );
            if let Ok(value) = header::HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
            response
        }
        Err(error) => {
            tracing::warn!(error = %error, "cannot start a single sign-on login");
            login_page(StatusCode::BAD_GATEWAY, Some("the identity provider cannot be reached; try again"))
        }
    }
}

/// `GET /ui/oidc/callback?code=&state=` (or `error=`).
pub(super) async fn callback(State(api): State<Arc<Api>>, headers: HeaderMap, RawQuery(query): RawQuery) -> Response {
    let Some(oidc) = api.oidc.as_ref() else {
        return login_page(StatusCode::NOT_FOUND, Some("single sign-on is not configured"));
    };
    let query: Vec<(String, String)> =
        form_urlencoded::parse(query.unwrap_or_default().as_bytes()).into_owned().collect();
    let get = |name: &str| query.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str());
    if let Some(error) = get("error") {
        tracing::info!(error, "the identity provider refused the login");
        return login_page(StatusCode::UNAUTHORIZED, Some("the identity provider did not log you in"));
    }
    let (Some(code), Some(state)) = (get("code"), get("state")) else {
        return login_page(StatusCode::BAD_REQUEST, Some("the identity provider's answer is incomplete"));
    };
    let cookie_state = cookie(&headers, STATE_COOKIE).unwrap_or_default();
    if !hookline_common::http::token_matches(state, cookie_state.as_bytes()) {
        return login_page(StatusCode::FORBIDDEN, Some("this login was not started in this browser: start again"));
    }
    let principal = match oidc.finish(state, code).await {
        Ok(principal) => principal,
        Err(error) => {
            tracing::warn!(error = %error, "single sign-on login refused");
            api.metrics.auth_failures.with_label_values(&["console"]).inc();
            return login_page(StatusCode::FORBIDDEN, Some(&error.to_string()));
        }
    };
    tracing::info!(subject = %principal.subject, scope = principal.scope.as_str(), "console login (single sign-on)");
    let subject = principal.subject.clone();
    let (id, _) = api.console.login(principal, None);
    let content = html! {
        h1 { "Logged in" }
        p { "As " code #subject { (subject) } ". " a href="/ui/" { "Continue to the console" } }
    };
    let mut response = page(StatusCode::OK, "Logged in", None, content, Refresh::GoTo("/ui/"));
    let cookies = [
        format!("{COOKIE}={id}; Path=/ui; Max-Age={}; Secure; HttpOnly; SameSite=Strict", SESSION_TTL.as_secs()),
        format!("{STATE_COOKIE}=; Path=/ui/oidc; Max-Age=0; Secure; HttpOnly; SameSite=Lax"),
    ];
    for cookie in cookies {
        if let Ok(value) = header::HeaderValue::from_str(&cookie) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    response
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get_all(header::COOKIE).iter().filter_map(|value| value.to_str().ok()).find_map(|cookies| {
        cookies.split(';').find_map(|pair| pair.trim().strip_prefix(name)?.strip_prefix('=').map(str::to_owned))
    })
}

//! Logging in to the console: the one form anyone who reaches the listener may post, so it costs what it must
//! and no more. Its body is read up to [`MAX_LOGIN_BYTES`] within the body timeout, and an address that keeps
//! sending wrong tokens is refused (429) for a while without its token being looked at. Wrong tokens are logged as
//! one line per interval with the count held back, never one line per attempt.

use std::{
    collections::HashMap,
    net::IpAddr,
    sync::Mutex,
    time::{Duration, Instant},
};

use hookline_common::{
    http::{Body, PeerAddr},
    telemetry::LogThrottle,
};
use http::{Request, Response, StatusCode, header};
use hyper::body::Incoming;

use super::{esc, forms::field, forms::read_form, page, redirect, same_origin};
use crate::{
    api::Api,
    session::{COOKIE, SESSION_TTL},
};

/// The login form holds one token: a few KiB is plenty, and all an unauthenticated client may make us buffer.
pub(super) const MAX_LOGIN_BYTES: usize = 4 * 1024;
/// Wrong tokens an address may send per [`FAILURE_WINDOW`] before its logins are refused until the window ends.
const MAX_FAILURES: u32 = 10;
const FAILURE_WINDOW: Duration = Duration::from_secs(300);
/// Addresses tracked at most. When full (after dropping ended windows), an address not tracked yet is refused:
/// the table never fails open.
const MAX_TRACKED: usize = 10_000;

/// Wrong-token counts per address (an IPv6 address by its /64, what one host can easily hold).
#[derive(Debug)]
pub struct LoginThrottle {
    failures: Mutex<HashMap<IpAddr, (Instant, u32)>>,
    log: LogThrottle,
}

impl Default for LoginThrottle {
    fn default() -> Self {
        Self { failures: Mutex::default(), log: LogThrottle::new(Duration::from_secs(60)) }
    }
}

impl LoginThrottle {
    /// Whether `peer` may try a token now.
    fn admits(&self, peer: Option<IpAddr>, now: Instant) -> bool {
        let Some(peer) = peer.map(key) else { return true };
        let mut failures = self.failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match failures.get(&peer) {
            Some((since, count)) if now.duration_since(*since) < FAILURE_WINDOW => *count < MAX_FAILURES,
            Some(_) => true,
            None if failures.len() < MAX_TRACKED => true,
            None => {
                failures.retain(|_, (since, _)| now.duration_since(*since) < FAILURE_WINDOW);
                failures.len() < MAX_TRACKED
            }
        }
    }

    /// Counts a wrong token from `peer`, and logs a line if one is due.
    fn failed(&self, peer: Option<IpAddr>, now: Instant) {
        if let Some(peer) = peer {
            let mut failures = self.failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let full = failures.len() >= MAX_TRACKED;
            match failures.get_mut(&key(peer)) {
                Some((since, count)) if now.duration_since(*since) < FAILURE_WINDOW => *count += 1,
                Some(entry) => *entry = (now, 1),
                None if !full => {
                    failures.insert(key(peer), (now, 1));
                }
                None => {}
            }
        }
        if let Some(held_back) = self.log.admit("console login refused", now) {
            let peer = peer.map(|peer| peer.to_string()).unwrap_or_default();
            tracing::warn!(peer = %peer, more_since_last_line = held_back, "console login with a wrong token");
        }
    }
}

/// The address a throttle counts: IPv4 as is, IPv6 by its /64.
fn key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !((1_u128 << 64) - 1)).into()),
        },
    }
}

pub(super) fn login_page(status: StatusCode, problem: Option<&str>) -> Response<Body> {
    let problem =
        problem.map(|text| format!(r#"<p class="problem" id="login-problem">{}</p>"#, esc(text))).unwrap_or_default();
    let content = format!(
        r#"<div class="login"><h1>Log in</h1>{problem}
<form method="post" action="/ui/login"><label for="token">Replayer API token</label>
<input id="token" name="token" type="password" autocomplete="current-password" required autofocus>
<button class="primary" type="submit">Log in</button></form>
<p class="muted">The token is the replayer's <code>api_token</code>, the same one the JSON API takes.</p></div>"#
    );
    page(status, "Log in", None, &content, false)
}

pub(super) async fn login(api: &Api, request: Request<Incoming>) -> Response<Body> {
    if !same_origin(request.headers()) {
        return login_page(StatusCode::FORBIDDEN, Some("this form was posted from another site"));
    }
    let peer = request.extensions().get::<PeerAddr>().map(|peer| peer.0.ip());
    if !api.console.logins.admits(peer, Instant::now()) {
        let mut response =
            login_page(StatusCode::TOO_MANY_REQUESTS, Some("too many wrong tokens from this address; try later"));
        response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("300"));
        return response;
    }
    let Some(form) = read_form(request, MAX_LOGIN_BYTES).await else {
        return login_page(StatusCode::BAD_REQUEST, Some("the form could not be read"));
    };
    if !api.token_matches(field(&form, "token").unwrap_or("")) {
        api.console.logins.failed(peer, Instant::now());
        return login_page(StatusCode::UNAUTHORIZED, Some("wrong token"));
    }
    let (id, _) = api.console.login();
    let mut response = redirect("/ui/");
    let cookie =
        format!("{COOKIE}={id}; Path=/ui; Max-Age={}; Secure; HttpOnly; SameSite=Strict", SESSION_TTL.as_secs());
    if let Ok(value) = header::HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_refused_after_its_wrong_tokens_until_its_window_ends() {
        let throttle = LoginThrottle::default();
        let now = Instant::now();
        let peer = Some("203.0.113.7".parse().unwrap());
        for _ in 0..MAX_FAILURES {
            assert!(throttle.admits(peer, now));
            throttle.failed(peer, now);
        }
        assert!(!throttle.admits(peer, now), "refused after {MAX_FAILURES} wrong tokens");
        assert!(throttle.admits(Some("203.0.113.8".parse().unwrap()), now), "another address is not");
        assert!(throttle.admits(peer, now + FAILURE_WINDOW), "the window ended");
    }

    #[test]
    fn an_ipv6_host_is_one_address_by_its_64() {
        let throttle = LoginThrottle::default();
        let now = Instant::now();
        for n in 0..MAX_FAILURES {
            throttle.failed(Some(format!("2001:db8:1:2::{n:x}").parse().unwrap()), now);
        }
        assert!(!throttle.admits(Some("2001:db8:1:2::ffff".parse().unwrap()), now));
        assert!(throttle.admits(Some("2001:db8:1:3::1".parse().unwrap()), now));
    }

    #[test]
    fn a_full_table_refuses_new_addresses_rather_than_forget_the_old() {
        let throttle = LoginThrottle::default();
        let now = Instant::now();
        for n in 0..MAX_TRACKED {
            let ip = std::net::Ipv4Addr::from(0x0a00_0000_u32 + u32::try_from(n).unwrap());
            throttle.failed(Some(IpAddr::V4(ip)), now);
        }
        assert!(!throttle.admits(Some("192.0.2.1".parse().unwrap()), now), "fails closed");
        assert!(throttle.admits(Some("192.0.2.1".parse().unwrap()), now + FAILURE_WINDOW), "ended windows make room");
    }
}

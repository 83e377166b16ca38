//! The console's state: who is logged in (sessions, each with its CSRF token) and the background actions it
//! started. Kept in this process's memory: a restart logs everyone out.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use http::{HeaderMap, header};

use crate::ops::Report;

/// The session cookie's name.
pub(crate) const COOKIE: &str = "hookline-session";
pub(crate) const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// The console's state: logged-in sessions and background actions.
#[derive(Debug, Default)]
pub struct Console {
    sessions: Mutex<HashMap<String, Session>>,
    /// Wrong tokens per address at the login form.
    pub(crate) logins: crate::console::login::LoginThrottle,
    pub(crate) jobs: Arc<Mutex<HashMap<String, Job>>>,
}

#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub(crate) csrf: String,
    expires: Instant,
}

#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub(crate) action: Action,
    pub(crate) started_ms: i64,
    pub(crate) outcome: Option<Result<Report, String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Replay,
    Discard,
}

impl Action {
    pub(crate) fn parse(text: &str) -> Option<Self> {
        match text {
            "replay" => Some(Self::Replay),
            "discard" => Some(Self::Discard),
            _ => None,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Replay => "replay",
            Self::Discard => "discard",
        }
    }
}

pub(crate) fn random_token() -> String {
    format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

impl Console {
    pub(crate) fn session(&self, headers: &HeaderMap) -> Option<Session> {
        let id = cookie_session(headers)?;
        let mut sessions = self.sessions.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match sessions.get(&id) {
            Some(session) if session.expires > Instant::now() => Some(session.clone()),
            Some(_) => {
                sessions.remove(&id);
                None
            }
            None => None,
        }
    }

    pub(crate) fn login(&self) -> (String, Session) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = Instant::now();
        sessions.retain(|_, session| session.expires > now);
        let id = random_token();
        let session = Session { csrf: random_token(), expires: now + SESSION_TTL };
        sessions.insert(id.clone(), session.clone());
        (id, session)
    }

    pub(crate) fn logout(&self, headers: &HeaderMap) {
        if let Some(id) = cookie_session(headers) {
            self.sessions.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(&id);
        }
    }
}

pub(crate) fn cookie_session(headers: &HeaderMap) -> Option<String> {
    headers.get_all(header::COOKIE).iter().filter_map(|value| value.to_str().ok()).find_map(|cookies| {
        cookies.split(';').find_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('=').map(str::to_owned))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, "a=1; hookline-session=abc; b=2".parse().unwrap());
        assert_eq!(cookie_session(&headers).as_deref(), Some("abc"));
    }
}

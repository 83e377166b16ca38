//! The console's state: who is logged in (sessions, each with its CSRF token) and the background actions it
//! started. Kept in this process's memory: a restart logs everyone out.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use http::{HeaderMap, header};

use crate::{identity::Principal, ops::Report};

/// The session cookie's name.
pub(crate) const COOKIE: &str = "hookline-session";
pub(crate) const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// The console's state: logged-in sessions and background actions.
#[derive(Debug, Default)]
pub struct Console {
    sessions: Mutex<HashMap<String, Session>>,
    /// Wrong tokens per address at the login form.
    pub(crate) logins: crate::login_throttle::LoginThrottle,
    pub(crate) jobs: Arc<Mutex<HashMap<String, Job>>>,
}

#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub(crate) csrf: String,
    /// Who logged in: every action of the session is recorded under its subject, and allowed by its scope.
    pub(crate) principal: Principal,
    /// The API token it logged in with, if it did: the session ends when the token is revoked.
    pub(crate) token_id: Option<String>,
    expires: Instant,
}

/// A console action running or done, as its page shows it: the report keeps the first [`JOB_IDS_KEPT`] ids of each
/// list and their totals, so a bulk replay of a million entries does not stay in memory for good.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub(crate) action: Action,
    pub(crate) started_ms: i64,
    pub(crate) outcome: Option<Result<Report, String>>,
    /// Entries done and skipped, before the report's lists were cut.
    pub(crate) done_total: usize,
    pub(crate) skipped_total: usize,
}

/// Jobs kept at most; past it, the oldest finished ones go first.
const MAX_JOBS: usize = 100;
/// Ids of each list a finished job keeps (its page shows this many).
pub(crate) const JOB_IDS_KEPT: usize = 50;

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

    pub(crate) fn login(&self, principal: Principal, token_id: Option<String>) -> (String, Session) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = Instant::now();
        sessions.retain(|_, session| session.expires > now);
        let id = random_token();
        let session = Session { csrf: random_token(), principal, token_id, expires: now + SESSION_TTL };
        sessions.insert(id.clone(), session.clone());
        (id, session)
    }

    /// Records a new running job, first dropping the oldest finished jobs past [`MAX_JOBS`].
    pub(crate) fn start_job(&self, id: &str, action: Action, started_ms: i64) {
        let mut jobs = self.jobs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        while jobs.len() >= MAX_JOBS {
            let oldest_finished = jobs
                .iter()
                .filter(|(_, job)| job.outcome.is_some())
                .min_by_key(|(_, job)| job.started_ms)
                .map(|(id, _)| id.clone());
            match oldest_finished {
                Some(id) => jobs.remove(&id),
                // Every kept job still runs: they end on their own.
                None => break,
            };
        }
        let job = Job { action, started_ms, outcome: None, done_total: 0, skipped_total: 0 };
        jobs.insert(id.to_owned(), job);
    }

    /// Records how job `id` ended, its report cut to [`JOB_IDS_KEPT`] ids per list.
    pub(crate) fn finish_job(&self, id: &str, outcome: Result<Report, String>) {
        let mut jobs = self.jobs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(job) = jobs.get_mut(id) {
            job.outcome = Some(outcome.map(|mut report| {
                job.done_total = report.done.len();
                job.skipped_total = report.skipped.len();
                report.done.truncate(JOB_IDS_KEPT);
                report.skipped.truncate(JOB_IDS_KEPT);
                report
            }));
        }
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
    fn finished_jobs_are_pruned_and_their_reports_cut() {
        let console = Console::default();
        let report =
            |n: usize| Report { dry_run: false, done: (0..n).map(|i| i.to_string()).collect(), skipped: vec![] };
        for n in 0..MAX_JOBS + 20 {
            let id = format!("job-{n}");
            console.start_job(&id, Action::Replay, i64::try_from(n).unwrap());
            if n != 3 {
                console.finish_job(&id, Ok(report(1000)));
            }
        }
        let jobs = console.jobs.lock().unwrap();
        assert_eq!(jobs.len(), MAX_JOBS);
        assert!(jobs.contains_key("job-3"), "a running job is never dropped");
        assert!(!jobs.contains_key("job-0") && jobs.contains_key(&format!("job-{}", MAX_JOBS + 19)));
        let kept = &jobs[&format!("job-{}", MAX_JOBS + 19)];
        assert_eq!(kept.done_total, 1000);
        assert_eq!(kept.outcome.as_ref().unwrap().as_ref().unwrap().done.len(), JOB_IDS_KEPT);
    }

    #[test]
    fn session_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, "a=1; hookline-session=abc; b=2".parse().unwrap());
        assert_eq!(cookie_session(&headers).as_deref(), Some("abc"));
    }
}

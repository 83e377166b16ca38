//! Rejection and 503 logs, bounded: a probe or a broker outage can make every request fail, and one line per
//! request (millions of lines, hundreds of MB in minutes) drowns the lines that matter. In each interval the first
//! [`DETAILED_PER_INTERVAL`] failures are logged in full; the rest are counted per source and code and logged as
//! one summary line each when the interval ends. Metrics still count every request. Answered handshakes (most need
//! no credential) have a log of their own, bounded the same way.

use std::{
    collections::BTreeMap,
    sync::Mutex,
    time::{Duration, Instant},
};

/// Failures logged line by line in each interval, before the rest are only counted.
pub const DETAILED_PER_INTERVAL: u32 = 20;
/// Length of an interval; also how often the summary is written.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// Whether a failure gets its own line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Log,
    Count,
}

/// Counts of the failures not logged in one interval, by source and code.
pub type Summary = Vec<(String, &'static str, u64)>;

#[derive(Debug)]
pub struct RejectionLog {
    window: Mutex<Window>,
}

#[derive(Debug)]
struct Window {
    started: Instant,
    n_logged: u32,
    held_back: BTreeMap<(String, &'static str), u64>,
}

impl Default for RejectionLog {
    fn default() -> Self {
        Self::new(Instant::now())
    }
}

impl RejectionLog {
    pub fn new(now: Instant) -> Self {
        Self { window: Mutex::new(Window { started: now, n_logged: 0, held_back: BTreeMap::new() }) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Window> {
        self.window.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records one failure at `now`; returns whether to log it, and the previous interval's summary when this
    /// failure starts a new interval.
    pub fn record(&self, source: &str, code: &'static str, now: Instant) -> (Verdict, Summary) {
        let mut window = self.lock();
        let summary = if now.duration_since(window.started) >= INTERVAL { window.restart(now) } else { Vec::new() };
        if window.n_logged < DETAILED_PER_INTERVAL {
            window.n_logged += 1;
            return (Verdict::Log, summary);
        }
        *window.held_back.entry((source.to_owned(), code)).or_default() += 1;
        (Verdict::Count, summary)
    }

    /// The summary of an interval that has ended by `now` (empty otherwise), starting the next one.
    pub fn take_summary(&self, now: Instant) -> Summary {
        let mut window = self.lock();
        if now.duration_since(window.started) >= INTERVAL { window.restart(now) } else { Vec::new() }
    }
}

impl Window {
    fn restart(&mut self, now: Instant) -> Summary {
        self.started = now;
        self.n_logged = 0;
        std::mem::take(&mut self.held_back).into_iter().map(|((source, code), n)| (source, code, n)).collect()
    }
}

/// Writes a summary: one line per source and code.
pub fn log_summary(summary: &Summary) {
    for (source, code, n_requests) in summary {
        tracing::warn!(
            source = %source,
            code,
            n_requests,
            interval_s = INTERVAL.as_secs(),
            "requests refused without a line each (rate-limited log; metrics count every one)"
        );
    }
}

/// Writes a summary of the answered handshakes not logged line by line (`code` is the handshake's kind).
pub fn log_handshake_summary(summary: &Summary) {
    for (source, kind, n_requests) in summary {
        tracing::info!(
            source = %source,
            handshake = kind,
            n_requests,
            interval_s = INTERVAL.as_secs(),
            "handshakes answered without a line each (rate-limited log; metrics count every one)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejection_logs_are_summarised_per_interval() {
        let start = Instant::now();
        let log = RejectionLog::new(start);
        let mut n_lines = 0;
        for n in 0..10_000u32 {
            let code = if n % 2 == 0 { "signature_mismatch" } else { "broker_unavailable" };
            let (verdict, summary) = log.record("github", code, start + Duration::from_millis(u64::from(n % 1000)));
            assert!(summary.is_empty(), "one interval");
            n_lines += u32::from(verdict == Verdict::Log);
        }
        assert_eq!(n_lines, DETAILED_PER_INTERVAL, "a flood costs a bounded number of lines");
        assert!(log.take_summary(start + Duration::from_secs(1)).is_empty(), "the interval has not ended");
        let summary = log.take_summary(start + INTERVAL);
        let total: u64 = summary.iter().map(|(_, _, n)| n).sum();
        assert_eq!(total, u64::from(10_000 - DETAILED_PER_INTERVAL), "every failure not logged is counted");
        assert_eq!(summary.len(), 2, "one line per source and code: {summary:?}");
        let (verdict, summary) = log.record("github", "signature_mismatch", start + INTERVAL * 2);
        assert_eq!(verdict, Verdict::Log, "a new interval logs again");
        assert!(summary.is_empty());
    }
}

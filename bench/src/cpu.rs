//! CPU time spent by processes, read from `/proc/<pid>/stat` (user + system, in clock ticks): what a run cost each
//! party (the database's processes, the consumer, the bench itself) per event, a figure that holds on a machine
//! where every party shares the same cores and the rate alone says little about who was the bottleneck.

use std::time::Duration;

/// Linux's `USER_HZ`, which `/proc/<pid>/stat` counts in on every architecture it supports.
const TICKS_PER_S: u64 = 100;

/// User + system CPU time of one process, `None` once it is gone.
pub fn of_pid(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat).map(|(_, ticks)| ticks_to_duration(ticks))
}

/// User + system CPU time of every process whose command name (`comm`) is `name`, e.g. `postgres` for the
/// postmaster and every backend. A process that exits between two samples takes its time with it: sample while
/// the connections that do the work are open.
pub fn of_command(name: &str) -> Duration {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Duration::ZERO };
    let ticks = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_str().is_some_and(|pid| pid.bytes().all(|b| b.is_ascii_digit())))
        .filter_map(|entry| std::fs::read_to_string(entry.path().join("stat")).ok())
        .filter_map(|stat| parse_stat(&stat).filter(|(comm, _)| *comm == name).map(|(_, ticks)| ticks))
        .sum();
    ticks_to_duration(ticks)
}

/// This process's own CPU time.
pub fn of_self() -> Duration {
    of_pid(std::process::id()).unwrap_or_default()
}

fn ticks_to_duration(ticks: u64) -> Duration {
    Duration::from_millis(ticks * 1000 / TICKS_PER_S)
}

/// `(comm, utime + stime)` from a `stat` line: `pid (comm) state ppid ...`, utime and stime the 14th and 15th
/// fields. `comm` may hold spaces and parentheses, so the fields are counted after its last `)`.
fn parse_stat(stat: &str) -> Option<(&str, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?;
    let mut fields = stat.get(close + 1..)?.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((comm, utime + stime))
}

/// CPU time of the database, the measured process and the bench at one instant; two of them make a window.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub database: Duration,
    pub process: Duration,
    pub bench: Duration,
}

impl Sample {
    /// `process` is the pid measured besides the database (the consumer), if any.
    pub fn now(database_command: &str, process: Option<u32>) -> Self {
        Self {
            database: of_command(database_command),
            process: process.and_then(of_pid).unwrap_or_default(),
            bench: of_self(),
        }
    }

    /// Microseconds of CPU per event spent by each party between `self` and `later`.
    pub fn per_event(&self, later: &Sample, events: u64) -> CpuPerEvent {
        let per = |before: Duration, after: Duration| {
            after.saturating_sub(before).as_secs_f64() * 1e6 / (events.max(1) as f64)
        };
        CpuPerEvent {
            database_us: per(self.database, later.database),
            process_us: per(self.process, later.process),
            bench_us: per(self.bench, later.bench),
        }
    }
}

/// CPU microseconds per event, by party.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct CpuPerEvent {
    /// Every process named like the database's (`postgres`): the postmaster, the backends, the WAL writer.
    pub database_us: f64,
    /// The measured process (the consumer), 0 when there is none.
    pub process_us: f64,
    /// The bench process itself (the ceiling's clients live here).
    pub bench_us: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_are_read_after_the_last_parenthesis() {
        let line = "4242 (postgres: a (b)) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 1 0 1 1 1";
        assert_eq!(parse_stat(line), Some(("postgres: a (b)", 325)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_is_seen_spending_time() {
        let before = of_self();
        let mut x = 0_u64;
        let started = std::time::Instant::now();
        while of_self() == before {
            assert!(started.elapsed() < Duration::from_secs(10), "10 s of spinning never showed in /proc/self/stat");
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
    }
}

//! Each source's dedupe window (`[sources.<name>] dedupe_ttl_s`): its own, else its provider's default from the
//! provider's documented retry schedule, else `redis.dedupe_ttl_s`. A window shorter than the provider's retry
//! schedule is allowed (a deliberate trade of memory for a late retry processed twice) but warned about at load.

use std::collections::HashMap;

use super::ConsumerConfig;

/// A provider's documented automatic retry schedule: how long after the first attempt it may still retry
/// (docs/providers.md, "Retry schedules", gives each source).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetrySchedule {
    /// The provider, as a source's `provider` (the gateway's `scheme`) names it.
    pub provider: &'static str,
    /// Its last automatic retry comes at most this long after the first attempt, seconds.
    pub retries_for_s: u64,
}

/// The schedules hookline can source; any other provider takes `redis.dedupe_ttl_s`. GitHub is not here: it
/// does not retry on its own, and a person may redeliver any delivery later, so it keeps the global window.
pub const RETRY_SCHEDULES: &[RetrySchedule] = &[
    // Live mode: "for up to three days with an exponential back off".
    RetrySchedule { provider: "stripe", retries_for_s: 3 * 24 * 3600 },
    // "up to eight times in a four-hour period".
    RetrySchedule { provider: "shopify", retries_for_s: 4 * 3600 },
];

/// Added to a retry schedule for a provider's default window: a late retry, a backlog between the two copies.
pub const SCHEDULE_MARGIN_S: u64 = 3600;

/// The retry schedule of `provider`, if hookline knows it.
pub fn schedule(provider: &str) -> Option<RetrySchedule> {
    RETRY_SCHEDULES.iter().copied().find(|schedule| schedule.provider == provider)
}

/// A source's window when set neither by the source nor by a known provider.
fn provider_default(provider: Option<&str>, global_s: u64) -> u64 {
    provider.and_then(schedule).map_or(global_s, |schedule| schedule.retries_for_s + SCHEDULE_MARGIN_S)
}

impl ConsumerConfig {
    /// The windows of the sources whose window is not `redis.dedupe_ttl_s`.
    pub fn source_windows(&self) -> HashMap<String, u64> {
        let global_s = self.redis.dedupe_ttl_s;
        self.sources
            .iter()
            .map(|(name, source)| {
                let window =
                    source.dedupe_ttl_s.unwrap_or_else(|| provider_default(source.provider.as_deref(), global_s));
                (name.clone(), window)
            })
            .filter(|(_, window)| *window != global_s)
            .collect()
    }

    /// One line per source whose window is shorter than its provider's retry schedule, naming both: a retry
    /// after the window is processed again.
    pub fn window_warnings(&self) -> Vec<String> {
        let mut warnings: Vec<String> = self
            .sources
            .iter()
            .filter_map(|(name, source)| {
                let schedule = schedule(source.provider.as_deref()?)?;
                let window = source.dedupe_ttl_s?;
                (window < schedule.retries_for_s).then(|| {
                    format!(
                        "sources.{name}.dedupe_ttl_s = {window} s is shorter than {}'s retry schedule ({} s): a retry \
                         after {window} s is processed again",
                        schedule.provider, schedule.retries_for_s
                    )
                })
            })
            .collect();
        warnings.sort();
        warnings
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SourceRulesConfig;

    fn config(sources: &[(&str, Option<&str>, Option<u64>)]) -> ConsumerConfig {
        let mut config = ConsumerConfig::default();
        for (name, provider, window) in sources {
            let rules = SourceRulesConfig {
                provider: provider.map(str::to_owned),
                dedupe_ttl_s: *window,
                ..SourceRulesConfig::default()
            };
            config.sources.insert((*name).to_owned(), rules);
        }
        config
    }

    #[test]
    fn a_source_takes_its_own_window_else_its_providers_else_the_global_one() {
        let config = config(&[
            ("payments", Some("stripe"), None),
            ("shop", Some("shopify"), None),
            ("short", Some("shopify"), Some(2)),
            ("repos", Some("github"), None),
            ("other", None, None),
        ]);
        let windows = config.source_windows();
        assert_eq!(windows.get("payments"), Some(&(3 * 24 * 3600 + 3600)));
        assert_eq!(windows.get("shop"), Some(&(5 * 3600)));
        assert_eq!(windows.get("short"), Some(&2));
        assert_eq!(windows.get("repos"), None, "GitHub keeps the global window");
        assert_eq!(windows.get("other"), None);
    }

    #[test]
    fn a_window_shorter_than_the_providers_retry_schedule_is_warned_about_naming_both() {
        let config = config(&[("short", Some("shopify"), Some(2)), ("long", Some("shopify"), Some(5 * 3600))]);
        assert_eq!(
            config.window_warnings(),
            ["sources.short.dedupe_ttl_s = 2 s is shorter than shopify's retry schedule (14400 s): a retry after 2 s \
              is processed again"]
        );
    }
}

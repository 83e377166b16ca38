//! Which entries an operation applies to. The CLI flags and the HTTP query parameters are the same names.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::index::{Criteria, Status};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Filter {
    pub source: Option<String>,
    /// The consumer service that dead-lettered the entry (`hookline-dlq-service`, or for an entry written before
    /// services had names its consumer group).
    pub service: Option<String>,
    pub event_type: Option<String>,
    /// `poison` or `retryable_exhausted`.
    pub error_class: Option<String>,
    /// `new`, `replayed`, `replay_overdue`, `replay_failed`, `succeeded`, `failed_again`, `discarded`, `unverified`.
    pub status: Option<String>,
    /// Last failure at or after this time: ms since the epoch, an RFC 3339 time, or an age such as `2h`.
    pub since: Option<String>,
    /// Last failure before this time (same forms as `since`).
    pub until: Option<String>,
    /// Case-insensitive text to find in the error message.
    pub text: Option<String>,
}

impl Filter {
    /// Parses the times and the status; the names are matched against the index ([`crate::index::Index::compile`]).
    pub fn compile(&self) -> Result<Criteria, FilterError> {
        let status = self
            .status
            .as_deref()
            .filter(|text| !text.is_empty())
            .map(|text| Status::parse(text).ok_or_else(|| FilterError::UnknownStatus(text.to_owned())))
            .transpose()?;
        let named = |value: &Option<String>| value.clone().filter(|value| !value.is_empty());
        Ok(Criteria {
            source: named(&self.source),
            service: named(&self.service),
            event_type: named(&self.event_type),
            error_class: named(&self.error_class),
            status,
            since_ms: named(&self.since).as_deref().map(parse_time_ms).transpose()?,
            until_ms: named(&self.until).as_deref().map(parse_time_ms).transpose()?,
            text: named(&self.text),
        })
    }
}

/// `1700000000000` (ms), `2026-12-02T10:00:00Z`, or an age before now: `90s`, `15m`, `2h`, `3d`.
fn parse_time_ms(text: &str) -> Result<i64, FilterError> {
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms);
    }
    let to_ms = |time: SystemTime| {
        time.duration_since(UNIX_EPOCH).map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)).unwrap_or(0)
    };
    if let Ok(ms) = hookline_common::time::parse_rfc3339_weak_ms(text) {
        return Ok(ms);
    }
    if let Ok(age) = humantime::parse_duration(text) {
        return Ok(to_ms(SystemTime::now().checked_sub(age).unwrap_or(UNIX_EPOCH)));
    }
    Err(FilterError::NotATime(text.to_owned()))
}

/// Why a filter does not compile: said to the operator as a bad request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    #[error("unknown status `{0}` (known: {known})", known = known_statuses())]
    UnknownStatus(String),
    #[error("`{0}` is not a time: give ms since the epoch, an RFC 3339 time, or an age such as 2h")]
    NotATime(String),
}

fn known_statuses() -> String {
    let known: Vec<&str> = Status::ALL.iter().map(|s| s.as_str()).collect();
    known.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_in_every_form() {
        assert_eq!(parse_time_ms("1700000000000"), Ok(1_700_000_000_000));
        assert_eq!(parse_time_ms("2023-11-14T22:13:20Z"), Ok(1_700_000_000_000));
        let two_hours_ago = parse_time_ms("2h").unwrap();
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
        assert!((now - two_hours_ago - 7_200_000).abs() < 5_000);
        assert!(parse_time_ms("yesterday-ish").is_err());
    }

    #[test]
    fn unknown_status_is_refused() {
        let filter = Filter { status: Some("gone".into()), ..Filter::default() };
        assert!(filter.compile().unwrap_err().to_string().contains("unknown status"));
    }
}

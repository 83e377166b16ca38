//! Times as providers, operators and log lines write them: RFC 3339 in UTC, read into and written from ms since
//! the Unix epoch (the unit every record, index entry and config value carries). The calendar is the `time`
//! crate's; this module only decides which texts are accepted, so every caller refuses the same ones.
//!
//! Two forms are read. The machine form ([`parse_rfc3339_ms`]) is what a provider's header or a config key holds:
//! `2026-06-01T10:00:00Z`, any number of fraction digits, the zone `Z` or `+00:00`. The human form
//! ([`parse_rfc3339_weak_ms`]), for a CLI argument, a search box or a JSON value, also takes a space for the `T`
//! and no zone at all (read as UTC). Both refuse any other offset (a local time is never guessed at), a
//! lowercase `t` or `z`, an empty fraction, and times before 1970 or after 9999.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ::time::OffsetDateTime;
use ::time::format_description::well_known::Rfc3339 as Rfc3339Format;

/// The last millisecond a time is written for: 9999-12-31T23:59:59.999Z.
const MAX_MS: i64 = 253_402_300_799_999;

/// Why a text is not a time this module reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not `YYYY-MM-DD` then `T` (or, in the human form, a space) then the time of day.
    #[error("not an RFC 3339 time like 2026-06-01T00:00:00Z")]
    Shape,
    /// A zone other than `Z` or `+00:00` (or, in the machine form, none).
    #[error("not a UTC time: the zone must be Z (or +00:00)")]
    Zone,
    /// The date or time of day does not exist (a 30th of February, hour 24, an empty fraction).
    #[error("not a valid RFC 3339 time: {0}")]
    Invalid(#[source] ::time::error::Parse),
    /// Before 1970-01-01T00:00:00Z.
    #[error("before 1970")]
    BeforeEpoch,
}

/// The machine form: `2026-06-01T10:00:00Z`, `2019-11-16T10:11:12.634234626Z`, `...+00:00`. Fractions beyond the
/// millisecond are dropped (truncated, never rounded up).
pub fn parse_rfc3339_ms(text: &str) -> Result<i64, ParseError> {
    parse(text, Form::Machine)
}

/// The human form: the machine form, or a space for the `T`, or no zone (UTC): `2026-06-01 10:00:00`.
pub fn parse_rfc3339_weak_ms(text: &str) -> Result<i64, ParseError> {
    parse(text, Form::Human)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    Machine,
    Human,
}

fn parse(text: &str, form: Form) -> Result<i64, ParseError> {
    // `time` takes any byte between the date and the time of day, as RFC 3339's note allows: only `T` (and a
    // space from a person) are taken here.
    match text.as_bytes().get(10) {
        Some(b'T') => {}
        Some(b' ') if form == Form::Human => {}
        _ => return Err(ParseError::Shape),
    }
    let offset_given = text.get(19..).is_some_and(|rest| rest.contains(['+', '-']));
    let zoned: std::borrow::Cow<'_, str> = if text.ends_with('Z') || text.ends_with("+00:00") {
        text.into()
    } else if form == Form::Human && !offset_given {
        // No zone: UTC.
        format!("{text}Z").into()
    } else {
        return Err(ParseError::Zone);
    };
    let at = OffsetDateTime::parse(&zoned, &Rfc3339Format).map_err(ParseError::Invalid)?;
    let nanos = at.unix_timestamp_nanos();
    if nanos < 0 {
        return Err(ParseError::BeforeEpoch);
    }
    // At most 9999-12-31: well inside i64 ms.
    Ok(i64::try_from(nanos / 1_000_000).unwrap_or(MAX_MS))
}

/// How many fraction digits a written time carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// `2026-06-01T10:00:00Z`
    Seconds,
    /// `2026-06-01T10:00:00.123Z`
    Millis,
    /// `2026-06-01T10:00:00.123456Z` (the log lines')
    Micros,
    /// `2026-06-01T10:00:00.123456789Z`
    Nanos,
}

/// A time written as RFC 3339 UTC with a fixed number of fraction digits, by `Display` (no allocation: a log
/// line writes it straight into its buffer). Times before 1970 are written as the epoch and times after 9999 as
/// its last instant, as a record's missing (`-1`) timestamp always has been.
#[derive(Debug, Clone, Copy)]
pub struct Rfc3339 {
    at: OffsetDateTime,
    precision: Precision,
}

impl Rfc3339 {
    /// The time `ms` since the epoch.
    pub fn of_ms(ms: i64, precision: Precision) -> Self {
        let clamped = ms.clamp(0, MAX_MS);
        let at = OffsetDateTime::from_unix_timestamp_nanos(i128::from(clamped) * 1_000_000)
            .unwrap_or(OffsetDateTime::UNIX_EPOCH);
        Self { at, precision }
    }

    /// A system time (the clock's `now`, to the nanosecond).
    pub fn of_time(time: SystemTime, precision: Precision) -> Self {
        let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
        let last = Duration::from_millis(MAX_MS.unsigned_abs() + 1) - Duration::from_nanos(1);
        let at = OffsetDateTime::UNIX_EPOCH + since.min(last);
        Self { at, precision }
    }
}

impl fmt::Display for Rfc3339 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = self.at;
        write!(
            f,
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
            at.year(),
            u8::from(at.month()),
            at.day(),
            at.hour(),
            at.minute(),
            at.second()
        )?;
        match self.precision {
            Precision::Seconds => {}
            Precision::Millis => write!(f, ".{:03}", at.millisecond())?,
            Precision::Micros => write!(f, ".{:06}", at.microsecond())?,
            Precision::Nanos => write!(f, ".{:09}", at.nanosecond())?,
        }
        f.write_str("Z")
    }
}

/// `2026-06-01T10:00:00Z` for `ms` since the epoch.
pub fn format_rfc3339_seconds(ms: i64) -> String {
    Rfc3339::of_ms(ms, Precision::Seconds).to_string()
}

/// `2026-06-01T10:00:00.123Z` for `ms` since the epoch.
pub fn format_rfc3339_millis(ms: i64) -> String {
    Rfc3339::of_ms(ms, Precision::Millis).to_string()
}

/// The time `ms` since the epoch as a [`SystemTime`] (before the epoch for a negative `ms`).
pub fn system_time(ms: i64) -> SystemTime {
    let magnitude = Duration::from_millis(ms.unsigned_abs());
    if ms >= 0 { UNIX_EPOCH + magnitude } else { UNIX_EPOCH - magnitude }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_machine_form_reads_utc_times_with_any_fraction() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:01.5Z"), Ok(1_500));
        assert_eq!(parse_rfc3339_ms("2019-11-16T10:11:12.634234626Z"), Ok(1_573_899_072_634));
        assert_eq!(parse_rfc3339_ms("2021-05-12T20:33:44Z"), Ok(1_620_851_624_000));
        assert_eq!(parse_rfc3339_ms("2021-05-12T20:33:44+00:00"), Ok(1_620_851_624_000));
        assert_eq!(parse_rfc3339_ms("2023-08-18T11:30:44.163948Z"), Ok(1_692_358_244_163));
        // Digits past the nanosecond are read and dropped; ms are truncated, not rounded.
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00.999999999999Z"), Ok(999));
        assert_eq!(parse_rfc3339_ms("9999-12-31T23:59:59.999Z"), Ok(MAX_MS));
    }

    #[test]
    fn leap_days_follow_the_gregorian_rules() {
        assert_eq!(parse_rfc3339_ms("2024-02-29T00:00:00Z"), Ok(1_709_164_800_000));
        assert_eq!(parse_rfc3339_ms("2000-02-29T00:00:00Z"), Ok(951_782_400_000));
        for day in ["2023-02-29T00:00:00Z", "2100-02-29T00:00:00Z", "2024-02-30T00:00:00Z", "2024-04-31T00:00:00Z"] {
            assert!(matches!(parse_rfc3339_ms(day), Err(ParseError::Invalid(_))), "{day}");
        }
        assert_eq!(format_rfc3339_seconds(1_709_164_800_000), "2024-02-29T00:00:00Z");
        assert_eq!(format_rfc3339_seconds(951_782_400_000 + 86_400_000), "2000-03-01T00:00:00Z");
    }

    #[test]
    fn a_leap_second_is_read_only_where_one_can_fall() {
        // The last instant before the next minute, as `time` reads it.
        assert_eq!(parse_rfc3339_ms("2016-12-31T23:59:60Z"), Ok(1_483_228_799_999));
        assert!(parse_rfc3339_ms("2016-12-15T10:00:60Z").is_err());
    }

    #[test]
    fn the_machine_form_refuses_what_is_not_utc_rfc_3339() {
        for text in [
            "",
            "yesterday",
            "2019-11-16 10:11:12Z",
            "2019-11-16x10:11:12Z",
            "2019-11-16t10:11:12Z",
            "2019-11-16T10:11:12z",
            "2019-11-16T10:11:12",
            "2019-11-16T10:11Z",
            "2019-11-16T10:11:12.Z",
            "2019-11-16T10:11:12+02:00",
            "2019-11-16T10:11:12-00:00",
            "2019-11-16T24:00:00Z",
            "2019-13-01T00:00:00Z",
            "2019-11-16T10:11:12ZZ",
            "2019-11-16T10:11:12+00:00Z",
            "12019-11-16T10:11:12Z",
            " 2019-11-16T10:11:12Z",
        ] {
            assert!(parse_rfc3339_ms(text).is_err(), "{text:?}");
        }
    }

    #[test]
    fn times_before_1970_are_refused() {
        assert_eq!(parse_rfc3339_ms("1969-12-31T23:59:59.999Z"), Err(ParseError::BeforeEpoch));
        assert_eq!(parse_rfc3339_weak_ms("0001-01-01 00:00:00"), Err(ParseError::BeforeEpoch));
    }

    #[test]
    fn the_human_form_also_takes_a_space_and_no_zone() {
        assert_eq!(parse_rfc3339_weak_ms("2021-05-12T20:33:44Z"), Ok(1_620_851_624_000));
        assert_eq!(parse_rfc3339_weak_ms("2021-05-12 20:33:44"), Ok(1_620_851_624_000));
        assert_eq!(parse_rfc3339_weak_ms("2021-05-12T20:33:44.25"), Ok(1_620_851_624_250));
        assert_eq!(parse_rfc3339_weak_ms("2021-05-12 20:33:44+00:00"), Ok(1_620_851_624_000));
        // An offset is never read as UTC, with or without a fraction before it.
        assert_eq!(parse_rfc3339_weak_ms("2021-05-12T20:33:44+05:00"), Err(ParseError::Zone));
        assert!(parse_rfc3339_weak_ms("2021-05-12T20:33:44.5+05:00").is_err());
        assert!(parse_rfc3339_weak_ms("2021-05-12").is_err());
        assert!(parse_rfc3339_weak_ms("2021-05-12 20:33").is_err());
        assert!(parse_rfc3339_weak_ms("2h").is_err());
    }

    #[test]
    fn times_are_written_at_a_fixed_precision() {
        let ms = 1_573_899_072_634;
        assert_eq!(format_rfc3339_seconds(ms), "2019-11-16T10:11:12Z");
        assert_eq!(format_rfc3339_millis(ms), "2019-11-16T10:11:12.634Z");
        assert_eq!(Rfc3339::of_ms(ms, Precision::Micros).to_string(), "2019-11-16T10:11:12.634000Z");
        let time = UNIX_EPOCH + Duration::new(1_573_899_072, 634_234_626);
        assert_eq!(Rfc3339::of_time(time, Precision::Nanos).to_string(), "2019-11-16T10:11:12.634234626Z");
        assert_eq!(Rfc3339::of_time(time, Precision::Micros).to_string(), "2019-11-16T10:11:12.634234Z");
        assert_eq!(format_rfc3339_millis(0), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn times_outside_1970_to_9999_are_written_at_the_nearest_end() {
        assert_eq!(format_rfc3339_millis(-1), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_rfc3339_millis(i64::MIN), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_rfc3339_millis(i64::MAX), "9999-12-31T23:59:59.999Z");
        let before = UNIX_EPOCH - Duration::from_secs(5);
        assert_eq!(Rfc3339::of_time(before, Precision::Seconds).to_string(), "1970-01-01T00:00:00Z");
        let after = UNIX_EPOCH + Duration::from_secs(u64::MAX / 4);
        assert_eq!(Rfc3339::of_time(after, Precision::Nanos).to_string(), "9999-12-31T23:59:59.999999999Z");
    }

    #[test]
    fn system_time_is_ms_from_the_epoch_either_way() {
        assert_eq!(system_time(1_500), UNIX_EPOCH + Duration::from_millis(1_500));
        assert_eq!(system_time(-1_500), UNIX_EPOCH - Duration::from_millis(1_500));
    }

    proptest! {
        #[test]
        fn what_is_written_reads_back(ms in 0..=MAX_MS) {
            prop_assert_eq!(parse_rfc3339_ms(&format_rfc3339_millis(ms)), Ok(ms));
            prop_assert_eq!(parse_rfc3339_weak_ms(&format_rfc3339_millis(ms).replace('T', " ")), Ok(ms));
            prop_assert_eq!(parse_rfc3339_ms(&format_rfc3339_seconds(ms)), Ok(ms - ms % 1000));
        }
    }
}

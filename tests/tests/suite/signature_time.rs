//! The signature schemes read a provider's RFC 3339 timestamp with their own parser (the `signature` crate needs
//! nothing of the runtime), and the runtime reads config and operator times with `hookline_common::time`: for every
//! UTC text ending in `Z` the two must agree, or a timestamp accepted in one place would be refused in the other.

use hookline_common::time::{Precision, Rfc3339, parse_rfc3339_ms};
use hookline_signature::twitch;

/// The year 9999's last millisecond.
const MAX_MS: i64 = 253_402_300_799_999;

#[test]
fn the_schemes_read_every_utc_time_as_the_runtime_does() {
    // A fixed pseudo-random walk over 1970..=9999 at every precision, plus the ends.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut times = vec![0, 1, 999, 1_000, MAX_MS];
    for _ in 0..20_000 {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        times.push(i64::try_from(state >> 16).expect("48 bits") % (MAX_MS + 1));
    }
    for ms in times {
        for precision in [Precision::Seconds, Precision::Millis, Precision::Micros, Precision::Nanos] {
            let text = Rfc3339::of_ms(ms, precision).to_string();
            assert_eq!(twitch::parse_rfc3339_ms(&text), parse_rfc3339_ms(&text).ok(), "{text}");
            assert!(twitch::parse_rfc3339_ms(&text).is_some(), "{text}");
        }
    }
}

#[test]
fn the_schemes_refuse_what_the_runtime_refuses() {
    for text in [
        "",
        "Z",
        "2019-11-16 10:11:12Z",
        "2019-11-16x10:11:12Z",
        "2019-11-16t10:11:12Z",
        "2019-11-16T10:11Z",
        "2019-11-16T10:11:12.Z",
        "2019-11-16T24:00:00Z",
        "2019-13-01T00:00:00Z",
        "2023-02-29T00:00:00Z",
        "2100-02-29T00:00:00Z",
        "2019-11-16T10:11:12ZZ",
        "2019-11-16T10:11:12+00:00Z",
        "12019-11-16T10:11:12Z",
        " 2019-11-16T10:11:12Z",
        "1969-12-31T23:59:59.999Z",
        "0001-01-01T00:00:00Z",
        "2016-12-15T10:00:60Z",
        // Read by both: a leap second where one can fall, and digits past the nanosecond.
        "2016-12-31T23:59:60Z",
        "1970-01-01T00:00:00.999999999999Z",
    ] {
        assert_eq!(twitch::parse_rfc3339_ms(text), parse_rfc3339_ms(text).ok(), "{text:?}");
    }
}

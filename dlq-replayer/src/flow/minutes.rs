//! The samples of the last hour turned into per-minute values: a counter's increase within each minute (summed
//! over the processes that report it), and a gauge's highest value within each minute.
//!
//! A counter's increase is taken between two successive successful readings of one process, and counted in the
//! minute of the later one. A value lower than the one before is a restarted process: its whole value is the
//! increase (as Prometheus's `increase()` reads a reset). A series absent from the earlier reading had not been
//! incremented yet, so its whole value is the increase too. A process that could not be read leaves a gap, and
//! its next reading is compared with its last good one: what happened in between lands in the later minute.

use std::collections::BTreeMap;

/// The minutes charted: the last hour, the current minute last.
pub const MINUTES: usize = 60;
pub const MINUTE_MS: i64 = 60_000;

/// The start of the first charted minute, for a view at `now_ms`.
pub fn first_minute_ms(now_ms: i64) -> i64 {
    (now_ms.div_euclid(MINUTE_MS) - (MINUTES as i64 - 1)) * MINUTE_MS
}

/// The chart slot of an instant, if it falls within the charted hour.
pub fn slot(at_ms: i64, first_minute_ms: i64) -> Option<usize> {
    usize::try_from((at_ms - first_minute_ms).div_euclid(MINUTE_MS)).ok().filter(|&slot| slot < MINUTES)
}

/// Adds one process's counter increases per minute to `into`, from its successful readings in time order.
pub fn add_increases<K: Ord + Clone>(
    into: &mut BTreeMap<K, Vec<u64>>,
    readings: &[(i64, &BTreeMap<K, f64>)],
    first_minute_ms: i64,
) {
    for pair in readings.windows(2) {
        let ((_, before), (at_ms, after)) = (pair[0], pair[1]);
        let Some(slot) = slot(at_ms, first_minute_ms) else { continue };
        for (key, &value) in after {
            let earlier = before.get(key).copied().unwrap_or(0.0);
            let increase = if value >= earlier { value - earlier } else { value };
            if increase > 0.0 {
                into.entry(key.clone()).or_insert_with(|| vec![0; MINUTES])[slot] += increase.round() as u64;
            }
        }
    }
}

/// A gauge's highest value in each minute (`None`: no reading in that minute).
pub fn highest_per_minute(points: &[(i64, i64)], first_minute_ms: i64) -> Vec<Option<i64>> {
    let mut minutes = vec![None; MINUTES];
    for &(at_ms, value) in points {
        if let Some(slot) = slot(at_ms, first_minute_ms) {
            let highest: &mut Option<i64> = &mut minutes[slot];
            *highest = Some(highest.map_or(value, |seen: i64| seen.max(value)));
        }
    }
    minutes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(pairs: &[(&'static str, f64)]) -> BTreeMap<&'static str, f64> {
        pairs.iter().copied().collect()
    }

    #[test]
    fn increases_land_in_the_minute_of_the_later_reading_and_a_reset_counts_its_whole_value() {
        let first = first_minute_ms(10 * MINUTE_MS + 5_000);
        assert_eq!(first, -49 * MINUTE_MS, "the current minute is the last slot");
        let minute = |n: i64, s: i64| first + n * MINUTE_MS + s * 1000;
        let (a, b, c, d) = (
            counters(&[("ok", 10.0)]),
            counters(&[("ok", 14.0), ("refused", 2.0)]),
            counters(&[("ok", 3.0), ("refused", 2.0)]),
            counters(&[("ok", 5.0), ("refused", 2.0)]),
        );
        let readings = [(minute(57, 10), &a), (minute(58, 40), &b), (minute(59, 0), &c), (minute(59, 30), &d)];
        let mut into = BTreeMap::new();
        add_increases(&mut into, &readings, first);
        assert_eq!(&into["ok"][57..], [0, 4, 3 + 2], "the first reading has no increase; a reset counts 3");
        assert_eq!(&into["refused"][57..], [0, 2, 0], "a series new since the last reading counts whole");
        assert_eq!(into["ok"][..57].iter().sum::<u64>(), 0);
        // A second process adds to the same minutes.
        add_increases(&mut into, &[(minute(59, 1), &a), (minute(59, 2), &b)], first);
        assert_eq!(&into["ok"][57..], [0, 4, 9]);
    }

    #[test]
    fn a_gauge_keeps_its_highest_value_per_minute_and_minutes_without_a_reading_stay_empty() {
        let first = first_minute_ms(100 * MINUTE_MS);
        let at = |n: i64| first + n * MINUTE_MS;
        let minutes = highest_per_minute(&[(at(58), 3), (at(58) + 30_000, 9), (at(59), 1), (first - 1, 50)], first);
        assert_eq!(&minutes[57..], [None, Some(9), Some(1)]);
        assert!(minutes[..57].iter().all(Option::is_none), "a reading before the hour is left out");
    }
}

//! Pacing of replays and re-processing runs (`--rate`).

use std::time::Duration;

/// Spaces replays evenly: at most `rate` per second, the first at once.
#[derive(Debug)]
pub struct RateLimiter {
    interval: Duration,
    next: Option<tokio::time::Instant>,
}

impl RateLimiter {
    pub fn per_second(rate: f64) -> Self {
        Self { interval: Duration::from_secs_f64(1.0 / rate), next: None }
    }

    pub async fn acquire(&mut self) {
        let now = tokio::time::Instant::now();
        let at = self.next.map_or(now, |next| next.max(now));
        tokio::time::sleep_until(at).await;
        self.next = Some(at + self.interval);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_rate_limiter_grants_at_most_rate_per_second() {
        let mut limiter = RateLimiter::per_second(4.0);
        let started = tokio::time::Instant::now();
        let mut granted_in_first_second = 0;
        for _ in 0..10 {
            limiter.acquire().await;
            if started.elapsed() < Duration::from_secs(1) {
                granted_in_first_second += 1;
            }
        }
        // Virtual time: counted, not timed. Four in the first second (at 0, 250, 500, 750 ms).
        assert_eq!(granted_in_first_second, 4);
        assert_eq!(started.elapsed(), Duration::from_millis(2250));
    }
}

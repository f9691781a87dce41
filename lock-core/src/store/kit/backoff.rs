//! Pauses between reconnect attempts, shared by the networked stores.
//!
//! A reconnect loop that pauses only after *failed* attempts spins when the
//! server (or a proxy in front of it) accepts each connection and drops it at
//! once: every attempt "succeeds", and the loop reconnects hundreds of times
//! a second, waking every waiter each time. [`Backoff`] grows the pause on
//! every attempt, failed or not, and shrinks it back only once a connection
//! has stayed up long enough to call it healthy.

use std::time::Duration;

/// The growing pause between reconnect attempts.
#[derive(Debug)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    healthy: Duration,
    next: Duration,
}

impl Backoff {
    /// Pauses from `min`, doubling up to `max`; a connection that stays up
    /// for `healthy` starts them from `min` again.
    pub fn new(min: Duration, max: Duration, healthy: Duration) -> Self {
        Backoff {
            min,
            max,
            healthy,
            next: min,
        }
    }

    /// The pause before the next attempt, with up to 50% jitter so many
    /// processes reconnecting at once spread out; the one after is doubled.
    pub fn next_pause(&mut self) -> Duration {
        let pause = self.next;
        self.next = (self.next * 2).min(self.max);
        pause + pause.mul_f64(rand::random::<f64>() / 2.0)
    }

    /// A connection ended after being up for `lasted`: if that was long
    /// enough to call it healthy, the next pause starts from the minimum.
    pub fn ended_after(&mut self, lasted: Duration) {
        if lasted >= self.healthy {
            self.next = self.min;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_millis(50);
    const MAX: Duration = Duration::from_secs(1);
    const HEALTHY: Duration = Duration::from_secs(10);

    // A server that drops each connection at once must see fewer and fewer
    // attempts, never a steady stream of fast ones.
    #[test]
    fn pauses_double_up_to_the_maximum_whether_or_not_attempts_succeed() {
        let mut backoff = Backoff::new(MIN, MAX, HEALTHY);
        let mut floor = MIN;
        for attempt in 0..10 {
            let pause = backoff.next_pause();
            assert!(
                pause >= floor && pause <= floor + floor / 2,
                "attempt {attempt}: {pause:?} should be {floor:?} plus at most half again"
            );
            // The connection came up and was dropped at once: not healthy.
            backoff.ended_after(Duration::from_millis(1));
            floor = (floor * 2).min(MAX);
        }
    }

    // After a connection that stayed up a while, an outage is new: the first
    // attempt comes quickly again.
    #[test]
    fn a_healthy_connection_resets_the_pause() {
        let mut backoff = Backoff::new(MIN, MAX, HEALTHY);
        for _ in 0..8 {
            backoff.next_pause();
        }
        backoff.ended_after(HEALTHY);
        let pause = backoff.next_pause();
        assert!(pause < MIN * 2, "back to the minimum: {pause:?}");
    }
}

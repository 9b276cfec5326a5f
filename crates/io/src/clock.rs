//! The only real clock of softverbs.
//!
//! Everything below `io` takes time as an argument ([`Nanos`]); this module owns
//! the one place that reads the monotonic system clock. A [`Clock`] counts
//! nanoseconds since its creation (the driver's start), so `0` is a valid time
//! and values never go backwards.

use std::time::{Duration, Instant};

/// Time in nanoseconds since the driver's start.
pub type Nanos = u64;

/// A monotonic clock reading [`Nanos`] since it was created. `Copy`: every copy
/// shares the same origin.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    start: Instant,
}

impl Clock {
    /// A clock whose origin (time 0) is now.
    pub fn new() -> Self {
        Clock {
            start: Instant::now(),
        }
    }

    /// Nanoseconds since the origin (saturates after ~584 years).
    pub fn now(&self) -> Nanos {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// How long from now until `deadline`; zero if it has passed.
    pub fn until(&self, deadline: Nanos) -> Duration {
        Duration::from_nanos(deadline.saturating_sub(self.now()))
    }

    /// The `Instant` that `t` stands for.
    pub fn instant(&self, t: Nanos) -> Instant {
        self.start + Duration::from_nanos(t)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_and_until() {
        let c = Clock::new();
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
        assert_eq!(c.until(0), Duration::ZERO);
        assert!(c.until(c.now() + 1_000_000_000) > Duration::from_millis(500));
        assert!(c.instant(10) >= c.instant(0));
    }
}

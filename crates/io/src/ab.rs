//! In-run A/B, the driver's half (spec/performance.md §26; `scripts/ab.sh`).
//!
//! Owns: when the variant flips ([`tick`]), the post-to-post intervals of
//! each variant ([`at_post`]), and their report at exit ([`report`]).
//! Promise: without the `ab` feature every function here does nothing.
//!
//! Why: on this 2-core machine a benchmark moves by a third from one run
//! to the next with the machine's phases, so two builds compared in
//! alternated runs hide changes of a few per cent. Both variants in one
//! run, switched every 2²⁶ ns (about 67 ms) by the wall clock, which every
//! process of the host reads alike, see the same phases. Code under test
//! asks `lanes::ab::variant()`.

/// Sets `lanes::ab::variant` from the wall clock's window (each post and
/// each progress pass calls it).
#[inline]
pub fn tick() {
    #[cfg(feature = "ab")]
    lanes::ab::set(on::window());
}

/// A post (`ibv_post_send`): the interval since the thread's last post
/// counts for the variant if both fell in one window.
#[inline]
pub fn at_post() {
    #[cfg(feature = "ab")]
    on::at_post();
}

/// At exit: a line per variant on stderr (`softverbs ab: A n=… median=…
/// mean=… ns`), if anything was measured.
pub fn report() {
    #[cfg(feature = "ab")]
    on::report();
}

#[cfg(feature = "ab")]
mod on {
    use std::io::Write;
    use std::sync::{Mutex, PoisonError};
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    /// The window: 2^26 ns.
    const WINDOW_BITS: u32 = 26;
    /// A longer interval is a pause of the program, not a post's.
    const LONGEST: Duration = Duration::from_millis(5);

    struct Log {
        last: Option<(Instant, bool)>,
        intervals: [Vec<u64>; 2],
    }

    static LOG: Mutex<Log> = Mutex::new(Log {
        last: None,
        intervals: [Vec::new(), Vec::new()],
    });

    pub(super) fn window() -> bool {
        let ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        (ns >> WINDOW_BITS) & 1 == 1
    }

    pub(super) fn at_post() {
        let b = window();
        lanes::ab::set(b);
        let now = Instant::now();
        let mut log = LOG.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((then, was)) = log.last {
            let d = now - then;
            if was == b && d < LONGEST {
                log.intervals[usize::from(b)].push(d.as_nanos() as u64);
            }
        }
        log.last = Some((now, b));
    }

    pub(super) fn report() {
        let log = LOG.lock().unwrap_or_else(PoisonError::into_inner);
        let mut err = std::io::stderr().lock();
        for (name, v) in ["A", "B"].iter().zip(&log.intervals) {
            if v.is_empty() {
                continue;
            }
            let mut v = v.clone();
            v.sort_unstable();
            let mean = v.iter().sum::<u64>() as f64 / v.len() as f64;
            let _ = writeln!(
                err,
                "softverbs ab: {name} n={} median={} mean={mean:.1} ns",
                v.len(),
                v[v.len() / 2]
            );
        }
    }
}

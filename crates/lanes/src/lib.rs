//! Lanes: a small index per thread, and values striped by it.
//!
//! Owns: which lane a thread is in ([`lane`]) and [`Striped`], one value
//! per lane on cache lines of its own. Promise: a thread always gets the
//! same lane; threads get lanes round robin as they first ask, so the
//! first [`LANES`] threads each have one of their own (more share).
//!
//! Why: a device's counters and clock are written by every thread that
//! sends or receives. One word that two cores write in turn moves between
//! them at every write (about 45 ns each under load on the 2-core machine,
//! against 8 ns for a word of its own: spec/performance.md §23), and the
//! data path wrote a dozen such words per message. A striped value is
//! written in the writer's lane only; a reader that wants the whole sums
//! (or takes the largest of) the lanes.
//!
//! No unsafe, no dependencies: the stripes are plain values behind their
//! own padding; what they hold (atomics) is the holder's choice.

#![forbid(unsafe_code)]

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// How many lanes there are.
pub const LANES: usize = 8;

/// The lane the next thread gets.
static NEXT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's lane, once it asked (`LANES`: not yet).
    static LANE: Cell<usize> = const { Cell::new(LANES) };
}

/// The calling thread's lane (`0..LANES`), the same at every call.
#[inline]
pub fn lane() -> usize {
    LANE.with(|l| {
        let mine = l.get();
        if mine < LANES {
            return mine;
        }
        let mine = next_lane(&NEXT);
        l.set(mine);
        mine
    })
}

/// The next lane of the round robin `next` keeps.
fn next_lane(next: &AtomicUsize) -> usize {
    next.fetch_add(1, Relaxed) % LANES
}

/// A value on cache lines of its own (128 bytes: the adjacent-line
/// prefetcher pairs lines), so that threads writing it do not slow down
/// threads reading its neighbours, and the other way round.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Padded<T>(pub T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> std::ops::DerefMut for Padded<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

/// One `T` per lane, each on lines of its own.
#[derive(Debug, Default)]
pub struct Striped<T>([Padded<T>; LANES]);

impl<T> Striped<T> {
    /// A stripe per lane, each made by `f`.
    pub fn from_fn(mut f: impl FnMut() -> T) -> Self {
        Striped(std::array::from_fn(|_| Padded(f())))
    }

    /// The calling thread's stripe (what it writes).
    #[inline]
    pub fn mine(&self) -> &T {
        &self.0[lane()]
    }

    /// Every stripe (what a reader of the whole goes through).
    pub fn all(&self) -> impl Iterator<Item = &T> {
        self.0.iter().map(|p| &p.0)
    }

    /// Every stripe, for a holder with `&mut` (no other thread writes).
    pub fn all_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.0.iter_mut().map(|p| &mut p.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn a_thread_keeps_its_lane_and_threads_get_lanes_round_robin() {
        let first = lane();
        assert_eq!(lane(), first, "the same lane at every call");
        let other = std::thread::spawn(|| (lane(), lane())).join().unwrap();
        assert_eq!(other.0, other.1, "another thread's lane is its own too");
        let next = AtomicUsize::new(0);
        let got: Vec<usize> = (0..=LANES).map(|_| next_lane(&next)).collect();
        let want: Vec<usize> = (0..LANES).chain([0]).collect();
        assert_eq!(got, want, "the first LANES askers each get one; then they share");
    }

    #[test]
    fn stripes_sit_on_lines_of_their_own_and_sum_to_the_whole() {
        let s: Striped<AtomicU64> = Striped::default();
        let a = std::ptr::from_ref(&s.0[0]) as usize;
        let b = std::ptr::from_ref(&s.0[1]) as usize;
        assert_eq!(b - a, 128, "one stripe per 128 bytes");
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let s = &s;
                move || {
                    for _ in 0..1000 {
                        s.mine().fetch_add(1, Relaxed);
                    }
                }
            })
            .collect();
        std::thread::scope(|sc| {
            for t in threads {
                sc.spawn(t);
            }
        });
        s.mine().fetch_add(5, Relaxed);
        let total: u64 = s.all().map(|c| c.load(Relaxed)).sum();
        assert_eq!(total, 4005);
    }
}

//! Time stamps at named points of the data path: where one turn of a
//! ping-pong spends its time, step by step (spec/performance.md §33;
//! `scripts/stamps.sh`).
//!
//! Owns: the points ([`Point`]), each thread's last point and its time,
//! and for each pair of points one thread passed in a row, a histogram of
//! the intervals. Promise: without the `stamps` feature [`at`] and
//! [`report`] are empty and fold away, so the points cost nothing in a
//! normal build. With it, [`report`] prints at exit each pair's count,
//! median and 99th percentile.
//!
//! Why: a profile's samples say which functions take a thread's time, not
//! which steps lie on the path from one end's post to the other end's
//! answer, nor how long each takes when it does (a cpu-clock profile of a
//! spinning program is mostly the spin, and a rare stall of 200 µs weighs
//! as much as a thousand turns). Each pair's median is a step's typical
//! cost, stamps included (about 40–60 ns each here: a clock reading, a
//! thread-local, an atomic add).
//!
//! Why in this crate: the protocol core, the driver and the C ABI all
//! depend on it.

/// A named point of the data path. Two points one thread passes in a row
/// make a step; the report names steps by their points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Point {
    /// `ibv_post_send` entered.
    PostEntry,
    /// `ibv_post_send` returns.
    PostExit,
    /// `ibv_poll_cq` entered.
    PollEntry,
    /// `ibv_poll_cq` returns with completions.
    PollFound,
    /// `ibv_poll_cq` returns with none.
    PollEmpty,
    /// The driver takes a post (`sv_io::Driver::post`).
    DriverPost,
    /// The engine takes a post straight into the queue and the peer's
    /// ring (`Engine::post_send_through`).
    EnginePost,
    /// A datagram is published into a peer's same-host ring.
    RingPublish,
    /// A datagram batch leaves by the socket (`sendmmsg` returned).
    SocketSent,
    /// A post starts waiting for its answer (`sv_io::linger`).
    WaitBegins,
    /// A wait saw its answer taken.
    WaitAnswered,
    /// A batch of ring records is taken, before the engine sees it.
    RingTaken,
    /// The engine has taken that batch.
    RingDelivered,
    /// A socket read returned datagrams, before the engine sees them.
    SocketTaken,
    /// A completion is written to a CQ.
    CqPush,
}

/// How many points there are.
pub const POINTS: usize = Point::CqPush as usize + 1;

impl Point {
    /// Every point, in order.
    pub const ALL: [Point; POINTS] = [
        Point::PostEntry,
        Point::PostExit,
        Point::PollEntry,
        Point::PollFound,
        Point::PollEmpty,
        Point::DriverPost,
        Point::EnginePost,
        Point::RingPublish,
        Point::SocketSent,
        Point::WaitBegins,
        Point::WaitAnswered,
        Point::RingTaken,
        Point::RingDelivered,
        Point::SocketTaken,
        Point::CqPush,
    ];
}

/// The calling thread passes `p`; a no-op without the `stamps` feature.
#[inline(always)]
pub fn at(_p: Point) {
    #[cfg(feature = "stamps")]
    on::at(_p);
}

/// Prints each step's count, median and 99th percentile on stderr
/// (`stamp FROM -> TO n=… median=… p99=… ns`, steps seen 100 times or
/// more); a no-op without the `stamps` feature.
pub fn report() {
    #[cfg(feature = "stamps")]
    on::report();
}

#[cfg(feature = "stamps")]
mod on {
    use super::{Point, POINTS};
    use std::cell::Cell;
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use std::sync::OnceLock;
    use std::time::Instant;

    /// Histogram buckets of 10 ns; the last holds everything from 20 µs.
    const BUCKETS: usize = 2001;
    const BUCKET_NS: u64 = 10;

    #[allow(clippy::declare_interior_mutable_const)]
    const ZERO: AtomicU64 = AtomicU64::new(0);
    /// `HIST[from][to][bucket]`: 15 × 15 × 2 001 counts, 3.6 MB, in the
    /// instrumented build only.
    static HIST: [[[AtomicU64; BUCKETS]; POINTS]; POINTS] =
        [const { [const { [ZERO; BUCKETS] }; POINTS] }; POINTS];
    static START: OnceLock<Instant> = OnceLock::new();

    thread_local! {
        /// The thread's last point and its time (ns since `START`, 0: none).
        static LAST: Cell<(u8, u64)> = const { Cell::new((0, 0)) };
    }

    pub(super) fn at(p: Point) {
        let now = START.get_or_init(Instant::now).elapsed().as_nanos() as u64 + 1;
        LAST.with(|last| {
            let (from, then) = last.get();
            if then != 0 {
                let bucket = ((now - then) / BUCKET_NS).min(BUCKETS as u64 - 1);
                HIST[usize::from(from)][p as usize][bucket as usize].fetch_add(1, Relaxed);
            }
            last.set((p as u8, now));
        });
    }

    pub(super) fn report() {
        let mut out = std::io::stderr().lock();
        for from in Point::ALL {
            for to in Point::ALL {
                let h = &HIST[from as usize][to as usize];
                let n: u64 = h.iter().map(|b| b.load(Relaxed)).sum();
                if n < 100 {
                    continue;
                }
                let at_rank = |rank: u64| {
                    let mut seen = 0;
                    let b = h.iter().position(|b| {
                        seen += b.load(Relaxed);
                        seen >= rank
                    });
                    b.unwrap_or(BUCKETS - 1) as u64 * BUCKET_NS
                };
                let _ = writeln!(
                    out,
                    "stamp {from:?} -> {to:?} n={n} median={} p99={} ns",
                    at_rank(n.div_ceil(2)),
                    at_rank((n * 99).div_ceil(100)),
                );
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// Two points in a row count one interval of their step, in the
        /// thread that passed them; another thread's points do not join.
        #[test]
        fn consecutive_points_of_one_thread_make_a_step() {
            let count = |from: Point, to: Point| -> u64 {
                HIST[from as usize][to as usize]
                    .iter()
                    .map(|b| b.load(Relaxed))
                    .sum()
            };
            let before = count(Point::PollEntry, Point::PollFound);
            at(Point::PollEntry);
            std::thread::spawn(|| at(Point::PollEmpty)).join().unwrap();
            at(Point::PollFound);
            assert_eq!(count(Point::PollEntry, Point::PollFound), before + 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_point_is_listed_once_in_order() {
        for (i, p) in Point::ALL.iter().enumerate() {
            assert_eq!(*p as usize, i);
        }
    }
}

//! A posting thread that answered an RDMA WRITE waits in its post for the
//! next.
//!
//! Owns: the device's guess whether its program answers each RDMA WRITE it
//! gets at once and then waits, outside the library, for the next one (a
//! ping-pong over RDMA WRITE: `ib_write_lat`, a program spinning on a flag
//! in its memory). Promise: a post waits ([`Linger::at_post`]) only while
//! the last posts each answered exactly one WRITE, taken since the post
//! before and moments before it ([`ANSWER_NS`]); it waits at most the
//! bound, until the next whole WRITE (without immediate) is placed. A post
//! that breaks the pattern turns the waits off until [`STREAK`] posts fit
//! it again; a wait that ends unanswered doubles that number, up to
//! [`MAX_STREAK`], until a wait is answered (unless the
//! [`FORGIVE_AFTER`] waits before it were all answered: then the next post
//! waits again), and a thread about to block
//! for a completion (`ibv_req_notify_cq`, [`Linger::blocking`]) sets it
//! there. So a program whose answers cannot come while it waits (one
//! thread driving both ends of a ping-pong between two devices: its own
//! next poll makes the answer) loses a wait at most once per
//! [`MAX_STREAK`] posts in the long run, and one that blocks for its
//! completions does not spin.
//!
//! WRITEs the device takes from itself (its own QPs writing to each other
//! through the loopback shortcut, `Engine::handle_own_datagram`) do not
//! count: no post answers them, and a post would wait for the WRITE its own
//! transmit makes.
//!
//! Only plain WRITEs count: they need no receive WQE (a SEND that came
//! while its receiver still sat in this post would be refused with an RNR
//! NAK), make no completion (a program that waits for a SEND polls its CQ,
//! and a polling thread reads: crate::pollrx), and their ACK is all a
//! waiting post leaves to the answer's post (a READ response or an
//! atomic's would wait with it).
//!
//! Why: such a program calls the library only to post. Whatever arrives
//! between two posts must be placed by some thread; with the poster gone
//! back to its spin, that is the progress thread, woken for every
//! datagram, and on a machine with few cores that wake-up waits for a
//! spinning thread to be preempted (tens of µs, a millisecond at times:
//! spec/performance.md §19). A post that waits reads the socket and the
//! same-host rings itself (crate::pollrx, the polling threads' way, with
//! their lease), places the answer and sends its ACK, then returns: the
//! program finds the answer in its memory at once. Kernel Soft-RoCE places
//! it in the sender's softirq; this is the nearest a user-space device
//! gets.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

use crate::clock::Nanos;

/// A post answers a WRITE when it comes this soon after the WRITE was
/// placed (a program that waited for it and reacts at once; some slack for
/// a thread preempted in between: on two cores 30–50 µs happen).
pub(crate) const ANSWER_NS: Nanos = 100_000;
/// Posts in a row that must fit the pattern before one waits.
pub(crate) const STREAK: u32 = 2;
/// The most posts in a row the pattern must show after unanswered waits.
pub(crate) const MAX_STREAK: u32 = 256;
/// Waits answered in a row after which one unanswered wait is taken for a
/// hiccup (the peer preempted past the bound), not for a pattern that
/// broke: the next post waits again.
pub(crate) const FORGIVE_AFTER: u32 = 64;

/// The pattern's state for one device (see the module doc). Every field is
/// a hint: two threads posting at once may blur it, which costs one wait
/// that ends at its bound or one that does not happen.
pub(crate) struct Linger {
    /// The longest a post waits; 0: never.
    bound_ns: Nanos,
    /// The device's count of whole WRITEs (`Engine::writes_taken`) at its
    /// last post to an idle queue; `u64::MAX`: no post yet.
    seen: AtomicU64,
    /// Posts in a row that fit the pattern.
    streak: AtomicU32,
    /// The streak a post needs to wait: [`STREAK`], doubled by each
    /// unanswered wait.
    need: AtomicU32,
    /// Threads waiting in their posts now.
    waiters: AtomicU32,
    /// Waits answered since the last unanswered one (up to
    /// [`FORGIVE_AFTER`]).
    answered: AtomicU32,
}

impl Linger {
    pub(crate) fn new(bound_ns: Nanos) -> Self {
        Linger {
            bound_ns,
            seen: AtomicU64::new(u64::MAX),
            streak: AtomicU32::new(0),
            need: AtomicU32::new(STREAK),
            waiters: AtomicU32::new(0),
            answered: AtomicU32::new(0),
        }
    }

    /// A post to an idle send queue at `now`, with `writes` the device's
    /// whole WRITEs so far and when the latest came (`Engine::writes_taken`):
    /// whether the posting thread waits, until `now` + the bound at most,
    /// for the count to pass `writes.0`.
    pub(crate) fn at_post(&self, now: Nanos, writes: (u64, Nanos)) -> Option<Nanos> {
        if self.bound_ns == 0 {
            return None;
        }
        let (count, at) = writes;
        let before = self.seen.swap(count, Relaxed);
        // This post answers the one WRITE taken since the post before (two
        // or more: the program is behind, and has more to answer than to
        // wait for), a moment ago.
        let answers = before != u64::MAX && count.wrapping_sub(before) == 1;
        if !answers || now.saturating_sub(at) > ANSWER_NS {
            self.streak.store(0, Relaxed);
            return None;
        }
        let streak = (self.streak.load(Relaxed) + 1).min(MAX_STREAK);
        self.streak.store(streak, Relaxed);
        (streak >= self.need.load(Relaxed)).then_some(now + self.bound_ns)
    }

    /// A wait got its answer: the pattern needs [`STREAK`] posts again
    /// after a break.
    pub(crate) fn answered(&self) {
        self.need.store(STREAK, Relaxed);
        let n = self.answered.load(Relaxed);
        if n < FORGIVE_AFTER {
            self.answered.store(n + 1, Relaxed);
        }
    }

    /// A wait ended at its bound with no answer: the pattern must hold
    /// twice as long before the next ([`MAX_STREAK`] at most), unless the
    /// last [`FORGIVE_AFTER`] waits were all answered. A ping-pong whose
    /// peer was preempted past the bound once keeps waiting: each post
    /// that does not wait leaves the peer's answer to a progress thread
    /// that sleeps until the program's poll lease ends, a stall of about
    /// 250 µs on two busy cores (spec/performance.md §33). A program whose
    /// waits cannot be answered never gets there.
    pub(crate) fn missed(&self) {
        if self.answered.swap(0, Relaxed) >= FORGIVE_AFTER {
            return;
        }
        self.streak.store(0, Relaxed);
        let need = self.need.load(Relaxed);
        self.need.store((need * 2).min(MAX_STREAK), Relaxed);
    }

    /// A thread is about to block for a completion (`ibv_req_notify_cq`):
    /// the program waits for its answers asleep; a post spinning for them
    /// would take a core it gave up. The pattern must hold [`MAX_STREAK`]
    /// posts (or a wait be answered) before the next wait.
    pub(crate) fn blocking(&self) {
        self.answered.store(0, Relaxed);
        self.streak.store(0, Relaxed);
        self.need.store(MAX_STREAK, Relaxed);
    }

    /// A thread starts waiting in its post ([`Linger::waiting`]) ...
    pub(crate) fn wait_begins(&self) {
        self.waiters.fetch_add(1, Relaxed);
    }

    /// ... and stops.
    pub(crate) fn wait_ends(&self) {
        self.waiters.fetch_sub(1, Relaxed);
    }

    /// Whether a thread waits in its post now: the lease the waits hold is
    /// its, and another thread's post that does not wait leaves it alone.
    pub(crate) fn waiting(&self) -> bool {
        self.waiters.load(Relaxed) > 0
    }

    /// Whether the last post fit the pattern: a post to a busy queue is
    /// looked at too (in a ping-pong the answer overtakes the ACK of the
    /// WRITE it answers, so the next post may find that WRITE still
    /// unacknowledged); otherwise only posts to idle queues are.
    pub(crate) fn forming(&self) -> bool {
        self.streak.load(Relaxed) > 0
    }

    /// Whether the pattern holds now (the last posts fit it).
    #[cfg(test)]
    fn holds(&self) -> bool {
        self.bound_ns != 0 && self.streak.load(Relaxed) >= self.need.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Nanos = 100_000;

    /// A ping-pong from `t` with the device's WRITE count at `count`: each
    /// post answers the one WRITE taken 1 µs before, and is answered 30 µs
    /// later. Returns the waits of `n` posts.
    fn ping_pong(l: &Linger, mut t: Nanos, count: &mut u64, n: usize) -> Vec<Option<Nanos>> {
        (0..n)
            .map(|_| {
                *count += 1;
                let w = l.at_post(t, (*count, t - 1_000));
                if w.is_some() {
                    l.answered();
                }
                t += 31_000;
                w
            })
            .collect()
    }

    #[test]
    fn waits_after_the_streak_and_not_before() {
        let l = Linger::new(B);
        let mut c = 0;
        let waits = ping_pong(&l, 1_000_000, &mut c, 5);
        // The first post has no post before it; the second and third build
        // the streak; from then on each waits until its bound.
        assert_eq!(waits[0], None);
        assert_eq!(waits[1], None);
        assert_eq!(waits[2], Some(1_000_000 + 2 * 31_000 + B));
        assert!(waits[3..].iter().all(Option::is_some));
        assert!(l.holds());
    }

    #[test]
    fn a_post_long_after_the_write_does_not_wait() {
        let l = Linger::new(B);
        let mut c = 0;
        ping_pong(&l, 1_000_000, &mut c, 4);
        // The program computed longer than ANSWER_NS before posting.
        let t = 1_000_000 + 4 * 31_000 + ANSWER_NS;
        assert_eq!(l.at_post(t, (c + 1, t - ANSWER_NS - 1)), None);
        assert!(!l.holds());
    }

    #[test]
    fn a_post_with_no_write_or_several_since_the_one_before_does_not_wait() {
        let l = Linger::new(B);
        let mut c = 0;
        ping_pong(&l, 1_000_000, &mut c, 4);
        // No WRITE since the post before (a stream of posts).
        let t = 1_000_000 + 4 * 31_000;
        assert_eq!(l.at_post(t, (c, t - 40_000)), None);
        assert!(!l.holds());
        // Two since the post before: a server behind its clients.
        ping_pong(&l, t + 31_000, &mut c, 4);
        let t = t + 5 * 31_000;
        assert_eq!(l.at_post(t, (c + 2, t - 1_000)), None);
        assert!(!l.holds());
    }

    #[test]
    fn a_missed_wait_doubles_the_streak_needed_until_a_wait_is_answered() {
        let l = Linger::new(B);
        let mut c = 0;
        ping_pong(&l, 1_000_000, &mut c, 4);
        l.missed();
        assert!(!l.holds());
        // Four posts now build the streak (not two) ...
        let t = 1_000_000 + 4 * 31_000 + B;
        let waits = ping_pong(&l, t, &mut c, 6);
        assert_eq!(waits.iter().position(Option::is_some), Some(3));
        // ... and the answered wait set it back to two.
        let t = t + 6 * 31_000;
        assert_eq!(l.at_post(t, (c, 1)), None, "no WRITE since the last post");
        let waits = ping_pong(&l, t + 31_000, &mut c, 3);
        assert_eq!(waits.iter().position(Option::is_some), Some(1));
    }

    #[test]
    fn one_miss_after_a_long_answered_run_is_forgiven_a_second_is_not() {
        let l = Linger::new(B);
        let mut c = 0;
        let t = 1_000_000;
        let waits = ping_pong(&l, t, &mut c, FORGIVE_AFTER as usize + 2);
        assert!(waits[2..].iter().all(Option::is_some));
        // The peer was preempted past the bound once: the next post waits.
        l.missed();
        assert!(l.holds());
        let t = t + 100 * 31_000;
        assert!(ping_pong(&l, t, &mut c, 1)[0].is_some());
        // Missed again before FORGIVE_AFTER answers: the streak doubles.
        l.missed();
        assert!(!l.holds());
        let waits = ping_pong(&l, t + 31_000, &mut c, 6);
        assert_eq!(waits.iter().position(Option::is_some), Some(3));
    }

    #[test]
    fn a_thread_about_to_block_makes_waits_rare() {
        let l = Linger::new(B);
        let mut c = 0;
        ping_pong(&l, 1_000_000, &mut c, 4);
        l.blocking();
        assert!(!l.holds());
        let waits = ping_pong(&l, 2_000_000, &mut c, 300);
        assert_eq!(
            waits.iter().position(Option::is_some),
            Some(MAX_STREAK as usize - 1)
        );
    }

    /// One thread drives both ends of a ping-pong between two devices:
    /// its post on this device waits for an answer that only its own next
    /// poll (after the wait) can make, so every wait ends at its bound.
    #[test]
    fn waits_that_cannot_be_answered_become_rare() {
        let l = Linger::new(B);
        let mut t = 1_000_000;
        let mut count = 0;
        let mut waits = 0;
        let posts = 4_000;
        for _ in 0..posts {
            count += 1;
            if let Some(until) = l.at_post(t, (count, t - 1_000)) {
                waits += 1;
                t = until; // unanswered
                l.missed();
            }
            // The thread polls the other device, which answers; the answer
            // reaches this device 5 µs later, and this post follows it.
            t += 6_000;
        }
        // Waits at posts 2, +4, +8, ... +256, then one per 256.
        assert!(waits <= 8 + posts / MAX_STREAK as usize, "{waits} waits");
        assert!(
            waits >= 8,
            "{waits} waits: the doubling is what limits them"
        );
    }

    #[test]
    fn off_never_waits() {
        let l = Linger::new(0);
        let mut c = 0;
        assert!(ping_pong(&l, 1_000_000, &mut c, 6)
            .iter()
            .all(Option::is_none));
        assert!(!l.holds());
    }
}

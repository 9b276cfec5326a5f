//! A posting thread that answered a request waits in its post for the next.
//!
//! Owns: the device's guess whether its program answers each request it
//! gets at once and then waits, outside the library, for the next one (a
//! ping-pong over RDMA WRITE: `ib_write_lat`, a program spinning on a flag
//! in its memory). Promise: a post waits ([`Linger::at_post`]) only while
//! the last posts each answered a request that had come since the post
//! before, moments before it ([`ANSWER_NS`]); it waits at most the bound.
//! A post that breaks the pattern turns the waits off
//! until [`STREAK`] posts fit it again; a wait that ends unanswered
//! doubles that number, up to [`MAX_STREAK`], until a wait is answered. So a program whose answers
//! cannot come while it waits (one thread driving both ends of a
//! ping-pong between two devices: its own next poll makes the answer)
//! loses a wait at most once per [`MAX_STREAK`] posts in the long run.
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

/// A post answers a request when it comes this soon after the request was
/// placed (a program that waited for it and reacts at once; some slack for
/// a thread preempted in between: on two cores 30–50 µs happen).
pub(crate) const ANSWER_NS: Nanos = 100_000;
/// Posts in a row that must fit the pattern before one waits.
pub(crate) const STREAK: u32 = 2;
/// The most posts in a row a pattern whose answers came late must show.
pub(crate) const MAX_STREAK: u32 = 256;

/// The pattern's state for one device (see the module doc). Every field is
/// a hint: two threads posting at once may blur it, which costs one wait
/// that ends at its bound or one that does not happen.
pub(crate) struct Linger {
    /// The longest a post waits; 0: never.
    bound_ns: Nanos,
    /// When (engine time) the device's last post to an idle queue came; 0:
    /// none yet.
    last_post: AtomicU64,
    /// Posts in a row that fit the pattern.
    streak: AtomicU32,
    /// The streak a post needs to wait: [`STREAK`], doubled by each post
    /// answered late.
    need: AtomicU32,
}

impl Linger {
    pub(crate) fn new(bound_ns: Nanos) -> Self {
        Linger {
            bound_ns,
            last_post: AtomicU64::new(0),
            streak: AtomicU32::new(0),
            need: AtomicU32::new(STREAK),
        }
    }

    /// A post to an idle send queue at `now`, with the last request taken
    /// at `request_at` (0: never): until when (engine time) the posting
    /// thread waits for a request newer than `now`, if it does.
    pub(crate) fn at_post(&self, now: Nanos, request_at: Nanos) -> Option<Nanos> {
        if self.bound_ns == 0 {
            return None;
        }
        let prev = self.last_post.swap(now, Relaxed);
        // This post answers a request that came since the post before, a
        // moment ago.
        let answers = prev != 0 && request_at > prev;
        if !answers || now.saturating_sub(request_at) > ANSWER_NS {
            self.streak.store(0, Relaxed);
            return None;
        }
        let streak = self.streak.fetch_add(1, Relaxed).saturating_add(1);
        (streak >= self.need.load(Relaxed)).then_some(now + self.bound_ns)
    }

    /// A wait got its answer: the pattern needs [`STREAK`] posts again
    /// after a break.
    pub(crate) fn answered(&self) {
        self.need.store(STREAK, Relaxed);
    }

    /// A wait ended at its bound with no answer: the pattern must hold
    /// twice as long before the next ([`MAX_STREAK`] at most).
    pub(crate) fn missed(&self) {
        self.streak.store(0, Relaxed);
        let need = self.need.load(Relaxed);
        self.need.store((need * 2).min(MAX_STREAK), Relaxed);
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

    /// A ping-pong: each post answers a request 1 µs old and is answered
    /// 30 µs later. Returns the waits of `n` posts from `t`.
    fn ping_pong(l: &Linger, mut t: Nanos, n: usize) -> Vec<Option<Nanos>> {
        (0..n)
            .map(|_| {
                let req = t - 1_000;
                let w = l.at_post(t, req);
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
        let waits = ping_pong(&l, 1_000_000, 5);
        // The first post has no post before it; the second and third build
        // the streak; from then on each waits until its bound.
        assert_eq!(waits[0], None);
        assert_eq!(waits[1], None);
        assert_eq!(waits[2], Some(1_000_000 + 2 * 31_000 + B));
        assert!(waits[3..].iter().all(Option::is_some));
        assert!(l.holds());
    }

    #[test]
    fn a_post_long_after_the_request_does_not_wait() {
        let l = Linger::new(B);
        ping_pong(&l, 1_000_000, 4);
        // The program computed longer than ANSWER_NS before posting.
        let t = 1_000_000 + 4 * 31_000 + ANSWER_NS;
        assert_eq!(l.at_post(t, t - ANSWER_NS - 1), None);
        assert!(!l.holds());
    }

    #[test]
    fn a_post_with_no_request_since_the_one_before_does_not_wait() {
        let l = Linger::new(B);
        ping_pong(&l, 1_000_000, 4);
        // The last request came before the post before (a stream of sends).
        let t = 1_000_000 + 4 * 31_000;
        assert_eq!(l.at_post(t, t - 40_000), None);
        assert!(!l.holds());
    }

    #[test]
    fn a_missed_wait_doubles_the_streak_needed_until_a_wait_is_answered() {
        let l = Linger::new(B);
        ping_pong(&l, 1_000_000, 4);
        l.missed();
        assert!(!l.holds());
        // Four posts now build the streak (not two) ...
        let t = 1_000_000 + 4 * 31_000 + B;
        let waits = ping_pong(&l, t, 6);
        assert_eq!(waits.iter().position(Option::is_some), Some(3));
        // ... and the answered wait set it back to two.
        let t = t + 6 * 31_000;
        assert_eq!(l.at_post(t, 1), None, "no request since the last post");
        assert_eq!(
            ping_pong(&l, t + 31_000, 3)
                .iter()
                .position(Option::is_some),
            Some(1)
        );
    }

    /// One thread drives both ends of a ping-pong between two devices:
    /// its post on this device waits for an answer that only its own next
    /// poll (after the wait) can make, so every wait ends at its bound.
    #[test]
    fn waits_that_cannot_be_answered_become_rare() {
        let l = Linger::new(B);
        let mut t = 1_000_000;
        let mut waits = 0;
        let posts = 4_000;
        for _ in 0..posts {
            if let Some(until) = l.at_post(t, t - 1_000) {
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
        assert!(ping_pong(&l, 1_000_000, 6).iter().all(Option::is_none));
        assert!(!l.holds());
    }
}

//! Completion queues: creation rules, and the ring that holds their
//! completions ([`CqRing`], the engine's side; [`SharedCq`], the pollers').
//!
//! The ring is the one piece of a CQ that crosses threads: the engine adds
//! completions under its own lock; `ibv_poll_cq` and `ibv_req_notify_cq` reach
//! the ring through [`SharedCq`] without that lock, by acquire/release indices
//! over fixed slots of atomics ([`crate::cqe`]) — no `unsafe`, no system call,
//! no allocation per completion.

use crate::cqe::{self, CqeSlot};
use crate::device::DeviceAttr;
use crate::error::{Error, InvalidArg, RangeError};
use crate::handle::CtxHandle;
use crate::wc::WorkCompletion;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{fence, AtomicU64, AtomicU8};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Number of completion vectors (`num_comp_vectors`).
pub const NUM_COMP_VECTORS: u32 = 1;

/// A completion queue.
#[derive(Debug, Clone)]
pub struct Cq {
    /// Owning context.
    pub ctx: CtxHandle,
    /// Capacity in completions.
    pub cqe: u32,
    /// Completion vector.
    pub comp_vector: u32,
}

/// Checks `ibv_create_cq` arguments; returns the capacity granted (≥ the request).
pub fn check_create(cqe: i32, comp_vector: i32, dev: &DeviceAttr) -> Result<u32, Error> {
    if cqe < 1 || cqe as u64 > u64::from(dev.max_cqe) {
        return Err(RangeError {
            what: "cqe",
            value: i64::from(cqe) as u64,
            min: 1,
            max: dev.max_cqe.into(),
            note: "; device limit max_cqe",
        }
        .into());
    }
    if comp_vector < 0 || comp_vector as u32 >= NUM_COMP_VECTORS {
        return Err(InvalidArg::CompVector {
            comp_vector,
            count: NUM_COMP_VECTORS,
        }
        .into());
    }
    Ok(cqe as u32)
}

/// How a CQ is armed for the next completion event (`ibv_req_notify_cq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
#[repr(u8)]
pub enum Notify {
    /// Not armed.
    #[default]
    Disarmed = 0,
    /// Armed for the next solicited (or unsuccessful) completion.
    Solicited = 1,
    /// Armed for the next completion of any kind.
    Next = 2,
}

/// What adding a completion to a CQ caused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Stored; `event` says whether a completion event is due now.
    Stored {
        /// The CQ was armed and this completion fires it.
        event: bool,
    },
    /// The CQ was full (or already overrun): the completion is lost and the CQ
    /// is unusable; the caller raises `IBV_EVENT_CQ_ERR` and moves the QP to ERR.
    Overrun,
}

/// Slots a ring starts with (at most; fewer for a smaller CQ). It doubles on
/// demand up to the CQ's capacity, so a CQ created with `max_cqe` entries does
/// not commit 256 MiB before it holds anything.
const INITIAL_SLOTS: usize = 1024;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic in a poller must not wedge the CQ for the others.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The side of a CQ that pollers use: shared (`Arc`) between the engine's
/// [`CqRing`] and any number of polling threads, touched without the engine.
///
/// - `tail` is written by the producer alone (the engine), with Release after
///   the slot's words; pollers read it with Acquire.
/// - `head` is written by pollers, serialised by the `slots` mutex (the
///   per-CQ consumer lock, as mlx5 serialises pollers with a per-CQ spinlock),
///   with Release after the slots are read; the producer reads it with Acquire
///   before it reuses a slot.
/// - `slots` is the array itself. The producer keeps its own `Arc` of it; it
///   replaces the array (growth) and moves entries (purge) only while it holds
///   the consumer lock, so a poller always reads the current array.
/// - `notify` is the arm state ([`Notify`] as a byte). See [`SharedCq::req_notify`]
///   for why arming cannot lose an event.
pub struct SharedCq {
    head: AtomicU64,
    tail: AtomicU64,
    notify: AtomicU8,
    slots: Mutex<Arc<[CqeSlot]>>,
}

impl SharedCq {
    /// `ibv_poll_cq`: moves up to `max` completions, oldest first, into `out`.
    pub fn poll(&self, max: usize, out: &mut Vec<WorkCompletion>) -> usize {
        self.poll_with(max, |wc| out.push(wc))
    }

    /// `ibv_poll_cq` into a callback: up to `max` completions, oldest first;
    /// returns how many. Takes only this CQ's consumer lock, makes no system
    /// call and allocates nothing. `f` runs under that lock: it must not call
    /// into the engine, which takes the consumer lock (growth, purge) while
    /// it holds its own.
    pub fn poll_with(&self, max: usize, mut f: impl FnMut(WorkCompletion)) -> usize {
        // An empty CQ answers without the lock (most polls of a spinning
        // application). `head` is read first: it only grows, and `tail` is
        // never below it (a purge moves `tail` down to no less than `head`),
        // so `tail == head` at the second read means the queue was empty at
        // that instant: a poll there returns nothing. The acquire load of
        // `tail` is the one the locked path makes (req_notify's fence pairs
        // with it as before).
        let head_seen = self.head.load(Acquire);
        if self.tail.load(Acquire) <= head_seen {
            return 0;
        }
        let slots = lock(&self.slots);
        let mask = slots.len() as u64 - 1;
        // Only pollers (under this lock) and the producer's purge (also under
        // it) move `head`.
        let head = self.head.load(Relaxed);
        let tail = self.tail.load(Acquire);
        let n = (tail.saturating_sub(head)).min(max as u64);
        for i in head..head + n {
            let words = slots[(i & mask) as usize].load();
            // What the producer wrote always decodes (cqe.rs property test).
            if let Some(wc) = cqe::decode(&words) {
                f(wc);
            }
        }
        self.head.store(head + n, Release);
        n as usize
    }

    /// `ibv_req_notify_cq`: arm once. "Next" upgrades an armed "solicited";
    /// "solicited" never downgrades "next" (IBA C11-31/32, completions.md §7.3).
    ///
    /// No lost event: the producer stores `tail` then (SeqCst fence) reads
    /// `notify`; arming writes `notify` then (SeqCst fence) the caller's next
    /// poll reads `tail`. With both fences one of the two sees the other: a
    /// completion pushed concurrently with the arm either fires the event or
    /// is returned by the poll that follows the arm — the usual "arm, poll,
    /// then wait" loop can never sleep on a completion it did not see.
    pub fn req_notify(&self, solicited_only: bool) {
        let want = if solicited_only {
            Notify::Solicited
        } else {
            Notify::Next
        };
        self.notify.fetch_max(want as u8, SeqCst);
        fence(SeqCst);
    }

    /// Completions waiting to be polled (a snapshot).
    pub fn len(&self) -> usize {
        let head = self.head.load(Acquire);
        self.tail.load(Acquire).saturating_sub(head) as usize
    }

    /// True if nothing waits (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The producer's side of arming: fires (and disarms) if armed for this
    /// completion.
    fn take_notify(&self, solicited: bool) -> bool {
        let mut cur = self.notify.load(SeqCst);
        loop {
            let fire = match cur {
                x if x == Notify::Next as u8 => true,
                x if x == Notify::Solicited as u8 => solicited,
                _ => false,
            };
            if !fire {
                return false;
            }
            match self
                .notify
                .compare_exchange(cur, Notify::Disarmed as u8, SeqCst, SeqCst)
            {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }
}

impl std::fmt::Debug for SharedCq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedCq")
            .field("head", &self.head.load(Relaxed))
            .field("tail", &self.tail.load(Relaxed))
            .field("notify", &self.notify.load(Relaxed))
            .finish_non_exhaustive()
    }
}

/// The completions a CQ holds, in order, bounded by its capacity: the
/// producer's side of the ring (owned by the engine, which alone adds
/// completions), with [`SharedCq`] the side pollers use without the engine.
///
/// Overrun follows the man page (and rdmavt): the first completion that does not
/// fit marks the CQ overrun for good; it and every later one is lost
/// (completions.md §7.2). Resize and purge are the producer's (they need
/// `&mut`, i.e. the engine); purge and growth also take the consumer lock.
pub struct CqRing {
    shared: Arc<SharedCq>,
    /// The producer's copy of the slot array (the one under the consumer lock).
    slots: Arc<[CqeSlot]>,
    /// The producer's copy of `shared.tail`.
    tail: u64,
    capacity: usize,
    overrun: bool,
}

fn new_slots(n: usize) -> Arc<[CqeSlot]> {
    (0..n).map(|_| CqeSlot::default()).collect()
}

impl CqRing {
    /// An empty ring for `capacity` completions.
    pub fn new(capacity: u32) -> CqRing {
        let capacity = capacity.max(1) as usize;
        let slots = new_slots(capacity.next_power_of_two().min(INITIAL_SLOTS));
        CqRing {
            shared: Arc::new(SharedCq {
                head: AtomicU64::new(0),
                tail: AtomicU64::new(0),
                notify: AtomicU8::new(Notify::Disarmed as u8),
                slots: Mutex::new(slots.clone()),
            }),
            slots,
            tail: 0,
            capacity,
            overrun: false,
        }
    }

    /// The pollers' side, to poll and arm without the engine.
    pub fn shared(&self) -> &Arc<SharedCq> {
        &self.shared
    }

    /// Adds a completion. `solicited` is true for a receive completion of a
    /// message whose last packet had SE set; unsuccessful completions count as
    /// solicited (man page; completions.md §7.3).
    pub fn push(&mut self, wc: WorkCompletion, solicited: bool) -> Pushed {
        let used = self.len();
        if self.overrun || used >= self.capacity {
            self.overrun = true;
            return Pushed::Overrun;
        }
        if used >= self.slots.len() {
            self.grow();
        }
        let mask = self.slots.len() as u64 - 1;
        self.slots[(self.tail & mask) as usize].store(&cqe::encode(&wc));
        self.tail += 1;
        self.shared.tail.store(self.tail, Release);
        lanes::stamp::at(lanes::stamp::Point::CqPush);
        debug_assert!(self.len() <= self.capacity, "CQ beyond its capacity");
        // Pairs with the fence in `SharedCq::req_notify` (no lost event).
        fence(SeqCst);
        let solicited = solicited || wc.status.is_error();
        Pushed::Stored {
            event: self.shared.take_notify(solicited),
        }
    }

    /// Doubles the slot array (up to the capacity), under the consumer lock.
    fn grow(&mut self) {
        let mut guard = lock(&self.shared.slots);
        let head = self.shared.head.load(Acquire);
        let len = (self.slots.len() * 2).min(self.capacity.next_power_of_two());
        let new = new_slots(len);
        let (old_mask, new_mask) = (self.slots.len() as u64 - 1, len as u64 - 1);
        for i in head..self.tail {
            new[(i & new_mask) as usize].store(&self.slots[(i & old_mask) as usize].load());
        }
        self.slots = new.clone();
        *guard = new;
    }

    /// `ibv_poll_cq` (the same as [`SharedCq::poll`]).
    pub fn poll(&self, max: usize, out: &mut Vec<WorkCompletion>) -> usize {
        self.shared.poll(max, out)
    }

    /// `ibv_req_notify_cq` (the same as [`SharedCq::req_notify`]).
    pub fn req_notify(&self, solicited_only: bool) {
        self.shared.req_notify(solicited_only);
    }

    /// Completions waiting to be polled.
    pub fn len(&self) -> usize {
        self.tail.saturating_sub(self.shared.head.load(Acquire)) as usize
    }

    /// True if nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True once an overrun happened.
    pub fn is_overrun(&self) -> bool {
        self.overrun
    }

    /// `ibv_resize_cq`: refused (`EINVAL`, rxe `rxe_cq_chk_attr`) below the
    /// completions already queued plus `owed`, those that signaled send WRs
    /// still in flight will add (a CQ shrunk below them would overrun).
    /// Concurrent polls only lower the count, so the check holds after it.
    pub fn resize(&mut self, capacity: u32, owed: usize) -> Result<(), Error> {
        let queued = self.len();
        if (capacity as usize) < queued + owed {
            return Err(InvalidArg::CqResizeBelowQueued {
                cqe: capacity,
                queued,
                owed,
            }
            .into());
        }
        self.capacity = capacity.max(1) as usize;
        Ok(())
    }

    /// Drops the completions of QP `qpn` (its move to RESET); returns how
    /// many. The others keep their order. Takes the consumer lock.
    pub fn purge_qp(&mut self, qpn: u32) -> usize {
        let _guard = lock(&self.shared.slots);
        let head = self.shared.head.load(Acquire);
        let mask = self.slots.len() as u64 - 1;
        let mut kept = head;
        for i in head..self.tail {
            let slot = &self.slots[(i & mask) as usize];
            if slot.qp_num() == qpn {
                continue;
            }
            if kept != i {
                self.slots[(kept & mask) as usize].store(&slot.load());
            }
            kept += 1;
        }
        let purged = self.tail - kept;
        self.tail = kept;
        self.shared.tail.store(kept, Release);
        purged as usize
    }
}

impl std::fmt::Debug for CqRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CqRing")
            .field("len", &self.len())
            .field("capacity", &self.capacity)
            .field("overrun", &self.overrun)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wc::{WcOpcode, WcStatus, WorkCompletion};

    fn wc(id: u64) -> WorkCompletion {
        WorkCompletion::error(id, 1, WcOpcode::Send, WcStatus::Success)
    }

    #[test]
    fn completions_come_out_in_order_and_overrun_is_final() {
        let mut r = CqRing::new(2);
        assert_eq!(r.push(wc(1), false), Pushed::Stored { event: false });
        assert_eq!(r.push(wc(2), false), Pushed::Stored { event: false });
        assert_eq!(r.push(wc(3), false), Pushed::Overrun);
        let mut out = Vec::new();
        assert_eq!(r.poll(8, &mut out), 2);
        assert_eq!(out.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(
            r.push(wc(4), false),
            Pushed::Overrun,
            "an overrun CQ stays unusable"
        );
        assert!(r.is_overrun());
    }

    #[test]
    fn notification_arms_once_and_respects_solicited() {
        let mut r = CqRing::new(16);
        r.req_notify(true);
        assert_eq!(r.push(wc(1), false), Pushed::Stored { event: false });
        assert_eq!(r.push(wc(2), true), Pushed::Stored { event: true });
        assert_eq!(
            r.push(wc(3), true),
            Pushed::Stored { event: false },
            "disarmed after firing"
        );
        r.req_notify(false);
        r.req_notify(true);
        assert_eq!(
            r.push(wc(4), false),
            Pushed::Stored { event: true },
            "solicited never downgrades next"
        );
        r.req_notify(true);
        let err = WorkCompletion::error(5, 1, WcOpcode::Send, WcStatus::LocProtErr);
        assert_eq!(
            r.push(err, false),
            Pushed::Stored { event: true },
            "errors count as solicited"
        );
        assert!(r.resize(2, 0).is_err());
        assert!(r.resize(5, 1).is_err(), "5 queued + 1 owed do not fit in 5");
        assert!(r.resize(6, 1).is_ok());
    }

    #[test]
    fn purge_drops_one_qps_completions_only() {
        let mut r = CqRing::new(8);
        for (id, qpn) in [(1, 7), (2, 9), (3, 7), (4, 9)] {
            let w = WorkCompletion::error(id, qpn, WcOpcode::Send, WcStatus::WrFlushErr);
            r.push(w, false);
        }
        assert_eq!(r.purge_qp(7), 2);
        let mut out = Vec::new();
        r.poll(8, &mut out);
        assert_eq!(out.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [2, 4]);
    }

    fn ids(r: &CqRing, max: usize) -> Vec<u64> {
        let mut out = Vec::new();
        r.poll(max, &mut out);
        out.iter().map(|w| w.wr_id).collect()
    }

    #[test]
    fn wraps_grows_and_overruns_at_capacity() {
        // 3000 > the 1024 slots a ring starts with: it grows twice while
        // entries sit across the wrap point.
        let mut r = CqRing::new(3000);
        let mut next = 0u64;
        for _ in 0..700 {
            assert!(matches!(r.push(wc(next), false), Pushed::Stored { .. }));
            next += 1;
        }
        assert_eq!(ids(&r, 600), (0..600).collect::<Vec<_>>());
        while r.len() < 3000 {
            assert!(matches!(r.push(wc(next), false), Pushed::Stored { .. }));
            next += 1;
        }
        assert_eq!(r.push(wc(next), false), Pushed::Overrun);
        assert_eq!(ids(&r, 5000), (600..next).collect::<Vec<_>>());
        assert!(r.is_empty() && r.is_overrun());
    }

    #[test]
    fn purge_across_the_wrap_keeps_order() {
        let mut r = CqRing::new(8);
        for id in 0..6 {
            r.push(wc(id), false);
        }
        assert_eq!(ids(&r, 5), [0, 1, 2, 3, 4]);
        // Slots 5..13 wrap the 8-slot array; QP 7's are dropped.
        for id in 6..13 {
            let qpn = if id % 2 == 0 { 7 } else { 1 };
            let w = WorkCompletion::error(id, qpn, WcOpcode::Send, WcStatus::Success);
            assert!(matches!(r.push(w, false), Pushed::Stored { .. }));
        }
        assert_eq!(r.purge_qp(7), 4, "6, 8, 10, 12");
        assert_eq!(r.len(), 4);
        r.push(wc(100), false);
        assert_eq!(ids(&r, 16), [5, 7, 9, 11, 100]);
    }

    #[test]
    fn resize_above_the_slots_keeps_queued_completions() {
        let mut r = CqRing::new(4);
        for id in 0..3 {
            r.push(wc(id), false);
        }
        assert_eq!(ids(&r, 1), [0]);
        r.push(wc(3), false);
        r.push(wc(4), false);
        assert_eq!(r.push(wc(99), false), Pushed::Overrun);
        let mut r = CqRing::new(4);
        for id in 0..4 {
            r.push(wc(id), false);
        }
        assert!(r.resize(3, 0).is_err());
        r.resize(64, 0).unwrap();
        for id in 4..64 {
            assert!(matches!(r.push(wc(id), false), Pushed::Stored { .. }));
        }
        assert_eq!(r.push(wc(64), false), Pushed::Overrun);
        assert_eq!(ids(&r, 100), (0..64).collect::<Vec<_>>());
    }

    /// One producer, three pollers racing on a small (often wrapping) ring:
    /// every completion comes out exactly once and in global order. Bounded
    /// in count (50 000) and time (30 s).
    #[test]
    fn concurrent_pollers_see_each_completion_once_in_order() {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
        use std::time::{Duration, Instant};
        const N: u64 = 50_000;
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut r = CqRing::new(64);
        let shared = r.shared().clone();
        let expected = Arc::new(AtomicU64::new(0));
        let misordered = Arc::new(AtomicBool::new(false));
        let pollers: Vec<_> = (0..3)
            .map(|_| {
                let (cq, exp, bad) = (shared.clone(), expected.clone(), misordered.clone());
                std::thread::spawn(move || {
                    let mut mine = 0u64;
                    while exp.load(SeqCst) < N && Instant::now() < deadline {
                        // The callback runs under the consumer lock, so the
                        // global order is checked exactly.
                        let n = cq.poll_with(7, |w| {
                            if w.wr_id != exp.fetch_add(1, SeqCst) || w.qp_num != 1 {
                                bad.store(true, SeqCst);
                            }
                        });
                        mine += n as u64;
                        if n == 0 {
                            std::thread::yield_now();
                        }
                    }
                    mine
                })
            })
            .collect();
        let mut id = 0;
        while id < N && Instant::now() < deadline {
            if r.len() >= 64 {
                std::thread::yield_now();
                continue;
            }
            assert_eq!(r.push(wc(id), false), Pushed::Stored { event: false });
            id += 1;
        }
        let total: u64 = pollers.into_iter().map(|p| p.join().unwrap()).sum();
        assert_eq!(id, N, "producer did not finish in time");
        assert_eq!(total, N, "each completion polled exactly once");
        assert_eq!(expected.load(SeqCst), N);
        assert!(!misordered.load(SeqCst), "a completion came out of order");
        assert!(r.is_empty() && !r.is_overrun());
    }

    /// Spins a pseudo-random 0..`max` turns (xorshift), to vary interleavings.
    fn jitter(x: &mut u64, max: u64) {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        for _ in 0..(*x % max) {
            std::hint::spin_loop();
        }
    }

    /// One turn of a wait: spin while the other side is likely running (tight
    /// interleavings are the point), then yield (the machine may have fewer
    /// free cores than threads). True every 1024 turns: time to look at the
    /// clock (which may be a system call, too slow to read every turn).
    fn pause(spins: &mut u32) -> bool {
        *spins = spins.wrapping_add(1);
        if *spins < 100_000 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
        *spins & 1023 == 0
    }

    /// Arm-versus-push race: the consumer drains, arms, polls, and only if
    /// that poll found nothing waits for an event; the producer pushes one
    /// completion at a time at jittered moments and waits until it is
    /// consumed. A lost
    /// event (the push missed the arm and the poll missed the push) leaves the
    /// consumer waiting: it gives up after 5 s and the test fails.
    #[test]
    fn arming_never_loses_an_event() {
        use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
        use std::time::{Duration, Instant};
        const N: u64 = 3000;
        let mut r = CqRing::new(16);
        let shared = r.shared().clone();
        let events = Arc::new(AtomicU64::new(0));
        let consumed = Arc::new(AtomicU64::new(0));
        let consumer = {
            let (cq, events, consumed) = (shared.clone(), events.clone(), consumed.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let mut out = Vec::new();
                let mut x = 0x9e37_79b9_7f4a_7c15u64;
                while consumed.load(SeqCst) < N {
                    // Drain, then arm and poll once more: the arm races the
                    // producer's next push, which follows the drain.
                    out.clear();
                    if cq.poll(16, &mut out) > 0 {
                        consumed.fetch_add(out.len() as u64, SeqCst);
                        continue;
                    }
                    let seen = events.load(SeqCst);
                    jitter(&mut x, 200);
                    cq.req_notify(false);
                    if cq.poll(16, &mut out) > 0 {
                        consumed.fetch_add(out.len() as u64, SeqCst);
                        continue;
                    }
                    let give_up = Instant::now() + Duration::from_secs(5);
                    let mut spins = 0u32;
                    while events.load(SeqCst) == seen {
                        if pause(&mut spins) && Instant::now() > give_up {
                            return Err(format!("lost event at {}", consumed.load(SeqCst)));
                        }
                    }
                }
                Ok(())
            })
        };
        let mut x = 0x2545_f491_4f6c_dd1du64;
        'push: for id in 0..N {
            jitter(&mut x, 100);
            if let Pushed::Stored { event: true } = r.push(wc(id), false) {
                events.fetch_add(1, SeqCst);
            }
            let give_up = Instant::now() + Duration::from_secs(10);
            let mut spins = 0u32;
            while consumed.load(SeqCst) <= id {
                if pause(&mut spins) && Instant::now() > give_up {
                    break 'push;
                }
            }
        }
        consumer.join().unwrap().unwrap();
        assert_eq!(consumed.load(SeqCst), N);
    }
}

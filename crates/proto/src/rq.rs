//! A QP's receive ring: `ibv_post_recv` without the engine.
//!
//! The application side posts receive WQEs into fixed slots (room for
//! `max_recv_sge` SGEs each, allocated at create: no allocation per post) and
//! publishes them with a Release store of `tail`; posting threads are
//! serialised by a per-QP mutex. The engine, the only consumer, moves posted
//! WQEs into its own receive queue ([`crate::qp::wqe::RecvQueue`]) whenever it
//! looks at that queue (Acquire load of `tail`, Release store of `head`).
//!
//! What a post checks without the engine, exactly as `check_post_recv` does:
//! - the QP's state, from a mirror the engine writes after every change
//!   (`Engine::sync`);
//! - the SGE count against `max_recv_sge`;
//! - the depth: the WQEs in the ring *and* in the engine's queue, as two
//!   counts with one writer each (no locked instruction on either side, as
//!   in [`crate::sq`]): `posted`, which a poster adds one to before it
//!   publishes (under the posting lock), and `left`, which the engine adds
//!   to when a WQE leaves its queue (under the queue's lock; before the
//!   completion is pushed, so a poller that sees the completion can post
//!   again at once).
//!
//! A post in ERR completes at once with a flush (the engine's work): the ring
//! says [`RingPost::Flush`] and the caller goes to the engine. A post that
//! raced the QP's move to ERR or RESET (the mirror changed after the check)
//! says [`RingPost::Settle`]: the WQE is in the ring, and the caller asks the
//! engine to flush (ERR) or discard (RESET) it. The poster stores `tail`, then
//! (SeqCst fence) reads the state; the engine stores the state, then (SeqCst
//! fence) drains: one of the two sees the other, so no WQE is left behind.
#![forbid(unsafe_code)]

use crate::types::QpState;
use crate::wr::{
    check_post_recv, check_post_srq_recv, Disposition, PostError, RecvQueueCtx, RecvWr, Sge,
};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8};
use std::sync::{Mutex, PoisonError};

/// What a post on the ring became.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingPost {
    /// In the ring; the engine takes it when a message needs it.
    Queued,
    /// Not posted: the QP is in ERR, so the WR completes at once with
    /// `WR_FLUSH_ERR` — the engine's work (`Engine::post_recv`).
    Flush,
    /// Posted, but the QP moved to ERR or RESET meanwhile: the engine must
    /// settle the ring (`Engine::settle_recv`).
    Settle,
    /// Not posted: an SRQ's ring is full although the SRQ has room (its
    /// ring keeps at most [`SRQ_RING_SLOTS`] WQEs between two visits of the
    /// engine, whatever `max_wr` grows to): post through the engine
    /// (`Engine::post_srq_recv`).
    Full,
}

/// Slots of an SRQ's ring at most (its `max_wr` may grow by `ibv_modify_srq`;
/// the ring is only the staging area between posts and the engine).
pub const SRQ_RING_SLOTS: u32 = 4096;

/// Whose receive ring it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// A QP's own receive queue (`has_srq`: the QP receives through an SRQ
    /// and posting to it is refused).
    Qp { has_srq: bool },
    /// A shared receive queue (no state; `ibv_modify_srq` may change its depth).
    Srq,
}

enum Write<'a> {
    Written(Written<'a>),
    Flush,
    Full,
}

/// Words per slot: wr_id, the SGE count, two per SGE.
fn stride(max_sge: u32) -> usize {
    2 + 2 * max_sge as usize
}

/// A written, not yet published slot (the posting lock still held).
struct Written<'a> {
    _serial: std::sync::MutexGuard<'a, ()>,
    tail: u64,
}

/// The receive ring of one QP. See the module doc.
pub struct RecvRing {
    owner: Owner,
    /// `max_recv_wr` / the SRQ's `max_wr` (changed under the posting lock).
    depth: AtomicU32,
    max_sge: u32,
    /// Slots in `words`.
    slots: u32,
    words: Box<[AtomicU64]>,
    head: AtomicU64,
    tail: AtomicU64,
    /// WQEs posted (written under the posting lock only).
    posted: AtomicU32,
    /// WQEs that left the engine's queue, less those that came back
    /// (written by the engine only, under the queue's lock).
    left: AtomicU32,
    state: AtomicU8,
    post: Mutex<()>,
}

impl RecvRing {
    /// A ring for `depth` WQEs of up to `max_sge` SGEs each, the QP in RESET.
    pub fn new(depth: u32, max_sge: u32, has_srq: bool) -> RecvRing {
        // A QP on an SRQ never posts here: no slots.
        let slots = if has_srq { 0 } else { depth };
        RecvRing::with_slots(Owner::Qp { has_srq }, depth, slots, max_sge)
    }

    /// A ring for an SRQ of `max_wr` WQEs of up to `max_sge` SGEs each.
    pub fn srq(max_wr: u32, max_sge: u32) -> RecvRing {
        let slots = max_wr.min(SRQ_RING_SLOTS);
        let r = RecvRing::with_slots(Owner::Srq, max_wr, slots, max_sge);
        // An SRQ has no state: posts are always taken.
        r.state.store(QpState::Rts as u8, Relaxed);
        r
    }

    fn with_slots(owner: Owner, depth: u32, slots: u32, max_sge: u32) -> RecvRing {
        let n = slots as usize * stride(max_sge);
        RecvRing {
            owner,
            depth: AtomicU32::new(depth),
            max_sge,
            slots,
            words: (0..n).map(|_| AtomicU64::new(0)).collect(),
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            posted: AtomicU32::new(0),
            left: AtomicU32::new(0),
            state: AtomicU8::new(QpState::Reset as u8),
            post: Mutex::new(()),
        }
    }

    fn mirrored_state(&self) -> QpState {
        QpState::from_raw(u32::from(self.state.load(SeqCst))).unwrap_or(QpState::Err)
    }

    /// `ibv_post_recv` for one WR, from any thread, without the engine.
    pub fn post(&self, wr: &RecvWr<'_>) -> Result<RingPost, PostError> {
        match self.write(wr)? {
            Write::Written(w) => Ok(self.publish(w)),
            Write::Flush => Ok(RingPost::Flush),
            Write::Full => Ok(RingPost::Full),
        }
    }

    /// The checks of a post (`check_post_recv`, or `check_post_srq_recv`),
    /// against the current count; the posting lock must be held.
    fn check(&self, wr: &RecvWr<'_>) -> Result<Disposition, PostError> {
        // Only the engine changes the count meanwhile, and only downwards.
        let outstanding = self.queued();
        let depth = self.depth.load(Relaxed);
        match self.owner {
            Owner::Qp { has_srq } => {
                let ctx = RecvQueueCtx {
                    state: self.mirrored_state(),
                    has_srq,
                    max_recv_wr: depth,
                    max_recv_sge: self.max_sge,
                    outstanding,
                };
                check_post_recv(&ctx, wr)
            }
            Owner::Srq => {
                check_post_srq_recv(wr, depth, self.max_sge, outstanding)?;
                Ok(Disposition::Queued)
            }
        }
    }

    /// The first half of a post: checks, counts and writes the slot.
    fn write(&self, wr: &RecvWr<'_>) -> Result<Write<'_>, PostError> {
        let serial = self.post.lock().unwrap_or_else(PoisonError::into_inner);
        if self.check(wr)? == Disposition::Flushed {
            return Ok(Write::Flush);
        }
        let tail = self.tail.load(Relaxed);
        if tail - self.head.load(Acquire) >= u64::from(self.slots) {
            // Only an SRQ's ring can be smaller than its queue.
            return Ok(Write::Full);
        }
        // queued ≥ WQEs in the ring at all times: count first, then publish.
        self.count_post();
        // The slot is free: tail − head < slots (checked above).
        let base = (tail % u64::from(self.slots)) as usize * stride(self.max_sge);
        let slot = &self.words[base..base + stride(self.max_sge)];
        slot[0].store(wr.wr_id, Relaxed);
        slot[1].store(wr.sg_list.len() as u64, Relaxed);
        for (i, s) in wr.sg_list.iter().enumerate() {
            slot[2 + 2 * i].store(s.addr, Relaxed);
            slot[3 + 2 * i].store(u64::from(s.length) | u64::from(s.lkey) << 32, Relaxed);
        }
        Ok(Write::Written(Written {
            _serial: serial,
            tail: tail + 1,
        }))
    }

    /// The second half: publishes the slot, then looks at the state again.
    fn publish(&self, w: Written<'_>) -> RingPost {
        self.tail.store(w.tail, Release);
        if self.owner == Owner::Srq {
            return RingPost::Queued;
        }
        // Pairs with the fence in `set_state` (no WQE left behind).
        fence(SeqCst);
        match self.mirrored_state() {
            QpState::Err | QpState::Reset => RingPost::Settle,
            _ => RingPost::Queued,
        }
    }

    /// Engine: the QP's state, after any call that may have changed it.
    /// Returns true if the ring must be settled now (it moved to ERR or RESET
    /// and WQEs are in the ring). Costs one load when nothing changed: a
    /// poster that publishes after this check sees the new state itself.
    pub fn set_state(&self, state: QpState) -> bool {
        if self.state.load(Relaxed) == state as u8 {
            return false;
        }
        self.state.store(state as u8, SeqCst);
        // Pairs with the fence in `post` (no WQE left behind).
        fence(SeqCst);
        matches!(state, QpState::Err | QpState::Reset) && self.pending() > 0
    }

    /// WQEs in the ring, not yet taken by the engine.
    pub fn pending(&self) -> u64 {
        let head = self.head.load(Relaxed);
        self.tail.load(Acquire).saturating_sub(head)
    }

    /// WQEs posted and not yet taken off the engine's queue (the depth check).
    pub fn queued(&self) -> u32 {
        // `left` first: it never passes the `posted` of an earlier moment.
        let left = self.left.load(Acquire);
        self.posted.load(Acquire).wrapping_sub(left)
    }

    /// One more WQE posted; the caller holds the posting lock (the count's
    /// only writers).
    fn count_post(&self) {
        let n = self.posted.load(Relaxed);
        self.posted.store(n.wrapping_add(1), Release);
    }

    /// Engine: a post that the ring could not take ([`RingPost::Full`]):
    /// checked and counted under the posting lock as any post, then handed
    /// to `push` (which drains the ring first, keeping the order).
    pub fn post_direct(&self, wr: &RecvWr<'_>, push: impl FnOnce()) -> Result<(), PostError> {
        let _serial = self.post.lock().unwrap_or_else(PoisonError::into_inner);
        self.check(wr)?;
        self.count_post();
        push();
        Ok(())
    }

    /// Engine: `ibv_modify_srq` under the posting lock, so no post slips in
    /// between its check of the count (`f` gets it) and the new depth
    /// (`f`'s answer, if any).
    pub fn resize<E>(&self, f: impl FnOnce(u32) -> Result<Option<u32>, E>) -> Result<(), E> {
        let _serial = self.post.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(depth) = f(self.queued())? {
            self.depth.store(depth, Relaxed);
        }
        Ok(())
    }

    /// Engine: takes each posted WQE in order: `f(wr_id, sges)`.
    pub fn drain(&self, mut f: impl FnMut(u64, &mut dyn Iterator<Item = Sge>)) {
        let (head, tail) = (self.head.load(Relaxed), self.tail.load(Acquire));
        if head == tail {
            return;
        }
        let st = stride(self.max_sge);
        for i in head..tail {
            let base = (i % u64::from(self.slots)) as usize * st;
            let slot = &self.words[base..base + st];
            let n = (slot[1].load(Relaxed) as usize).min(self.max_sge as usize);
            let mut sges = (0..n).map(|k| {
                let len_key = slot[3 + 2 * k].load(Relaxed);
                Sge {
                    addr: slot[2 + 2 * k].load(Relaxed),
                    length: len_key as u32,
                    lkey: (len_key >> 32) as u32,
                }
            });
            f(slot[0].load(Relaxed), &mut sges);
        }
        self.head.store(tail, Release);
    }

    /// Engine: `n` WQEs left its queue (consumed, flushed, discarded).
    /// (Under the queue's lock: the count's only writer.)
    pub fn taken(&self, n: u32) {
        debug_assert!(self.queued() >= n, "receive WQE count below zero");
        let left = self.left.load(Relaxed);
        self.left.store(left.wrapping_add(n), Release);
    }

    /// Engine: a WQE went back to the head of its queue (an abandoned UC message).
    pub fn returned(&self) {
        let left = self.left.load(Relaxed);
        self.left.store(left.wrapping_sub(1), Release);
    }
}

impl std::fmt::Debug for RecvRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvRing")
            .field("depth", &self.depth.load(Relaxed))
            .field("pending", &self.pending())
            .field("queued", &self.queued())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qp::wqe::RecvQueue;
    use std::sync::Arc;

    fn sge(tag: u64) -> Sge {
        Sge {
            addr: tag,
            length: tag as u32 ^ 0x5a5a,
            lkey: (tag >> 32) as u32 | 0x100,
        }
    }

    fn post(r: &RecvRing, wr_id: u64, n: usize) -> Result<RingPost, PostError> {
        let sges: Vec<Sge> = (0..n as u64).map(|k| sge(wr_id + k)).collect();
        r.post(&RecvWr {
            wr_id,
            sg_list: &sges,
        })
    }

    #[test]
    fn post_checks_state_sges_and_depth_as_check_post_recv() {
        let r = RecvRing::new(2, 3, false);
        assert!(
            matches!(post(&r, 1, 1), Err(PostError::BadState { .. })),
            "RESET"
        );
        r.set_state(QpState::Init);
        assert!(matches!(post(&r, 1, 4), Err(PostError::TooManySge { .. })));
        assert_eq!(post(&r, 1, 3).unwrap(), RingPost::Queued);
        assert_eq!(post(&r, 2, 0).unwrap(), RingPost::Queued);
        let e = post(&r, 3, 1).unwrap_err();
        assert!(matches!(e, PostError::QueueFull { .. }), "{e}");
        assert_eq!(
            e.errno(),
            PostError::QueueFull {
                queue: crate::wr::Queue::Recv,
                depth: 2,
                attr: "max_recv_wr"
            }
            .errno()
        );
        r.set_state(QpState::Err);
        assert!(
            matches!(post(&r, 4, 1), Err(PostError::QueueFull { .. })),
            "depth first"
        );
        let srq = RecvRing::new(2, 3, true);
        srq.set_state(QpState::Rts);
        assert!(matches!(post(&srq, 1, 1), Err(PostError::HasSrq)));
    }

    #[test]
    fn err_means_flush_and_a_racing_change_means_settle() {
        let r = Arc::new(RecvRing::new(4, 1, false));
        assert!(!r.set_state(QpState::Rts));
        assert_eq!(post(&r, 1, 1).unwrap(), RingPost::Queued);
        // The engine moves to ERR with a WQE still in the ring: settle now.
        assert!(r.set_state(QpState::Err));
        assert!(!r.set_state(QpState::Err), "no change, nothing to do");
        assert_eq!(post(&r, 2, 1).unwrap(), RingPost::Flush, "not posted");
        let mut q = RecvQueue::with_ring(4, r.clone());
        assert_eq!(q.len(), 1);
        assert_eq!(q.pop_front().map(|w| w.wr_id), Some(1));
        assert!(q.is_empty() && r.queued() == 0);
    }

    /// The interleavings of a post with the engine's move to ERR, step by
    /// step: whichever order, the WQE is either drained by the engine's
    /// settle or the post says Settle.
    #[test]
    fn a_post_racing_the_move_to_err_is_never_left_behind() {
        let wr = RecvWr {
            wr_id: 5,
            sg_list: &[],
        };
        // Checked in RTS; the engine moves to ERR (nothing in the ring yet:
        // no settle); then the slot is published: the post must say Settle.
        let r = RecvRing::new(4, 1, false);
        r.set_state(QpState::Rts);
        let Ok(Write::Written(w)) = r.write(&wr) else {
            panic!("not written")
        };
        assert!(!r.set_state(QpState::Err));
        assert_eq!(r.publish(w), RingPost::Settle);
        // Published before the move: the engine settles it.
        let r = RecvRing::new(4, 1, false);
        r.set_state(QpState::Rts);
        let Ok(Write::Written(w)) = r.write(&wr) else {
            panic!("not written")
        };
        assert_eq!(r.publish(w), RingPost::Queued);
        assert!(r.set_state(QpState::Err));
        // The same for RESET (discarded rather than flushed).
        let r = RecvRing::new(4, 1, false);
        r.set_state(QpState::Init);
        let Ok(Write::Written(w)) = r.write(&wr) else {
            panic!("not written")
        };
        assert!(!r.set_state(QpState::Reset));
        assert_eq!(r.publish(w), RingPost::Settle);
    }

    #[test]
    fn the_engine_side_sees_wqes_in_order_with_their_sges() {
        let r = Arc::new(RecvRing::new(3, 2, false));
        r.set_state(QpState::Rts);
        let mut q = RecvQueue::with_ring(3, r.clone());
        for round in 0..5u64 {
            for i in 0..3 {
                post(&r, round * 10 + i, (i % 3) as usize).unwrap();
            }
            for i in 0..3 {
                let w = q.pop_front().unwrap();
                assert_eq!(w.wr_id, round * 10 + i);
                let want: Vec<Sge> = (0..i % 3).map(|k| sge(round * 10 + i + k)).collect();
                assert_eq!(w.sges, want);
                if i == 0 {
                    // An abandoned UC message's WQE goes back, and counts again.
                    q.push_front(w);
                    assert_eq!(q.pop_front().unwrap().wr_id, round * 10);
                }
            }
            assert!(q.pop_front().is_none());
        }
        post(&r, 99, 1).unwrap();
        q.clear();
        assert_eq!(r.queued(), 0);
        assert!(q.front().is_none());
    }

    /// Two posting threads and the engine's side taking WQEs at once: each
    /// WQE arrives exactly once, each poster's in its order, with its SGEs,
    /// and the depth is never exceeded. Bounded in count (2 × 20 000) and
    /// time (30 s).
    #[test]
    fn concurrent_posters_and_the_engine_side() {
        use std::time::{Duration, Instant};
        const PER: u64 = 20_000;
        const DEPTH: u32 = 16;
        let deadline = Instant::now() + Duration::from_secs(30);
        let r = Arc::new(RecvRing::new(DEPTH, 2, false));
        r.set_state(QpState::Rts);
        let posters: Vec<_> = (1..=2u64)
            .map(|t| {
                let r = r.clone();
                std::thread::spawn(move || {
                    let mut seq = 0;
                    while seq < PER && Instant::now() < deadline {
                        match post(&r, t << 32 | seq, (seq % 3) as usize) {
                            Ok(RingPost::Queued) => seq += 1,
                            Err(PostError::QueueFull { .. }) => std::thread::yield_now(),
                            other => panic!("unexpected {other:?}"),
                        }
                    }
                    seq
                })
            })
            .collect();
        let mut q = RecvQueue::with_ring(DEPTH as usize, r.clone());
        let mut next = [0u64; 3];
        while next[1] + next[2] < 2 * PER && Instant::now() < deadline {
            assert!(r.queued() <= DEPTH, "beyond the depth");
            let Some(w) = q.pop_front() else {
                std::thread::yield_now();
                continue;
            };
            let (t, seq) = ((w.wr_id >> 32) as usize, w.wr_id & 0xffff_ffff);
            assert_eq!(seq, next[t], "poster {t} out of order or duplicated");
            let want: Vec<Sge> = (0..seq % 3).map(|k| sge(w.wr_id + k)).collect();
            assert_eq!(w.sges, want);
            next[t] += 1;
            q.recycle(w);
        }
        let posted: Vec<u64> = posters.into_iter().map(|p| p.join().unwrap()).collect();
        assert_eq!(posted, [PER, PER], "posters did not finish in time");
        assert_eq!(next[1..], [PER, PER]);
        assert_eq!(r.queued(), 0);
    }

    #[test]
    fn an_srq_ring_checks_as_check_post_srq_recv_and_falls_back_when_full() {
        let r = Arc::new(RecvRing::srq(SRQ_RING_SLOTS + 2, 1));
        let e = post(&r, 1, 2).unwrap_err();
        assert!(
            matches!(
                e,
                PostError::TooManySge {
                    queue: crate::wr::Queue::Srq,
                    ..
                }
            ),
            "{e}"
        );
        for id in 0..u64::from(SRQ_RING_SLOTS) {
            assert_eq!(post(&r, id, 1).unwrap(), RingPost::Queued);
        }
        // The ring is full, the SRQ is not: the engine's way.
        assert_eq!(post(&r, 9000, 1).unwrap(), RingPost::Full);
        let mut q = RecvQueue::with_ring(8, r.clone());
        let wr = RecvWr {
            wr_id: 9000,
            sg_list: &[],
        };
        r.post_direct(&wr, || q.push(&wr)).unwrap();
        assert_eq!(q.len() as u32, SRQ_RING_SLOTS + 1);
        assert_eq!(
            post(&r, 9001, 0).unwrap(),
            RingPost::Queued,
            "drained: room again"
        );
        let e = post(&r, 9002, 0).unwrap_err();
        assert!(
            matches!(
                e,
                PostError::QueueFull {
                    queue: crate::wr::Queue::Srq,
                    ..
                }
            ),
            "{e}"
        );
        assert!(
            r.post_direct(&wr, || unreachable!()).is_err(),
            "post_direct checks too"
        );
        // Oldest first: the ring's WQEs, then the direct one, then the next.
        for id in 0..u64::from(SRQ_RING_SLOTS) {
            assert_eq!(q.pop_front().unwrap().wr_id, id);
        }
        assert_eq!(q.pop_front().unwrap().wr_id, 9000);
        assert_eq!(q.pop_front().unwrap().wr_id, 9001);
        // A resize sees the count under the posting lock and sets the depth.
        post(&r, 1, 0).unwrap();
        r.resize(|queued| {
            assert_eq!(queued, 1);
            Ok::<_, ()>(Some(1))
        })
        .unwrap();
        assert!(matches!(
            post(&r, 2, 0),
            Err(PostError::QueueFull { depth: 1, .. })
        ));
    }
}

//! One QP's turn: the engine runs a call of the QP's actor with its
//! environment and sink under the QP's lock ([`Engine::drive`]), then brings
//! the scheduler up to date with it ([`Engine::sync`]); and the drain of
//! the send rings posted to since the last turn ([`Engine::take_posted`]).

use super::{EngineSink, QpGuard};
use crate::engine::Engine;
use crate::handle::QpHandle;
use crate::memory::Memory;
use crate::qp::actor::{Qp, QpEnv};

/// The [`EngineSink`] of QP `$h`, borrowing the engine's tables field by
/// field (so the QP itself may stay borrowed from `qps`).
macro_rules! engine_sink {
    ($e:ident, $h:expr) => {
        EngineSink {
            cqs: &$e.cqs,
            srqs: &$e.srqs,
            srq_nums: $e.srq_nums,
            events: &$e.dev.events,
            receives: $e.dev.receives.mine(),
            qp: $h,
            now: $e.dev.now.mine().load(std::sync::atomic::Ordering::Relaxed),
            held: None,
        }
    };
}

/// How far off a QP's entry in the timer heap must be for a later deadline
/// (or none) to leave it there ([`Engine::sync`]): a QP that goes quiet
/// comes due once more, at the entry's deadline, and finds nothing due.
pub(crate) const LAZY_NS: u64 = 1_000_000;

impl Engine {
    /// Runs one call of QP `h`'s actor with its environment and sink, then
    /// brings the scheduler up to date with it. `None` if there is no such QP.
    pub(crate) fn drive<R>(
        &self,
        h: QpHandle,
        mem: &dyn Memory,
        f: impl FnOnce(&mut Qp, &QpEnv<'_>, &mut EngineSink<'_>) -> R,
    ) -> Option<R> {
        let q = self.qps.get(h)?.lock();
        Some(self.drive_locked(h, q, mem, f))
    }

    /// [`Engine::drive`] of a QP its caller has locked already.
    pub(crate) fn drive_locked<R>(
        &self,
        h: QpHandle,
        mut q: QpGuard<'_>,
        mem: &dyn Memory,
        f: impl FnOnce(&mut Qp, &QpEnv<'_>, &mut EngineSink<'_>) -> R,
    ) -> R {
        let env = QpEnv {
            qp: h,
            mws: &self.mws,
            mrs: &self.mrs,
            mem,
            gids: &self.info.gids,
            port_mtu: self.info.port.active_mtu.bytes(),
            local_port: self.dev.local_port,
            intact: &self.dev.intact,
        };
        let r = {
            let mut sink = engine_sink!(self, h);
            q.take_posted(&mut sink);
            f(&mut q, &env, &mut sink)
        };
        self.sync(h, &mut q);
        r
    }

    /// [`Engine::drive`] for calls that touch no memory and send nothing.
    pub(crate) fn drive_ctl<R>(
        &self,
        h: QpHandle,
        f: impl FnOnce(&mut Qp, &mut EngineSink<'_>) -> R,
    ) -> Option<R> {
        let q = self.qps.get(h)?.lock();
        Some(self.drive_ctl_locked(h, q, f))
    }

    /// [`Engine::drive_ctl`] of a QP its caller has locked already.
    fn drive_ctl_locked<R>(
        &self,
        h: QpHandle,
        mut q: QpGuard<'_>,
        f: impl FnOnce(&mut Qp, &mut EngineSink<'_>) -> R,
    ) -> R {
        let r = {
            let mut sink = engine_sink!(self, h);
            q.take_posted(&mut sink);
            f(&mut q, &mut sink)
        };
        self.sync(h, &mut q);
        r
    }

    /// After a call of QP `h`'s actor (its lock held): into the ready queue
    /// if it may send (once), and its deadline into the timer heap.
    #[inline]
    pub(crate) fn sync(&self, h: QpHandle, q: &mut Qp) {
        // The state mirror the receive ring checks posts against; WQEs posted
        // while it said otherwise are flushed or discarded now (proto::rq).
        if q.recv_ring().set_state(q.ctl.state()) {
            let mut sink = engine_sink!(self, h);
            q.settle_recv(&mut sink);
        }
        // The same for the send ring's mirror (state, max_rd_atomic, Q_Key):
        // WRs posted while it said otherwise are flushed or discarded now.
        let (state, rd_atomic, qkey) = (
            q.ctl.state(),
            q.ctl.attr().max_rd_atomic,
            q.ctl.qkey_or_zero(),
        );
        if q.send_ring().set_mirror(state, rd_atomic, qkey) {
            let mut sink = engine_sink!(self, h);
            q.take_posted(&mut sink);
        }
        // A claimed QP keeps its wish: its thread gives it turns, and lets
        // it go to the ready queue when its batch left (datapath/tx.rs).
        // One woken by what needs no packet (an ACK that completed its last
        // WQE, a response that already left: `Qp::respond_now`) has
        // nothing for a turn to send: it waits for the next wake-up.
        let raw = q.ctl.qp_type() == crate::types::QpType::RawPacket;
        let ready = !q.dp.claimed && q.take_wants_tx() && !q.dp.scheduled && (raw || !q.tx_idle());
        // The heap holds each QP at its deadline or earlier. A first or
        // earlier deadline goes in at once. One that moves later, or goes,
        // leaves the entry while it is at least `LAZY_NS` off: a stream's
        // ACKs restart the ACK timer and a ping-pong's stop it, so most
        // calls take no lock for it. An entry left that way comes due
        // only when the QP went quiet for that long: its timers find
        // nothing due (they check their own deadlines) and the sync after
        // puts the real deadline in.
        let deadline = q.deadline();
        let moved = match (deadline, q.dp.in_heap) {
            (Some(d), Some(held)) if d < held => true,
            (Some(_), None) => true,
            (_, None) => false,
            (_, Some(held)) => {
                let now = self
                    .dev
                    .now
                    .mine()
                    .load(std::sync::atomic::Ordering::Relaxed);
                deadline != Some(held) && held < now.saturating_add(LAZY_NS)
            }
        };
        if ready {
            q.dp.scheduled = true;
            // RAW_PACKET QPs send frames, not datagrams (datapath/raw.rs).
            if raw {
                self.dev.raw_ready.push(h);
            } else {
                // Its home lane: its poster's, else that of the thread
                // whose call made it ready (crate::sched::TxClaims::reach).
                let lane = q.dp.home.map_or_else(lanes::lane, usize::from);
                self.dev.ready.get(lane).push(h);
            }
        }
        if moved {
            q.dp.in_heap = deadline;
            let mut sched = self.dev.sched.lock();
            sched.set_timer(h, deadline, &self.dev.timer_first);
        }
    }

    /// Moves what the send rings of the QPs posted to since the last call
    /// hold into their send queues (each QP once; nothing when none was).
    pub fn take_posted(&self) {
        self.take_posted_in(lanes::LaneSet::ALL);
    }

    /// [`Engine::take_posted`] for the QPs listed in `lanes`: each gets the
    /// lane it was listed in (its poster's) as its home (crate::sched::TxClaims::reach).
    pub(crate) fn take_posted_in(&self, lanes: lanes::LaneSet) {
        // Called before every transmit: most find no QP listed.
        if !self.rings.posted.any(lanes) {
            return;
        }
        // Another thread of this lane draining meanwhile takes what it
        // finds; this one takes the rest into a list of its own.
        let mut own = Vec::new();
        let mut scratch = self.posted_scratch.mine().try_lock();
        let list = match scratch.as_deref_mut() {
            Some(l) => l,
            None => &mut own,
        };
        self.rings.posted.take(lanes, list);
        for &(lane, h) in list.iter() {
            let Some(q) = self.qps.get(h) else { continue };
            let mut q = q.lock();
            q.dp.home = Some(lane as u8);
            // Unlisted before the drain: a post after it lists the QP again.
            q.send_ring().unlist();
            // A QP whose ring is empty again (`Engine::post_send` drains
            // its own posts at once) is left alone: the drive would find
            // nothing to take (`Qp::take_posted` makes this very test)
            // and its sync nothing to change (every call that changes a
            // QP syncs it).
            if q.send_ring().pending() == 0 {
                continue;
            }
            self.drive_ctl_locked(h, q, |_, _| ());
        }
        list.clear();
    }
}

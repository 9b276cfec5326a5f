//! Posting work requests, polling completions, arming CQs.

use crate::error::{Error, ObjectKind};
use crate::handle::{CqHandle, QpHandle, SrqHandle};
use crate::output::PostOutcome;
use crate::qp::actor::PostedSend;
use crate::rq::{RecvRing, RingPost};
use crate::sq::{SendPost, SendRing};
use crate::wc::WorkCompletion;
use crate::wr::{PostError, RecvWr, SendFlags, SendQueueCtx, SendWr};
use crate::Engine;

fn no_qp(h: QpHandle) -> PostError {
    PostError::NoSuchObject {
        kind: ObjectKind::Qp,
        handle: h.raw(),
    }
}

impl Engine {
    /// `ibv_post_send` for one WR. `inline` holds the bytes of an
    /// `IBV_SEND_INLINE` WR (gathered by the caller from its SGE addresses).
    pub fn post_send(
        &mut self,
        h: QpHandle,
        wr: &SendWr<'_>,
        inline: Option<&[u8]>,
    ) -> Result<PostOutcome, PostError> {
        self.post_send_xrc(h, wr, inline, 0)
    }

    /// [`Engine::post_send`] with the WR's `qp_type.xrc.remote_srqn`, which
    /// an XRC_SEND QP puts in every request's XRCETH (other types ignore it).
    pub fn post_send_xrc(
        &mut self,
        h: QpHandle,
        wr: &SendWr<'_>,
        inline: Option<&[u8]>,
        xrc_srqn: u32,
    ) -> Result<PostOutcome, PostError> {
        let ud_mtu = self.info.port.active_mtu.bytes();
        let q = self.qp_mut(h).map_err(|_| no_qp(h))?;
        if q.ctl.qp_type() == crate::types::QpType::RawPacket {
            let a = q.ctl.attr();
            let ctx = SendQueueCtx {
                qp_type: q.ctl.qp_type(),
                state: q.ctl.state(),
                pd: q.pd,
                max_send_wr: q.ctl.cap().max_send_wr,
                max_send_sge: q.ctl.cap().max_send_sge,
                max_inline_data: q.ctl.cap().max_inline_data,
                max_rd_atomic: a.max_rd_atomic,
                ud_mtu,
                outstanding: q.send_ring().queued(),
            };
            return self.post_raw_send(h, &ctx, wr, inline); // datapath/raw.rs
        }
        // The same post on the QP's send ring that the application side makes
        // without the engine (proto::sq), then what needs the engine.
        match q.send_ring().clone().post(wr, inline, xrc_srqn)? {
            SendPost::Queued { .. } | SendPost::Settle => {
                // Into the send queue now (flushed or discarded if it raced a
                // move to ERR, SQE or RESET).
                self.drive_ctl(h, |_, _| ());
                Ok(PostOutcome::Queued)
            }
            SendPost::Flush => {
                let posted = PostedSend {
                    flushed: true,
                    inline: None,
                    ud: None,
                    xrc_srqn: 0,
                };
                self.drive_ctl(h, |q, sink| q.post_send(wr, posted, sink));
                Ok(PostOutcome::Flushed)
            }
        }
    }

    /// After a post on the send ring raced the QP's move to ERR, SQE or
    /// RESET ([`SendPost::Settle`]), or to hand the engine what the ring
    /// holds at once: drains the ring into the send queue (flushing or
    /// discarding what the state says).
    pub fn settle_send(&mut self, h: QpHandle) -> Result<(), PostError> {
        self.drive_ctl(h, |_, _| ()).ok_or_else(|| no_qp(h))
    }

    /// The QP's send ring, for posting without the engine.
    pub fn send_ring(&self, h: QpHandle) -> Result<std::sync::Arc<SendRing>, PostError> {
        let q = self.qp(h).map_err(|_| no_qp(h))?;
        Ok(q.send_ring().clone())
    }

    /// Copies the bytes of an `IBV_SEND_INLINE` WR through the memory-region
    /// check (lkey, PD, bounds) — the safe API's way to take inline data, where
    /// a C caller hands over plain pointers instead.
    pub fn gather_checked(
        &self,
        h: QpHandle,
        sges: &[crate::wr::Sge],
        mem: &dyn crate::memory::Memory,
    ) -> Result<Vec<u8>, PostError> {
        let mut out = Vec::new();
        self.gather_checked_into(h, sges, mem, &mut out)?;
        Ok(out)
    }

    fn gather_checked_into(
        &self,
        h: QpHandle,
        sges: &[crate::wr::Sge],
        mem: &dyn crate::memory::Memory,
        out: &mut Vec<u8>,
    ) -> Result<(), PostError> {
        let pd = self.qp(h).map_err(|_| no_qp(h))?.pd;
        out.clear();
        out.resize(crate::wr::sg_total_len(sges) as usize, 0);
        crate::qp::sgl::gather(&self.mrs, pd, mem, sges, 0, out)
            .map_err(|e| PostError::InlineData { error: e })
    }

    /// `ibv_post_send` for the safe API: an `IBV_SEND_INLINE` WR's bytes are
    /// gathered through the memory-region check ([`Engine::gather_checked`])
    /// into a buffer the engine keeps, so posting allocates nothing.
    pub fn post_send_checked(
        &mut self,
        h: QpHandle,
        wr: &SendWr<'_>,
        mem: &dyn crate::memory::Memory,
    ) -> Result<PostOutcome, PostError> {
        self.post_send_checked_xrc(h, wr, mem, 0)
    }

    /// [`Engine::post_send_checked`] with the XRC SRQ number an XRC_SEND
    /// QP's requests name ([`Engine::post_send_xrc`]).
    pub fn post_send_checked_xrc(
        &mut self,
        h: QpHandle,
        wr: &SendWr<'_>,
        mem: &dyn crate::memory::Memory,
        xrc_srqn: u32,
    ) -> Result<PostOutcome, PostError> {
        if !wr.flags.contains(SendFlags::INLINE) {
            return self.post_send_xrc(h, wr, None, xrc_srqn);
        }
        let mut buf = std::mem::take(&mut self.dev.inline_buf);
        let r = self
            .gather_checked_into(h, wr.sg_list, mem, &mut buf)
            .and_then(|()| self.post_send_xrc(h, wr, Some(&buf), xrc_srqn));
        // A refused oversized WR must not pin its size: keep only what a
        // valid inline WR can need.
        if buf.capacity() <= crate::device::MAX_INLINE_DATA as usize {
            self.dev.inline_buf = buf;
        }
        r
    }

    /// `ibv_post_recv` for one WR: the same post on the QP's receive ring
    /// that the application side makes without the engine
    /// ([`crate::rq::RecvRing::post`]), then what needs the engine.
    pub fn post_recv(&mut self, h: QpHandle, wr: &RecvWr<'_>) -> Result<PostOutcome, PostError> {
        let ring = self.recv_ring(h)?;
        match ring.post(wr)? {
            RingPost::Queued => Ok(PostOutcome::Queued),
            RingPost::Flush => {
                self.drive_ctl(h, |q, sink| q.post_recv_flushed(wr, sink));
                Ok(PostOutcome::Flushed)
            }
            RingPost::Settle => {
                self.settle_recv(h)?;
                Ok(PostOutcome::Queued)
            }
            RingPost::Full => {
                // Not for a QP's ring (as many slots as max_recv_wr); handled
                // all the same.
                let q = self.qp_mut(h).map_err(|_| no_qp(h))?;
                ring.post_direct(wr, || q.dp.rq.push(wr))?;
                Ok(PostOutcome::Queued)
            }
        }
    }

    /// After a post on the receive ring raced the QP's move to ERR or RESET
    /// ([`RingPost::Settle`]): flushes (ERR) or discards (RESET) what the ring holds.
    pub fn settle_recv(&mut self, h: QpHandle) -> Result<(), PostError> {
        self.drive_ctl(h, |q, sink| q.settle_recv(sink))
            .ok_or_else(|| no_qp(h))
    }

    /// The QP's receive ring, for posting without the engine.
    pub fn recv_ring(&self, h: QpHandle) -> Result<std::sync::Arc<RecvRing>, PostError> {
        let q = self.qp(h).map_err(|_| no_qp(h))?;
        Ok(q.recv_ring().clone())
    }

    /// `ibv_post_srq_recv` for one WR.
    pub fn post_srq_recv(&mut self, h: SrqHandle, wr: &RecvWr<'_>) -> Result<(), PostError> {
        let s = self
            .srqs
            .get_mut(h)
            .ok_or_else(|| PostError::NoSuchObject {
                kind: ObjectKind::Srq,
                handle: h.raw(),
            })?;
        let queue = s.queue.get_mut();
        let Some(ring) = queue.ring().cloned() else {
            return Err(PostError::NoSuchObject {
                kind: ObjectKind::Srq,
                handle: h.raw(),
            });
        };
        // The same post the application side makes without the engine; an
        // SRQ has no state, so only a full ring comes back here.
        if ring.post(wr)? == RingPost::Full {
            ring.post_direct(wr, || queue.push(wr))?;
        }
        debug_assert!(
            queue.len() <= s.srq.get_mut().attr.max_wr as usize,
            "SRQ beyond max_wr"
        );
        Ok(())
    }

    /// An SRQ's receive ring, for posting without the engine.
    pub fn srq_ring(&self, h: SrqHandle) -> Result<std::sync::Arc<RecvRing>, PostError> {
        self.srqs
            .get(h)
            .and_then(|s| s.queue.lock().ring().cloned())
            .ok_or(PostError::NoSuchObject {
                kind: ObjectKind::Srq,
                handle: h.raw(),
            })
    }

    /// `ibv_poll_cq`: up to `max` completions, oldest first, appended to `out`.
    pub fn poll_cq(
        &mut self,
        cq: CqHandle,
        max: usize,
        out: &mut Vec<WorkCompletion>,
    ) -> Result<usize, Error> {
        let c = self.cqs.get_mut(cq).ok_or(Error::NoSuchObject {
            kind: ObjectKind::Cq,
            handle: cq.raw(),
        })?;
        Ok(c.ring.get_mut().poll(max, out))
    }

    /// `ibv_req_notify_cq`.
    pub fn req_notify_cq(&mut self, cq: CqHandle, solicited_only: bool) -> Result<(), Error> {
        let c = self.cqs.get_mut(cq).ok_or(Error::NoSuchObject {
            kind: ObjectKind::Cq,
            handle: cq.raw(),
        })?;
        c.ring.get_mut().req_notify(solicited_only);
        Ok(())
    }
}

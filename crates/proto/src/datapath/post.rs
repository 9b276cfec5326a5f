//! Posting work requests, polling completions, arming CQs.

use crate::error::{Error, ObjectKind};
use crate::handle::{CqHandle, QpHandle, SrqHandle};
use crate::qp::wqe::{RecvWqe, SendWqe, UdDest};
use crate::types::{QpState, QpType};
use crate::wc::{wc_opcode_for, WcOpcode, WorkCompletion};
use crate::wr::{
    check_post_recv, check_post_send, check_post_srq_recv, Disposition, PostError, RecvQueueCtx,
    RecvWr, SendFlags, SendQueueCtx, SendWr, WrTarget,
};
use crate::Engine;

/// What became of a posted WR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostOutcome {
    /// Queued (processed now or when the state allows).
    Queued,
    /// The QP is in ERR (or SQE for sends): completed at once with `WR_FLUSH_ERR`.
    Flushed,
}

fn no_qp(h: QpHandle) -> PostError {
    PostError::NoSuchObject {
        what: Error::NoSuchObject {
            kind: ObjectKind::Qp,
            handle: h.raw(),
        }
        .to_string(),
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
        let q = self.qps.get(h).ok_or_else(|| no_qp(h))?;
        let a = q.ctl.attr();
        let ctx = SendQueueCtx {
            qp_type: q.ctl.qp_type(),
            state: q.ctl.state(),
            pd: q.pd,
            max_send_wr: q.ctl.cap().max_send_wr,
            max_send_sge: q.ctl.cap().max_send_sge,
            max_inline_data: q.ctl.cap().max_inline_data,
            max_rd_atomic: a.max_rd_atomic,
            ud_mtu: self.info.port.active_mtu.bytes(),
            outstanding: q.dp.sq.len() as u32,
        };
        let ahs = &self.ahs;
        let disposition = check_post_send(&ctx, wr, |ah| ahs.get(ah).map(|a| a.pd))?;
        let inline = wr
            .flags
            .contains(SendFlags::INLINE)
            .then(|| inline.unwrap_or(&[]).to_vec());
        let ud = self.ud_dest(q.ctl.qkey_or_zero(), wr);
        let wqe = SendWqe::new(wr, q.ctl.sq_sig_all(), inline, ud);
        if disposition == Disposition::Flushed {
            let (qpn, cq) = (q.ctl.qpn(), q.send_cq);
            let op = wc_opcode_for(wr.opcode).unwrap_or(WcOpcode::Send);
            self.push_completion(cq, WorkCompletion::flush(wr.wr_id, qpn, op), false, None);
            return Ok(PostOutcome::Flushed);
        }
        let q = self.qps.get_mut(h).expect("checked above");
        q.dp.sq.wqes.push_back(wqe);
        self.schedule(h);
        Ok(PostOutcome::Queued)
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
        let q = self.qps.get(h).ok_or_else(|| no_qp(h))?;
        let mut out = vec![0; crate::wr::sg_total_len(sges) as usize];
        crate::qp::sgl::gather(&self.mrs, q.pd, mem, sges, 0, &mut out).map_err(|e| {
            PostError::NoSuchObject {
                what: format!("IBV_SEND_INLINE data: {e:?}"),
            }
        })?;
        Ok(out)
    }

    /// Resolves a UD WR's address handle; a Q_Key with bit 31 set means "use the
    /// QP's own" (IBA 10.2.5, rc-reliability.md §7).
    fn ud_dest(&self, own_qkey: u32, wr: &SendWr<'_>) -> Option<UdDest> {
        let WrTarget::Ud(t) = wr.target else {
            return None;
        };
        let ah = self.ahs.get(t.ah)?;
        let g = ah.attr.grh;
        let qkey = if t.remote_qkey & 0x8000_0000 != 0 {
            own_qkey
        } else {
            t.remote_qkey
        };
        Some(UdDest {
            dgid: g.dgid,
            sgid_index: g.sgid_index,
            hop_limit: g.hop_limit,
            traffic_class: g.traffic_class,
            remote_qpn: t.remote_qpn & crate::types::MASK_24,
            qkey,
        })
    }

    /// `ibv_post_recv` for one WR.
    pub fn post_recv(&mut self, h: QpHandle, wr: &RecvWr<'_>) -> Result<PostOutcome, PostError> {
        let q = self.qps.get(h).ok_or_else(|| no_qp(h))?;
        let ctx = RecvQueueCtx {
            state: q.ctl.state(),
            has_srq: q.srq.is_some(),
            max_recv_wr: q.ctl.cap().max_recv_wr,
            max_recv_sge: q.ctl.cap().max_recv_sge,
            outstanding: q.dp.rq.len() as u32,
        };
        if check_post_recv(&ctx, wr)? == Disposition::Flushed {
            let (qpn, cq) = (q.ctl.qpn(), q.recv_cq);
            self.push_completion(
                cq,
                WorkCompletion::flush(wr.wr_id, qpn, WcOpcode::Recv),
                true,
                None,
            );
            return Ok(PostOutcome::Flushed);
        }
        let q = self.qps.get_mut(h).expect("checked above");
        q.dp.rq.wqes.push_back(RecvWqe::new(wr));
        Ok(PostOutcome::Queued)
    }

    /// `ibv_post_srq_recv` for one WR.
    pub fn post_srq_recv(&mut self, h: SrqHandle, wr: &RecvWr<'_>) -> Result<(), PostError> {
        let s = self
            .srqs
            .get_mut(h)
            .ok_or_else(|| PostError::NoSuchObject {
                what: Error::NoSuchObject {
                    kind: ObjectKind::Srq,
                    handle: h.raw(),
                }
                .to_string(),
            })?;
        let a = s.srq.attr;
        check_post_srq_recv(wr, a.max_wr, a.max_sge, s.queue.len() as u32)?;
        s.queue.wqes.push_back(RecvWqe::new(wr));
        Ok(())
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
        Ok(c.ring.poll(max, out))
    }

    /// `ibv_req_notify_cq`.
    pub fn req_notify_cq(&mut self, cq: CqHandle, solicited_only: bool) -> Result<(), Error> {
        let c = self.cqs.get_mut(cq).ok_or(Error::NoSuchObject {
            kind: ObjectKind::Cq,
            handle: cq.raw(),
        })?;
        c.ring.req_notify(solicited_only);
        Ok(())
    }

    /// Adds a completion to a CQ; raises the completion event if armed, and on
    /// overrun `IBV_EVENT_CQ_ERR` and (for `qp`) moves the QP to ERR
    /// (completions.md §7.2).
    pub(crate) fn push_completion(
        &mut self,
        cq: CqHandle,
        wc: WorkCompletion,
        solicited: bool,
        qp: Option<QpHandle>,
    ) {
        use super::{AsyncEventKind, Event, EventElement};
        use crate::cq::Pushed;
        let Some(c) = self.cqs.get_mut(cq) else {
            return;
        };
        match c.ring.push(wc, solicited) {
            Pushed::Stored { event: true } => {
                if let Some(channel) = c.channel {
                    self.dev.events.push_back(Event::Completion { cq, channel });
                }
            }
            Pushed::Stored { event: false } => {}
            Pushed::Overrun => {
                self.dev.events.push_back(Event::Async {
                    kind: AsyncEventKind::CqErr,
                    element: EventElement::Cq(cq),
                });
                if let Some(qp) = qp {
                    self.enter_error(qp, AsyncEventKind::QpFatal);
                }
            }
        }
    }
}

//! A RAW_PACKET QP's data path (spec/raw-packet.md): a send WQE is one
//! Ethernet frame, the gathered bytes as they are; a frame a flow steered to
//! the QP fills one receive WQE. No transport headers, no PSNs, no
//! acknowledgements: a send completes when its frame is handed to the driver.

use super::{Qp, QpEnv, Sink};
use crate::output::AsyncEventKind;
use crate::qp::completer::success;
use crate::qp::sgl;
use crate::types::QpState;
use crate::wc::{WcOpcode, WcStatus, WorkCompletion};

/// What became of a frame offered to a RAW_PACKET QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameFate {
    /// Written to a receive WQE and completed.
    Delivered,
    /// The QP's state does not receive (RESET, INIT, ERR).
    NotReady,
    /// No receive WQE was posted: dropped, as a NIC drops it.
    NoWqe,
    /// The receive WQE failed (too small: `LOC_LEN_ERR`; its buffer not
    /// covered by an MR: `LOC_PROT_ERR`); the QP went to ERR.
    Failed,
}

impl Qp {
    /// The QP's next frame, written to the start of `buf` (at least the
    /// device's frame limit long): its length, or `None` when it has nothing
    /// to send. The WQE completes at once (signaled: `IBV_WC_SEND`); a gather
    /// list that fails the MR check completes with `LOC_PROT_ERR` and moves
    /// the QP to SQE, as a UD send error does.
    pub fn next_frame(
        &mut self,
        env: &QpEnv<'_>,
        buf: &mut [u8],
        sink: &mut impl Sink,
    ) -> Option<usize> {
        if !matches!(self.ctl.state(), QpState::Rts) || self.dp.sq.all_sent() {
            return None;
        }
        // Every earlier WQE completed when its frame left: this one is the front.
        debug_assert_eq!(
            self.dp.sq.next, 0,
            "a RAW_PACKET send queue keeps no WQE in flight"
        );
        let w = self.dp.sq.wqes.front()?;
        let len = w.len as usize;
        let gathered = match (w.inline(), buf.get_mut(..len)) {
            (_, None) => Err(WcStatus::LocLenErr),
            (Some(bytes), Some(out)) => {
                out.copy_from_slice(bytes);
                Ok(())
            }
            (None, Some(out)) => sgl::gather(env.mrs, self.pd, env.mem, &w.sges, 0, out)
                .map_err(|_| WcStatus::LocProtErr),
        };
        let (qpn, cq) = (self.ctl.qpn(), self.send_cq);
        let w = self.dp.sq.pop_front()?;
        if let Err(status) = gathered {
            sink.complete(
                cq,
                WorkCompletion::error(w.wr_id, qpn, WcOpcode::Send, status),
                true,
            );
            self.dp.sq.recycle(w);
            self.enter_sqe(sink);
            return None;
        }
        self.dp.counters.packets_sent += 1;
        self.dp.counters.bytes_sent += len as u64;
        let wc = if w.signaled { success(&w, qpn) } else { None };
        self.dp.sq.recycle(w);
        if let Some(wc) = wc {
            self.complete(sink, cq, wc, false);
        }
        // More frames wait: the engine gives the QP another turn.
        if !self.dp.sq.all_sent() {
            self.wake();
        }
        Some(len)
    }

    /// A frame a flow steered to this QP: the next receive WQE (the QP's own
    /// or its SRQ's) gets the whole frame and completes with `IBV_WC_RECV`,
    /// `byte_len` = the frame's length.
    pub fn on_frame(&mut self, env: &QpEnv<'_>, frame: &[u8], sink: &mut impl Sink) -> FrameFate {
        if !self.ctl.accepts_requests() {
            return FrameFate::NotReady;
        }
        self.dp.counters.packets_received += 1;
        self.dp.counters.bytes_received += frame.len() as u64;
        let (qpn, cq, pd) = (self.ctl.qpn(), self.recv_cq, self.pd);
        let srq = self.srq;
        let rq = match srq {
            Some(s) => match sink.srq_queue(s) {
                Some(q) => q,
                None => return FrameFate::NoWqe,
            },
            None => &mut self.dp.rq,
        };
        let Some(w) = rq.pop_front() else {
            return FrameFate::NoWqe;
        };
        let status = if frame.len() as u64 > w.capacity() {
            Some(WcStatus::LocLenErr)
        } else {
            sgl::scatter(env.mrs, pd, env.mem, &w.sges, 0, frame)
                .err()
                .map(|_| WcStatus::LocProtErr)
        };
        let wr_id = w.wr_id;
        rq.recycle(w);
        if let Some(s) = srq {
            sink.srq_taken(s);
        }
        match status {
            None => {
                let mut wc = WorkCompletion::error(wr_id, qpn, WcOpcode::Recv, WcStatus::Success);
                wc.byte_len = frame.len() as u32;
                self.complete(sink, cq, wc, false);
                FrameFate::Delivered
            }
            Some(status) => {
                let wc = WorkCompletion::error(wr_id, qpn, WcOpcode::Recv, status);
                sink.complete(cq, wc, true);
                // A receive that completes in error ends the QP (IBA 10.8.3.1).
                self.enter_error(AsyncEventKind::QpFatal, sink);
                FrameFate::Failed
            }
        }
    }
}

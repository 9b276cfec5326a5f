//! Local operations of the send queue: BIND_MW and LOCAL_INV take no PSN and
//! send no packet; they run when the requester reaches them, in send-queue
//! order (rc-reliability.md §1.1; spec/memory-windows.md §3, §6), and
//! complete in order with the WQEs around them.

use super::{Qp, QpEnv, Sink};
use crate::mr::mw;
use crate::qp::completer::success;
use crate::types::QpState;
use crate::wc::WcStatus;
use crate::wr::{SendFlags, WrOpcode, WrTarget};

impl Qp {
    /// Runs (or, after a go-back-N rewind, steps over) the local operations
    /// at the requester's cursor. True when the cursor is past them (a request
    /// packet may follow); false if one waits (not RTS, a fence) or failed
    /// (the QP is in error, or the failure waits for the WQEs before it).
    pub(super) fn run_local_ops(&mut self, env: &QpEnv<'_>, sink: &mut impl Sink) -> bool {
        loop {
            let i = self.dp.sq.next;
            let Some(w) = self.dp.sq.wqes.get(i) else {
                return true;
            };
            if w.failed.is_some() {
                return false;
            }
            if !w.opcode.is_local() {
                return true;
            }
            if w.done {
                // Executed before a rewind moved the cursor back: once only.
                self.dp.sq.next += 1;
                continue;
            }
            if self.ctl.state() != QpState::Rts {
                return false;
            }
            // IBV_SEND_FENCE: after every earlier READ/atomic has completed.
            if w.flags.contains(SendFlags::FENCE) && self.dp.req.rd_atomic_inflight() > 0 {
                return false;
            }
            if let Err(status) = self.execute_local(i, env) {
                self.fail_request(i, status, sink);
                return false;
            }
            self.dp.sq.next += 1;
            self.retire_done_front(sink);
        }
    }

    /// Performs local WQE `i`; on failure the completion status
    /// (rxe `rxe_do_local_ops`: MW_BIND_ERR for a bind, LOC_QP_OP_ERR for an
    /// invalidation).
    fn execute_local(&mut self, i: usize, env: &QpEnv<'_>) -> Result<(), WcStatus> {
        let next_psn = self.dp.req.next_psn();
        let (pd, qp) = (self.pd, env.qp);
        let w = &mut self.dp.sq.wqes[i];
        // No PSN: a failure behind outstanding WQEs takes back nothing.
        w.first_psn = next_psn;
        w.npsn = 0;
        let mut mws = env.mws.write();
        let r = match (w.opcode, w.target) {
            (WrOpcode::BindMw, WrTarget::Bind(req)) => mw::bind(&mut mws, env.mrs, qp, pd, &req)
                .map(|_| ())
                .map_err(|e| (e, WcStatus::MwBindErr)),
            (WrOpcode::LocalInv, WrTarget::Invalidate { rkey }) => {
                mw::invalidate(&mut mws, pd, None, rkey).map_err(|e| (e, WcStatus::LocQpOpErr))
            }
            // Posting checked the target (wr::check_post_send).
            _ => return Err(WcStatus::LocQpOpErr),
        };
        w.done = r.is_ok();
        r.map_err(|(e, status)| {
            self.dp.window_error = Some(e);
            status
        })
    }

    /// Retires the WQEs at the front that are done, in order (a local
    /// operation, or UC/UD sends, behind which local operations finished).
    pub(super) fn retire_done_front(&mut self, sink: &mut impl Sink) {
        let (qpn, cq) = (self.ctl.qpn(), self.send_cq);
        while self.dp.sq.wqes.front().is_some_and(|w| w.done) {
            let Some(w) = self.dp.sq.retire() else { break };
            let wc = if w.signaled { success(&w, qpn) } else { None };
            self.dp.sq.recycle(w);
            if let Some(wc) = wc {
                self.complete(sink, cq, wc, false);
            }
        }
    }
}

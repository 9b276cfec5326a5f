//! What state changes do to a QP's data path (qp-state-machine.md §6):
//! starting the requester and responder, RESET discarding everything
//! silently, ERR flushing everything with `WR_FLUSH_ERR`, SQD drain
//! detection, SQE for unreliable send errors.

use super::{flush_wc_recv, flush_wc_send, Qp, Sink};
use crate::mask::AttrMask;
use crate::output::AsyncEventKind;
use crate::qp::data::QpData;
use crate::qp::modify::Transition;
use crate::types::QpState;

impl Qp {
    /// Side effects of a successful `ibv_modify_qp` (`t`, with attribute mask `mask`).
    pub fn on_modify(&mut self, t: Transition, mask: AttrMask, sink: &mut impl Sink) {
        let a = *self.ctl.attr();
        // A new retry_cnt / rnr_retry (SQD→SQD, SQD→RTS) is the budget from
        // now on; RTR→RTS sets both when the requester starts.
        if matches!(t.from, QpState::Rts | QpState::Sqd | QpState::Sqe) {
            self.dp.req.set_budgets(
                mask.contains(AttrMask::RETRY_CNT).then_some(a.retry_cnt),
                mask.contains(AttrMask::RNR_RETRY).then_some(a.rnr_retry),
            );
        }
        match (t.from, t.to) {
            (_, QpState::Reset) => {
                // Everything queued is discarded without completions (§6.1).
                // The counters stay, and so does the engine's bookkeeping
                // beside the QP: what its heap holds, whether its ready
                // queue holds the QP (a second entry would let two threads
                // claim it), which thread's batch may hold its packets.
                // The receive ring stays (the application holds it), emptied.
                let (counters, in_heap) = (self.dp.counters, self.dp.in_heap);
                let (scheduled, claimed) = (self.dp.scheduled, self.dp.claimed);
                self.dp.rq.clear();
                self.dp.sq.discard_all();
                let ring = self.recv_ring().clone();
                let send_ring = self.send_ring().clone();
                self.dp = QpData {
                    counters,
                    in_heap,
                    scheduled,
                    claimed,
                    ..QpData::with_capacity(self.ctl.cap(), ring, send_ring)
                };
            }
            (QpState::Init, QpState::Rtr) => self.dp.resp.start(a.rq_psn),
            (QpState::Rtr, QpState::Rts) => {
                self.dp.req.start(a.sq_psn, a.retry_cnt, a.rnr_retry);
                self.wake();
            }
            // SQ_PSN into RTS from elsewhere (SQD→RTS, or RTS→RTS under
            // CUR_STATE = RTR): the send PSN restarts there, as RTR→RTS does.
            (_, QpState::Rts) if mask.contains(AttrMask::SQ_PSN) => {
                self.dp.req.start(a.sq_psn, a.retry_cnt, a.rnr_retry);
                self.wake();
            }
            (QpState::Sqd | QpState::Sqe, QpState::Rts) => self.wake(),
            (QpState::Rts, QpState::Sqd) => self.check_drained(sink),
            (from, QpState::Err) if from != QpState::Err => self.flush(sink),
            _ => {}
        }
    }

    /// The device moves the QP to ERR by itself (a fatal error), raising `kind`.
    pub fn enter_error(&mut self, kind: AsyncEventKind, sink: &mut impl Sink) {
        if self.ctl.state() == QpState::Err {
            return;
        }
        self.ctl.device_move(QpState::Err);
        sink.qp_event(kind);
        self.flush(sink);
    }

    /// The QP goes to ERR after a transport error reported by its completion
    /// (RETRY_EXC_ERR, RNR_RETRY_EXC_ERR, a NAK): no async event, as on hardware.
    pub(super) fn enter_error_quiet(&mut self, sink: &mut impl Sink) {
        if self.ctl.state() == QpState::Err {
            return;
        }
        self.ctl.device_move(QpState::Err);
        self.flush(sink);
    }

    /// A send error on a UC/UD QP: SQE, the send queue flushed, receives go on
    /// (qp-state-machine.md §6.4).
    pub(super) fn enter_sqe(&mut self, sink: &mut impl Sink) {
        if self.ctl.qp_type().is_reliable() {
            return self.enter_error(AsyncEventKind::QpFatal, sink);
        }
        self.ctl.device_move(QpState::Sqe);
        self.flush_sends(sink);
    }

    /// ERR: every outstanding send WQE, then every receive WQE, completes with
    /// `WR_FLUSH_ERR`, unsignaled ones included (§6.2). SRQ WQEs stay; a QP on
    /// an SRQ raises `IBV_EVENT_QP_LAST_WQE_REACHED`.
    fn flush(&mut self, sink: &mut impl Sink) {
        self.flush_sends(sink);
        let (qpn, cq) = (self.ctl.qpn(), self.recv_cq);
        self.dp.ack_deadline = None;
        self.dp.rnr_until = None;
        // Completions go straight to the sink, never back through
        // `Qp::complete`: a flush that overruns the CQ has nothing left to fail.
        if let Some(w) = self.dp.resp.take_in_progress() {
            // XRC_RECV: on the CQ of the SRQ the WQE came from.
            let cq = self.xrc_msg_cq.unwrap_or(cq);
            sink.complete(cq, flush_wc_recv(&w, qpn), true);
        }
        while let Some(w) = self.dp.rq.pop_front() {
            sink.complete(cq, flush_wc_recv(&w, qpn), true);
            self.dp.rq.recycle(w);
        }
        if self.srq.is_some() {
            sink.qp_event(AsyncEventKind::QpLastWqeReached);
        }
    }

    fn flush_sends(&mut self, sink: &mut impl Sink) {
        let (qpn, cq) = (self.ctl.qpn(), self.send_cq);
        self.dp.sq.next = 0;
        self.dp.req.flushed();
        while let Some(w) = self.dp.sq.pop_front() {
            sink.complete(cq, flush_wc_send(&w, qpn), false);
            self.dp.sq.recycle(w);
        }
    }

    /// SQD: once no started message is outstanding the drain is over; raise
    /// `IBV_EVENT_SQ_DRAINED` if it was asked for (§6.3).
    pub(super) fn check_drained(&mut self, sink: &mut impl Sink) {
        if self.ctl.state() != QpState::Sqd || !self.ctl.sq_draining() {
            return;
        }
        if self.dp.sq.wqes.iter().any(|w| w.npsn > 0) {
            return;
        }
        if self.ctl.drain_finished() {
            sink.qp_event(AsyncEventKind::SqDrained);
        }
    }
}

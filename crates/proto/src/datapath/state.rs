//! What state changes do to the data path (qp-state-machine.md §6): starting
//! the requester and responder, RESET discarding everything silently, ERR
//! flushing everything with `WR_FLUSH_ERR`, SQD drain detection, SQE for
//! unreliable send errors.

use super::{AsyncEventKind, Event, EventElement};
use crate::handle::QpHandle;
use crate::mask::AttrMask;
use crate::qp::data::QpData;
use crate::qp::modify::Transition;
use crate::types::{QpState, QpType};
use crate::wc::{wc_opcode_for, WcOpcode, WorkCompletion};
use crate::Engine;

impl Engine {
    /// Side effects of a successful modify.
    pub(crate) fn after_transition(&mut self, h: QpHandle, t: Transition, mask: AttrMask) {
        let Some(q) = self.qps.get_mut(h) else { return };
        let a = *q.ctl.attr();
        match (t.from, t.to) {
            (_, QpState::Reset) => {
                // Everything queued is discarded without completions (§6.1).
                let counters = q.dp.counters;
                q.dp = QpData {
                    counters,
                    ..QpData::default()
                };
            }
            (QpState::Init, QpState::Rtr) => q.dp.resp.start(a.rq_psn),
            (QpState::Rtr, QpState::Rts) => {
                q.dp.req.start(a.sq_psn, a.retry_cnt, a.rnr_retry);
                self.schedule(h);
            }
            // SQ_PSN into RTS from elsewhere (SQD→RTS, or RTS→RTS under
            // CUR_STATE = RTR): the send PSN restarts there, as RTR→RTS does.
            (_, QpState::Rts) if mask.contains(AttrMask::SQ_PSN) => {
                q.dp.req.start(a.sq_psn, a.retry_cnt, a.rnr_retry);
                self.schedule(h);
            }
            (QpState::Sqd | QpState::Sqe, QpState::Rts) => self.schedule(h),
            (QpState::Rts, QpState::Sqd) => self.check_drained(h),
            (from, QpState::Err) if from != QpState::Err => self.flush(h),
            _ => {}
        }
    }

    /// The device moves a QP to ERR by itself (a fatal error), raising `kind`.
    pub(crate) fn enter_error(&mut self, h: QpHandle, kind: AsyncEventKind) {
        let Some(q) = self.qps.get_mut(h) else { return };
        if q.ctl.state() == QpState::Err {
            return;
        }
        q.ctl.device_move(QpState::Err);
        self.dev.events.push_back(Event::Async {
            kind,
            element: EventElement::Qp(h),
        });
        self.flush(h);
    }

    /// The QP goes to ERR after a transport error reported by its completion
    /// (RETRY_EXC_ERR, RNR_RETRY_EXC_ERR, a NAK): no async event, as on hardware.
    pub(crate) fn enter_error_quiet(&mut self, h: QpHandle) {
        let Some(q) = self.qps.get_mut(h) else { return };
        if q.ctl.state() == QpState::Err {
            return;
        }
        q.ctl.device_move(QpState::Err);
        self.flush(h);
    }

    /// A send error on a UC/UD QP: SQE, the send queue flushed, receives go on
    /// (qp-state-machine.md §6.4).
    pub(crate) fn enter_sqe(&mut self, h: QpHandle) {
        let Some(q) = self.qps.get_mut(h) else { return };
        if q.ctl.qp_type() == QpType::Rc {
            return self.enter_error(h, AsyncEventKind::QpFatal);
        }
        q.ctl.device_move(QpState::Sqe);
        self.flush_sends(h);
    }

    /// ERR: every outstanding send WQE, then every receive WQE, completes with
    /// `WR_FLUSH_ERR`, unsignaled ones included (§6.2). SRQ WQEs stay; a QP on
    /// an SRQ raises `IBV_EVENT_QP_LAST_WQE_REACHED`.
    fn flush(&mut self, h: QpHandle) {
        self.flush_sends(h);
        let Some(q) = self.qps.get_mut(h) else { return };
        let (qpn, cq, srq) = (q.ctl.qpn(), q.recv_cq, q.srq);
        let mut wqes: Vec<_> = q.dp.resp.take_in_progress().into_iter().collect();
        wqes.extend(q.dp.rq.wqes.drain(..));
        q.dp.ack_deadline = None;
        q.dp.rnr_until = None;
        for w in wqes {
            self.push_completion(
                cq,
                WorkCompletion::flush(w.wr_id, qpn, WcOpcode::Recv),
                true,
                None,
            );
        }
        if srq.is_some() {
            let element = EventElement::Qp(h);
            self.dev.events.push_back(Event::Async {
                kind: AsyncEventKind::QpLastWqeReached,
                element,
            });
        }
    }

    fn flush_sends(&mut self, h: QpHandle) {
        let Some(q) = self.qps.get_mut(h) else { return };
        let (qpn, cq) = (q.ctl.qpn(), q.send_cq);
        let wqes: Vec<_> = q.dp.sq.wqes.drain(..).collect();
        q.dp.sq.next = 0;
        q.dp.req.rd_atomic_inflight = 0;
        for w in wqes {
            let op = wc_opcode_for(w.opcode).unwrap_or(WcOpcode::Send);
            self.push_completion(cq, WorkCompletion::flush(w.wr_id, qpn, op), false, None);
        }
    }

    /// SQD: once no started message is outstanding the drain is over; raise
    /// `IBV_EVENT_SQ_DRAINED` if it was asked for (§6.3).
    pub(crate) fn check_drained(&mut self, h: QpHandle) {
        let Some(q) = self.qps.get_mut(h) else { return };
        if q.ctl.state() != QpState::Sqd || !q.ctl.sq_draining() {
            return;
        }
        if q.dp.sq.wqes.iter().any(|w| w.npsn > 0) {
            return;
        }
        if q.ctl.drain_finished() {
            let element = EventElement::Qp(h);
            self.dev.events.push_back(Event::Async {
                kind: AsyncEventKind::SqDrained,
                element,
            });
        }
    }
}

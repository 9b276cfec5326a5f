//! The completer: what an RC requester does with the responses it receives
//! (ACK, NAK, READ responses, atomic ACKs), per `spec/rc-reliability.md` §1.3,
//! §1.4 and §2. Send WQEs complete strictly in posting order; unsignaled
//! successes retire silently; errors always complete.

use super::requester::Requester;
use super::sgl::{self, SglError};
use super::wqe::{SendQueue, SendWqe};
use crate::handle::PdHandle;
use crate::memory::Memory;
use crate::mr::MrTable;
use crate::timers::{aeth_action, AethAction, NakAction, NakCode, RNR_RETRY_INFINITE};
use crate::wc::{WcStatus, WorkCompletion};
use crate::wr::WrOpcode;
use wire::opcode::{Operation, Position};
use wire::{Psn, TransportRepr};

/// What the completer needs to know about its QP.
pub struct CompEnv<'a> {
    /// Own QPN.
    pub qpn: u32,
    /// The QP's PD.
    pub pd: PdHandle,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// Configured `retry_cnt` (restored on progress).
    pub retry_cnt: u8,
    /// Configured `rnr_retry` (restored on progress; 7 = infinite).
    pub rnr_retry: u8,
    /// Memory regions.
    pub mrs: &'a MrTable,
    /// Memory.
    pub mem: &'a dyn Memory,
}

/// What handling a response did.
#[derive(Debug, Default)]
pub struct CompEffects {
    /// Send completions, in order.
    pub completions: Vec<WorkCompletion>,
    /// The QP must go to ERR (the failing WQE's completion is already in `completions`).
    pub fatal: bool,
    /// Forward progress: timers restart, retry budgets restore.
    pub progress: bool,
    /// Wait this long before resending (RNR NAK).
    pub rnr_wait_ns: Option<u64>,
    /// The packet was ignored (stale, duplicate, unexpected).
    pub ignored: bool,
    /// An RNR NAK arrived.
    pub rnr_nak: bool,
    /// A PSN-sequence NAK arrived.
    pub seq_nak: bool,
    /// An ACK implied that a READ/atomic response was lost (retry round started).
    pub implied_nak: bool,
    /// A fatal NAK (invalid request, remote access, remote operational) arrived.
    pub error_nak: bool,
    /// A READ response after a gap: the READ is asked for again from the gap.
    pub read_gap: bool,
}

impl Requester {
    /// Handles one response packet.
    pub fn handle_response(
        &mut self,
        sq: &mut SendQueue,
        env: &CompEnv<'_>,
        repr: &TransportRepr,
        payload: &[u8],
        fx: &mut CompEffects,
    ) {
        let q = repr.bth.psn;
        // Only PSNs that were sent and are not yet acknowledged (hfi1 rc_rcv_resp).
        let outstanding = self.next_psn.offset_from(self.una);
        if q.offset_from(self.una) >= outstanding {
            fx.ignored = true;
            return;
        }
        let before = self.una;
        match repr.bth.opcode.operation() {
            Operation::Ack => self.on_ack(sq, env, repr, fx),
            Operation::ReadResponse => self.on_read_response(sq, env, repr, payload, fx),
            Operation::AtomicAck => self.on_atomic_ack(sq, env, repr, fx),
            _ => fx.ignored = true,
        }
        // Anything newly acknowledged is forward progress: the ACK timer restarts
        // and the budgets are restored — also when a sequence NAK acknowledges
        // the PSNs before it (hfi1 restores both counters after a NAK, §1.3).
        // An RNR NAK does not restore the RNR budget (§1.4), and its wait stops
        // the ACK timer anyway.
        if self.una != before && !fx.rnr_nak {
            fx.progress = true;
        }
        self.retire(sq, env, fx);
        if !fx.fatal {
            complete_failed(sq, env, fx);
        }
        // The acknowledged edge never passes the send edge (both move forward
        // only, less than half the PSN space apart: roce-wire.md §9).
        debug_assert!(
            self.next_psn.offset_from(self.una) < 1 << 23,
            "una passed next_psn"
        );
    }

    fn on_ack(
        &mut self,
        sq: &mut SendQueue,
        env: &CompEnv<'_>,
        repr: &TransportRepr,
        fx: &mut CompEffects,
    ) {
        let q = repr.bth.psn;
        let Some(aeth) = repr.aeth else {
            return fx.ignored = true;
        };
        match aeth_action(aeth.syndrome) {
            AethAction::Ack { .. } => self.acknowledge(sq, env, q.next(), fx),
            AethAction::RnrWait { delay_us } => {
                // Every NAK acknowledges the PSNs before it (§1.4).
                self.acknowledge(sq, env, q, fx);
                fx.rnr_nak = true;
                if self.rnr_left == 0 {
                    return self.fail_wqe(sq, env, WcStatus::RnrRetryExcErr, fx);
                }
                if env.rnr_retry != RNR_RETRY_INFINITE {
                    self.rnr_left -= 1;
                }
                self.rewind(sq, q, env.mtu);
                fx.rnr_wait_ns = Some(u64::from(delay_us) * 1000);
            }
            AethAction::Nak(rule) => {
                self.acknowledge(sq, env, q, fx);
                match (rule.code, rule.action) {
                    (NakCode::PsnSequenceError, _) => {
                        // Resend from q. Like hfi1 this does not spend the transport
                        // retry budget; only ACK timeouts do (§1.3).
                        fx.seq_nak = true;
                        self.rewind(sq, q, env.mtu);
                    }
                    (_, NakAction::Fail(status) | NakAction::Retry { exhausted: status }) => {
                        fx.error_nak = true;
                        self.fail_wqe(sq, env, status, fx)
                    }
                }
            }
        }
    }

    /// Everything before `upto` is acknowledged: SEND/WRITE WQEs ending before it
    /// complete; an unanswered READ/atomic before it means its response was lost
    /// (an implied NAK): resend from it.
    fn acknowledge(
        &mut self,
        sq: &mut SendQueue,
        env: &CompEnv<'_>,
        upto: Psn,
        fx: &mut CompEffects,
    ) {
        let mut upto = upto;
        for w in &mut sq.wqes {
            // Done WQEs (a local operation has no PSN) are stepped over; the
            // first not yet started one ends the sent part.
            if w.done {
                continue;
            }
            if w.npsn == 0 {
                break;
            }
            // Every PSN before `upto` reached the responder, so a WQE ending
            // before it was fully sent once, even if a rewind since then reset
            // its packet count for a resend.
            let ends_before =
                w.last_psn().next().offset_from(self.una) <= upto.offset_from(self.una);
            if !ends_before {
                // Inside an unanswered READ/atomic only its own responses
                // acknowledge anything: a later response packet of the same READ
                // does not make the missing earlier ones arrive.
                if w.is_rd_atomic() {
                    let resume = w
                        .first_psn
                        .wrapping_add((w.read_done / u64::from(env.mtu)) as u32);
                    if resume.offset_from(self.una) < upto.offset_from(self.una) {
                        upto = resume;
                    }
                }
                break;
            }
            if w.is_rd_atomic() {
                let from = w
                    .first_psn
                    .wrapping_add((w.read_done / u64::from(env.mtu)) as u32);
                self.una = from;
                return self.implied_nak(sq, env, from, fx);
            }
            w.done = true;
        }
        if upto.offset_from(self.una) <= self.next_psn.offset_from(self.una) {
            self.una = upto;
        }
    }

    /// An acknowledgement beyond an unanswered READ/atomic: its response was
    /// lost. Resend from it, counted against `retry_cnt` like an ACK timeout
    /// (rc-reliability.md §1.3, §2; rxe `check_psn`, hfi1 `do_rc_ack`), at most
    /// once per retry round: the ACKs of the packets already in flight behind
    /// it say the same thing again and must not spend the budget.
    fn implied_nak(
        &mut self,
        sq: &mut SendQueue,
        env: &CompEnv<'_>,
        from: Psn,
        fx: &mut CompEffects,
    ) {
        if self.retrying == Some(from) {
            return;
        }
        fx.implied_nak = true;
        self.spend_retry(sq, env, from, fx);
    }

    /// One transport retry round from `from`: spends `retry_cnt` (or fails the
    /// WQE with RETRY_EXC_ERR when none is left) and resends from there.
    fn spend_retry(
        &mut self,
        sq: &mut SendQueue,
        env: &CompEnv<'_>,
        from: Psn,
        fx: &mut CompEffects,
    ) {
        if self.retry_left == 0 {
            return self.fail_wqe(sq, env, WcStatus::RetryExcErr, fx);
        }
        self.retry_left -= 1;
        self.retrying = Some(from);
        self.rewind(sq, from, env.mtu);
    }

    fn on_read_response(
        &mut self,
        sq: &mut SendQueue,
        env: &CompEnv<'_>,
        repr: &TransportRepr,
        payload: &[u8],
        fx: &mut CompEffects,
    ) {
        let q = repr.bth.psn;
        self.acknowledge(sq, env, q, fx);
        let Some(i) = first_open(sq) else {
            return fx.ignored = true;
        };
        let mtu = u64::from(env.mtu);
        let w = &sq.wqes[i];
        let expected = w.first_psn.wrapping_add((w.read_done / mtu) as u32);
        if q.offset_from(w.first_psn) >= w.npsn {
            // A response for a later WQE: an earlier READ/atomic's response was
            // lost and `acknowledge` started the retry from it. This one will
            // come again after the resend.
            return fx.ignored = true;
        }
        // READ, and the zero-length READ response of ATOMIC_WRITE and FLUSH
        // (rxe send_read_response_ack).
        if !matches!(
            w.opcode,
            WrOpcode::RdmaRead | WrOpcode::AtomicWrite | WrOpcode::Flush
        ) {
            return self.fail_wqe(sq, env, WcStatus::BadRespErr, fx);
        }
        if q != expected {
            // A gap (lost response) or an old copy: resume from what is missing.
            fx.ignored = true;
            if q.is_after(expected) {
                // Every later packet of the lost stream lands here too: ask
                // again once per gap, not once per stale packet. A gap is a
                // sequence error in the responses and spends a transport retry,
                // like an implied NAK (rc-reliability.md §1.3; rxe
                // COMPST_ERROR_RETRY, hfi1 rdma_seq_err); progress restores it.
                let w = &mut sq.wqes[i];
                if w.read_reasked != Some(w.read_done) && self.retrying != Some(expected) {
                    w.read_reasked = Some(w.read_done);
                    fx.read_gap = true;
                    self.spend_retry(sq, env, expected, fx);
                }
            }
            return;
        }
        let left = w.response_len() - w.read_done;
        let n = payload.len() as u64;
        let ok_len = match repr.bth.opcode.position() {
            Position::First | Position::Middle => n == mtu && n < left,
            Position::Last | Position::Only => n == left,
        };
        if !ok_len {
            return self.fail_wqe(sq, env, WcStatus::LocLenErr, fx);
        }
        let w = &mut sq.wqes[i];
        if let Err(e) = sgl::scatter(env.mrs, env.pd, env.mem, &w.sges, w.read_done, payload) {
            let status = if matches!(e, SglError::Length { .. }) {
                WcStatus::LocLenErr
            } else {
                WcStatus::LocProtErr
            };
            return self.fail_wqe(sq, env, status, fx);
        }
        w.read_done += n;
        fx.progress = true;
        self.una = q.next();
        if w.read_done >= w.response_len() {
            w.done = true;
            self.rd_atomic_inflight = self.rd_atomic_inflight.saturating_sub(1);
            self.una = w.last_psn().next();
        }
    }

    fn on_atomic_ack(
        &mut self,
        sq: &mut SendQueue,
        env: &CompEnv<'_>,
        repr: &TransportRepr,
        fx: &mut CompEffects,
    ) {
        let q = repr.bth.psn;
        self.acknowledge(sq, env, q, fx);
        let Some(i) = first_open(sq) else {
            return fx.ignored = true;
        };
        let w = &sq.wqes[i];
        if w.first_psn != q {
            // For a later WQE, after an implied NAK (as for READ responses).
            return fx.ignored = true;
        }
        if !w.opcode.is_atomic() {
            return self.fail_wqe(sq, env, WcStatus::BadRespErr, fx);
        }
        let Some(ack) = repr.atomic_ack_eth else {
            return fx.ignored = true;
        };
        // The original value lands in host byte order (rc-reliability.md §2).
        if let Err(e) = sgl::scatter(
            env.mrs,
            env.pd,
            env.mem,
            &w.sges,
            0,
            &ack.orig.to_ne_bytes(),
        ) {
            let status = if matches!(e, SglError::Length { .. }) {
                WcStatus::LocLenErr
            } else {
                WcStatus::LocProtErr
            };
            return self.fail_wqe(sq, env, status, fx);
        }
        sq.wqes[i].done = true;
        self.rd_atomic_inflight = self.rd_atomic_inflight.saturating_sub(1);
        self.una = q.next();
        fx.progress = true;
    }

    /// The oldest open WQE completes with `status` (after the WQEs before it, in
    /// order); the QP goes to ERR and the engine flushes what remains.
    fn fail_wqe(
        &mut self,
        sq: &mut SendQueue,
        env: &CompEnv<'_>,
        status: WcStatus,
        fx: &mut CompEffects,
    ) {
        self.retire(sq, env, fx);
        if let Some(w) = sq.retire() {
            fx.completions
                .push(WorkCompletion::error(w.wr_id, env.qpn, wc_op(&w), status));
            sq.recycle(w);
        }
        fx.fatal = true;
    }

    /// Retires completed WQEs from the front, in order.
    pub fn retire(&mut self, sq: &mut SendQueue, env: &CompEnv<'_>, fx: &mut CompEffects) {
        while let Some(w) = sq.wqes.front().filter(|w| w.done) {
            if w.signaled {
                if let Some(wc) = success(w, env.qpn) {
                    fx.completions.push(wc);
                }
            }
            sq.retire_front();
        }
    }
}

/// A WQE that failed locally behind older outstanding ones completes with its
/// status once those are retired; then the QP goes to ERR (rxe: the completer
/// meets the WQE in its error state at the head of the queue).
fn complete_failed(sq: &mut SendQueue, env: &CompEnv<'_>, fx: &mut CompEffects) {
    let Some(status) = sq.wqes.front().and_then(|w| w.failed) else {
        return;
    };
    if let Some(w) = sq.retire() {
        fx.completions
            .push(WorkCompletion::error(w.wr_id, env.qpn, wc_op(&w), status));
        fx.fatal = true;
        sq.recycle(w);
    }
}

/// Index of the oldest WQE not yet done.
fn first_open(sq: &SendQueue) -> Option<usize> {
    sq.wqes.iter().position(|w| !w.done)
}

fn wc_op(w: &SendWqe) -> crate::wc::WcOpcode {
    crate::wc::wc_opcode_for(w.opcode).unwrap_or(crate::wc::WcOpcode::Send)
}

/// The success completion of a send WQE (byte_len: READ bytes, atomics 8, else
/// the message length, as rxe fills it).
pub fn success(w: &SendWqe, qpn: u32) -> Option<WorkCompletion> {
    let len = if w.opcode.is_atomic() {
        8
    } else {
        w.len as u32
    };
    WorkCompletion::send_success(w.wr_id, qpn, w.opcode, len)
}

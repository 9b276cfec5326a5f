//! Packets in: requests go to the responder, responses to the completer, and
//! what they did becomes counters, completions, timers and state changes.

use super::{path_mtu, Packet, Qp, QpEnv, Sink};
use crate::output::AsyncEventKind;
use crate::qp::completer::{CompEffects, CompEnv};
use crate::qp::data::QpCounters;
use crate::qp::responder::{Drop, Fatal, Incoming, RespEffects, RespEnv};
use crate::timers::local_ack_timeout_ns;
use crate::types::{QpState, QpType};

impl Qp {
    /// A packet addressed to this QP, now `now`. Returns true if the QP
    /// dropped it (for the device's `drop_by_qp` counter).
    pub fn on_packet(
        &mut self,
        now: u64,
        env: &QpEnv<'_>,
        pkt: &Packet<'_>,
        sink: &mut impl Sink,
    ) -> bool {
        self.dp.counters.packets_received += 1;
        self.dp.counters.bytes_received += pkt.payload.len() as u64;
        if pkt.repr.opcode().is_response() {
            self.on_response(now, env, pkt, sink);
            false
        } else {
            self.on_request(env, pkt, sink)
        }
    }

    /// What the responder needs to know.
    pub(super) fn resp_env<'a>(&self, env: &QpEnv<'a>) -> RespEnv<'a> {
        let a = self.ctl.attr();
        RespEnv {
            qp_type: self.ctl.qp_type(),
            qpn: self.ctl.qpn(),
            dest_qpn: a.dest_qp_num,
            pd: self.pd,
            access: a.qp_access_flags,
            mtu: path_mtu(a.path_mtu),
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            min_rnr_timer: a.min_rnr_timer,
            qkey: self.ctl.qkey_or_zero(),
            qp: env.qp,
            mws: env.mws,
            mrs: env.mrs,
            mem: env.mem,
        }
    }

    fn on_request(&mut self, env: &QpEnv<'_>, pkt: &Packet<'_>, sink: &mut impl Sink) -> bool {
        if self.ctl.state() == QpState::Rtr && !self.dp.comm_est {
            // The first packet in RTR (qp-state-machine.md §6.5).
            self.dp.comm_est = true;
            sink.qp_event(AsyncEventKind::CommEst);
        }
        let mut renv = self.resp_env(env);
        // The completions buffer is the QP's own, reused: no allocation per packet.
        let mut fx = RespEffects {
            completions: std::mem::take(&mut self.dp.resp_wcs),
            ..RespEffects::default()
        };
        let inc = Incoming {
            repr: pkt.repr,
            payload: pkt.payload,
            grh: pkt.grh,
        };
        let (cq, srq) = match self.xrc {
            Some(link) => self.on_xrc_request(link, &mut renv, &inc, &mut fx, sink),
            None => {
                match self.srq.and_then(|s| sink.srq_queue(s)) {
                    Some(q) => self.dp.resp.handle(&renv, q, &inc, &mut fx),
                    None => self.dp.resp.handle(&renv, &mut self.dp.rq, &inc, &mut fx),
                }
                (self.recv_cq, self.srq)
            }
        };
        let dropped = self.apply_responder(&mut fx, cq, srq, sink);
        self.dp.resp_wcs = fx.completions;
        dropped
    }

    /// XRC_RECV (spec/xrc.md §4): the request goes to the XRC SRQ its XRCETH
    /// names if that is an XRC SRQ of the QP's domain (memory checked against
    /// the SRQ's PD), else it is an invalid request; so is an in-sequence
    /// MIDDLE or LAST whose XRCETH names another SRQ than its message's
    /// FIRST. Returns where the completions go: the CQ of the SRQ the
    /// message's first packet took its WQE from, and the SRQ whose limit to
    /// check.
    fn on_xrc_request(
        &mut self,
        link: crate::xrcd::XrcLink,
        renv: &mut RespEnv<'_>,
        inc: &Incoming<'_>,
        fx: &mut RespEffects,
        sink: &mut impl Sink,
    ) -> (crate::handle::CqHandle, Option<crate::handle::SrqHandle>) {
        let srqn = inc.repr.xrceth.map_or(0, |x| x.xrc_srqn.get());
        let was_in_message = self.dp.resp.in_message();
        let out = if self.switches_srq(inc, srqn) {
            let rq = &mut self.dp.rq;
            self.dp.resp.handle_invalid(renv, rq, inc, fx);
            (self.xrc_msg_cq.unwrap_or(self.recv_cq), None)
        } else {
            self.on_xrc_target(link, srqn, renv, inc, fx, sink)
        };
        // The SRQ a message is for is the one its FIRST named.
        self.xrc_msg_srqn = match (was_in_message, self.dp.resp.in_message()) {
            (_, false) => None,
            (false, true) => Some(srqn),
            (true, true) => self.xrc_msg_srqn,
        };
        out
    }

    /// spec/xrc.md §4: every packet of a multi-packet message names the SRQ
    /// its FIRST named; an in-sequence MIDDLE or LAST naming another is an
    /// invalid request (duplicates and out-of-sequence packets go through
    /// the PSN rules first, as for any request).
    fn switches_srq(&self, inc: &Incoming<'_>, srqn: u32) -> bool {
        let b = &inc.repr.bth;
        let continues = matches!(
            b.opcode.position(),
            wire::Position::Middle | wire::Position::Last
        );
        continues
            && b.psn == self.dp.resp.epsn
            && self.dp.resp.in_message()
            && self.xrc_msg_srqn.is_some_and(|first| first != srqn)
    }

    /// The request of an XRC_RECV QP whose SRQN needs looking up.
    fn on_xrc_target(
        &mut self,
        link: crate::xrcd::XrcLink,
        srqn: u32,
        renv: &mut RespEnv<'_>,
        inc: &Incoming<'_>,
        fx: &mut RespEffects,
        sink: &mut impl Sink,
    ) -> (crate::handle::CqHandle, Option<crate::handle::SrqHandle>) {
        match sink.xrc_target(srqn, link.domain) {
            Ok(t) => {
                renv.pd = t.pd;
                if let Some(q) = sink.srq_queue(t.srq) {
                    self.dp.resp.handle(renv, q, inc, fx);
                }
                if fx.took_wqe {
                    self.xrc_msg_cq = Some(t.cq);
                }
                (self.xrc_msg_cq.unwrap_or(t.cq), Some(t.srq))
            }
            Err(_) => {
                let rq = &mut self.dp.rq;
                self.dp.resp.handle_invalid(renv, rq, inc, fx);
                (self.xrc_msg_cq.unwrap_or(self.recv_cq), None)
            }
        }
    }

    fn apply_responder(
        &mut self,
        fx: &mut RespEffects,
        cq: crate::handle::CqHandle,
        srq: Option<crate::handle::SrqHandle>,
        sink: &mut impl Sink,
    ) -> bool {
        let t = self.ctl.qp_type();
        if let Some(e) = fx.window_error.take() {
            self.dp.window_error = Some(e);
        }
        count_responder(&mut self.dp.counters, fx, t);
        let dropped = fx
            .dropped
            .is_some_and(|d| !d.is_duplicate() && d != Drop::NoWqe)
            || (fx.dropped == Some(Drop::NoWqe) && !t.is_reliable());
        if self.dp.resp.has_output() {
            self.wake();
        }
        for (wc, solicited) in fx.completions.drain(..) {
            self.complete(sink, cq, wc, solicited);
        }
        if fx.took_wqe {
            if let Some(s) = srq {
                sink.srq_taken(s);
            }
        }
        if let Some(f) = fx.fatal {
            let kind = match f {
                Fatal::InvalidRequest => AsyncEventKind::QpReqErr,
                Fatal::AccessError => AsyncEventKind::QpAccessErr,
                Fatal::Local => AsyncEventKind::QpFatal,
            };
            self.enter_error(kind, sink);
        }
        dropped
    }

    fn on_response(&mut self, now: u64, env: &QpEnv<'_>, pkt: &Packet<'_>, sink: &mut impl Sink) {
        let a = *self.ctl.attr();
        let cenv = CompEnv {
            qpn: self.ctl.qpn(),
            pd: self.pd,
            mtu: path_mtu(a.path_mtu),
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            mrs: env.mrs,
            mem: env.mem,
        };
        let mut fx = CompEffects {
            completions: std::mem::take(&mut self.dp.comp_wcs),
            ..CompEffects::default()
        };
        let dp = &mut self.dp;
        dp.req
            .handle_response(&mut dp.sq, &cenv, pkt.repr, pkt.payload, &mut fx);
        self.apply_completer(now, &mut fx, sink);
        self.dp.comp_wcs = fx.completions;
    }

    fn apply_completer(&mut self, now: u64, fx: &mut CompEffects, sink: &mut impl Sink) {
        count_completer(&mut self.dp.counters, fx);
        if fx.progress {
            let a = self.ctl.attr();
            self.dp.req.on_progress(a.retry_cnt, a.rnr_retry);
            // The ACK timer restarts while anything is outstanding (rc-reliability.md §1.3).
            let timeout = local_ack_timeout_ns(a.timeout).ok().flatten();
            self.dp.ack_deadline = if self.dp.req.outstanding() {
                timeout.map(|t| now + t)
            } else {
                None
            };
        }
        if let Some(wait) = fx.rnr_wait_ns {
            // hfi1: the ACK timer stops while an RNR wait runs (rc-reliability.md §1.4).
            self.dp.rnr_until = Some(now + wait);
            self.dp.ack_deadline = None;
        }
        let cq = self.send_cq;
        for wc in fx.completions.drain(..) {
            self.complete(sink, cq, wc, false);
        }
        if fx.fatal {
            self.enter_error_quiet(sink);
        } else {
            self.wake();
            self.check_drained(sink);
        }
    }
}

/// Counts what the completer did with one response packet.
fn count_completer(c: &mut QpCounters, fx: &CompEffects) {
    c.rnr_naks_received += u64::from(fx.rnr_nak);
    c.seq_naks_received += u64::from(fx.seq_nak);
    c.error_naks_received += u64::from(fx.error_nak);
    c.stale_responses += u64::from(fx.ignored);
    c.implied_naks += u64::from(fx.implied_nak);
    c.retransmit_rounds += u64::from(fx.implied_nak && !fx.fatal);
    c.retransmit_rounds += u64::from(fx.read_gap);
    c.read_gaps += u64::from(fx.read_gap);
    c.retransmit_rounds += u64::from(fx.rnr_wait_ns.is_some());
    c.retransmit_rounds += u64::from(fx.seq_nak);
}

/// Counts what the responder did with one request packet.
fn count_responder(c: &mut QpCounters, fx: &RespEffects, t: QpType) {
    use wire::aeth::NakCode;
    match fx.nak_sent {
        Some(NakCode::PsnSequenceError) => c.seq_naks_sent += 1,
        Some(_) => c.error_naks_sent += 1,
        None => {}
    }
    let Some(d) = fx.dropped else { return };
    let field = match d {
        Drop::DupAcked => &mut c.dup_acked,
        Drop::DupRead => &mut c.dup_reads_answered,
        Drop::DupAtomic => &mut c.dup_atomics_answered,
        Drop::DupDropped => &mut c.dup_dropped,
        Drop::NoWqe if t.is_reliable() => &mut c.rnr_naks_sent,
        Drop::NoWqe => &mut c.drop_no_recv_wqe,
        Drop::Sequence => &mut c.drop_sequence,
        Drop::Qkey => &mut c.drop_qkey,
        Drop::Unreliable => &mut c.drop_invalid,
    };
    *field += 1;
    if d.is_duplicate() {
        c.duplicates += 1;
    } else if d != Drop::NoWqe || !t.is_reliable() {
        c.dropped += 1;
    }
}

//! Packets in: the acceptance checks of roce-wire.md §7 (in rxe's order), then
//! the responder for requests and the completer for responses.

use super::{AsyncEventKind, Event, EventElement};
use crate::handle::QpHandle;
use crate::memory::Memory;
use crate::qp::completer::{CompEffects, CompEnv};
use crate::qp::responder::{Drop, Incoming, RespEffects};
use crate::types::{QpState, QpType};
use crate::Engine;
use std::net::{IpAddr, SocketAddr};
use wire::icrc::{self, Endpoints};
use wire::opcode::Transport;
use wire::{Encap, TransportRepr};

impl Engine {
    /// A datagram arrived on the device's socket: `from` is the sender, `to`
    /// the local address it was sent to. Every rejection is a silent drop,
    /// counted (roce-wire.md §7).
    pub fn handle_datagram(
        &mut self,
        now: u64,
        from: SocketAddr,
        to: SocketAddr,
        payload: &[u8],
        mem: &dyn Memory,
    ) {
        self.dev.counters.packets_received += 1;
        self.dev.counters.bytes_received += payload.len() as u64;
        let Ok(repr) = TransportRepr::parse(payload) else {
            self.dev.counters.drop_malformed += 1;
            return;
        };
        let ep = Endpoints {
            src: from.ip(),
            dst: to.ip(),
            src_port: from.port(),
            dst_port: to.port(),
        };
        let Ok(ip_id) = icrc::verify_received(&ep, payload) else {
            self.dev.counters.drop_icrc += 1;
            return;
        };
        let Some(h) = self.accept(&repr, from.ip(), to.ip()) else {
            return;
        };
        let body = repr.payload(payload);
        if repr.opcode().is_response() {
            self.on_response(h, now, &repr, body, mem);
        } else {
            let grh = grh_area(&ep, ip_id, payload.len());
            self.on_request(h, &repr, body, &grh, mem);
        }
    }

    /// roce-wire.md §7 steps 3–6: the QP exists, its type and state take this
    /// packet, the addresses are its peer's, the P_Key matches.
    fn accept(&mut self, repr: &TransportRepr, src: IpAddr, dst: IpAddr) -> Option<QpHandle> {
        let qpn = repr.bth.dest_qp.get();
        let Some(h) = self.qp_by_qpn(qpn) else {
            self.dev.counters.drop_no_qp += 1;
            return None;
        };
        let q = self.qps.get(h)?;
        let want = match q.ctl.qp_type() {
            QpType::Rc => Transport::Rc,
            QpType::Uc => Transport::Uc,
            _ => Transport::Ud,
        };
        let a = q.ctl.attr();
        let ready = if repr.opcode().is_response() {
            q.ctl.accepts_responses()
        } else {
            q.ctl.accepts_requests()
        };
        let peer_ok = !q.ctl.qp_type().is_connected()
            || (a.ah_attr.grh.dgid.ip() == src
                && super::tx::gid_ip(&self.info.gids, a.ah_attr.grh.sgid_index) == dst);
        let pkey_ok = repr.bth.pkey.matches(wire::PKey::DEFAULT);
        let c = &mut self.dev.counters;
        let reason = if repr.opcode().transport() != want {
            &mut c.drop_wrong_transport
        } else if !ready {
            &mut c.drop_qp_state
        } else if !peer_ok {
            &mut c.drop_wrong_peer
        } else if !pkey_ok {
            &mut c.drop_pkey
        } else {
            return Some(h);
        };
        *reason += 1;
        c.drop_not_accepted += 1;
        None
    }

    fn on_request(
        &mut self,
        h: QpHandle,
        repr: &TransportRepr,
        body: &[u8],
        grh: &[u8; 40],
        mem: &dyn Memory,
    ) {
        let Some(q) = self.qps.get_mut(h) else { return };
        q.dp.counters.packets_received += 1;
        q.dp.counters.bytes_received += body.len() as u64;
        if q.ctl.state() == QpState::Rtr && !q.dp.comm_est {
            // The first packet in RTR (qp-state-machine.md §6.5).
            q.dp.comm_est = true;
            let element = EventElement::Qp(h);
            self.dev.events.push_back(Event::Async {
                kind: AsyncEventKind::CommEst,
                element,
            });
        }
        let env = Engine::resp_env(q, &self.mrs, mem);
        let mut fx = RespEffects::default();
        let pkt = Incoming {
            repr,
            payload: body,
            grh,
        };
        let srq = q.srq;
        match srq.and_then(|s| self.srqs.get_mut(s)) {
            Some(s) => q.dp.resp.handle(&env, &mut s.queue, &pkt, &mut fx),
            None => q.dp.resp.handle(&env, &mut q.dp.rq, &pkt, &mut fx),
        }
        self.apply_responder(h, fx);
    }

    fn apply_responder(&mut self, h: QpHandle, fx: RespEffects) {
        let Some(q) = self.qps.get_mut(h) else { return };
        let (cq, srq) = (q.recv_cq, q.srq);
        count_responder(&mut q.dp.counters, &fx, q.ctl.qp_type());
        if fx
            .dropped
            .is_some_and(|d| !d.is_duplicate() && d != Drop::NoWqe)
            || (fx.dropped == Some(Drop::NoWqe) && q.ctl.qp_type() != QpType::Rc)
        {
            self.dev.counters.drop_by_qp += 1;
        }
        if q.dp.resp.has_output() {
            self.schedule(h);
        }
        for (wc, solicited) in fx.completions {
            self.push_completion(cq, wc, solicited, Some(h));
        }
        if fx.took_wqe {
            self.check_srq_limit(srq);
        }
        if let Some(f) = fx.fatal {
            use crate::qp::responder::Fatal;
            let kind = match f {
                Fatal::InvalidRequest => AsyncEventKind::QpReqErr,
                Fatal::AccessError => AsyncEventKind::QpAccessErr,
                Fatal::Local => AsyncEventKind::QpFatal,
            };
            self.enter_error(h, kind);
        }
    }

    /// rc-reliability.md §8: below the armed limit → one event, then disarmed.
    fn check_srq_limit(&mut self, srq: Option<crate::handle::SrqHandle>) {
        let Some(sh) = srq else { return };
        let Some(s) = self.srqs.get_mut(sh) else {
            return;
        };
        let limit = s.srq.attr.srq_limit;
        if limit > 0 && (s.queue.len() as u32) < limit {
            s.srq.attr.srq_limit = 0;
            let element = EventElement::Srq(sh);
            self.dev.events.push_back(Event::Async {
                kind: AsyncEventKind::SrqLimitReached,
                element,
            });
        }
    }

    fn on_response(
        &mut self,
        h: QpHandle,
        now: u64,
        repr: &TransportRepr,
        body: &[u8],
        mem: &dyn Memory,
    ) {
        let Some(q) = self.qps.get_mut(h) else { return };
        q.dp.counters.packets_received += 1;
        q.dp.counters.bytes_received += body.len() as u64;
        let a = *q.ctl.attr();
        let env = CompEnv {
            qpn: q.ctl.qpn(),
            pd: q.pd,
            mtu: super::tx::path_mtu(a.path_mtu),
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            mrs: &self.mrs,
            mem,
        };
        let mut fx = CompEffects::default();
        q.dp.req
            .handle_response(&mut q.dp.sq, &env, repr, body, &mut fx);
        self.apply_completer(h, now, fx);
    }

    fn apply_completer(&mut self, h: QpHandle, now: u64, fx: CompEffects) {
        let Some(q) = self.qps.get_mut(h) else { return };
        let c = &mut q.dp.counters;
        c.rnr_naks_received += u64::from(fx.rnr_nak);
        c.seq_naks_received += u64::from(fx.seq_nak);
        c.error_naks_received += u64::from(fx.error_nak);
        c.stale_responses += u64::from(fx.ignored);
        c.implied_naks += u64::from(fx.implied_nak);
        c.retransmit_rounds += u64::from(fx.implied_nak && !fx.fatal);
        c.retransmit_rounds += u64::from(fx.read_gap);
        c.read_gaps += u64::from(fx.read_gap);
        if fx.progress {
            // Forward progress restores both budgets (rxe reset_retry_counters).
            let a = q.ctl.attr();
            q.dp.req.retry_left = a.retry_cnt;
            q.dp.req.rnr_left = a.rnr_retry;
            q.dp.req.retrying = None;
            let outstanding = q.dp.req.una != q.dp.req.next_psn;
            let timeout = crate::timers::local_ack_timeout_ns(a.timeout)
                .ok()
                .flatten();
            q.dp.ack_deadline = if outstanding {
                timeout.map(|t| now + t)
            } else {
                None
            };
        }
        if let Some(wait) = fx.rnr_wait_ns {
            // hfi1: the ACK timer stops while an RNR wait runs (rc-reliability.md §1.4).
            q.dp.rnr_until = Some(now + wait);
            q.dp.ack_deadline = None;
            q.dp.counters.retransmit_rounds += 1;
        }
        if fx.seq_nak {
            q.dp.counters.retransmit_rounds += 1;
        }
        let cq = q.send_cq;
        for wc in fx.completions {
            self.push_completion(cq, wc, false, Some(h));
        }
        if fx.fatal {
            self.enter_error_quiet(h);
        } else {
            self.schedule(h);
            self.check_drained(h);
        }
    }
}

/// Counts what the responder did with one request packet.
fn count_responder(c: &mut crate::qp::data::QpCounters, fx: &RespEffects, t: QpType) {
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
        Drop::NoWqe if t == QpType::Rc => &mut c.rnr_naks_sent,
        Drop::NoWqe => &mut c.drop_no_recv_wqe,
        Drop::Sequence => &mut c.drop_sequence,
        Drop::Qkey => &mut c.drop_qkey,
        Drop::Unreliable => &mut c.drop_invalid,
    };
    *field += 1;
    if d.is_duplicate() {
        c.duplicates += 1;
    } else if d != Drop::NoWqe || t != QpType::Rc {
        c.dropped += 1;
    }
}

/// The 40-byte GRH area of a UD receive (rc-reliability.md §7): IPv6: the
/// header as received; IPv4: 20 zero bytes, then the IPv4 header (with the ID
/// recovered from the ICRC and a valid checksum).
fn grh_area(ep: &Endpoints, ip_id: Option<u16>, udp_payload_len: usize) -> [u8; 40] {
    let mut out = [0u8; 40];
    let encap = match ip_id {
        Some(id) => icrc::ipv4_with_id(ep, id),
        None => Encap::from_addrs(ep.src, ep.dst, ep.src_port).map(|mut e| {
            e.dst_port = ep.dst_port;
            e
        }),
    };
    let Some(encap) = encap else { return out };
    let mut hdr = [0u8; 48];
    if encap.emit_ip_udp(&mut hdr, udp_payload_len).is_err() {
        return out;
    }
    match encap.ip_header_len() {
        20 => out[20..].copy_from_slice(&hdr[..20]),
        _ => out.copy_from_slice(&hdr[..40]),
    }
    out
}

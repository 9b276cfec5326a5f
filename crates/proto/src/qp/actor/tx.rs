//! Packets out, and the QP's timers: one packet per turn (responses before
//! requests); the local ACK timer and the RNR wait (rc-reliability.md §1.3–1.4).

use super::{gid_ip, path_mtu, Qp, QpEnv, Sink};
use crate::output::{AsyncEventKind, Room, Transmit, ROCE_PORT};

/// The most datagrams a receive sends at once ([`Qp::respond_now`]): an
/// ACK is one; a long READ's response leaves the rest to transmit turns.
const RESPOND_MAX: u64 = 4;
use crate::qp::completer::success;
use crate::qp::requester::{AckTimeout, Payload, ReqEnv, ReqPacket};
use crate::qp::sgl;
use crate::timers::local_ack_timeout_ns;
use crate::types::{QpState, QpType};
use crate::wc::{wc_opcode_for, WcOpcode, WcStatus, WorkCompletion};
use crate::wr::WrOpcode;
use std::net::{IpAddr, SocketAddr};
use wire::opcode::{MessageKind, Position, Transport};
use wire::{Encap, Opcode, TransportRepr};

impl Qp {
    /// The QP's turn to send: writes its next datagram into `buf` (at least
    /// one path MTU plus 64 bytes of headers). The payload is copied from
    /// registered memory straight to its place in the datagram (no staging
    /// copy), then the headers and the ICRC go around it. `None` when it has
    /// nothing to send now. With `runs`, a request packet to a peer reached
    /// intact may take the message's next packets along, as many as `buf`
    /// holds (crate::run).
    pub fn next_packet(
        &mut self,
        now: u64,
        env: &QpEnv<'_>,
        buf: &mut [u8],
        sink: &mut impl Sink,
        runs: bool,
    ) -> Option<Transmit> {
        // A request goes ahead of the responses waiting, one at a time: a
        // program's answer leaves before the ACK of what it answers (a
        // peer spinning on a socket finds the answer first, and the ACK's
        // turn is off its path: spec/performance.md §19), and a stream of
        // requests still lets a response go after each of its packets.
        // Each direction's own order is unchanged; the two are independent.
        let responses_wait = self.dp.resp.has_output();
        if !(responses_wait && self.dp.request_ahead) {
            if let Some(t) = self.next_request(now, env, buf, sink, runs) {
                self.dp.request_ahead = responses_wait;
                return Some(t);
            }
            self.dp.request_ahead = false;
            return self.next_response(env, buf, runs);
        }
        self.dp.request_ahead = false;
        if let Some(t) = self.next_response(env, buf, runs) {
            return Some(t);
        }
        self.next_request(now, env, buf, sink, runs)
    }

    /// True when a turn ([`Engine::drive`](crate::Engine) around
    /// [`Qp::next_packet`]) would send nothing and change nothing: no
    /// response queued, every WQE's requests sent, no RNR wait to clear,
    /// and nothing posted on the ring for the turn to take first.
    /// (`next_response` returns at its first test; `next_request` at the
    /// state test, or clears an `rnr_until` that is `None`, finds no WQE at
    /// the cursor for `run_local_ops` or the requester, and returns `None`.)
    #[inline]
    pub(crate) fn tx_idle(&self) -> bool {
        !self.dp.resp.has_output()
            && self.dp.sq.all_sent()
            && self.dp.rnr_until.is_none()
            && self.send_ring().pending() == 0
    }

    /// The responses waiting, through `r` at once ([`Room`]): an RC
    /// QP's, while no transmitting thread claims the QP, at most
    /// [`RESPOND_MAX`] datagrams. The datagrams and bytes sent.
    pub(crate) fn respond_now(&mut self, env: &QpEnv<'_>, r: &mut dyn Room) -> (u64, u64) {
        if self.ctl.qp_type() != QpType::Rc || self.dp.claimed {
            return (0, 0);
        }
        let a = self.ctl.attr();
        let to = SocketAddr::new(a.ah_attr.grh.dgid.ip(), ROCE_PORT);
        let qpn = a.dest_qp_num;
        let (mut n, mut bytes) = (0, 0);
        while n < RESPOND_MAX && self.dp.resp.has_output() {
            let Some(buf) = r.room(to, qpn) else { break };
            let Some(t) = self.next_response(env, buf, true) else {
                break;
            };
            r.publish(&t);
            n += 1;
            bytes += t.len as u64;
        }
        // Nothing left to send: no turn to find nothing (as after a turn
        // that sent its last packet).
        if n > 0 && self.tx_idle() {
            self.dp.wants_tx = false;
        }
        (n, bytes)
    }

    fn next_response(&mut self, env: &QpEnv<'_>, buf: &mut [u8], runs: bool) -> Option<Transmit> {
        if !self.dp.resp.has_output() || self.ctl.state() == QpState::Reset {
            return None;
        }
        let renv = self.resp_env(env);
        // Borrowed where the responder left it (≈ 170 bytes).
        let mut built = self.dp.resp.next_response(&renv, buf);
        let repr = built.as_mut()?;
        let n = repr.payload_len;
        self.dp.counters.packets_sent += 1;
        self.dp.counters.bytes_sent += n as u64;
        let a = self.ctl.attr();
        let src = gid_ip(env.gids, a.ah_attr.grh.sgid_index);
        let dgid = a.ah_attr.grh.dgid;
        let dst = dgid.ip();
        // Responses are RC's and XRC's: their peer may take them unsealed.
        let seal = !env
            .intact
            .contains(&mut self.dp.intact, dgid, repr.bth.dest_qp.get());
        self.dp.counters.packets_unsealed += u64::from(!seal);
        let mut segments = None;
        // A run of the READ response's next packets (crate::run): RC only
        // (XRC's response opcodes have no segment table rows).
        let op = repr.opcode();
        if runs && !seal && renv.qp_type == QpType::Rc && (op.is_first() || op.is_middle()) {
            let start = repr.header_len() + n;
            if let Some((more, segs)) = self.extend_read_run(&renv, op.is_first(), start, buf) {
                repr.payload_len += more;
                segments = Some(segs);
                self.dp.counters.runs_sent += 1;
            }
        }
        emit_in_place(repr, src, dst, env.local_port, seal, buf, segments)
    }

    /// A run of a READ response (crate::run): its next packets' payloads
    /// from `buf[end..]` while they fit; one that did not begin with the
    /// response's FIRST stops before its LAST. The bytes they add and the
    /// run's segments; `None` if none was added.
    fn extend_read_run(
        &mut self,
        renv: &crate::qp::responder::RespEnv<'_>,
        from_first: bool,
        mut end: usize,
        buf: &mut [u8],
    ) -> Option<(usize, crate::run::Segments)> {
        let mss = renv.mtu as usize;
        let start = end;
        let mut last = None;
        while end + mss + wire::icrc::LEN <= buf.len() {
            let Some(ends) = self.dp.resp.read_continues(renv.mtu) else {
                break;
            };
            if ends && !from_first {
                break;
            }
            // Its payload goes to `end`, after where its headers would be.
            let pos = if ends {
                Position::Last
            } else {
                Position::Middle
            };
            let at = Opcode::segment(Transport::Rc, MessageKind::ReadResponse, pos)
                .map_or(0, Opcode::header_len);
            let r = self.dp.resp.next_response(renv, &mut buf[end - at..])?;
            debug_assert_eq!(r.header_len(), at, "a READ response MIDDLE or LAST");
            let n = r.payload_len;
            end += n;
            let c = &mut self.dp.counters;
            c.packets_sent += 1;
            c.bytes_sent += n as u64;
            c.packets_unsealed += 1;
            last = Some(r.opcode());
            if ends {
                break;
            }
        }
        let segs = crate::run::Segments {
            mss: renv.mtu as u16,
            last: last?,
        };
        Some((end - start, segs))
    }

    fn req_env(&self, env: &QpEnv<'_>) -> ReqEnv {
        let a = self.ctl.attr();
        let t = self.ctl.qp_type();
        ReqEnv {
            qp_type: t,
            qpn: self.ctl.qpn(),
            dest_qpn: a.dest_qp_num,
            mtu: if t == QpType::Ud {
                env.port_mtu
            } else {
                path_mtu(a.path_mtu)
            },
            qkey: self.ctl.qkey_or_zero(),
            max_rd_atomic: a.max_rd_atomic,
            may_start: self.ctl.state() == QpState::Rts,
        }
    }

    fn next_request(
        &mut self,
        now: u64,
        env: &QpEnv<'_>,
        buf: &mut [u8],
        sink: &mut impl Sink,
        runs: bool,
    ) -> Option<Transmit> {
        let renv = self.req_env(env);
        if !matches!(self.ctl.state(), QpState::Rts | QpState::Sqd)
            || self.dp.rnr_until.is_some_and(|t| now < t)
        {
            return None;
        }
        self.dp.rnr_until = None;
        if !self.run_local_ops(env, sink) {
            return None;
        }
        let dp = &mut self.dp;
        if !dp.req.next_packet(&mut dp.sq, &renv, &mut dp.pkt) {
            return None;
        }
        self.check_send_invariants(&renv);
        let (index, last, retransmit) =
            (self.dp.pkt.index, self.dp.pkt.last, self.dp.pkt.retransmit);
        // The payload goes straight to its place after the headers.
        let at = self.dp.pkt.repr.header_len();
        let Some(n) = self.gather(&self.dp.pkt, env, buf.get_mut(at..)?) else {
            self.fail_request(index, WcStatus::LocProtErr, sink);
            return None;
        };
        let w = &self.dp.sq.wqes[index];
        let a = self.ctl.attr();
        let (sgid, dgid) = match w.ud {
            Some(ud) => (ud.sgid_index, ud.dgid),
            None => (a.ah_attr.grh.sgid_index, a.ah_attr.grh.dgid),
        };
        let c = &mut self.dp.counters;
        c.packets_sent += 1;
        c.bytes_sent += n as u64;
        c.retransmitted_packets += u64::from(retransmit);
        let src = gid_ip(env.gids, sgid);
        // UD receivers check every ICRC; RC, UC and XRC ones not from a
        // peer reached intact (crate::intact).
        let dest_qp = self.dp.pkt.repr.bth.dest_qp.get();
        let seal =
            renv.qp_type == QpType::Ud || !env.intact.contains(&mut self.dp.intact, dgid, dest_qp);
        self.dp.counters.packets_unsealed += u64::from(!seal);
        let ack_req = self.dp.pkt.repr.bth.ack_req;
        let runnable = runs
            && !seal
            && !last
            && !retransmit
            && !ack_req
            // A plain RDMA WRITE or SEND (its LAST has no ImmDt or IETH).
            && matches!(
                self.dp.sq.wqes[index].opcode,
                WrOpcode::RdmaWrite | WrOpcode::Send
            );
        let mut segments = None;
        let mut len = n;
        if runnable {
            let at_end = self.extend_run(now, index, &renv, env, at + n, buf, sink);
            if let Some((more, segs, ack_req, solicited)) = at_end {
                let b = &mut self.dp.pkt.repr.bth;
                (b.ack_req, b.solicited) = (ack_req, solicited);
                len += more;
                segments = Some(segs);
                self.dp.counters.runs_sent += 1;
            }
        }
        // In place: the representation is large.
        self.dp.pkt.repr.payload_len = len;
        let out = emit_in_place(
            &self.dp.pkt.repr,
            src,
            dgid.ip(),
            env.local_port,
            seal,
            buf,
            segments,
        );
        self.after_request(now, index, last, renv.qp_type, sink);
        out
    }

    /// A run (crate::run): the WQE's packets after the one just built,
    /// their payloads written one after another from `buf[end..]`, while
    /// the requester gives one, it fits and the one before neither ended
    /// the message nor asked for an ACK. The bytes they add, what the
    /// datagram's [`Segments`](crate::run::Segments) say, and the last
    /// one's AckReq and SE; `None` if none was added.
    #[allow(clippy::too_many_arguments)]
    fn extend_run(
        &mut self,
        now: u64,
        index: usize,
        renv: &ReqEnv,
        env: &QpEnv<'_>,
        mut end: usize,
        buf: &mut [u8],
        sink: &mut impl Sink,
    ) -> Option<(usize, crate::run::Segments, bool, bool)> {
        let mss = renv.mtu as usize;
        let start = end;
        let mut next = ReqPacket::default();
        let mut last = None;
        while end + mss + wire::icrc::LEN <= buf.len() {
            let dp = &mut self.dp;
            if !dp.req.next_packet(&mut dp.sq, renv, &mut next) {
                break;
            }
            self.check_send_invariants(renv);
            debug_assert!(
                next.index == index && !next.retransmit,
                "a run stays in its WQE"
            );
            let Some(n) = self.gather(&next, env, &mut buf[end..]) else {
                // As when the packet goes alone: its WQE fails; those
                // before it in the run leave.
                self.fail_request(index, WcStatus::LocProtErr, sink);
                break;
            };
            end += n;
            let c = &mut self.dp.counters;
            c.packets_sent += 1;
            c.bytes_sent += n as u64;
            c.packets_unsealed += 1;
            let b = next.repr.bth;
            last = Some((b.opcode, b.ack_req, b.solicited));
            self.after_request(now, index, next.last, renv.qp_type, sink);
            if next.last || b.ack_req {
                break;
            }
        }
        let (opcode, ack_req, solicited) = last?;
        let segs = crate::run::Segments {
            mss: renv.mtu as u16,
            last: opcode,
        };
        Some((end - start, segs, ack_req, solicited))
    }

    /// Copies the packet's payload to the start of `out`; `None` if the
    /// gather list fails the memory-region check (or `out` is too short,
    /// which a buffer of one path MTU plus 64 bytes never is).
    fn gather(&self, pkt: &ReqPacket, env: &QpEnv<'_>, out: &mut [u8]) -> Option<usize> {
        let Payload::Message { offset, len, .. } = pkt.payload else {
            return Some(0);
        };
        let w = &self.dp.sq.wqes[pkt.index];
        let out = out.get_mut(..len)?;
        match w.inline() {
            Some(bytes) => {
                out.copy_from_slice(&bytes[offset as usize..offset as usize + len]);
                Some(len)
            }
            None => sgl::gather(env.mrs, self.pd, env.mem, &w.sges, offset, out)
                .ok()
                .map(|()| len),
        }
    }

    /// UC/UD complete a WQE when its last packet is out; RC arms its ACK timer.
    fn after_request(
        &mut self,
        now: u64,
        index: usize,
        last: bool,
        t: QpType,
        sink: &mut impl Sink,
    ) {
        if t.is_reliable() {
            if self.dp.ack_deadline.is_none() {
                let timeout = local_ack_timeout_ns(self.ctl.attr().timeout).ok().flatten();
                self.dp.ack_deadline = timeout.map(|ns| now + ns);
            }
            return;
        }
        if !last || index != 0 {
            return;
        }
        let (qpn, cq) = (self.ctl.qpn(), self.send_cq);
        let Some(w) = self.dp.sq.retire() else { return };
        let wc = if w.signaled { success(&w, qpn) } else { None };
        self.dp.sq.recycle(w);
        if let Some(wc) = wc {
            self.complete(sink, cq, wc, false);
        }
        // Local operations executed behind it complete now, in order.
        self.retire_done_front(sink);
        self.check_drained(sink);
    }

    /// A request could not be built: its WQE completes in error; RC goes to
    /// ERR, UC/UD to SQE (rc-reliability.md §5, qp-state-machine.md §6.4).
    pub(super) fn fail_request(&mut self, index: usize, status: WcStatus, sink: &mut impl Sink) {
        let (qpn, cq, t) = (self.ctl.qpn(), self.send_cq, self.ctl.qp_type());
        if index != 0 && t.is_reliable() {
            // Older WQEs are still outstanding: they complete first (in order),
            // then this one with its own status, then the QP goes to ERR.
            let dp = &mut self.dp;
            return dp.req.take_back(&mut dp.sq, index, status);
        }
        if index == 0 {
            if let Some(w) = self.dp.sq.retire() {
                let op = wc_opcode_for(w.opcode).unwrap_or(WcOpcode::Send);
                sink.complete(cq, WorkCompletion::error(w.wr_id, qpn, op, status), true);
                self.dp.sq.recycle(w);
            }
        }
        if t.is_reliable() {
            self.enter_error(AsyncEventKind::QpFatal, sink);
        } else {
            self.enter_sqe(sink);
        }
    }

    /// Runs the QP's timers that are due at `now`: the RNR wait ends; the ACK
    /// timeout resends from the oldest unacknowledged PSN or, with the retry
    /// budget spent, fails the oldest WQE with `RETRY_EXC_ERR`
    /// (rc-reliability.md §1.3). Afterwards [`Qp::deadline`] is past `now`.
    pub fn on_timeout(&mut self, now: u64, sink: &mut impl Sink) {
        if self.dp.rnr_until.is_some_and(|t| t <= now) {
            self.dp.rnr_until = None;
            self.wake();
        }
        // Both timers may be due at once: the ACK timer is handled too.
        if self.dp.ack_deadline.is_none_or(|t| t > now) {
            return;
        }
        self.dp.ack_deadline = None;
        if !self.dp.req.outstanding() {
            return;
        }
        self.dp.counters.timeouts += 1;
        let mtu = path_mtu(self.ctl.attr().path_mtu);
        let dp = &mut self.dp;
        match dp.req.on_ack_timeout(&mut dp.sq, mtu) {
            AckTimeout::Resend => {
                self.dp.counters.retransmit_rounds += 1;
                self.wake();
            }
            AckTimeout::Exhausted => {
                let (qpn, cq) = (self.ctl.qpn(), self.send_cq);
                if let Some(w) = self.dp.sq.retire() {
                    let op = wc_opcode_for(w.opcode).unwrap_or(WcOpcode::Send);
                    let wc = WorkCompletion::error(w.wr_id, qpn, op, WcStatus::RetryExcErr);
                    sink.complete(cq, wc, true);
                    self.dp.sq.recycle(w);
                }
                self.enter_error_quiet(sink);
            }
        }
    }

    /// The requester's promises, checked after each packet it builds (the
    /// simulator checks the same from outside): the send queue is within its
    /// depth, the READ/atomic credit counts exactly the started, unanswered
    /// READs and atomics, and the PSN window is less than half the PSN space
    /// (roce-wire.md §9), so PSN comparisons stay meaningful.
    fn check_send_invariants(&self, renv: &ReqEnv) {
        let (req, sq) = (&self.dp.req, &self.dp.sq);
        debug_assert!(
            sq.len() <= self.ctl.cap().max_send_wr as usize,
            "send queue beyond max_send_wr"
        );
        debug_assert!(sq.next <= sq.len(), "send cursor past the queue");
        debug_assert!(
            !renv.qp_type.is_reliable()
                || req.rd_atomic_inflight() as usize
                    == sq
                        .wqes
                        .iter()
                        .filter(|w| w.is_rd_atomic() && w.npsn > 0 && !w.done)
                        .count(),
            "READ/atomic credit out of step with the send queue"
        );
        debug_assert!(
            req.next_psn().offset_from(req.una()) < 1 << 23,
            "PSN window wider than half the PSN space"
        );
    }
}

/// Writes headers + pad + ICRC (over the pseudo IP/UDP header the socket
/// will really send: ID 0, DF, our port) around the `repr.payload_len`
/// payload bytes already at `buf[repr.header_len()..]`.
fn emit_in_place(
    repr: &TransportRepr,
    src: IpAddr,
    dst: IpAddr,
    port: u16,
    seal: bool,
    buf: &mut [u8],
    segments: Option<crate::run::Segments>,
) -> Option<Transmit> {
    let encap = Encap::from_addrs(src, dst, port)?;
    let len = match seal {
        true => repr.emit_in_place(buf, &encap),
        false => repr.emit_in_place_unsealed(buf),
    }
    .ok()?;
    Some(Transmit {
        to: SocketAddr::new(dst, ROCE_PORT),
        len,
        segments,
    })
}

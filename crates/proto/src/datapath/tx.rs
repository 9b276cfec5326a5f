//! Packets out, and timers.
//!
//! QPs with something to send wait in a round-robin schedule; each call of
//! [`Engine::poll_transmit`] lets one QP write one packet (responses before
//! requests), then puts it at the back. The local ACK timer and the RNR wait
//! live per QP (rc-reliability.md §1.3–1.4).

use super::{AsyncEventKind, Transmit, ROCE_PORT};
use crate::handle::QpHandle;
use crate::memory::Memory;
use crate::qp::completer::success;
use crate::qp::requester::{Payload, ReqEnv};
use crate::qp::sgl;
use crate::timers::local_ack_timeout_ns;
use crate::types::{Gid, Mtu, QpState, QpType};
use crate::wc::{wc_opcode_for, WcOpcode, WcStatus, WorkCompletion};
use crate::Engine;
use std::net::{IpAddr, SocketAddr};
use wire::{Encap, TransportRepr};

/// Why the requester could not build a packet.
enum TxError {
    /// Gather failed: the WQE completes with this status.
    Wqe(WcStatus),
}

impl Engine {
    /// Writes the next datagram into `buf` (at least one path MTU plus 64
    /// bytes of headers). `None` when nothing is ready now.
    pub fn poll_transmit(
        &mut self,
        now: u64,
        mem: &dyn Memory,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        while let Some(h) = self.dev.ready.pop_front() {
            let Some(q) = self.qps.get_mut(h) else {
                continue;
            };
            q.dp.scheduled = false;
            if let Some(t) = self.transmit_from(h, now, mem, buf) {
                self.schedule(h);
                self.dev.counters.packets_sent += 1;
                self.dev.counters.bytes_sent += t.len as u64;
                return Some(t);
            }
        }
        None
    }

    fn transmit_from(
        &mut self,
        h: QpHandle,
        now: u64,
        mem: &dyn Memory,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        if let Some(t) = self.transmit_response(h, mem, buf) {
            return Some(t);
        }
        self.transmit_request(h, now, mem, buf)
    }

    fn transmit_response(
        &mut self,
        h: QpHandle,
        mem: &dyn Memory,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let q = self.qps.get_mut(h)?;
        if !q.dp.resp.has_output() || q.ctl.state() == QpState::Reset {
            return None;
        }
        let a = *q.ctl.attr();
        let env = Engine::resp_env(q, &self.mrs, mem);
        let scratch = &mut self.dev.scratch;
        let (repr, n) = q.dp.resp.next_response(&env, scratch)?;
        q.dp.counters.packets_sent += 1;
        q.dp.counters.bytes_sent += n as u64;
        let (src, dst) = (
            gid_ip(&self.info.gids, a.ah_attr.grh.sgid_index),
            a.ah_attr.grh.dgid.ip(),
        );
        emit(
            &repr,
            &self.dev.scratch[..n],
            src,
            dst,
            self.dev.local_port,
            buf,
        )
    }

    fn req_env(&self, h: QpHandle) -> Option<ReqEnv> {
        let q = self.qps.get(h)?;
        let a = q.ctl.attr();
        let t = q.ctl.qp_type();
        let mtu = if t == QpType::Ud {
            self.info.port.active_mtu.bytes()
        } else {
            path_mtu(a.path_mtu)
        };
        Some(ReqEnv {
            qp_type: t,
            qpn: q.ctl.qpn(),
            dest_qpn: a.dest_qp_num,
            mtu,
            qkey: q.ctl.qkey_or_zero(),
            max_rd_atomic: a.max_rd_atomic,
            may_start: q.ctl.state() == QpState::Rts,
        })
    }

    fn transmit_request(
        &mut self,
        h: QpHandle,
        now: u64,
        mem: &dyn Memory,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let env = self.req_env(h)?;
        let q = self.qps.get_mut(h)?;
        if !matches!(q.ctl.state(), QpState::Rts | QpState::Sqd)
            || q.dp.rnr_until.is_some_and(|t| now < t)
        {
            return None;
        }
        q.dp.rnr_until = None;
        let pkt = q.dp.req.next_packet(&mut q.dp.sq, &env)?;
        let w = &q.dp.sq.wqes[pkt.index];
        let n = match pkt.payload {
            Payload::None => 0,
            Payload::Message { offset, len, .. } => {
                let scratch = &mut self.dev.scratch[..len];
                let r = match &w.inline {
                    Some(bytes) => {
                        scratch.copy_from_slice(&bytes[offset as usize..offset as usize + len]);
                        Ok(())
                    }
                    None => sgl::gather(&self.mrs, q.pd, mem, &w.sges, offset, scratch),
                };
                if r.is_err() {
                    self.fail_request(h, pkt.index, TxError::Wqe(WcStatus::LocProtErr));
                    return None;
                }
                len
            }
        };
        let a = q.ctl.attr();
        let (sgid, dgid) = match w.ud {
            Some(ud) => (ud.sgid_index, ud.dgid),
            None => (a.ah_attr.grh.sgid_index, a.ah_attr.grh.dgid),
        };
        q.dp.counters.packets_sent += 1;
        q.dp.counters.bytes_sent += n as u64;
        q.dp.counters.retransmitted_packets += u64::from(pkt.retransmit);
        let src = gid_ip(&self.info.gids, sgid);
        let out = emit(
            &pkt.repr,
            &self.dev.scratch[..n],
            src,
            dgid.ip(),
            self.dev.local_port,
            buf,
        );
        self.after_request(h, now, pkt.last, pkt.index, env.qp_type);
        out
    }

    /// UC/UD complete a WQE when its last packet is out; RC arms its ACK timer.
    fn after_request(&mut self, h: QpHandle, now: u64, last: bool, index: usize, t: QpType) {
        let Some(q) = self.qps.get_mut(h) else { return };
        if t == QpType::Rc {
            if q.dp.ack_deadline.is_none() {
                let timeout = local_ack_timeout_ns(q.ctl.attr().timeout).ok().flatten();
                q.dp.ack_deadline = timeout.map(|ns| now + ns);
            }
            return;
        }
        if !last || index != 0 {
            return;
        }
        let (qpn, cq) = (q.ctl.qpn(), q.send_cq);
        let Some(w) = q.dp.sq.retire() else { return };
        if w.signaled {
            if let Some(wc) = success(&w, qpn) {
                self.push_completion(cq, wc, false, Some(h));
            }
        }
        self.check_drained(h);
    }

    /// A request could not be built: its WQE completes in error; RC goes to
    /// ERR, UC/UD to SQE (rc-reliability.md §5, qp-state-machine.md §6.4).
    fn fail_request(&mut self, h: QpHandle, index: usize, e: TxError) {
        let TxError::Wqe(status) = e;
        let Some(q) = self.qps.get_mut(h) else { return };
        let (qpn, cq, t) = (q.ctl.qpn(), q.send_cq, q.ctl.qp_type());
        if index != 0 && t == QpType::Rc {
            // Older WQEs are still outstanding: they complete first (in order), then
            // this one with its own status (completer::complete_failed), then the QP
            // goes to ERR. Its PSNs are taken back so nothing waits for them.
            let w = &mut q.dp.sq.wqes[index];
            q.dp.req.next_psn = w.first_psn;
            w.npsn = 0;
            w.sent_pkts = 0;
            w.failed = Some(status);
            q.dp.sq.next = index;
            return;
        }
        if index == 0 {
            if let Some(w) = q.dp.sq.retire() {
                let op = wc_opcode_for(w.opcode).unwrap_or(WcOpcode::Send);
                self.push_completion(
                    cq,
                    WorkCompletion::error(w.wr_id, qpn, op, status),
                    true,
                    None,
                );
            }
        }
        if t == QpType::Rc {
            self.enter_error(h, AsyncEventKind::QpFatal);
        } else {
            self.enter_sqe(h);
        }
    }

    /// When [`Engine::handle_timeout`] is next due, if ever.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.qps
            .iter()
            .filter_map(|(_, q)| min_opt(q.dp.ack_deadline, q.dp.rnr_until))
            .min()
    }

    /// Runs the timers that are due: RNR waits end; ACK timeouts resend from
    /// the oldest unacknowledged PSN or, with the retry budget spent, fail the
    /// oldest WQE with `RETRY_EXC_ERR` (rc-reliability.md §1.3).
    pub fn handle_timeout(&mut self, now: u64) {
        let due: Vec<QpHandle> = self
            .qps
            .iter()
            .filter(|(_, q)| min_opt(q.dp.ack_deadline, q.dp.rnr_until).is_some_and(|t| t <= now))
            .map(|(h, _)| h)
            .collect();
        for h in due {
            self.qp_timeout(h, now);
        }
    }

    fn qp_timeout(&mut self, h: QpHandle, now: u64) {
        let Some(q) = self.qps.get_mut(h) else { return };
        if q.dp.rnr_until.is_some_and(|t| t <= now) {
            q.dp.rnr_until = None;
            self.schedule(h);
        }
        // Both timers may be due at once: the ACK timer is handled too, so that
        // poll_timeout() is past `now` afterwards (the driver's contract).
        let Some(q) = self.qps.get_mut(h) else { return };
        if q.dp.ack_deadline.is_none_or(|t| t > now) {
            return;
        }
        q.dp.ack_deadline = None;
        if q.dp.req.una == q.dp.req.next_psn {
            return;
        }
        q.dp.counters.timeouts += 1;
        if q.dp.req.retry_left == 0 {
            let (qpn, cq) = (q.ctl.qpn(), q.send_cq);
            if let Some(w) = q.dp.sq.retire() {
                let op = wc_opcode_for(w.opcode).unwrap_or(WcOpcode::Send);
                self.push_completion(
                    cq,
                    WorkCompletion::error(w.wr_id, qpn, op, WcStatus::RetryExcErr),
                    true,
                    None,
                );
            }
            self.enter_error_quiet(h);
            return;
        }
        q.dp.req.retry_left -= 1;
        q.dp.req.retrying = None;
        q.dp.counters.retransmit_rounds += 1;
        let (una, mtu) = (q.dp.req.una, path_mtu(q.ctl.attr().path_mtu));
        q.dp.req.rewind(&mut q.dp.sq, una, mtu);
        self.schedule(h);
    }
}

fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Path MTU in bytes from the raw attribute (1024 if unset).
pub(crate) fn path_mtu(raw: u32) -> u32 {
    Mtu::from_raw(raw).unwrap_or(Mtu::Mtu1024).bytes()
}

/// The IP address of local GID `index` (the first one if out of range).
pub(crate) fn gid_ip(gids: &[Gid], index: u8) -> IpAddr {
    gids.get(usize::from(index))
        .or(gids.first())
        .copied()
        .unwrap_or(Gid::ZERO)
        .ip()
}

/// Writes headers + payload + pad + ICRC (over the pseudo IP/UDP header the
/// socket will really send: ID 0, DF, our port) into `buf`.
fn emit(
    repr: &TransportRepr,
    payload: &[u8],
    src: IpAddr,
    dst: IpAddr,
    port: u16,
    buf: &mut [u8],
) -> Option<Transmit> {
    let encap = Encap::from_addrs(src, dst, port)?;
    let mut r = *repr;
    r.payload_len = payload.len();
    let len = r.emit(buf, payload, &encap).ok()?;
    Some(Transmit {
        to: SocketAddr::new(dst, ROCE_PORT),
        len,
    })
}

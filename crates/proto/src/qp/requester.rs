//! The requester: turns send WQEs into request packets, in posting order.
//!
//! Owns the send-side PSN state (next PSN, oldest unacknowledged PSN), the
//! initiator-depth count (`max_rd_atomic`), fences, the RC window, and the
//! retransmission cursor. It decides *which* packet goes next and describes it
//! ([`ReqPacket`]); the engine gathers the payload and writes the bytes.
//! Facts: `spec/rc-reliability.md` §1, `spec/roce-wire.md` §4 and §9.

use super::wqe::{SendQueue, SendWqe};
use crate::types::QpType;
use crate::wr::{SendFlags, WrOpcode, WrTarget};
use wire::opcode::{MessageKind, Position, Transport};
use wire::{
    aeth, atomic_eth, deth, immdt, reth, xrceth, Opcode, Psn, Qkey, Qpn, Rkey, TransportRepr,
    XrcSrqn,
};

/// Unacknowledged PSNs an RC requester keeps in flight at most (rxe uses 128;
/// far below 2^23, roce-wire.md §9).
pub const WINDOW_PSNS: u32 = 1024;
/// An AckReq at least this often inside long messages (rxe: 64).
pub const ACK_REQ_EVERY: u32 = 64;

/// Where a request packet's payload comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// No payload.
    None,
    /// `len` bytes of WQE `index`'s message, starting `offset` bytes in.
    Message {
        /// Index of the WQE in the send queue.
        index: usize,
        /// Byte offset into the message.
        offset: u64,
        /// Bytes.
        len: usize,
    },
}

/// A request packet the requester wants sent.
#[derive(Debug, Clone, Copy)]
pub struct ReqPacket {
    /// Headers.
    pub repr: TransportRepr,
    /// Payload source.
    pub payload: Payload,
    /// Index of the WQE in the send queue.
    pub index: usize,
    /// True if this is the last request packet of the WQE.
    pub last: bool,
    /// True if this PSN was sent before (go-back-N).
    pub retransmit: bool,
}

impl Default for ReqPacket {
    /// A placeholder the requester overwrites whole before it is read.
    fn default() -> ReqPacket {
        ReqPacket {
            repr: TransportRepr::new(wire::bth::Repr::new(
                Opcode::RC_SEND_ONLY,
                Qpn::from_masked(0),
                Psn::from_masked(0),
            )),
            payload: Payload::None,
            index: 0,
            last: false,
            retransmit: false,
        }
    }
}

/// Send-side transport state of one QP.
///
/// The fields are visible to the completer (the requester's other half, in
/// `completer.rs`) and nothing else: the actor and the engine go through the
/// methods, so the retry policy (budgets, their restoration on progress, the
/// ACK-timeout round) is decided here alone.
#[derive(Debug, Clone, Default)]
pub struct Requester {
    /// Next PSN a new message starts at.
    pub(super) next_psn: Psn,
    /// Oldest unacknowledged PSN (RC).
    pub(super) una: Psn,
    /// READ/atomic WQEs started and not completed.
    pub(super) rd_atomic_inflight: u32,
    /// Transport retries left (RC).
    pub(super) retry_left: u8,
    /// RNR retries left (RC; 7 = infinite).
    pub(super) rnr_left: u8,
    /// Packets sent since the last AckReq.
    pub(super) since_ack_req: u32,
    /// One past the highest PSN ever sent (a READ counts its whole reserved
    /// range): a request packet before it is a retransmission.
    pub(super) high_psn: Psn,
    /// An implied-NAK retry from this PSN is under way (cleared by progress
    /// and by an ACK timeout), so further implied NAKs for it are not counted.
    pub(super) retrying: Option<Psn>,
}

/// What an ACK timeout with PSNs outstanding does (rc-reliability.md §1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckTimeout {
    /// A budget was spent: go-back-N from the oldest unacknowledged PSN.
    Resend,
    /// `retry_cnt` is spent: the oldest WQE fails with `RETRY_EXC_ERR`.
    Exhausted,
}

/// What the requester needs to know about its QP to build a packet.
#[derive(Debug, Clone, Copy)]
pub struct ReqEnv {
    /// QP type.
    pub qp_type: QpType,
    /// Own QPN.
    pub qpn: u32,
    /// Peer QPN (RC/UC).
    pub dest_qpn: u32,
    /// Path MTU in bytes (UD: the port MTU).
    pub mtu: u32,
    /// Own Q_Key (UD).
    pub qkey: u32,
    /// `max_rd_atomic`.
    pub max_rd_atomic: u8,
    /// May new messages start (RTS), or only the one in progress finish (SQD)?
    pub may_start: bool,
}

impl Requester {
    /// Resets for RTR→RTS with the initial PSN and retry budgets.
    pub fn start(&mut self, sq_psn: u32, retry_cnt: u8, rnr_retry: u8) {
        *self = Requester {
            next_psn: Psn::from_masked(sq_psn),
            una: Psn::from_masked(sq_psn),
            high_psn: Psn::from_masked(sq_psn),
            retry_left: retry_cnt,
            rnr_left: rnr_retry,
            ..Requester::default()
        };
    }

    /// Next PSN a new message starts at (`sq_psn` as query reports it).
    pub fn next_psn(&self) -> Psn {
        self.next_psn
    }

    /// Oldest unacknowledged PSN.
    pub fn una(&self) -> Psn {
        self.una
    }

    /// True while some sent PSN is not yet acknowledged (RC).
    pub fn outstanding(&self) -> bool {
        self.una != self.next_psn
    }

    /// READ/atomic WQEs started and not yet answered.
    pub fn rd_atomic_inflight(&self) -> u32 {
        self.rd_atomic_inflight
    }

    /// Transport and RNR retries left.
    pub fn budgets(&self) -> (u8, u8) {
        (self.retry_left, self.rnr_left)
    }

    /// A modify set a new `retry_cnt` / `rnr_retry` (SQD→SQD, SQD→RTS): that
    /// is the budget from now on.
    pub fn set_budgets(&mut self, retry_cnt: Option<u8>, rnr_retry: Option<u8>) {
        if let Some(n) = retry_cnt {
            self.retry_left = n;
        }
        if let Some(n) = rnr_retry {
            self.rnr_left = n;
        }
    }

    /// Forward progress restores both budgets and ends a retry round (rxe
    /// reset_retry_counters; rc-reliability.md §1.3).
    pub fn on_progress(&mut self, retry_cnt: u8, rnr_retry: u8) {
        self.retry_left = retry_cnt;
        self.rnr_left = rnr_retry;
        self.retrying = None;
    }

    /// The local ACK timer fired with PSNs outstanding: spend one transport
    /// retry and go back to the oldest unacknowledged PSN, or report the budget
    /// spent (rc-reliability.md §1.3: only timeouts and implied NAKs spend it).
    pub fn on_ack_timeout(&mut self, sq: &mut SendQueue, mtu: u32) -> AckTimeout {
        if self.retry_left == 0 {
            return AckTimeout::Exhausted;
        }
        self.retry_left -= 1;
        self.retrying = None;
        let una = self.una;
        self.rewind(sq, una, mtu);
        AckTimeout::Resend
    }

    /// WQE `index` failed locally while older ones are still outstanding (RC):
    /// its PSNs are taken back so nothing waits for them, and it completes
    /// with `status` once it reaches the front (completer::complete_failed).
    pub fn take_back(&mut self, sq: &mut SendQueue, index: usize, status: crate::wc::WcStatus) {
        let w = &mut sq.wqes[index];
        self.next_psn = w.first_psn;
        w.npsn = 0;
        w.sent_pkts = 0;
        w.failed = Some(status);
        sq.next = index;
    }

    /// The send queue was flushed: nothing is in flight any more.
    pub fn flushed(&mut self) {
        self.rd_atomic_inflight = 0;
    }

    /// The next request packet, if one may go now: written whole into `out`
    /// (true), or `out` untouched and nothing changed (false).
    pub fn next_packet(&mut self, sq: &mut SendQueue, env: &ReqEnv, out: &mut ReqPacket) -> bool {
        let index = sq.next;
        let Some(wqe) = sq.wqes.get(index) else {
            return false;
        };
        if wqe.failed.is_some() {
            return false;
        }
        if wqe.sent_pkts == 0 && wqe.npsn == 0 && !self.may_begin(wqe, env) {
            return false;
        }
        let reliable = env.qp_type.is_reliable();
        let wqe = &mut sq.wqes[index];
        if wqe.npsn == 0 {
            self.assign_psns(wqe, env);
        }
        let psn = packet_psn(wqe, env.mtu);
        if reliable && psn.offset_from(self.una) >= WINDOW_PSNS {
            return false;
        }
        self.build(wqe, index, psn, env, out);
        let una = self.una;
        out.retransmit = psn.offset_from(una) < self.high_psn.offset_from(una);
        let end = if wqe.opcode == WrOpcode::RdmaRead {
            wqe.first_psn.wrapping_add(wqe.npsn)
        } else {
            psn.next()
        };
        if end.offset_from(una) > self.high_psn.offset_from(una) {
            self.high_psn = end;
        }
        wqe.sent_pkts += 1;
        if out.last {
            sq.next += 1;
        }
        true
    }

    /// May WQE `w` (not yet started) begin now?
    fn may_begin(&self, w: &SendWqe, env: &ReqEnv) -> bool {
        if !env.may_start {
            return false;
        }
        // rc-reliability.md §1.2: initiator depth and fences.
        if w.is_rd_atomic() && self.rd_atomic_inflight >= u32::from(env.max_rd_atomic) {
            return false;
        }
        !(w.flags.contains(SendFlags::FENCE) && self.rd_atomic_inflight > 0)
    }

    fn assign_psns(&mut self, w: &mut SendWqe, env: &ReqEnv) {
        w.first_psn = self.next_psn;
        w.npsn = match w.opcode {
            // A READ reserves one PSN per response packet (roce-wire.md §9).
            WrOpcode::RdmaRead => super::wqe::packets_for(w.len, env.mtu),
            _ => w.request_packets(env.mtu),
        };
        self.next_psn = self.next_psn.wrapping_add(w.npsn);
        if w.is_rd_atomic() {
            self.rd_atomic_inflight += 1;
        }
    }

    fn build(&mut self, w: &SendWqe, index: usize, psn: Psn, env: &ReqEnv, out: &mut ReqPacket) {
        let total = w.request_packets(env.mtu);
        let i = w.sent_pkts.min(total - 1);
        let last = i + 1 >= total;
        let opcode = opcode_for(w, env.qp_type, Position::of(i as usize, total as usize));
        let ack_req =
            env.qp_type.is_reliable() && (last || self.since_ack_req + 1 >= ACK_REQ_EVERY);
        self.since_ack_req = if ack_req { 0 } else { self.since_ack_req + 1 };
        let solicited = last && w.flags.contains(SendFlags::SOLICITED) && carries_se(w.opcode);
        let dest = w.ud.map_or(env.dest_qpn, |u| u.remote_qpn);
        out.repr = TransportRepr::new(super::bth(opcode, dest, psn, ack_req, solicited));
        out.payload = self.fill_headers(&mut out.repr, w, index, i, env);
        (out.index, out.last, out.retransmit) = (index, last, false);
    }

    fn fill_headers(
        &self,
        r: &mut TransportRepr,
        w: &SendWqe,
        index: usize,
        i: u32,
        env: &ReqEnv,
    ) -> Payload {
        let headers = r.bth.opcode.headers();
        if headers.contains(wire::HeaderSet::DETH) {
            let ud = w.ud.expect("UD WQEs carry a destination");
            r.deth = Some(deth::Repr {
                qkey: Qkey(ud.qkey),
                src_qp: Qpn::from_masked(env.qpn),
            });
        }
        if headers.contains(wire::HeaderSet::XRCETH) {
            // spec/xrc.md §3: every XRC request names the target's XRC SRQ.
            r.xrceth = Some(xrceth::Repr {
                xrc_srqn: XrcSrqn::from_masked(w.xrc_srqn),
            });
        }
        if headers.contains(wire::HeaderSet::IMMDT) {
            r.immdt = Some(immdt::Repr { imm: w.imm.value() });
        }
        if headers.contains(wire::HeaderSet::IETH) {
            if let WrTarget::Invalidate { rkey } = w.target {
                r.ieth = Some(wire::ieth::Repr { rkey: Rkey(rkey) });
            }
        }
        match (w.opcode, w.target) {
            (WrOpcode::RdmaRead, WrTarget::Rdma(t)) => {
                // A resumed READ asks only for what has not arrived (rc-reliability.md §1.3).
                let va = t.remote_addr + w.read_done;
                let dma_len = (w.len - w.read_done) as u32;
                r.reth = Some(reth::Repr {
                    va,
                    rkey: Rkey(t.rkey),
                    dma_len,
                });
                Payload::None
            }
            (WrOpcode::Flush, WrTarget::Flush(f)) => {
                // IBA 1.5 FLUSH: RETH (range) + FETH (selectivity, placement).
                r.reth = Some(reth::Repr {
                    va: f.remote_addr,
                    rkey: Rkey(f.rkey),
                    dma_len: f.len,
                });
                r.feth = Some(wire::feth::Repr {
                    selectivity: f.level,
                    placement: f.placement,
                });
                Payload::None
            }
            (op, WrTarget::Atomic(t)) if op.is_atomic() => {
                let (swap_add, compare) = match op {
                    WrOpcode::AtomicCmpAndSwp => (t.swap, t.compare_add),
                    _ => (t.compare_add, 0),
                };
                r.atomic_eth = Some(atomic_eth::Repr {
                    va: t.remote_addr,
                    rkey: Rkey(t.rkey),
                    swap_add,
                    compare,
                });
                Payload::None
            }
            _ => {
                if headers.contains(wire::HeaderSet::RETH) {
                    if let WrTarget::Rdma(t) = w.target {
                        r.reth = Some(reth::Repr {
                            va: t.remote_addr,
                            rkey: Rkey(t.rkey),
                            dma_len: w.len as u32,
                        });
                    }
                }
                let offset = u64::from(i) * u64::from(env.mtu);
                let len = (w.len - offset).min(u64::from(env.mtu)) as usize;
                r.payload_len = len;
                Payload::Message { index, offset, len }
            }
        }
    }

    /// Go-back-N: resend everything from PSN `from` on (RC). WQEs before it keep
    /// their state; the one containing it resumes at that packet; later ones
    /// restart.
    pub fn rewind(&mut self, sq: &mut SendQueue, from: Psn, mtu: u32) {
        let mut found = None;
        for (i, w) in sq.wqes.iter_mut().enumerate() {
            if w.npsn == 0 {
                // An executed local operation (no PSN) is stepped over.
                if w.done && w.opcode.is_local() {
                    continue;
                }
                break;
            }
            let off = from.offset_from(w.first_psn);
            if found.is_none() && off < w.npsn {
                found = Some(i);
                if w.opcode == WrOpcode::RdmaRead {
                    w.read_done = u64::from(off) * u64::from(mtu);
                    w.sent_pkts = 0;
                } else if w.is_rd_atomic() {
                    w.sent_pkts = 0;
                } else {
                    w.sent_pkts = off;
                }
            } else if found.is_some() {
                w.sent_pkts = 0;
                w.read_done = 0;
            }
        }
        // Never forward: a WQE before `found` may still wait for its resend
        // from an earlier rewind (e.g. an implied NAK, then an RNR NAK for a
        // later PSN).
        if let Some(i) = found {
            sq.next = sq.next.min(i);
        }
        self.since_ack_req = 0;
    }
}

/// PSN of the WQE's next request packet.
fn packet_psn(w: &SendWqe, mtu: u32) -> Psn {
    match w.opcode {
        WrOpcode::RdmaRead => w
            .first_psn
            .wrapping_add((w.read_done / u64::from(mtu)) as u32),
        _ => w.first_psn.wrapping_add(w.sent_pkts),
    }
}

/// SE may be set on SEND* and RDMA_WRITE_WITH_IMM (rc-reliability.md §1.1).
fn carries_se(op: WrOpcode) -> bool {
    matches!(
        op,
        WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv | WrOpcode::RdmaWriteWithImm
    )
}

fn opcode_for(w: &SendWqe, t: QpType, pos: Position) -> Opcode {
    let transport = match t {
        QpType::Uc => Transport::Uc,
        QpType::Ud => Transport::Ud,
        QpType::XrcSend => Transport::Xrc,
        _ => Transport::Rc,
    };
    // roce-wire.md §4.5: each XRC request opcode is its RC one with the
    // transport bits 101 (0xA0 | the RC code).
    let base = if transport == Transport::Xrc { 0xA0 } else { 0 };
    let kind = match w.opcode {
        WrOpcode::Send => MessageKind::Send,
        WrOpcode::SendWithImm => MessageKind::SendWithImm,
        WrOpcode::RdmaWrite => MessageKind::Write,
        WrOpcode::RdmaWriteWithImm => MessageKind::WriteWithImm,
        WrOpcode::SendWithInv => MessageKind::SendWithInv,
        // IBA 1.5 ATOMIC WRITE: one packet, RETH and 8 bytes of data.
        // (RC only: XRC_SEND does not offer the IBA 1.5 opcodes, create.rs.)
        WrOpcode::AtomicWrite => return rc_op(0x1D),
        // IBA 1.5 FLUSH: one packet, RETH and FETH.
        WrOpcode::Flush => return rc_op(0x1C),
        WrOpcode::RdmaRead => return rc_op(base | 0x0C),
        WrOpcode::AtomicCmpAndSwp => return rc_op(base | 0x13),
        WrOpcode::AtomicFetchAndAdd => return rc_op(base | 0x14),
        // Posting refuses every other opcode (wr::check_opcode).
        _ => MessageKind::Send,
    };
    Opcode::segment(transport, kind, pos).unwrap_or_else(|| rc_op(0x04))
}

/// An RC opcode by number (roce-wire.md §4.1): READ_REQUEST 0x0C, COMPARE_SWAP
/// 0x13, FETCH_ADD 0x14, SEND_ONLY 0x04.
fn rc_op(code: u8) -> Opcode {
    Opcode::new(code).unwrap_or_else(|_| unreachable!("0x{code:02x} is in the opcode table"))
}

/// An ACKNOWLEDGE / NAK packet header set (used by the responder).
pub fn ack_repr(dest_qpn: u32, psn: Psn, syndrome: aeth::Syndrome, msn: u32) -> TransportRepr {
    let mut r = TransportRepr::new(super::bth(rc_op(0x11), dest_qpn, psn, false, false));
    r.aeth = Some(aeth::Repr {
        syndrome,
        msn: wire::Msn::from_masked(msn),
    });
    r
}

//! The responder: what a QP does with request packets addressed to it.
//!
//! RC follows `spec/rc-reliability.md` §3 step by step (PSN, opcode sequence,
//! QP access flags, resources, length, R_Key, execute, MSN, ACK); UC follows §6
//! (no ACKs, resynchronise on FIRST/ONLY, silent drops); UD follows §7 (Q_Key,
//! the 40-byte GRH area). Each refusal is a [`Refusal`] and one function,
//! [`Responder::refuse`], maps it to its IBA error class: silent drop, NAK with
//! the QP unchanged, or NAK and the QP to ERR.
//!
//! Responses (ACK, NAK, READ responses, atomic ACKs) wait in an outbox and are
//! written one packet at a time by [`Responder::next_response`].

use super::sgl::{self, SglError};
use super::wqe::{RecvQueue, RecvWqe};
use crate::handle::PdHandle;
use crate::memory::{AtomicOp, Memory};
use crate::mr::{Access, MrTable};
use crate::types::{AccessFlags, QpType};
use crate::wc::{WcFlags, WcOpcode, WcStatus, WorkCompletion};
use crate::wr::ImmData;
use std::collections::VecDeque;
use wire::aeth::{NakCode, Syndrome};
use wire::opcode::{MessageKind, Operation, Position, Transport};
use wire::{atomic_ack_eth, bth, Opcode, Psn, PsnRegion, TransportRepr};

/// The largest RDMA length (IBA: 2^31).
const MAX_DMA_LEN: u64 = 1 << 31;

/// What the responder needs to know about its QP.
pub struct RespEnv<'a> {
    /// QP type.
    pub qp_type: QpType,
    /// Own QPN.
    pub qpn: u32,
    /// The peer's QPN (RC/UC), where responses go.
    pub dest_qpn: u32,
    /// The QP's PD.
    pub pd: PdHandle,
    /// `qp_access_flags`.
    pub access: AccessFlags,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// `max_dest_rd_atomic`.
    pub max_dest_rd_atomic: u8,
    /// `min_rnr_timer` code.
    pub min_rnr_timer: u8,
    /// Own Q_Key (UD).
    pub qkey: u32,
    /// The QP's own handle (type 2 windows are bound to one QP).
    pub qp: crate::handle::QpHandle,
    /// Memory windows (remote accesses read them; SEND_WITH_INV changes them).
    pub mws: &'a crate::lock::ReadMostly<crate::mr::mw::MwTable>,
    /// Memory regions.
    pub mrs: &'a MrTable,
    /// Memory.
    pub mem: &'a dyn Memory,
}

/// A request packet as received.
pub struct Incoming<'a> {
    /// Headers.
    pub repr: &'a TransportRepr,
    /// Payload bytes.
    pub payload: &'a [u8],
    /// The 40-byte GRH area a UD receive buffer gets.
    pub grh: &'a [u8; 40],
}

/// What handling a packet did besides changing the responder.
#[derive(Debug, Default)]
pub struct RespEffects {
    /// Receive completions, with their "solicited" bit.
    pub completions: Vec<(WorkCompletion, bool)>,
    /// The responder hit an error that moves the QP to ERR.
    pub fatal: Option<Fatal>,
    /// A receive WQE was taken from the queue.
    pub took_wqe: bool,
    /// Counted drops, by reason.
    pub dropped: Option<Drop>,
    /// A PSN-sequence or fatal NAK was queued (RNR NAKs: [`Drop::NoWqe`] on RC).
    pub nak_sent: Option<NakCode>,
    /// Why a SEND_WITH_INV's invalidation was refused.
    pub window_error: Option<crate::mr::mw::MwError>,
}

/// Why the QP goes to ERR, for the async event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fatal {
    /// Invalid request (NAK invalid request sent) → `IBV_EVENT_QP_REQ_ERR`.
    InvalidRequest,
    /// Access violation (NAK remote access sent) → `IBV_EVENT_QP_ACCESS_ERR`.
    AccessError,
    /// Local problem (bad receive WQE) → `IBV_EVENT_QP_FATAL`.
    Local,
}

/// Why a packet was dropped without an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drop {
    /// Out-of-sequence packet after the sequence NAK, or a UC sequence break.
    Sequence,
    /// Duplicate SEND/WRITE packet: re-ACKed, not executed.
    DupAcked,
    /// Duplicate READ request: answered again.
    DupRead,
    /// Duplicate atomic: answered from the saved value.
    DupAtomic,
    /// Duplicate READ/atomic with no matching saved resource: dropped.
    DupDropped,
    /// No receive WQE (RC: RNR NAK sent; UC/UD: silent).
    NoWqe,
    /// Q_Key mismatch (UD).
    Qkey,
    /// A UC/UD error that IBA answers with a silent drop.
    Unreliable,
}

impl Drop {
    /// A duplicate request (answered or not), rather than a drop.
    pub fn is_duplicate(self) -> bool {
        matches!(
            self,
            Drop::DupAcked | Drop::DupRead | Drop::DupAtomic | Drop::DupDropped
        )
    }
}

/// One response waiting to go out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Response {
    Ack { psn: Psn, syndrome: Syndrome },
    Read(ReadJob),
    AtomicAck { psn: Psn, orig: u64 },
}

/// A READ being answered (or re-answered), one packet per call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ReadJob {
    /// PSN of the next response packet.
    psn: Psn,
    /// First PSN of the original request (positions are relative to it).
    first: Psn,
    /// PSNs the whole response spans.
    npsn: u32,
    va: u64,
    rkey: u32,
    len: u64,
    /// Bytes of the response already sent (from the original VA).
    offset: u64,
    /// The PD the memory is checked against (an XRC target's comes from the
    /// SRQ the request named, spec/xrc.md §4).
    pd: PdHandle,
}

/// A saved READ or atomic, to answer duplicates (rc-reliability.md §3.1, §3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resource {
    Read {
        first: Psn,
        npsn: u32,
        va: u64,
        rkey: u32,
        len: u64,
    },
    Atomic {
        psn: Psn,
        orig: u64,
    },
    /// An ATOMIC WRITE or FLUSH, executed: a duplicate is answered again
    /// without executing (rxe `duplicate_request`, oA19-14/15).
    Placed {
        psn: Psn,
    },
}

/// A message being received.
#[derive(Debug, Clone, Default)]
enum InMsg {
    #[default]
    Idle,
    Send {
        wqe: RecvWqe,
        offset: u64,
    },
    Write {
        va: u64,
        rkey: u32,
        left: u64,
        total: u64,
    },
}

/// Why a request is refused, before its IBA class decides the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    OutOfSequence,
    NoWqe,
    InvalidRequest,
    AccessError,
    RecvTooSmall,
    BadRecvWqe,
}

/// Receive-side transport state of one QP.
#[derive(Debug, Clone, Default)]
pub struct Responder {
    /// Expected PSN.
    pub epsn: Psn,
    /// Messages completed (24 bits).
    pub msn: u32,
    /// A PSN-sequence or RNR NAK is outstanding (rc-reliability.md §3 step
    /// 1): no other NAK until the expected PSN arrives.
    nak_sent: bool,
    /// PSN of the last executed SEND/WRITE/atomic packet (ACK for duplicates).
    ack_psn: Psn,
    msg: InMsg,
    /// UC: dropping until the next FIRST/ONLY.
    uc_dropping: bool,
    resources: VecDeque<Resource>,
    outbox: VecDeque<Response>,
}

impl Responder {
    /// Resets for INIT→RTR with the expected PSN.
    pub fn start(&mut self, rq_psn: u32) {
        let epsn = Psn::from_masked(rq_psn);
        *self = Responder {
            epsn,
            ack_psn: epsn.wrapping_sub(1),
            ..Responder::default()
        };
    }

    /// Anything waiting to be sent?
    pub fn has_output(&self) -> bool {
        !self.outbox.is_empty()
    }

    /// If the next packet out continues a READ response already under way
    /// (its FIRST sent): whether it is the response's LAST, at path MTU
    /// `mtu` (a run may take it along, crate::run).
    pub fn read_continues(&self, mtu: u32) -> Option<bool> {
        match self.outbox.front()? {
            Response::Read(job) if job.offset > 0 && job.offset < job.len => {
                Some(job.len - job.offset <= u64::from(mtu))
            }
            _ => None,
        }
    }

    /// A multi-packet SEND or WRITE is in progress (its FIRST taken).
    pub fn in_message(&self) -> bool {
        !matches!(self.msg, InMsg::Idle)
    }

    /// The receive WQE of a message in progress, handed back when the QP is
    /// flushed (its completion must be a flush too).
    pub fn take_in_progress(&mut self) -> Option<RecvWqe> {
        match std::mem::take(&mut self.msg) {
            InMsg::Send { wqe, .. } => Some(wqe),
            _ => None,
        }
    }

    /// Handles one request packet (the QP processes requests in its state).
    pub fn handle(
        &mut self,
        env: &RespEnv<'_>,
        rq: &mut RecvQueue,
        pkt: &Incoming<'_>,
        fx: &mut RespEffects,
    ) {
        let r = match env.qp_type {
            QpType::Rc | QpType::XrcRecv => self.rc(env, rq, pkt, fx),
            QpType::Uc => self.uc(env, rq, pkt, fx),
            _ => self.ud(env, rq, pkt, fx),
        };
        if let Err(refusal) = r {
            self.refuse(env, pkt.repr.bth.psn, refusal, fx);
        }
    }

    /// An XRC request whose XRCETH names no SRQ of the target's domain
    /// (spec/xrc.md §4): in sequence it is an invalid request (NAK, the QP to
    /// ERR); a duplicate or out-of-sequence one is handled as any other.
    pub fn handle_invalid(
        &mut self,
        env: &RespEnv<'_>,
        rq: &mut RecvQueue,
        pkt: &Incoming<'_>,
        fx: &mut RespEffects,
    ) {
        let psn = pkt.repr.bth.psn;
        if psn == self.epsn {
            self.refuse(env, psn, Refusal::InvalidRequest, fx);
        } else {
            self.handle(env, rq, pkt, fx);
        }
    }

    /// The IBA error class of a refusal (rc-reliability.md §3.2): silent drop,
    /// NAK with the QP unchanged (class B), or NAK and ERR (class A/C).
    fn refuse(&mut self, env: &RespEnv<'_>, psn: Psn, why: Refusal, fx: &mut RespEffects) {
        if !env.qp_type.is_reliable() {
            fx.dropped = Some(if why == Refusal::NoWqe {
                Drop::NoWqe
            } else {
                Drop::Unreliable
            });
            return;
        }
        let (nak, fatal) = match why {
            Refusal::OutOfSequence => (NakCode::PsnSequenceError, None),
            Refusal::NoWqe => {
                fx.dropped = Some(Drop::NoWqe);
                let syndrome = Syndrome::RnrNak {
                    timer_code: env.min_rnr_timer,
                };
                self.outbox.push_back(Response::Ack { psn, syndrome });
                // A NAK is outstanding: the packets behind this one are
                // dropped in silence until it comes again (qib/hfi1
                // `r_nak_state`), no sequence NAK cutting the RNR wait short.
                self.nak_sent = true;
                return;
            }
            Refusal::InvalidRequest => (NakCode::InvalidRequest, Some(Fatal::InvalidRequest)),
            Refusal::RecvTooSmall => (NakCode::InvalidRequest, Some(Fatal::InvalidRequest)),
            Refusal::AccessError => (NakCode::RemoteAccessError, Some(Fatal::AccessError)),
            Refusal::BadRecvWqe => (NakCode::RemoteOperationalError, Some(Fatal::Local)),
        };
        let nak_psn = if why == Refusal::OutOfSequence {
            self.epsn
        } else {
            psn
        };
        self.outbox.push_back(Response::Ack {
            psn: nak_psn,
            syndrome: Syndrome::Nak(nak),
        });
        fx.nak_sent = Some(nak);
        if let Some(f) = fatal {
            fx.fatal = Some(f);
            let status = match why {
                Refusal::RecvTooSmall => WcStatus::LocLenErr,
                Refusal::AccessError => WcStatus::RemAccessErr,
                Refusal::BadRecvWqe => WcStatus::LocProtErr,
                _ => WcStatus::RemInvReqErr,
            };
            // The receive WQE in progress completes with the error (§5); the
            // engine flushes the rest.
            if let Some(wqe) = self.take_in_progress() {
                let wc = WorkCompletion::error(wqe.wr_id, env.qpn, WcOpcode::Recv, status);
                fx.completions.push((wc, true));
            }
        }
    }

    // ---------------------------------------------------------------- RC

    fn rc(
        &mut self,
        env: &RespEnv<'_>,
        rq: &mut RecvQueue,
        pkt: &Incoming<'_>,
        fx: &mut RespEffects,
    ) -> Result<(), Refusal> {
        let b = &pkt.repr.bth;
        match b.psn.region(self.epsn) {
            PsnRegion::InSequence => self.nak_sent = false,
            PsnRegion::OutOfSequence => {
                if self.nak_sent {
                    fx.dropped = Some(Drop::Sequence);
                    return Ok(());
                }
                self.nak_sent = true;
                return Err(Refusal::OutOfSequence);
            }
            PsnRegion::Duplicate => {
                self.duplicate(env, pkt.repr, fx);
                return Ok(());
            }
        }
        let op = b.opcode;
        self.check_sequence(op)?;
        check_qp_access(op.operation(), env.access)?;
        match op.operation() {
            Operation::ReadRequest => self.rc_read(env, pkt.repr),
            Operation::CompareSwap | Operation::FetchAdd => self.rc_atomic(env, pkt.repr),
            Operation::AtomicWrite => self.rc_atomic_write(env, pkt),
            Operation::Flush => self.rc_flush(env, pkt.repr),
            Operation::Send | Operation::SendWithImm | Operation::SendWithInv => {
                self.place_send(env, rq, pkt, fx)?;
                self.executed(b);
                Ok(())
            }
            Operation::Write | Operation::WriteWithImm => {
                self.place_write(env, rq, pkt, fx)?;
                self.executed(b);
                Ok(())
            }
            _ => Err(Refusal::InvalidRequest),
        }
    }

    /// After a SEND/WRITE packet was placed: advance e; ACK if asked.
    fn executed(&mut self, b: &bth::Repr) {
        self.ack_psn = b.psn;
        self.epsn = b.psn.next();
        if b.opcode.ends_message() {
            self.msn = (self.msn + 1) & 0xff_ffff;
        }
        if b.ack_req {
            self.push_ack(b.psn);
        }
    }

    /// Queues an ACK; a newer ACK replaces an older one still waiting (coalescing).
    fn push_ack(&mut self, psn: Psn) {
        let ack = Response::Ack {
            psn,
            syndrome: Syndrome::ack_unlimited(),
        };
        if let Some(Response::Ack { syndrome, .. }) = self.outbox.back() {
            if syndrome.is_ack() {
                *self.outbox.back_mut().expect("checked") = ack;
                return;
            }
        }
        self.outbox.push_back(ack);
    }

    /// rc-reliability.md §3 step 2: MIDDLE/LAST only inside a message of the same kind.
    fn check_sequence(&self, op: Opcode) -> Result<(), Refusal> {
        let continues = matches!(op.position(), Position::Middle | Position::Last);
        let ok = match (&self.msg, op.operation()) {
            (
                InMsg::Send { .. },
                Operation::Send | Operation::SendWithImm | Operation::SendWithInv,
            ) => continues,
            (InMsg::Write { .. }, Operation::Write | Operation::WriteWithImm) => continues,
            (InMsg::Idle, _) => !continues,
            _ => false,
        };
        ok.then_some(()).ok_or(Refusal::InvalidRequest)
    }

    // ------------------------------------------------------- placement

    /// SEND (RC and UC): take the WQE at FIRST/ONLY, scatter, complete at LAST/ONLY.
    fn place_send(
        &mut self,
        env: &RespEnv<'_>,
        rq: &mut RecvQueue,
        pkt: &Incoming<'_>,
        fx: &mut RespEffects,
    ) -> Result<(), Refusal> {
        let op = pkt.repr.bth.opcode;
        check_payload_len(op, pkt.payload.len(), env.mtu)?;
        if op.starts_message() {
            let wqe = rq.pop_front().ok_or(Refusal::NoWqe)?;
            fx.took_wqe = true;
            self.msg = InMsg::Send { wqe, offset: 0 };
        }
        let InMsg::Send { wqe, offset } = &mut self.msg else {
            return Err(Refusal::InvalidRequest);
        };
        match sgl::scatter(env.mrs, env.pd, env.mem, &wqe.sges, *offset, pkt.payload) {
            Ok(()) => *offset += pkt.payload.len() as u64,
            Err(SglError::Length { .. }) => return Err(Refusal::RecvTooSmall),
            Err(SglError::Access(_)) => return Err(Refusal::BadRecvWqe),
        }
        if op.ends_message() {
            // SEND_WITH_INV: the IETH's window is invalidated before the
            // receive completes (spec/memory-windows.md §6); a refusal fails
            // the message, and the WQE in progress completes in error.
            let invalidated = match pkt.repr.ieth {
                Some(ieth) => {
                    let mut mws = env.mws.write();
                    crate::mr::mw::invalidate(&mut mws, env.pd, Some(env.qp), ieth.rkey.0)
                        .map_err(|e| {
                            fx.window_error = Some(e);
                            Refusal::InvalidRequest
                        })?;
                    Some(ieth.rkey.0)
                }
                None => None,
            };
            let InMsg::Send { wqe, offset } = std::mem::take(&mut self.msg) else {
                unreachable!()
            };
            complete_recv(env, pkt, fx, wqe.wr_id, WcOpcode::Recv, offset);
            if let (Some(rkey), Some((wc, _))) = (invalidated, fx.completions.last_mut()) {
                wc.imm_data = ImmData::from_c_field(rkey);
                wc.wc_flags = WcFlags::WITH_INV;
            }
            rq.recycle(wqe);
        }
        Ok(())
    }

    /// RDMA WRITE (RC and UC): check the R_Key at FIRST/ONLY, copy, and for
    /// WRITE_WITH_IMM consume a receive WQE at the packet carrying the ImmDt.
    fn place_write(
        &mut self,
        env: &RespEnv<'_>,
        rq: &mut RecvQueue,
        pkt: &Incoming<'_>,
        fx: &mut RespEffects,
    ) -> Result<(), Refusal> {
        let op = pkt.repr.bth.opcode;
        check_payload_len(op, pkt.payload.len(), env.mtu)?;
        // RNR before any state changes: the requester resends this very packet,
        // which must then find the responder as it was (a WRITE_ONLY_WITH_IMM
        // must not leave a WRITE "in progress" behind).
        if op.has_immediate() && rq.is_empty() {
            return Err(Refusal::NoWqe);
        }
        // The message's check (FIRST/ONLY): its host address and length.
        let mut whole = None;
        if op.starts_message() {
            let reth = pkt.repr.reth.ok_or(Refusal::InvalidRequest)?;
            let len = u64::from(reth.dma_len);
            if len > MAX_DMA_LEN {
                return Err(Refusal::InvalidRequest);
            }
            whole = Some(check_remote(
                env,
                reth.rkey.0,
                reth.va,
                len,
                Access::RemoteWrite,
            )?);
            self.msg = InMsg::Write {
                va: reth.va,
                rkey: reth.rkey.0,
                left: len,
                total: len,
            };
        }
        let InMsg::Write {
            va,
            left,
            rkey,
            total,
        } = &mut self.msg
        else {
            return Err(Refusal::InvalidRequest);
        };
        let n = pkt.payload.len() as u64;
        // The payloads must add up to the RETH length exactly (§3 step 5).
        if n > *left || (op.ends_message() && n != *left) {
            return Err(Refusal::InvalidRequest);
        }
        if n > 0 {
            // Checked again for every packet: the MR may have been deregistered
            // since the FIRST packet, and then its memory must not be touched.
            // The message's first packet (FIRST or ONLY) was checked just now
            // for the whole message, which holds this packet's bytes. The
            // check is held until the bytes are placed.
            let checked = match whole {
                Some(c) => c,
                None => check_remote(env, *rkey, *va, n, Access::RemoteWrite)?,
            };
            env.mem.write(checked.host, pkt.payload);
        }
        *va += n;
        *left -= n;
        let total = *total;
        if op.ends_message() {
            self.msg = InMsg::Idle;
            if op.has_immediate() {
                let wqe = rq.pop_front().ok_or(Refusal::NoWqe)?;
                fx.took_wqe = true;
                // byte_len is the RDMA length (completions.md §1), not this packet's.
                complete_recv(env, pkt, fx, wqe.wr_id, WcOpcode::RecvRdmaWithImm, total);
                rq.recycle(wqe);
            }
        }
        Ok(())
    }

    // ---------------------------------------------------------- UC, UD

    /// rc-reliability.md §6: accept in sequence; otherwise only a FIRST/ONLY,
    /// which resynchronises; every error is a silent drop.
    fn uc(
        &mut self,
        env: &RespEnv<'_>,
        rq: &mut RecvQueue,
        pkt: &Incoming<'_>,
        fx: &mut RespEffects,
    ) -> Result<(), Refusal> {
        let b = &pkt.repr.bth;
        let in_seq = b.psn == self.epsn && !self.uc_dropping;
        if !in_seq || (b.opcode.starts_message() && !matches!(self.msg, InMsg::Idle)) {
            self.abandon(rq);
            if !b.opcode.starts_message() {
                self.uc_dropping = true;
                self.epsn = b.psn.next();
                fx.dropped = Some(Drop::Sequence);
                return Ok(());
            }
        }
        self.uc_dropping = false;
        self.epsn = b.psn.next();
        let r = match b.opcode.operation() {
            Operation::Send | Operation::SendWithImm => self.place_send(env, rq, pkt, fx),
            Operation::Write | Operation::WriteWithImm => self.place_write(env, rq, pkt, fx),
            _ => Err(Refusal::InvalidRequest),
        };
        if r.is_err() {
            // The whole message is dropped; its receive WQE is kept for the next.
            self.abandon(rq);
            self.uc_dropping = !b.opcode.ends_message();
        }
        r
    }

    /// Discards a partly received UC message; its receive WQE goes back to the
    /// head of the queue to be reused (qib/hfi1; rc-reliability.md §6).
    fn abandon(&mut self, rq: &mut RecvQueue) {
        if let InMsg::Send { wqe, .. } = std::mem::take(&mut self.msg) {
            rq.push_front(wqe);
        }
    }

    /// rc-reliability.md §7: Q_Key, one packet, the GRH area first.
    fn ud(
        &mut self,
        env: &RespEnv<'_>,
        rq: &mut RecvQueue,
        pkt: &Incoming<'_>,
        fx: &mut RespEffects,
    ) -> Result<(), Refusal> {
        let deth = pkt.repr.deth.ok_or(Refusal::InvalidRequest)?;
        if deth.qkey.0 != env.qkey {
            fx.dropped = Some(Drop::Qkey);
            return Ok(());
        }
        let wqe = rq.front().ok_or(Refusal::NoWqe)?;
        let need = 40 + pkt.payload.len() as u64;
        if need > wqe.capacity() {
            // Dropped; the WQE stays for the next message (rdmavt).
            return Err(Refusal::RecvTooSmall);
        }
        let scatter = sgl::scatter(env.mrs, env.pd, env.mem, &wqe.sges, 0, pkt.grh)
            .and_then(|()| sgl::scatter(env.mrs, env.pd, env.mem, &wqe.sges, 40, pkt.payload));
        let wqe = rq.pop_front().expect("checked above");
        fx.took_wqe = true;
        let imm = pkt.repr.immdt.map(|i| ImmData::from_value(i.imm));
        let mut wc = match scatter {
            Ok(()) => recv_completion(wqe.wr_id, env.qpn, WcOpcode::Recv, need as u32, imm),
            Err(_) => {
                WorkCompletion::error(wqe.wr_id, env.qpn, WcOpcode::Recv, WcStatus::LocProtErr)
            }
        };
        if !wc.status.is_error() {
            wc.src_qp = deth.src_qp.get();
            wc.wc_flags = wc.wc_flags | WcFlags::GRH;
            wc.sl = roce_packet_type(pkt.grh);
        }
        rq.recycle(wqe);
        fx.completions.push((wc, pkt.repr.bth.solicited));
        Ok(())
    }
}

/// rc-reliability.md §3 step 3: the QP's own access flags.
fn check_qp_access(op: Operation, access: AccessFlags) -> Result<(), Refusal> {
    let need = match op {
        // rxe check_op_valid: ATOMIC WRITE needs remote write on the QP.
        Operation::Write | Operation::WriteWithImm | Operation::AtomicWrite => {
            AccessFlags::REMOTE_WRITE
        }
        Operation::ReadRequest => AccessFlags::REMOTE_READ,
        Operation::CompareSwap | Operation::FetchAdd => AccessFlags::REMOTE_ATOMIC,
        _ => return Ok(()),
    };
    access
        .contains(need)
        .then_some(())
        .ok_or(Refusal::InvalidRequest)
}

/// rc-reliability.md §3 step 6: R_Key, PD, bounds, rights. Zero-length READ or
/// WRITE checks nothing (IBA C9-88). Returns the host address of `va`.
/// The key check of a remote access; the answer holds a window's read lock
/// until it is dropped: drop it only after the memory access
/// ([`crate::mr::mw::Checked`]).
fn check_remote<'a>(
    env: &RespEnv<'a>,
    rkey: u32,
    va: u64,
    len: u64,
    access: Access,
) -> Result<crate::mr::mw::Checked<'a>, Refusal> {
    if len == 0 && access != Access::RemoteAtomic {
        return Ok(crate::mr::mw::Checked::unchecked(va));
    }
    // A window's rkey is checked like a region's (spec/memory-windows.md §4).
    crate::mr::mw::check_rkey(
        env.mws, env.mrs, env.pd, env.qp, rkey, va, len, access, env.mem,
    )
    .map_err(|_| Refusal::AccessError)
}

/// roce-wire.md §6: FIRST/MIDDLE carry exactly one MTU, LAST 1..=MTU, ONLY ≤ MTU.
fn check_payload_len(op: Opcode, n: usize, mtu: u32) -> Result<(), Refusal> {
    let mtu = mtu as usize;
    let ok = match op.position() {
        Position::First | Position::Middle => n == mtu,
        Position::Last => (1..=mtu).contains(&n),
        Position::Only => n <= mtu,
    };
    ok.then_some(()).ok_or(Refusal::InvalidRequest)
}

/// A successful receive completion for the message `pkt` ends.
fn complete_recv(
    env: &RespEnv<'_>,
    pkt: &Incoming<'_>,
    fx: &mut RespEffects,
    wr_id: u64,
    op: WcOpcode,
    len: u64,
) {
    let imm = pkt.repr.immdt.map(|i| ImmData::from_value(i.imm));
    let wc = recv_completion(wr_id, env.qpn, op, len as u32, imm);
    fx.completions.push((wc, pkt.repr.bth.solicited));
}

fn recv_completion(
    wr_id: u64,
    qpn: u32,
    opcode: WcOpcode,
    byte_len: u32,
    imm: Option<ImmData>,
) -> WorkCompletion {
    let mut wc = WorkCompletion::error(wr_id, qpn, opcode, WcStatus::Success);
    wc.byte_len = byte_len;
    if let Some(imm) = imm {
        wc.imm_data = imm;
        wc.wc_flags = WcFlags::WITH_IMM;
    }
    wc
}

/// An XRC target answers on the XRC transport: ACKNOWLEDGE 0xB1, ATOMIC
/// ACKNOWLEDGE 0xB2, READ responses 0xAD–0xB0, each the RC code with the
/// transport bits 101 (roce-wire.md §4.5, spec/xrc.md §3).
fn xrc_response(rc: Opcode) -> Opcode {
    Opcode::new(0xA0 | (rc.get() & 0x1f)).unwrap_or(rc)
}

fn rc_opcode(code: u8) -> Opcode {
    Opcode::new(code).unwrap_or_else(|_| unreachable!("0x{code:02x} is in the opcode table"))
}

/// A UD receive's `wc.sl` on RoCE: the packet type, as ConnectX reports it
/// (bit 3: the frame has a UDP header, i.e. RoCE v2; bits 2..0: the L3 header,
/// 1 IPv6, 2 IPv4). SL has no meaning on RoCE; UCX 1.13 reads this field to
/// tell where the destination address sits in the 40-byte GRH area
/// (`uct_ud_iface_check_grh`) and drops every UD packet otherwise.
/// `grh` is that area: an IPv6 header, or 20 undefined bytes and an IPv4 header.
fn roce_packet_type(grh: &[u8]) -> u8 {
    let ipv6 = grh.first().is_some_and(|b| b >> 4 == 6);
    0x8 | if ipv6 { 1 } else { 2 }
}

mod remote;

#[cfg(test)]
mod roce_packet_type_tests {
    use super::roce_packet_type;

    #[test]
    fn ud_sl_carries_the_roce_packet_type() {
        let mut v6 = [0u8; 40];
        v6[0] = 0x60;
        assert_eq!(roce_packet_type(&v6), 0x9);
        let mut v4 = [0u8; 40];
        v4[20] = 0x45;
        assert_eq!(roce_packet_type(&v4), 0xa);
        // UCX 1.13 masks with 0x7: 2 means IPv4, the address in the last 4 bytes.
        assert_eq!(roce_packet_type(&v4) & 0x7, 2);
    }
}

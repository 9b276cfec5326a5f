//! The posting rules of [`super`]: what a WR posted in each QP state becomes
//! ([`POST_TABLE`]), the refusals ([`PostError`], each with its errno and a
//! reason in words) and the pure checks `ibv_post_send` / `ibv_post_recv` /
//! `ibv_post_srq_recv` run on a WR before it is queued.

use super::types::*;
use crate::error::{Errno, ObjectKind};
use crate::handle::{AhHandle, PdHandle};
use crate::mr::SglError;
use crate::types::{QpState, QpType};
use std::fmt;

/// One row of the WR-opcode × QP-type matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeSupport {
    /// The opcode.
    pub opcode: WrOpcode,
    /// Valid on UD / UC / RC per verbs (`ibv_post_send(3)` table; FLUSH and
    /// ATOMIC_WRITE are RC-only, spec rc-reliability.md §1.1).
    pub verbs: [bool; 3],
    /// Executed by softverbs on UD / UC / RC. Valid-but-not-offered is
    /// refused with `EOPNOTSUPP`, never accepted and dropped.
    pub softverbs: [bool; 3],
}

const fn row(opcode: WrOpcode, verbs: [bool; 3], softverbs: [bool; 3]) -> OpcodeSupport {
    OpcodeSupport {
        opcode,
        verbs,
        softverbs,
    }
}

const N: bool = false;
const Y: bool = true;

/// The WR-opcode × QP-type matrix, columns `[UD, UC, RC]`. Not offered by
/// softverbs: SEND_WITH_INV on UC (UC has no wire opcode for it, spec
/// roce-wire.md §4.2), TSO on UD (softverbs offers it on RAW_PACKET QPs
/// only, `Engine::post_send_tso`). DRIVER1 is valid on no type.
pub const OPCODE_MATRIX: [OpcodeSupport; 14] = [
    row(WrOpcode::Send, [Y, Y, Y], [Y, Y, Y]),
    row(WrOpcode::SendWithImm, [Y, Y, Y], [Y, Y, Y]),
    row(WrOpcode::RdmaWrite, [N, Y, Y], [N, Y, Y]),
    row(WrOpcode::RdmaWriteWithImm, [N, Y, Y], [N, Y, Y]),
    row(WrOpcode::RdmaRead, [N, N, Y], [N, N, Y]),
    row(WrOpcode::AtomicCmpAndSwp, [N, N, Y], [N, N, Y]),
    row(WrOpcode::AtomicFetchAndAdd, [N, N, Y], [N, N, Y]),
    row(WrOpcode::LocalInv, [N, Y, Y], [N, Y, Y]),
    row(WrOpcode::BindMw, [N, Y, Y], [N, Y, Y]),
    row(WrOpcode::SendWithInv, [N, Y, Y], [N, N, Y]),
    row(WrOpcode::Tso, [Y, N, N], [N, N, N]),
    row(WrOpcode::Driver1, [N, N, N], [N, N, N]),
    row(WrOpcode::Flush, [N, N, Y], [N, N, Y]),
    row(WrOpcode::AtomicWrite, [N, N, Y], [N, N, Y]),
];

fn matrix_column(qp_type: QpType) -> Option<usize> {
    match qp_type {
        QpType::Ud => Some(0),
        QpType::Uc => Some(1),
        // ibv_post_send(3): XRC_SEND takes the RC opcodes (spec/xrc.md §5).
        QpType::Rc | QpType::XrcSend => Some(2),
        _ => None,
    }
}

/// Checks `opcode` against [`OPCODE_MATRIX`] for a QP of `qp_type`.
pub fn check_opcode(opcode: WrOpcode, qp_type: QpType) -> Result<(), PostError> {
    let col = matrix_column(qp_type);
    let support = OPCODE_MATRIX.iter().find(|r| r.opcode == opcode);
    let (verbs, ours) = match (support, col) {
        (Some(r), Some(c)) => (r.verbs[c], r.softverbs[c]),
        _ => (false, false),
    };
    match (verbs, ours) {
        (_, true) => Ok(()),
        (true, false) => Err(PostError::OpcodeNotOffered { opcode, qp_type }),
        (false, false) => Err(PostError::OpcodeForQpType { opcode, qp_type }),
    }
}

/// What happens to a WR posted in a given state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Disposition {
    /// Refused at once with `EINVAL`.
    Refused,
    /// Accepted and queued, not processed until the QP changes state
    /// (receives in INIT; sends in SQD, held until RTS).
    Queued,
    /// Accepted and processed.
    Processed,
    /// Accepted and completed with `IBV_WC_WR_FLUSH_ERR` (IBA C10-96).
    Flushed,
}

/// One row of [`POST_TABLE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostRule {
    /// The QP state.
    pub state: QpState,
    /// `ibv_post_recv` on the QP's own RQ.
    pub recv: Disposition,
    /// `ibv_post_send`.
    pub send: Disposition,
}

const fn rule(state: QpState, recv: Disposition, send: Disposition) -> PostRule {
    PostRule { state, recv, send }
}

/// Which states accept posting, and what becomes of the WR
/// (spec qp-state-machine.md §7, first table; rdmavt `ib_rvt_state_ops`).
pub const POST_TABLE: [PostRule; 7] = {
    use Disposition::*;
    [
        rule(QpState::Reset, Refused, Refused),
        rule(QpState::Init, Queued, Refused),
        rule(QpState::Rtr, Processed, Refused),
        rule(QpState::Rts, Processed, Processed),
        rule(QpState::Sqd, Processed, Queued),
        rule(QpState::Sqe, Processed, Flushed),
        rule(QpState::Err, Flushed, Flushed),
    ]
};

/// What `ibv_post_send` does in `state`.
pub fn post_send_disposition(state: QpState) -> Disposition {
    POST_TABLE[state as usize].send
}

/// What `ibv_post_recv` (own RQ) does in `state`.
pub fn post_recv_disposition(state: QpState) -> Disposition {
    POST_TABLE[state as usize].recv
}

/// Which queue a posting error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queue {
    /// The send queue (`ibv_post_send`).
    Send,
    /// The QP's receive queue (`ibv_post_recv`).
    Recv,
    /// A shared receive queue (`ibv_post_srq_recv`).
    Srq,
}

impl Queue {
    fn verb(self) -> &'static str {
        match self {
            Queue::Send => "ibv_post_send",
            Queue::Recv => "ibv_post_recv",
            Queue::Srq => "ibv_post_srq_recv",
        }
    }
    fn depth_attr(self) -> &'static str {
        match self {
            Queue::Send => "cap.max_send_wr",
            Queue::Recv => "cap.max_recv_wr",
            Queue::Srq => "srq_attr.max_wr",
        }
    }
    fn sge_attr(self) -> &'static str {
        match self {
            Queue::Send => "cap.max_send_sge",
            Queue::Recv => "cap.max_recv_sge",
            Queue::Srq => "srq_attr.max_sge",
        }
    }
}

impl fmt::Display for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.verb())
    }
}

/// The largest message: 2^31 bytes (IBA; spec roce-wire.md §6, qp-state-machine.md §7).
pub const MAX_MESSAGE_LEN: u64 = 1 << 31;

/// The local buffer length of an 8-byte atomic.
pub const ATOMIC_LEN: u64 = 8;

/// Why a WR was refused. The WR is not posted; earlier WRs of the same list stay posted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// The QP state does not accept this kind of WR.
    #[error("{queue} in state {state}: {hint}")]
    BadState {
        /// Which verb.
        queue: Queue,
        /// The QP state.
        state: QpState,
        /// What to do about it.
        hint: &'static str,
    },
    /// `opcode` is not an `ibv_wr_opcode` value.
    #[error("opcode = {raw} is not an ibv_wr_opcode value (0..=11, 14, 15)")]
    UnknownOpcode {
        /// The value given.
        raw: u32,
    },
    /// The opcode is not valid for the QP type (`ibv_post_send(3)` table).
    #[error("{opcode} is not valid on {qp_type} QP (see the opcode table in ibv_post_send(3))")]
    OpcodeForQpType {
        /// The opcode.
        opcode: WrOpcode,
        /// The QP type.
        qp_type: QpType,
    },
    /// Verbs allows the opcode on this QP type, softverbs does not offer it.
    #[error("{opcode} on {qp_type} QP is not supported by softverbs")]
    OpcodeNotOffered {
        /// The opcode.
        opcode: WrOpcode,
        /// The QP type.
        qp_type: QpType,
    },
    /// `send_flags` has bits verbs.h does not define.
    #[error("send_flags = {flags:#x} has unknown bits {unknown:#x} (known: FENCE, SIGNALED, SOLICITED, INLINE, IP_CSUM)")]
    UnknownSendFlags {
        /// Flags given.
        flags: u32,
        /// The unknown bits.
        unknown: u32,
    },
    /// `IBV_SEND_IP_CSUM` without checksum offload.
    #[error("IBV_SEND_IP_CSUM: this device has no checksum offload (device_cap_flags lacks IBV_DEVICE_UD_IP_CSUM)")]
    IpCsum,
    /// More SGEs than the queue was created for.
    #[error("{queue}: num_sge = {num_sge} exceeds {attr} = {max}")]
    TooManySge {
        /// Which verb.
        queue: Queue,
        /// SGEs given.
        num_sge: usize,
        /// The capacity attribute's name.
        attr: &'static str,
        /// Its value.
        max: u32,
    },
    /// The message is longer than 2^31 bytes.
    #[error(
        "{opcode}: total length {len} exceeds the largest message (2^31 bytes, port max_msg_sz)"
    )]
    MessageTooLong {
        /// The opcode.
        opcode: WrOpcode,
        /// Sum of the SGE lengths.
        len: u64,
    },
    /// Inline data longer than the QP allows.
    #[error("IBV_SEND_INLINE with {len} bytes exceeds cap.max_inline_data = {max}")]
    InlineTooLong {
        /// Sum of the SGE lengths.
        len: u64,
        /// The QP's `max_inline_data`.
        max: u32,
    },
    /// Inline on an opcode that carries no outgoing data.
    #[error("IBV_SEND_INLINE is valid only for SEND and RDMA_WRITE opcodes, not {opcode}")]
    InlineOpcode {
        /// The opcode.
        opcode: WrOpcode,
    },
    /// An atomic whose local buffer (ATOMIC_WRITE: its data) is not 8 bytes.
    #[error("{opcode}: the local buffer must be exactly 8 bytes, the sg_list has {len}")]
    AtomicLength {
        /// The opcode.
        opcode: WrOpcode,
        /// Sum of the SGE lengths.
        len: u64,
    },
    /// An atomic to a remote address that is not 8-byte aligned.
    #[error("{opcode}: {field} = {remote_addr:#x} is not 8-byte aligned")]
    AtomicAlignment {
        /// The opcode.
        opcode: WrOpcode,
        /// Where the address is: `wr.atomic.remote_addr` or `wr.rdma.remote_addr`.
        field: &'static str,
        /// The address given.
        remote_addr: u64,
    },
    /// READ/atomic on a QP that may have none outstanding.
    #[error("{opcode} on a QP with max_rd_atomic = 0 could never be sent; set attr.max_rd_atomic (IBV_QP_MAX_QP_RD_ATOMIC) at RTR→RTS")]
    NoRdAtomic {
        /// The opcode.
        opcode: WrOpcode,
    },
    /// The `wr` union member does not match what the opcode and QP type read.
    #[error("{opcode} on {qp_type} QP reads {expected}, but the WR carries {given}")]
    WrongTarget {
        /// The opcode.
        opcode: WrOpcode,
        /// The QP type.
        qp_type: QpType,
        /// The member the WR must carry.
        expected: &'static str,
        /// The member it carries.
        given: &'static str,
    },
    /// `wr.ud.ah` names no live address handle.
    #[error("wr.ud.ah ({ah:#x}) is not a live address handle")]
    NoSuchAh {
        /// The raw handle.
        ah: u64,
    },
    /// `wr.ud.ah` belongs to another protection domain.
    #[error("wr.ud.ah belongs to another protection domain than the QP")]
    AhPd,
    /// A UD message longer than the MTU (one packet per message).
    #[error("UD {opcode} of {len} bytes exceeds the port MTU {mtu} (a UD message is one packet)")]
    UdTooLong {
        /// The opcode.
        opcode: WrOpcode,
        /// Sum of the SGE lengths.
        len: u64,
        /// The MTU in bytes.
        mtu: u32,
    },
    /// `ibv_post_recv` on a QP that receives through an SRQ.
    #[error("ibv_post_recv on a QP created with an SRQ: post receives with ibv_post_srq_recv")]
    HasSrq,
    /// The queue already holds as many WRs as it was created for.
    #[error("{queue}: the queue is full ({depth} outstanding = {attr}); poll completions first")]
    QueueFull {
        /// Which verb.
        queue: Queue,
        /// The depth.
        depth: u32,
        /// The capacity attribute's name.
        attr: &'static str,
    },
    /// The QP or SRQ handle names no live object.
    #[error("no such {kind} (handle {handle:#x})")]
    NoSuchObject {
        /// What the handle should have named.
        kind: ObjectKind,
        /// The raw handle.
        handle: u64,
    },
    /// FLUSH with a placement type other than `IBV_FLUSH_GLOBAL`.
    #[error("IBV_WR_FLUSH: placement type {placement:#x} is not IBV_FLUSH_GLOBAL (1); this device has no persistent memory (IBV_FLUSH_PERSISTENT is not offered)")]
    FlushPlacement {
        /// The type given.
        placement: u8,
    },
    /// FLUSH with an unknown selectivity level.
    #[error("IBV_WR_FLUSH: level {level} is not IBV_FLUSH_RANGE (0) or IBV_FLUSH_MR (1)")]
    FlushLevel {
        /// The level given.
        level: u8,
    },
    /// FLUSH carries no local data.
    #[error("IBV_WR_FLUSH takes no scatter/gather list (num_sge = {num_sge})")]
    FlushSge {
        /// SGEs given.
        num_sge: usize,
    },
    /// The bytes of an `IBV_SEND_INLINE` WR could not be gathered.
    #[error("IBV_SEND_INLINE data: {error}")]
    InlineData {
        /// Why.
        #[source]
        error: SglError,
    },
    /// A RAW_PACKET send is one Ethernet frame (spec/raw-packet.md).
    #[error("a RAW_PACKET send is one Ethernet frame of {min}..={max} bytes (header, payload, one VLAN tag; the interface's MTU sets the limit), the sg_list has {len}")]
    RawFrameLength {
        /// Bytes gathered.
        len: u64,
        /// An Ethernet header.
        min: u32,
        /// The interface's MTU + header + VLAN tag.
        max: u32,
    },
    /// A RAW_PACKET `IBV_WR_TSO` the device cannot segment (spec/raw-packet.md §4).
    #[error("IBV_WR_TSO: {0}")]
    Tso(#[from] crate::tso::TsoError),
}

impl PostError {
    /// The errno Linux returns for the same refusal (spec qp-state-machine.md §7).
    pub fn errno(&self) -> Errno {
        match self {
            PostError::QueueFull { .. } => Errno::ENOMEM,
            PostError::OpcodeNotOffered { .. } => Errno::EOPNOTSUPP,
            PostError::FlushPlacement { placement } if *placement & !3 == 0 => Errno::EOPNOTSUPP,
            _ => Errno::EINVAL,
        }
    }
}

/// What `ibv_post_send` checks a WR against: the QP as it is at the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendQueueCtx {
    /// QP type.
    pub qp_type: QpType,
    /// QP state.
    pub state: QpState,
    /// The QP's protection domain (UD: the AH must share it).
    pub pd: PdHandle,
    /// `cap.max_send_wr`.
    pub max_send_wr: u32,
    /// `cap.max_send_sge`.
    pub max_send_sge: u32,
    /// `cap.max_inline_data`.
    pub max_inline_data: u32,
    /// `max_rd_atomic` as set (0 until RTR→RTS sets it).
    pub max_rd_atomic: u8,
    /// MTU of a UD message in bytes (the port's active MTU, spec rc-reliability.md §1.1).
    pub ud_mtu: u32,
    /// Send WRs posted and not yet retired.
    pub outstanding: u32,
}

/// What `ibv_post_recv` checks a WR against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvQueueCtx {
    /// QP state.
    pub state: QpState,
    /// The QP receives through an SRQ.
    pub has_srq: bool,
    /// `cap.max_recv_wr`.
    pub max_recv_wr: u32,
    /// `cap.max_recv_sge`.
    pub max_recv_sge: u32,
    /// Receive WRs posted and not yet completed.
    pub outstanding: u32,
}

/// Checks one send WR. `ah_pd` resolves an address handle to its PD (`None`:
/// no such AH). On success returns what becomes of the WR in this state.
pub fn check_post_send(
    q: &SendQueueCtx,
    wr: &SendWr<'_>,
    ah_pd: impl Fn(AhHandle) -> Option<PdHandle>,
) -> Result<Disposition, PostError> {
    let disposition = send_state(q.state)?;
    check_opcode(wr.opcode, q.qp_type)?;
    check_send_flags(wr.flags)?;
    check_num_sge(Queue::Send, wr.sg_list.len(), q.max_send_sge)?;
    let len = sg_total_len(wr.sg_list);
    if len > MAX_MESSAGE_LEN {
        return Err(PostError::MessageTooLong {
            opcode: wr.opcode,
            len,
        });
    }
    check_inline(wr, len, q.max_inline_data)?;
    check_target(wr, q.qp_type)?;
    check_atomic(wr, len, q.max_rd_atomic)?;
    check_flush(wr)?;
    if let WrTarget::Ud(ud) = wr.target {
        check_ud(q, wr.opcode, &ud, len, ah_pd)?;
    }
    check_room(Queue::Send, q.outstanding, q.max_send_wr)?;
    Ok(disposition)
}

fn send_state(state: QpState) -> Result<Disposition, PostError> {
    // IBA / kernel post_send rejects state < RTS (spec qp-state-machine.md §7).
    match post_send_disposition(state) {
        Disposition::Refused => Err(PostError::BadState {
            queue: Queue::Send,
            state,
            hint: "sends may be posted only in RTS, SQD, SQE or ERR; move the QP to RTS first",
        }),
        d => Ok(d),
    }
}

fn check_send_flags(flags: SendFlags) -> Result<(), PostError> {
    let unknown = flags.0 & !SendFlags::ALL.0;
    if unknown != 0 {
        return Err(PostError::UnknownSendFlags {
            flags: flags.0,
            unknown,
        });
    }
    // ibv_post_send(3): IP_CSUM only with checksum-offload device caps, which we lack.
    if flags.contains(SendFlags::IP_CSUM) {
        return Err(PostError::IpCsum);
    }
    Ok(())
}

fn check_num_sge(queue: Queue, num_sge: usize, max: u32) -> Result<(), PostError> {
    if num_sge > max as usize {
        return Err(PostError::TooManySge {
            queue,
            num_sge,
            attr: queue.sge_attr(),
            max,
        });
    }
    Ok(())
}

fn check_inline(wr: &SendWr<'_>, len: u64, max: u32) -> Result<(), PostError> {
    if !wr.flags.contains(SendFlags::INLINE) {
        return Ok(());
    }
    if !wr.opcode.allows_inline() {
        return Err(PostError::InlineOpcode { opcode: wr.opcode });
    }
    // ATOMIC_WRITE's 8 bytes are its operand, not inline data: check_atomic
    // holds them to exactly 8, whatever cap.max_inline_data is.
    if wr.opcode == WrOpcode::AtomicWrite {
        return Ok(());
    }
    check_inline_len(len, max)
}

/// `len` bytes of inline data against the QP's `cap.max_inline_data`: the one
/// check, also made by the C ABI before it reads the caller's SGEs.
pub fn check_inline_len(len: u64, max: u32) -> Result<(), PostError> {
    if len > u64::from(max) {
        return Err(PostError::InlineTooLong { len, max });
    }
    Ok(())
}

fn check_target(wr: &SendWr<'_>, qp_type: QpType) -> Result<(), PostError> {
    let expected = TargetKind::of(wr.opcode, qp_type);
    // A SEND on RC/UC reads no union member, so any content is fine.
    if expected == TargetKind::None || wr.target.kind() == expected {
        return Ok(());
    }
    Err(PostError::WrongTarget {
        opcode: wr.opcode,
        qp_type,
        expected: expected.name(),
        given: wr.target.kind().name(),
    })
}

fn check_atomic(wr: &SendWr<'_>, len: u64, max_rd_atomic: u8) -> Result<(), PostError> {
    let opcode = wr.opcode;
    if let WrTarget::Atomic(a) = wr.target {
        // spec qp-state-machine.md §7: local length ≠ 8 or remote_addr not 8-aligned → EINVAL.
        if len != ATOMIC_LEN {
            return Err(PostError::AtomicLength { opcode, len });
        }
        if a.remote_addr % 8 != 0 {
            return Err(PostError::AtomicAlignment {
                opcode,
                field: "wr.atomic.remote_addr",
                remote_addr: a.remote_addr,
            });
        }
    }
    if opcode == WrOpcode::AtomicWrite {
        // ibv_wr_atomic_write(3): 8 bytes to an 8-byte-aligned address.
        if len != ATOMIC_LEN {
            return Err(PostError::AtomicLength { opcode, len });
        }
        if let WrTarget::Rdma(t) = wr.target {
            if t.remote_addr % 8 != 0 {
                return Err(PostError::AtomicAlignment {
                    opcode,
                    field: "wr.rdma.remote_addr",
                    remote_addr: t.remote_addr,
                });
            }
        }
    }
    // spec rc-reliability.md §1.2: with max_rd_atomic == 0 such WRs can never be
    // sent; rdmavt rejects at post time (recommended). We do so for READ too.
    if opcode.needs_rd_atomic() && max_rd_atomic == 0 {
        return Err(PostError::NoRdAtomic { opcode });
    }
    Ok(())
}

/// FLUSH: global visibility only (host memory is not persistent), a known
/// selectivity level, and no local buffer (spec/memory-windows.md §9).
fn check_flush(wr: &SendWr<'_>) -> Result<(), PostError> {
    let WrTarget::Flush(f) = wr.target else {
        return Ok(());
    };
    if !wr.sg_list.is_empty() {
        return Err(PostError::FlushSge {
            num_sge: wr.sg_list.len(),
        });
    }
    if f.level > FLUSH_MR {
        return Err(PostError::FlushLevel { level: f.level });
    }
    if f.placement != FLUSH_GLOBAL {
        return Err(PostError::FlushPlacement {
            placement: f.placement,
        });
    }
    Ok(())
}

fn check_ud(
    q: &SendQueueCtx,
    opcode: WrOpcode,
    ud: &UdTarget,
    len: u64,
    ah_pd: impl Fn(AhHandle) -> Option<PdHandle>,
) -> Result<(), PostError> {
    // spec qp-state-machine.md §7: AH of another PD → EINVAL (rdmavt).
    match ah_pd(ud.ah) {
        None => return Err(PostError::NoSuchAh { ah: ud.ah.raw() }),
        Some(pd) if pd != q.pd => return Err(PostError::AhPd),
        Some(_) => {}
    }
    // spec rc-reliability.md §1.1/§7: one packet per UD message. IBA C10-93.1.1
    // (rxe) drops it silently with a success completion; we refuse at post time
    // as qib/hfi1 do, so the mistake is seen and explained.
    if len > u64::from(q.ud_mtu) {
        return Err(PostError::UdTooLong {
            opcode,
            len,
            mtu: q.ud_mtu,
        });
    }
    Ok(())
}

fn check_room(queue: Queue, outstanding: u32, depth: u32) -> Result<(), PostError> {
    // spec qp-state-machine.md §7: queue full → ENOMEM.
    if outstanding >= depth {
        return Err(PostError::QueueFull {
            queue,
            depth,
            attr: queue.depth_attr(),
        });
    }
    Ok(())
}

/// Checks one receive WR for the QP's own RQ; returns what becomes of it.
pub fn check_post_recv(q: &RecvQueueCtx, wr: &RecvWr<'_>) -> Result<Disposition, PostError> {
    // spec qp-state-machine.md §7: QP with an SRQ → EINVAL.
    if q.has_srq {
        return Err(PostError::HasSrq);
    }
    // IBA C10-97.2.1 (rxe): post_recv rejects state < INIT.
    let disposition = match post_recv_disposition(q.state) {
        Disposition::Refused => {
            return Err(PostError::BadState {
                queue: Queue::Recv,
                state: q.state,
                hint: "receives may be posted from INIT on; move the QP to INIT first",
            })
        }
        d => d,
    };
    check_num_sge(Queue::Recv, wr.sg_list.len(), q.max_recv_sge)?;
    check_room(Queue::Recv, q.outstanding, q.max_recv_wr)?;
    Ok(disposition)
}

/// Checks one receive WR for an SRQ with `max_wr` / `max_sge` and `outstanding` WRs queued.
pub fn check_post_srq_recv(
    wr: &RecvWr<'_>,
    max_wr: u32,
    max_sge: u32,
    outstanding: u32,
) -> Result<(), PostError> {
    check_num_sge(Queue::Srq, wr.sg_list.len(), max_sge)?;
    check_room(Queue::Srq, outstanding, max_wr)
}

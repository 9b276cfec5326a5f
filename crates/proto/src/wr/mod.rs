//! Work requests and the rules for posting them.
//!
//! This module owns the verbs work-request types ([`SendWr`], [`RecvWr`], [`Sge`],
//! [`WrOpcode`], [`SendFlags`], [`ImmData`]), the WR-opcode × QP-type matrix
//! ([`OPCODE_MATRIX`]), the per-state posting table ([`POST_TABLE`]) and the
//! pure checks that `ibv_post_send` / `ibv_post_recv` / `ibv_post_srq_recv`
//! run on each WR before it is queued ([`check_post_send`], [`check_post_recv`],
//! [`check_post_srq_recv`]).
//!
//! Promises:
//! - Every refusal is a [`PostError`] that says in words what was wrong and maps
//!   to the errno Linux returns in the same case ([`PostError::errno`]); the
//!   facts are `spec/qp-state-machine.md` §7 (both tables) and the
//!   `ibv_post_send(3)` opcode table. A refused WR changes nothing.
//! - No allocation per post in steady state: a WR *borrows* its scatter/gather
//!   list (`&[Sge]`, as `ibv_send_wr` points at its `sg_list`). The engine
//!   copies an accepted WR into a WQE its queue recycles (`qp::wqe`: retired
//!   WQEs keep their gather list and inline buffer, up to the queue's depth),
//!   so once a queue has been as full as it gets, posting allocates nothing;
//!   the first fill of a queue, and a gather list longer than any before on
//!   that slot, grow buffers (amortized). The safe API's inline gather reuses
//!   an engine buffer (`Engine::post_send_checked`).
//! - `IBV_SEND_INLINE` data is gathered from the SGE addresses by the memory
//!   module at post time (its L_Key is not checked, `ibv_post_send(3)`); this
//!   module checks only its length and opcode.
#![forbid(unsafe_code)]

use crate::error::{Errno, ObjectKind};
use crate::handle::{AhHandle, PdHandle};
use crate::mr::SglError;
use crate::types::{QpState, QpType};
use std::fmt;

/// `struct ibv_sge`: one local buffer of a WR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    /// Start address (or offset into a zero-based MR).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// L_Key of the MR that covers the buffer.
    pub lkey: u32,
}

/// Total byte length of a scatter/gather list (u64: 32 SGEs of 4 GiB do not overflow).
pub fn sg_total_len(sg_list: &[Sge]) -> u64 {
    sg_list.iter().map(|s| u64::from(s.length)).sum()
}

/// `enum ibv_wr_opcode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WrOpcode {
    /// `IBV_WR_RDMA_WRITE` (0).
    RdmaWrite,
    /// `IBV_WR_RDMA_WRITE_WITH_IMM` (1).
    RdmaWriteWithImm,
    /// `IBV_WR_SEND` (2).
    Send,
    /// `IBV_WR_SEND_WITH_IMM` (3).
    SendWithImm,
    /// `IBV_WR_RDMA_READ` (4).
    RdmaRead,
    /// `IBV_WR_ATOMIC_CMP_AND_SWP` (5).
    AtomicCmpAndSwp,
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD` (6).
    AtomicFetchAndAdd,
    /// `IBV_WR_LOCAL_INV` (7).
    LocalInv,
    /// `IBV_WR_BIND_MW` (8).
    BindMw,
    /// `IBV_WR_SEND_WITH_INV` (9).
    SendWithInv,
    /// `IBV_WR_TSO` (10).
    Tso,
    /// `IBV_WR_DRIVER1` (11).
    Driver1,
    /// `IBV_WR_FLUSH` (14).
    Flush,
    /// `IBV_WR_ATOMIC_WRITE` (15).
    AtomicWrite,
}

/// Every WR opcode with its verbs value and name (spec completions.md §2,
/// "`enum ibv_wr_opcode` for reference"; rdma-core `verbs.h`).
pub const WR_OPCODES: [(WrOpcode, u32, &str); 14] = [
    (WrOpcode::RdmaWrite, 0, "IBV_WR_RDMA_WRITE"),
    (WrOpcode::RdmaWriteWithImm, 1, "IBV_WR_RDMA_WRITE_WITH_IMM"),
    (WrOpcode::Send, 2, "IBV_WR_SEND"),
    (WrOpcode::SendWithImm, 3, "IBV_WR_SEND_WITH_IMM"),
    (WrOpcode::RdmaRead, 4, "IBV_WR_RDMA_READ"),
    (WrOpcode::AtomicCmpAndSwp, 5, "IBV_WR_ATOMIC_CMP_AND_SWP"),
    (
        WrOpcode::AtomicFetchAndAdd,
        6,
        "IBV_WR_ATOMIC_FETCH_AND_ADD",
    ),
    (WrOpcode::LocalInv, 7, "IBV_WR_LOCAL_INV"),
    (WrOpcode::BindMw, 8, "IBV_WR_BIND_MW"),
    (WrOpcode::SendWithInv, 9, "IBV_WR_SEND_WITH_INV"),
    (WrOpcode::Tso, 10, "IBV_WR_TSO"),
    (WrOpcode::Driver1, 11, "IBV_WR_DRIVER1"),
    (WrOpcode::Flush, 14, "IBV_WR_FLUSH"),
    (WrOpcode::AtomicWrite, 15, "IBV_WR_ATOMIC_WRITE"),
];

impl WrOpcode {
    fn row(self) -> &'static (WrOpcode, u32, &'static str) {
        // Every variant has exactly one row (test `wr_opcode_rows_complete`).
        let i = WR_OPCODES.iter().position(|r| r.0 == self).unwrap_or(0);
        &WR_OPCODES[i]
    }

    /// From the `ibv_wr_opcode` value; `None` for values verbs.h does not define.
    pub fn from_raw(v: u32) -> Option<WrOpcode> {
        WR_OPCODES.iter().find(|r| r.1 == v).map(|r| r.0)
    }

    /// The `ibv_wr_opcode` value.
    pub fn raw(self) -> u32 {
        self.row().1
    }

    /// The verbs name (`"IBV_WR_SEND"`).
    pub fn name(self) -> &'static str {
        self.row().2
    }

    /// SEND, SEND_WITH_IMM, SEND_WITH_INV.
    pub fn is_send(self) -> bool {
        matches!(
            self,
            WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv
        )
    }

    /// RDMA_WRITE, RDMA_WRITE_WITH_IMM.
    pub fn is_rdma_write(self) -> bool {
        matches!(self, WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm)
    }

    /// The two 8-byte atomics (CMP_AND_SWP, FETCH_AND_ADD).
    pub fn is_atomic(self) -> bool {
        matches!(
            self,
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
        )
    }

    /// Carries immediate data (`imm_data` is read).
    pub fn has_imm(self) -> bool {
        matches!(self, WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm)
    }

    /// Counts against the initiator depth `max_rd_atomic` (spec rc-reliability.md §1.2).
    pub fn needs_rd_atomic(self) -> bool {
        self == WrOpcode::RdmaRead || self.is_atomic()
    }

    /// May be posted with `IBV_SEND_INLINE`: only SEND* and RDMA_WRITE*
    /// (`ibv_post_send(3)`; spec qp-state-machine.md §7).
    pub fn allows_inline(self) -> bool {
        self.is_send() || self.is_rdma_write()
    }
}

impl fmt::Display for WrOpcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

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
/// softverbs: LOCAL_INV, BIND_MW (no memory windows), SEND_WITH_INV (no
/// invalidation; and UC has no wire opcode for it, spec roce-wire.md §4.2),
/// TSO (no offloads), FLUSH and ATOMIC_WRITE (IBA 1.5 extensions, not yet).
/// DRIVER1 is valid on no type.
pub const OPCODE_MATRIX: [OpcodeSupport; 14] = [
    row(WrOpcode::Send, [Y, Y, Y], [Y, Y, Y]),
    row(WrOpcode::SendWithImm, [Y, Y, Y], [Y, Y, Y]),
    row(WrOpcode::RdmaWrite, [N, Y, Y], [N, Y, Y]),
    row(WrOpcode::RdmaWriteWithImm, [N, Y, Y], [N, Y, Y]),
    row(WrOpcode::RdmaRead, [N, N, Y], [N, N, Y]),
    row(WrOpcode::AtomicCmpAndSwp, [N, N, Y], [N, N, Y]),
    row(WrOpcode::AtomicFetchAndAdd, [N, N, Y], [N, N, Y]),
    row(WrOpcode::LocalInv, [N, Y, Y], [N, N, N]),
    row(WrOpcode::BindMw, [N, Y, Y], [N, N, N]),
    row(WrOpcode::SendWithInv, [N, Y, Y], [N, N, N]),
    row(WrOpcode::Tso, [Y, N, N], [N, N, N]),
    row(WrOpcode::Driver1, [N, N, N], [N, N, N]),
    row(WrOpcode::Flush, [N, N, Y], [N, N, N]),
    row(WrOpcode::AtomicWrite, [N, N, Y], [N, N, N]),
];

fn matrix_column(qp_type: QpType) -> Option<usize> {
    match qp_type {
        QpType::Ud => Some(0),
        QpType::Uc => Some(1),
        QpType::Rc => Some(2),
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

/// `enum ibv_send_flags` bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SendFlags(pub u32);

impl SendFlags {
    /// `IBV_SEND_FENCE`: wait for earlier READ/atomic WRs (RC only; ignored elsewhere).
    pub const FENCE: SendFlags = SendFlags(1);
    /// `IBV_SEND_SIGNALED`: generate a completion on success.
    pub const SIGNALED: SendFlags = SendFlags(1 << 1);
    /// `IBV_SEND_SOLICITED`: set the SE bit (SEND*, RDMA_WRITE_WITH_IMM; ignored elsewhere).
    pub const SOLICITED: SendFlags = SendFlags(1 << 2);
    /// `IBV_SEND_INLINE`: the data is copied at post time.
    pub const INLINE: SendFlags = SendFlags(1 << 3);
    /// `IBV_SEND_IP_CSUM`: checksum offload (not offered).
    pub const IP_CSUM: SendFlags = SendFlags(1 << 4);
    /// Every bit verbs.h defines.
    pub const ALL: SendFlags = SendFlags(0x1f);

    /// True if every bit of `other` is set.
    pub const fn contains(self, other: SendFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for SendFlags {
    type Output = SendFlags;
    fn bitor(self, rhs: SendFlags) -> SendFlags {
        SendFlags(self.0 | rhs.0)
    }
}

/// Immediate data: the four bytes exactly as they travel in the ImmDt header.
///
/// Byte-order convention: `ibv_send_wr.imm_data` and `ibv_wc.imm_data` are
/// `__be32`, i.e. the bytes in memory are already in network order and are
/// delivered unchanged (spec roce-wire.md §5, completions.md §1). Keeping the
/// bytes, not a number, makes the convention impossible to apply twice. A C
/// caller's field maps with [`ImmData::from_c_field`] / [`ImmData::to_c_field`]
/// (a plain native-endian reinterpretation); a Rust caller who means the number
/// `v` (what C writes as `htonl(v)`) uses [`ImmData::from_value`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ImmData(pub [u8; 4]);

impl ImmData {
    /// The immediate whose wire bytes are `v` in big-endian (C: `htonl(v)`).
    pub const fn from_value(v: u32) -> ImmData {
        ImmData(v.to_be_bytes())
    }

    /// The number the wire bytes spell in big-endian (C: `ntohl(imm_data)`).
    pub const fn value(self) -> u32 {
        u32::from_be_bytes(self.0)
    }

    /// From the raw `__be32` field of a C struct, read as a native `u32`.
    pub const fn from_c_field(raw: u32) -> ImmData {
        ImmData(raw.to_ne_bytes())
    }

    /// The raw `__be32` field for a C struct (native `u32` over the wire bytes).
    pub const fn to_c_field(self) -> u32 {
        u32::from_ne_bytes(self.0)
    }
}

/// `wr.rdma` of `ibv_send_wr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RdmaTarget {
    /// Remote virtual address.
    pub remote_addr: u64,
    /// R_Key of the remote MR.
    pub rkey: u32,
}

/// `wr.atomic` of `ibv_send_wr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AtomicTarget {
    /// Remote virtual address (8-byte aligned).
    pub remote_addr: u64,
    /// Compare operand (CMP_AND_SWP) or addend (FETCH_AND_ADD).
    pub compare_add: u64,
    /// Swap operand (CMP_AND_SWP).
    pub swap: u64,
    /// R_Key of the remote MR.
    pub rkey: u32,
}

/// `wr.ud` of `ibv_send_wr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdTarget {
    /// The address handle of the destination.
    pub ah: AhHandle,
    /// Destination QPN (24 bits).
    pub remote_qpn: u32,
    /// Destination Q_Key (bit 31 set: use the QP's own Q_Key, spec rc-reliability.md §7).
    pub remote_qkey: u32,
}

/// The `wr` union of `ibv_send_wr`, as the member the opcode and QP type select.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WrTarget {
    /// No remote part (SEND on RC/UC).
    #[default]
    None,
    /// `wr.rdma` (RDMA_WRITE*, RDMA_READ).
    Rdma(RdmaTarget),
    /// `wr.atomic` (the atomics).
    Atomic(AtomicTarget),
    /// `wr.ud` (every WR on a UD QP).
    Ud(UdTarget),
}

impl WrTarget {
    /// Which member this is.
    pub fn kind(&self) -> TargetKind {
        match self {
            WrTarget::None => TargetKind::None,
            WrTarget::Rdma(_) => TargetKind::Rdma,
            WrTarget::Atomic(_) => TargetKind::Atomic,
            WrTarget::Ud(_) => TargetKind::Ud,
        }
    }
}

/// A member of `ibv_send_wr`'s `wr` union, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    /// No member is read (SEND on RC/UC).
    None,
    /// `wr.rdma`.
    Rdma,
    /// `wr.atomic`.
    Atomic,
    /// `wr.ud`.
    Ud,
}

impl TargetKind {
    /// The member `opcode` reads on a `qp_type` QP: the one choice both the
    /// check here and the C ABI's reading of the union follow.
    pub fn of(opcode: WrOpcode, qp_type: QpType) -> TargetKind {
        if qp_type == QpType::Ud {
            TargetKind::Ud
        } else if opcode.is_rdma_write() || opcode == WrOpcode::RdmaRead {
            TargetKind::Rdma
        } else if opcode.is_atomic() {
            TargetKind::Atomic
        } else {
            TargetKind::None
        }
    }

    /// The member's name as verbs.h spells it.
    pub fn name(self) -> &'static str {
        match self {
            TargetKind::None => "none",
            TargetKind::Rdma => "wr.rdma",
            TargetKind::Atomic => "wr.atomic",
            TargetKind::Ud => "wr.ud",
        }
    }
}

/// `struct ibv_send_wr` (without `next`: a list is posted WR by WR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub opcode: WrOpcode,
    /// `send_flags`.
    pub flags: SendFlags,
    /// Local buffers (gather for SEND/WRITE, scatter for READ/atomic results).
    pub sg_list: &'a [Sge],
    /// Immediate data (read for the `*_WITH_IMM` opcodes only).
    pub imm_data: ImmData,
    /// The remote part.
    pub target: WrTarget,
}

/// `struct ibv_recv_wr` (without `next`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Local buffers the incoming message is scattered into.
    pub sg_list: &'a [Sge],
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
    /// An atomic whose local buffer is not 8 bytes.
    #[error("{opcode}: the local buffer must be exactly 8 bytes, the sg_list has {len}")]
    AtomicLength {
        /// The opcode.
        opcode: WrOpcode,
        /// Sum of the SGE lengths.
        len: u64,
    },
    /// An atomic to a remote address that is not 8-byte aligned.
    #[error("{opcode}: wr.atomic.remote_addr = {remote_addr:#x} is not 8-byte aligned")]
    AtomicAlignment {
        /// The opcode.
        opcode: WrOpcode,
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
}

impl PostError {
    /// The errno Linux returns for the same refusal (spec qp-state-machine.md §7).
    pub fn errno(&self) -> Errno {
        match self {
            PostError::QueueFull { .. } => Errno::ENOMEM,
            PostError::OpcodeNotOffered { .. } => Errno::EOPNOTSUPP,
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
                remote_addr: a.remote_addr,
            });
        }
    }
    // spec rc-reliability.md §1.2: with max_rd_atomic == 0 such WRs can never be
    // sent; rdmavt rejects at post time (recommended). We do so for READ too.
    if opcode.needs_rd_atomic() && max_rd_atomic == 0 {
        return Err(PostError::NoRdAtomic { opcode });
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

#[cfg(test)]
mod tests;

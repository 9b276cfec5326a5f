//! The verbs work-request types: what `ibv_post_send` and `ibv_post_recv`
//! take ([`SendWr`], [`RecvWr`], [`WrOpcode`], [`SendFlags`], [`ImmData`],
//! the targets). The rules for posting them are [`super::check`]'s, which
//! stands on this file.

use crate::handle::AhHandle;
use crate::types::QpType;
use std::fmt;

pub use crate::types::{sg_total_len, Sge};

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

    /// Executed by the send queue itself, with no packet: BIND_MW, LOCAL_INV
    /// (rc-reliability.md §1.1).
    pub fn is_local(self) -> bool {
        matches!(self, WrOpcode::BindMw | WrOpcode::LocalInv)
    }

    /// Carries immediate data (`imm_data` is read).
    pub fn has_imm(self) -> bool {
        matches!(self, WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm)
    }

    /// Counts against the initiator depth `max_rd_atomic` (spec rc-reliability.md §1.2).
    pub fn needs_rd_atomic(self) -> bool {
        self.answered_by_response()
    }

    /// Answered by a response rather than acknowledged: READ, the two
    /// atomics, and the IBA 1.5 ATOMIC_WRITE and FLUSH (answered by a
    /// zero-length READ response, rxe `send_read_response_ack`). Each takes a
    /// responder resource, so each counts against `max_rd_atomic`, as in rxe
    /// (which leaves FLUSH out of the count; spec/memory-windows.md §8).
    pub fn answered_by_response(self) -> bool {
        matches!(
            self,
            WrOpcode::RdmaRead | WrOpcode::AtomicWrite | WrOpcode::Flush
        ) || self.is_atomic()
    }

    /// May be posted with `IBV_SEND_INLINE`: only SEND* and RDMA_WRITE*
    /// (`ibv_post_send(3)`; spec qp-state-machine.md §7), and ATOMIC_WRITE,
    /// whose 8 bytes `ibv_wr_atomic_write` hands over by pointer.
    pub fn allows_inline(self) -> bool {
        self.is_send() || self.is_rdma_write() || self == WrOpcode::AtomicWrite
    }
}

impl fmt::Display for WrOpcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
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

/// `IBV_FLUSH_GLOBAL`: the data reaches global visibility (placement type bit 0).
pub const FLUSH_GLOBAL: u8 = 1;
/// `IBV_FLUSH_PERSISTENT`: the data reaches persistence (placement type bit 1).
pub const FLUSH_PERSISTENT: u8 = 2;
/// `IBV_FLUSH_RANGE`: flush `[remote_addr, + len)` (selectivity level 0).
pub const FLUSH_RANGE: u8 = 0;
/// `IBV_FLUSH_MR`: flush the whole region the rkey names (selectivity level 1).
pub const FLUSH_MR: u8 = 1;

/// `ibv_wr_flush(qpx, rkey, remote_addr, len, type, level)` (IBA 1.5 FLUSH).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlushTarget {
    /// Remote address (`IBV_FLUSH_RANGE`).
    pub remote_addr: u64,
    /// R_Key of the remote region.
    pub rkey: u32,
    /// Bytes (`IBV_FLUSH_RANGE`).
    pub len: u32,
    /// `enum ibv_placement_type` bits: [`FLUSH_GLOBAL`], [`FLUSH_PERSISTENT`].
    pub placement: u8,
    /// `enum ibv_selectivity_level`: [`FLUSH_RANGE`] or [`FLUSH_MR`].
    pub level: u8,
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
    /// `bind_mw` (IBV_WR_BIND_MW; `ibv_bind_mw` for type 1 windows).
    Bind(crate::mr::mw::BindRequest),
    /// `invalidate_rkey` (IBV_WR_LOCAL_INV, IBV_WR_SEND_WITH_INV).
    Invalidate {
        /// The rkey to invalidate.
        rkey: u32,
    },
    /// The arguments of `ibv_wr_flush` (IBV_WR_FLUSH).
    Flush(FlushTarget),
}

impl WrTarget {
    /// Which member this is.
    pub fn kind(&self) -> TargetKind {
        match self {
            WrTarget::None => TargetKind::None,
            WrTarget::Rdma(_) => TargetKind::Rdma,
            WrTarget::Atomic(_) => TargetKind::Atomic,
            WrTarget::Ud(_) => TargetKind::Ud,
            WrTarget::Bind(_) => TargetKind::Bind,
            WrTarget::Invalidate { .. } => TargetKind::Invalidate,
            WrTarget::Flush(_) => TargetKind::Flush,
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
    /// `bind_mw`.
    Bind,
    /// `invalidate_rkey`.
    Invalidate,
    /// `ibv_wr_flush`'s arguments.
    Flush,
}

impl TargetKind {
    /// The member `opcode` reads on a `qp_type` QP: the one choice both the
    /// check here and the C ABI's reading of the union follow.
    pub fn of(opcode: WrOpcode, qp_type: QpType) -> TargetKind {
        if qp_type == QpType::Ud {
            TargetKind::Ud
        } else if opcode == WrOpcode::BindMw {
            TargetKind::Bind
        } else if opcode == WrOpcode::Flush {
            TargetKind::Flush
        } else if matches!(opcode, WrOpcode::LocalInv | WrOpcode::SendWithInv) {
            TargetKind::Invalidate
        } else if opcode.is_rdma_write()
            || opcode == WrOpcode::RdmaRead
            || opcode == WrOpcode::AtomicWrite
        {
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
            TargetKind::Bind => "bind_mw",
            TargetKind::Invalidate => "invalidate_rkey",
            TargetKind::Flush => "flush",
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

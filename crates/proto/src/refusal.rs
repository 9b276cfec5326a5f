//! Refusals of a call's arguments that are not a simple range error: an
//! invalid argument ([`InvalidArg`], `EINVAL`) or an unsupported feature
//! ([`Unsupported`], `EOPNOTSUPP`), and [`Refusal`], either of them, which the
//! checks below the crate's error enum (memory registration) return.
//! `crate::error::Error` takes them as `Invalid` and `NotSupported`.

use crate::errno::Errno;
use crate::types::{AccessFlags, QpType};

/// A bad argument that is not a simple range error (`EINVAL`): which call,
/// which argument, and the values that do not fit together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidArg {
    /// `ibv_create_cq`: a completion vector the device does not have.
    #[error("comp_vector {comp_vector} does not exist (num_comp_vectors = {count})")]
    CompVector {
        /// The vector asked for.
        comp_vector: i32,
        /// How many vectors the device has.
        count: u32,
    },
    /// `ibv_resize_cq` below what the CQ holds or is owed (rxe `rxe_cq_chk_attr`).
    #[error(
        "resize_cq: cqe {cqe} is below the {queued} completions queued \
         and {owed} more that signaled send WRs in flight will add"
    )]
    CqResizeBelowQueued {
        /// The capacity asked for.
        cqe: u32,
        /// Completions queued now.
        queued: usize,
        /// Completions signaled send WRs still in flight will add.
        owed: usize,
    },
    /// `ibv_create_qp` without a send or a receive CQ.
    #[error("create_qp: send_cq and recv_cq must both be given (they may be the same CQ)")]
    QpCqMissing,
    /// `ibv_create_qp`: a UC QP with an SRQ (ibv_create_qp(3)).
    #[error("a UC QP cannot use an SRQ (only RC and UD QPs can, ibv_create_qp(3))")]
    UcWithSrq,
    /// `IBV_QP_INIT_ATTR_MAX_TSO_HEADER` on a QP type other than RAW_PACKET
    /// (mlx5 `create_qp`; spec/raw-packet.md §4).
    #[error("max_tso_header is for RAW_PACKET QPs, not {qp_type:?}")]
    TsoHeaderNotRaw {
        /// The QP type asked for.
        qp_type: crate::types::QpType,
    },
    /// `ibv_create_qp_ex` without `IBV_QP_INIT_ATTR_PD`.
    #[error("create_qp_ex: comp_mask must include IBV_QP_INIT_ATTR_PD for this QP type")]
    QpExWithoutPd,
    /// `ibv_reg_mr` with length `SIZE_MAX` (an implicit region) but an address
    /// or without `IBV_ACCESS_ON_DEMAND`.
    #[error("reg_mr: length SIZE_MAX is an implicit region, which needs addr NULL and IBV_ACCESS_ON_DEMAND (got addr {addr:#x}, access {access})")]
    ImplicitMr {
        /// The address given.
        addr: u64,
        /// The access flags given.
        access: AccessFlags,
    },
    /// `ibv_reg_mr`: the range wraps around the address space.
    #[error("reg_mr: addr {addr:#x} + length {length:#x} wraps around the address space")]
    MrWraps {
        /// The address given.
        addr: u64,
        /// The length given.
        length: u64,
    },
    /// `ibv_reg_mr`: access bits no verbs version defines.
    #[error("reg_mr: unknown access flag bits {bits:#x}")]
    MrUnknownAccess {
        /// The unknown bits.
        bits: u32,
    },
    /// `ibv_reg_mr`: remote write or atomic access without local write (ibv_reg_mr(3)).
    #[error("reg_mr access {access}: REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE too (ibv_reg_mr(3))")]
    MrRemoteWithoutLocalWrite {
        /// The access flags given.
        access: AccessFlags,
    },
    /// `ibv_rereg_mr` with flags that name no change (kernel `ib_uverbs_rereg_mr`).
    #[error("rereg_mr: flags name no change (IBV_REREG_MR_CHANGE_PD, _TRANSLATION or _ACCESS)")]
    ReregNoChange,
    /// `ibv_rereg_mr` of a device-memory (zero-based) region: the kernel
    /// re-registers user regions only (`ib_uverbs_rereg_mr`).
    #[error("rereg_mr: a device-memory (zero-based) region cannot be re-registered")]
    ReregDeviceMemory,
    /// `ibv_rereg_mr`: a new translation with a NULL address or a zero length.
    #[error("rereg_mr: a new translation needs a non-NULL address and a non-zero length (got addr {addr:#x}, length {length})")]
    ReregTranslation {
        /// The new address.
        addr: u64,
        /// The new length.
        length: u64,
    },
    /// `ibv_reg_dm_mr` without `IBV_ACCESS_ZERO_BASED`.
    #[error("reg_dm_mr: device memory regions are zero-based: access must include IBV_ACCESS_ZERO_BASED")]
    DmMrNotZeroBased,
    /// `ibv_reg_dm_mr`: the range leaves the device memory.
    #[error("reg_dm_mr: [{offset:#x}, +{length}) is outside the device memory of {dm_len} bytes")]
    DmMrOutside {
        /// Offset into the device memory.
        offset: u64,
        /// Length of the region.
        length: u64,
        /// Size of the device memory.
        dm_len: u64,
    },
    /// `ibv_reg_dm_mr` with `IBV_ACCESS_ON_DEMAND`.
    #[error("reg_dm_mr: device memory is not paged: no IBV_ACCESS_ON_DEMAND")]
    DmMrOnDemand,
    /// `ibv_modify_srq`: mask bits other than `IBV_SRQ_MAX_WR` and `IBV_SRQ_LIMIT`.
    #[error("modify_srq: unknown srq_attr_mask bits {bits:#x}")]
    SrqUnknownMask {
        /// The unknown bits.
        bits: u32,
    },
    /// `ibv_modify_srq`: `max_wr` below the receive WRs already posted.
    #[error("modify_srq: max_wr {max_wr} is below the {posted} receive WRs already posted")]
    SrqBelowPosted {
        /// The `max_wr` asked for.
        max_wr: u32,
        /// Receive WRs posted now.
        posted: u32,
    },
}

/// A feature or value this device does not support (`EOPNOTSUPP`): which
/// call, and which bits or type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsupported {
    /// `ibv_reg_mr` access flags this device does not implement.
    #[error(
        "not supported: reg_mr access flags {flags} (no zero-based user MRs or persistent memory on this device)"
    )]
    MrAccess {
        /// The unsupported flags given.
        flags: AccessFlags,
    },
    /// `ibv_rereg_mr` that switches `IBV_ACCESS_ON_DEMAND` on or off in place.
    #[error("not supported: rereg_mr: IBV_ACCESS_ON_DEMAND cannot be switched on or off in place: register anew")]
    ReregOnDemandSwitch {
        /// The region's access flags now.
        from: AccessFlags,
        /// The access flags asked for.
        to: AccessFlags,
    },
    /// A raw `qp_type` that names no QP type.
    #[error("not supported: qp_type {raw} is not a QP type softverbs knows")]
    UnknownQpType {
        /// The raw value given.
        raw: u32,
    },
    /// A QP type this device does not offer (every type a user may create
    /// is offered today; kept for the C ABI's answer to a future one).
    #[error("not supported: {qp_type} QP on this device")]
    QpType {
        /// The type asked for.
        qp_type: QpType,
    },
    /// A QP type only the kernel creates (SMI, GSI).
    #[error("not supported: {qp_type} QP is kernel-only and cannot be created by applications")]
    KernelOnlyQpType {
        /// The type asked for.
        qp_type: QpType,
    },
    /// `ibv_create_qp_ex` `comp_mask` bits beyond PD, CREATE_FLAGS, SEND_OPS_FLAGS.
    #[error("not supported: create_qp_ex comp_mask bits {bits:#x} (softverbs accepts PD, CREATE_FLAGS, SEND_OPS_FLAGS)")]
    QpExCompMask {
        /// The unsupported bits.
        bits: u32,
    },
    /// `ibv_create_qp_ex` create flags (softverbs supports none).
    #[error("not supported: create_flags {flags:#x}: softverbs supports no QP create flags")]
    QpCreateFlags {
        /// The flags given.
        flags: u32,
    },
    /// `ibv_create_qp_ex` send operations this QP type cannot post.
    #[error(
        "not supported: send_ops_flags {extra:#x} on {qp_type} QP (supported: {supported:#x})"
    )]
    SendOps {
        /// The QP type.
        qp_type: QpType,
        /// The unsupported bits.
        extra: u64,
        /// What this QP type supports.
        supported: u64,
    },
}

/// An invalid argument or an unsupported feature.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// `EINVAL`.
    #[error(transparent)]
    Invalid(#[from] InvalidArg),
    /// `EOPNOTSUPP`.
    #[error(transparent)]
    Unsupported(#[from] Unsupported),
}

impl Refusal {
    /// The errno of the refusal.
    pub fn errno(&self) -> Errno {
        match self {
            Refusal::Invalid(_) => Errno::EINVAL,
            Refusal::Unsupported(_) => Errno::EOPNOTSUPP,
        }
    }
}

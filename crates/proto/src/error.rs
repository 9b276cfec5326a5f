//! Errors: one enum per concern, each variant carrying the context needed to say
//! in words what was wrong, and each mapping to the errno Linux returns.

pub use crate::errno::Errno;
use crate::mask::AttrMask;
pub use crate::refusal::{InvalidArg, Refusal, Unsupported};
use crate::types::{Mtu, QpState, QpType};
use std::fmt;

/// Which kind of object an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    /// Device context.
    Context,
    /// Protection domain.
    Pd,
    /// Memory region.
    Mr,
    /// Completion queue.
    Cq,
    /// Shared receive queue.
    Srq,
    /// Address handle.
    Ah,
    /// Queue pair.
    Qp,
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ObjectKind::Context => "context",
            ObjectKind::Pd => "protection domain",
            ObjectKind::Mr => "memory region",
            ObjectKind::Cq => "completion queue",
            ObjectKind::Srq => "shared receive queue",
            ObjectKind::Ah => "address handle",
            ObjectKind::Qp => "queue pair",
        })
    }
}

/// A value outside its allowed range. `what` names the field as verbs.h does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} = {value} is out of range (allowed {min}..={max}{note})")]
pub struct RangeError {
    /// The field, e.g. `"attr.timeout"` or `"cap.max_send_wr"`.
    pub what: &'static str,
    /// The value given.
    pub value: u64,
    /// Smallest allowed value.
    pub min: u64,
    /// Largest allowed value.
    pub max: u64,
    /// Extra words, e.g. `"; device limit max_qp_wr"`; may be empty.
    pub note: &'static str,
}

impl RangeError {
    /// A raw `ibv_mtu` outside 1 = 256 … `max` (the device's largest).
    pub fn mtu(raw: u32, max: Mtu) -> RangeError {
        RangeError {
            what: "attr.path_mtu",
            value: u64::from(raw),
            min: Mtu::Mtu256.raw().into(),
            max: max.raw().into(),
            note: "; an enum ibv_mtu: 1 = 256 … 5 = 4096 bytes",
        }
    }
}

/// Everything that can go wrong in the control path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A modify-QP call was refused.
    #[error(transparent)]
    Modify(#[from] ModifyError),
    /// A value is out of range.
    #[error(transparent)]
    Range(#[from] RangeError),
    /// A handle does not name a live object (destroyed, or never created).
    #[error("no such {kind} (handle {handle:#x})")]
    NoSuchObject {
        /// What the handle should have named.
        kind: ObjectKind,
        /// The raw handle.
        handle: u64,
    },
    /// An object is still referenced by others and cannot be destroyed.
    #[error(
        "cannot destroy this {kind}: still used by {users} {user_kind}(s); destroy those first"
    )]
    Busy {
        /// The object being destroyed.
        kind: ObjectKind,
        /// How many objects still reference it.
        users: usize,
        /// What kind of object references it (the first found).
        user_kind: ObjectKind,
    },
    /// Two objects given together belong to different contexts or PDs.
    #[error("{what}")]
    Mismatch {
        /// What does not match, in words.
        what: &'static str,
    },
    /// A feature or value this device does not support.
    #[error(transparent)]
    NotSupported(#[from] Unsupported),
    /// A bad argument that is not a simple range error.
    #[error(transparent)]
    Invalid(#[from] InvalidArg),
    /// A device-wide object limit was reached.
    #[error("too many {kind}s: device limit is {limit}")]
    TooMany {
        /// The kind of object.
        kind: ObjectKind,
        /// The device limit.
        limit: u64,
    },
    /// Port number not present on the device.
    #[error("port {port} does not exist (this device has port 1 only)")]
    NoSuchPort {
        /// The port asked for.
        port: u8,
    },
    /// GID index beyond the GID table.
    #[error("GID index {index} is beyond the GID table (gid_tbl_len = {len})")]
    GidIndex {
        /// Index asked for.
        index: u32,
        /// Table length.
        len: u32,
    },
    /// GID-table entry exists but is empty.
    #[error("GID index {index} is an empty GID-table entry")]
    GidEmpty {
        /// Index asked for.
        index: u32,
    },
    /// Device memory refused an allocation or a copy.
    #[error(transparent)]
    Dm(#[from] crate::dm::DmError),
    /// A multicast attach, detach or destroy refused (mcast.rs).
    #[error(transparent)]
    Mcast(#[from] crate::mcast::McastError),
    /// An XRC verb refused (xrcd.rs).
    #[error(transparent)]
    Xrc(#[from] crate::xrcd::XrcError),
    /// `ibv_advise_mr` refused.
    #[error(transparent)]
    Advise(#[from] crate::mr::AdviseError),
    /// A memory-window verb refused (mr/mw.rs).
    #[error(transparent)]
    Mw(#[from] crate::mr::mw::MwError),
    /// P_Key index beyond the P_Key table.
    #[error("P_Key index {index} is beyond the P_Key table (pkey_tbl_len = {len})")]
    PkeyIndex {
        /// Index asked for.
        index: u32,
        /// Table length.
        len: u32,
    },
}

impl Error {
    /// The errno Linux returns for the same refusal.
    pub fn errno(&self) -> Errno {
        match self {
            Error::Modify(e) => e.errno(),
            Error::Range(_) | Error::Mismatch { .. } | Error::Invalid { .. } => Errno::EINVAL,
            Error::NoSuchObject { .. } | Error::NoSuchPort { .. } => Errno::EINVAL,
            Error::GidIndex { .. } | Error::PkeyIndex { .. } => Errno::EINVAL,
            Error::Busy { .. } => Errno::EBUSY,
            Error::NotSupported { .. } => Errno::EOPNOTSUPP,
            Error::TooMany { .. } => Errno::ENOMEM,
            Error::GidEmpty { .. } => Errno::ENODATA,
            Error::Advise(e) => e.errno(),
            Error::Mw(e) => e.errno(),
            Error::Dm(e) => e.errno(),
            Error::Mcast(e) => e.errno(),
            Error::Xrc(e) => e.errno(),
        }
    }
}

impl From<Refusal> for Error {
    fn from(r: Refusal) -> Error {
        match r {
            Refusal::Invalid(e) => Error::Invalid(e),
            Refusal::Unsupported(e) => Error::NotSupported(e),
        }
    }
}

/// Why a modify-QP call was refused. A refused call changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModifyError {
    /// Mask bits outside the standard set (bits 0..=20, and 25 = RATE_LIMIT).
    #[error("attr_mask has bits this device does not know: {bits:#x}")]
    UnknownMaskBits {
        /// The unknown bits.
        bits: u32,
    },
    /// IBV_QP_CUR_STATE given with a state other than RTR, RTS, SQD or SQE.
    #[error("attr.cur_qp_state = {cur} is not allowed: IBV_QP_CUR_STATE may only name RTR, RTS, SQD or SQE")]
    CurStateNotAllowed {
        /// The value given.
        cur: QpState,
    },
    /// The (from, to) pair is not a legal transition.
    #[error("{from}→{to} is not a legal QP state transition{hint}")]
    IllegalTransition {
        /// The (assumed) current state.
        from: QpState,
        /// The requested state.
        to: QpState,
        /// Extra words for well-known traps; may be empty.
        hint: &'static str,
    },
    /// Required attributes missing from the mask.
    #[error("{from}→{to} on {qp_type} QP requires {required}; missing: {missing}")]
    MissingRequired {
        /// QP type.
        qp_type: QpType,
        /// From state.
        from: QpState,
        /// To state.
        to: QpState,
        /// The full required set.
        required: AttrMask,
        /// The required bits that were absent.
        missing: AttrMask,
    },
    /// Attributes given that this transition does not accept.
    #[error("{from}→{to} on {qp_type} QP does not accept {extra} (required: {required}; optional: {optional})")]
    NotAccepted {
        /// QP type.
        qp_type: QpType,
        /// From state.
        from: QpState,
        /// To state.
        to: QpState,
        /// The required set.
        required: AttrMask,
        /// The optional set.
        optional: AttrMask,
        /// The bits given outside required ∪ optional.
        extra: AttrMask,
    },
    /// An attribute value is invalid.
    #[error("{0}")]
    Value(#[source] Box<Error>),
    /// RoCE needs a GRH.
    #[error(
        "RoCE needs a GRH: {which}.is_global must be 1 (most tools: pass a GID index, e.g. -g 0)"
    )]
    NoGrh {
        /// `"ah_attr"` or `"alt_ah_attr"`.
        which: &'static str,
    },
    /// The destination GID is all zeros.
    #[error("{which}.grh.dgid is all zeros: the peer's GID is unknown (did the peer run with a GID index, e.g. -g 0?)")]
    ZeroDgid {
        /// `"ah_attr"` or `"alt_ah_attr"`.
        which: &'static str,
    },
    /// ah_attr.port_num differs from the QP's port in INIT→RTR.
    #[error(
        "ah_attr.port_num = {ah_port} differs from the QP's port {qp_port} (set at RESET→INIT)"
    )]
    AvPortMismatch {
        /// Port in the AH.
        ah_port: u8,
        /// The QP's port.
        qp_port: u8,
    },
    /// A port number that does not exist on the device, naming the field.
    #[error("{owner}.port_num = {port}: no such port (this device has port 1 only)")]
    BadPort {
        /// The structure the field belongs to: `"attr"` or `"ah_attr"`.
        owner: &'static str,
        /// The port given.
        port: u8,
    },
    /// Alternate paths (APM) do not exist on RoCE.
    #[error("IBV_QP_ALT_PATH: alternate paths (APM) are not available on RoCE ports")]
    AltPathOnRoce,
    /// Unsupported access-flag bits.
    #[error("attr.qp_access_flags = {flags:#x} has unsupported bits {unsupported:#x} (allowed: LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC, MW_BIND, ON_DEMAND, FLUSH_GLOBAL, FLUSH_PERSISTENT and the optional range 0x3ff00000)")]
    AccessFlags {
        /// Flags given.
        flags: u32,
        /// The unsupported bits.
        unsupported: u32,
    },
    /// A controlled Q_Key (bit 31) from an unprivileged user.
    #[error("attr.qkey = {qkey:#x} is a controlled Q_Key (bit 31 set): only privileged users may set it")]
    ControlledQkey {
        /// The Q_Key given.
        qkey: u32,
    },
    /// The SQ is still draining; only a move to ERR is possible.
    #[error("the send queue is still draining (SQD, sq_draining = 1): only a move to ERR is allowed until the drain finishes")]
    StillDraining,
}

impl ModifyError {
    /// The errno Linux returns for this refusal.
    pub fn errno(&self) -> Errno {
        match self {
            ModifyError::UnknownMaskBits { .. } => Errno::EOPNOTSUPP,
            ModifyError::Value(e) => e.errno(),
            ModifyError::ControlledQkey { .. } => Errno::EPERM,
            _ => Errno::EINVAL,
        }
    }
}

impl From<RangeError> for ModifyError {
    fn from(e: RangeError) -> Self {
        ModifyError::Value(Box::new(Error::Range(e)))
    }
}

impl From<Error> for ModifyError {
    fn from(e: Error) -> Self {
        match e {
            Error::Modify(m) => m,
            other => ModifyError::Value(Box::new(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::AccessFlags;

    /// The typed details keep each errno and the words the `String`s they
    /// replaced said.
    #[test]
    fn typed_details_keep_errno_and_words() {
        let cases: [(Error, Errno, &str); 9] = [
            (
                InvalidArg::CompVector { comp_vector: 3, count: 1 }.into(),
                Errno::EINVAL,
                "comp_vector 3 does not exist (num_comp_vectors = 1)",
            ),
            (
                InvalidArg::CqResizeBelowQueued { cqe: 2, queued: 3, owed: 1 }.into(),
                Errno::EINVAL,
                "resize_cq: cqe 2 is below the 3 completions queued and 1 more that signaled send WRs in flight will add",
            ),
            (
                InvalidArg::ImplicitMr { addr: 0x10, access: AccessFlags::LOCAL_WRITE }.into(),
                Errno::EINVAL,
                "reg_mr: length SIZE_MAX is an implicit region, which needs addr NULL and IBV_ACCESS_ON_DEMAND (got addr 0x10, access LOCAL_WRITE)",
            ),
            (
                InvalidArg::DmMrOutside { offset: 0x40, length: 8, dm_len: 64 }.into(),
                Errno::EINVAL,
                "reg_dm_mr: [0x40, +8) is outside the device memory of 64 bytes",
            ),
            (
                InvalidArg::SrqBelowPosted { max_wr: 4, posted: 5 }.into(),
                Errno::EINVAL,
                "modify_srq: max_wr 4 is below the 5 receive WRs already posted",
            ),
            (
                Unsupported::MrAccess { flags: AccessFlags::ZERO_BASED }.into(),
                Errno::EOPNOTSUPP,
                "not supported: reg_mr access flags ZERO_BASED (no zero-based user MRs or persistent memory on this device)",
            ),
            (
                Unsupported::QpType { qp_type: QpType::RawPacket }.into(),
                Errno::EOPNOTSUPP,
                "not supported: a RAW_PACKET QP on this device",
            ),
            (
                Unsupported::KernelOnlyQpType { qp_type: QpType::Gsi }.into(),
                Errno::EOPNOTSUPP,
                "not supported: a GSI QP is kernel-only and cannot be created by applications",
            ),
            (
                Unsupported::SendOps { qp_type: QpType::Ud, extra: 0x1, supported: 0x70 }.into(),
                Errno::EOPNOTSUPP,
                "not supported: send_ops_flags 0x1 on a UD QP (supported: 0x70)",
            ),
        ];
        for (e, errno, text) in cases {
            assert_eq!(e.errno(), errno, "{e}");
            assert_eq!(e.to_string(), text);
            // Inside a refused modify the detail keeps its errno too.
            assert_eq!(ModifyError::from(e).errno(), errno);
        }
    }
}

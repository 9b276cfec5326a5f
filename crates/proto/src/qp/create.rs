//! `ibv_create_qp` / `ibv_create_qp_ex`: which requests are accepted and what
//! capacities come back (`shared/spec/qp-query.md` §1–2).

use crate::device::{DeviceAttr, MAX_INLINE_DATA};
use crate::error::{Error, InvalidArg, RangeError, Unsupported};
use crate::types::{QpCap, QpType};

/// `enum ibv_qp_init_attr_mask` bits.
pub mod comp_mask {
    /// `pd` is valid.
    pub const PD: u32 = 1 << 0;
    /// `xrcd` is valid.
    pub const XRCD: u32 = 1 << 1;
    /// `create_flags` is valid.
    pub const CREATE_FLAGS: u32 = 1 << 2;
    /// `max_tso_header` is valid.
    pub const MAX_TSO_HEADER: u32 = 1 << 3;
    /// `rwq_ind_tbl` is valid.
    pub const IND_TABLE: u32 = 1 << 4;
    /// `rx_hash_conf` is valid.
    pub const RX_HASH: u32 = 1 << 5;
    /// `send_ops_flags` is valid.
    pub const SEND_OPS_FLAGS: u32 = 1 << 6;
    /// The bits softverbs accepts (`MAX_TSO_HEADER` on RAW_PACKET QPs only).
    pub const SUPPORTED: u32 = PD | XRCD | CREATE_FLAGS | SEND_OPS_FLAGS | MAX_TSO_HEADER;
}

/// `enum ibv_qp_create_send_ops_flags` bits.
pub mod send_ops {
    /// `ibv_wr_rdma_write`.
    pub const RDMA_WRITE: u64 = 1 << 0;
    /// `ibv_wr_rdma_write_imm`.
    pub const RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
    /// `ibv_wr_send`.
    pub const SEND: u64 = 1 << 2;
    /// `ibv_wr_send_imm`.
    pub const SEND_WITH_IMM: u64 = 1 << 3;
    /// `ibv_wr_rdma_read`.
    pub const RDMA_READ: u64 = 1 << 4;
    /// `ibv_wr_atomic_cmp_swp`.
    pub const ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
    /// `ibv_wr_atomic_fetch_add`.
    pub const ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;
    /// `ibv_wr_local_inv`.
    pub const LOCAL_INV: u64 = 1 << 7;
    /// `ibv_wr_bind_mw`.
    pub const BIND_MW: u64 = 1 << 8;
    /// `ibv_wr_send_inv`.
    pub const SEND_WITH_INV: u64 = 1 << 9;
    /// `ibv_wr_send_tso`.
    pub const TSO: u64 = 1 << 10;
    /// `ibv_wr_flush`.
    pub const FLUSH: u64 = 1 << 11;
    /// `ibv_wr_atomic_write`.
    pub const ATOMIC_WRITE: u64 = 1 << 12;
    /// The operations each QP type offers through `ibv_wr_*` on softverbs.
    pub fn supported(qp_type: crate::types::QpType) -> u64 {
        use crate::types::QpType;
        let windows = LOCAL_INV | BIND_MW;
        match qp_type {
            QpType::Rc => 0x7f | windows | SEND_WITH_INV | ATOMIC_WRITE | FLUSH,
            // ibv_post_send(3): XRC_SEND offers the RC operations (those of
            // IBA 1.2; windows and the IBA 1.5 opcodes are not built for XRC).
            QpType::XrcSend => 0x7f,
            QpType::Uc => RDMA_WRITE | RDMA_WRITE_WITH_IMM | SEND | SEND_WITH_IMM | windows,
            QpType::Ud => SEND | SEND_WITH_IMM,
            // spec/raw-packet.md §2, §4: a frame, or TCP segments.
            QpType::RawPacket => SEND | TSO,
            _ => 0,
        }
    }
}

/// What a caller asks for when creating a QP (the plain and extended forms in one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpRequest {
    /// `ibv_qp_type` value.
    pub qp_type: u32,
    /// Requested capacities.
    pub cap: QpCap,
    /// Whether an SRQ is given (receive capacities are then ignored).
    pub has_srq: bool,
    /// `comp_mask` of the extended form (`PD` alone for the plain form).
    pub comp_mask: u32,
    /// `create_flags` (with `CREATE_FLAGS`).
    pub create_flags: u32,
    /// `send_ops_flags` (with `SEND_OPS_FLAGS`).
    pub send_ops_flags: u64,
    /// `max_tso_header` (with `MAX_TSO_HEADER`; RAW_PACKET only): the
    /// largest header a TSO work request of the QP may carry.
    pub max_tso_header: u16,
}

/// Checks a create request; returns the QP type and the capacities granted.
///
/// Capacities come back as requested (always ≥ the request, as the man page
/// promises), except that the inline capacity is at least what the gather
/// list of a WQE holds, 16 bytes per send SGE, as rxe grants it (spec
/// qp-query.md §2: "max_inline_data = max(requested_inline, 16 ×
/// max_send_sge)"; rdma_xclient posts 16 inline bytes on a QP that asked for
/// none); with an SRQ the receive capacities are 0.
pub fn check(req: &QpRequest, dev: &DeviceAttr) -> Result<(QpType, QpCap), Error> {
    let qp_type = check_type(req)?;
    check_ex(req, qp_type)?;
    let c = req.cap;
    let limit = |what, value: u32, max: u32, note| {
        if value > max {
            return Err(RangeError {
                what,
                value: value.into(),
                min: 0,
                max: max.into(),
                note,
            });
        }
        Ok(())
    };
    limit(
        "cap.max_send_wr",
        c.max_send_wr,
        dev.max_qp_wr,
        "; device limit max_qp_wr",
    )?;
    limit(
        "cap.max_send_sge",
        c.max_send_sge,
        dev.max_sge,
        "; device limit max_sge",
    )?;
    limit(
        "cap.max_inline_data",
        c.max_inline_data,
        MAX_INLINE_DATA,
        "; device inline limit",
    )?;
    let mut cap = c;
    // spec/xrc.md §2: XRC_SEND has no receive queue (uverbs zeroes its receive
    // capacities); XRC_RECV has neither queue (its receives are the SRQs').
    if qp_type == QpType::XrcRecv {
        cap = QpCap::default();
    } else if req.has_srq || qp_type == QpType::XrcSend {
        // With an SRQ, receive capacities are neither checked nor used (man page, rxe).
        cap.max_recv_wr = 0;
        cap.max_recv_sge = 0;
    } else {
        limit(
            "cap.max_recv_wr",
            c.max_recv_wr,
            dev.max_qp_wr,
            "; device limit max_qp_wr",
        )?;
        limit(
            "cap.max_recv_sge",
            c.max_recv_sge,
            dev.max_sge,
            "; device limit max_sge",
        )?;
    }
    if qp_type != QpType::XrcRecv {
        cap.max_inline_data = cap
            .max_inline_data
            .max(16 * cap.max_send_sge)
            .min(MAX_INLINE_DATA);
    }
    Ok((qp_type, cap))
}

fn check_type(req: &QpRequest) -> Result<QpType, Error> {
    let t = QpType::from_raw(req.qp_type)
        .ok_or_else(|| Error::from(Unsupported::UnknownQpType { raw: req.qp_type }))?;
    match t {
        // RAW_PACKET: the driver refuses it (EPERM) without CAP_NET_RAW
        // (spec/raw-packet.md); the engine takes it like any other type.
        QpType::Rc
        | QpType::Uc
        | QpType::Ud
        | QpType::RawPacket
        | QpType::XrcSend
        | QpType::XrcRecv => {}
        QpType::Smi | QpType::Gsi => {
            return Err(Unsupported::KernelOnlyQpType { qp_type: t }.into())
        }
    }
    // ibv_create_qp(3): only RC and UD QPs may use an SRQ.
    if req.has_srq && t == QpType::Uc {
        return Err(InvalidArg::UcWithSrq.into());
    }
    Ok(t)
}

fn check_ex(req: &QpRequest, t: QpType) -> Result<(), Error> {
    let unsupported = req.comp_mask & !comp_mask::SUPPORTED;
    if unsupported != 0 {
        return Err(Unsupported::QpExCompMask { bits: unsupported }.into());
    }
    if t == QpType::XrcRecv {
        // spec/xrc.md §2: a target QP lives in an XRC domain, not a PD.
        if req.comp_mask & comp_mask::XRCD == 0 {
            return Err(crate::xrcd::XrcError::RecvQpWithoutXrcd.into());
        }
    } else if req.comp_mask & comp_mask::PD == 0 {
        return Err(InvalidArg::QpExWithoutPd.into());
    }
    if req.comp_mask & comp_mask::MAX_TSO_HEADER != 0 {
        // mlx5 `create_qp`: max_tso_header on another QP type is refused.
        if t != QpType::RawPacket {
            return Err(InvalidArg::TsoHeaderNotRaw { qp_type: t }.into());
        }
        if req.max_tso_header > crate::tso::MAX_TSO_HEADER {
            return Err(RangeError {
                what: "max_tso_header",
                value: req.max_tso_header.into(),
                min: 0,
                max: crate::tso::MAX_TSO_HEADER.into(),
                note: "; device limit",
            }
            .into());
        }
    }
    if req.comp_mask & comp_mask::CREATE_FLAGS != 0 && req.create_flags != 0 {
        return Err(Unsupported::QpCreateFlags {
            flags: req.create_flags,
        }
        .into());
    }
    if req.comp_mask & comp_mask::SEND_OPS_FLAGS != 0 {
        let extra = req.send_ops_flags & !send_ops::supported(t);
        if extra != 0 {
            return Err(Unsupported::SendOps {
                qp_type: t,
                extra,
                supported: send_ops::supported(t),
            }
            .into());
        }
    }
    Ok(())
}

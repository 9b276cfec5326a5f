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
    /// The bits softverbs accepts.
    pub const SUPPORTED: u32 = PD | CREATE_FLAGS | SEND_OPS_FLAGS;
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
    /// The operations each QP type offers through `ibv_wr_*` on softverbs.
    pub fn supported(qp_type: crate::types::QpType) -> u64 {
        use crate::types::QpType;
        match qp_type {
            QpType::Rc => 0x7f,
            QpType::Uc => RDMA_WRITE | RDMA_WRITE_WITH_IMM | SEND | SEND_WITH_IMM,
            QpType::Ud => SEND | SEND_WITH_IMM,
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
}

/// Checks a create request; returns the QP type and the capacities granted.
///
/// Capacities come back exactly as requested (always ≥ the request, as the man
/// page promises); with an SRQ the receive capacities are 0.
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
    if req.has_srq {
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
    Ok((qp_type, cap))
}

fn check_type(req: &QpRequest) -> Result<QpType, Error> {
    let t = QpType::from_raw(req.qp_type)
        .ok_or_else(|| Error::from(Unsupported::UnknownQpType { raw: req.qp_type }))?;
    match t {
        // RAW_PACKET: the driver refuses it (EPERM) without CAP_NET_RAW
        // (spec/raw-packet.md); the engine takes it like any other type.
        QpType::Rc | QpType::Uc | QpType::Ud | QpType::RawPacket => {}
        QpType::XrcSend | QpType::XrcRecv => return Err(Unsupported::QpType { qp_type: t }.into()),
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
    if req.comp_mask & comp_mask::PD == 0 {
        return Err(InvalidArg::QpExWithoutPd.into());
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

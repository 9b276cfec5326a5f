//! Test support (the `testing` feature): a device with one PD and one CQ, an
//! RC/UC/UD QP on it, and a QP brought from RESET to RTS towards a peer — the
//! harness proto's own tests, the simulator and the fuzz targets share.
//!
//! The caller chooses every value ([`Connect`]); which attributes each step
//! needs for each QP type (spec/qp-state-machine.md §3) is written here once.

use crate::device::DeviceConfig;
use crate::engine::{Engine, QpCreate};
use crate::handle::{CqHandle, PdHandle, QpHandle};
use crate::qp::create::QpRequest;
use crate::wr::WrOpcode;
use crate::{AccessFlags, AhAttr, AttrMask, Error, Gid, Mtu, QpAttr, QpCap, QpState, QpType};
use std::net::IpAddr;

/// The seven RC send opcodes a workload draws from.
pub const RC_OPCODES: [WrOpcode; 7] = [
    WrOpcode::Send,
    WrOpcode::SendWithImm,
    WrOpcode::RdmaWrite,
    WrOpcode::RdmaWriteWithImm,
    WrOpcode::RdmaRead,
    WrOpcode::AtomicFetchAndAdd,
    WrOpcode::AtomicCmpAndSwp,
];

/// An engine for one device at `ip`, with a context, a PD and a CQ of `cqe` entries.
pub fn device(
    name: String,
    ip: IpAddr,
    mtu: Mtu,
    cqe: i32,
) -> Result<(Engine, PdHandle, CqHandle), Error> {
    let mut e = Engine::new(&DeviceConfig {
        name,
        addrs: vec![ip],
        active_mtu: mtu,
    });
    let ctx = e.open_context();
    let pd = e.alloc_pd(ctx)?;
    let (cq, _) = e.create_cq(ctx, cqe, 0)?;
    Ok((e, pd, cq))
}

/// A QP of type `t` in RESET on `pd`, sending and receiving on `cq`; returns (handle, QPN).
pub fn create_qp(
    e: &mut Engine,
    pd: PdHandle,
    cq: CqHandle,
    t: QpType,
    cap: QpCap,
    sq_sig_all: bool,
) -> Result<(QpHandle, u32), Error> {
    let req = QpRequest {
        qp_type: t.raw(),
        cap,
        comp_mask: 1,
        ..QpRequest::default()
    };
    let c = QpCreate {
        pd,
        send_cq: Some(cq),
        recv_cq: Some(cq),
        srq: None,
        req,
        sq_sig_all,
    };
    let q = e.create_qp(&c)?;
    Ok((q.handle, q.qpn))
}

/// The values of one side of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connect {
    /// The peer QP's number (`dest_qp_num`; unused on UD).
    pub peer_qpn: u32,
    /// The peer's GID (the address vector's destination; unused on UD).
    pub peer_gid: Gid,
    /// Remote access granted to the peer (RC, UC).
    pub access: AccessFlags,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Path MTU (RC, UC).
    pub path_mtu: Mtu,
    /// First PSN expected from the peer.
    pub rq_psn: u32,
    /// First PSN sent.
    pub sq_psn: u32,
    /// Outstanding READs/atomics as initiator (RC).
    pub max_rd_atomic: u8,
    /// Responder resources (RC).
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code advertised (RC).
    pub min_rnr_timer: u8,
    /// Local ACK timeout code (RC).
    pub timeout: u8,
    /// Transport retries (RC).
    pub retry_cnt: u8,
    /// RNR retries (RC; 7 = infinite).
    pub rnr_retry: u8,
}

impl Connect {
    /// An RC connection to `peer_qpn` at `peer_gid` granting the peer remote
    /// WRITE, READ and atomics, 1024-byte MTU, PSNs 0, two READs/atomics
    /// each way, the longest RNR timer code, and retries off; change what a
    /// test needs with `Connect { .., ..Connect::rc(qpn, gid) }`.
    pub fn rc(peer_qpn: u32, peer_gid: Gid) -> Connect {
        Connect {
            peer_qpn,
            peer_gid,
            access: AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            qkey: 0,
            path_mtu: Mtu::Mtu1024,
            rq_psn: 0,
            sq_psn: 0,
            max_rd_atomic: 2,
            max_dest_rd_atomic: 2,
            min_rnr_timer: 31,
            timeout: 14,
            retry_cnt: 0,
            rnr_retry: 0,
        }
    }
}

/// A modify step of [`connect`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("modify_qp to {to}: {error}")]
pub struct ConnectError {
    /// The state the refused step moved to.
    pub to: QpState,
    /// Why.
    #[source]
    pub error: Error,
}

/// RESET → INIT → RTR → RTS with the attributes `t` requires at each step.
pub fn connect(e: &mut Engine, qp: QpHandle, t: QpType, c: &Connect) -> Result<(), ConnectError> {
    use AttrMask as M;
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: c.access,
        qkey: c.qkey,
        ..QpAttr::default()
    };
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        ah_attr: AhAttr::roce(c.peer_gid, 0),
        path_mtu: c.path_mtu,
        dest_qp_num: c.peer_qpn,
        rq_psn: c.rq_psn,
        max_dest_rd_atomic: c.max_dest_rd_atomic,
        min_rnr_timer: c.min_rnr_timer,
        ..QpAttr::default()
    };
    let rts = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: c.sq_psn,
        timeout: c.timeout,
        retry_cnt: c.retry_cnt,
        rnr_retry: c.rnr_retry,
        max_rd_atomic: c.max_rd_atomic,
        ..QpAttr::default()
    };
    let (init_mask, rtr_mask, rts_mask) = match t {
        QpType::Ud => (
            M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY,
            M::STATE,
            M::STATE | M::SQ_PSN,
        ),
        QpType::Uc => (
            M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
            M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN,
            M::STATE | M::SQ_PSN,
        ),
        // spec/qp-state-machine.md §4: the initiator's RTR has no responder
        // attributes; the target's RTS no requester ones.
        QpType::XrcSend => (
            M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
            M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN,
            M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC,
        ),
        QpType::XrcRecv => (
            M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
            M::STATE
                | M::AV
                | M::PATH_MTU
                | M::DEST_QPN
                | M::RQ_PSN
                | M::MAX_DEST_RD_ATOMIC
                | M::MIN_RNR_TIMER,
            M::STATE | M::SQ_PSN | M::TIMEOUT,
        ),
        _ => (
            M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
            M::STATE
                | M::AV
                | M::PATH_MTU
                | M::DEST_QPN
                | M::RQ_PSN
                | M::MAX_DEST_RD_ATOMIC
                | M::MIN_RNR_TIMER,
            M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC,
        ),
    };
    for (attr, mask) in [(init, init_mask), (rtr, rtr_mask), (rts, rts_mask)] {
        e.modify_qp(qp, &attr, mask).map_err(|error| ConnectError {
            to: attr.qp_state,
            error,
        })?;
    }
    Ok(())
}

/// The device's memory-region table (for tests that call the check
/// functions of `mr` directly).
pub fn mr_table(e: &Engine) -> &crate::mr::MrTable {
    &e.mrs
}

/// The handle of the region an lkey names.
pub fn mr_handle(e: &Engine, lkey: u32) -> Option<crate::handle::MrHandle> {
    let (h, m) = e.mrs.get_by_index(crate::mr::key_index(lkey)?)?;
    (m.lkey == lkey).then_some(h)
}

/// A driver's transmit batch as the harnesses play it: `slots` buffers of
/// 9 216 bytes (a 4096-byte path MTU and its headers, and more), filled in
/// order through [`crate::output::Burst`] ([`crate::Engine::poll_transmit_burst`]).
#[derive(Debug, Default)]
pub struct Batch {
    bufs: Vec<Vec<u8>>,
    slots: usize,
    /// What was built into the buffers, in order.
    pub built: Vec<crate::output::Transmit>,
}

impl Batch {
    /// An empty batch of `slots` buffers.
    pub fn new(slots: usize) -> Batch {
        let mut b = Batch::default();
        b.start(slots);
        b
    }

    /// Empty again, with `slots` buffers.
    pub fn start(&mut self, slots: usize) {
        if self.bufs.len() < slots {
            self.bufs.resize_with(slots, || vec![0; 9216]);
        }
        self.slots = slots;
        self.built.clear();
    }

    /// The datagrams built, in order.
    pub fn datagrams(&self) -> impl Iterator<Item = &[u8]> {
        self.built.iter().zip(&self.bufs).map(|(t, b)| &b[..t.len])
    }
}

impl crate::output::Burst for Batch {
    fn buffer(&mut self) -> Option<&mut [u8]> {
        let i = self.built.len();
        (i < self.slots).then(|| self.bufs[i].as_mut_slice())
    }

    fn built(&mut self, t: &crate::output::Transmit) {
        self.built.push(*t);
    }
}

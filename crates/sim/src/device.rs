//! One simulated device: an [`Engine`] with its own memory, one PD, one CQ,
//! one memory region over all of its memory, and its RC QPs.
//!
//! Memory layout (offsets from [`BASE`]): a 4 KiB header whose first word is
//! the device's shared FETCH_ADD counter, then one [`AREA`]-byte area per QP:
//! send slots, receive slots, the window peers WRITE and READ, and the word
//! the peer's COMPARE_SWAPs act on.

use proto::device::DeviceConfig;
use proto::engine::{CqHandle, PdHandle, QpCreate, QpHandle};
use proto::memory::VecMemory;
use proto::qp::create::QpRequest;
use proto::{AccessFlags, AhAttr, AttrMask, Engine, Gid, Mtu, QpAttr, QpCap, QpState, QpType};
use std::net::IpAddr;

/// First address of every device's memory.
pub const BASE: u64 = 0x10_0000;
/// Header bytes before the QP areas (the FETCH_ADD word lives at offset 0).
pub const HEADER: u64 = 4096;
/// Slots per QP for outstanding send WRs, and for posted receives.
pub const SLOTS: u64 = 16;
/// Bytes per slot: the largest message the workload sends.
pub const SLOT: u64 = 4096;
/// Bytes of the window a peer writes and reads.
pub const WINDOW: u64 = 16 * 1024;
/// Bytes per QP area.
pub const AREA: u64 = 2 * SLOTS * SLOT + WINDOW + 4096;
/// The path MTU every QP uses.
pub const MTU: Mtu = Mtu::Mtu1024;

/// Addresses of one QP area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Area {
    /// Start.
    pub base: u64,
}

impl Area {
    /// Send slot `i` (gather source, READ destination, atomic result).
    pub fn send_slot(self, i: u64) -> u64 {
        self.base + (i % SLOTS) * SLOT
    }
    /// Receive slot `i`.
    pub fn recv_slot(self, i: u64) -> u64 {
        self.base + SLOTS * SLOT + (i % SLOTS) * SLOT
    }
    /// The window peers WRITE and READ.
    pub fn window(self) -> u64 {
        self.base + 2 * SLOTS * SLOT
    }
    /// The COMPARE_SWAP word.
    pub fn cas_word(self) -> u64 {
        self.window() + WINDOW
    }
}

/// Transport settings of the RC QPs of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpParams {
    /// `timeout` code (4.096 µs × 2^timeout).
    pub timeout: u8,
    /// `retry_cnt`.
    pub retry_cnt: u8,
    /// `rnr_retry` (7 = infinite).
    pub rnr_retry: u8,
    /// `min_rnr_timer` code the responders advertise.
    pub min_rnr_timer: u8,
    /// `max_rd_atomic` and `max_dest_rd_atomic`.
    pub rd_atomic: u8,
}

/// One device.
pub struct Device {
    /// The engine.
    pub engine: Engine,
    /// Its memory.
    pub mem: VecMemory,
    /// Its address.
    pub ip: IpAddr,
    /// The PD everything lives in.
    pub pd: PdHandle,
    /// The CQ of every QP (send and receive).
    pub cq: CqHandle,
    /// L_Key of the MR over all memory.
    pub lkey: u32,
    /// R_Key of that MR.
    pub rkey: u32,
}

impl Device {
    /// A device at `ip` with memory for `qps` QP areas.
    pub fn new(ip: IpAddr, qps: usize) -> Device {
        let cfg = DeviceConfig {
            name: format!("sim-{ip}"),
            addrs: vec![ip],
            active_mtu: MTU,
        };
        let mut engine = Engine::new(&cfg);
        let ctx = engine.open_context();
        let pd = engine.alloc_pd(ctx).expect("a PD");
        let (cq, _) = engine.create_cq(ctx, 65536, 0).expect("a CQ");
        let len = HEADER + AREA * qps as u64;
        // Local write, remote write, remote read, remote atomic.
        let mr = engine.reg_mr(pd, BASE, len, 0xf).expect("an MR").1;
        let (lkey, rkey) = (mr.lkey, mr.rkey);
        Device {
            engine,
            mem: VecMemory::new(BASE, len as usize),
            ip,
            pd,
            cq,
            lkey,
            rkey,
        }
    }

    /// QP area `i`.
    pub fn area(&self, i: usize) -> Area {
        Area {
            base: BASE + HEADER + AREA * i as u64,
        }
    }

    /// The shared FETCH_ADD word.
    pub fn faa_word(&self) -> u64 {
        BASE
    }

    /// A new RC QP in RESET; returns (handle, QPN).
    pub fn create_rc_qp(&mut self) -> (QpHandle, u32) {
        let req = QpRequest {
            qp_type: QpType::Rc.raw(),
            cap: QpCap {
                max_send_wr: 64,
                max_recv_wr: 64,
                max_send_sge: 2,
                max_recv_sge: 2,
                max_inline_data: 0,
            },
            comp_mask: 1,
            ..QpRequest::default()
        };
        let c = QpCreate {
            pd: self.pd,
            send_cq: Some(self.cq),
            recv_cq: Some(self.cq),
            srq: None,
            req,
            sq_sig_all: false,
        };
        let q = self.engine.create_qp(&c).expect("an RC QP");
        (q.handle, q.qpn)
    }

    /// RESET → INIT → RTR → RTS towards `peer_qpn` at `peer_ip`.
    pub fn connect(&mut self, qp: QpHandle, peer_qpn: u32, peer_ip: IpAddr, p: &QpParams) {
        use AttrMask as M;
        let init = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qp_access_flags: AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            ..QpAttr::default()
        };
        let mask = M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
        self.modify(qp, init, mask);
        let rtr = QpAttr {
            qp_state: QpState::Rtr,
            ah_attr: AhAttr::roce(Gid::from(peer_ip), 0),
            path_mtu: MTU,
            dest_qp_num: peer_qpn,
            rq_psn: 0xff_fff0 ^ peer_qpn,
            max_dest_rd_atomic: p.rd_atomic,
            min_rnr_timer: p.min_rnr_timer,
            ..QpAttr::default()
        };
        let mask = M::STATE
            | M::AV
            | M::PATH_MTU
            | M::DEST_QPN
            | M::RQ_PSN
            | M::MAX_DEST_RD_ATOMIC
            | M::MIN_RNR_TIMER;
        self.modify(qp, rtr, mask);
        let own_qpn = self.engine.qp(qp).expect("QP").ctl.qpn();
        let rts = QpAttr {
            qp_state: QpState::Rts,
            // Near the 24-bit wrap, so runs cross it (the peer's rq_psn matches).
            sq_psn: 0xff_fff0 ^ own_qpn,
            timeout: p.timeout,
            retry_cnt: p.retry_cnt,
            rnr_retry: p.rnr_retry,
            max_rd_atomic: p.rd_atomic,
            ..QpAttr::default()
        };
        let mask =
            M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
        self.modify(qp, rts, mask);
    }

    fn modify(&mut self, qp: QpHandle, attr: QpAttr, mask: AttrMask) {
        if let Err(e) = self.engine.modify_qp(qp, &attr, mask) {
            panic!("modify_qp to {}: {e}", attr.qp_state);
        }
    }
}

//! One simulated device: an [`Engine`] with its own memory, one PD, one CQ,
//! one memory region over all of its memory, and its RC QPs (or, in the XRC
//! scenarios, its XRC_SEND QPs and its XRC_RECV QPs, each with an XRC SRQ of
//! the device's one XRC domain).
//!
//! Memory layout (offsets from [`BASE`]): a 4 KiB header whose first word is
//! the device's shared FETCH_ADD counter, then one [`AREA`]-byte area per QP:
//! send slots, receive slots, the window peers WRITE and READ, and the word
//! the peer's COMPARE_SWAPs act on.

use proto::engine::{CqHandle, PdHandle, QpHandle, SrqHandle};
use proto::memory::VecMemory;
use proto::testing::Connect;
use proto::{AccessFlags, Engine, Gid, Mtu, QpCap, QpType};
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
    /// The XRC domain of its XRC SRQs and XRC_RECV QPs (XRC scenarios).
    pub xrcd: Option<proto::handle::XrcdHandle>,
}

impl Device {
    /// A device at `ip` with memory for `qps` QP areas.
    pub fn new(ip: IpAddr, qps: usize) -> Device {
        let (mut engine, pd, cq) =
            proto::testing::device(format!("sim-{ip}"), ip, MTU, 65536).expect("a device");
        let len = HEADER + AREA * qps as u64;
        let access = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC
            | AccessFlags::MW_BIND
            | AccessFlags::FLUSH_GLOBAL;
        let mr = engine.reg_mr(pd, BASE, len, access.0).expect("an MR").1;
        let (lkey, rkey) = (mr.lkey, mr.rkey);
        Device {
            engine,
            mem: VecMemory::new(BASE, len as usize),
            ip,
            pd,
            cq,
            lkey,
            rkey,
            xrcd: None,
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
        let cap = QpCap {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 0,
        };
        proto::testing::create_qp(&mut self.engine, self.pd, self.cq, QpType::Rc, cap, false)
            .expect("an RC QP")
    }

    /// A new XRC_SEND QP in RESET (spec/xrc.md); returns (handle, QPN).
    pub fn create_xrc_send_qp(&mut self) -> (QpHandle, u32) {
        let cap = QpCap {
            max_send_wr: 64,
            max_recv_wr: 0,
            max_send_sge: 2,
            max_recv_sge: 0,
            max_inline_data: 0,
        };
        let t = QpType::XrcSend;
        proto::testing::create_qp(&mut self.engine, self.pd, self.cq, t, cap, false)
            .expect("an XRC_SEND QP")
    }

    /// A new XRC_RECV QP in RESET in the device's XRC domain (opened on first
    /// use), and an XRC SRQ of that domain completing on the device's CQ;
    /// returns (QP handle, QPN, SRQ handle, SRQ number).
    pub fn create_xrc_target(&mut self) -> (QpHandle, u32, SrqHandle, u32) {
        let e = &mut self.engine;
        let xrcd = match self.xrcd {
            Some(x) => x,
            None => {
                let ctx = e.pd_ctx(self.pd).expect("the PD's context");
                let flags = proto::xrcd::OpenFlags::from_raw(proto::xrcd::O_CREAT);
                let x = e.open_xrcd(ctx, None, flags).expect("an XRC domain");
                *self.xrcd.insert(x)
            }
        };
        let req = proto::qp::create::QpRequest {
            qp_type: QpType::XrcRecv.raw(),
            comp_mask: proto::qp::create::comp_mask::XRCD,
            ..Default::default()
        };
        let q = e.create_xrc_recv_qp(xrcd, &req).expect("an XRC_RECV QP");
        let attr = proto::srq::SrqAttr {
            max_wr: 64,
            max_sge: 2,
            srq_limit: 0,
        };
        let (srq, _) = e
            .create_xrc_srq(self.pd, xrcd, self.cq, &attr)
            .expect("an XRC SRQ");
        let srqn = e.srq_num(srq).expect("its number");
        (q.handle, q.qpn, srq, srqn)
    }

    /// RESET → INIT → RTR → RTS towards `peer_qpn` at `peer_ip`.
    pub fn connect(&mut self, qp: QpHandle, peer_qpn: u32, peer_ip: IpAddr, p: &QpParams) {
        let own_qpn = self.engine.qp(qp).expect("QP").ctl.qpn();
        let c = Connect {
            path_mtu: MTU,
            // Near the 24-bit wrap, so runs cross it (each side's sq_psn is the
            // peer's rq_psn).
            rq_psn: 0xff_fff0 ^ peer_qpn,
            sq_psn: 0xff_fff0 ^ own_qpn,
            max_rd_atomic: p.rd_atomic,
            max_dest_rd_atomic: p.rd_atomic,
            min_rnr_timer: p.min_rnr_timer,
            timeout: p.timeout,
            retry_cnt: p.retry_cnt,
            rnr_retry: p.rnr_retry,
            ..Connect::rc(peer_qpn, Gid::from(peer_ip))
        };
        let t = self.engine.qp(qp).expect("QP").ctl.qp_type();
        if let Err(e) = proto::testing::connect(&mut self.engine, qp, t, &c) {
            panic!("{e}");
        }
    }
}

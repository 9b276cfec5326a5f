//! The workload and its shadow model.
//!
//! Every RC QP is a requester towards its peer: it posts a random mix of SEND,
//! SEND_WITH_IMM, RDMA_WRITE, RDMA_WRITE_WITH_IMM, RDMA_READ, FETCH_ADD and
//! COMPARE_SWAP of random sizes (0 to four MTUs), signaled and unsignaled.
//! What each WR must produce is decided when it is posted, from a model of the
//! responder's memory in which writes are applied in posting order:
//! - a READ returns the model's bytes at posting time (WRITEs posted while a
//!   READ is outstanding carry `IBV_SEND_FENCE`, so they cannot overtake it —
//!   without the fence IBA lets them, and a retried READ would see them);
//! - a COMPARE_SWAP on the peer's per-QP word returns the model value;
//! - FETCH_ADDs of all requesters on a device's shared word are checked for
//!   linearizability when the run ends;
//! - SEND / WRITE_WITH_IMM consume the peer's receives in posting order;
//! - ATOMIC_WRITE stores its 8 bytes in the model like a WRITE; FLUSH (to
//!   global visibility, of a range or of the whole region) changes nothing;
//! - memory windows (spec/memory-windows.md): each QP binds a type 2 window
//!   over its own window area (zero-based or not) through a BIND_MW on its own
//!   send queue; its peer then reaches the area through the window's rkey as
//!   often as through the region's. Keys rotate while the peer has nothing
//!   outstanding through the window: the owner posts LOCAL_INV then a new
//!   BIND_MW, or the peer sends a SEND_WITH_INV (the receive must say
//!   WITH_INV with that rkey). A use of an invalidated key would fail the QP,
//!   which no random scenario allows.

use crate::device::{Area, SLOT, SLOTS, WINDOW};
use crate::rng::Rng;
use proto::engine::QpHandle;
use proto::wc::WcOpcode;
use proto::wr::WrOpcode;
use std::collections::VecDeque;

/// What a posted send WR must produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// Nothing to check locally (SEND, WRITE).
    Nothing,
    /// The READ destination must hold these bytes.
    Read(Vec<u8>),
    /// FETCH_ADD: the original value is recorded for the linearizability check.
    FetchAdd {
        /// The addend.
        add: u64,
        /// Device whose word it hit.
        target: usize,
    },
    /// COMPARE_SWAP: the original value must be this.
    CompareSwap(u64),
    /// BIND_MW of this QP's window: once complete it is bound with this rkey.
    Bind {
        /// The window's rkey after the bind.
        rkey: u32,
        /// Bound zero-based.
        zero_based: bool,
    },
}

/// Where a QP's memory window stands in the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowState {
    /// Not bound: the peer uses the region's rkey.
    Unbound,
    /// A BIND_MW is posted, not complete.
    Binding,
    /// Bound: the peer may use the window's rkey.
    Bound,
    /// The peer sent a SEND_WITH_INV for it; unbound once its receive completes.
    Invalidating,
}

/// A send WR not yet known to be complete.
#[derive(Debug, Clone)]
pub struct Posted {
    /// Sequence number (the low bits of `wr_id`).
    pub seq: u64,
    /// The WR opcode.
    pub op: WrOpcode,
    /// Message length.
    pub len: u32,
    /// Signaled?
    pub signaled: bool,
    /// Local slot address.
    pub slot: u64,
    /// The result to check.
    pub expect: Expect,
    /// It reaches the peer's area through the peer's memory window.
    pub via_window: bool,
}

/// A receive the peer's next consuming message must complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvExpect {
    /// `IBV_WC_RECV` or `IBV_WC_RECV_RDMA_WITH_IMM`.
    pub opcode: WcOpcode,
    /// `byte_len`.
    pub len: u32,
    /// Immediate data, if any.
    pub imm: Option<u32>,
    /// Bytes placed in the receive buffer (SEND only).
    pub data: Vec<u8>,
    /// SEND_WITH_INV: the rkey the receive must report invalidated.
    pub inv: Option<u32>,
}

/// One simulated RC QP: requester state, responder expectations, models.
#[derive(Debug)]
pub struct SimQp {
    /// Device index.
    pub dev: usize,
    /// Handle on its device.
    pub h: QpHandle,
    /// QPN.
    pub qpn: u32,
    /// Its memory area.
    pub area: Area,
    /// Global index of the peer QP.
    pub peer: usize,
    /// WRs still to post.
    pub to_post: u64,
    /// Next sequence number.
    pub next_seq: u64,
    /// Posted, not yet known complete, in posting order.
    pub outstanding: VecDeque<Posted>,
    /// An error completion was seen: only flushes may follow.
    pub failed: bool,
    /// When the next WR may be posted.
    pub next_post_ns: u64,
    /// READs among `outstanding`.
    pub reads_outstanding: usize,
    /// Messages this QP must receive, in order.
    pub recv_expect: VecDeque<RecvExpect>,
    /// Receives posted so far.
    pub recvs_posted: u64,
    /// Receive completions seen.
    pub recvs_done: u64,
    /// Times at which the next receives get posted (in order).
    pub recv_due: VecDeque<u64>,
    /// Model of this QP's window (what the peer wrote).
    pub window: Vec<u8>,
    /// Model of this QP's COMPARE_SWAP word.
    pub cas: u64,
    /// Send completions seen (signaled or error).
    pub completions: u64,
    /// WRs known complete (explicitly or implied by a later completion).
    pub completed: u64,
    /// The first error completion: (status, time, WR sequence number).
    pub error: Option<(proto::wc::WcStatus, u64, u64)>,
    /// This QP's type 2 memory window over its window area (when the mix has windows).
    pub mw: Option<proto::engine::MwHandle>,
    /// Its state in the model.
    pub mw_state: WindowState,
    /// Its rkey (the last one bound or asked for).
    pub mw_rkey: u32,
    /// Bound zero-based (the peer addresses it from 0).
    pub mw_zero_based: bool,
    /// The peer's WRs outstanding through this window.
    pub window_uses: u64,
    /// Local operations (BIND_MW, LOCAL_INV) among `completed`.
    pub local_ops: u64,
    /// SEND_WITH_INVs among `completed`, and WRs that went through the peer's window.
    pub window_wrs: u64,
    /// XRC_RECV: the XRC SRQ its receives are posted to and its number,
    /// which the peer's XRC_SEND WRs name.
    pub srq: Option<(proto::engine::SrqHandle, u32)>,
}

impl SimQp {
    /// A QP with `wrs` WRs to post.
    pub fn new(dev: usize, h: QpHandle, qpn: u32, area: Area, peer: usize, wrs: u64) -> SimQp {
        SimQp {
            dev,
            h,
            qpn,
            area,
            peer,
            to_post: wrs,
            next_seq: 0,
            outstanding: VecDeque::new(),
            failed: false,
            next_post_ns: 0,
            reads_outstanding: 0,
            recv_expect: VecDeque::new(),
            recvs_posted: 0,
            recvs_done: 0,
            recv_due: VecDeque::new(),
            window: vec![0; WINDOW as usize],
            cas: 0,
            completions: 0,
            completed: 0,
            error: None,
            mw: None,
            mw_state: WindowState::Unbound,
            mw_rkey: 0,
            mw_zero_based: false,
            window_uses: 0,
            local_ops: 0,
            window_wrs: 0,
            srq: None,
        }
    }

    /// May a local operation (BIND_MW, LOCAL_INV) be posted now?
    pub fn may_post_local(&self) -> bool {
        !self.failed && (self.outstanding.len() as u64) < SLOTS
    }

    /// May another WR be posted now (a free slot, nothing failed)?
    pub fn may_post(&self, now: u64) -> bool {
        self.to_post > 0
            && !self.failed
            && now >= self.next_post_ns
            && (self.outstanding.len() as u64) < SLOTS
    }
}

/// The opcodes a mix weighs: rxe's RC set, then IBA 1.5 ATOMIC_WRITE and FLUSH.
pub const OPS: [WrOpcode; 9] = [
    WrOpcode::Send,
    WrOpcode::SendWithImm,
    WrOpcode::RdmaWrite,
    WrOpcode::RdmaWriteWithImm,
    WrOpcode::RdmaRead,
    WrOpcode::AtomicFetchAndAdd,
    WrOpcode::AtomicCmpAndSwp,
    WrOpcode::AtomicWrite,
    WrOpcode::Flush,
];

/// The relative weights of the WR opcodes in a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mix {
    /// SEND, SEND_WITH_IMM, WRITE, WRITE_WITH_IMM, READ, FETCH_ADD, CMP_SWAP,
    /// ATOMIC_WRITE, FLUSH ([`OPS`]).
    pub weights: [u32; 9],
    /// Memory windows: bound, used, invalidated and rebound (see the module doc).
    pub windows: bool,
}

impl Mix {
    /// Every opcode, and memory windows.
    pub const ALL: Mix = Mix {
        weights: [3, 2, 3, 2, 3, 1, 1, 1, 1],
        windows: true,
    };

    /// What XRC_SEND QPs offer: the IBA 1.2 RC operations, no windows
    /// (proto `qp::create::send_ops`; spec/xrc.md).
    pub const XRC: Mix = Mix {
        weights: [3, 2, 3, 2, 3, 1, 1, 0, 0],
        windows: false,
    };

    /// Draws an opcode.
    pub fn pick(&self, rng: &mut Rng) -> WrOpcode {
        let total: u32 = self.weights.iter().sum();
        let mut x = rng.below(u64::from(total)) as u32;
        for (op, w) in OPS.iter().zip(self.weights) {
            if x < w {
                return *op;
            }
            x -= w;
        }
        WrOpcode::Send
    }
}

/// A message length: 0, small, around one MTU, or up to four MTUs.
pub fn draw_len(rng: &mut Rng) -> u32 {
    match rng.below(8) {
        0 => 0,
        1 | 2 => rng.range(1, 64) as u32,
        3 => rng.range(1000, 1100) as u32,
        4 => 1024 * rng.range(1, 4) as u32,
        _ => rng.range(1, SLOT) as u32,
    }
}

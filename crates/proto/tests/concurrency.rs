//! The data path of two engines driven from many threads at once
//! (spec/concurrency.md): every thread holds only the read side of its
//! engine's `RwLock` (`&Engine`) while it transmits, receives, runs timers
//! or takes events, as `sv_io` does; posts go through the send and receive
//! rings without the engine; control verbs take the write side (`&mut`).
//!
//! Two devices, A and B, each with ONE completion queue and ONE shared
//! receive queue that all of its RC QPs use (nine QP slots: four carry
//! traffic throughout, one is the victim, one is created midway, three
//! come and go). Per device, at once:
//! - a poster thread per QP on its send ring (the engine's write side only
//!   for a Flush or Settle), posting SEND, SEND with immediate, WRITE, WRITE
//!   with immediate, READ and fetch-and-add of 8..3500 bytes (up to four
//!   packets), now streaming, now waiting for its completions so that the
//!   next post finds the QP idle; and one thread keeping the SRQ stocked;
//! - transmit, in one of three modes (one test each): serial (one
//!   transmitting thread per device, its datagrams spread by destination QP
//!   over two receiving threads of the peer: each QP's packets in order,
//!   different QPs' handled at once); reorder (two transmitting threads per
//!   device, each handing its batch over itself: a QP's packets may
//!   overtake each other and RC recovers); claims (two transmitting threads
//!   with `poll_transmit_claimed` / `release_claims`: in order again). One
//!   receiving path of each device takes `handle_local_datagram` (the
//!   same-host path), the other `handle_datagram`;
//! - CQ polling without the engine: A's CQ by two busy pollers, B's CQ only
//!   by a poller that arms it and sleeps until a completion event that a
//!   `poll_event` thread forwards (a lost event stalls the test);
//! - a timer thread: the virtual clock steps 1 ms per 16 moves, so
//!   `handle_timeout` runs beside everything else, and jumps to the next
//!   deadline when both devices look idle;
//! - a control thread (write side): resizes both CQs up, arms B's SRQ limit,
//!   moves B's victim QP to ERR while both ends of the pair still post and
//!   send, destroys it, creates and connects a new pair that then carries
//!   traffic, destroys A's victim once it failed (retry exceeded), then
//!   three times creates a pair, lets it carry traffic, moves both ends to
//!   ERR and destroys them, and resizes both CQs down.
//!
//! Checked afterwards, from the completions in CQ order: every posted WR
//! completed exactly once, in posting order, on its QP, with its opcode
//! and status (Success everywhere but on the victim pair, whose statuses
//! must be a run of successes, at most one transport error, then flushes);
//! every SEND landed in exactly one SRQ WQE with its bytes, length and
//! immediate, in the order sent, and every acknowledged one was received;
//! every WRITE's bytes and every READ's bytes are where they belong; the
//! fetch-and-adds of all QPs into one word form one chain (each executed
//! exactly once); every SRQ WQE is either completed once or still queued;
//! the datagram counters of the two devices agree and each device's agree
//! with its QPs'; without reordering, no sequence NAK but after an RNR NAK;
//! the async events are exactly one last-WQE event per victim and one
//! SRQ-limit event if and only if the limit was disarmed. A watchdog fails
//! the test (with the state of every QP) if the traffic does not finish in
//! 120 s (a run takes 2-4 s alone, about ten times that beside two more
//! runs on two cores), and any thread's panic fails it at once; no
//! assertion is on speed.

use proto::cq::SharedCq;
use proto::datapath::{AsyncEventKind, Event, EventElement};
use proto::device::DeviceConfig;
use proto::engine::{CqHandle, PdHandle, QpCreate, QpHandle, SrqHandle};
use proto::memory::{AtomicOp, Memory};
use proto::qp::create::QpRequest;
use proto::rq::{RecvRing, RingPost};
use proto::sched::TxClaims;
use proto::sq::{SendPost, SendRing};
use proto::srq::SrqAttr;
use proto::wc::{WcFlags, WcOpcode, WcStatus, WorkCompletion};
use proto::wr::{
    AtomicTarget, ImmData, PostError, RdmaTarget, RecvWr, SendFlags, SendWr, Sge, WrOpcode,
    WrTarget,
};
use proto::{AccessFlags, AttrMask, Engine, Gid, Mtu, QpAttr, QpCap, QpState, QpType};
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::{sleep, JoinHandle};
use std::time::{Duration, Instant};

// ---- layout ----

/// QP slots per device: 0..4 carry traffic throughout, 4 is the victim
/// (moved to ERR and destroyed), 5 is created while traffic flows, 6..9 are
/// created, failed and destroyed one after another while traffic flows.
const NQ: usize = 9;
const STABLE: usize = 4;
const VICTIM: usize = 4;
const FRESH: usize = 5;
const CHURN: usize = 6;

/// A slot whose QPs fail and are destroyed.
fn victim(slot: usize) -> bool {
    slot == VICTIM || slot >= CHURN
}
/// The most WRs a QP posts (the memory layout's bound).
const PER_MAX: u64 = 160;
/// Bytes per WR in the source, local and write-target regions.
const SLOT: u64 = 4096;
const MAX_LEN: u64 = 3500;
/// Receive buffers (one per SRQ WQE, never reused).
const NRECV: u64 = 1024;
const SRQ_WR: u32 = 128;
const RSRC_LEN: u64 = 1 << 16;
/// The traffic of a run finishes within this, or the test fails.
const WATCHDOG_S: u64 = 120;

const BASE: u64 = 0x1000_0000;
const REGION: u64 = NQ as u64 * PER_MAX * SLOT;
/// What this device's WRs send and write (the payload of WR `(slot, seq)`).
const SRC: u64 = BASE;
/// Where this device's READs and fetch-and-adds put what they got.
const LOCAL: u64 = SRC + REGION;
/// Where the peer's WRITEs land.
const WTGT: u64 = LOCAL + REGION;
/// What the peer's READs read.
const RSRC: u64 = WTGT + REGION;
/// SRQ receive buffers.
const RECV: u64 = RSRC + RSRC_LEN;
/// The word every stable and fresh QP of the peer adds to.
const COUNTER: u64 = RECV + NRECV * SLOT;
const MEM_LEN: u64 = COUNTER + 4096 - BASE;

const SEND_ID: u64 = 0x5700 << 48;
const RECV_ID: u64 = 0x5200 << 48;

// ---- memory several threads reach at once ----

const PAGE: usize = 4096;

/// Registered memory for threads: one lock per 4 KiB page (a copy takes the
/// pages it spans one after another, as a real copy is not atomic either;
/// an 8-byte atomic lies within one page). Every fifth page touched, the
/// copying thread yields: the engine calls it inside a QP's turn (the QP's
/// lock held, and an SRQ's while a message is placed), so other threads
/// run in the middle of turns.
struct PagedMemory {
    base: u64,
    pages: Vec<Mutex<Vec<u8>>>,
    touched: AtomicUsize,
}

impl PagedMemory {
    fn new(base: u64, len: u64) -> PagedMemory {
        let n = (len as usize).div_ceil(PAGE);
        PagedMemory {
            base,
            pages: (0..n).map(|_| Mutex::new(vec![0; PAGE])).collect(),
            touched: AtomicUsize::new(0),
        }
    }

    /// Runs `f(page bytes, offset into the caller's buffer)` over the pages
    /// of `[addr, addr + len)`.
    fn each(&self, addr: u64, len: usize, mut f: impl FnMut(&mut [u8], usize)) {
        assert!(addr >= self.base, "address {addr:#x} below the memory");
        let mut at = (addr - self.base) as usize;
        let mut done = 0;
        while done < len {
            let (page, off) = (at / PAGE, at % PAGE);
            let n = (PAGE - off).min(len - done);
            let mut p = lock(&self.pages[page]);
            f(&mut p[off..off + n], done);
            drop(p);
            done += n;
            at += n;
            if self.touched.fetch_add(1, SeqCst) % 5 == 4 {
                std::thread::yield_now();
            }
        }
    }

    fn bytes(&self, addr: u64, len: u64) -> Vec<u8> {
        let mut out = vec![0; len as usize];
        self.read(addr, &mut out);
        out
    }
}

impl Memory for PagedMemory {
    fn read(&self, addr: u64, dst: &mut [u8]) {
        self.each(addr, dst.len(), |p, at| {
            dst[at..at + p.len()].copy_from_slice(p);
        });
    }

    fn write(&self, addr: u64, src: &[u8]) {
        self.each(addr, src.len(), |p, at| {
            p.copy_from_slice(&src[at..at + p.len()]);
        });
    }

    fn atomic(&self, addr: u64, op: AtomicOp) -> u64 {
        let mut old = 0;
        self.each(addr, 8, |p, _| {
            let v = u64::from_ne_bytes(p[..8].try_into().expect("8 bytes in one page"));
            p[..8].copy_from_slice(&op.apply(v).to_ne_bytes());
            old = v;
        });
        old
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

// ---- the workload: what WR (side, slot, seq) is ----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    FetchAdd,
}

impl Kind {
    fn opcode(self) -> WrOpcode {
        match self {
            Kind::Send => WrOpcode::Send,
            Kind::SendImm => WrOpcode::SendWithImm,
            Kind::Write => WrOpcode::RdmaWrite,
            Kind::WriteImm => WrOpcode::RdmaWriteWithImm,
            Kind::Read => WrOpcode::RdmaRead,
            Kind::FetchAdd => WrOpcode::AtomicFetchAndAdd,
        }
    }

    fn wc(self) -> WcOpcode {
        match self {
            Kind::Send | Kind::SendImm => WcOpcode::Send,
            Kind::Write | Kind::WriteImm => WcOpcode::RdmaWrite,
            Kind::Read => WcOpcode::RdmaRead,
            Kind::FetchAdd => WcOpcode::FetchAdd,
        }
    }

    /// Consumes a receive WQE at the peer.
    fn consumes_recv(self) -> bool {
        matches!(self, Kind::Send | Kind::SendImm | Kind::WriteImm)
    }
}

#[derive(Debug, Clone, Copy)]
struct Op {
    kind: Kind,
    len: u32,
    read_off: u64,
    add: u64,
}

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn plan(side: usize, slot: usize, seq: u64) -> Op {
    let h = mix((side as u64) << 48 | (slot as u64) << 32 | seq);
    let kind = match h % 10 {
        0 | 1 => Kind::Send,
        2 => Kind::SendImm,
        3 | 4 => Kind::Write,
        5 => Kind::WriteImm,
        6 | 7 => Kind::Read,
        _ => Kind::FetchAdd,
    };
    // The victim pair adds to no shared word: an add its responder executed
    // but never acknowledged (the QP failed) would break the chain check.
    let kind = match kind {
        Kind::FetchAdd if victim(slot) => Kind::Read,
        k => k,
    };
    // Half short (one packet), half up to four packets of 1024 bytes.
    let len = if h >> 4 & 1 == 0 {
        8 + (h >> 8) % 248
    } else {
        8 + (h >> 8) % (MAX_LEN - 7)
    };
    let len = if kind == Kind::FetchAdd { 8 } else { len };
    Op {
        kind,
        len: len as u32,
        read_off: (h >> 24) % (RSRC_LEN - MAX_LEN),
        add: 1 + (h >> 40) % 1000,
    }
}

fn wr_id(side: usize, slot: usize, seq: u64) -> u64 {
    SEND_ID | (side as u64) << 40 | (slot as u64) << 32 | seq
}

/// (side, slot, seq) of a send WR id.
fn decode_wr_id(id: u64) -> Option<(usize, usize, u64)> {
    (id >> 48 == SEND_ID >> 48).then_some((
        (id >> 40 & 0xff) as usize,
        (id >> 32 & 0xff) as usize,
        id & 0xffff_ffff,
    ))
}

fn imm(side: usize, slot: usize, seq: u64) -> u32 {
    (side as u32) << 31 | (slot as u32) << 24 | seq as u32
}

fn decode_imm(v: u32) -> (usize, usize, u64) {
    (
        (v >> 31) as usize,
        (v >> 24 & 0x7f) as usize,
        u64::from(v & 0xff_ffff),
    )
}

fn recv_id(side: usize, idx: u64) -> u64 {
    RECV_ID | (side as u64) << 40 | idx
}

fn slot_off(slot: usize, seq: u64) -> u64 {
    (slot as u64 * PER_MAX + seq) * SLOT
}

/// The bytes WR `id` sends or writes: its id first (a SEND names itself in
/// the buffer it lands in), then a pattern of the id.
fn payload(id: u64, len: u32) -> Vec<u8> {
    let mut v: Vec<u8> = (0..u64::from(len))
        .map(|i| (i.wrapping_mul(29) ^ id.wrapping_mul(0x9e37) ^ (id >> 7)) as u8)
        .collect();
    v[..8].copy_from_slice(&id.to_le_bytes());
    v
}

fn rsrc_byte(i: u64) -> u8 {
    (i.wrapping_mul(13) ^ (i >> 8) ^ 0x5a) as u8
}

fn psn(side: usize, slot: usize) -> u32 {
    // Near the wrap, so the PSNs of every pair cross it.
    0xff_ffc0 + slot as u32 * 3 + side as u32
}

// ---- the devices ----

struct Side {
    e: RwLock<Engine>,
    mem: PagedMemory,
    ip: IpAddr,
    pd: PdHandle,
    cq: CqHandle,
    srq: SrqHandle,
    lkey: u32,
    rkey: u32,
    cq_shared: Arc<SharedCq>,
    srq_ring: Arc<RecvRing>,
    /// Every completion polled from the CQ, in CQ order (pollers append
    /// under the CQ's consumer lock).
    log: Mutex<Vec<WorkCompletion>>,
    /// Send completions in the log, per QP slot.
    completed: [AtomicU64; NQ],
    /// Async events taken from the engine.
    asyncs: Mutex<Vec<Event>>,
    completion_events: AtomicU64,
}

impl Side {
    fn new(ip: &str, channel: Option<u32>) -> Side {
        let ip: IpAddr = ip.parse().expect("an address");
        let mut e = Engine::new(&DeviceConfig {
            name: format!("stress-{ip}"),
            addrs: vec![ip],
            active_mtu: Mtu::Mtu1024,
        });
        let ctx = e.open_context();
        let pd = e.alloc_pd(ctx).expect("alloc_pd");
        let (cq, _) = e.create_cq(ctx, 4096, 0).expect("create_cq");
        e.set_cq_channel(cq, channel).expect("set_cq_channel");
        let attr = SrqAttr {
            max_wr: SRQ_WR,
            max_sge: 1,
            srq_limit: 0,
        };
        let (srq, _) = e.create_srq(pd, &attr).expect("create_srq");
        let (_, mr) = e.reg_mr(pd, BASE, MEM_LEN, 0xf).expect("reg_mr");
        let (lkey, rkey) = (mr.lkey, mr.rkey);
        let mem = PagedMemory::new(BASE, MEM_LEN);
        let rsrc: Vec<u8> = (0..RSRC_LEN).map(rsrc_byte).collect();
        mem.write(RSRC, &rsrc);
        Side {
            cq_shared: e.cq_shared(cq).expect("cq_shared"),
            srq_ring: e.srq_ring(srq).expect("srq_ring"),
            e: RwLock::new(e),
            mem,
            ip,
            pd,
            cq,
            srq,
            lkey,
            rkey,
            log: Mutex::default(),
            completed: Default::default(),
            asyncs: Mutex::default(),
            completion_events: AtomicU64::new(0),
        }
    }

    fn rd(&self) -> RwLockReadGuard<'_, Engine> {
        self.e.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn wr(&self) -> RwLockWriteGuard<'_, Engine> {
        self.e.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, 4791)
    }

    /// Polls what the CQ holds into the log (the consumer lock orders it).
    fn poll(&self) -> usize {
        let mut total = 0;
        loop {
            let n = self.cq_shared.poll_with(32, |wc| {
                if let Some((_, slot, _)) = decode_wr_id(wc.wr_id) {
                    self.completed[slot].fetch_add(1, SeqCst);
                }
                lock(&self.log).push(wc);
            });
            total += n;
            if n == 0 {
                return total;
            }
        }
    }
}

/// An RC QP on the side's CQ (both queues) and SRQ, in RESET.
fn create_qp(s: &Side, e: &mut Engine) -> (QpHandle, u32) {
    let req = QpRequest {
        qp_type: QpType::Rc.raw(),
        cap: QpCap {
            max_send_wr: 32,
            max_recv_wr: 0,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        has_srq: true,
        comp_mask: 1,
        ..QpRequest::default()
    };
    let c = QpCreate {
        pd: s.pd,
        send_cq: Some(s.cq),
        recv_cq: Some(s.cq),
        srq: Some(s.srq),
        req,
        sq_sig_all: false,
    };
    let q = e.create_qp(&c).expect("create_qp");
    (q.handle, q.qpn)
}

fn connect(e: &mut Engine, h: QpHandle, side: usize, slot: usize, peer_qpn: u32, peer: IpAddr) {
    let c = proto::testing::Connect {
        access: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
        sq_psn: psn(side, slot),
        rq_psn: psn(1 - side, slot),
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        ..proto::testing::Connect::rc(peer_qpn, Gid::from(peer))
    };
    proto::testing::connect(e, h, QpType::Rc, &c).expect("connect");
}

#[derive(Clone)]
struct QpInfo {
    h: QpHandle,
    ring: Arc<SendRing>,
}

/// How datagrams go from one device to the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// One transmitting thread per device; two receiving threads of the
    /// peer, each owning the QPs of half the QPNs (a QP's packets in order).
    Serial,
    /// Two transmitting threads per device, each handing its batch over
    /// itself (a QP's packets may overtake each other: RC recovers).
    Reorder,
    /// Two transmitting threads per device with transmit claims
    /// (`poll_transmit_claimed`, `release_claims` once the batch is handed
    /// over): each QP's packets stay in order.
    Claims,
}

#[derive(Debug, Clone, Copy)]
struct Config {
    mode: Mode,
    /// WRs each QP posts.
    per: u64,
}

enum Wake {
    Event,
    Stop,
}

struct World {
    cfg: Config,
    sides: [Side; 2],
    now: AtomicU64,
    stop: AtomicBool,
    /// Datagrams taken from one engine and not yet handled by the other.
    in_flight: AtomicUsize,
    /// Transmitting threads inside a pass.
    busy: AtomicUsize,
    /// Bumped by every step that moved something.
    activity: AtomicU64,
    qps: Mutex<[[Option<QpInfo>; NQ]; 2]>,
    /// Every QP's number (kept after a destroy).
    qpn: [[AtomicU32; NQ]; 2],
    posted: [[AtomicU64; NQ]; 2],
    stop_posting: [[AtomicBool; NQ]; 2],
    poster_done: [[AtomicBool; NQ]; 2],
    recv_posted: [AtomicU64; 2],
    control_done: AtomicBool,
    timer_jumps: AtomicU64,
    /// B's CQ poller sleeps on this until a completion event.
    wake_b: Mutex<Option<mpsc::Sender<Wake>>>,
    /// What the control thread did, for the report.
    control_log: Mutex<Vec<String>>,
    /// The QPs the control thread destroyed: (side, handle).
    retired: Mutex<Vec<(usize, QpHandle)>>,
    /// Clock steps taken while traffic flowed.
    drifts: AtomicU64,
}

impl World {
    fn new(cfg: Config) -> World {
        // B's CQ has a completion channel; A's has none (its pollers spin).
        let w = World {
            cfg,
            sides: [
                Side::new("127.0.70.1", None),
                Side::new("127.0.70.2", Some(7)),
            ],
            now: AtomicU64::new(1_000_000),
            stop: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            busy: AtomicUsize::new(0),
            activity: AtomicU64::new(0),
            qps: Mutex::default(),
            qpn: Default::default(),
            posted: Default::default(),
            stop_posting: Default::default(),
            poster_done: Default::default(),
            recv_posted: Default::default(),
            control_done: AtomicBool::new(false),
            timer_jumps: AtomicU64::new(0),
            wake_b: Mutex::new(None),
            control_log: Mutex::default(),
            retired: Mutex::default(),
            drifts: AtomicU64::new(0),
        };
        for slot in 0..FRESH {
            w.make_pair(slot);
        }
        w
    }

    /// Creates and connects the QPs of `slot` on both devices.
    fn make_pair(&self, slot: usize) {
        let [a, b] = &self.sides;
        let (ha, na) = create_qp(a, &mut a.wr());
        let (hb, nb) = create_qp(b, &mut b.wr());
        connect(&mut a.wr(), ha, 0, slot, nb, b.ip);
        connect(&mut b.wr(), hb, 1, slot, na, a.ip);
        self.qpn[0][slot].store(na, SeqCst);
        self.qpn[1][slot].store(nb, SeqCst);
        let ra = a.rd().send_ring(ha).expect("send_ring");
        let rb = b.rd().send_ring(hb).expect("send_ring");
        let mut q = lock(&self.qps);
        q[0][slot] = Some(QpInfo { h: ha, ring: ra });
        q[1][slot] = Some(QpInfo { h: hb, ring: rb });
    }

    fn info(&self, side: usize, slot: usize) -> Option<QpInfo> {
        lock(&self.qps)[side][slot].clone()
    }

    fn stopped(&self) -> bool {
        self.stop.load(SeqCst)
    }

    fn bump(&self) {
        self.activity.fetch_add(1, SeqCst);
    }

    /// Send completions of (side, slot) seen in the log.
    fn send_completions(&self, side: usize, slot: usize) -> u64 {
        self.sides[side].completed[slot].load(SeqCst)
    }

    /// Nothing moves and nothing waits to: no datagram between the devices,
    /// no transmit pass running, no QP scheduled, no post in a send ring.
    fn looks_idle(&self) -> bool {
        if self.in_flight.load(SeqCst) != 0 || self.busy.load(SeqCst) != 0 {
            return false;
        }
        let rings_empty = lock(&self.qps)
            .iter()
            .flatten()
            .flatten()
            .all(|q| q.ring.pending() == 0);
        rings_empty && self.sides.iter().all(|s| !s.rd().has_driver_work())
    }
}

// ---- the threads ----

fn poster(w: &World, side: usize, slot: usize) {
    let info = loop {
        if let Some(i) = w.info(side, slot) {
            break i;
        }
        if w.stopped() {
            return;
        }
        sleep(Duration::from_micros(200));
    };
    let (s, peer) = (&w.sides[side], &w.sides[1 - side]);
    'wrs: for seq in 0..w.cfg.per {
        if w.stop_posting[side][slot].load(SeqCst) || w.stopped() {
            break;
        }
        let op = plan(side, slot, seq);
        let id = wr_id(side, slot, seq);
        let off = slot_off(slot, seq);
        let (addr, target) = match op.kind {
            Kind::Send | Kind::SendImm => (SRC + off, WrTarget::None),
            Kind::Write | Kind::WriteImm => (
                SRC + off,
                WrTarget::Rdma(RdmaTarget {
                    remote_addr: WTGT + off,
                    rkey: peer.rkey,
                }),
            ),
            Kind::Read => (
                LOCAL + off,
                WrTarget::Rdma(RdmaTarget {
                    remote_addr: RSRC + op.read_off,
                    rkey: peer.rkey,
                }),
            ),
            Kind::FetchAdd => (
                LOCAL + off,
                WrTarget::Atomic(AtomicTarget {
                    remote_addr: COUNTER,
                    compare_add: op.add,
                    swap: 0,
                    rkey: peer.rkey,
                }),
            ),
        };
        if addr == SRC + off {
            s.mem.write(addr, &payload(id, op.len));
        }
        let sge = [Sge {
            addr,
            length: op.len,
            lkey: s.lkey,
        }];
        let wr = SendWr {
            wr_id: id,
            opcode: op.kind.opcode(),
            flags: SendFlags::SIGNALED,
            sg_list: &sge,
            imm_data: ImmData::from_value(imm(side, slot, seq)),
            target,
        };
        loop {
            match info.ring.post(&wr, None, 0) {
                Ok(SendPost::Queued { .. }) => break,
                Ok(SendPost::Flush) => {
                    s.wr().post_send(info.h, &wr, None).expect("post_send");
                    break;
                }
                Ok(SendPost::Settle) => {
                    s.wr().settle_send(info.h).expect("settle_send");
                    break;
                }
                Err(PostError::QueueFull { .. }) => {
                    if w.stop_posting[side][slot].load(SeqCst) || w.stopped() {
                        break 'wrs;
                    }
                    sleep(Duration::from_micros(30));
                }
                Err(e) => panic!("post of {id:#x} refused: {e}"),
            }
        }
        w.posted[side][slot].store(seq + 1, SeqCst);
        w.bump();
        // A third of the WRs end a burst: the poster waits until all it
        // posted completed, so the next post finds the QP idle (the post
        // alone must wake it: the posted list, no packet of its own due).
        if mix(id).is_multiple_of(3) {
            while w.send_completions(side, slot) < seq + 1
                && !w.stop_posting[side][slot].load(SeqCst)
                && !w.stopped()
            {
                sleep(Duration::from_micros(50));
            }
        }
    }
    w.poster_done[side][slot].store(true, SeqCst);
}

/// Keeps the SRQ stocked: NRECV WQEs, each with its own buffer.
fn srq_poster(w: &World, side: usize) {
    let s = &w.sides[side];
    let mut idx = 0;
    while idx < NRECV && !w.stopped() {
        let sge = [Sge {
            addr: RECV + idx * SLOT,
            length: SLOT as u32,
            lkey: s.lkey,
        }];
        let wr = RecvWr {
            wr_id: recv_id(side, idx),
            sg_list: &sge,
        };
        let posted = match s.srq_ring.post(&wr) {
            Ok(RingPost::Queued) => true,
            Ok(RingPost::Full) => match s.wr().post_srq_recv(s.srq, &wr) {
                Ok(()) => true,
                Err(PostError::QueueFull { .. }) => false,
                Err(e) => panic!("post_srq_recv: {e}"),
            },
            Ok(other) => panic!("an SRQ ring said {other:?}"),
            Err(PostError::QueueFull { .. }) => false,
            Err(e) => panic!("SRQ post refused: {e}"),
        };
        if posted {
            idx += 1;
            w.recv_posted[side].store(idx, SeqCst);
            w.bump();
        } else {
            sleep(Duration::from_micros(50));
        }
    }
}

/// The BTH's destination QP of a RoCEv2 datagram.
fn dest_qpn(d: &[u8]) -> u32 {
    u32::from_be_bytes([0, d[5], d[6], d[7]])
}

/// Takes up to 32 datagrams from `side` (its read side held only
/// meanwhile), with `claims` through `poll_transmit_claimed`.
fn take_batch(
    w: &World,
    side: usize,
    buf: &mut [u8],
    mut claims: Option<&mut TxClaims>,
) -> Vec<Vec<u8>> {
    let s = &w.sides[side];
    let peer_ip = w.sides[1 - side].ip;
    let mut batch = Vec::new();
    let e = s.rd();
    let now = w.now.load(SeqCst);
    while batch.len() < 32 {
        let t = match claims.as_deref_mut() {
            Some(c) => e.poll_transmit_claimed(now, &s.mem, buf, c),
            None => e.poll_transmit(now, &s.mem, buf),
        };
        let Some(t) = t else {
            break;
        };
        assert_eq!(t.to.ip(), peer_ip, "a datagram for the peer");
        w.in_flight.fetch_add(1, SeqCst);
        batch.push(buf[..t.len].to_vec());
    }
    batch
}

/// Hands datagram `d` to device `to`: as from its socket, or (`local`) as
/// from the same-host path (RC's ICRC not verified).
fn deliver(w: &World, to: usize, d: &[u8], local: bool) {
    let (s, from) = (&w.sides[to], &w.sides[1 - to]);
    let (e, now) = (s.rd(), w.now.load(SeqCst));
    if local {
        e.handle_local_datagram(now, from.addr(), s.addr(), d, &s.mem);
    } else {
        e.handle_datagram(now, from.addr(), s.addr(), d, &s.mem);
    }
    drop(e);
    w.in_flight.fetch_sub(1, SeqCst);
    w.bump();
}

/// Serial mode: the only transmitting thread of `side`; the datagrams go to
/// the peer's receiving thread that owns their destination QP.
fn transmitter(w: &World, side: usize, shards: &[mpsc::Sender<Vec<u8>>]) {
    let mut buf = vec![0u8; 4096];
    while !w.stopped() {
        w.busy.fetch_add(1, SeqCst);
        let batch = take_batch(w, side, &mut buf, None);
        let n = batch.len();
        for d in batch {
            let k = dest_qpn(&d) as usize % shards.len();
            shards[k].send(d).expect("a receiving thread");
        }
        w.busy.fetch_sub(1, SeqCst);
        if n == 0 {
            sleep(Duration::from_micros(20));
        }
    }
}

fn receiver(w: &World, side: usize, rx: &mpsc::Receiver<Vec<u8>>, local: bool) {
    loop {
        match rx.recv_timeout(Duration::from_millis(5)) {
            Ok(d) => deliver(w, side, &d, local),
            Err(mpsc::RecvTimeoutError::Timeout) if !w.stopped() => {}
            Err(_) => return,
        }
    }
}

/// Reorder and claims modes: one of two transmitting threads of `side`,
/// handing its datagrams to the peer itself (the peer's read side, after
/// its own is let go); with claims, the QPs it took datagrams from are let
/// go only after that.
fn transmit_direct(w: &World, side: usize, local: bool) {
    let mut buf = vec![0u8; 4096];
    let mut claims = TxClaims::default();
    let claimed = w.cfg.mode == Mode::Claims;
    while !w.stopped() {
        w.busy.fetch_add(1, SeqCst);
        let batch = take_batch(w, side, &mut buf, claimed.then_some(&mut claims));
        let n = batch.len();
        for d in batch {
            deliver(w, 1 - side, &d, local);
        }
        if claimed {
            w.sides[side].rd().release_claims(&mut claims);
        }
        w.busy.fetch_sub(1, SeqCst);
        if n == 0 {
            sleep(Duration::from_micros(20));
        }
    }
}

/// A's CQ: a busy poller (two of them run).
fn busy_poller(w: &World, side: usize) {
    let s = &w.sides[side];
    while !w.stopped() {
        if s.poll() > 0 {
            w.bump();
        } else {
            sleep(Duration::from_micros(20));
        }
    }
    s.poll();
}

/// B's CQ: poll it empty, arm it, poll once more, then sleep until the
/// completion event (no timeout: a lost event stalls the traffic).
fn event_poller(w: &World, side: usize, wake: &mpsc::Receiver<Wake>) {
    let s = &w.sides[side];
    loop {
        if s.poll() > 0 {
            w.bump();
            continue;
        }
        s.cq_shared.req_notify(false);
        if s.poll() > 0 {
            w.bump();
            continue;
        }
        match wake.recv() {
            Ok(Wake::Event) => {}
            Ok(Wake::Stop) | Err(_) => break,
        }
    }
    s.poll();
}

/// Takes every event of `side`'s engine: completion events wake B's poller,
/// async events are kept. After the stop, what is left is taken once more.
fn event_taker(w: &World, side: usize) {
    let s = &w.sides[side];
    loop {
        let last = w.stopped();
        let mut got = Vec::new();
        {
            let e = s.rd();
            while let Some(ev) = e.poll_event() {
                got.push(ev);
            }
        }
        if got.is_empty() {
            if last {
                return;
            }
            sleep(Duration::from_micros(50));
            continue;
        }
        for ev in got {
            match ev {
                Event::Completion { cq, channel } => {
                    assert_eq!((cq, channel), (s.cq, 7), "only B's CQ has a channel");
                    s.completion_events.fetch_add(1, SeqCst);
                    if let Some(tx) = lock(&w.wake_b).as_ref() {
                        let _ = tx.send(Wake::Event);
                    }
                }
                ev => lock(&s.asyncs).push(ev),
            }
        }
    }
}

/// The virtual clock: 1 ms more for every 16 steps that moved something,
/// so timers fire while traffic flows (`handle_timeout` beside everything
/// else; a QP whose packets move is not failed by it: its packets wait
/// behind far fewer steps than a 67 ms ACK timeout is worth, and a
/// spurious timeout only resends); and a jump to the next deadline when
/// the devices have looked idle twice, 300 µs apart, with nothing moving
/// in between.
fn timer(w: &World) {
    let mut drifted = w.activity.load(SeqCst);
    while !w.stopped() {
        let seen = w.activity.load(SeqCst);
        if seen >= drifted + 16 {
            drifted = seen;
            let now = w.now.fetch_add(1_000_000, SeqCst) + 1_000_000;
            w.drifts.fetch_add(1, SeqCst);
            for s in &w.sides {
                let e = s.rd();
                e.set_now(now);
                e.handle_timeout(now);
            }
            continue;
        }
        if !w.looks_idle() {
            sleep(Duration::from_micros(100));
            continue;
        }
        sleep(Duration::from_micros(300));
        if w.activity.load(SeqCst) != seen || !w.looks_idle() {
            continue;
        }
        let next = w.sides.iter().filter_map(|s| s.rd().poll_timeout()).min();
        let Some(t) = next else {
            continue;
        };
        let now = w.now.fetch_max(t, SeqCst).max(t);
        for s in &w.sides {
            let e = s.rd();
            e.set_now(now);
            e.handle_timeout(now);
        }
        w.timer_jumps.fetch_add(1, SeqCst);
        w.bump();
    }
}

fn wait_until(w: &World, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(100);
    while !f() {
        assert!(!w.stopped(), "stopped while waiting for {what}");
        assert!(
            Instant::now() < deadline,
            "control: waited too long for {what}"
        );
        sleep(Duration::from_micros(500));
    }
}

/// Stops the poster of (side, slot), waits until every WR it posted has
/// completed, then destroys the QP as an application on an SRQ must: moved
/// to ERR first (a receive WQE it took from the SRQ for a message that
/// never ended completes with a flush), its CQ polled empty, under the
/// write side (no completion of it is purged unseen).
fn retire(w: &World, side: usize, slot: usize) {
    w.stop_posting[side][slot].store(true, SeqCst);
    wait_until(w, "the victim's poster", || {
        w.poster_done[side][slot].load(SeqCst)
    });
    let posted = w.posted[side][slot].load(SeqCst);
    wait_until(w, "the victim's completions", || {
        w.send_completions(side, slot) == posted
    });
    let info = w.info(side, slot).expect("the victim exists");
    let s = &w.sides[side];
    let mut e = s.wr();
    let state = e.qp(info.h).expect("the victim").ctl.state();
    if state != QpState::Err {
        let attr = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        e.modify_qp(info.h, &attr, AttrMask::STATE)
            .expect("modify to ERR");
    }
    s.poll();
    e.destroy_qp(info.h).expect("destroy_qp");
    lock(&w.qps)[side][slot] = None;
    lock(&w.retired).push((side, info.h));
    drop(e);
    lock(&w.control_log).push(format!(
        "destroyed slot {slot} on {} after {posted} WRs (it was in {state:?})",
        ["A", "B"][side]
    ));
}

fn control(w: &World) {
    let progress = |side: usize| -> u64 { (0..STABLE).map(|k| w.send_completions(side, k)).sum() };
    let quarter = STABLE as u64 * w.cfg.per / 5;
    wait_until(w, "some traffic", || {
        progress(0) >= quarter && progress(1) >= quarter
    });
    // Grow both CQs while completions stream in.
    for s in &w.sides {
        let got = s.wr().resize_cq(s.cq, 8192).expect("resize_cq up");
        assert!(got >= 8192);
    }
    // Arm B's SRQ limit just below its depth: a take that leaves fewer
    // WQEs raises the event once and disarms it (if one comes).
    let b = &w.sides[1];
    let arm = SrqAttr {
        max_wr: 0,
        max_sge: 0,
        srq_limit: SRQ_WR - 1,
    };
    b.wr()
        .modify_srq(b.srq, &arm, proto::srq::SRQ_LIMIT)
        .expect("arm the SRQ limit");
    // B's victim to ERR while both ends still post and A's still sends.
    let vb = w.info(1, VICTIM).expect("B's victim");
    let attr = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    w.sides[1]
        .wr()
        .modify_qp(vb.h, &attr, AttrMask::STATE)
        .expect("modify to ERR");
    lock(&w.control_log).push(format!(
        "B's victim to ERR after {} of its WRs were posted",
        w.posted[1][VICTIM].load(SeqCst)
    ));
    // Let the flushes race the posts a while.
    wait_until(w, "more posts on B's victim", || {
        w.poster_done[1][VICTIM].load(SeqCst) || w.posted[1][VICTIM].load(SeqCst) > w.cfg.per / 2
    });
    retire(w, 1, VICTIM);
    // A new pair, on the same CQs and SRQs, joins the traffic.
    w.make_pair(FRESH);
    lock(&w.control_log).push("created and connected a new pair".into());
    // A's victim fails once its retries run out (its peer is gone), or
    // finished before that; then it goes too.
    let va = w.info(0, VICTIM).expect("A's victim");
    wait_until(w, "A's victim to fail or finish", || {
        let state = w.sides[0].rd().qp(va.h).map(|q| q.ctl.state());
        state == Ok(QpState::Err) || w.poster_done[0][VICTIM].load(SeqCst)
    });
    retire(w, 0, VICTIM);
    // Churn: pairs created, carrying traffic, failed (one end moved to ERR,
    // then the other) and destroyed, one after another, while the others
    // keep going (handles and QPNs of destroyed QPs, their timers and
    // turns, meet new QPs).
    let err = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    for c in CHURN..NQ {
        w.make_pair(c);
        wait_until(w, "the churn pair's first posts", || {
            (0..2).all(|s| w.posted[s][c].load(SeqCst) >= 5 || w.poster_done[s][c].load(SeqCst))
        });
        let first = c % 2;
        for side in [first, 1 - first] {
            let info = w.info(side, c).expect("the churn QP");
            w.sides[side]
                .wr()
                .modify_qp(info.h, &err, AttrMask::STATE)
                .expect("modify to ERR");
        }
        for side in [first, 1 - first] {
            retire(w, side, c);
        }
    }
    // Shrink both CQs: still above everything they may hold.
    for s in &w.sides {
        let got = s.wr().resize_cq(s.cq, 2048).expect("resize_cq down");
        assert!(got >= 2048);
    }
    lock(&w.control_log).push("resized both CQs up and down".into());
    w.control_done.store(true, SeqCst);
}

// ---- the run ----

/// The threads of a run: name, handle, and whether it returned (rather
/// than panicked).
struct Threads(Vec<(String, JoinHandle<()>, Arc<AtomicBool>)>);

impl Threads {
    fn spawn(&mut self, w: &Arc<World>, name: &str, f: impl FnOnce(&World) + Send + 'static) {
        let w = w.clone();
        let returned = Arc::new(AtomicBool::new(false));
        let r = returned.clone();
        let h = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                f(&w);
                r.store(true, SeqCst);
            })
            .expect("spawn");
        self.0.push((name.into(), h, returned));
    }
}

/// What the traffic must have produced before it may stop: every stable and
/// fresh WR and every receive its SENDs owe completed, the control thread done.
fn finished(w: &World) -> bool {
    if !w.control_done.load(SeqCst) {
        return false;
    }
    let slots = (0..STABLE).chain([FRESH]);
    for side in 0..2 {
        for slot in slots.clone() {
            if !w.poster_done[side][slot].load(SeqCst)
                || w.send_completions(side, slot) != w.posted[side][slot].load(SeqCst)
            {
                return false;
            }
        }
        let (owed, got) = receives(w, side);
        if got != owed {
            return false;
        }
    }
    true
}

/// Receives `side` owes the peer's stable and fresh QPs for what they
/// posted, and receive completions of its stable and fresh QPs logged.
fn receives(w: &World, side: usize) -> (u64, u64) {
    let slots = (0..STABLE).chain([FRESH]);
    let owed: u64 = slots
        .clone()
        .map(|slot| {
            let n = w.posted[1 - side][slot].load(SeqCst);
            (0..n)
                .filter(|&seq| plan(1 - side, slot, seq).kind.consumes_recv())
                .count() as u64
        })
        .sum();
    let got = lock(&w.sides[side].log)
        .iter()
        .filter(|c| c.wr_id >> 48 == RECV_ID >> 48)
        .filter(|c| {
            let q = c.qp_num;
            slots.clone().any(|k| w.qpn[side][k].load(SeqCst) == q)
        })
        .count() as u64;
    (owed, got)
}

/// The slot of the QP a completion is on (NQ if none).
fn slot_of(w: &World, side: usize, c: &WorkCompletion) -> usize {
    (0..NQ)
        .find(|&k| w.qpn[side][k].load(SeqCst) == c.qp_num)
        .unwrap_or(NQ)
}

fn panic_message(r: std::thread::Result<()>) -> String {
    match r {
        Ok(()) => "no panic".into(),
        Err(p) => p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_string()))
            .unwrap_or_default(),
    }
}

fn diagnostics(w: &World) -> String {
    let mut out = format!(
        "now {} in_flight {} busy {} timer jumps {} control done {}\n",
        w.now.load(SeqCst),
        w.in_flight.load(SeqCst),
        w.busy.load(SeqCst),
        w.timer_jumps.load(SeqCst),
        w.control_done.load(SeqCst)
    );
    out += &format!("control: {:?}\n", lock(&w.control_log));
    for (side, s) in w.sides.iter().enumerate() {
        let log = lock(&s.log);
        let errors: Vec<_> = log
            .iter()
            .filter(|c| c.status != WcStatus::Success)
            .filter(|c| !victim(slot_of(w, side, c)))
            .take(8)
            .collect();
        out += &format!("side {side}: errors on stable QPs: {errors:?}\n");
    }
    for (side, s) in w.sides.iter().enumerate() {
        let (owed, got) = receives(w, side);
        out += &format!(
            "side {side}: {} completions logged, {} in the CQ, receives: {} posted, {} on the SRQ, {owed} owed, {got} completed; {} completion events; async {:?}\n",
            lock(&s.log).len(),
            s.cq_shared.len(),
            w.recv_posted[side].load(SeqCst),
            s.srq_ring.queued(),
            s.completion_events.load(SeqCst),
            lock(&s.asyncs),
        );
        let e = s.e.try_read();
        for slot in 0..NQ {
            let info = w.info(side, slot);
            let state = match (&e, &info) {
                (Ok(e), Some(i)) => format!(
                    "state {:?} tx_pending {} sq {} ring {} (queued {}) {:?}",
                    e.qp(i.h).map(|q| q.ctl.state()),
                    e.qp_tx_pending(i.h),
                    e.qp(i.h).map_or(0, |q| q.send_queue_len()),
                    i.ring.pending(),
                    i.ring.queued(),
                    e.qp(i.h).map(|q| format!(
                        "deadline {:?} una {} next {} epsn {}",
                        q.deadline(),
                        q.una().get(),
                        q.sq_psn().get(),
                        q.epsn().get()
                    )),
                ),
                (Err(_), _) => "engine locked".into(),
                (_, None) => "no QP".into(),
            };
            out += &format!(
                "  slot {slot}: posted {} done {} completions {} {state}\n",
                w.posted[side][slot].load(SeqCst),
                w.poster_done[side][slot].load(SeqCst),
                w.send_completions(side, slot),
            );
        }
        if let Ok(e) = &e {
            out += &format!(
                "  driver work {} next timeout {:?}\n",
                e.has_driver_work(),
                e.poll_timeout()
            );
        }
    }
    out
}

fn run(cfg: Config) -> Arc<World> {
    assert!(cfg.per <= PER_MAX);
    let w = Arc::new(World::new(cfg));
    let mut t = Threads(Vec::new());
    let (wake_tx, wake_rx) = mpsc::channel();
    *lock(&w.wake_b) = Some(wake_tx.clone());
    for side in 0..2 {
        for slot in 0..NQ {
            t.spawn(&w, &format!("post-{side}-{slot}"), move |w| {
                poster(w, side, slot);
            });
        }
        t.spawn(&w, &format!("srq-{side}"), move |w| srq_poster(w, side));
        t.spawn(&w, &format!("events-{side}"), move |w| event_taker(w, side));
        if cfg.mode != Mode::Serial {
            for k in 0..2 {
                t.spawn(&w, &format!("tx-{side}-{k}"), move |w| {
                    transmit_direct(w, side, k == 1);
                });
            }
        } else {
            let mut shards = Vec::new();
            for k in 0..2 {
                let (tx, rx) = mpsc::channel();
                shards.push(tx);
                t.spawn(&w, &format!("rx-{}-{k}", 1 - side), move |w| {
                    receiver(w, 1 - side, &rx, k == 1);
                });
            }
            t.spawn(&w, &format!("tx-{side}"), move |w| {
                transmitter(w, side, &shards)
            });
        }
    }
    t.spawn(&w, "poll-a-0", |w| busy_poller(w, 0));
    t.spawn(&w, "poll-a-1", |w| busy_poller(w, 0));
    t.spawn(&w, "poll-b", move |w| event_poller(w, 1, &wake_rx));
    t.spawn(&w, "timer", timer);
    t.spawn(&w, "control", control);

    // The watchdog: the traffic finishes, or the test fails with the state.
    let deadline = Instant::now() + Duration::from_secs(WATCHDOG_S);
    while !finished(&w) {
        // A thread that panicked fails the test with its message at once.
        let dead =
            t.0.iter()
                .position(|(_, h, returned)| h.is_finished() && !returned.load(SeqCst));
        if let Some(i) = dead {
            let d = diagnostics(&w);
            w.stop.store(true, SeqCst);
            let (name, h, _) = t.0.swap_remove(i);
            let msg = panic_message(h.join());
            panic!("thread {name} ended early: {msg}\n{d}");
        }
        if Instant::now() > deadline {
            let d = diagnostics(&w);
            w.stop.store(true, SeqCst);
            panic!("the traffic did not finish in time (deadlock or lost wake-up?)\n{d}");
        }
        sleep(Duration::from_millis(5));
    }
    w.stop.store(true, SeqCst);
    let _ = wake_tx.send(Wake::Stop);
    *lock(&w.wake_b) = None;
    // Every thread ends within a bound; a panic in one fails the test.
    let (done_tx, done_rx) = mpsc::channel();
    let joiner = std::thread::spawn(move || {
        for (name, h, _) in t.0 {
            let r = h.join();
            if r.is_err() {
                let msg = panic_message(r);
                let _ = done_tx.send(Err(format!("thread {name} panicked: {msg}")));
                return;
            }
        }
        let _ = done_tx.send(Ok(()));
    });
    match done_rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("{e}"),
        Err(_) => panic!("threads did not end after the stop\n{}", diagnostics(&w)),
    }
    joiner.join().expect("joiner");
    w
}

// ---- the checks ----

fn check(w: &World) {
    for side in 0..2 {
        check_side(w, side);
    }
    check_atomics(w);
    check_counters(w);
    check_events(w);
}

fn status_run_ok(side: usize, slot: usize, statuses: &[WcStatus]) -> bool {
    if !victim(slot) {
        return statuses.iter().all(|s| *s == WcStatus::Success);
    }
    // Successes, at most one transport error, then flushes.
    let ok = statuses
        .iter()
        .take_while(|s| **s == WcStatus::Success)
        .count();
    let mut rest = &statuses[ok..];
    if side == 0 {
        if let Some((first, tail)) = rest.split_first() {
            if matches!(first, WcStatus::RetryExcErr | WcStatus::RnrRetryExcErr) {
                rest = tail;
            }
        }
    }
    rest.iter().all(|s| *s == WcStatus::WrFlushErr)
}

fn check_side(w: &World, side: usize) {
    let s = &w.sides[side];
    let peer = &w.sides[1 - side];
    let log = lock(&s.log).clone();
    assert!(
        s.cq_shared.is_empty(),
        "side {side}: the CQ was polled empty"
    );
    let qpn = |side: usize, slot: usize| w.qpn[side][slot].load(SeqCst);
    let slot_of_qpn = |q: u32| (0..NQ).find(|&k| qpn(side, k) == q);

    // Send WRs: each exactly once, in posting order, on its QP.
    let mut sends: BTreeMap<usize, Vec<(u64, WorkCompletion)>> = BTreeMap::new();
    // Receives: each WQE at most once; what each consumed.
    let mut recvs = BTreeSet::new();
    let mut delivered: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    let mut recv_count = 0u64;
    for c in &log {
        if let Some((s2, slot, seq)) = decode_wr_id(c.wr_id) {
            assert_eq!(s2, side, "a completion of the other side's WR: {c:?}");
            assert_eq!(c.qp_num, qpn(side, slot), "a WR completes on its QP: {c:?}");
            sends.entry(slot).or_default().push((seq, *c));
            continue;
        }
        assert_eq!(c.wr_id >> 48, RECV_ID >> 48, "unknown wr_id: {c:?}");
        assert_eq!((c.wr_id >> 40 & 0xff) as usize, side, "{c:?}");
        let idx = c.wr_id & 0xff_ffff_ffff;
        assert!(
            idx < w.recv_posted[side].load(SeqCst),
            "never posted: {c:?}"
        );
        assert!(
            recvs.insert(idx),
            "receive WQE {idx} completed twice: {c:?}"
        );
        recv_count += 1;
        let slot = slot_of_qpn(c.qp_num).unwrap_or_else(|| panic!("on no QP: {c:?}"));
        if c.status == WcStatus::WrFlushErr {
            assert!(victim(slot), "only a victim flushes a receive: {c:?}");
            continue;
        }
        assert_eq!(c.status, WcStatus::Success, "{c:?}");
        let (from_side, from_slot, seq) = match c.opcode {
            WcOpcode::Recv => {
                let head = s.mem.bytes(RECV + idx * SLOT, 8);
                let id = u64::from_le_bytes(head.try_into().expect("8 bytes"));
                let who = decode_wr_id(id)
                    .unwrap_or_else(|| panic!("receive {idx} holds no WR id: {c:?}"));
                let op = plan(who.0, who.1, who.2);
                assert!(
                    matches!(op.kind, Kind::Send | Kind::SendImm),
                    "receive {idx} got {op:?}"
                );
                assert_eq!(c.byte_len, op.len, "the SEND's length: {c:?}");
                let got = s.mem.bytes(RECV + idx * SLOT, u64::from(op.len));
                assert!(
                    got == payload(id, op.len),
                    "SEND {id:#x}: bytes differ in receive {idx}"
                );
                let with_imm = c.wc_flags.0 & WcFlags::WITH_IMM.0 != 0;
                assert_eq!(with_imm, op.kind == Kind::SendImm, "{c:?}");
                if with_imm {
                    assert_eq!(c.imm_data, ImmData::from_value(imm(who.0, who.1, who.2)));
                }
                who
            }
            WcOpcode::RecvRdmaWithImm => {
                let who = decode_imm(c.imm_data.value());
                assert_eq!(plan(who.0, who.1, who.2).kind, Kind::WriteImm, "{c:?}");
                who
            }
            op => panic!("a receive completion with opcode {op:?}"),
        };
        assert_eq!(from_side, 1 - side, "{c:?}");
        assert_eq!(from_slot, slot, "received on the peer's partner QP: {c:?}");
        assert!(
            seq < w.posted[from_side][from_slot].load(SeqCst),
            "delivered but never posted: {c:?}"
        );
        delivered.entry(slot).or_default().push(seq);
    }

    for slot in 0..NQ {
        let posted = w.posted[side][slot].load(SeqCst);
        let got = sends.remove(&slot).unwrap_or_default();
        let seqs: Vec<u64> = got.iter().map(|(q, _)| *q).collect();
        if seqs != (0..posted).collect::<Vec<_>>() {
            let detail: Vec<String> = got
                .iter()
                .map(|(q, c)| format!("{q}:{:?}/{:?}", c.status, plan(side, slot, *q).kind))
                .collect();
            panic!(
                "side {side} slot {slot}: {posted} posted, not every WR once in posting order: {}\ncontrol: {:?}",
                detail.join(" "),
                lock(&w.control_log)
            );
        }
        let statuses: Vec<WcStatus> = got.iter().map(|(_, c)| c.status).collect();
        assert!(
            status_run_ok(side, slot, &statuses),
            "side {side} slot {slot}: statuses {statuses:?}"
        );
        for (seq, c) in &got {
            if c.status != WcStatus::Success {
                continue;
            }
            let op = plan(side, slot, *seq);
            assert_eq!(c.opcode, op.kind.wc(), "{c:?}");
            let off = slot_off(slot, *seq);
            let id = wr_id(side, slot, *seq);
            match op.kind {
                Kind::Write | Kind::WriteImm => assert!(
                    peer.mem.bytes(WTGT + off, u64::from(op.len)) == payload(id, op.len),
                    "WRITE {id:#x}: the bytes at the peer differ"
                ),
                Kind::Read => {
                    assert_eq!(c.byte_len, op.len, "{c:?}");
                    let want: Vec<u8> = (op.read_off..op.read_off + u64::from(op.len))
                        .map(rsrc_byte)
                        .collect();
                    assert!(
                        s.mem.bytes(LOCAL + off, u64::from(op.len)) == want,
                        "READ {id:#x}: the bytes read differ"
                    );
                }
                Kind::FetchAdd => assert_eq!(c.byte_len, 8, "{c:?}"),
                Kind::Send | Kind::SendImm => {}
            }
        }
        // What the peer's partner QP sent that needs a receive here.
        let from = 1 - side;
        let mut got_seqs = delivered.remove(&slot).unwrap_or_default();
        assert!(
            got_seqs.windows(2).all(|p| p[0] < p[1]),
            "side {side} slot {slot}: messages received once each, in order: {got_seqs:?}"
        );
        let sender = lock(&peer.log).clone();
        let sender_ok: BTreeSet<u64> = sender
            .iter()
            .filter(|c| c.status == WcStatus::Success)
            .filter_map(|c| decode_wr_id(c.wr_id))
            .filter(|&(s2, k, _)| s2 == from && k == slot)
            .map(|(_, _, q)| q)
            .filter(|&q| plan(from, slot, q).kind.consumes_recv())
            .collect();
        let got_set: BTreeSet<u64> = got_seqs.drain(..).collect();
        if victim(slot) {
            // Every message its sender saw acknowledged was received (the
            // victim's completions were polled before its destroy).
            assert!(
                sender_ok.is_subset(&got_set),
                "side {side}: acknowledged but never received: {:?}",
                sender_ok.difference(&got_set).collect::<Vec<_>>()
            );
        } else {
            assert_eq!(
                got_set, sender_ok,
                "side {side} slot {slot}: every message the peer sent received exactly once"
            );
        }
    }
    // Every SRQ WQE completed once or is still queued.
    let posted = w.recv_posted[side].load(SeqCst);
    let queued = u64::from(s.srq_ring.queued());
    assert_eq!(
        posted - queued,
        recv_count,
        "side {side}: {posted} receives posted, {queued} queued, {recv_count} completed"
    );
}

/// The fetch-and-adds into each device's word: sorted by the value they
/// returned, each starts where the one before ended (each was executed
/// exactly once, none at the same time as another), the last ends at the
/// word's value.
fn check_atomics(w: &World) {
    for side in 0..2 {
        let from = 1 - side;
        let mut chain = Vec::new();
        for slot in (0..STABLE).chain([FRESH]) {
            for seq in 0..w.posted[from][slot].load(SeqCst) {
                let op = plan(from, slot, seq);
                if op.kind != Kind::FetchAdd {
                    continue;
                }
                let b = w.sides[from].mem.bytes(LOCAL + slot_off(slot, seq), 8);
                let original = u64::from_ne_bytes(b.try_into().expect("8 bytes"));
                chain.push((original, op.add));
            }
        }
        chain.sort_unstable();
        let mut at = 0;
        for (original, add) in &chain {
            assert_eq!(*original, at, "side {side}: fetch-and-add chain broken");
            at += add;
        }
        let word = w.sides[side].mem.bytes(COUNTER, 8);
        let word = u64::from_ne_bytes(word.try_into().expect("8 bytes"));
        assert_eq!(word, at, "side {side}: the word is the sum of the adds");
        assert!(chain.len() > 10, "side {side}: only {} adds", chain.len());
    }
}

fn check_counters(w: &World) {
    let [a, b] = [w.sides[0].rd().counters(), w.sides[1].rd().counters()];
    if w.cfg.mode != Mode::Reorder {
        // Each QP's packets arrive in order: a responder finds a PSN ahead
        // of the one it expects only behind an RNR NAK it sent (the
        // packets that followed the refused one), once per NAK at most.
        for (c, side) in [(&a, "A"), (&b, "B")] {
            assert!(
                c.qps.seq_naks_sent <= c.qps.rnr_naks_sent,
                "side {side}: packets out of order: {:?}",
                c.qps
            );
        }
    }
    for (x, y, what) in [(&a, &b, "A to B"), (&b, &a, "B to A")] {
        assert_eq!(
            x.packets_sent, y.packets_received,
            "{what}: every datagram handed over"
        );
        assert_eq!(x.bytes_sent, y.bytes_received, "{what}: bytes");
    }
    for (c, side) in [(&a, "A"), (&b, "B")] {
        // The device's counts and its QPs' (destroyed ones included) agree.
        assert_eq!(c.qps.packets_sent, c.packets_sent, "side {side}: sent");
        assert_eq!(
            c.qps.packets_received + c.drop_no_qp + c.drop_not_accepted,
            c.packets_received,
            "side {side}: every datagram taken by a QP or dropped: {c:?}"
        );
        let bad = [
            c.drop_malformed,
            c.drop_icrc,
            c.drop_wrong_transport,
            c.drop_wrong_peer,
            c.drop_pkey,
        ];
        assert_eq!(bad, [0; 5], "side {side}: {c:?}");
    }
    assert_eq!(w.in_flight.load(SeqCst), 0);
}

/// Each destroyed QP went to ERR on an SRQ: exactly one last-WQE event for it.
/// B's SRQ limit was armed: one limit event if it is disarmed now (the
/// event and the disarm are one step), none if still armed. Nothing else.
fn check_events(w: &World) {
    for (side, s) in w.sides.iter().enumerate() {
        let events = lock(&s.asyncs).clone();
        let retired: Vec<QpHandle> = lock(&w.retired)
            .iter()
            .filter(|(s2, _)| *s2 == side)
            .map(|(_, h)| *h)
            .collect();
        assert_eq!(retired.len(), 1 + NQ - CHURN, "side {side}: destroyed QPs");
        let limit = Event::Async {
            kind: AsyncEventKind::SrqLimitReached,
            element: EventElement::Srq(s.srq),
        };
        let count = |want: &Event| events.iter().filter(|e| *e == want).count();
        for h in &retired {
            let last_wqe = Event::Async {
                kind: AsyncEventKind::QpLastWqeReached,
                element: EventElement::Qp(*h),
            };
            assert_eq!(count(&last_wqe), 1, "side {side}: {events:?}");
        }
        let armed = s.rd().query_srq(s.srq).expect("query_srq").srq_limit;
        let limit_events = usize::from(side == 1 && armed == 0);
        assert_eq!(count(&limit), limit_events, "side {side}: {events:?}");
        let want = retired.len() + limit_events;
        assert_eq!(events.len(), want, "side {side}: {events:?}");
    }
}

fn report(w: &World, what: &str) {
    let c = [w.sides[0].rd().counters(), w.sides[1].rd().counters()];
    eprintln!(
        "{what}: {} + {} completions, {} + {} datagrams, retransmitted {} + {}, ACK timeouts {} + {}, seq NAKs {} + {}, RNR NAKs {} + {}, {} idle jumps and {} steps of the clock, {} completion events on B, SRQ limit of B {}; {:?}",
        lock(&w.sides[0].log).len(),
        lock(&w.sides[1].log).len(),
        c[0].packets_sent,
        c[1].packets_sent,
        c[0].qps.retransmitted_packets,
        c[1].qps.retransmitted_packets,
        c[0].qps.timeouts,
        c[1].qps.timeouts,
        c[0].qps.seq_naks_sent,
        c[1].qps.seq_naks_sent,
        c[0].qps.rnr_naks_sent,
        c[1].qps.rnr_naks_sent,
        w.timer_jumps.load(SeqCst),
        w.drifts.load(SeqCst),
        w.sides[1].completion_events.load(SeqCst),
        match w.sides[1].rd().query_srq(w.sides[1].srq).map(|a| a.srq_limit) {
            Ok(0) => "reached",
            _ => "not reached",
        },
        lock(&w.control_log),
    );
}

#[test]
fn engines_are_shared_between_threads() {
    fn sync<T: Send + Sync>() {}
    sync::<Engine>();
    sync::<PagedMemory>();
}

/// Serial hand-off per sending device (each QP's packets arrive in order),
/// several threads in every engine at once.
#[test]
fn many_threads_one_cq_one_srq_every_wr_exactly_once() {
    let w = run(Config {
        mode: Mode::Serial,
        per: 150,
    });
    report(&w, "serial");
    check(&w);
}

/// Two transmitting threads per device hand datagrams over themselves: a
/// QP's packets may overtake each other, and RC recovers (sequence NAKs,
/// duplicates, retransmission); completions stay exactly once.
#[test]
fn reordering_transmitters_every_wr_exactly_once() {
    let w = run(Config {
        mode: Mode::Reorder,
        per: 100,
    });
    report(&w, "reorder");
    check(&w);
}

/// Two transmitting threads per device with transmit claims: a QP's
/// packets never overtake each other (no sequence NAK but after an RNR
/// NAK), completions exactly once.
#[test]
fn claiming_transmitters_keep_each_qps_order() {
    let w = run(Config {
        mode: Mode::Claims,
        per: 150,
    });
    report(&w, "claims");
    check(&w);
}

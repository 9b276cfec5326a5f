//! The stress test's world: memory several threads reach at once, the workload, the two devices.

use super::*;

// ---- memory several threads reach at once ----

pub(crate) const PAGE: usize = 4096;

/// Registered memory for threads: one lock per 4 KiB page (a copy takes the
/// pages it spans one after another, as a real copy is not atomic either;
/// an 8-byte atomic lies within one page). Every fifth page touched, the
/// copying thread yields: the engine calls it inside a QP's turn (the QP's
/// lock held, and an SRQ's while a message is placed), so other threads
/// run in the middle of turns.
pub(crate) struct PagedMemory {
    pub(crate) base: u64,
    pub(crate) pages: Vec<Mutex<Vec<u8>>>,
    pub(crate) touched: AtomicUsize,
}

impl PagedMemory {
    pub(crate) fn new(base: u64, len: u64) -> PagedMemory {
        let n = (len as usize).div_ceil(PAGE);
        PagedMemory {
            base,
            pages: (0..n).map(|_| Mutex::new(vec![0; PAGE])).collect(),
            touched: AtomicUsize::new(0),
        }
    }

    /// Runs `f(page bytes, offset into the caller's buffer)` over the pages
    /// of `[addr, addr + len)`.
    pub(crate) fn each(&self, addr: u64, len: usize, mut f: impl FnMut(&mut [u8], usize)) {
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

    pub(crate) fn bytes(&self, addr: u64, len: u64) -> Vec<u8> {
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

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

// ---- the workload: what WR (side, slot, seq) is ----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    FetchAdd,
}

impl Kind {
    pub(crate) fn opcode(self) -> WrOpcode {
        match self {
            Kind::Send => WrOpcode::Send,
            Kind::SendImm => WrOpcode::SendWithImm,
            Kind::Write => WrOpcode::RdmaWrite,
            Kind::WriteImm => WrOpcode::RdmaWriteWithImm,
            Kind::Read => WrOpcode::RdmaRead,
            Kind::FetchAdd => WrOpcode::AtomicFetchAndAdd,
        }
    }

    pub(crate) fn wc(self) -> WcOpcode {
        match self {
            Kind::Send | Kind::SendImm => WcOpcode::Send,
            Kind::Write | Kind::WriteImm => WcOpcode::RdmaWrite,
            Kind::Read => WcOpcode::RdmaRead,
            Kind::FetchAdd => WcOpcode::FetchAdd,
        }
    }

    /// Consumes a receive WQE at the peer.
    pub(crate) fn consumes_recv(self) -> bool {
        matches!(self, Kind::Send | Kind::SendImm | Kind::WriteImm)
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Op {
    pub(crate) kind: Kind,
    pub(crate) len: u32,
    pub(crate) read_off: u64,
    pub(crate) add: u64,
}

pub(crate) fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

pub(crate) fn plan(side: usize, slot: usize, seq: u64) -> Op {
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

pub(crate) fn wr_id(side: usize, slot: usize, seq: u64) -> u64 {
    SEND_ID | (side as u64) << 40 | (slot as u64) << 32 | seq
}

/// (side, slot, seq) of a send WR id.
pub(crate) fn decode_wr_id(id: u64) -> Option<(usize, usize, u64)> {
    (id >> 48 == SEND_ID >> 48).then_some((
        (id >> 40 & 0xff) as usize,
        (id >> 32 & 0xff) as usize,
        id & 0xffff_ffff,
    ))
}

pub(crate) fn imm(side: usize, slot: usize, seq: u64) -> u32 {
    (side as u32) << 31 | (slot as u32) << 24 | seq as u32
}

pub(crate) fn decode_imm(v: u32) -> (usize, usize, u64) {
    (
        (v >> 31) as usize,
        (v >> 24 & 0x7f) as usize,
        u64::from(v & 0xff_ffff),
    )
}

pub(crate) fn recv_id(side: usize, idx: u64) -> u64 {
    RECV_ID | (side as u64) << 40 | idx
}

pub(crate) fn slot_off(slot: usize, seq: u64) -> u64 {
    (slot as u64 * PER_MAX + seq) * SLOT
}

/// The bytes WR `id` sends or writes: its id first (a SEND names itself in
/// the buffer it lands in), then a pattern of the id.
pub(crate) fn payload(id: u64, len: u32) -> Vec<u8> {
    let mut v: Vec<u8> = (0..u64::from(len))
        .map(|i| (i.wrapping_mul(29) ^ id.wrapping_mul(0x9e37) ^ (id >> 7)) as u8)
        .collect();
    v[..8].copy_from_slice(&id.to_le_bytes());
    v
}

pub(crate) fn rsrc_byte(i: u64) -> u8 {
    (i.wrapping_mul(13) ^ (i >> 8) ^ 0x5a) as u8
}

pub(crate) fn psn(side: usize, slot: usize) -> u32 {
    // Near the wrap, so the PSNs of every pair cross it.
    0xff_ffc0 + slot as u32 * 3 + side as u32
}

// ---- the devices ----

pub(crate) struct Side {
    pub(crate) e: RwLock<Engine>,
    pub(crate) mem: PagedMemory,
    pub(crate) ip: IpAddr,
    pub(crate) pd: PdHandle,
    pub(crate) cq: CqHandle,
    pub(crate) srq: SrqHandle,
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
    pub(crate) cq_shared: Arc<SharedCq>,
    pub(crate) srq_ring: Arc<RecvRing>,
    /// Every completion polled from the CQ, in CQ order (pollers append
    /// under the CQ's consumer lock).
    pub(crate) log: Mutex<Vec<WorkCompletion>>,
    /// Send completions in the log, per QP slot.
    pub(crate) completed: [AtomicU64; NQ],
    /// Async events taken from the engine.
    pub(crate) asyncs: Mutex<Vec<Event>>,
    pub(crate) completion_events: AtomicU64,
}

impl Side {
    pub(crate) fn new(ip: &str, channel: Option<u32>) -> Side {
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

    pub(crate) fn rd(&self) -> RwLockReadGuard<'_, Engine> {
        self.e.read().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn wr(&self) -> RwLockWriteGuard<'_, Engine> {
        self.e.write().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, 4791)
    }

    /// Polls what the CQ holds into the log (the consumer lock orders it).
    pub(crate) fn poll(&self) -> usize {
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
pub(crate) fn create_qp(s: &Side, e: &mut Engine) -> (QpHandle, u32) {
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

pub(crate) fn connect(
    e: &mut Engine,
    h: QpHandle,
    side: usize,
    slot: usize,
    peer_qpn: u32,
    peer: IpAddr,
) {
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
pub(crate) struct QpInfo {
    pub(crate) h: QpHandle,
    pub(crate) ring: Arc<SendRing>,
}

/// How datagrams go from one device to the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
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
    /// As `Claims`, and each poster also sends its own lane's datagrams
    /// after each post (claims reaching its lane only, crate `lanes`), as
    /// `sv_io`'s posting threads do; the two transmitting threads reach
    /// every lane, as its progress thread does. A QP sent for by either
    /// goes back to its home lane; no post is left behind.
    Lanes,
    /// As `Serial` (each device's datagrams go to the peer's two receiving
    /// threads, one FIFO per destination QP), its transmitting thread with
    /// claims; and each poster builds its QP's packets straight into the
    /// peer's FIFO after each post (`Engine::transmit_posted_through`;
    /// every other post, made straight into the send queue with them when
    /// it can be, `Engine::post_send_through`), and
    /// a receiving thread of the same-host kind builds the responses a
    /// datagram makes straight into the sender's FIFO
    /// (`Engine::handle_local_datagram` with room), as `sv_io`'s rings
    /// (proto::output::Room).
    Rooms,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Config {
    pub(crate) mode: Mode,
    /// WRs each QP posts.
    pub(crate) per: u64,
}

pub(crate) enum Wake {
    Event,
    Stop,
}

pub(crate) struct World {
    pub(crate) cfg: Config,
    pub(crate) sides: [Side; 2],
    pub(crate) now: AtomicU64,
    pub(crate) stop: AtomicBool,
    /// Datagrams taken from one engine and not yet handled by the other.
    pub(crate) in_flight: AtomicUsize,
    /// Transmitting threads inside a pass.
    pub(crate) busy: AtomicUsize,
    /// Lanes mode: datagrams the posters sent from their own lanes.
    pub(crate) own_lane_sent: AtomicUsize,
    /// Rooms mode: the FIFOs into each device's receiving threads (by
    /// destination QPN), and the datagrams built into them in place.
    pub(crate) inbox: [Mutex<Vec<mpsc::Sender<Vec<u8>>>>; 2],
    pub(crate) built_in_place: AtomicUsize,
    /// Rooms mode: posts made straight into the send queue.
    pub(crate) posted_through: AtomicUsize,
    /// Bumped by every step that moved something.
    pub(crate) activity: AtomicU64,
    pub(crate) qps: Mutex<[[Option<QpInfo>; NQ]; 2]>,
    /// Every QP's number (kept after a destroy).
    pub(crate) qpn: [[AtomicU32; NQ]; 2],
    pub(crate) posted: [[AtomicU64; NQ]; 2],
    pub(crate) stop_posting: [[AtomicBool; NQ]; 2],
    pub(crate) poster_done: [[AtomicBool; NQ]; 2],
    pub(crate) recv_posted: [AtomicU64; 2],
    pub(crate) control_done: AtomicBool,
    pub(crate) timer_jumps: AtomicU64,
    /// B's CQ poller sleeps on this until a completion event.
    pub(crate) wake_b: Mutex<Option<mpsc::Sender<Wake>>>,
    /// What the control thread did, for the report.
    pub(crate) control_log: Mutex<Vec<String>>,
    /// The QPs the control thread destroyed: (side, handle).
    pub(crate) retired: Mutex<Vec<(usize, QpHandle)>>,
    /// Clock steps taken while traffic flowed.
    pub(crate) drifts: AtomicU64,
}

impl World {
    pub(crate) fn new(cfg: Config) -> World {
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
            own_lane_sent: AtomicUsize::new(0),
            inbox: Default::default(),
            built_in_place: AtomicUsize::new(0),
            posted_through: AtomicUsize::new(0),
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
    pub(crate) fn make_pair(&self, slot: usize) {
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

    pub(crate) fn info(&self, side: usize, slot: usize) -> Option<QpInfo> {
        lock(&self.qps)[side][slot].clone()
    }

    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(SeqCst)
    }

    pub(crate) fn bump(&self) {
        self.activity.fetch_add(1, SeqCst);
    }

    /// Send completions of (side, slot) seen in the log.
    pub(crate) fn send_completions(&self, side: usize, slot: usize) -> u64 {
        self.sides[side].completed[slot].load(SeqCst)
    }

    /// Nothing moves and nothing waits to: no datagram between the devices,
    /// no transmit pass running, no QP scheduled, no post in a send ring.
    pub(crate) fn looks_idle(&self) -> bool {
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

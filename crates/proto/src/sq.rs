//! A QP's send ring: `ibv_post_send` without the engine.
//!
//! The application side posts send WQEs into fixed slots (room for
//! `max_send_sge` SGEs and `max_inline_data` inline bytes each, allocated
//! once, at the first post, for `max_send_wr` WRs: no allocation per post,
//! and none for a QP that never sends) and publishes them with a Release store of
//! `tail`; posting threads are serialised by a per-QP mutex. The engine, the
//! only consumer, moves posted WQEs into the QP's send queue
//! ([`crate::qp::wqe::SendQueue`]) at the start of every call it makes on the
//! QP (`Engine::drive`), and the QPs that were posted to are listed on the
//! device's [`PostedList`], so the progress thread visits exactly those.
//!
//! What a post checks without the engine is exactly what `check_post_send`
//! checks (it is the same call), against:
//! - the QP's state, `max_rd_atomic` and Q_Key, from a mirror the engine
//!   writes after every call that may change them (`Engine::sync`);
//! - the capacities and the port MTU, fixed at create;
//! - the depth: the WQEs in the ring *and* in the engine's send queue, as
//!   two counts that each have one writer, so neither side needs a locked
//!   instruction for them: `posted`, which the poster adds one to before it
//!   publishes (under the posting lock), and `left`, which the engine adds
//!   one to when a WQE leaves its queue (under the QP's lock; before the
//!   completion is pushed, so a poller that sees the completion can post
//!   again at once);
//! - a UD WR's address handle, through the device's [`AhView`]: a read-only
//!   copy of what a post needs of each AH (its PD and address vector), which
//!   the engine updates when an AH is created or destroyed. The destination is
//!   copied into the slot at post time, so destroying the AH afterwards
//!   changes nothing for the posted WR (as with hardware, whose WQE holds the
//!   address vector).
//!
//! Inline data is copied into the slot at post time: the caller may reuse
//! its buffer as soon as the post returns. A caller that must check the
//! inline bytes against the memory regions (the safe API) gathers them with
//! [`SendRing::gather_inline`], through the device's read-only
//! [`crate::mr::view::MrView`], still without the engine.
//!
//! A post in ERR or SQE completes at once with a flush (the engine's work):
//! the ring says [`SendPost::Flush`] and the caller goes to the engine. A
//! post that raced the QP's move to ERR, SQE or RESET (the mirror changed
//! after the check) says [`SendPost::Settle`]: the WQE is in the ring, and
//! the caller asks the engine to flush (ERR, SQE) or discard (RESET) it. The
//! poster stores `tail`, then (SeqCst fence) reads the state; the engine
//! stores the state, then (SeqCst fence) drains: one of the two sees the
//! other, so no WQE is left behind, and each accepted WR completes exactly
//! once, in posting order.
#![forbid(unsafe_code)]

use crate::handle::{AhHandle, PdHandle, QpHandle};
use crate::types::{Gid, QpState, QpType};
use crate::wr::{
    check_post_send, Disposition, ImmData, PostError, SendFlags, SendQueueCtx, SendWr, Sge,
    WrOpcode, WrTarget,
};
use lanes::LaneSet;
use std::collections::HashMap;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

/// Where a UD send goes, resolved from its address handle at post time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdDest {
    /// Destination GID.
    pub dgid: Gid,
    /// Local GID index.
    pub sgid_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Destination QPN.
    pub remote_qpn: u32,
    /// DETH Q_Key (already substituted when the WR's had bit 31 set).
    pub qkey: u32,
}

/// What a post needs of an address handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AhEntry {
    /// The AH's protection domain.
    pub pd: PdHandle,
    /// Destination GID.
    pub dgid: Gid,
    /// Local GID index.
    pub sgid_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
}

impl AhEntry {
    /// The destination of a UD WR through this AH; a Q_Key with bit 31 set
    /// means "use the QP's own" (IBA 10.2.5, rc-reliability.md §7).
    pub fn dest(&self, remote_qpn: u32, remote_qkey: u32, own_qkey: u32) -> UdDest {
        UdDest {
            dgid: self.dgid,
            sgid_index: self.sgid_index,
            hop_limit: self.hop_limit,
            traffic_class: self.traffic_class,
            remote_qpn: remote_qpn & crate::types::MASK_24,
            qkey: if remote_qkey & 0x8000_0000 != 0 {
                own_qkey
            } else {
                remote_qkey
            },
        }
    }
}

/// The device's address handles as posts see them: the engine writes (create,
/// destroy; rare), posters read (one read lock per UD post, never the engine
/// lock).
#[derive(Debug, Default)]
pub struct AhView {
    map: RwLock<HashMap<u64, AhEntry>>,
}

impl AhView {
    /// Engine: AH `h` exists from now on.
    pub fn insert(&self, h: AhHandle, e: AhEntry) {
        self.map
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(h.raw(), e);
    }

    /// Engine: AH `h` is destroyed.
    pub fn remove(&self, h: AhHandle) {
        self.map
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&h.raw());
    }

    /// What AH `h` is, if it is live.
    pub fn get(&self, h: AhHandle) -> Option<AhEntry> {
        self.map
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&h.raw())
            .copied()
    }
}

/// The QPs whose send rings were posted to since the engine last looked: the
/// engine drains exactly those (no scan of every QP). One list per lane
/// (crate `lanes`): a post lists its QP in the poster's lane, and the
/// engine drains the lanes a transmitting thread reaches.
#[derive(Debug, Default)]
pub struct PostedList {
    lanes: lanes::Striped<PostedLane>,
}

/// One lane's posted QPs, and whether it has any (read without the lock).
#[derive(Debug, Default)]
struct PostedLane {
    any: AtomicBool,
    qps: Mutex<Vec<QpHandle>>,
}

impl PostedList {
    fn push(&self, h: QpHandle) {
        let lane = self.lanes.mine();
        lane.qps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(h);
        lane.any.store(true, Release);
    }

    /// True when some QP may be listed in `lanes` (a [`PostedList::take`]
    /// would find it); false means `take` would append nothing.
    #[inline]
    pub fn any(&self, lanes: LaneSet) -> bool {
        lanes.from(0).any(|i| self.any_in(i))
    }

    /// [`PostedList::any`] for lane `i`.
    #[inline]
    pub fn any_in(&self, i: usize) -> bool {
        self.lanes.get(i).any.load(Acquire)
    }

    /// Engine: moves the QPs listed in `lanes` to `out` (appended, each
    /// with the lane it was listed in), the calling thread's lane first;
    /// cheap when none is.
    pub fn take(&self, lanes: LaneSet, out: &mut Vec<(usize, QpHandle)>) {
        for i in lanes.from(lanes::lane()) {
            let lane = self.lanes.get(i);
            if !lane.any.load(Acquire) {
                continue;
            }
            let mut qps = lane.qps.lock().unwrap_or_else(PoisonError::into_inner);
            lane.any.store(false, Relaxed);
            out.extend(qps.drain(..).map(|h| (i, h)));
        }
    }
}

/// What the send rings of one device share: the posted list, the AH and MR
/// views and the slot stores of destroyed QPs kept for new ones.
#[derive(Debug, Default)]
pub struct Device {
    /// The QPs posted to since the engine last looked.
    pub posted: PostedList,
    /// The address handles as posts see them.
    pub ahs: AhView,
    /// The memory regions as inline posts see them.
    pub mrs: crate::mr::view::MrView,
    pool: StorePool,
}

/// Stores of dropped rings, reused by rings of the same shape: creating and
/// destroying QPs over and over does not churn the allocator. Holds at most
/// [`POOL_BYTES`].
#[derive(Debug, Default)]
struct StorePool {
    stores: Mutex<(Vec<(Shape, Store)>, usize)>,
}

/// Bytes of slot stores a device keeps for reuse at most.
pub const POOL_BYTES: usize = 16 << 20;

/// What a store is sized by.
type Shape = (u32, u32, usize);

impl StorePool {
    fn take(&self, shape: Shape) -> Option<Store> {
        let mut g = self.stores.lock().unwrap_or_else(PoisonError::into_inner);
        let i = g.0.iter().rposition(|(sh, _)| *sh == shape)?;
        let (_, st) = g.0.swap_remove(i);
        g.1 -= st.bytes();
        Some(st)
    }

    fn put(&self, shape: Shape, st: Store) {
        let mut g = self.stores.lock().unwrap_or_else(PoisonError::into_inner);
        if g.1 + st.bytes() <= POOL_BYTES {
            g.1 += st.bytes();
            g.0.push((shape, st));
        }
    }
}

/// What a post on the send ring became.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendPost {
    /// In the ring; the engine takes it on its next call on the QP.
    /// `idle`: nothing else was outstanding on the send queue when it was
    /// posted (the poster may transmit it itself).
    Queued {
        /// The send queue held nothing else.
        idle: bool,
    },
    /// Not posted: the QP is in ERR or SQE, so the WR completes at once with
    /// `WR_FLUSH_ERR` — the engine's work (`Engine::post_send`).
    Flush,
    /// Posted, but the QP moved to ERR, SQE or RESET meanwhile: the engine
    /// must settle the ring (`Engine::settle_send`).
    Settle,
}

/// One posted WR's fixed part, as the engine reads it back (its SGEs and
/// inline bytes are in the ring's word arrays, at the slot's place).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Slot {
    wr_id: u64,
    opcode: WrOpcode,
    flags: SendFlags,
    imm: ImmData,
    target: WrTarget,
    ud: Option<UdDest>,
    xrc_srqn: u32,
    nsge: u32,
    /// `Some(n)`: an `IBV_SEND_INLINE` WR, its `n` bytes in the inline words.
    ninline: Option<u32>,
}

/// The engine's copy of a slot's SGEs and inline bytes while it drains
/// (sized with the slots; the engine is the only consumer).
#[derive(Debug, Default)]
struct Scratch {
    sges: Vec<Sge>,
    inline: Vec<u8>,
}

/// A posted WR the engine drains ([`SendRing::drain`]).
#[derive(Debug)]
pub struct Drained<'a> {
    /// The WR (its SGEs borrowed from the slot).
    pub wr: SendWr<'a>,
    /// Its inline bytes, copied at post time.
    pub inline: Option<&'a [u8]>,
    /// A UD WR's destination, resolved at post time.
    pub ud: Option<UdDest>,
    /// XRC_SEND: the remote XRC SRQ number.
    pub xrc_srqn: u32,
}

/// The mirror word: state (bits 0–7), max_rd_atomic (8–15), Q_Key (32–63).
fn mirror_word(state: QpState, max_rd_atomic: u8, qkey: u32) -> u64 {
    state as u64 | u64::from(max_rd_atomic) << 8 | u64::from(qkey) << 32
}

fn mirror_state(word: u64) -> QpState {
    QpState::from_raw((word & 0xff) as u32).unwrap_or(QpState::Err)
}

/// What a send ring is created with (the QP's fixed attributes).
#[derive(Debug, Clone, Copy)]
pub struct SendRingConfig {
    /// QP type.
    pub qp_type: QpType,
    /// The QP's protection domain.
    pub pd: PdHandle,
    /// `cap.max_send_wr`.
    pub max_send_wr: u32,
    /// `cap.max_send_sge`.
    pub max_send_sge: u32,
    /// `cap.max_inline_data`.
    pub max_inline_data: u32,
    /// The port's active MTU in bytes (UD messages).
    pub ud_mtu: u32,
}

/// The send ring of one QP. See the module doc.
pub struct SendRing {
    cfg: SendRingConfig,
    /// The QP's handle (set once the engine inserted the QP).
    handle: AtomicU64,
    /// The slots, made at the first post (a QP that never sends costs none).
    store: std::sync::OnceLock<Store>,
    /// Words of inline room per slot.
    inline_stride: usize,
    head: AtomicU64,
    tail: AtomicU64,
    /// WQEs posted (written under the posting lock only).
    posted: AtomicU32,
    /// WQEs that left the engine's send queue (written by the engine only,
    /// under the QP's lock). `posted - left` is the depth in use.
    left: AtomicU32,
    mirror: AtomicU64,
    post: Mutex<()>,
    /// On the device's posted list (cleared by the engine before it drains).
    listed: AtomicBool,
    dev: Arc<Device>,
}

impl Drop for SendRing {
    fn drop(&mut self) {
        if let Some(st) = self.store.take() {
            self.dev.pool.put(self.shape(), st);
        }
    }
}

#[derive(Debug)]
/// A ring's slots: a fixed part per WR, its SGEs and its inline bytes, all
/// sized at the ring's first post for `max_send_wr` WRs of `max_send_sge`
/// SGEs and `max_inline_data` bytes (no allocation after that).
struct Store {
    /// Each slot's fixed part, [`Slot::WORDS`] words a slot (`sq/slot.rs`).
    slots: Box<[AtomicU64]>,
    /// Two words per SGE, `max_send_sge` SGEs per slot.
    sge_words: Box<[AtomicU64]>,
    /// The inline bytes, `inline_stride` words per slot.
    inline_words: Box<[AtomicU64]>,
    scratch: Mutex<Scratch>,
}

impl Store {
    fn bytes(&self) -> usize {
        8 * (self.slots.len() + self.sge_words.len() + self.inline_words.len())
    }

    fn new(cfg: &SendRingConfig, inline_stride: usize) -> Store {
        let n = cfg.max_send_wr as usize;
        let words = |k: usize| (0..k).map(|_| AtomicU64::new(0)).collect();
        Store {
            slots: words(n * Slot::WORDS),
            sge_words: words(n * 2 * cfg.max_send_sge as usize),
            inline_words: words(n * inline_stride),
            scratch: Mutex::new(Scratch {
                sges: Vec::with_capacity(cfg.max_send_sge as usize),
                inline: Vec::with_capacity(8 * inline_stride),
            }),
        }
    }
}

/// A written, not yet published slot (the posting lock still held).
struct Written<'a> {
    _serial: MutexGuard<'a, ()>,
    tail: u64,
    idle: bool,
}

enum Write<'a> {
    Written(Written<'a>),
    Flush,
}

impl SendRing {
    /// A ring for `cfg`, the QP in RESET; posts are listed on the device's
    /// posted list, UD WRs resolve their AH through its AH view.
    pub fn new(cfg: SendRingConfig, dev: Arc<Device>) -> SendRing {
        // ATOMIC_WRITE hands its 8 bytes over as inline data, whatever
        // max_inline_data is.
        let inline_room = cfg.max_inline_data.max(8) as usize;
        let inline_stride = inline_room.div_ceil(8);
        SendRing {
            cfg,
            handle: AtomicU64::new(0),
            store: std::sync::OnceLock::new(),
            inline_stride,
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            posted: AtomicU32::new(0),
            left: AtomicU32::new(0),
            mirror: AtomicU64::new(mirror_word(QpState::Reset, 0, 0)),
            post: Mutex::new(()),
            listed: AtomicBool::new(false),
            dev,
        }
    }

    /// Engine: the QP's handle, once it is known.
    pub fn set_handle(&self, h: QpHandle) {
        self.handle.store(h.raw(), Relaxed);
    }

    /// The QP's handle.
    pub fn handle(&self) -> QpHandle {
        QpHandle::from_raw(self.handle.load(Relaxed))
    }

    /// The QP's type.
    pub fn qp_type(&self) -> QpType {
        self.cfg.qp_type
    }

    fn mirrored_state(&self) -> QpState {
        mirror_state(self.mirror.load(SeqCst))
    }

    /// The bytes of an `IBV_SEND_INLINE` WR, gathered into `out` through the
    /// memory-region check for the QP's PD (the device's [`crate::mr::view::MrView`],
    /// not the engine): what to pass to [`SendRing::post`] as `inline`.
    pub fn gather_inline(
        &self,
        mem: &dyn crate::memory::Memory,
        sges: &[crate::wr::Sge],
        out: &mut Vec<u8>,
    ) -> Result<(), PostError> {
        self.dev
            .mrs
            .gather(self.cfg.pd, mem, sges, out)
            .map_err(|error| PostError::InlineData { error })
    }

    /// `ibv_post_send` for one WR, from any thread, without the engine.
    /// `inline` holds the bytes of an `IBV_SEND_INLINE` WR (gathered by the
    /// caller; copied into the slot); `xrc_srqn` is an XRC_SEND WR's remote
    /// SRQ number (ignored by other types).
    pub fn post(
        &self,
        wr: &SendWr<'_>,
        inline: Option<&[u8]>,
        xrc_srqn: u32,
    ) -> Result<SendPost, PostError> {
        match self.write(wr, inline, xrc_srqn)? {
            Write::Written(w) => Ok(self.publish(w)),
            Write::Flush => Ok(SendPost::Flush),
        }
    }

    /// A post the engine takes straight into the QP's send queue, with no
    /// slot ([`crate::Engine::post_send_through`]): checked as
    /// [`SendRing::post`] checks, against the QP's `state` and
    /// `max_rd_atomic` as the engine holds them (under the QP's lock, so
    /// they cannot change meanwhile), and counted in `queued` as a post is.
    /// Only while no other thread posts and nothing waits in the ring, so
    /// that the WQE comes after every WR posted before it: `Ok(None)`
    /// otherwise, and for a WR to be flushed (the ring's post takes those).
    /// The guard keeps other posters waiting until the WQE is in the queue:
    /// theirs come after it.
    pub fn direct(
        &self,
        wr: &SendWr<'_>,
        state: QpState,
        max_rd_atomic: u8,
    ) -> Result<Option<MutexGuard<'_, ()>>, PostError> {
        let Ok(serial) = self.post.try_lock() else {
            return Ok(None);
        };
        if self.pending() != 0 {
            return Ok(None);
        }
        let ctx = SendQueueCtx {
            qp_type: self.cfg.qp_type,
            state,
            pd: self.cfg.pd,
            max_send_wr: self.cfg.max_send_wr,
            max_send_sge: self.cfg.max_send_sge,
            max_inline_data: self.cfg.max_inline_data,
            max_rd_atomic,
            ud_mtu: self.cfg.ud_mtu,
            outstanding: self.queued(),
        };
        // A connected QP's WR names no address handle.
        if check_post_send(&ctx, wr, |_| None)? == Disposition::Flushed {
            return Ok(None);
        }
        self.count_post();
        Ok(Some(serial))
    }

    /// The first half of a post: checks, counts and writes the slot.
    fn write(
        &self,
        wr: &SendWr<'_>,
        inline: Option<&[u8]>,
        xrc_srqn: u32,
    ) -> Result<Write<'_>, PostError> {
        let serial = self.post.lock().unwrap_or_else(PoisonError::into_inner);
        let word = self.mirror.load(SeqCst);
        // Only the engine changes the count meanwhile, and only downwards.
        let outstanding = self.queued();
        let ctx = SendQueueCtx {
            qp_type: self.cfg.qp_type,
            state: mirror_state(word),
            pd: self.cfg.pd,
            max_send_wr: self.cfg.max_send_wr,
            max_send_sge: self.cfg.max_send_sge,
            max_inline_data: self.cfg.max_inline_data,
            max_rd_atomic: (word >> 8) as u8,
            ud_mtu: self.cfg.ud_mtu,
            outstanding,
        };
        // The AH is looked up once: what the check saw is what is copied.
        let ah = std::cell::Cell::new(None);
        let disposition = check_post_send(&ctx, wr, |h| {
            ah.set(self.dev.ahs.get(h));
            ah.get().map(|a: AhEntry| a.pd)
        })?;
        if disposition == Disposition::Flushed {
            return Ok(Write::Flush);
        }
        let ud = match (wr.target, ah.get()) {
            (WrTarget::Ud(t), Some(a)) => {
                Some(a.dest(t.remote_qpn, t.remote_qkey, (word >> 32) as u32))
            }
            _ => None,
        };
        let inline = wr
            .flags
            .contains(SendFlags::INLINE)
            .then(|| inline.unwrap_or(&[]));
        let tail = self.tail.load(Relaxed);
        // queued ≥ WQEs in the ring at all times: count first, then publish.
        // The slot is free: queued < max_send_wr (checked), and every WQE
        // between head and tail is counted.
        self.count_post();
        let st = self.store.get_or_init(|| {
            let pooled = self.dev.pool.take(self.shape());
            pooled.unwrap_or_else(|| Store::new(&self.cfg, self.inline_stride))
        });
        let i = self.index(tail);
        let sw = 2 * self.cfg.max_send_sge as usize * i;
        for (k, sge) in wr.sg_list.iter().enumerate() {
            st.sge_words[sw + 2 * k].store(sge.addr, Relaxed);
            let len_key = u64::from(sge.length) | u64::from(sge.lkey) << 32;
            st.sge_words[sw + 2 * k + 1].store(len_key, Relaxed);
        }
        let ninline = inline.map(|bytes| {
            // check_inline / check_atomic held the length to the room.
            let n = bytes.len().min(8 * self.inline_stride);
            let iw = self.inline_stride * i;
            for (k, chunk) in bytes[..n].chunks(8).enumerate() {
                let mut word = [0u8; 8];
                word[..chunk.len()].copy_from_slice(chunk);
                st.inline_words[iw + k].store(u64::from_le_bytes(word), Relaxed);
            }
            n as u32
        });
        let slot = Slot {
            wr_id: wr.wr_id,
            opcode: wr.opcode,
            flags: wr.flags,
            imm: wr.imm_data,
            target: wr.target,
            ud,
            xrc_srqn: xrc_srqn & crate::types::MASK_24,
            nsge: wr.sg_list.len() as u32,
            ninline,
        };
        let words = &st.slots[Slot::WORDS * i..Slot::WORDS * (i + 1)];
        slot.encode(|k, w| words[k].store(w, Relaxed));
        Ok(Write::Written(Written {
            _serial: serial,
            tail: tail + 1,
            idle: outstanding == 0,
        }))
    }

    fn shape(&self) -> Shape {
        (
            self.cfg.max_send_wr,
            self.cfg.max_send_sge,
            self.inline_stride,
        )
    }

    /// The slot of ring position `pos`.
    fn index(&self, pos: u64) -> usize {
        (pos % u64::from(self.cfg.max_send_wr.max(1))) as usize
    }

    /// The second half: publishes the slot, lists the QP, then looks at the
    /// state again.
    fn publish(&self, w: Written<'_>) -> SendPost {
        self.tail.store(w.tail, Release);
        // Pairs with the fences in `set_mirror` and `unlist` (no WQE left
        // behind): the engine unlists, then looks at the tail; this stores
        // the tail, then looks at the mark. One sees the other's store, so
        // a mark still set means the drain after it takes this WQE.
        fence(SeqCst);
        let state = self.mirrored_state();
        if !self.listed.load(Relaxed) && !self.listed.swap(true, AcqRel) {
            self.dev.posted.push(self.handle());
        }
        match state {
            QpState::Err | QpState::Sqe | QpState::Reset => SendPost::Settle,
            _ => SendPost::Queued { idle: w.idle },
        }
    }

    /// Engine: the QP's state, `max_rd_atomic` and Q_Key, after any call
    /// that may have changed them. Returns true if the ring must be settled
    /// now (the QP moved to ERR, SQE or RESET and WQEs are in the ring).
    /// Costs one load when nothing changed.
    pub fn set_mirror(&self, state: QpState, max_rd_atomic: u8, qkey: u32) -> bool {
        let word = mirror_word(state, max_rd_atomic, qkey);
        let old = self.mirror.load(Relaxed);
        if old == word {
            return false;
        }
        self.mirror.store(word, SeqCst);
        // Pairs with the fence in `publish` (no WQE left behind).
        fence(SeqCst);
        mirror_state(old) != state
            && matches!(state, QpState::Err | QpState::Sqe | QpState::Reset)
            && self.pending() > 0
    }

    /// WQEs in the ring, not yet taken by the engine.
    pub fn pending(&self) -> u64 {
        let head = self.head.load(Relaxed);
        self.tail.load(Acquire).saturating_sub(head)
    }

    /// WQEs posted and not yet retired (the depth check).
    pub fn queued(&self) -> u32 {
        // `left` first: it never passes the `posted` of an earlier moment.
        let left = self.left.load(Acquire);
        self.posted.load(Acquire).wrapping_sub(left)
    }

    /// One more WQE posted; the caller holds the posting lock (the count's
    /// only writers).
    fn count_post(&self) {
        let n = self.posted.load(Relaxed);
        self.posted.store(n.wrapping_add(1), Release);
    }

    /// Engine: the QP was listed as posted to; clears the mark before the
    /// engine drains, so a later post lists it again (the fence pairs with
    /// the poster's in `publish`).
    pub fn unlist(&self) {
        self.listed.store(false, Relaxed);
        fence(SeqCst);
    }

    /// Engine: takes each posted WR in order.
    pub fn drain(&self, mut f: impl FnMut(Drained<'_>)) {
        let (head, tail) = (self.head.load(Relaxed), self.tail.load(Acquire));
        if head == tail {
            return;
        }
        // Posted to: the slots exist (made before the first tail store).
        let Some(st) = self.store.get() else { return };
        let mut scratch = st.scratch.lock().unwrap_or_else(PoisonError::into_inner);
        let Scratch { sges, inline } = &mut *scratch;
        for pos in head..tail {
            let i = self.index(pos);
            let words = &st.slots[Slot::WORDS * i..Slot::WORDS * (i + 1)];
            let slot = Slot::decode(|k| words[k].load(Relaxed));
            let sw = 2 * self.cfg.max_send_sge as usize * i;
            sges.clear();
            sges.extend((0..slot.nsge as usize).map(|k| {
                let len_key = st.sge_words[sw + 2 * k + 1].load(Relaxed);
                Sge {
                    addr: st.sge_words[sw + 2 * k].load(Relaxed),
                    length: len_key as u32,
                    lkey: (len_key >> 32) as u32,
                }
            }));
            inline.clear();
            if let Some(n) = slot.ninline {
                let iw = self.inline_stride * i;
                let words = &st.inline_words[iw..iw + (n as usize).div_ceil(8)];
                for w in words {
                    inline.extend_from_slice(&w.load(Relaxed).to_le_bytes());
                }
                inline.truncate(n as usize);
            }
            f(Drained {
                wr: SendWr {
                    wr_id: slot.wr_id,
                    opcode: slot.opcode,
                    flags: slot.flags,
                    sg_list: sges,
                    imm_data: slot.imm,
                    target: slot.target,
                },
                inline: slot.ninline.map(|_| &inline[..]),
                ud: slot.ud,
                xrc_srqn: slot.xrc_srqn,
            });
        }
        self.head.store(tail, Release);
    }

    /// Engine: a WR queued without the ring (RAW_PACKET QPs post under the
    /// engine): counted as a ring post is, under the posting lock.
    pub fn count_direct(&self) {
        let _serial = self.post.lock().unwrap_or_else(PoisonError::into_inner);
        self.count_post();
    }

    /// Engine (under the QP's lock, the count's only writer): `n` WQEs left
    /// the send queue (retired, flushed, discarded).
    pub fn taken(&self, n: u32) {
        debug_assert!(self.queued() >= n, "send WQE count below zero");
        let left = self.left.load(Relaxed);
        self.left.store(left.wrapping_add(n), Release);
    }
}

impl std::fmt::Debug for SendRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendRing")
            .field("depth", &self.cfg.max_send_wr)
            .field("pending", &self.pending())
            .field("queued", &self.queued())
            .finish_non_exhaustive()
    }
}

mod slot;
#[cfg(test)]
mod tests;

//! One device's object tables and the verbs that create, change, query and
//! destroy objects.
//!
//! The engine owns every object of a device: contexts, PDs, MRs, CQs, SRQs, AHs
//! and QPs, each in a [`Table`] and named by a typed [`Handle`]. It keeps a use
//! count per object, so destroying a PD, CQ or SRQ that something still uses is
//! refused with `EBUSY`, as in Linux. Closing a context destroys everything it
//! created, as the kernel does when a verbs file is closed.

use crate::ah::Ah;
use crate::cq::Cq;
use crate::device::{DeviceConfig, DeviceInfo, QpnSpace, FIRST_QPN};
use crate::error::{Error, ObjectKind};
use crate::handle::{kind, Handle};
use crate::lock::{Lock, ReadMostly};
use crate::mask::AttrMask;
use crate::mr;
use crate::mr::MrTable;
use crate::output::Event;
use crate::qp::create::{self, QpRequest};
use crate::qp::modify::{ModifyEnv, Transition};
use crate::qp::QpControl;
use crate::sched::TimerHeap;
use crate::srq::Srq;
use crate::table::{QpnMap, Table};
use crate::types::{QpAttr, QpCap, QpState, QpType};
use std::sync::atomic::{AtomicU64, Ordering::Release};

mod memory;
mod queues;
mod sink;
mod turn;
mod xrc;

/// How many objects of each kind use an object.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Users([u32; 7]);

impl Users {
    fn add(&mut self, k: ObjectKind) {
        self.0[k as usize] += 1;
    }
    fn remove(&mut self, k: ObjectKind) {
        self.0[k as usize] = self.0[k as usize].saturating_sub(1);
    }
    /// Total number of users.
    pub fn total(&self) -> usize {
        self.0.iter().map(|n| *n as usize).sum()
    }
    fn busy(&self, kind: ObjectKind) -> Result<(), Error> {
        const KINDS: [ObjectKind; 7] = [
            ObjectKind::Context,
            ObjectKind::Pd,
            ObjectKind::Mr,
            ObjectKind::Cq,
            ObjectKind::Srq,
            ObjectKind::Ah,
            ObjectKind::Qp,
        ];
        match KINDS.iter().zip(self.0).find(|(_, n)| *n > 0) {
            Some((user_kind, _)) => Err(Error::Busy {
                kind,
                users: self.total(),
                user_kind: *user_kind,
            }),
            None => Ok(()),
        }
    }
}

/// An open device context.
#[derive(Debug, Default)]
pub struct Ctx {
    users: Users,
}

/// A protection domain.
#[derive(Debug)]
pub struct Pd {
    /// Owning context.
    pub ctx: CtxHandle,
    users: Users,
}

pub use crate::handle::{
    AhHandle, CqHandle, CtxHandle, MrHandle, MwHandle, PdHandle, QpHandle, SrqHandle,
};
pub use crate::qp::actor::Qp;

/// A QP locked for its turn.
pub(crate) type QpGuard<'a> = std::sync::MutexGuard<'a, Qp>;

/// A CQ with its use count.
#[derive(Debug)]
pub struct CqEntry {
    /// The CQ.
    pub cq: Cq,
    /// Its completions (the producer's side: the QPs that complete into it
    /// take turns under this lock).
    pub ring: Lock<crate::cq::CqRing>,
    /// Completion channel that gets its events.
    pub channel: Option<u32>,
    users: Users,
}

/// An SRQ with its use count.
#[derive(Debug)]
pub struct SrqEntry {
    /// The SRQ (its armed limit changes on the data path).
    pub srq: Lock<Srq>,
    /// Its receive WQEs (a QP holds this lock while it places a message
    /// into one; lock order: the QP, this, the SRQ above, a CQ).
    pub queue: Lock<crate::qp::wqe::RecvQueue>,
    users: Users,
}

/// Everything `create_qp` needs besides the request itself.
#[derive(Debug, Clone, Copy)]
pub struct QpCreate {
    /// The PD.
    pub pd: PdHandle,
    /// Send CQ (required).
    pub send_cq: Option<CqHandle>,
    /// Receive CQ (required).
    pub recv_cq: Option<CqHandle>,
    /// SRQ.
    pub srq: Option<SrqHandle>,
    /// Type, capacities, ex fields.
    pub req: QpRequest,
    /// Signal every send WR.
    pub sq_sig_all: bool,
}

/// What `create_qp` returns.
#[derive(Debug, Clone, Copy)]
pub struct QpCreated {
    /// The handle.
    pub handle: QpHandle,
    /// The QP number.
    pub qpn: u32,
    /// Its type.
    pub qp_type: QpType,
    /// Capacities granted.
    pub cap: QpCap,
}

/// The `init_attr` half of `ibv_query_qp`.
#[derive(Debug, Clone, Copy)]
pub struct QpInitInfo {
    /// QP type.
    pub qp_type: QpType,
    /// Send CQ.
    pub send_cq: CqHandle,
    /// Receive CQ.
    pub recv_cq: CqHandle,
    /// SRQ.
    pub srq: Option<SrqHandle>,
    /// Capacities.
    pub cap: QpCap,
    /// Signal all send WRs.
    pub sq_sig_all: bool,
}

/// The device's scheduler: which QP sends next, whose timer runs next.
#[derive(Debug, Default)]
pub(crate) struct Sched {
    /// Each QP's next deadline.
    pub(crate) timers: TimerHeap,
}

impl Sched {
    /// Sets QP `h`'s deadline, and the earliest of all where
    /// [`Engine::poll_timeout`] reads it without this lock.
    pub(crate) fn set_timer(&mut self, h: QpHandle, deadline: Option<u64>, first: &AtomicU64) {
        self.timers.set(h, deadline);
        first.store(self.timers.first(), Release);
    }

    /// Takes the QPs due at `now` off the heap (into `out`), as
    /// [`Sched::set_timer`] mirrors.
    pub(crate) fn pop_due(&mut self, now: u64, out: &mut Vec<QpHandle>, first: &AtomicU64) {
        self.timers.pop_due(now, out);
        first.store(self.timers.first(), Release);
    }
}

/// Device-wide data-path state: the scheduler, the driver's event queue,
/// the gather buffer and the device counters. Each part the data path
/// changes has its own lock (spec/concurrency.md §2), none held across a
/// QP's turn.
#[derive(Debug)]
pub struct DeviceData {
    /// The scheduler's timers (taken after a QP's lock, never before).
    pub(crate) sched: Lock<Sched>,
    /// QPs that may have something to send, round robin, one queue per
    /// lane (crate `lanes`): a QP goes into the queue of the thread whose
    /// call made it ready, and a transmitting thread takes its own lane's
    /// first (crate::sched::Reach), so a thread's QPs stay on its core.
    pub(crate) ready: lanes::Striped<crate::lock::Queue<QpHandle>>,
    /// RAW_PACKET QPs that may have a frame to send (datapath/raw.rs).
    pub(crate) raw_ready: crate::lock::Queue<QpHandle>,
    /// The earliest deadline of the scheduler's heap (`u64::MAX`: none),
    /// written under its lock, read without it ([`Engine::poll_timeout`]:
    /// every transmit and poll asks).
    pub(crate) timer_first: AtomicU64,
    /// Events for the driver.
    pub(crate) events: crate::lock::Queue<Event>,
    /// QPs whose deadline passed, in the order their timers run (reused).
    pub(crate) due: Lock<Vec<QpHandle>>,
    /// The UDP source port packets leave from (the driver's socket).
    pub(crate) local_port: u16,
    /// Gather buffer for the inline data of the safe API's posts (reused).
    pub(crate) inline_buf: Vec<u8>,
    /// Counters (written by every thread that sends or receives: each
    /// thread in its lane, away from the others and from what the data
    /// path only reads).
    pub(crate) counters: lanes::Tally<crate::output::DeviceCounterCells>,
    /// The peers the driver reaches with intact datagrams (crate::intact;
    /// read for every packet, written when the set changes).
    pub(crate) intact: crate::lock::Padded<crate::intact::IntactPeers>,
    /// Counters of destroyed QPs.
    pub(crate) retired: crate::qp::data::QpCounters,
    /// The longest frame a RAW_PACKET send may build.
    pub(crate) raw_frame_max: u32,
    /// The raw path's counters.
    pub(crate) raw_counters: Lock<crate::frame::RawCounters>,
    /// The latest time the driver told ([`Engine::set_now`]) each lane's
    /// threads: the completions they make are stamped with it (written at
    /// every driver call, so in the caller's lane).
    pub(crate) now: lanes::Striped<std::sync::atomic::AtomicU64>,
    /// Receive completions made so far ([`Engine::receives_completed`]:
    /// the lanes' sum).
    pub(crate) receives: lanes::Striped<std::sync::atomic::AtomicU64>,
    /// The RDMA WRITEs (without immediate) QPs took whole, and when the
    /// latest came ([`Engine::writes_taken`]: the lanes' sum and latest).
    pub(crate) writes: lanes::Striped<[std::sync::atomic::AtomicU64; 2]>,
}

impl Default for DeviceData {
    fn default() -> Self {
        DeviceData {
            sched: Lock::default(),
            ready: Default::default(),
            raw_ready: Default::default(),
            timer_first: AtomicU64::new(u64::MAX),
            events: Default::default(),
            due: Lock::default(),
            local_port: crate::output::ROCE_PORT,
            inline_buf: Vec::new(),
            counters: lanes::Tally::from_fn(crate::output::DeviceCounterCells::new),
            retired: Default::default(),
            raw_frame_max: crate::frame::DEFAULT_FRAME_MAX,
            raw_counters: Default::default(),
            now: Default::default(),
            intact: Default::default(),
            receives: Default::default(),
            writes: Default::default(),
        }
    }
}

/// The engine's side of a QP's [`Sink`]: its CQs, SRQs and event queue,
/// each locked only while used, except the queue of the SRQ the QP took a
/// receive WQE from, held until the QP's turn ends.
pub(crate) struct EngineSink<'a> {
    cqs: &'a Table<CqEntry, kind::Cq>,
    srqs: &'a Table<SrqEntry, kind::Srq>,
    srq_nums: crate::xrcd::SrqNumbers,
    events: &'a crate::lock::Queue<Event>,
    receives: &'a std::sync::atomic::AtomicU64,
    qp: QpHandle,
    now: u64,
    /// The SRQ queue this turn locked.
    held: Option<(
        SrqHandle,
        std::sync::MutexGuard<'a, crate::qp::wqe::RecvQueue>,
    )>,
}

/// One device's objects.
pub struct Engine {
    pub(crate) info: DeviceInfo,
    ctxs: Table<Ctx, kind::Ctx>,
    pds: Table<Pd, kind::Pd>,
    pub(crate) mrs: MrTable,
    /// Memory windows: changed by the data path too (binds and invalidations
    /// run in a QP's turn, which reads the region table meanwhile).
    pub(crate) mws: ReadMostly<mr::mw::MwTable>,
    pub(crate) cqs: Table<CqEntry, kind::Cq>,
    pub(crate) srqs: Table<SrqEntry, kind::Srq>,
    pub(crate) ahs: Table<Ah, kind::Ah>,
    /// Each QP under its own lock: a QP's turn holds it (spec/concurrency.md §2).
    pub(crate) qps: Table<Lock<Qp>, kind::Qp>,
    qpns: QpnMap,
    next_qpn: u32,
    qpn_space: QpnSpace,
    /// How SRQs are numbered (follows `qpn_space`, xrcd.rs).
    srq_nums: crate::xrcd::SrqNumbers,
    mr_serial: u32,
    /// Device-wide data-path state (schedule, events, counters).
    pub(crate) dev: DeviceData,
    /// CM hook: QP1 and the connection manager (gsi.rs, spec/cm.md §7).
    pub(crate) gsi: Lock<crate::gsi::Gsi>,
    /// The CM may have a MAD to send (set whenever the CM was reached; the
    /// transmit turn clears it when none waits): spares every transmit the
    /// CM's lock.
    pub(crate) gsi_dirty: std::sync::atomic::AtomicBool,
    /// A thread's [`crate::sched::TxClaims`] hold the CM's MADs.
    pub(crate) gsi_claimed: std::sync::atomic::AtomicBool,
    /// The CM was reached since [`Engine::after_cm`] last looked.
    pub(crate) cm_touched: std::sync::atomic::AtomicBool,
    /// The CM's earliest deadline as last read (`u64::MAX`: none).
    pub(crate) cm_first: AtomicU64,
    /// The CM was reached since `cm_first` was read: the next
    /// [`Engine::poll_timeout`] reads it again (gsi.rs).
    pub(crate) cm_stale: std::sync::atomic::AtomicBool,
    /// Multicast attachments (mcast.rs, datapath/mcast.rs).
    pub(crate) groups: crate::mcast::Groups,
    /// XRC domains and their opens (engine/xrc.rs).
    xrc: crate::xrcd::XrcState,
    /// What the send rings share (proto::sq): the QPs posted to since the
    /// engine last looked, the address handles as posts see them, the slot
    /// stores kept for reuse.
    pub(crate) rings: std::sync::Arc<crate::sq::Device>,
    /// The posted QPs being drained (reused).
    posted_scratch: lanes::Striped<Lock<Vec<(usize, QpHandle)>>>,
}

fn missing<T>(kind: ObjectKind, h: Handle<T>) -> Error {
    Error::NoSuchObject {
        kind,
        handle: h.raw(),
    }
}

impl Engine {
    /// A device with no objects.
    pub fn new(config: &DeviceConfig) -> Engine {
        let info = DeviceInfo::new(config);
        let a = &info.attr;
        // CM hook: the device's GSI endpoint (gsi.rs).
        let gsi_gid = info
            .gids
            .first()
            .copied()
            .unwrap_or(crate::types::Gid::ZERO);
        let gsi = crate::gsi::Gsi::new(gsi_gid, a.node_guid, a.node_guid);
        Engine {
            gsi: Lock::new(gsi),
            gsi_dirty: Default::default(),
            cm_touched: Default::default(),
            cm_first: AtomicU64::new(u64::MAX),
            cm_stale: std::sync::atomic::AtomicBool::new(true),
            gsi_claimed: Default::default(),
            groups: crate::mcast::Groups::default(),
            xrc: crate::xrcd::XrcState::default(),
            rings: Default::default(),
            posted_scratch: Default::default(),
            ctxs: Table::new(usize::MAX),
            pds: Table::new(a.max_pd as usize),
            mrs: Table::new(a.max_mr as usize),
            mws: ReadMostly::new(Table::new(a.max_mw as usize)),
            cqs: Table::new(a.max_cq as usize),
            srqs: Table::new(a.max_srq as usize),
            ahs: Table::new(a.max_ah as usize),
            qps: Table::new(a.max_qp as usize),
            info,
            qpns: QpnMap::default(),
            next_qpn: FIRST_QPN,
            qpn_space: QpnSpace::ALL,
            srq_nums: crate::xrcd::SrqNumbers::of_qpn_space(
                QpnSpace::ALL.first,
                QpnSpace::ALL.last,
            ),
            mr_serial: 0,
            dev: DeviceData::default(),
        }
    }

    /// The device description (query verbs).
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The port's width and speed (what its link runs at, measured by the
    /// driver: the engine has no I/O).
    pub fn set_link_rate(&mut self, rate: crate::device::LinkRate) {
        self.info.port.set_link(rate);
    }

    /// Opens a context.
    pub fn open_context(&mut self) -> CtxHandle {
        self.ctxs
            .insert(Ctx::default())
            .expect("context table has no limit")
    }

    /// Closes a context, destroying every object it created (QPs first).
    pub fn close_context(&mut self, ctx: CtxHandle) -> Result<(), Error> {
        self.ctxs
            .get(ctx)
            .ok_or_else(|| missing(ObjectKind::Context, ctx))?;
        self.xrc_close_context_qps(ctx)?;
        let pds: Vec<PdHandle> = self
            .pds
            .iter()
            .filter(|(_, p)| p.ctx == ctx)
            .map(|(h, _)| h)
            .collect();
        let in_pd = |pd: &PdHandle| pds.contains(pd);
        let qps: Vec<_> = self
            .qps
            .iter()
            .filter(|(_, q)| in_pd(&q.lock().pd))
            .map(|(h, _)| h)
            .collect();
        for h in qps {
            // Closing the file detaches, as the kernel's uverbs cleanup does.
            self.groups.forget_qp(h);
            self.destroy_qp(h)?;
        }
        let ahs: Vec<_> = self
            .ahs
            .iter()
            .filter(|(_, a)| in_pd(&a.pd))
            .map(|(h, _)| h)
            .collect();
        for h in ahs {
            self.destroy_ah(h)?;
        }
        self.mws.get_mut().retain_by(|w| !in_pd(&w.pd));
        let mrs: Vec<_> = self
            .mrs
            .iter()
            .filter(|(_, m)| in_pd(&m.pd))
            .map(|(h, _)| h)
            .collect();
        for h in mrs {
            self.dereg_mr(h)?;
        }
        let srqs: Vec<_> = self
            .srqs
            .iter()
            .filter(|(_, s)| in_pd(&s.srq.lock().pd))
            .map(|(h, _)| h)
            .collect();
        for h in srqs {
            self.destroy_srq(h)?;
        }
        let cqs: Vec<_> = self
            .cqs
            .iter()
            .filter(|(_, c)| c.cq.ctx == ctx)
            .map(|(h, _)| h)
            .collect();
        for h in cqs {
            self.destroy_cq(h)?;
        }
        for h in pds {
            self.dealloc_pd(h)?;
        }
        self.xrc_close_context(ctx);
        self.ctxs.remove(ctx);
        Ok(())
    }

    // ---- protection domains ----

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&mut self, ctx: CtxHandle) -> Result<PdHandle, Error> {
        let c = self
            .ctxs
            .get_mut(ctx)
            .ok_or_else(|| missing(ObjectKind::Context, ctx))?;
        c.users.add(ObjectKind::Pd);
        let limit = u64::from(self.info.attr.max_pd);
        self.pds
            .insert(Pd {
                ctx,
                users: Users::default(),
            })
            .ok_or(Error::TooMany {
                kind: ObjectKind::Pd,
                limit,
            })
    }

    /// `ibv_dealloc_pd`: `EBUSY` while MRs, SRQs, AHs or QPs use it.
    pub fn dealloc_pd(&mut self, pd: PdHandle) -> Result<(), Error> {
        let p = self
            .pds
            .get(pd)
            .ok_or_else(|| missing(ObjectKind::Pd, pd))?;
        p.users.busy(ObjectKind::Pd)?;
        let count = self
            .mws
            .get_mut()
            .iter()
            .filter(|(_, w)| w.pd == pd)
            .count();
        if count > 0 {
            return Err(mr::mw::MwError::PdHasWindows { count }.into());
        }
        let ctx = p.ctx;
        self.pds.remove(pd);
        if let Some(c) = self.ctxs.get_mut(ctx) {
            c.users.remove(ObjectKind::Pd);
        }
        Ok(())
    }

    fn pd_use(&mut self, pd: PdHandle, user: ObjectKind, add: bool) -> Result<(), Error> {
        let p = self
            .pds
            .get_mut(pd)
            .ok_or_else(|| missing(ObjectKind::Pd, pd))?;
        if add {
            p.users.add(user)
        } else {
            p.users.remove(user)
        }
        Ok(())
    }

    /// The context a PD belongs to.
    pub fn pd_ctx(&self, pd: PdHandle) -> Result<CtxHandle, Error> {
        self.pds
            .get(pd)
            .map(|p| p.ctx)
            .ok_or_else(|| missing(ObjectKind::Pd, pd))
    }

    // ---- queue pairs ----

    /// `ibv_create_qp` / `ibv_create_qp_ex`. The QP starts in RESET.
    pub fn create_qp(&mut self, c: &QpCreate) -> Result<QpCreated, Error> {
        let ctx = self.pd_ctx(c.pd)?;
        // The SRQ handle, not the request's flag, says whether there is an SRQ: a
        // disagreeing flag must not let UC + SRQ through or keep receive capacities.
        // spec/xrc.md §2: an XRC_SEND QP has no receive side (uverbs ignores its
        // SRQ and receive CQ); it counts its send CQ once.
        let xrc_send = c.req.qp_type == QpType::XrcSend.raw();
        let c = &QpCreate {
            srq: c.srq.filter(|_| !xrc_send),
            recv_cq: if xrc_send { c.send_cq } else { c.recv_cq },
            ..*c
        };
        let req = QpRequest {
            has_srq: c.srq.is_some(),
            ..c.req
        };
        let (qp_type, cap) = create::check(&req, &self.info.attr)?;
        if qp_type == QpType::XrcRecv {
            return Err(crate::xrcd::XrcError::RecvQpWithoutXrcd.into());
        }
        let (Some(send_cq), Some(recv_cq)) = (c.send_cq, c.recv_cq) else {
            return Err(crate::error::InvalidArg::QpCqMissing.into());
        };
        for h in [send_cq, recv_cq] {
            if self.cq(h)?.ctx != ctx {
                return Err(Error::Mismatch {
                    what: "create_qp: a CQ belongs to a different context than the PD",
                });
            }
        }
        if let Some(s) = c.srq {
            let srq_pd = self
                .srqs
                .get(s)
                .ok_or_else(|| missing(ObjectKind::Srq, s))?
                .srq
                .lock()
                .pd;
            // uverbs looks the SRQ up in the caller's own context; a foreign one would
            // also make close_context of its owner fail half-way (EBUSY).
            if self.pd_ctx(srq_pd)? != ctx {
                return Err(Error::Mismatch {
                    what: "create_qp: the SRQ belongs to a different context than the PD",
                });
            }
        }
        let qpn = self.alloc_qpn()?;
        let ctl = QpControl::new(qp_type, qpn, cap, c.sq_sig_all, c.srq.is_some());
        let ring = self.new_send_ring(qp_type, c.pd, cap);
        let mut qp = Qp::new(c.pd, (send_cq, recv_cq), c.srq, ctl, ring.clone());
        if req.comp_mask & create::comp_mask::MAX_TSO_HEADER != 0 {
            qp.max_tso_header = req.max_tso_header; // spec/raw-packet.md §4
        }
        let limit = u64::from(self.info.attr.max_qp);
        let handle = self.qps.insert(Lock::new(qp)).ok_or(Error::TooMany {
            kind: ObjectKind::Qp,
            limit,
        })?;
        ring.set_handle(handle);
        self.qpns.insert(qpn, handle);
        self.qp_uses(handle, true);
        Ok(QpCreated {
            handle,
            qpn,
            qp_type,
            cap,
        })
    }

    /// A QP's send ring (proto::sq), sized for its capacities.
    pub(crate) fn new_send_ring(
        &self,
        qp_type: QpType,
        pd: PdHandle,
        cap: crate::types::QpCap,
    ) -> std::sync::Arc<crate::sq::SendRing> {
        let cfg = crate::sq::SendRingConfig {
            qp_type,
            pd,
            max_send_wr: cap.max_send_wr,
            max_send_sge: cap.max_send_sge,
            max_inline_data: cap.max_inline_data,
            ud_mtu: self.info.port.active_mtu.bytes(),
        };
        let ring = crate::sq::SendRing::new(cfg, self.rings.clone());
        std::sync::Arc::new(ring)
    }

    /// Adds or drops the use counts a QP holds on its PD, CQs and SRQ.
    fn qp_uses(&mut self, h: QpHandle, add: bool) {
        let Some(q) = self.qps.get_mut(h).map(Lock::get_mut) else {
            return;
        };
        let (pd, cqs, srq) = (q.pd, [q.send_cq, q.recv_cq], q.srq);
        let step = |u: &mut Users| {
            if add {
                u.add(ObjectKind::Qp)
            } else {
                u.remove(ObjectKind::Qp)
            }
        };
        if let Some(p) = self.pds.get_mut(pd) {
            step(&mut p.users);
        }
        // A QP using one CQ for both queues counts once.
        let cqs = if cqs[0] == cqs[1] {
            &cqs[..1]
        } else {
            &cqs[..]
        };
        for c in cqs {
            if let Some(c) = self.cqs.get_mut(*c) {
                step(&mut c.users);
            }
        }
        if let Some(s) = srq.and_then(|s| self.srqs.get_mut(s)) {
            step(&mut s.users);
        }
    }

    /// How this engine numbers its SRQs: within its QPN space's high bits,
    /// so the numbers of the processes of one address differ (xrcd.rs).
    pub(crate) fn srq_numbers(&self) -> crate::xrcd::SrqNumbers {
        self.srq_nums
    }

    /// Hands out QPNs from `space` only (this process's share of an address),
    /// the first at `start` (or the space's first if `start` is outside it);
    /// call before the first QP is created.
    pub fn set_qpn_space(&mut self, space: QpnSpace, start: u32) {
        self.qpn_space = space;
        self.srq_nums = crate::xrcd::SrqNumbers::of_qpn_space(space.first, space.last);
        // SRQ numbers stay within the space's high bits (spec/xrc-processes.md).
        self.info.attr.max_srq = self.info.attr.max_srq.min(self.srq_nums.span - 1);
        self.next_qpn = if space.contains(start) {
            start
        } else {
            space.first
        };
        // ibv_query_device reports what this device can really hand out.
        self.info.attr.max_qp = self.info.attr.max_qp.min(space.len());
    }

    /// Next free QPN of the QPN space (by default 24 bits, never 0 or 1
    /// (SMI/GSI), never the multicast QPN).
    fn alloc_qpn(&mut self) -> Result<u32, Error> {
        for _ in 0..self.qpn_space.len() {
            let qpn = self.next_qpn;
            self.next_qpn = self.qpn_space.after(qpn);
            if !self.qpns.contains_key(&qpn) {
                return Ok(qpn);
            }
        }
        let limit = u64::from(self.info.attr.max_qp);
        Err(Error::TooMany {
            kind: ObjectKind::Qp,
            limit,
        })
    }

    /// `ibv_modify_qp`. All-or-nothing: on `Err` the QP is unchanged.
    pub fn modify_qp(
        &mut self,
        h: QpHandle,
        attr: &QpAttr,
        mask: AttrMask,
    ) -> Result<Transition, Error> {
        let q = self
            .qps
            .get_mut(h)
            .map(Lock::get_mut)
            .ok_or_else(|| missing(ObjectKind::Qp, h))?;
        let env = ModifyEnv {
            dev: &self.info,
            privileged: false,
        };
        let t = q.ctl.modify(attr, mask, env)?;
        self.drive_ctl(h, |q, sink| q.on_modify(t, mask, sink));
        if t.to == QpState::Reset {
            self.purge_qp_completions(h);
        }
        Ok(t)
    }

    /// `ibv_query_qp`: the attributes, which of them are valid, and `init_attr`.
    pub fn query_qp(&self, h: QpHandle) -> Result<(QpAttr, AttrMask, QpInitInfo), Error> {
        let q = self.qp(h)?;
        let (mut attr, valid) = q.ctl.query();
        // qp-query.md §3.1: sq_psn / rq_psn are the live next-to-send and expected PSNs.
        if valid.contains(AttrMask::SQ_PSN) {
            attr.sq_psn = q.sq_psn().get();
        }
        if valid.contains(AttrMask::RQ_PSN) && q.ctl.qp_type() != QpType::Ud {
            attr.rq_psn = q.epsn().get();
        }
        let init = QpInitInfo {
            qp_type: q.ctl.qp_type(),
            send_cq: q.send_cq,
            recv_cq: q.recv_cq,
            srq: q.srq,
            cap: q.ctl.cap(),
            sq_sig_all: q.ctl.sq_sig_all(),
        };
        Ok((attr, valid, init))
    }

    /// A state change the device makes by itself, as the data path reports it:
    /// to ERR after a fatal error, to SQE after a send error on a UC/UD QP (see
    /// [`QpControl::device_move`]). No modify-table check applies: SQE can only be
    /// entered this way. Returns the previous state.
    pub fn qp_device_move(
        &mut self,
        h: QpHandle,
        to: crate::types::QpState,
    ) -> Result<crate::types::QpState, Error> {
        let mut q = self.qp(h)?;
        let from = q.ctl.device_move(to);
        self.sync(h, &mut q);
        Ok(from)
    }

    /// A QP.
    pub fn qp(&self, h: QpHandle) -> Result<QpGuard<'_>, Error> {
        self.qps
            .get(h)
            .map(Lock::lock)
            .ok_or_else(|| missing(ObjectKind::Qp, h))
    }

    /// A QP, through `&mut` (no lock taken).
    pub(crate) fn qp_mut(&mut self, h: QpHandle) -> Result<&mut Qp, Error> {
        self.qps
            .get_mut(h)
            .map(Lock::get_mut)
            .ok_or_else(|| missing(ObjectKind::Qp, h))
    }

    /// The QP with number `qpn`.
    pub fn qp_by_qpn(&self, qpn: u32) -> Option<QpHandle> {
        self.qpns.get(&qpn).copied()
    }

    /// `ibv_destroy_qp`: allowed in any state; queued WRs are discarded without
    /// completions, and the completions of the QP still in its CQs leave them,
    /// as rdma-core's hardware providers clean the CQs at destroy
    /// (spec/qp-state-machine.md §8). `EBUSY` while the QP is attached to a
    /// multicast group (ibv_destroy_qp(3); kernel `ib_destroy_qp_user`: `usecnt`).
    ///
    /// Of an XRC_RECV QP that several handles hold, the latest handle goes
    /// ([`Engine::destroy_xrc_qp_handle`] names which).
    pub fn destroy_qp(&mut self, h: QpHandle) -> Result<(), Error> {
        self.qp_mut(h)?;
        if self.xrc_qp_release(h, None) {
            return Ok(());
        }
        self.destroy_qp_now(h)
    }

    /// [`Engine::destroy_qp`] once no other handle holds the QP.
    pub(crate) fn destroy_qp_now(&mut self, h: QpHandle) -> Result<(), Error> {
        let qpn = self.qp(h)?.ctl.qpn();
        if let Some((groups, first)) = self.groups.of_qp(h) {
            let e = crate::mcast::McastError::Attached { qpn, groups, first };
            return Err(e.into());
        }
        self.purge_qp_completions(h);
        self.qp_uses(h, false);
        // Type 2 windows bound through this QP become free: no QP can reach them.
        for (_, w) in self.mws.get_mut().iter_mut() {
            if w.binding.is_some_and(|b| b.qp == Some(h)) {
                w.binding = None;
            }
        }
        let q = self.qps.remove(h).expect("checked above").into_inner();
        self.qpns.remove(&q.ctl.qpn());
        let first = &self.dev.timer_first;
        self.dev.sched.get_mut().set_timer(h, None, first);
        self.dev.retired.add(q.counters());
        if let Some(link) = q.xrc {
            self.xrc_qp_gone(link);
        }
        Ok(())
    }

    /// Completions that signaled send WRs still queued on QPs feeding `cq`
    /// will add (each completes exactly once: success, error or flush).
    pub(crate) fn owed_completions(&self, cq: CqHandle) -> usize {
        self.qps
            .iter()
            .map(|(_, q)| q.lock())
            .filter(|q| q.send_cq == cq)
            .map(|q| q.signaled_sends())
            .sum()
    }

    /// A QP moved to RESET: its completions leave its CQs, as rdma-core's
    /// hardware providers do (mlx4/mlx5/mthca/hns `*_modify_qp` →
    /// `*_cq_clean`; spec/qp-state-machine.md §6.1).
    pub(crate) fn purge_qp_completions(&mut self, h: QpHandle) {
        let Some(q) = self.qps.get_mut(h).map(Lock::get_mut) else {
            return;
        };
        let (qpn, send, recv) = (q.ctl.qpn(), q.send_cq, q.recv_cq);
        for c in [send, recv] {
            if let Some(e) = self.cqs.get_mut(c) {
                e.ring.get_mut().purge_qp(qpn);
            }
        }
    }

    /// Number of live objects of each table (for leak checks).
    pub fn object_counts(&self) -> [usize; 7] {
        [
            self.ctxs.len(),
            self.pds.len(),
            self.mrs.len(),
            self.cqs.len(),
            self.srqs.len(),
            self.ahs.len(),
            self.qps.len(),
        ]
    }
}

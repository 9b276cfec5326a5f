//! One open device: the protocol engine driven by the I/O layer's progress
//! thread on a UDP socket bound to the device's address, port 4791.

use crate::mem::RawMemory;
use proto::datapath::{Event, EventElement};
use proto::device::DeviceConfig;
use proto::device::QpnSpace;
use proto::Engine;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, PoisonError};
use sv_io::share::{self, Slot};
use sv_io::{AsyncEvent, Driver, DriverOptions, Nanos, Notification, Transmit};

/// An RSS QP's spreading of its frames (rss.rs): the WQs' QPNs in table
/// order, the Toeplitz key and the hashed fields.
pub(crate) struct RssDispatch {
    pub(crate) wqs: Vec<u32>,
    pub(crate) key: Vec<u8>,
    pub(crate) fields: u64,
    pub(crate) log_size: u32,
}

/// The engine as the driver sees it.
pub(crate) struct DeviceEngine {
    pub(crate) engine: Engine,
    mem: RawMemory,
    /// RSS QPs by QPN (changed under `Driver::with` only).
    pub(crate) rss: std::collections::HashMap<u32, RssDispatch>,
    /// Where the CM's events go (cm.rs).
    pub(crate) cm_hub: std::sync::Arc<crate::cm::channel::Hub>,
    /// Copies of an async event for its further owners (an XRC_RECV QP's
    /// event goes to every context holding it), handed out first; locked
    /// only while `fanout_waiting` says it holds some (rarely: this is on
    /// every transmit's way).
    fanout: std::sync::Mutex<Vec<Notification>>,
    fanout_waiting: std::sync::atomic::AtomicBool,
}

impl DeviceEngine {
    /// The CM's events, if a step reached it (cm.rs).
    fn cm_events(&self, now: Nanos) {
        self.engine.after_cm(|cm| self.cm_hub.drain(now, cm));
    }

    /// A same-host receive at `now` (`f` the engine's entry), its answers
    /// offered the driver's room `reply` as the engine asks for one; then
    /// the CM's events.
    fn taken(
        &self,
        now: Nanos,
        reply: Option<&mut dyn sv_io::Room>,
        f: impl FnOnce(&Engine, &RawMemory, Option<&mut dyn proto::output::Room>),
    ) {
        self.engine.set_now(now);
        let mut via = reply.map(RoomVia);
        f(&self.engine, &self.mem, via.as_mut().map(|v| v as _));
        self.cm_events(now);
    }
}

impl DeviceEngine {
    /// The engine's next datagram by `poll`, as the driver sees it.
    fn next_datagram(
        &self,
        now: Nanos,
        buf: &mut [u8],
        claims: &mut proto::datapath::TxClaims,
        poll: impl FnOnce(
            &proto::Engine,
            u64,
            &dyn proto::memory::Memory,
            &mut [u8],
            &mut proto::datapath::TxClaims,
        ) -> Option<proto::output::Transmit>,
    ) -> Option<Transmit> {
        self.engine.set_now(now);
        poll(&self.engine, now, &self.mem, buf, claims).map(transmit)
    }
}

impl sv_io::Engine for DeviceEngine {
    type Claims = proto::datapath::TxClaims;
    const CLAIMS_ORDER: bool = true;

    fn handle_datagram(&self, now: Nanos, from: SocketAddr, to: SocketAddr, payload: &[u8]) {
        self.engine.set_now(now);
        self.engine
            .handle_datagram(now, from, to, payload, &self.mem);
        self.cm_events(now);
    }

    fn handle_batch(
        &self,
        now: Nanos,
        from: SocketAddr,
        to: SocketAddr,
        datagrams: &mut dyn Iterator<Item = &[u8]>,
    ) {
        self.engine.set_now(now);
        self.engine
            .handle_batch(now, (from, to), datagrams, &self.mem);
        self.cm_events(now);
    }

    fn handle_local_datagram(
        &self,
        now: Nanos,
        from: SocketAddr,
        to: SocketAddr,
        payload: &[u8],
        reply: Option<&mut dyn sv_io::Room>,
    ) {
        self.taken(now, reply, |e, mem, respond| {
            e.handle_local_datagram(now, from, to, payload, mem, respond);
        });
    }

    fn handle_local_batch(
        &self,
        now: Nanos,
        from: SocketAddr,
        to: SocketAddr,
        datagrams: &mut dyn Iterator<Item = &[u8]>,
        reply: Option<&mut dyn sv_io::Room>,
    ) {
        self.taken(now, reply, |e, mem, respond| {
            e.handle_local_batch(now, (from, to), datagrams, mem, respond);
        });
    }

    fn handle_own_datagram(&self, now: Nanos, local: SocketAddr, payload: &[u8], checked: bool) {
        self.engine.set_now(now);
        self.engine
            .handle_own_datagram(now, (local, local), payload, &self.mem, checked);
        self.cm_events(now);
    }

    fn handle_local_run(
        &self,
        now: Nanos,
        from: SocketAddr,
        to: SocketAddr,
        payload: &[u8],
        segments: [u8; 3],
        reply: Option<&mut dyn sv_io::Room>,
    ) {
        self.taken(now, reply, |e, mem, respond| {
            e.handle_local_run(now, (from, to), payload, segments, mem, respond);
        });
    }

    fn set_intact_peers(&self, peers: &[(std::net::IpAddr, u32, u32)]) {
        let peers: Vec<_> = peers
            .iter()
            .map(|&(ip, first, last)| proto::intact::IntactPeer {
                ip,
                qpns: (first, last),
            })
            .collect();
        self.engine.set_intact_peers(&peers);
    }

    fn poll_transmit(&self, now: Nanos, buf: &mut [u8]) -> Option<Transmit> {
        // The same turn, its claims let go at once (proto's poll_transmit).
        let mut claims = Self::Claims::default();
        let t = self.poll_transmit_claimed(now, buf, &mut claims);
        self.engine.release_claims(&mut claims);
        t
    }

    fn poll_transmit_claimed(
        &self,
        now: Nanos,
        buf: &mut [u8],
        claims: &mut Self::Claims,
    ) -> Option<Transmit> {
        self.next_datagram(now, buf, claims, proto::Engine::poll_transmit_claimed)
    }

    fn poll_transmit_run(
        &self,
        now: Nanos,
        buf: &mut [u8],
        claims: &mut Self::Claims,
    ) -> Option<Transmit> {
        self.next_datagram(now, buf, claims, proto::Engine::poll_transmit_run)
    }

    fn poll_transmit_burst(
        &self,
        now: Nanos,
        claims: &mut Self::Claims,
        burst: &mut dyn sv_io::Burst,
        max: usize,
    ) -> usize {
        self.engine.set_now(now);
        let mut via = BurstVia(burst);
        self.engine
            .poll_transmit_burst(now, &self.mem, claims, &mut via, max)
    }

    fn poll_transmit_posted(
        &self,
        qp: u64,
        now: Nanos,
        buf: &mut [u8],
        claims: &mut Self::Claims,
    ) -> Option<Transmit> {
        let h = proto::handle::QpHandle::from_raw(qp);
        self.next_datagram(now, buf, claims, |e, now, mem, buf, claims| {
            e.poll_transmit_posted(h, now, mem, buf, claims)
        })
    }

    fn transmit_posted_through(
        &self,
        qp: u64,
        now: Nanos,
        room: &mut dyn sv_io::Room,
    ) -> Option<usize> {
        self.engine.set_now(now);
        let h = proto::handle::QpHandle::from_raw(qp);
        self.engine
            .transmit_posted_through(h, now, &self.mem, &mut RoomVia(room))
    }

    fn transmit_ready_through(
        &self,
        now: Nanos,
        claims: &mut Self::Claims,
        room: &mut dyn sv_io::Room,
        budget: usize,
    ) -> usize {
        self.engine.set_now(now);
        self.engine
            .transmit_ready_through(now, &self.mem, claims, &mut RoomVia(room), budget)
    }

    fn release_claims(&self, claims: &mut Self::Claims) -> bool {
        self.engine.release_claims(claims)
    }

    fn set_reach(&self, claims: &mut Self::Claims, lanes: sv_io::LaneSet) {
        claims.reach = lanes;
    }

    fn busy_lanes(&self) -> sv_io::LaneSet {
        self.engine.busy_lanes()
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        self.engine.poll_timeout()
    }

    fn has_work(&self) -> bool {
        self.engine.has_driver_work() || self.fanout_waiting.load(SeqCst)
    }

    fn has_work_in(&self, lanes: sv_io::LaneSet) -> bool {
        self.engine.has_driver_work_in(lanes) || self.fanout_waiting.load(SeqCst)
    }

    fn receives_completed(&self) -> u64 {
        self.engine.receives_completed()
    }

    fn writes_taken(&self) -> (u64, u64) {
        self.engine.writes_taken()
    }

    fn poll_frame(&self, now: Nanos, buf: &mut [u8]) -> Option<(u32, usize)> {
        self.engine.set_now(now);
        let f = self.engine.poll_frame(&self.mem, buf)?;
        Some((f.qpn, f.len))
    }

    fn handle_frame(&self, now: Nanos, qpn: u32, frame: &[u8]) {
        self.engine.set_now(now);
        // An RSS QP's frame goes to the WQ its hash picks (rss.rs).
        let qpn = match self.rss.get(&qpn) {
            Some(d) => {
                let mut scratch = Vec::new();
                let i = proto::rss::pick(&d.key, d.fields, d.log_size, frame, &mut scratch);
                d.wqs.get(i).copied().unwrap_or(qpn)
            }
            None => qpn,
        };
        self.engine.handle_frame(qpn, frame, &self.mem);
    }

    fn handle_timeout(&self, now: Nanos) {
        self.engine.set_now(now);
        self.engine.handle_timeout(now);
        self.cm_events(now);
    }

    fn poll_notification(&self) -> Option<Notification> {
        if self.fanout_waiting.load(SeqCst) {
            let mut fanout = self.fanout.lock().unwrap_or_else(PoisonError::into_inner);
            let n = fanout.pop();
            self.fanout_waiting.store(!fanout.is_empty(), SeqCst);
            if n.is_some() {
                return n;
            }
        }
        loop {
            match self.engine.poll_event()? {
                Event::Completion { cq, channel } => {
                    return Some(Notification::Completion {
                        channel,
                        cq: cq.raw(),
                    })
                }
                Event::Async { kind, element } => {
                    // An object gone since takes its events with it.
                    let owners = self.engine.event_owners(element);
                    let element = match element {
                        EventElement::Qp(h) => h.raw(),
                        EventElement::Cq(h) => h.raw(),
                        EventElement::Srq(h) => h.raw(),
                    };
                    let mut events = owners.iter().map(|ctx| {
                        Notification::Async(AsyncEvent {
                            kind: kind as u32,
                            element,
                            ctx: ctx.raw(),
                        })
                    });
                    let Some(first) = events.next() else {
                        continue;
                    };
                    let rest: Vec<_> = events.collect();
                    if !rest.is_empty() {
                        let mut fanout = self.fanout.lock().unwrap_or_else(PoisonError::into_inner);
                        fanout.extend(rest);
                        self.fanout_waiting.store(true, SeqCst);
                    }
                    return Some(first);
                }
            }
        }
    }
}

/// The port's width and speed: those of the link under the device's first
/// address (`proto::device::LinkRate`, as Soft-RoCE reports its net device's).
pub(crate) fn link_rate(config: &DeviceConfig) -> proto::device::LinkRate {
    let mbps = config
        .addrs
        .first()
        .and_then(|ip| sv_io::host::link_speed_mbps(*ip));
    proto::device::LinkRate::from_eth_mbps(mbps)
}

/// The state one device shares among the contexts of a process.
pub(crate) struct Shared {
    pub(crate) driver: Driver<DeviceEngine>,
    /// Device memory allocated, in bytes (`proto::dm::MAX_DM_SIZE` at most).
    pub(crate) dm_in_use: std::sync::atomic::AtomicU64,
    /// This process's slot of the address (its CM listener registry too).
    pub(crate) slot: Arc<Slot>,
}

impl Shared {
    /// Starts the device: binds `addrs[0]`:4791 and starts its progress thread
    /// with `opts` (faults, capture, busy-poll window).
    pub(crate) fn start(config: &DeviceConfig, opts: &DriverOptions) -> std::io::Result<Shared> {
        let ip = config.addrs.first().copied().ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the device has no address",
            )
        })?;
        let bind = SocketAddr::new(ip, proto::datapath::ROCE_PORT);
        // Every process on the address shares port 4791 (sv_io::share): a slot
        // of the address gives this one its QPNs and its place in the group.
        let slot = Slot::claim(ip).map_err(|e| std::io::Error::other(e.to_string()))?;
        let (first, last) = share::qpn_range(slot.index());
        let slot = Arc::new(slot);
        let opts = DriverOptions {
            thread_name: format!("{}-progress", config.name),
            share: Some(slot.clone()),
            ..opts.clone()
        };
        // A device closed a moment ago (its last context dropped on another
        // thread) may still be releasing the port: retry briefly, bounded.
        let mut tries = 0;
        loop {
            let mut engine = Engine::new(config);
            engine.set_link_rate(link_rate(config));
            engine.set_local_port(bind.port());
            engine.set_qpn_space(QpnSpace { first, last }, qpn_start(first, last));
            // Comm IDs and TIDs differ per process and per start (cm.rs).
            engine.reseed_cm(crate::cm::common::seed());
            // Comm IDs carry the slot, so MADs naming them find this process
            // on a shared address (spec/cm.md §8).
            engine
                .set_cm_slot(slot.index())
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            let de = DeviceEngine {
                engine,
                mem: RawMemory,
                rss: Default::default(),
                cm_hub: Default::default(),
                fanout: Default::default(),
                fanout_waiting: Default::default(),
            };
            match Driver::start(de, bind, opts.clone()) {
                Ok(driver) => {
                    return Ok(Shared {
                        driver,
                        dm_in_use: std::sync::atomic::AtomicU64::new(0),
                        slot,
                    })
                }
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tries < 50 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Runs `f` on the engine (under the engine lock).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Engine) -> R) -> R {
        // Completions an API call makes (flushes) carry the device's time too.
        let now = self.driver.now();
        self.driver.with(|d| {
            d.engine.set_now(now);
            f(&mut d.engine)
        })
    }

    /// Runs `f` on the engine with the memory accessor.
    pub(crate) fn with_mem<R>(&self, f: impl FnOnce(&mut Engine, &RawMemory) -> R) -> R {
        let now = self.driver.now();
        self.driver.with(|d| {
            d.engine.set_now(now);
            f(&mut d.engine, &d.mem)
        })
    }

    /// Runs `f` on the driver's view of the engine (RSS dispatch tables).
    pub(crate) fn with_device<R>(&self, f: impl FnOnce(&mut DeviceEngine) -> R) -> R {
        self.driver.with(f)
    }

    /// Wakes the progress thread after new work was posted.
    pub(crate) fn doorbell(&self) {
        self.driver.doorbell();
    }

    /// `ibv_post_send` of one WR on QP `qp` (sv_io's `Driver::post`): to an
    /// idle queue straight into its send queue and its peer's same-host
    /// ring if it can (proto's `Engine::post_send_through`), else on its
    /// send ring `ring` without the engine lock (proto::sq), after which
    /// this thread transmits it itself if it can, or the progress thread
    /// takes it from there. Only a post in ERR or SQE (an immediate flush
    /// completion) or one that raced a move to ERR/SQE/RESET takes the
    /// engine lock.
    pub(crate) fn post_send(
        &self,
        qp: proto::handle::QpHandle,
        ring: &proto::sq::SendRing,
        wr: &proto::wr::SendWr<'_>,
        inline: Option<&[u8]>,
        xrc_srqn: u32,
    ) -> Result<(), proto::wr::PostError> {
        use proto::sq::SendPost;
        let direct = |d: &DeviceEngine, now: Nanos, room: &mut dyn sv_io::Room| {
            d.engine.set_now(now);
            let way = &mut RoomVia(room);
            d.engine.post_send_through(qp, wr, inline, now, &d.mem, way)
        };
        let on_ring = || match ring.post(wr, inline, xrc_srqn)? {
            SendPost::Queued { idle } => Ok(Some(idle)),
            SendPost::Flush => {
                self.with(|e| e.post_send_xrc(qp, wr, inline, xrc_srqn))?;
                self.doorbell();
                Ok(None)
            }
            SendPost::Settle => {
                self.with(|e| e.settle_send(qp))?;
                self.doorbell();
                Ok(None)
            }
        };
        let idle = ring.queued() == 0;
        self.driver.post(idle, qp.raw(), direct, on_ring)
    }
}

/// The driver's room, as the engine asks for it.
struct RoomVia<'a>(&'a mut dyn sv_io::Room);

impl proto::output::Room for RoomVia<'_> {
    fn room(&mut self, to: SocketAddr, qpn: u32) -> Option<&mut [u8]> {
        self.0.room(to, qpn)
    }

    fn publish(&mut self, t: &proto::output::Transmit) {
        self.0.publish(&transmit(*t));
    }
}

/// The driver's transmit batch as the engine's [`proto::output::Burst`].
struct BurstVia<'a>(&'a mut dyn sv_io::Burst);

impl proto::output::Burst for BurstVia<'_> {
    fn buffer(&mut self) -> Option<&mut [u8]> {
        self.0.buffer()
    }

    fn built(&mut self, t: &proto::output::Transmit) {
        self.0.built(&transmit(*t));
    }
}

/// The driver's view of an engine's datagram (the run's segments as the
/// three bytes the ring carries).
fn transmit(t: proto::output::Transmit) -> Transmit {
    Transmit {
        to: t.to,
        len: t.len,
        segments: t.segments.map(proto::run::Segments::to_tag),
    }
}

/// Where a process starts handing out its slot's QPNs: a point that differs
/// from one process to the next, so a process that takes over a slot does not
/// at once reuse the QPNs of the one before it (whose peers may still be
/// retransmitting to them), as the kernel's cyclic allocation avoids for rxe.
fn qpn_start(first: u32, last: u32) -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mix = (std::process::id() ^ nanos).wrapping_mul(0x9e37_79b9);
    first + mix % (last - first + 1)
}

/// Tells whether `ip` can be bound here (for clear configuration errors).
pub(crate) fn bindable(ip: std::net::IpAddr) -> bool {
    UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

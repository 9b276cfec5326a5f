//! [`Driver`]: one UDP socket and one progress thread around an [`Engine`].
//!
//! The driver owns the engine (behind a sharded reader-writer lock shared
//! with the API layer: each thread reads through its own shard, so the data
//! path of several threads writes no common lock word; the write side takes
//! every shard), the socket (owned by the progress thread alone), the doorbell,
//! the completion channels and the async-event queue of one device. The
//! engine's data path (receive, transmit, timers, notifications) runs under
//! the read side, from the progress thread and the application threads at
//! once (the engine has its own locks, spec/concurrency.md §2); the write
//! side ([`Driver::with`]) is the way in for everything that changes the
//! engine's objects, but not for polling: each CQ's ring is shared by the
//! engine (its producer) and the pollers, who read it through
//! `proto::cq::SharedCq` with acquire/release indices and never take this
//! lock (`ibv_poll_cq` and `ibv_req_notify_cq` contend only with other pollers
//! of the same CQ). It promises:
//! - the engine lock is taken per step and never held across a system call;
//! - datagrams to the driver's own address never touch the socket;
//! - socket errors are logged and counted, never panics;
//! - dropping the driver stops and joins the progress thread promptly (the
//!   doorbell wakes it) and closes the socket.
//!
//! **Transmit by the application's threads** (crate::callertx): a thread
//! that posted to an idle send queue, or polls an empty CQ, sends what the
//! engine has ready itself, under a transmit gate whose claims keep each
//! QP's order whichever thread sends; the progress thread keeps retransmission,
//! the ACK timers and what nobody else sends. While it is on, the progress
//! thread sleeps at most 25 ms at a time, so that the usual ACK timeout a
//! post arms (67 ms) comes after its wake-up and needs no doorbell.
//!
//! **Send policy.** Datagrams go out in batches: up to `batch` are collected from
//! the engine (one lock) and sent with one sendmmsg(2) per run of socket-bound
//! ones; a partial send resends the rest. A send refused for lack of room (EAGAIN,
//! ENOBUFS) keeps that datagram and the ones after it pending and stops pulling
//! new ones from the engine until they are sent (back-pressure, never a silent
//! drop); the thread then also waits for POLLOUT and retries at least every
//! millisecond. Any other send error drops the
//! datagram, counts `send_errors` and logs a warning: the reliable transport
//! retransmits, an unreliable one (UD) loses a packet as a NIC would.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
    Ordering::SeqCst,
};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::SystemTime;

use crossbeam_utils::sync::{ShardedLock, ShardedLockReadGuard};

use crate::callertx::CallerTx;
use crate::capture::Capture;
use crate::clock::{Clock, Nanos};
use crate::counters::{CounterSnapshot, Counters};
use crate::engine::Engine;
use crate::eventfd::EventFd;
use crate::events::{AsyncEventQueue, CompletionChannel, Registry, DEFAULT_EVENT_CAPACITY};
use crate::options::DriverOptions;
use crate::progress::Progress;
use crate::socket;
use lanes::stamp::Point;
use lanes::LaneSet;

/// How often [`Driver::flush_left`] tries to transmit before it leaves the
/// rest to the progress thread.
const FLUSH_TRIES: usize = 8;

/// Wakes the progress thread; cheap and callable from any thread. Rings
/// coalesce: while one is pending the next costs an atomic swap, no syscall.
#[derive(Clone, Debug)]
pub struct Doorbell {
    inner: Arc<DoorbellInner>,
}

#[derive(Debug)]
struct DoorbellInner {
    fd: EventFd,
    rung: AtomicBool,
    /// Writes to the eventfd so far (a ring that coalesced writes nothing).
    writes: AtomicU64,
}

impl Doorbell {
    fn new() -> io::Result<Self> {
        let inner = DoorbellInner {
            fd: EventFd::new()?,
            rung: AtomicBool::new(false),
            writes: AtomicU64::new(0),
        };
        Ok(Doorbell {
            inner: Arc::new(inner),
        })
    }

    /// Wakes the progress thread (after a post, a modify, an arm...).
    pub fn ring(&self) {
        if !self.inner.rung.swap(true, SeqCst) {
            self.force();
        }
    }

    /// Writes to the doorbell's eventfd so far.
    pub fn writes(&self) -> u64 {
        self.inner.writes.load(SeqCst)
    }

    fn force(&self) {
        self.inner.writes.fetch_add(1, SeqCst);
        if let Err(e) = self.inner.fd.add(1) {
            tracing::warn!(error = %e, "doorbell write failed");
        }
    }

    /// Progress thread, after waking: drain first, then re-arm, so a ring that
    /// saw `rung == true` happened before this clear and its work is seen by the
    /// pass that follows (no lost wake-up).
    pub(crate) fn clear(&self) {
        let _ = self.inner.fd.take();
        self.inner.rung.store(false, SeqCst);
    }

    pub(crate) fn fd(&self) -> &EventFd {
        &self.inner.fd
    }
}

/// State shared by the driver handle, the progress thread and the API layer.
pub(crate) struct Shared<E: Engine> {
    /// The engine: the data path reads it through the calling thread's
    /// shard (no lock word shared between threads), the control verbs write
    /// it through all shards (spec/concurrency.md §2).
    pub(crate) engine: ShardedLock<E>,
    pub(crate) doorbell: Doorbell,
    pub(crate) stop: AtomicBool,
    pub(crate) counters: Counters,
    pub(crate) clock: Clock,
    pub(crate) channels: Registry<u32, CompletionChannel>,
    /// Each open context's async-event queue, by the context's id: an
    /// event goes to the context that owns its object, as the kernel's
    /// per-file async queue does.
    pub(crate) async_queues: Registry<u64, AsyncEventQueue>,
    /// The multicast groups the device joined (crate::mcast), and a count of
    /// their changes (the progress thread re-reads the list when it moves).
    pub(crate) groups: Mutex<Vec<crate::mcast::GroupSocket>>,
    pub(crate) groups_version: std::sync::atomic::AtomicU64,
    /// The RAW_PACKET QPs' packet sockets (crate::raw).
    pub(crate) raw: crate::raw::RawSockets,
    /// The posting threads' own transmit, if on (see the module doc).
    pub(crate) caller_tx: Option<CallerTx<E::Claims>>,
    /// When the sleeping progress thread wakes by itself (engine clock, ns);
    /// 0 while it is awake. Stored before the progress thread reads the
    /// engine's deadline a last time (progress/sleep.rs `publish_wake_at`).
    pub(crate) wake_at: AtomicU64,
    /// The gate to the socket's receive side for polling threads (crate::pollrx).
    pub(crate) rx: crate::pollrx::RxGate,
    /// Whether a post waits for its answer (crate::linger).
    pub(crate) linger: crate::linger::Linger,
    /// The same-host path (crate::shm), when on: the progress thread's, and
    /// the application threads' when they transmit or poll. Lock order:
    /// the transmit gate, then this, then the engine.
    pub(crate) shm: Option<Mutex<crate::shm::ShmPath>>,
    /// Whether the same-host path has a ring either way, as its lock's last
    /// holder left it ([`ShmGuard`]): a thread that transmits or polls
    /// takes that device-wide lock only when there is a ring to build in or
    /// read, so a device whose peers all go by UDP (or by its own loopback)
    /// keeps the lock off its per-packet path. A hint: a ring that comes
    /// meanwhile is found at the next look, and the datagrams meanwhile go
    /// through the batch, whose flush asks the path (it waits for the
    /// lock) before the socket.
    pub(crate) shm_rings: AtomicBool,
}

/// The same-host path, locked; on release it records in
/// [`Shared::shm_rings`] whether the path has a ring.
pub(crate) struct ShmGuard<'a> {
    path: MutexGuard<'a, crate::shm::ShmPath>,
    rings: &'a AtomicBool,
}

impl<'a> ShmGuard<'a> {
    /// `path`, locked, which records whether it has a ring in `rings` on release.
    pub(crate) fn new(path: MutexGuard<'a, crate::shm::ShmPath>, rings: &'a AtomicBool) -> Self {
        ShmGuard { path, rings }
    }
}

impl std::ops::Deref for ShmGuard<'_> {
    type Target = crate::shm::ShmPath;
    fn deref(&self) -> &Self::Target {
        &self.path
    }
}

impl std::ops::DerefMut for ShmGuard<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.path
    }
}

impl Drop for ShmGuard<'_> {
    fn drop(&mut self) {
        let rings = self.path.has_rings();
        if self.rings.load(Relaxed) != rings {
            self.rings.store(rings, Release);
        }
    }
}

impl<E: Engine> Shared<E> {
    pub(crate) fn new(
        engine: E,
        clock: Clock,
        socket: &std::net::UdpSocket,
        local: SocketAddr,
        opts: &DriverOptions,
    ) -> io::Result<Self> {
        let rx = crate::pollrx::RxGate::new(socket, local, opts);
        let wait = opts.post_wait.as_nanos().min(u128::from(u64::MAX / 4)) as u64;
        let linger = crate::linger::Linger::new(if rx.enabled() { wait } else { 0 });
        Ok(Shared {
            engine: ShardedLock::new(engine),
            doorbell: Doorbell::new()?,
            stop: AtomicBool::new(false),
            counters: Counters::default(),
            clock,
            channels: Registry::default(),
            async_queues: Registry::default(),
            groups: Mutex::new(Vec::new()),
            groups_version: std::sync::atomic::AtomicU64::new(0),
            raw: Default::default(),
            rx,
            linger,
            caller_tx: None,
            wake_at: AtomicU64::new(0),
            shm: None,
            shm_rings: AtomicBool::new(false),
        })
    }

    /// The engine for a data-path call (the read side: other threads' data
    /// path runs at the same time, `Driver::with` waits).
    pub(crate) fn engine(&self) -> ShardedLockReadGuard<'_, E> {
        // A panic inside an engine call must not wedge the device forever.
        self.engine.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The engine if no `Driver::with` holds or waits for this thread's shard.
    pub(crate) fn try_engine(&self) -> Option<ShardedLockReadGuard<'_, E>> {
        match self.engine.try_read() {
            Ok(e) => Some(e),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// The same-host path, waited for (see `Shared::shm`'s lock order).
    pub(crate) fn shm(&self) -> Option<ShmGuard<'_>> {
        let m = self.shm.as_ref()?;
        Some(self.guard(m.lock().unwrap_or_else(PoisonError::into_inner)))
    }

    fn guard<'a>(&'a self, path: MutexGuard<'a, crate::shm::ShmPath>) -> ShmGuard<'a> {
        ShmGuard::new(path, &self.shm_rings)
    }

    /// The same-host path if it has a ring ([`Shared::shm_rings`]) and no
    /// other thread holds it: a transmitting or polling thread's way in.
    pub(crate) fn shm_with_rings(&self) -> Option<ShmGuard<'_>> {
        if !self.shm_rings.load(Acquire) {
            return None;
        }
        self.try_shm()
    }

    /// The same-host path if no other thread holds it.
    pub(crate) fn try_shm(&self) -> Option<ShmGuard<'_>> {
        let path = match self.shm.as_ref()?.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        Some(self.guard(path))
    }

    /// Delivers the notifications the engine has made.
    pub(crate) fn deliver_notifications(&self) {
        let notes: Vec<_> = {
            let engine = self.engine();
            std::iter::from_fn(|| engine.poll_notification()).collect()
        };
        for n in notes {
            self.deliver(n);
        }
    }

    /// Hands a notification to its channel or its context's async-event queue, counted.
    pub(crate) fn deliver(&self, n: crate::engine::Notification) {
        use crate::engine::Notification;
        let delivered = match n {
            Notification::Completion { channel, cq } => {
                self.channels.get(&channel).is_some_and(|ch| ch.notify(cq))
            }
            Notification::Async(ev) => self.async_queues.get(&ev.ctx).is_some_and(|q| q.push(ev)),
        };
        let c = &self.counters;
        if delivered {
            Counters::add(&c.notifications, 1);
        } else {
            Counters::add(&c.notifications_dropped, 1);
            tracing::debug!(?n, "notification dropped (no such channel, or full)");
        }
    }
}

/// One device's socket and progress thread. See the module doc.
pub struct Driver<E: Engine> {
    shared: Arc<Shared<E>>,
    local: SocketAddr,
    next_channel: AtomicU32,
    thread: Option<JoinHandle<()>>,
}

impl<E: Engine> Driver<E> {
    /// Binds an unconnected UDP socket to `bind` (DF set, nonblocking), creates
    /// the capture file if `opts.capture` names one, and starts the progress
    /// thread running `engine` (with `opts.faults` injected).
    pub fn start(engine: E, bind: SocketAddr, opts: DriverOptions) -> io::Result<Self> {
        let socket = socket::bind_shared(bind, &opts)?;
        let local = socket.local_addr()?;
        // The application threads' own transmit: not with faults or capture
        // (they live in the progress thread).
        let caller_tx = (opts.caller_tx && !opts.faults.is_active() && opts.capture.is_none())
            .then(|| {
                socket
                    .try_clone()
                    .map(|s| CallerTx::new(s, local, &opts, E::CLAIMS_ORDER))
            })
            .transpose()?;
        let (clock, origin) = (Clock::new(), SystemTime::now());
        let capture = match &opts.capture {
            Some(path) => Some(Capture::create(path, origin)?),
            None => None,
        };
        let mut shared = Shared::new(engine, clock, &socket, local, &opts)?;
        shared.caller_tx = caller_tx;
        shared.shm = crate::shm::ShmPath::for_driver(local, &opts).map(Mutex::new);
        let shared = Arc::new(shared);
        let progress = Progress::new(shared.clone(), socket, local, &opts, capture);
        let thread = std::thread::Builder::new()
            .name(opts.thread_name.clone())
            .spawn(move || {
                crate::sys::block_async_signals();
                progress.run();
            })?;
        tracing::debug!(%local, "driver started");
        Ok(Driver {
            shared,
            local,
            next_channel: AtomicU32::new(1),
            thread: Some(thread),
        })
    }

    /// Runs `f` with the engine locked (the API layer's way in). Keep `f` short
    /// and free of blocking calls: the progress thread waits for the lock. Ring
    /// the doorbell afterwards if `f` created work.
    pub fn with<R>(&self, f: impl FnOnce(&mut E) -> R) -> R {
        f(&mut self
            .shared
            .engine
            .write()
            .unwrap_or_else(PoisonError::into_inner))
    }

    /// An application thread found its CQ empty: if the progress thread
    /// sleeps and nobody else reads, read the socket once without waiting and
    /// hand what came to the engine (crate::pollrx); how many datagrams. Never
    /// blocks behind the progress thread. When they completed a receive, what
    /// they made (an ACK) may be left to this thread's next post or poll, to
    /// leave with its reply in one system call (crate::pollrx::defers);
    /// [`Driver::flush_left`] sends it before a QP changes state or goes.
    pub fn drive_receive(&self) -> usize {
        crate::pollrx::drive(&self.shared)
    }

    /// Sends now what was left to a polling thread's next post or poll (an
    /// ACK a poll deferred, crate::pollrx::defers): before a QP changes
    /// state or goes, which would take it along. Retries a few times while
    /// another thread transmits; then the progress thread is woken. Whether
    /// anything was left.
    pub fn flush_left(&self) -> bool {
        let Some(tx) = self.shared.caller_tx.as_ref().filter(|tx| tx.is_wanted()) else {
            return false;
        };
        for _ in 0..FLUSH_TRIES {
            let now = self.shared.clock.now();
            if !tx.is_wanted()
                || self
                    .shared
                    .transmit_here(now, LaneSet::mine(), None)
                    .is_some()
            {
                return true;
            }
            std::thread::yield_now();
        }
        self.shared.doorbell.ring();
        true
    }

    /// For a thread that may not transmit itself (one exiting, whose
    /// thread-local state is gone): everything the engine has yet to send
    /// goes to the progress thread. That is what a poll left this thread,
    /// what the progress thread left to the polling threads (the ACK of a
    /// request it received while a thread polled, whose completion that
    /// poll returned), what it took in a pass it has not finished, and
    /// what waits for its next pass. `None` when there is nothing; else the
    /// polling lease ends and the progress thread is woken to send it
    /// ([`Driver::has_unsent`] says when it went), and whether this thread's
    /// poll had left something.
    pub fn hand_work_to_progress(&self) -> Option<bool> {
        let mine = self.has_left();
        let in_pass = self.shared.rx.progress_awake();
        if !(mine || in_pass || self.has_unsent()) {
            return None;
        }
        self.shared.rx.end_lease();
        self.shared.doorbell.ring();
        Some(mine)
    }

    /// Whether the engine has datagrams to send, or something was left to
    /// any polling thread's next post or poll (while another thread holds
    /// the engine: yes).
    pub fn has_unsent(&self) -> bool {
        let wanted =
            (self.shared.caller_tx.as_ref()).is_some_and(crate::callertx::CallerTx::is_any_wanted);
        wanted || self.shared.try_engine().is_none_or(|e| e.has_work())
    }

    /// Whether something waits for a polling thread's next post or poll.
    pub fn has_left(&self) -> bool {
        (self.shared.caller_tx.as_ref()).is_some_and(crate::callertx::CallerTx::is_wanted)
    }

    /// A thread is about to block for a completion (`ibv_req_notify_cq`):
    /// the polling threads' lease on the socket ends now, and a progress
    /// thread that sleeps without watching the socket is woken to watch it
    /// (crate::pollrx); posts stop waiting for their answers for a while
    /// (crate::linger: the program waits asleep).
    pub fn end_poll_lease(&self) {
        self.shared.linger.blocking();
        self.end_lease();
    }

    /// The polling threads' lease ends now; a progress thread that sleeps
    /// aside is woken to watch the socket.
    fn end_lease(&self) {
        if self.shared.rx.end_lease() {
            self.shared.doorbell.ring();
        }
    }

    /// Makes the device's IP multicast memberships `groups` (the groups its
    /// QPs are attached to): joins the new ones on the interface of the
    /// device's address, leaves the others (crate::mcast). On an error the
    /// groups joined so far stay joined; the caller undoes its attach and calls
    /// again.
    pub fn set_groups(&self, groups: &[std::net::IpAddr]) -> io::Result<()> {
        let mut joined = self
            .shared
            .groups
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let before = joined.len();
        joined.retain(|(addr, _)| groups.contains(&addr.ip()));
        let mut changed = joined.len() != before;
        let mut result = Ok(());
        for &g in groups {
            if joined.iter().any(|(addr, _)| addr.ip() == g) {
                continue;
            }
            match crate::mcast::open(g, self.local) {
                Ok(socket) => {
                    joined.push((SocketAddr::new(g, self.local.port()), Arc::new(socket)));
                    changed = true;
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if changed {
            self.shared.groups_version.fetch_add(1, SeqCst);
            self.shared.doorbell.ring();
        }
        result
    }

    pub(crate) fn shared(&self) -> &Shared<E> {
        &self.shared
    }

    /// Wakes the progress thread (coalesced; see [`Doorbell`]).
    pub fn doorbell(&self) {
        self.shared.doorbell.ring();
    }

    /// Work was posted (a send ring took a WR). `idle`: the QP's send queue
    /// held nothing else. An idle queue's post that is not part of a stream
    /// (closer to the previous post than `DriverOptions::caller_tx_stream_gap`)
    /// is sent by this thread now; any other post is left to the next poll of
    /// the thread that polls a CQ while its lease holds (crate::callertx), or
    /// else the doorbell wakes the progress thread. A post that answered an
    /// RDMA WRITE in a ping-pong is sent now, and then waits for the next
    /// WRITE (crate::linger).
    /// Returns how many datagrams this thread sent.
    pub fn posted(&self, idle: bool) -> usize {
        self.posted_to(idle, None)
    }

    /// [`Driver::posted`] naming the QP posted to (the engine's id for it,
    /// [`Engine::poll_transmit_posted`]): its datagram is taken first.
    pub fn posted_to(&self, idle: bool, qp: Option<u64>) -> usize {
        self.posted_at(self.shared.clock.now(), idle, qp, false)
    }

    /// [`Driver::posted_to`] at `now`; `tried`: the post's packets were
    /// offered the peer's same-host ring already and could not go (do not
    /// ask again).
    fn posted_at(&self, now: Nanos, idle: bool, qp: Option<u64>, tried: bool) -> usize {
        let Some(tx) = &self.shared.caller_tx else {
            return self.left(now);
        };
        // A busy queue's post counts only while the pattern forms (a
        // stream's posts skip the engine's count).
        let wait = (idle || self.shared.linger.forming())
            .then(|| self.post_wait(now))
            .flatten();
        // A ping-pong is no stream, even faster than the stream gap, and its
        // post may find the WRITE before still unacknowledged (the answer
        // overtakes the ACK, proto's `Qp::next_packet`).
        if wait.is_none() && (!idle || tx.streaming(now)) {
            return self.left(now);
        }
        // Straight into the peer's ring if it has one; what is left (and
        // any other way) through a transmit.
        let direct = qp.filter(|_| !tried).and_then(|q| {
            self.shared
                .through_ring(|e, room| e.transmit_posted_through(q, now, room))
        });
        self.finish(now, wait, direct, qp)
    }

    /// `ibv_post_send` of one WR to QP `qp`, by one of two ways.
    /// - To an `idle` send queue (nothing outstanding), with the same-host
    ///   path on: `direct` gets the engine, the time and the room of the
    ///   peers' rings, and posts straight into the QP's send queue and its
    ///   packets into its peer's ring (proto's `Engine::post_send_through`):
    ///   `None` when it did not (nothing posted), else the post's checks'
    ///   refusal or how many datagrams left. The rest then goes as after
    ///   [`Driver::posted_to`]'s transmit (a transmit turn for what is
    ///   left, the wait for a ping-pong's answer). Such a post goes at once
    ///   whatever the stream gap: on the rings there is no system call to
    ///   share with the posts after it.
    /// - Otherwise `ring` posts on the QP's send ring: `Some(idle)` when the
    ///   WR waits there (then as [`Driver::posted_to`]), `None` when it
    ///   needed nothing more (it took the engine itself).
    pub fn post<X>(
        &self,
        idle: bool,
        qp: u64,
        direct: impl FnOnce(&E, Nanos, &mut dyn crate::Room) -> Option<Result<usize, X>>,
        ring: impl FnOnce() -> Result<Option<bool>, X>,
    ) -> Result<(), X> {
        lanes::stamp::at(Point::DriverPost);
        let tx = self.shared.caller_tx.as_ref();
        let tried = idle && tx.is_some() && self.shared.shm.is_some();
        if tried {
            let now = self.shared.clock.now();
            if let Some((r, more)) = self.shared.through_ring(|e, room| direct(e, now, room)) {
                let n = r?;
                let wait = self.post_wait(now);
                if let (None, Some(tx)) = (wait, tx) {
                    // The post's time, for the posts after it.
                    tx.streaming(now);
                }
                // None sent through the ring (the QP's turns send it): the
                // rest as after a post on the ring.
                self.finish(now, wait, (n > 0).then_some((n, more)), Some(qp));
                return Ok(());
            }
        }
        match ring()? {
            // A busy queue outside a forming ping-pong: what `posted_at`
            // does then, at the time of the lane's last poll.
            Some(false) if !self.shared.linger.forming() => {
                self.left(self.last_poll_or_now());
            }
            Some(idle) => {
                self.posted_at(self.shared.clock.now(), idle, Some(qp), tried);
            }
            None => {}
        }
        Ok(())
    }

    /// The time of a post left to the pollers (`left`) that reads no clock:
    /// the lane's last poll, or the clock's if it never polled. The time
    /// serves only to ask whether a poll lease holds and to mark the work
    /// left (crate::callertx; spec/performance.md §32). A lease that ended
    /// since is still caught: the progress thread, if it sleeps watching
    /// the socket, is rung (`Shared::leave_to_poller`); if it sleeps aside,
    /// it wakes at the lease's end it slept for; awake, it sees the mark
    /// before it sleeps. An earlier mark only lets other polling threads
    /// take the work sooner.
    fn last_poll_or_now(&self) -> Nanos {
        let tx = self.shared.caller_tx.as_ref();
        tx.and_then(crate::callertx::CallerTx::last_poll)
            .unwrap_or_else(|| self.shared.clock.now())
    }

    /// Whether a post at `now` waits for its answer, and until when, with
    /// the device's count of whole WRITEs it saw (crate::linger). Never
    /// waits for the engine (a writer may hold it): no wait then.
    fn post_wait(&self, now: Nanos) -> Option<(u64, Nanos)> {
        let writes = self.shared.try_engine()?.writes_taken();
        Some((writes.0, self.shared.linger.at_post(now, writes)?))
    }

    /// A post's packets: those that went straight into a ring (`direct`:
    /// how many, and whether the engine has more for this lane), the rest
    /// through a transmit; then the wait for its answer (`wait`), or the
    /// end of the lease the waits before held. How many left; none when no
    /// transmit could run (left to the next poll).
    fn finish(
        &self,
        now: Nanos,
        wait: Option<(u64, Nanos)>,
        direct: Option<(usize, bool)>,
        qp: Option<u64>,
    ) -> usize {
        let mine = LaneSet::mine();
        let sent = match direct {
            Some((n, false)) => Some(n),
            Some((n, true)) => match self.shared.transmit_here(now, mine, None) {
                Some(m) => Some(n + m),
                None => {
                    self.shared.leave_to_poller(now, mine);
                    Some(n)
                }
            },
            None => self.shared.transmit_here(now, mine, qp),
        };
        let Some(n) = sent else {
            return self.left(now);
        };
        match wait {
            Some((seen, until)) => self.wait_for_answer(seen, until),
            None => self.end_wait_lease(),
        }
        n
    }

    /// Nothing of a post sent now: left to the next poll of this thread's
    /// lane (or the progress thread), and the lease of the waits before
    /// ends.
    fn left(&self, now: Nanos) -> usize {
        self.end_wait_lease();
        self.shared.leave_to_poller(now, LaneSet::mine());
        0
    }

    /// A post that does not wait for its answer: a lease the waits of the
    /// posts before held ends (the thread goes back to its spin and reads
    /// nothing; the answer must not wait for the lease's end).
    fn end_wait_lease(&self) {
        let by_wait = &self.shared.rx.by_wait;
        if by_wait.load(Relaxed) && !self.shared.linger.waiting() && by_wait.swap(false, SeqCst) {
            self.end_lease();
        }
    }

    /// A post that answered an RDMA WRITE waits for the next (crate::linger):
    /// this thread reads the socket and the rings as a polling thread does,
    /// until the device's count of whole WRITEs passes `seen`, or `until`
    /// (engine time).
    fn wait_for_answer(&self, seen: u64, until: Nanos) {
        let s = &self.shared;
        Counters::add(&s.counters.post_waits, 1);
        lanes::stamp::at(Point::WaitBegins);
        s.linger.wait_begins();
        let answered = loop {
            // One clock reading a turn: the poll's time and the bound's.
            let now = s.clock.now();
            crate::pollrx::drive_for(s, now, Some(seen));
            if s.engine().writes_taken().0 != seen {
                lanes::stamp::at(Point::WaitAnswered);
                break true;
            }
            if now >= until {
                break false;
            }
            std::hint::spin_loop();
        };
        s.linger.wait_ends();
        if answered {
            s.linger.answered();
        } else {
            // The thread goes back to its spin and reads nothing: the
            // progress thread watches the socket and the rings again
            // (unless another thread waits).
            Counters::add(&s.counters.post_waits_missed, 1);
            s.linger.missed();
            self.end_wait_lease();
        }
    }

    /// A handle that rings this driver's doorbell, for objects that outlive a borrow.
    pub fn waker(&self) -> Doorbell {
        self.shared.doorbell.clone()
    }

    /// The bound address (with the port the kernel chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The driver's clock (the engine's `now`).
    pub fn clock(&self) -> Clock {
        self.shared.clock
    }

    /// The current engine time.
    pub fn now(&self) -> Nanos {
        self.shared.clock.now()
    }

    /// A snapshot of the traffic counters.
    pub fn counters(&self) -> CounterSnapshot {
        self.shared.raw.read_kernel_counts(&self.shared.counters);
        self.shared.counters.snapshot()
    }

    /// A new completion channel, registered under a fresh id; the engine names
    /// that id in `Notification::Completion`. Dropping every `Arc` closes its fd
    /// and unregisters it (later notifications for it are counted as dropped).
    pub fn create_completion_channel(&self) -> io::Result<Arc<CompletionChannel>> {
        let id = self.next_channel.fetch_add(1, SeqCst);
        let channel = Arc::new(CompletionChannel::new(id)?);
        self.shared.channels.insert(id, &channel);
        Ok(channel)
    }

    /// A new async-event queue for the context `ctx` (its fd is that
    /// context's `async_fd`): the engine names `ctx` in
    /// `Notification::Async` for the events of the context's objects. A
    /// context has one queue: a second call replaces the first. Dropping
    /// every `Arc` unregisters it (later events for it count as dropped).
    pub fn open_async_queue(&self, ctx: u64) -> io::Result<Arc<AsyncEventQueue>> {
        let queue = Arc::new(AsyncEventQueue::new(DEFAULT_EVENT_CAPACITY)?);
        self.shared.async_queues.insert(ctx, &queue);
        Ok(queue)
    }

    /// Stops and joins the progress thread (what drop does).
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        self.shared.stop.store(true, SeqCst);
        self.shared.doorbell.force();
        if thread.join().is_err() {
            tracing::error!(local = %self.local, "progress thread panicked");
        }
        tracing::debug!(local = %self.local, counters = ?self.counters(), "driver stopped");
    }
}

impl<E: Engine> Drop for Driver<E> {
    fn drop(&mut self) {
        self.stop();
    }
}

impl<E: Engine> std::fmt::Debug for Driver<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("local", &self.local)
            .field("running", &self.thread.is_some())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Idle;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Barrier;

    fn shared() -> Arc<Shared<Idle>> {
        let socket = crate::socket::bind("127.0.0.1:0".parse().unwrap(), 1 << 16, 1 << 16).unwrap();
        let local = socket.local_addr().unwrap();
        let opts = DriverOptions::default();
        Arc::new(Shared::new(Idle, Clock::new(), &socket, local, &opts).unwrap())
    }

    /// Every thread reads through a shard of its own, so the write side must
    /// wait for the readers of every shard: an MR's deregistration waits for
    /// every packet that may still place into it (`softverbs::mem`).
    #[test]
    fn a_control_step_waits_for_the_data_path_of_every_thread() {
        const READERS: usize = 9; // more threads than shards
        let s = shared();
        let holding = Arc::new(Barrier::new(READERS + 1));
        let release = Arc::new(Barrier::new(READERS + 1));
        let readers: Vec<_> = (0..READERS)
            .map(|_| {
                let (s, holding, release) = (s.clone(), holding.clone(), release.clone());
                std::thread::spawn(move || {
                    let guard = s.engine();
                    holding.wait();
                    release.wait();
                    drop(guard);
                })
            })
            .collect();
        holding.wait();
        let written = Arc::new(AtomicUsize::new(0));
        let writer = {
            let (s, written) = (s.clone(), written.clone());
            std::thread::spawn(move || {
                let _all = s.engine.write().unwrap_or_else(PoisonError::into_inner);
                written.store(1, SeqCst);
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(written.load(SeqCst), 0, "the write side went past a reader");
        release.wait();
        readers.into_iter().for_each(|r| r.join().unwrap());
        writer.join().unwrap();
        assert_eq!(written.load(SeqCst), 1);
    }

    /// Readers never wait for each other.
    #[test]
    fn the_data_path_of_one_thread_does_not_wait_for_another() {
        let s = shared();
        let _mine = s.engine();
        let other = s.clone();
        let got = std::thread::spawn(move || other.try_engine().is_some())
            .join()
            .unwrap();
        assert!(got);
    }
}

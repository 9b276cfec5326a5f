//! [`Driver`]: one UDP socket and one progress thread around an [`Engine`].
//!
//! The driver owns the engine (behind a mutex shared with the API layer), the
//! socket (owned by the progress thread alone), the doorbell, the completion
//! channels and the async-event queue of one device. The engine lock
//! ([`Driver::with`]) is the way in for everything that changes the engine's
//! objects, but not for polling: each CQ's ring is shared by the engine (its
//! only producer, under the lock) and the pollers, who read it through
//! `proto::cq::SharedCq` with acquire/release indices and never take this
//! lock (`ibv_poll_cq` and `ibv_req_notify_cq` contend only with other pollers
//! of the same CQ). It promises:
//! - the engine lock is taken per step and never held across a system call;
//! - datagrams to the driver's own address never touch the socket;
//! - socket errors are logged and counted, never panics;
//! - dropping the driver stops and joins the progress thread promptly (the
//!   doorbell wakes it) and closes the socket.
//!
//! **Transmit in the caller's thread.** A thread that posted to an idle send
//! queue calls [`Driver::posted`]: it takes the engine lock with `try_lock`
//! (never waiting behind the progress thread: if the lock is busy it rings
//! the doorbell instead), takes the datagrams the engine has ready (a few at
//! most), releases the lock, and sends them itself with one `sendto(2)` each
//! on a duplicate of the progress thread's socket — no doorbell write, no
//! wake-up. Datagrams to the driver's own address go straight to the engine
//! under the same lock (the loopback shortcut). It wakes the progress thread
//! only when that thread must act: more datagrams than it took, a send
//! refused for room, or a new engine deadline (an ACK timer) earlier than the
//! one the sleeping progress thread waits for (`wake_at`, which it publishes
//! under the engine lock before it sleeps). Completion-channel and async
//! events the sends made are delivered by the caller too. The progress thread
//! keeps retransmission, the ACK timers and receiving.
//!
//! Two threads now take datagrams from one engine, so the order in which
//! they reach the kernel is kept by a *transmit gate* ([`CallerTx`]): the
//! thread that takes a datagram from the engine holds it until the datagram
//! is sent. Without it, a progress thread woken meanwhile took a message's
//! later packets and sent them while the poster was still between taking
//! the first and sending it; a UC receiver drops a message whose first
//! packet comes late, so `ibv_uc_pingpong` waited forever for it. The
//! progress thread waits for the gate (a poster holds it for a few sends,
//! bounded); a poster only tries it, and also stays out while the progress
//! thread holds datagrams that wait for room in the socket.
//!
//! On by default (`DriverOptions::caller_tx`; `SOFTVERBS_CALLER_TX=0` turns
//! it off); off while faults, capture or the same-host path are in use
//! (those sit in the progress thread); on a shared address it keeps the
//! progress thread's rule of which datagrams stay in this process. While it
//! is on, the progress thread sleeps at most 25 ms at a time, so that the
//! usual ACK timeout a post arms (67 ms) comes after its wake-up and needs
//! no doorbell.
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

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::SystemTime;

use crate::capture::Capture;
use crate::clock::{Clock, Nanos};
use crate::counters::{CounterSnapshot, Counters};
use crate::engine::Engine;
use crate::eventfd::EventFd;
use crate::events::{AsyncEventQueue, CompletionChannel, DEFAULT_EVENT_CAPACITY};
use crate::options::DriverOptions;
use crate::progress::Progress;
use crate::socket;

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
pub(crate) struct Shared<E> {
    pub(crate) engine: Mutex<E>,
    pub(crate) doorbell: Doorbell,
    pub(crate) stop: AtomicBool,
    pub(crate) counters: Counters,
    pub(crate) clock: Clock,
    pub(crate) channels: Mutex<HashMap<u32, Weak<CompletionChannel>>>,
    pub(crate) async_events: Arc<AsyncEventQueue>,
    /// The multicast groups the device joined (crate::mcast), and a count of
    /// their changes (the progress thread re-reads the list when it moves).
    pub(crate) groups: Mutex<Vec<crate::mcast::GroupSocket>>,
    pub(crate) groups_version: std::sync::atomic::AtomicU64,
    /// The RAW_PACKET QPs' packet sockets (crate::raw).
    pub(crate) raw: crate::raw::RawSockets,
    /// The posting threads' own transmit, if on (see the module doc).
    pub(crate) caller_tx: Option<CallerTx>,
    /// When the sleeping progress thread wakes by itself (engine clock, ns);
    /// 0 while it is awake. Written under the engine lock.
    pub(crate) wake_at: AtomicU64,
    /// The gate to the socket's receive side for polling threads (crate::pollrx).
    pub(crate) rx: crate::pollrx::RxGate,
}

/// What a posting thread needs to transmit by itself.
pub(crate) struct CallerTx {
    /// A duplicate of the progress thread's socket.
    socket: std::net::UdpSocket,
    local: SocketAddr,
    /// This process's slot of a shared address, if any (which datagrams to
    /// the address stay in this process: as the progress thread decides).
    share: Option<Arc<crate::share::Slot>>,
    /// The transmit gate: whoever takes datagrams from the engine holds it
    /// until they are in the kernel, so datagrams leave in the order the
    /// engine gave them, whichever thread sends them. The progress thread
    /// holds it around its transmit step (waiting for it); a posting thread
    /// only tries it and rings the doorbell if it is busy.
    gate: Mutex<TxGate>,
    /// `DriverOptions::caller_tx_stream_gap`, ns.
    stream_gap: Nanos,
    /// When the device's last post came (engine clock, ns).
    last_post: AtomicU64,
}

/// `CallerTx::last_post` before the first post.
const NEVER: Nanos = Nanos::MAX;

impl CallerTx {
    /// A post at `now`: true if it follows the previous one by less than the
    /// stream gap (the progress thread then sends it, in a batch).
    fn streaming(&self, now: Nanos) -> bool {
        let prev = self.last_post.swap(now, SeqCst);
        prev != NEVER && now.saturating_sub(prev) < self.stream_gap
    }
}

/// What the transmit gate guards.
pub(crate) struct TxGate {
    /// The posting threads' datagram buffer.
    buf: Vec<u8>,
    /// The progress thread keeps datagrams that wait for room in the socket
    /// (back-pressure): nothing may overtake them, so posting threads leave
    /// the transmit to it until they are gone.
    pub(crate) progress_pending: bool,
}

impl CallerTx {
    /// The transmit gate, waited for (the progress thread: a posting thread
    /// holds it for a few sends at most, bounded by [`CALLER_TX_ROOM_WAIT`]).
    pub(crate) fn gate(&self) -> MutexGuard<'_, TxGate> {
        self.gate.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a datagram to `to` stays in this process (the loopback
    /// shortcut): our own address and, on a shared address, a QP of our own
    /// slot — the progress thread's rule. Datagrams for another slot of the
    /// address go through the socket, as the progress thread sends them.
    fn is_ours(&self, to: SocketAddr, bytes: &[u8]) -> bool {
        use crate::share::{target, Target};
        to == self.local
            && match &self.share {
                None => true,
                Some(slot) => match target(slot.index(), bytes) {
                    Target::Ours => true,
                    Target::Service(sid) => slot.serves(sid),
                    Target::Slot(_) => false,
                },
            }
    }
}

/// Datagrams a posting thread takes from the engine at most; the rest is the
/// progress thread's.
const CALLER_TX_MAX: usize = 8;
/// Longest a posting thread waits for room in the socket, in all, before it
/// drops a datagram (counted in `send_errors`; the reliable transports
/// retransmit). The progress thread may wait this long for the gate.
const CALLER_TX_ROOM_WAIT: std::time::Duration = std::time::Duration::from_millis(1);

impl<E> Shared<E> {
    pub(crate) fn new(
        engine: E,
        clock: Clock,
        socket: &std::net::UdpSocket,
        local: SocketAddr,
        opts: &DriverOptions,
    ) -> io::Result<Self> {
        Ok(Shared {
            engine: Mutex::new(engine),
            doorbell: Doorbell::new()?,
            stop: AtomicBool::new(false),
            counters: Counters::default(),
            clock,
            channels: Mutex::new(HashMap::new()),
            async_events: Arc::new(AsyncEventQueue::new(DEFAULT_EVENT_CAPACITY)?),
            groups: Mutex::new(Vec::new()),
            groups_version: std::sync::atomic::AtomicU64::new(0),
            raw: Default::default(),
            rx: crate::pollrx::RxGate::new(socket, local, opts),
            caller_tx: None,
            wake_at: AtomicU64::new(0),
        })
    }

    pub(crate) fn engine(&self) -> MutexGuard<'_, E> {
        // A panic inside an engine call must not wedge the device forever.
        self.engine.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn channel(&self, id: u32) -> Option<Arc<CompletionChannel>> {
        let channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        channels.get(&id).and_then(Weak::upgrade)
    }

    /// Hands a notification to its channel or the async-event queue, counted.
    pub(crate) fn deliver(&self, n: crate::engine::Notification) {
        use crate::engine::Notification;
        let delivered = match n {
            Notification::Completion { channel, cq } => {
                self.channel(channel).is_some_and(|ch| ch.notify(cq))
            }
            Notification::Async(ev) => self.async_events.push(ev),
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

impl<E: Engine> Shared<E> {
    /// The calling thread transmits what the engine has ready (see the
    /// module doc): at most [`CALLER_TX_MAX`] datagrams, holding the transmit
    /// gate until they are in the kernel, then the notifications they made.
    /// How many it sent; `None` (nothing taken) when this is off, another
    /// thread transmits, or the progress thread holds datagrams that wait
    /// for room: the caller then rings the doorbell. Rings it itself when
    /// the progress thread must act (more left, a failed send, an earlier
    /// deadline than the sleeping thread's).
    pub(crate) fn transmit_here(&self) -> Option<usize> {
        let tx = self.caller_tx.as_ref()?;
        // The gate, held until the datagrams taken are in the kernel: the
        // progress thread must not send a later datagram of the engine's
        // before them (an unreliable QP loses a message to the reordering).
        let mut gate = tx.gate.try_lock().ok()?;
        if gate.progress_pending {
            return None;
        }
        let buf = &mut gate.buf;
        let room_deadline = std::time::Instant::now() + CALLER_TX_ROOM_WAIT;
        let mut sent = 0;
        let mut ring = false;
        for i in 0..=CALLER_TX_MAX {
            // One datagram under the lock, sent outside it.
            let Ok(mut engine) = self.engine.try_lock() else {
                ring = true;
                break;
            };
            let now = self.clock.now();
            let t = if i < CALLER_TX_MAX {
                engine.poll_transmit(now, buf)
            } else {
                None
            };
            let Some(t) = t else {
                // Done: events for the CQs and whether the progress thread
                // must wake for an earlier deadline than its own.
                let mut notes = Vec::new();
                while let Some(n) = engine.poll_notification() {
                    notes.push(n);
                }
                let wake_at = self.wake_at.load(SeqCst);
                ring |= engine.poll_timeout().is_some_and(|d| d < wake_at);
                ring |= i == CALLER_TX_MAX;
                drop(engine);
                for n in notes {
                    self.deliver(n);
                }
                break;
            };
            let c = &self.counters;
            if t.len > buf.len() {
                Counters::add(&c.send_errors, 1);
                tracing::error!(
                    len = t.len,
                    "engine reported a datagram longer than its buffer"
                );
                continue;
            }
            let bytes = &buf[..t.len];
            if tx.is_ours(t.to, bytes) {
                // The loopback shortcut, under the lock already held.
                engine.handle_datagram(now, tx.local, tx.local, bytes);
                Counters::add(&c.loopback_datagrams, 1);
                Counters::add(&c.loopback_bytes, t.len as u64);
                Counters::add(&c.caller_datagrams, 1);
                sent += 1;
                continue;
            }
            drop(engine);
            match self.send_from_caller(tx, t.to, bytes, room_deadline) {
                Ok(()) => {
                    Counters::add(&c.datagrams_sent, 1);
                    Counters::add(&c.bytes_sent, t.len as u64);
                    Counters::add(&c.caller_datagrams, 1);
                    sent += 1;
                }
                Err(e) => {
                    Counters::add(&c.send_errors, 1);
                    tracing::warn!(local = %tx.local, to = %t.to, len = t.len, error = %e,
                        "send from the posting thread failed; dropped");
                    ring = true;
                }
            }
        }
        drop(gate);
        if ring {
            self.doorbell.ring();
        }
        Some(sent)
    }

    /// One `sendto(2)` from a posting thread; waits for room until `deadline`.
    fn send_from_caller(
        &self,
        tx: &CallerTx,
        to: SocketAddr,
        bytes: &[u8],
        deadline: std::time::Instant,
    ) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        loop {
            Counters::add(&self.counters.send_calls, 1);
            match socket::send(&tx.socket, to, bytes) {
                socket::SendOutcome::Sent => return Ok(()),
                socket::SendOutcome::Failed(e) => return Err(e),
                socket::SendOutcome::Retry => {
                    Counters::add(&self.counters.send_retries, 1);
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return Err(io::Error::from(io::ErrorKind::WouldBlock));
                    }
                    let mut fds = [crate::sys::pollfd(tx.socket.as_raw_fd(), libc::POLLOUT)];
                    let _ = crate::sys::poll(&mut fds, Some(left));
                }
            }
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
        // The posting threads' own transmit: not with faults or capture
        // (they live in the progress thread), nor beside the same-host path
        // (shm: its rings are the progress thread's; a posting thread's
        // socket send would overtake the datagrams in a ring).
        let shm = opts.shm && opts.share.is_some();
        let caller_tx =
            if opts.caller_tx && !opts.faults.is_active() && opts.capture.is_none() && !shm {
                Some(CallerTx {
                    socket: socket.try_clone()?,
                    local,
                    share: opts.share.clone(),
                    gate: Mutex::new(TxGate {
                        buf: vec![0; opts.max_datagram_bytes.max(1)],
                        progress_pending: false,
                    }),
                    stream_gap: u64::try_from(opts.caller_tx_stream_gap.as_nanos())
                        .unwrap_or(u64::MAX),
                    last_post: AtomicU64::new(NEVER),
                })
            } else {
                None
            };
        let (clock, origin) = (Clock::new(), SystemTime::now());
        let capture = match &opts.capture {
            Some(path) => Some(Capture::create(path, origin)?),
            None => None,
        };
        let mut shared = Shared::new(engine, clock, &socket, local, &opts)?;
        shared.caller_tx = caller_tx;
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
        f(&mut self.shared.engine())
    }

    /// An application thread found its CQ empty: if the progress thread
    /// sleeps and nobody else reads, read the socket once without waiting and
    /// hand what came to the engine (crate::pollrx); how many datagrams. Never
    /// blocks behind the progress thread.
    pub fn drive_receive(&self) -> usize {
        crate::pollrx::drive(&self.shared)
    }

    /// A thread is about to block for a completion (`ibv_req_notify_cq`):
    /// the polling threads' lease on the socket ends now, and a progress
    /// thread that sleeps without watching the socket is woken to watch it
    /// (crate::pollrx).
    pub fn end_poll_lease(&self) {
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
    /// held nothing else, so this thread transmits what the engine has ready
    /// itself (see the module doc); otherwise, if the engine is busy, or if
    /// the posts come as a stream (closer together than
    /// `DriverOptions::caller_tx_stream_gap`), the doorbell wakes the
    /// progress thread. Returns how many datagrams this thread sent.
    pub fn posted(&self, idle: bool) -> usize {
        let now = self.shared.clock.now();
        let streaming = self
            .shared
            .caller_tx
            .as_ref()
            .is_some_and(|tx| tx.streaming(now));
        if !idle || streaming {
            self.doorbell();
            return 0;
        }
        self.shared.transmit_here().unwrap_or_else(|| {
            self.doorbell();
            0
        })
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
        self.shared.counters.snapshot()
    }

    /// A new completion channel, registered under a fresh id; the engine names
    /// that id in `Notification::Completion`. Dropping every `Arc` closes its fd
    /// and unregisters it (later notifications for it are counted as dropped).
    pub fn create_completion_channel(&self) -> io::Result<Arc<CompletionChannel>> {
        let id = self.next_channel.fetch_add(1, SeqCst);
        let channel = Arc::new(CompletionChannel::new(id)?);
        let mut channels = self
            .shared
            .channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        channels.retain(|_, weak| weak.strong_count() > 0);
        channels.insert(id, Arc::downgrade(&channel));
        Ok(channel)
    }

    /// The device's async-event queue (its fd is `ctx->async_fd`).
    pub fn async_events(&self) -> &Arc<AsyncEventQueue> {
        &self.shared.async_events
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
        tracing::debug!(local = %self.local, "driver stopped");
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
    use crate::engine::{Notification, Transmit};
    use std::collections::VecDeque;
    use std::time::Duration;

    /// An engine that sends what is queued, in order.
    #[derive(Default)]
    struct Queue(VecDeque<(SocketAddr, Vec<u8>)>);

    impl Engine for Queue {
        fn handle_datagram(&mut self, _: Nanos, _: SocketAddr, _: SocketAddr, _: &[u8]) {}
        fn poll_transmit(&mut self, _: Nanos, buf: &mut [u8]) -> Option<Transmit> {
            let (to, bytes) = self.0.pop_front()?;
            buf[..bytes.len()].copy_from_slice(&bytes);
            Some(Transmit {
                to,
                len: bytes.len(),
            })
        }
        fn poll_timeout(&self) -> Option<Nanos> {
            None
        }
        fn handle_timeout(&mut self, _: Nanos) {}
        fn poll_notification(&mut self) -> Option<Notification> {
            None
        }
    }

    /// A posting thread that took the first datagram of a message from the
    /// engine and has not yet sent it holds the transmit gate: the progress
    /// thread, woken meanwhile, must not send the message's later datagrams
    /// before it (they would overtake it; a UC receiver then drops the
    /// message, and `ibv_uc_pingpong` waited for it forever).
    #[test]
    fn the_progress_thread_never_overtakes_a_posting_thread() {
        let opts = DriverOptions {
            caller_tx: true,
            ..DriverOptions::default()
        };
        let d = Driver::start(Queue::default(), "127.0.61.11:0".parse().unwrap(), opts).unwrap();
        let peer = std::net::UdpSocket::bind("127.0.61.12:0").unwrap();
        peer.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let to = peer.local_addr().unwrap();
        let tx = d.shared.caller_tx.as_ref().expect("caller transmit on");
        // The steps of `posted` up to the send: the gate, then one datagram.
        let gate = tx.gate.try_lock().expect("the gate is free");
        let first = d.with(|e| {
            e.0.extend((1..=3u8).map(|i| (to, vec![i; 8])));
            e.0.pop_front().unwrap()
        });
        // The progress thread is woken for the rest, and given time to act.
        d.doorbell();
        let mut buf = [0u8; 16];
        peer.set_nonblocking(true).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            peer.recv(&mut buf).is_err(),
            "the progress thread sent while a posting thread held a datagram"
        );
        peer.set_nonblocking(false).unwrap();
        let deadline = std::time::Instant::now() + CALLER_TX_ROOM_WAIT;
        d.shared
            .send_from_caller(tx, first.0, &first.1, deadline)
            .unwrap();
        drop(gate);
        for want in 1..=3u8 {
            let n = peer.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &[want; 8], "datagram {want} in order");
        }
    }

    /// What waits in the progress thread for room in the socket keeps the
    /// posting threads out: they ring the doorbell instead of sending, and
    /// the progress thread sends the post's datagram after its own.
    #[test]
    fn a_post_while_the_progress_thread_waits_for_room_goes_to_it() {
        let opts = DriverOptions {
            caller_tx: true,
            ..DriverOptions::default()
        };
        let d = Driver::start(Queue::default(), "127.0.61.13:0".parse().unwrap(), opts).unwrap();
        let peer = std::net::UdpSocket::bind("127.0.61.14:0").unwrap();
        peer.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let to = peer.local_addr().unwrap();
        let tx = d.shared.caller_tx.as_ref().expect("caller transmit on");
        // The progress thread's state as it is while a datagram waits for
        // room, set while it sleeps (a pass in between would clear it: retry).
        for _ in 0..100 {
            let start = std::time::Instant::now();
            while d.counters().sleeps == 0 && start.elapsed() < Duration::from_secs(20) {
                std::thread::sleep(Duration::from_millis(1));
            }
            let passes = d.counters().passes;
            let writes = d.waker().writes();
            tx.gate().progress_pending = true;
            d.with(|e| e.0.push_back((to, vec![7; 4])));
            let sent = d.posted(true);
            if d.counters().passes != passes && sent > 0 {
                continue; // the thread woke by itself meanwhile
            }
            assert_eq!(sent, 0, "nothing sent from the posting thread");
            assert!(d.waker().writes() > writes, "the doorbell rang");
            assert_eq!(d.counters().caller_datagrams, 0);
            let mut buf = [0u8; 8];
            assert_eq!(
                peer.recv(&mut buf).unwrap(),
                4,
                "the progress thread sent it"
            );
            assert!(!tx.gate().progress_pending, "cleared by its transmit");
            return;
        }
        panic!("the progress thread never stayed asleep");
    }

    /// The first post is sent by its own thread; a post that follows it
    /// within the stream gap rings the doorbell instead, and the progress
    /// thread sends it (in its batches).
    #[test]
    fn a_stream_of_posts_is_left_to_the_progress_thread() {
        let opts = DriverOptions {
            caller_tx: true,
            caller_tx_stream_gap: Duration::from_secs(3600),
            ..DriverOptions::default()
        };
        let d = Driver::start(Queue::default(), "127.0.61.15:0".parse().unwrap(), opts).unwrap();
        let peer = std::net::UdpSocket::bind("127.0.61.16:0").unwrap();
        peer.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let to = peer.local_addr().unwrap();
        let start = std::time::Instant::now();
        while d.counters().sleeps == 0 && start.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(1));
        }
        d.with(|e| e.0.push_back((to, vec![1; 4])));
        assert_eq!(d.posted(true), 1, "the first post is sent by its thread");
        let writes = d.waker().writes();
        d.with(|e| e.0.push_back((to, vec![2; 4])));
        assert_eq!(d.posted(true), 0, "a post within the gap is not");
        assert!(d.waker().writes() > writes, "the doorbell rang");
        let mut buf = [0u8; 8];
        for want in 1..=2u8 {
            let n = peer.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &[want; 4], "datagram {want} in order");
        }
        assert_eq!(d.counters().caller_datagrams, 1);
    }
}

//! Receive driven by a polling application thread.
//!
//! Owns: the gate between the two readers of the device's socket, the
//! progress thread and an application thread that polls an empty CQ while the
//! progress thread sleeps ([`crate::Driver::drive_receive`]). Promise: one
//! reader at a time reads and hands its datagrams to the engine (the progress
//! thread takes the gate around each read-and-deliver; an application thread
//! only tries it, and only while the progress thread sleeps), so datagrams
//! reach the engine in arrival order; the application thread never waits for
//! the gate. It takes the engine lock only after its read (never across a
//! system call), and steps
//! aside when faults or a capture are configured (they live in the progress
//! thread) or the option is off (`SOFTVERBS_POLL_RX=0`; on by default since
//! the lease below: without it, the progress thread sleeping in poll(2) on
//! the socket was still woken by each arrival and it measured worse,
//! spec/performance.md §9.4, §11.3).
//!
//! **The lease.** Each poll of an empty CQ renews a lease on the socket
//! (at most `DriverOptions::poll_lease`, 2 ms unless set; it halves each
//! time a datagram waited for a thread that had stopped polling, at its end
//! or [`QUIET_NS`] after the last poll, and doubles back while polls renew
//! it, [`RxGate::lease_ended`]). While it holds, the
//! progress thread sleeps without watching the socket's POLLIN (only its
//! timers, the doorbell, the lease's end and its other sources), so an
//! arrival does not wake it: the polling thread reads it, hands it to the
//! engine and, with the posting threads' transmit on, sends what that made
//! (an ACK, a response) and delivers its notifications itself; an ACK of a
//! request whose receive completion the poll returns waits for the
//! thread's next post or poll instead, to leave with the reply
//! ([`defers`]). A poll that finds work holds the lease through it
//! ([`RxGate::working`]: a batch of runs to place or to send takes longer
//! than a short lease) and renews it from the work's end. When the
//! lease ends (the thread stopped polling: it spins on memory, or works) the
//! progress thread wakes and watches the socket again, so a datagram that
//! came after the last poll waits at most the lease plus one wake-up;
//! `ibv_req_notify_cq` ([`crate::Driver::end_poll_lease`]) ends it at once
//! (the thread is about to block) and wakes a progress thread that sleeps
//! aside.
//!
//! **A post that waits for its answer** (crate::linger, [`drive_for`])
//! reads as a polling thread does, and more: also while the progress
//! thread is awake (woken, it may wait for a core behind spinning threads
//! for a time slice; the reader's lock keeps the order), and a whole RDMA
//! WRITE it delivers counts as a completed receive for [`defers`] (the
//! answer's post comes at once). The lease its waits renew is marked ([`RxGate::by_wait`])
//! and ends as soon as a post no longer waits.
//!
//! Why: on a machine with few cores the progress thread must be woken and
//! scheduled for every datagram (spec/performance.md §4, §9.3); the thread
//! that is already running in `ibv_poll_cq` can read the datagram itself.
//!
//! **The socket beside the rings.** While the same-host rings carry the
//! traffic, most polls would find the socket empty, and each empty read is a
//! system call (≈ 1 µs here, as long as the rest of a poll). Then an empty
//! socket is read again only [`SOCKET_EVERY_NS`] after ([`Pace`]), however
//! many polls come meanwhile (a count of polls made it every few
//! microseconds, and the system call fell on a ping-pong's path:
//! spec/performance.md §26); a socket that had
//! data is read on every poll, and so is a socket with no ring delivering
//! (the UDP path: nothing changes there). A datagram from the socket waits
//! for at most that much longer; the order of one peer's datagrams does not
//! depend on it (a ring's first datagrams wait until the progress thread has
//! read the socket to its end, [`crate::shm::ShmPath::fresh_data`]).

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};

use crate::clock::Nanos;
use crate::counters::Counters;
use crate::driver::Shared;
use crate::engine::Engine;
use crate::options::DriverOptions;
use crate::share::Slot;
use crate::sys;
use lanes::stamp::Point;
use lanes::LaneSet;

/// Datagrams one application-thread read asks for.
const SLOTS: usize = 4;
/// While the rings deliver, an empty socket is read again after this long
/// (engine time).
const SOCKET_EVERY_NS: Nanos = 20_000;
/// The rings count as carrying the traffic this long after they last
/// delivered.
const RINGS_RECENT_NS: Nanos = 1_000_000;
/// How long the lease holds at most while the polling thread works
/// ([`RxGate::working`]).
const WORK_LEASE_NS: Nanos = 2_000_000;
/// How long without a poll makes a waiting datagram count against the
/// lease even if a poll renewed it ([`RxGate::quiet`]).
const QUIET_NS: Nanos = 20_000;
/// The shortest the lease becomes (see [`RxGate::lease_ended`]).
const MIN_LEASE_NS: u64 = 1_000;
/// How far a poll must move the lease before it writes it ([`RxGate::renew`]).
const RENEW_NS: Nanos = 500;

/// The gate to the socket's receive side (see the module doc).
pub(crate) struct RxGate {
    /// Application threads may read (the option is on; no faults, no capture).
    enabled: bool,
    /// The progress thread is in (or about to enter) its sleeping poll(2).
    asleep: AtomicBool,
    /// That sleep leaves the socket to the polling threads (it does not
    /// watch the socket's POLLIN: an arrival does not wake it).
    aside: AtomicBool,
    /// Until when (engine time) that sleep lasts at most.
    until: AtomicU64,
    /// The polling threads' lease on the socket: until when (engine time) a
    /// thread that polled an empty CQ is taken to poll again; 0: none.
    lease_until: AtomicU64,
    /// Until when (engine time) at the latest a polling thread works on what
    /// its poll found ([`RxGate::working`]); 0: none.
    busy_until: AtomicU64,
    /// When a thread last polled (engine time).
    polled_at: AtomicU64,
    /// The last renewal was a post's wait for its answer (crate::linger),
    /// not a poll of a CQ: it ends when a post no longer waits.
    pub(crate) by_wait: AtomicBool,
    /// How long one empty poll extends the lease now (adapted, see
    /// [`RxGate::lease_ended`]), and at most.
    lease_ns: AtomicU64,
    lease_max_ns: u64,
    /// The device's address (what datagrams arrive at).
    pub(crate) local: SocketAddr,
    reader: Mutex<Reader>,
    pace: Pace,
}

/// When the polling threads read the socket while the rings carry the
/// traffic (see the module doc). Only a pace: every field is a hint, and a
/// stale one delays a socket read by one poll at most or costs one.
#[derive(Default)]
struct Pace {
    /// When a ring last delivered (engine time; 0: never).
    rings_at: AtomicU64,
    /// When the socket was last read and found empty; 0: it had data (or
    /// was never read).
    empty_at: AtomicU64,
}

impl Pace {
    /// Whether this poll reads the socket.
    fn socket_due(&self, now: Nanos) -> bool {
        let rings = self.rings_at.load(Relaxed);
        let empty = self.empty_at.load(Relaxed);
        rings == 0
            || now.saturating_sub(rings) >= RINGS_RECENT_NS
            || empty == 0
            || now.saturating_sub(empty) >= SOCKET_EVERY_NS
    }

    /// The socket was read at `now`: `got` datagrams.
    fn socket_read(&self, now: Nanos, got: usize) {
        self.empty_at
            .store(if got == 0 { now.max(1) } else { 0 }, Relaxed);
    }
}

/// What an application-thread read needs: the socket (a duplicate of the
/// progress thread's descriptor) and its own buffers.
struct Reader {
    socket: Option<UdpSocket>,
    local: SocketAddr,
    share: Option<Arc<Slot>>,
    slot_len: usize,
    mem: Vec<u8>,
    meta: Vec<sys::Received>,
    /// A read's datagrams for the engine: offset in `mem`, length, sender.
    passed: Vec<(usize, usize, SocketAddr)>,
}

impl RxGate {
    pub(crate) fn new(socket: &UdpSocket, local: SocketAddr, opts: &DriverOptions) -> Self {
        let enabled = opts.poll_receive && !opts.faults.is_active() && opts.capture.is_none();
        let slot_len = opts.max_datagram_bytes.max(1);
        let lease_max_ns = opts.poll_lease.as_nanos().min(u128::from(u64::MAX / 2)) as u64;
        // The duplicate is made only when it is used; failing to make one turns this off.
        let socket = enabled.then(|| socket.try_clone().ok()).flatten();
        RxGate {
            enabled: socket.is_some(),
            asleep: AtomicBool::new(false),
            aside: AtomicBool::new(false),
            until: AtomicU64::new(0),
            lease_until: AtomicU64::new(0),
            busy_until: AtomicU64::new(0),
            polled_at: AtomicU64::new(0),
            by_wait: AtomicBool::new(false),
            lease_ns: AtomicU64::new(lease_max_ns),
            lease_max_ns,
            local,
            pace: Pace::default(),
            reader: Mutex::new(Reader {
                socket,
                local,
                share: opts.share.clone(),
                slot_len,
                // Untouched pages of a zeroed allocation cost nothing.
                mem: Vec::new(),
                meta: vec![sys::Received::default(); SLOTS],
                passed: Vec::new(),
            }),
        }
    }

    /// Whether application threads may read: the option is on, and no
    /// faults or capture are configured.
    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    /// The progress thread, around each read-and-deliver of the socket.
    pub(crate) fn hold(&self) -> MutexGuard<'_, impl Sized> {
        self.reader.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The progress thread, before its sleeping poll(2) that lasts until
    /// `until` at most (`Some`), and after it (`None`). `aside`: the sleep
    /// leaves the socket to the polling threads (see [`RxGate::lease`]).
    /// Returns whether it may: the lease still holds after the sleep was
    /// published (a lease ended before this is seen here; one ended after it
    /// sees `aside` and rings the doorbell: no sleep outlives it unnoticed).
    pub(crate) fn set_asleep(&self, until: Option<Nanos>, aside: bool, now: Nanos) -> bool {
        if !self.enabled {
            return false;
        }
        let Some(t) = until else {
            // Awake: asleep first, so that no moment looks like a sleep
            // watching the socket (crate::callertx::Shared::leave_to_poller).
            self.asleep.store(false, SeqCst);
            self.aside.store(false, SeqCst);
            return false;
        };
        self.until.store(t, SeqCst);
        self.aside.store(aside, SeqCst);
        self.asleep.store(true, SeqCst);
        let aside = aside && self.lease(now).is_some();
        if !aside {
            self.aside.store(false, SeqCst);
        }
        aside
    }

    /// When the polling threads' lease on the socket ends, if it holds at
    /// `now`: while it holds, the progress thread sleeps without watching the
    /// socket, at most until then. While a polling thread works on what it
    /// found, the lease holds and is looked at again a lease's time later
    /// (the work's end renews it from there).
    pub(crate) fn lease(&self, now: Nanos) -> Option<Nanos> {
        if !self.enabled {
            return None;
        }
        let until = self.lease_until.load(SeqCst);
        if until > now {
            return Some(until);
        }
        let busy = self.busy_until.load(SeqCst);
        (busy > now).then(|| busy.min(now.saturating_add(self.lease_ns.load(Relaxed))))
    }

    /// Whether a polling thread works on what its poll found at `now`: the
    /// rings are its own, the progress thread leaves them alone.
    pub(crate) fn busy(&self, now: Nanos) -> bool {
        self.enabled && self.busy_until.load(SeqCst) > now
    }

    /// Whether an application thread polled an empty CQ within the last
    /// millisecond before `now` (its lease, if any, ended less than that
    /// ago): a thread that works its CQs, even if the lease lapsed while
    /// it handled completions.
    pub(crate) fn polled_lately(&self, now: Nanos) -> bool {
        let until = self.lease_until.load(Relaxed);
        self.enabled && until != 0 && until.saturating_add(1_000_000) > now
    }

    /// A thread polled an empty CQ at `now`: the lease lasts until `now` +
    /// the lease time. A renewal that would move the lease and the time of
    /// the last poll by less than [`RENEW_NS`] writes nothing: threads
    /// polling at once would otherwise write these words in turn at every
    /// poll (and a lease is at least [`MIN_LEASE_NS`], the quiet time
    /// [`QUIET_NS`]).
    fn renew(&self, now: Nanos) {
        let lease = self.lease_ns.load(Relaxed);
        let until = now.saturating_add(lease);
        if self.polled_at.load(Relaxed).saturating_add(RENEW_NS) > now
            && self.lease_until.load(SeqCst).saturating_add(RENEW_NS) > until
        {
            return;
        }
        self.polled_at.store(now, Relaxed);
        self.lease_until.store(until, SeqCst);
    }

    /// Whether no thread polled for [`QUIET_NS`] before `now` and none works
    /// on what it found: a datagram that waits now waits for a thread that
    /// stopped polling (it spins on memory, it works elsewhere), even if it
    /// renewed the lease since the progress thread went to sleep.
    pub(crate) fn quiet(&self, now: Nanos) -> bool {
        now.saturating_sub(self.polled_at.load(Relaxed)) > QUIET_NS && !self.busy(now)
    }

    /// The polling thread starts on work found at `now` (datagrams to hand
    /// to the engine, a batch to send): the lease holds for as long as that
    /// may take, up to [`WORK_LEASE_NS`], and is renewed from its end
    /// ([`RxGate::worked`]). A batch of runs takes longer than a short lease
    /// (64 runs of 60 KiB: a few hundred µs), and a lease that lapsed
    /// meanwhile woke the progress thread to work the same rings and queue
    /// beside this one, on the core the peer process needed
    /// (spec/performance.md §17.12).
    fn working(&self, now: Nanos) {
        self.busy_until
            .store(now.saturating_add(WORK_LEASE_NS), SeqCst);
    }

    /// The polling thread's work ended at `now`: the lease counts from here.
    fn worked(&self, now: Nanos) {
        self.renew(now);
        self.busy_until.store(0, SeqCst);
    }

    /// The progress thread woke from a sleep aside that lasted until the
    /// lease's end: `renewed`, the lease had been renewed meanwhile (a
    /// thread polls on: the lease doubles, up to its maximum); `waited`, a
    /// datagram was waiting for a thread that had stopped polling (the
    /// lease had ended, or no poll came for [`QUIET_NS`]: a program that
    /// polls for its completion and then spins on memory for its peer's
    /// data renews the lease every round, yet leaves that data to the
    /// lease's end: the lease halves, down to [`MIN_LEASE_NS`]). So a datagram
    /// waits at most the longest lease plus one wake-up, and a program
    /// whose data keeps coming after its last poll soon waits much less.
    pub(crate) fn lease_ended(&self, renewed: bool, waited: bool, c: &Counters) {
        let lease = self.lease_ns.load(Relaxed);
        let next = if waited {
            Counters::add(&c.lease_shrinks, 1);
            (lease / 2).max(MIN_LEASE_NS.min(self.lease_max_ns))
        } else if renewed {
            lease.saturating_mul(2).min(self.lease_max_ns)
        } else {
            lease
        };
        self.lease_ns.store(next, Relaxed);
    }

    /// The progress thread is in a pass (not asleep, nor about to be).
    pub(crate) fn progress_awake(&self) -> bool {
        !self.asleep.load(SeqCst)
    }

    /// Whether the progress thread sleeps watching the socket (not aside):
    /// only an arrival, the doorbell or its deadline wakes it.
    pub(crate) fn asleep_watching(&self) -> bool {
        self.asleep.load(SeqCst) && !self.aside.load(SeqCst)
    }

    /// The lease ends now (`ibv_req_notify_cq`: the thread is about to
    /// block). Whether the progress thread sleeps aside and must be woken
    /// to watch the socket again.
    pub(crate) fn end_lease(&self) -> bool {
        if !self.enabled || self.lease_until.load(SeqCst) == 0 {
            return false;
        }
        self.busy_until.store(0, SeqCst);
        self.lease_until.store(0, SeqCst);
        self.asleep.load(SeqCst) && self.aside.load(SeqCst)
    }
}

/// An application thread polled an empty CQ: it renews the lease, reads
/// the socket once without waiting if the progress thread sleeps and nobody
/// else reads, hands the datagrams to the engine, and transmits what they
/// made and what posts left to it (crate::callertx); what they made waits
/// instead when they completed a receive (see [`defers`]). How many
/// datagrams it handed to the engine.
pub(crate) fn drive<E: Engine>(shared: &Shared<E>) -> usize {
    // Off (faults, capture): no clock reading either.
    if !shared.rx.enabled {
        return 0;
    }
    drive_for(shared, shared.clock.now(), None)
}

/// [`drive`] for a post that waits for the answer to it (crate::linger):
/// a whole RDMA WRITE taken after the engine's count was `seen` counts as
/// a completed receive (its ACK may wait for the answer's post, which
/// comes at once in that pattern). `now`: the time of this poll.
pub(crate) fn drive_for<E: Engine>(shared: &Shared<E>, now: Nanos, seen: Option<u64>) -> usize {
    let gate = &shared.rx;
    if !gate.enabled {
        return 0;
    }
    gate.renew(now);
    if let Some(tx) = &shared.caller_tx {
        tx.polls(now);
    }
    if gate.by_wait.load(Relaxed) != seen.is_some() {
        gate.by_wait.store(seen.is_some(), Relaxed);
    }
    // A waiting post reads even while the progress thread is awake: woken
    // (a timer, the lease's end), it may wait for a core behind spinning
    // threads for a whole time slice. The reader's lock keeps the order.
    let read = if gate.asleep.load(SeqCst) || seen.is_some() {
        read(shared, now, seen)
    } else {
        Read::default()
    };
    // Delivering marked the gate working (RxGate::working).
    let mut busy = read.delivered > 0;
    let mut sent = false;
    // What is left unsent, and whose it is (crate::callertx::CallerTx::want).
    let left = match &shared.caller_tx {
        Some(tx) if defers(&read, tx.is_wanted()) => {
            // Left to this thread's next post or poll; the notifications go now.
            shared.deliver_notifications();
            Counters::add(&shared.counters.deferred_transmits, 1);
            Some(LaneSet::mine())
        }
        Some(tx) => match (tx.take_wanted(now), read.work) {
            (wanted, false) if wanted.is_empty() => None,
            // What the delivery made is this lane's.
            (wanted, _) => {
                let reach = wanted.with(LaneSet::mine());
                // A delivery may have taken a while: what it made is sent at
                // the time it is sent (the retransmission timers start then).
                let now = if read.delivered > 0 {
                    shared.clock.now()
                } else {
                    now
                };
                gate.working(now);
                busy = true;
                sent = true;
                shared
                    .transmit_here(now, reach, None)
                    .is_none()
                    .then_some(reach)
            }
        },
        None if read.work => {
            shared.doorbell.ring();
            None
        }
        None => None,
    };
    if busy || left.is_some() {
        // The work's end, where the lease counts from. A delivery of a
        // datagram or two, nothing sent, takes about a microsecond: the
        // poll's start serves (a clock reading here was 3 % of a same-host
        // ping-pong's hop, spec/performance.md §26).
        let short = !sent && read.delivered <= DEFER_MAX_DELIVERED;
        let end = if short { now } else { shared.clock.now() };
        if busy {
            gate.worked(end);
        }
        if let Some(reach) = left {
            // Busy, or deferred: the next poll or post sends it; nobody may
            // poll again (a thread about to block), so the handshake of any
            // other post applies.
            shared.leave_to_poller(end, reach);
        }
    }
    if read.timer {
        shared.doorbell.ring();
    }
    read.delivered
}

/// The most datagrams a poll delivers and still leaves what they made to
/// the next post or poll ([`defers`]).
const DEFER_MAX_DELIVERED: usize = 2;

/// Whether a poll leaves what its delivery made (an ACK) to the program's
/// next post or poll, so that it leaves in one system call with the reply
/// the program posts to what it received (spec/performance.md §18):
/// - only when the delivery completed a receive (on any CQ: a program
///   often reaps its send completion first and its receive after), as a
///   request answered at once comes after a receive; a WRITE's or an ACK's
///   delivery has no reply to wait for (`ib_write_lat` spins on memory),
///   and an ACK left then measured more stalls of a millisecond (§18);
/// - for a delivery of one or two datagrams (a request and perhaps the ACK
///   of our last; a stream's ACKs leave at once, as before);
/// - from the socket only: an answer into a same-host ring costs no system
///   call to save (and deferring it measured worse, §18);
/// - when nothing was left to this poll already (a post that waits for it
///   leaves now).
///
/// It waits at most until the lease ends (the progress thread sends it).
fn defers(read: &Read, wanted: bool) -> bool {
    read.received
        && read.work
        && read.delivered <= DEFER_MAX_DELIVERED
        && read.from_rings == 0
        && !wanted
}

/// What one application-thread read did.
#[derive(Default)]
struct Read {
    /// Datagrams handed to the engine.
    delivered: usize,
    /// Of them, those a same-host ring carried.
    from_rings: usize,
    /// Those from the socket completed a receive.
    received: bool,
    /// The engine has something to send or deliver since.
    work: bool,
    /// Its next deadline comes before the sleeping progress thread's wake-up.
    timer: bool,
}

/// One nonblocking read of the socket and the same-host path's rings, the
/// datagrams handed to the engine; nothing from a source another thread
/// reads, or where nothing is queued.
/// `now`: when the poll began (one clock reading serves the whole poll).
fn read<E: Engine>(shared: &Shared<E>, now: Nanos, seen: Option<u64>) -> Read {
    // The rings only after the socket: while the progress thread reads the
    // socket, a ring datagram must not overtake an older one of the same
    // peer still in it (a path that just opened).
    let (from_socket, received) = if shared.rx.pace.socket_due(now) {
        let Some(got) = read_socket(shared, now, seen) else {
            return Read::default();
        };
        got
    } else {
        Counters::add(&shared.counters.poll_socket_skips, 1);
        (0, false)
    };
    let from_rings = read_rings(shared, now);
    let delivered = from_socket + from_rings;
    if delivered == 0 {
        return Read::default();
    }
    // What the engine queued (an ACK, a response) and its notifications,
    // and whether a timer comes before the progress thread's sleep ends.
    let e = shared.engine();
    let until = shared.rx.until.load(SeqCst);
    Read {
        delivered,
        from_rings,
        received,
        // What the delivery made is in this thread's lane.
        work: e.has_work_in(LaneSet::mine()),
        timer: e.poll_timeout().is_some_and(|t| t < until),
    }
}

/// One nonblocking read of the socket, its datagrams handed to the engine:
/// how many, and whether they completed a receive; `None` when the progress
/// thread holds the socket.
fn read_socket<E: Engine>(
    shared: &Shared<E>,
    now: Nanos,
    seen: Option<u64>,
) -> Option<(usize, bool)> {
    let gate = &shared.rx;
    let mut reader = match gate.reader.try_lock() {
        Ok(r) => r,
        Err(TryLockError::Poisoned(p)) => p.into_inner(),
        Err(TryLockError::WouldBlock) => return None,
    };
    let r = &mut *reader;
    let Some(socket) = &r.socket else {
        return Some((0, false));
    };
    if r.mem.is_empty() {
        r.mem = vec![0; SLOTS * r.slot_len];
    }
    let c = &shared.counters;
    // Nothing queued, or an error: the progress thread's to see and count.
    let got = sys::recvmmsg(socket.as_fd(), &mut r.mem, r.slot_len, &mut r.meta);
    gate.pace.socket_read(now, *got.as_ref().unwrap_or(&0));
    let Ok(got) = got else {
        return Some((0, false));
    };
    Counters::add(&c.recv_calls, 1);
    Counters::add(&c.poll_receive_calls, 1);
    let mut passed = std::mem::take(&mut r.passed);
    passed.clear();
    for (i, m) in r.meta[..got].iter().enumerate() {
        let chunk = &r.mem[i * r.slot_len..(i + 1) * r.slot_len];
        let coalesced = m.segment.is_some_and(|s| s < m.len);
        for (off, len) in sys::split(m.len, m.segment) {
            if coalesced {
                Counters::add(&c.gro_datagrams, 1);
            }
            let one = sys::Received {
                len,
                segment: None,
                ..*m
            };
            let bytes = &chunk[off..off + len];
            if let Some(slot) = &r.share {
                if crate::progress::forward(slot, c, r.local, &one, bytes) {
                    continue;
                }
            }
            let Some(from) = one.from.filter(|_| !one.truncated) else {
                Counters::add(&c.recv_errors, 1);
                tracing::warn!(local = %r.local, len, truncated = one.truncated,
                    "unusable datagram (cut to the buffer, or an unknown sender address); dropped");
                continue;
            };
            Counters::add(&c.datagrams_received, 1);
            Counters::add(&c.bytes_received, len as u64);
            passed.push((i * r.slot_len + off, len, from));
        }
    }
    let delivered = passed.len();
    let received = delivered > 0 && {
        gate.working(now);
        let e = shared.engine();
        let before = e.receives_completed();
        // One call per sender's run, in arrival order; the poll's reading,
        // taken just before the call that returned these (none per datagram).
        for run in passed.chunk_by(|a, b| a.2 == b.2) {
            let mut each = run.iter().map(|&(at, len, _)| &r.mem[at..at + len]);
            e.handle_batch(now, run[0].2, r.local, &mut each);
        }
        e.receives_completed() != before || seen.is_some_and(|n| e.writes_taken().0 != n)
    };
    r.passed = passed;
    Counters::add(&c.poll_receive_datagrams, delivered as u64);
    Some((delivered, received))
}

/// The same-host path's rings (crate::shm), read where the datagrams lie
/// if no other thread reads them; how many went to the engine.
fn read_rings<E: Engine>(shared: &Shared<E>, now: Nanos) -> usize {
    let Some(mut shm) = shared.shm_with_rings() else {
        return 0;
    };
    let c = &shared.counters;
    let local = shared.rx.local;
    let mut delivered = 0;
    // What the engine answers goes back at once from this thread too,
    // as its transmits do (crate::callertx).
    let respond = shared.caller_tx.is_some();
    let instant = shared.clock.instant(now);
    shm.receive_in_place(instant, SLOTS * 16, c, respond, |batch, rooms| {
        lanes::stamp::at(Point::RingTaken);
        shared.rx.working(now);
        let (mut n, mut bytes) = (0, 0);
        for (b, _) in batch.datagrams() {
            n += 1;
            bytes += b.len() as u64;
        }
        Counters::add(&c.datagrams_received, n as u64);
        Counters::add(&c.bytes_received, bytes);
        delivered += n;
        crate::shm::deliver(&*shared.engine(), now, local, batch, rooms);
        lanes::stamp::at(Point::RingDelivered);
    });
    if let Some(peers) = shm.take_intact() {
        shared.engine().set_intact_peers(&peers);
    }
    if delivered > 0 {
        shared.rx.pace.rings_at.store(now.max(1), Relaxed);
    }
    Counters::add(&c.poll_receive_datagrams, delivered as u64);
    delivered
}

#[cfg(test)]
mod tests;

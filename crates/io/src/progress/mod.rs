//! The progress thread: the loop that moves datagrams between the socket and the engine.
//!
//! It owns the socket and two datagram buffers; it shares only the engine
//! (locked per step), the doorbell, counters and the notification targets. One
//! *pass* receives, fires due timers, transmits and delivers notifications, each
//! bounded by `batch` (the order is documented in [`crate::engine`]). After a
//! pass with no work it busy-polls for `busy_poll`, then sleeps in ppoll(2) on
//! the socket and the doorbell until the engine's next deadline (at most
//! [`MAX_SLEEP`]). It exits when the stop flag is set.
//!
//! A pass reads the socket and the shared-address inbox only when the last
//! poll(2) reported them readable, or while reads keep coming back full: a
//! read that would find nothing (EAGAIN) is not made. Level-triggered poll
//! loses nothing this way: what is left unread wakes the next sleep at once.
//! After two working passes in a row, and before each busy-poll pass, one
//! zero-timeout poll(2) learns what became readable meanwhile (one call for
//! every source instead of a read of each).
//!
//! Fault injection and capture sit at the socket boundary: a datagram from
//! the engine passes the transmit faults (drop, corrupt, duplicate, hold for
//! delay or reordering) and is captured when it really leaves; a datagram from
//! the socket is captured as read, then passes the receive faults. The
//! loopback shortcut is a send followed by a receive, so both apply to it. Held
//! datagrams are released by the pass after their time (the sleep wakes for
//! them).
//!
//! Runs of equal-size datagrams to one destination leave as one UDP GSO send
//! each ([`crate::socket::Sender`]), and the socket asks for UDP GRO, whose
//! coalesced buffers are cut back into datagrams ([`sys::split`]) before
//! anything else sees them: faults, capture, the shared-address forwarding and
//! the engine still see one datagram at a time.
//!
//! Files: this one (the loop, transmit), `rx.rs` (receive), `faults.rs` (the fault
//! models and the fate of each datagram), `shm.rs` (the same-host path's
//! hooks), `sleep.rs` (how and how long the thread sleeps, the polling
//! thread's lease).

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::batch::{self, Fill, Item, TxBatch, TxSink, BURST};
use crate::capture::Capture;
use crate::clock::Nanos;
use crate::counters::Counters;
use crate::driver::Shared;
use crate::engine::{Engine, Notification, Transmit};
use crate::hold::Dir;
use crate::options::DriverOptions;
use crate::share::{self, Slot};
use crate::shm::{next_datagram, Built};
use crate::socket::{self, SendOutcome};
use crate::sys;
use lanes::LaneSet;

mod faults;
mod rx;
mod shm;
mod sleep;

use faults::{Fate, Faults};
pub(crate) use rx::forward;

/// Longest sleep with no deadline (a safety net; wake-ups come from fds).
pub const MAX_SLEEP: Duration = Duration::from_secs(1);
/// Longest sleep while posting threads transmit by themselves
/// (crate::driver): a post that arms an engine deadline before the sleeping
/// thread's wake-up must ring the doorbell; one after it need not.
const CALLER_TX_MAX_SLEEP: Duration = Duration::from_millis(25);
/// Longest sleep while a datagram waits for room in the socket (ENOBUFS gives no POLLOUT).
const RETRY_SLEEP: Duration = Duration::from_millis(1);
/// How long the thread watches before it sleeps after a pass that took a
/// stream's batch: from a ring (crate::shm::InPlace::is_stream), or a read
/// of [`STREAM_BATCH`] datagrams or more from the socket. A 64 KiB run
/// comes every few µs in a stream; a window of short messages comes in
/// bursts a window's round trip apart, 100–150 µs over UDP at perftest's
/// defaults, and a sleep and its wake-up cost more than the watch
/// (spec/performance.md §29: 50 → 300 µs, same-host atomics 0.955×, UDP
/// `-s 64` 0.909×, UDP atomics 0.905× the time per WR). Only while no
/// application thread polls: with one, the watching thread took the core
/// it needs (64 KiB SEND halved).
const STREAM_WATCH: Duration = Duration::from_micros(300);
/// A read of this many datagrams or more is a stream's (a window of short
/// messages; a ping-pong's read brings one or two), as a ring batch is.
const STREAM_BATCH: usize = crate::shm::STREAM_BATCH;
/// The receive sources a pass reads: those the last poll(2) reported
/// readable, and the socket while reads come back full.
#[derive(Debug, Clone, Copy, Default)]
struct Readable {
    socket: bool,
    /// The shared address's inbox.
    inbox: bool,
    /// The shared address's CM service sockets.
    services: bool,
}

pub(crate) struct Progress<E: Engine> {
    shared: Arc<Shared<E>>,
    socket: UdpSocket,
    local: SocketAddr,
    /// Receive slots (`rx_meta.len()` of `rx_slot` bytes) for one recvmmsg.
    rx_mem: Vec<u8>,
    rx_slot: usize,
    rx_meta: Vec<sys::Received>,
    /// Datagrams the next recvmmsg asks for (1..=`rx_meta.len()`).
    rx_want: usize,
    /// (offset in `rx_mem`, length, time read, sender) of the received datagrams
    /// that go to the engine.
    rx_passed: Vec<(usize, usize, Nanos, SocketAddr)>,
    /// Datagrams collected from the engine; what it still holds waits for
    /// room. Unused while the application threads transmit too
    /// (crate::callertx: the queue is then under the transmit gate).
    txq: TxBatch,
    /// What the engine gave `txq`'s datagrams (`None` only while in use).
    claims: Option<E::Claims>,
    /// (slot, datagram, time polled) of one collection, reused.
    collected: Vec<(usize, crate::engine::Transmit, Nanos)>,
    notes: Vec<Notification>,
    batch: usize,
    busy_poll: Duration,
    /// The last pass took a stream's batch, from a ring (a run, or several
    /// datagrams: crate::shm::InPlace::is_stream) or from the socket
    /// ([`STREAM_BATCH`] datagrams in a read): before sleeping, watch a
    /// little longer ([`STREAM_WATCH`]) unless an application thread polls
    /// its CQs (it needs the core; crate::pollrx::RxGate::polled_lately).
    stream_came: bool,
    faults: Faults,
    capture: Option<Capture>,
    /// This process's slot of a shared address, and the buffer its inbox is read into.
    share: Option<(Arc<Slot>, Vec<u8>)>,
    /// The multicast groups' sockets (a copy of `Shared::groups` at
    /// `groups_seen`), their receive buffer, and the poll set (reused).
    groups: Vec<crate::mcast::GroupSocket>,
    groups_seen: u64,
    group_buf: Vec<u8>,
    pollfds: Vec<libc::pollfd>,
    /// RAW_PACKET QPs' frames (crate::raw).
    raw: crate::raw::RawPath,
    /// Sends runs of datagrams, with UDP GSO while the kernel takes it.
    sender: socket::Sender,
    /// What the next pass reads (see the module notes).
    readable: Readable,
    /// shm: whether the last transmit stopped at a full ring of the
    /// same-host path (`Shared::shm`; then the sleep does not wait for POLLOUT).
    shm_full: bool,
    /// shm: (offset in the stage, length, time, sender, intact) of the ring
    /// datagrams that go to the engine (reused).
    shm_passed: Vec<(usize, usize, Nanos, SocketAddr, crate::shm::ring::Meta)>,
}

impl<E: Engine> Progress<E> {
    pub(crate) fn new(
        shared: Arc<Shared<E>>,
        socket: UdpSocket,
        local: SocketAddr,
        opts: &DriverOptions,
        capture: Option<Capture>,
    ) -> Self {
        let max = opts.max_datagram_bytes.max(1);
        let batch = opts.batch.max(1);
        let rx_slots = batch.min(sys::MMSG_MAX);
        if opts.gro {
            // Coalesced reads fit the slots: a GRO buffer is at most 64 KiB, as is a slot
            // by default; one that does not fit is cut and counted as unusable.
            socket::enable_gro(&socket);
        }
        // With the application threads' transmit, the queue is the gate's.
        let txq = match shared.caller_tx {
            Some(_) => TxBatch::default(),
            None => TxBatch::new(batch, max),
        };
        Progress {
            shared,
            socket,
            local,
            // One zeroed allocation (from mmap when large): untouched pages cost nothing.
            rx_mem: vec![0; rx_slots * max],
            rx_slot: max,
            rx_meta: vec![sys::Received::default(); rx_slots],
            rx_passed: Vec::with_capacity(rx_slots),
            rx_want: 1,
            // With the application threads' transmit, the queue is the gate's.
            txq,
            claims: Some(Default::default()),
            collected: Vec::with_capacity(batch),
            notes: Vec::with_capacity(opts.batch.max(1)),
            batch: opts.batch.max(1),
            busy_poll: opts.busy_poll,
            stream_came: false,
            faults: Faults::new(opts),
            capture,
            share: opts
                .share
                .clone()
                .map(|s| (s, vec![0; Slot::buffer_len(max)])),
            groups: Vec::new(),
            groups_seen: 0,
            group_buf: Vec::new(),
            pollfds: Vec::with_capacity(3),
            raw: crate::raw::RawPath::new(opts),
            sender: socket::Sender::new(opts.gso),
            // Nothing known yet: the first sleep's poll says what is queued.
            readable: Readable::default(),
            shm_full: false,
            shm_passed: Vec::new(),
        }
    }

    pub(crate) fn run(mut self) {
        let mut last_work = Instant::now();
        let mut streak = 0u32;
        let mut watch_until = None;
        while !self.shared.stop.load(SeqCst) {
            crate::ab::tick();
            if std::mem::take(&mut self.stream_came) {
                watch_until = Some(Instant::now() + STREAM_WATCH);
                Counters::add(&self.shared.counters.stream_watches, 1);
            }
            if self.pass() {
                last_work = Instant::now();
                streak += 1;
                if streak >= 2 {
                    // Work keeps coming without a sleep: learn what became
                    // readable meanwhile, so receive is not starved by it.
                    self.peek();
                }
            } else if last_work.elapsed() < self.busy_poll
                || watch_until.is_some_and(|t| Instant::now() < t)
                    && !self.shared.rx.polled_lately(self.shared.clock.now())
            {
                // Yield rather than spin: on a machine with few cores the
                // application's poller and the peer's progress thread need the
                // CPU (two processes on 2 cores: 152 µs → ~18 µs median latency).
                std::thread::yield_now();
                self.peek();
                streak = 0;
            } else {
                self.sleep();
                last_work = Instant::now();
                streak = 0;
                watch_until = None;
            }
        }
        self.transmit_left();
        self.flush_capture();
    }

    /// At the end: what was left to a polling thread's next post or poll (an
    /// ACK a poll deferred, crate::pollrx::defers) leaves now.
    fn transmit_left(&mut self) {
        let shared = self.shared.clone();
        let Some(tx) = shared.caller_tx.as_ref().filter(|tx| tx.take_all_wanted()) else {
            return;
        };
        let mut gate = tx.gate();
        let g = &mut *gate;
        self.transmit_with(&mut g.q, &mut g.claims, true);
    }

    /// One pass; whether it did anything.
    fn pass(&mut self) -> bool {
        let received = self.receive()
            | self.receive_forwarded()
            | self.receive_shm()
            | self.receive_groups()
            | self
                .raw
                .receive(&self.shared, self.batch, &mut self.capture);
        let fired = self.timers();
        let released = self.release();
        let sent = self.transmit()
            | self
                .raw
                .transmit(&self.shared, self.batch, &mut self.capture);
        let notified = self.notify();
        Counters::add(&self.shared.counters.passes, 1);
        received || fired || released || sent || notified
    }

    /// Whether a datagram to `to` stays in this process (the loopback shortcut):
    /// our own address, and, on a shared address, a QP of our own slot.
    fn is_ours(&self, to: SocketAddr, bytes: &[u8]) -> bool {
        let slot = self.share.as_ref().map(|(s, _)| &**s);
        share::stays_here(slot, self.local, to, bytes)
    }

    /// A datagram this device sent itself reached it (the loopback
    /// shortcut): receive faults, then the engine, told it is its own. (One
    /// the faults hold reaches the engine later as a peer's; a post waits
    /// for an answer, crate::linger, only where the application threads
    /// transmit, and they do not with faults on.)
    fn arrive_own(&mut self, now: Nanos, bytes: &mut [u8]) {
        let local = self.local;
        if let Fate::Pass = self.inject(Dir::Rx, now, local, bytes) {
            self.shared
                .engine()
                .handle_own_datagram(now, local, bytes, true);
            self.faults.hold.passed(Dir::Rx);
        }
    }

    fn deliver_datagram(&mut self, now: Nanos, from: SocketAddr, bytes: &[u8]) {
        self.shared
            .engine()
            .handle_datagram(now, from, self.local, bytes);
        self.faults.hold.passed(Dir::Rx);
    }

    fn timers(&mut self) -> bool {
        let now = self.shared.clock.now();
        let engine = self.shared.engine();
        match engine.poll_timeout() {
            Some(deadline) if deadline <= now => {
                engine.handle_timeout(now);
                true
            }
            _ => false,
        }
    }

    /// Sends what waited for room; if all of it left, collects up to `batch` new
    /// datagrams from the engine (one lock), passes them through the transmit
    /// faults and sends them (see [`crate::batch`]).
    ///
    /// With the application threads' own transmit on, the whole step holds
    /// its gate and uses its queue (crate::callertx): a datagram taken from
    /// the engine is in the kernel before anyone takes the next, so none
    /// overtakes another (a UC or UD message whose packets are reordered is
    /// lost), and what waits here for room keeps the others out until it
    /// has left.
    fn transmit(&mut self) -> bool {
        let shared = self.shared.clone();
        let Some(tx) = shared.caller_tx.as_ref() else {
            let (mut q, mut claims) = (std::mem::take(&mut self.txq), self.claims.take());
            let work =
                self.transmit_with(&mut q, claims.get_or_insert_with(Default::default), true);
            (self.txq, self.claims) = (q, claims);
            return work;
        };
        // What the application threads' gates left for want of room.
        let mut work = false;
        for mut g in tx.other_gates() {
            if !g.q.is_empty() {
                let g = &mut *g;
                work |= self.transmit_with(&mut g.q, &mut g.claims, false);
            }
        }
        // The queue is the first gate's (crate::callertx), held for the whole step.
        let mut gate = tx.gate();
        let g = &mut *gate;
        let now = shared.clock.now();
        if shared.polled(now) {
            // A thread polls a CQ: it transmits; what waits for room is ours.
            // (Marked even when the engine shows no work: a post may sit in
            // a send ring the engine has not drained yet.)
            let busy = shared.engine().busy_lanes();
            tx.want_from_progress(busy, now);
            return work | self.transmit_with(&mut g.q, &mut g.claims, false);
        }
        tx.take_all_wanted();
        work | self.transmit_with(&mut g.q, &mut g.claims, true)
    }

    /// Whether datagrams wait for room in the socket.
    fn tx_waiting(&self) -> bool {
        match &self.shared.caller_tx {
            Some(tx) => !tx.gate().q.is_empty() || tx.other_gates().any(|g| !g.q.is_empty()),
            None => !self.txq.is_empty(),
        }
    }

    /// Flushes what waits in `q`, then, if `collect`, collects and sends.
    /// Once `q` is empty (all of it left), the engine's `claims` on what it
    /// held are let go.
    fn transmit_with(&mut self, q: &mut TxBatch, claims: &mut E::Claims, collect: bool) -> bool {
        let mut work = false;
        if !q.is_empty() {
            // Already through the faults: they only waited for room.
            let f = batch::flush(q, &mut Wire(self));
            work = f.done > 0;
            if f.blocked {
                return work;
            }
            // A QP back in the ready queue is work for this pass or a poller.
            work |= self.shared.engine().release_claims(claims);
            if !collect {
                return work;
            }
        } else if !collect {
            return false;
        }
        // Rounds of collect-then-send until the engine has nothing or `batch`
        // datagrams went: what the engine queues while a round is sent (a reply
        // posted the moment a completion appeared) leaves in the same pass.
        let mut budget = q.slots();
        while budget > 0 {
            q.reset();
            let n = self.collect(q, claims, budget);
            let blocked = n > 0 && batch::flush(q, &mut Wire(self)).blocked;
            if blocked {
                break;
            }
            // All of it left (a turn that found nothing claims its QP too);
            // a QP the release put back in the ready queue (woken while
            // claimed) gets the next round.
            let requeued = self.shared.engine().release_claims(claims);
            if n == 0 && !requeued {
                break;
            }
            work = true;
            budget = budget.saturating_sub(n.max(1));
        }
        work
    }

    /// Polls up to `max` datagrams from the engine (one lock) into the slots of
    /// `q` and queues those the transmit faults let pass; how many were polled.
    fn collect(&mut self, q: &mut TxBatch, claims: &mut E::Claims, max: usize) -> usize {
        let mut collected = std::mem::take(&mut self.collected);
        let mut built = 0;
        {
            // shm: without faults or a capture (the application threads
            // transmit then), datagrams are built straight into a peer's
            // ring while nothing is queued before them, as the application
            // threads' are (ShmPath::build_in_ring): the path's lock first,
            // then the engine's.
            let plain = self.shared.caller_tx.is_some() && q.is_empty();
            let mut path = plain.then(|| self.shared.try_shm()).flatten();
            let engine = self.shared.engine();
            // The progress thread sends every lane's work.
            engine.set_reach(claims, LaneSet::ALL);
            let c = &self.shared.counters;
            // One reading for the round: its datagrams are built together.
            let now = self.shared.clock.now();
            // The ready QPs whose peers have same-host rings: their
            // packets straight in, each QP's under its lock
            // (`Engine::transmit_ready_through`); the rest below.
            let rooms = path
                .as_mut()
                .and_then(|p| p.rooms_for(c, crate::shm::Whose::Progress));
            if let Some(mut rooms) = rooms {
                built += engine.transmit_ready_through(now, claims, &mut rooms, max);
            }
            let slots = (max - built).min(q.slots());
            let mut i = 0;
            while i < slots {
                if path.is_none() || !collected.is_empty() {
                    // No ring to build in: a QP's packets in one turn.
                    let mut fill = Fill {
                        next: i,
                        end: slots,
                        q: &mut *q,
                        built: |_: &mut TxBatch, slot, t: &Transmit| {
                            collected.push((slot, *t, now))
                        },
                    };
                    let n = engine.poll_transmit_burst(now, claims, &mut fill, BURST);
                    i = fill.next;
                    if n == 0 {
                        break;
                    }
                    continue;
                }
                // Runs only for peers named reached intact: none while
                // this driver has faults or a capture (ShmPath::take_intact).
                let path = path.as_mut().filter(|_| collected.is_empty());
                let built_in = next_datagram(path.map(|p| &mut **p), q.slot_mut(i), c, |b| {
                    engine.poll_transmit_run(now, b, claims)
                });
                match built_in {
                    Built::Sent(t) => {
                        Counters::add(&c.datagrams_sent, 1);
                        Counters::add(&c.bytes_sent, t.len as u64);
                        built += 1;
                    }
                    Built::InSlot(t) => collected.push((i, t, now)),
                    Built::Nothing => break,
                }
                i += 1;
            }
        }
        let n = collected.len() + built;
        for (slot, t, now) in collected.drain(..) {
            let bytes = q.slot_mut(slot);
            if t.len > bytes.len() {
                Counters::add(&self.shared.counters.send_errors, 1);
                tracing::error!(
                    len = t.len,
                    "engine reported a datagram longer than its buffer"
                );
                continue;
            }
            if let Fate::Pass = self.inject(Dir::Tx, now, t.to, &mut bytes[..t.len]) {
                q.push(Item::of(slot, &t));
            }
        }
        self.collected = collected;
        n
    }

    /// A datagram left through the socket: counted and captured.
    fn sent(&mut self, to: SocketAddr, bytes: &[u8]) {
        let c = &self.shared.counters;
        Counters::add(&c.datagrams_sent, 1);
        Counters::add(&c.bytes_sent, bytes.len() as u64);
        if let Some(cap) = self.capture.as_mut() {
            // The clock only for the record: a datagram's send reads none
            // (3 % of a UDP atomics server's samples, one answer per
            // request; spec/performance.md §29).
            let now = self.shared.clock.now();
            cap.record(now, self.local, to, bytes, c);
        }
        self.faults.hold.passed(Dir::Tx);
    }

    /// A datagram to our own address: counted, captured, and it arrives.
    fn looped_back(&mut self, now: Nanos, bytes: &mut [u8]) {
        let c = &self.shared.counters;
        Counters::add(&c.loopback_datagrams, 1);
        Counters::add(&c.loopback_bytes, bytes.len() as u64);
        if let Some(cap) = self.capture.as_mut() {
            cap.record(now, self.local, self.local, bytes, c);
        }
        self.faults.hold.passed(Dir::Tx);
        self.arrive_own(now, bytes);
    }

    fn send_failed(&self, to: SocketAddr, len: usize, e: &io::Error) {
        Counters::add(&self.shared.counters.send_errors, 1);
        tracing::warn!(local = %self.local, %to, len, error = %e, "send failed; dropped");
    }

    /// Puts one datagram on the wire: the socket, or the loopback shortcut for
    /// our own address. Captured when it really leaves. (The held datagrams of
    /// fault injection go this way, one by one; the others go in batches.)
    fn wire_out(&mut self, now: Nanos, to: SocketAddr, bytes: &mut [u8]) -> SendOutcome {
        if self.is_ours(to, bytes) {
            self.looped_back(now, bytes);
            return SendOutcome::Sent;
        }
        if self.shm_out(to, bytes) {
            return SendOutcome::Sent;
        }
        Counters::add(&self.shared.counters.send_calls, 1);
        match socket::send(&self.socket, to, bytes) {
            SendOutcome::Sent => {
                self.sent(to, bytes);
                SendOutcome::Sent
            }
            SendOutcome::Retry => {
                Counters::add(&self.shared.counters.send_retries, 1);
                SendOutcome::Retry
            }
            SendOutcome::Failed(e) => {
                self.send_failed(to, bytes.len(), &e);
                SendOutcome::Failed(e)
            }
        }
    }

    fn flush_capture(&mut self) {
        let now = self.shared.clock.now();
        if let Some(cap) = self.capture.as_mut() {
            cap.flush(now, &self.shared.counters);
        }
    }

    fn notify(&mut self) -> bool {
        {
            let engine = self.shared.engine();
            while self.notes.len() < self.batch {
                let Some(n) = engine.poll_notification() else {
                    break;
                };
                self.notes.push(n);
            }
        }
        let work = !self.notes.is_empty();
        let mut notes = std::mem::take(&mut self.notes);
        for n in notes.drain(..) {
            self.deliver(n);
        }
        self.notes = notes;
        work
    }

    fn deliver(&self, n: Notification) {
        self.shared.deliver(n);
    }
}

/// The progress thread as the sink of a [`TxBatch`] flush.
struct Wire<'a, E: Engine>(&'a mut Progress<E>);

impl<E: Engine> TxSink for Wire<'_, E> {
    fn is_local(&self, to: SocketAddr, bytes: &[u8]) -> bool {
        self.0.is_ours(to, bytes)
    }

    fn send(
        &mut self,
        run: &[(SocketAddr, &[u8])],
        segments: &[Option<[u8; 3]>],
    ) -> io::Result<usize> {
        let p = &mut *self.0;
        // shm: the same-host path first; the socket takes what it declines.
        let run = match p.shm_run(run, segments)? {
            Ok(n) => return Ok(n),
            Err(k) => &run[..k],
        };
        p.sender.send_counted(&p.socket, run, &p.shared.counters)
    }

    fn sent(&mut self, to: SocketAddr, bytes: &[u8]) {
        self.0.sent(to, bytes);
    }

    fn loopback(&mut self, _to: SocketAddr, bytes: &mut [u8]) {
        let now = self.0.shared.clock.now();
        self.0.looped_back(now, bytes);
    }

    fn failed(&mut self, to: SocketAddr, len: usize, error: io::Error) {
        self.0.send_failed(to, len, &error);
    }

    fn blocked(&mut self) {
        Counters::add(&self.0.shared.counters.send_retries, 1);
    }
}

//! Transmit by the application's threads.
//!
//! Owns: the device's transmit queue while the application's threads may
//! transmit ([`TxGate`], a [`TxBatch`] the progress thread uses too), the
//! duplicate socket they send on, and the rules of who sends when.
//!
//! **Who transmits.** Two kinds of application thread send what the engine
//! has ready, with no doorbell and no wake-up:
//! - a thread that posted to an idle send queue ([`crate::Driver::posted`]):
//!   the latency path, one post, its datagrams leave from the poster;
//! - a thread that polls an empty CQ ([`crate::Driver::drive_receive`]): it
//!   holds the polling lease (crate::pollrx) and so will poll again soon, so
//!   a post made while it polls and the progress thread sleeps aside (a
//!   stream of posts, or a post to a busy send queue) is left to its next
//!   poll ([`CallerTx::want`]) instead of ringing the doorbell; the poll
//!   also sends what the datagrams it read made (ACKs, READ responses), or
//!   leaves an ACK to the thread's next post (crate::pollrx::defers). If
//!   it stops polling, the lease ends and the progress thread, which sleeps
//!   no longer than the lease then, sends it: a post waits at most the lease.
//!
//! **Lanes.** Each takes its own lane's QPs only (crate `lanes`: the QPs
//! its thread posted to, and what the datagrams it handed in made ready;
//! `Engine::set_reach`), so that threads transmitting at once work QPs of
//! their own on their own cores. What a post leaves to a poll is marked in
//! the poster's lane ([`CallerTx::want`]): the lane's threads take it at
//! their next poll; another polling thread takes it once it has waited
//! `DriverOptions::caller_tx_lane_wait` (the lane's threads went quiet),
//! or at once if they do not poll. What the progress thread
//! leaves, any poll takes at once; the progress thread itself reaches every
//! lane.
//!
//! Each takes up to a batch of datagrams from the engine under one lock
//! (`try_lock`: never waiting behind the progress thread, which it then
//! wakes instead) and sends them as the progress thread does
//! ([`batch::flush`]: one `sendmmsg(2)` per run, runs of equal sizes to one
//! peer as one UDP GSO send). Datagrams to the driver's own address go to
//! the engine (the loopback shortcut); on a shared address the progress
//! thread's rule of which datagrams stay in this process holds. The
//! notifications the engine made are delivered by the same thread.
//!
//! **The transmit gates.** Whoever takes datagrams from the engine holds a
//! gate (a queue, a sender and the engine's claims) until they are in the
//! kernel, and the engine gives the QPs it took them from to no other
//! thread meanwhile ([`Engine::poll_transmit_claimed`]), so each QP's
//! datagrams leave in the engine's order whichever thread sends them (a UC
//! receiver drops a message whose first packet comes late:
//! `ibv_uc_pingpong` waited forever for one before the gate), while threads
//! with different gates transmit at once. The progress thread waits for the
//! first gate around its transmit step; an application thread tries each
//! gate in turn. What a flush left for lack of room in the socket stays in
//! its gate's queue, with its claims, and that gate takes no new datagrams
//! until it has left: the progress thread (which waits for POLLOUT) sends
//! it. An application thread never waits for room: it leaves the queue and
//! rings the doorbell.
//!
//! The progress thread is woken only when it must act: more datagrams than
//! a batch, a send refused for room, or a new engine deadline (an ACK timer)
//! earlier than the one it sleeps until (`Shared::wake_at`, published before
//! its last look at the engine's deadline).
//!
//! Datagrams for the same-host path (crate::shm) go into its rings, as the
//! progress thread's do: the claims keep them in order with the socket's.
//!
//! On by default (`DriverOptions::caller_tx`; `SOFTVERBS_CALLER_TX=0` turns it
//! off); off while faults or capture are in use (those sit in the progress
//! thread).

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};

use crate::batch::{self, Fill, Item, TxBatch, TxSink, BURST};
use crate::clock::Nanos;
use crate::counters::Counters;
use crate::driver::Shared;
use crate::engine::{Engine, Transmit};
use crate::options::DriverOptions;
use crate::share::Slot;
use crate::shm::{self, Built};
use crate::socket;
use lanes::LaneSet;

/// What the application's threads need to transmit by themselves.
pub(crate) struct CallerTx<C> {
    /// A duplicate of the progress thread's socket.
    socket: UdpSocket,
    local: SocketAddr,
    /// This process's slot of a shared address, if any.
    share: Option<Arc<Slot>>,
    /// The first is the progress thread's (the application threads' too
    /// when it is free).
    gates: Box<[Mutex<TxGate<C>>]>,
    /// `DriverOptions::caller_tx_stream_gap`, ns.
    stream_gap: Nanos,
    /// `DriverOptions::caller_tx_lane_wait`, ns.
    lane_wait: Nanos,
    /// When each lane's threads last posted (engine clock, ns): a thread's
    /// stream is its own posts, and two threads posting at once write
    /// lines of their own.
    last_post: lanes::Striped<AtomicU64>,
    /// What is left to a poll in each lane (a post, a batch that did not
    /// fit): since when (engine time, at least 1; [`AT_ONCE`]: for any
    /// polling thread now); 0: nothing. See [`CallerTx::take_wanted`].
    wanted: lanes::Striped<AtomicU64>,
    /// When each lane's threads last polled a CQ (engine time; 0: never):
    /// a lane whose threads do not poll leaves its work to the polls of
    /// others at once ([`CallerTx::take_wanted`]).
    polled: lanes::Striped<AtomicU64>,
}

/// What a transmit gate guards (see the module doc).
pub(crate) struct TxGate<C> {
    /// A transmit queue: taken from the engine, not yet in the kernel, in
    /// the engine's order.
    pub(crate) q: TxBatch,
    /// The application threads' sender (its GSO state is its own).
    sender: socket::Sender,
    /// What the engine gave this queue's datagrams to no other thread.
    pub(crate) claims: C,
}

/// Transmit gates: one for the progress thread and, if the engine's claims
/// keep each QP's order (`Engine::CLAIMS_ORDER`), one per core (at most 4)
/// for the application threads; else the one.
fn gate_count(claims_order: bool) -> usize {
    match claims_order {
        true => 1 + std::thread::available_parallelism().map_or(1, |n| n.get().min(4)),
        false => 1,
    }
}

/// `CallerTx::last_post` before the first post.
const NEVER: Nanos = Nanos::MAX;

impl<C: Default> CallerTx<C> {
    pub(crate) fn new(
        socket: UdpSocket,
        local: SocketAddr,
        opts: &DriverOptions,
        claims_order: bool,
    ) -> Self {
        let gate = || {
            Mutex::new(TxGate {
                q: TxBatch::new(opts.batch.max(1), opts.max_datagram_bytes.max(1)),
                sender: socket::Sender::new(opts.gso),
                claims: C::default(),
            })
        };
        CallerTx {
            socket,
            local,
            share: opts.share.clone(),
            gates: (0..gate_count(claims_order)).map(|_| gate()).collect(),
            stream_gap: u64::try_from(opts.caller_tx_stream_gap.as_nanos()).unwrap_or(u64::MAX),
            lane_wait: u64::try_from(opts.caller_tx_lane_wait.as_nanos()).unwrap_or(u64::MAX),
            last_post: lanes::Striped::from_fn(|| AtomicU64::new(NEVER)),
            wanted: lanes::Striped::default(),
            polled: lanes::Striped::default(),
        }
    }
}

impl<C> CallerTx<C> {
    /// The progress thread's transmit gate, waited for. An application
    /// thread holds a gate for one batch (up to [`LOOPBACK_ROUNDS`]) and
    /// never waits inside it for room in the socket, but may wait there for
    /// the same-host path's lock (and, on a first datagram to a peer, for
    /// that path to set up its ring; up to `shm::FULL_WAIT` on a full ring)
    /// and for the engine's read lock to hand a looped-back datagram to it.
    pub(crate) fn gate(&self) -> MutexGuard<'_, TxGate<C>> {
        self.gates[0].lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The other gates (the application threads'), each if no one holds it.
    pub(crate) fn other_gates(&self) -> impl Iterator<Item = MutexGuard<'_, TxGate<C>>> {
        self.gates[1..].iter().filter_map(try_gate)
    }

    /// A gate no one holds whose queue is empty, if any (an application
    /// thread's way in, starting from its lane's, so that threads that
    /// transmit at once do not all try the same lock first; the progress
    /// thread's own last, as the progress thread waits for it).
    fn free_gate(&self) -> Option<MutexGuard<'_, TxGate<C>>> {
        let (first, others) = self.gates.split_at(1);
        let start = lanes::lane() % others.len().max(1);
        let (before, from) = others.split_at(start.min(others.len()));
        from.iter()
            .chain(before)
            .chain(first)
            .filter_map(try_gate)
            .find(|g| g.q.is_empty())
    }

    /// A post at `now`: true if it follows the calling thread's previous
    /// one by less than the stream gap (a stream: sent in batches, by a
    /// poller or the progress thread).
    pub(crate) fn streaming(&self, now: Nanos) -> bool {
        let prev = self.last_post.mine().swap(now, SeqCst);
        prev != NEVER && now.saturating_sub(prev) < self.stream_gap
    }

    /// Leaves what the engine has in `lanes` to the next polls (at `now`):
    /// the calling thread's lane's to its own threads, which poll again
    /// soon (a lane's earliest mark stays); another lane's to any thread
    /// at once (the caller reached it and could not finish: the lane's
    /// own threads did not take it, or it is the progress thread's).
    pub(crate) fn want(&self, lanes: LaneSet, now: Nanos) {
        let own = lanes::lane();
        for i in lanes.from(own) {
            self.mark(i, if i == own { time_mark(now) } else { AT_ONCE });
        }
    }

    /// The progress thread leaves what the engine has to the polling
    /// threads: each application lane's work (`busy`) to its own threads
    /// first, its own lane's to any of them at once.
    pub(crate) fn want_from_progress(&self, busy: LaneSet, now: Nanos) {
        let own = lanes::lane();
        for i in busy.with(LaneSet::of(own)).from(own) {
            self.mark(i, if i == own { AT_ONCE } else { time_mark(now) });
        }
    }

    /// Marks lane `i` as left work since `at` (a time mark, or
    /// [`AT_ONCE`]; an earlier mark stays).
    fn mark(&self, i: usize, at: Nanos) {
        let mark = self.wanted.get(i);
        let was = mark.load(SeqCst);
        if was == 0 || was > at {
            mark.store(at, SeqCst);
        }
    }

    /// When a thread of the calling thread's lane last polled a CQ, if one
    /// ever did.
    pub(crate) fn last_poll(&self) -> Option<Nanos> {
        let at = self.polled.mine().load(Relaxed);
        (at != 0).then_some(at)
    }

    /// A thread of the calling thread's lane polls a CQ at `now`.
    pub(crate) fn polls(&self, now: Nanos) {
        let mine = self.polled.mine();
        if mine.load(SeqCst) < now {
            mine.store(now, SeqCst);
        }
    }

    /// A polling thread at `now`: the lanes whose work it takes (their
    /// marks cleared): its own lane's, if marked; a lane's whose threads
    /// have not polled for [`POLLER_NS`] (they post and never poll: a
    /// producer whose consumer polls), at once; any other lane's once it
    /// was left for `DriverOptions::caller_tx_lane_wait` (its threads, which poll, went quiet:
    /// they spin on memory, they block; or it is the progress thread's).
    /// Empty: nothing.
    pub(crate) fn take_wanted(&self, now: Nanos) -> LaneSet {
        let own = lanes::lane();
        let mut lanes = LaneSet::NONE;
        for i in LaneSet::ALL.from(own) {
            let mark = self.wanted.get(i);
            let since = mark.load(SeqCst);
            let polls = now.saturating_sub(self.polled.get(i).load(SeqCst)) < POLLER_NS;
            let due = i == own
                || since == AT_ONCE
                || !polls
                || now.saturating_sub(since) >= self.lane_wait;
            if since != 0 && due && take(mark) {
                lanes = lanes.with(LaneSet::of(i));
            }
        }
        lanes
    }

    /// Takes what was left in `lanes` (a transmit that reaches them).
    fn take_lanes(&self, lanes: LaneSet) {
        for i in lanes.from(0) {
            take(self.wanted.get(i));
        }
    }

    /// Takes everything left, every lane's (the progress thread): whether
    /// anything was.
    pub(crate) fn take_all_wanted(&self) -> bool {
        self.wanted.all().fold(false, |any, mark| take(mark) | any)
    }

    /// Whether something was left to the calling thread's lane.
    pub(crate) fn is_wanted(&self) -> bool {
        self.wanted.mine().load(SeqCst) != 0
    }

    /// Whether something was left in any lane (the progress thread).
    pub(crate) fn is_any_wanted(&self) -> bool {
        self.wanted.all().any(|w| w.load(SeqCst) != 0)
    }
}

/// Clears a lane's mark; whether it was set.
fn take(lane: &AtomicU64) -> bool {
    lane.load(SeqCst) != 0 && lane.swap(0, SeqCst) != 0
}

/// A lane whose threads polled a CQ within this long counts as polling:
/// its work waits `DriverOptions::caller_tx_lane_wait` for them.
pub(crate) const POLLER_NS: Nanos = 1_000_000;

/// The mark of work left for any polling thread at once.
const AT_ONCE: Nanos = 1;

/// The mark of work left at `now` (never 0, "nothing", nor [`AT_ONCE`]).
fn time_mark(now: Nanos) -> Nanos {
    now.max(AT_ONCE + 1)
}

fn try_gate<C>(m: &Mutex<TxGate<C>>) -> Option<MutexGuard<'_, TxGate<C>>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

impl<E: Engine> Shared<E> {
    /// The application threads' transmit is on and a thread polls a CQ (its
    /// lease holds at `now`): that thread transmits, the progress thread
    /// only flushes what waits for room.
    pub(crate) fn polled(&self, now: Nanos) -> bool {
        self.caller_tx.is_some() && self.rx.lease(now).is_some()
    }

    /// The engine has datagrams to send: left to the polling thread's next
    /// poll while its lease holds, else the progress thread is woken. The
    /// progress thread publishes that it sleeps before it looks at
    /// [`CallerTx::wanted`], and this looks at its sleep after setting it,
    /// so a sleep that watches only the socket (not the lease's end) is
    /// either skipped or woken here.
    /// `lanes`: whose work it is (see [`CallerTx::want`]).
    pub(crate) fn leave_to_poller(&self, now: Nanos, lanes: LaneSet) {
        if let Some(tx) = self.caller_tx.as_ref().filter(|_| self.polled(now)) {
            tx.want(lanes, now);
            if !self.rx.asleep_watching() {
                return;
            }
        }
        self.doorbell.ring();
    }
}

impl<E: Engine> Shared<E> {
    /// The calling thread transmits what the engine has ready (see the
    /// module doc): a batch, the gate held until it is in the kernel, then
    /// the notifications it made. A datagram to our own address goes to the
    /// engine inside the flush, and what the engine makes of it (an ACK, a
    /// response, an event) is taken in another round, up to
    /// [`LOOPBACK_ROUNDS`]. How many datagrams left; `None` (nothing taken)
    /// when this is off, another thread holds the gate or the engine, or the
    /// queue waits for room: the caller then leaves the work to a poller or
    /// rings the doorbell.
    /// `now`: the caller's clock reading, for the first round. `lanes`:
    /// whose QPs it takes (its own lane's, and those it took over).
    pub(crate) fn transmit_here(
        &self,
        now: Nanos,
        lanes: LaneSet,
        posted: Option<u64>,
    ) -> Option<usize> {
        let tx = self.caller_tx.as_ref()?;
        // None free, or all wait for room: the progress thread's.
        let mut gate = tx.free_gate()?;
        let g = &mut *gate;
        let mut notes = Vec::new();
        let (mut sent, mut ring, mut more) = (0, false, false);
        for round in 0..LOOPBACK_ROUNDS {
            g.q.reset();
            {
                // shm: the path before the engine (the lock order), to build
                // datagrams straight into a peer's ring while nothing is
                // queued before them (shm::ShmPath::build_in_ring).
                let mut path = self.shm_with_rings();
                let engine = match self.try_engine() {
                    Some(e) => e,
                    None if round == 0 => return None,
                    None => {
                        more = true;
                        break;
                    }
                };
                if round == 0 {
                    // What was left to a poller is taken now (before the
                    // engine is asked: a post left meanwhile stays wanted).
                    tx.take_lanes(lanes);
                    engine.set_reach(&mut g.claims, lanes);
                }
                let now = if round == 0 { now } else { self.clock.now() };
                let (mut slot, mut taken) = (0, 0);
                if g.q.is_empty() {
                    // The ready QPs whose peers have same-host rings: their
                    // packets straight in, each QP's under its lock, no
                    // claim (`Engine::transmit_ready_through`); the rest
                    // below, through the batch.
                    let rooms = path
                        .as_mut()
                        .and_then(|p| p.rooms_for(&self.counters, crate::shm::Whose::Posts));
                    if let Some(mut rooms) = rooms {
                        let n = g.q.slots();
                        let done = engine.transmit_ready_through(now, &mut g.claims, &mut rooms, n);
                        sent += done;
                        taken += done;
                    }
                }
                // The QP just posted to has the first turn.
                let mut first = posted.filter(|_| round == 0);
                while taken < g.q.slots() {
                    if first.is_none() && (path.is_none() || !g.q.is_empty()) {
                        // No ring to build in: a QP's packets in one turn.
                        let counters = &self.counters;
                        let mut fill = Fill {
                            next: slot,
                            end: slot + (g.q.slots() - taken),
                            q: &mut g.q,
                            built: |q: &mut TxBatch, i, t: &Transmit| {
                                queue_built(q, i, t, counters);
                            },
                        };
                        let n = engine.poll_transmit_burst(now, &mut g.claims, &mut fill, BURST);
                        slot = fill.next;
                        taken += n;
                        if n == 0 {
                            break;
                        }
                        continue;
                    }
                    taken += 1;
                    let path = path.as_mut().filter(|_| g.q.is_empty()).map(|p| &mut **p);
                    let (q, claims) = (&mut g.q, &mut g.claims);
                    let qp = first.take();
                    let built =
                        shm::next_datagram(path, q.slot_mut(slot), &self.counters, |b| match qp {
                            Some(h) => engine.poll_transmit_posted(h, now, b, claims),
                            None => engine.poll_transmit_run(now, b, claims),
                        });
                    match built {
                        Built::Sent(t) => {
                            count_sent(&self.counters, t.len);
                            sent += 1;
                        }
                        Built::InSlot(t) => {
                            if queue_built(q, slot, &t, &self.counters) {
                                slot += 1;
                            }
                        }
                        Built::Nothing if qp.is_some() => {}
                        Built::Nothing => break,
                    }
                }
                more = taken == g.q.slots() && engine.has_work_in(lanes);
                while let Some(n) = engine.poll_notification() {
                    notes.push(n);
                }
            }
            let mut wire = CallerWire {
                shared: self,
                tx,
                sender: &mut g.sender,
                sent: 0,
                looped: 0,
            };
            let blocked = batch::flush(&mut g.q, &mut wire).blocked;
            sent += wire.sent;
            if blocked {
                // What is left stays in the gate, claimed: the progress
                // thread sends it when the socket has room.
                ring = true;
                break;
            }
            // All of it left: the QPs it came from may go to any thread.
            let engine = self.engine();
            more |= engine.release_claims(&mut g.claims);
            ring |= engine
                .poll_timeout()
                .is_some_and(|d| d < self.wake_at.load(SeqCst));
            drop(engine);
            if wire.looped == 0 {
                break;
            }
            // What the looped-back datagrams made: the next round, or a
            // poller or the progress thread after the last.
            more = true;
        }
        drop(gate);
        for n in notes {
            self.deliver(n);
        }
        if ring {
            self.doorbell.ring();
        } else if more {
            // Its own lane, and those taken over that still have work.
            let busy = self.engine().busy_lanes().with(LaneSet::mine());
            self.leave_to_poller(self.clock.now(), lanes.and(busy));
        }
        Some(sent)
    }
}

impl<E: Engine> Shared<E> {
    /// A post's packets, just made by this thread, straight into its peer's
    /// same-host ring: `f` gets the engine and the rooms of the rings
    /// (`Engine::transmit_posted_through`, or a post made through them):
    /// no gate, no batch, no claim (each is published while the engine
    /// holds the QP). What `f` said, and whether the engine has more for
    /// this lane (the QP's packets past the first few, or others'); `None`
    /// when it could not (off, a lock busy, no rings) or `f` did not:
    /// [`Shared::transmit_here`] then takes the packets.
    pub(crate) fn through_ring<T>(
        &self,
        f: impl FnOnce(&E, &mut dyn crate::Room) -> Option<T>,
    ) -> Option<(T, bool)> {
        self.caller_tx.as_ref()?;
        let mut path = self.shm_with_rings()?;
        let engine = self.try_engine()?;
        let mut rooms = path.rooms_for(&self.counters, crate::shm::Whose::Posts)?;
        let n = f(&engine, &mut rooms)?;
        let notes: Vec<_> = std::iter::from_fn(|| engine.poll_notification()).collect();
        // A deadline (the ACK timer) earlier than the progress thread's
        // wake-up: it must look again.
        let ring = engine
            .poll_timeout()
            .is_some_and(|d| d < self.wake_at.load(SeqCst));
        let more = engine.has_work_in(LaneSet::mine());
        drop(engine);
        drop(path);
        for n in notes {
            self.deliver(n);
        }
        if ring {
            self.doorbell.ring();
        }
        Some((n, more))
    }
}

/// Queues the datagram the engine built in slot `slot`; false (counted,
/// logged) if it says it is longer than the slot.
fn queue_built(q: &mut TxBatch, slot: usize, t: &Transmit, c: &Counters) -> bool {
    if t.len > q.slot_mut(slot).len() {
        Counters::add(&c.send_errors, 1);
        tracing::error!(
            len = t.len,
            "engine reported a datagram longer than its buffer"
        );
        return false;
    }
    q.push(Item::of(slot, t));
    true
}

/// A datagram an application thread sent, in the counters.
fn count_sent(c: &Counters, len: usize) {
    Counters::add(&c.datagrams_sent, 1);
    Counters::add(&c.bytes_sent, len as u64);
    Counters::add(&c.caller_datagrams, 1);
}

/// Rounds of [`Shared::transmit_here`] at most: each after one that handed
/// datagrams to our own address (their answers).
const LOOPBACK_ROUNDS: usize = 4;

/// An application thread as the sink of a [`TxBatch`] flush.
struct CallerWire<'a, E: Engine> {
    shared: &'a Shared<E>,
    tx: &'a CallerTx<E::Claims>,
    sender: &'a mut socket::Sender,
    sent: usize,
    /// Datagrams handed to our own engine (the loopback shortcut).
    looped: usize,
}

impl<E: Engine> TxSink for CallerWire<'_, E> {
    fn is_local(&self, to: SocketAddr, bytes: &[u8]) -> bool {
        crate::share::stays_here(self.tx.share.as_deref(), self.tx.local, to, bytes)
    }

    fn send(
        &mut self,
        run: &[(SocketAddr, &[u8])],
        segments: &[Option<[u8; 3]>],
    ) -> io::Result<usize> {
        use crate::shm::Run;
        // shm: the same-host path first (intact: no faults while this is on).
        let run = match self.shared.shm() {
            Some(mut shm) => match shm.send_run(run, segments, true, &self.shared.counters) {
                Run::Sent(n) => return Ok(n),
                Run::Full => return Err(io::ErrorKind::WouldBlock.into()),
                Run::Socket(k) => &run[..k],
            },
            None => run,
        };
        self.sender
            .send_counted(&self.tx.socket, run, &self.shared.counters)
    }

    fn sent(&mut self, _to: SocketAddr, bytes: &[u8]) {
        count_sent(&self.shared.counters, bytes.len());
        self.sent += 1;
    }

    fn loopback(&mut self, _to: SocketAddr, bytes: &mut [u8]) {
        let c = &self.shared.counters;
        let now = self.shared.clock.now();
        let local = self.tx.local;
        // Sealed by this engine a moment ago and altered by nothing (no
        // faults or capture while application threads transmit): the engine
        // may skip its ICRC check, as for the same-host path.
        self.shared
            .engine()
            .handle_own_datagram(now, local, bytes, false);
        Counters::add(&c.loopback_datagrams, 1);
        Counters::add(&c.loopback_bytes, bytes.len() as u64);
        Counters::add(&c.caller_datagrams, 1);
        self.sent += 1;
        self.looped += 1;
    }

    fn failed(&mut self, to: SocketAddr, len: usize, error: io::Error) {
        Counters::add(&self.shared.counters.send_errors, 1);
        tracing::warn!(local = %self.tx.local, %to, len, %error,
            "send from an application thread failed; dropped");
    }

    fn blocked(&mut self) {
        Counters::add(&self.shared.counters.send_retries, 1);
    }
}

#[cfg(test)]
mod tests;

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
//!   poll ([`CallerTx::wanted`]) instead of ringing the doorbell; the poll
//!   also sends what the datagrams it read made (ACKs, READ responses). If
//!   it stops polling, the lease ends and the progress thread, which sleeps
//!   no longer than the lease then, sends it: a post waits at most the lease.
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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};

use crate::batch::{self, Item, TxBatch, TxSink};
use crate::clock::Nanos;
use crate::counters::Counters;
use crate::driver::Shared;
use crate::engine::Engine;
use crate::options::DriverOptions;
use crate::share::Slot;
use crate::shm::{self, Built};
use crate::socket;

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
    /// When the device's last post came (engine clock, ns).
    last_post: AtomicU64,
    /// A post was left to the polling thread's next empty poll.
    wanted: AtomicBool,
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
            last_post: AtomicU64::new(NEVER),
            wanted: AtomicBool::new(false),
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
    /// thread's way in; the progress thread's own last, as the progress
    /// thread waits for it).
    fn free_gate(&self) -> Option<MutexGuard<'_, TxGate<C>>> {
        let (first, others) = self.gates.split_at(1);
        others
            .iter()
            .chain(first)
            .filter_map(try_gate)
            .find(|g| g.q.is_empty())
    }

    /// A post at `now`: true if it follows the previous one by less than the
    /// stream gap (a stream: sent in batches, by a poller or the progress thread).
    pub(crate) fn streaming(&self, now: Nanos) -> bool {
        let prev = self.last_post.swap(now, SeqCst);
        prev != NEVER && now.saturating_sub(prev) < self.stream_gap
    }

    /// Leaves the engine's datagrams to the polling thread's next poll.
    pub(crate) fn want(&self) {
        self.wanted.store(true, SeqCst);
    }

    /// Whether something was left to the polling thread (and clears it).
    pub(crate) fn take_wanted(&self) -> bool {
        self.wanted.load(SeqCst) && self.wanted.swap(false, SeqCst)
    }

    /// Whether something was left to the polling thread.
    pub(crate) fn is_wanted(&self) -> bool {
        self.wanted.load(SeqCst)
    }
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
    pub(crate) fn leave_to_poller(&self, now: Nanos) {
        if let Some(tx) = self.caller_tx.as_ref().filter(|_| self.polled(now)) {
            tx.want();
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
    pub(crate) fn transmit_here(&self) -> Option<usize> {
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
                let mut path = self.try_shm();
                let engine = match self.try_engine() {
                    Some(e) => e,
                    None if round == 0 => return None,
                    None => {
                        more = true;
                        break;
                    }
                };
                let now = self.clock.now();
                let (mut slot, mut taken) = (0, 0);
                while taken < g.q.slots() {
                    taken += 1;
                    let path = path.as_mut().filter(|_| g.q.is_empty()).map(|p| &mut **p);
                    let (q, claims) = (&mut g.q, &mut g.claims);
                    let built = shm::next_datagram(path, q.slot_mut(slot), &self.counters, |b| {
                        engine.poll_transmit_run(now, b, claims)
                    });
                    match built {
                        Built::Sent(t) => {
                            count_sent(&self.counters, t.len);
                            sent += 1;
                        }
                        Built::InSlot(t) if t.len > q.slot_mut(slot).len() => {
                            Counters::add(&self.counters.send_errors, 1);
                            tracing::error!(
                                len = t.len,
                                "engine reported a datagram longer than its buffer"
                            );
                        }
                        Built::InSlot(t) => {
                            q.push(Item::of(slot, &t));
                            slot += 1;
                        }
                        Built::Nothing => break,
                    }
                }
                more = taken == g.q.slots() && engine.has_work();
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
            self.leave_to_poller(self.clock.now());
        }
        Some(sent)
    }
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
            .handle_local_datagram(now, local, local, bytes);
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
mod tests {
    use super::*;
    use crate::engine::{Notification, Transmit};
    use crate::Driver;
    use std::collections::VecDeque;
    use std::time::{Duration, Instant};

    /// An engine that sends what is queued, in order; with an answer
    /// address, it answers every datagram it is handed with one to it.
    #[derive(Default)]
    struct Queue(Mutex<VecDeque<(SocketAddr, Vec<u8>)>>, Option<SocketAddr>);

    impl Queue {
        fn q(&mut self) -> &mut VecDeque<(SocketAddr, Vec<u8>)> {
            self.0.get_mut().unwrap()
        }
    }

    impl Engine for Queue {
        type Claims = ();
        fn handle_datagram(&self, _: Nanos, _: SocketAddr, _: SocketAddr, p: &[u8]) {
            if let Some(to) = self.1 {
                self.0.lock().unwrap().push_back((to, [b"re:", p].concat()));
            }
        }
        fn poll_transmit(&self, _: Nanos, buf: &mut [u8]) -> Option<Transmit> {
            let (to, bytes) = self.0.lock().unwrap().pop_front()?;
            buf[..bytes.len()].copy_from_slice(&bytes);
            Some(Transmit {
                to,
                len: bytes.len(),
                segments: None,
            })
        }
        fn poll_timeout(&self) -> Option<Nanos> {
            None
        }
        fn handle_timeout(&self, _: Nanos) {}
        fn poll_notification(&self) -> Option<Notification> {
            None
        }
        fn has_work(&self) -> bool {
            !self.0.lock().unwrap().is_empty()
        }
    }

    /// [`Queue`] whose claims (a count of datagrams taken) say they keep
    /// each QP's order: several gates. Counts its releases.
    #[derive(Default)]
    struct Ordered(Queue, AtomicU64);

    impl Engine for Ordered {
        type Claims = u32;
        const CLAIMS_ORDER: bool = true;
        fn handle_datagram(&self, now: Nanos, from: SocketAddr, to: SocketAddr, p: &[u8]) {
            self.0.handle_datagram(now, from, to, p);
        }
        fn poll_transmit(&self, now: Nanos, buf: &mut [u8]) -> Option<Transmit> {
            self.0.poll_transmit(now, buf)
        }
        fn poll_transmit_claimed(
            &self,
            now: Nanos,
            buf: &mut [u8],
            c: &mut u32,
        ) -> Option<Transmit> {
            let t = self.0.poll_transmit(now, buf)?;
            *c += 1;
            Some(t)
        }
        fn release_claims(&self, c: &mut u32) -> bool {
            if std::mem::take(c) > 0 {
                self.1.fetch_add(1, SeqCst);
            }
            false
        }
        fn poll_timeout(&self) -> Option<Nanos> {
            None
        }
        fn handle_timeout(&self, _: Nanos) {}
        fn poll_notification(&self) -> Option<Notification> {
            None
        }
        fn has_work(&self) -> bool {
            self.0.has_work()
        }
    }

    /// With an engine whose claims keep each QP's order, a post while
    /// another thread holds the first gate leaves from the posting thread
    /// through another gate, and the claims go once its batch left; with
    /// one that does not (Queue) there is one gate.
    #[test]
    fn with_ordered_claims_a_post_goes_through_a_free_gate() {
        let opts = DriverOptions {
            caller_tx: true,
            ..DriverOptions::default()
        };
        let d = Driver::start(Ordered::default(), "127.0.61.21:0".parse().unwrap(), opts).unwrap();
        let peer = UdpSocket::bind("127.0.61.22:0").unwrap();
        peer.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let to = peer.local_addr().unwrap();
        let tx = d.shared().caller_tx.as_ref().unwrap();
        assert!(tx.gates.len() > 1, "a gate per core beside the first");
        let held = tx.gate();
        d.with(|e| e.0.q().push_back((to, vec![5; 4])));
        assert_eq!(d.posted(true), 1, "sent by the posting thread");
        expect(&peer, &[5; 4]);
        assert_eq!(
            d.with(|e| *e.1.get_mut()),
            1,
            "its claims went after the send"
        );
        drop(held);
        let (q, _) = pair("127.0.61.23", "127.0.61.24", DriverOptions::default());
        assert_eq!(q.shared().caller_tx.as_ref().unwrap().gates.len(), 1);
    }

    /// A driver with the application threads' transmit on at `ip`, and a
    /// peer socket at `peer` that receives what it sends.
    fn pair(ip: &str, peer: &str, opts: DriverOptions) -> (Driver<Queue>, UdpSocket) {
        let opts = DriverOptions {
            caller_tx: true,
            ..opts
        };
        let d = Driver::start(Queue::default(), format!("{ip}:0").parse().unwrap(), opts).unwrap();
        assert!(
            d.shared().caller_tx.is_some(),
            "the application threads' transmit is on"
        );
        let peer = UdpSocket::bind(format!("{peer}:0")).unwrap();
        peer.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        (d, peer)
    }

    /// A pair whose posts are all a stream (the gap is an hour) but the
    /// first, which its thread sends; `lease` the polling lease.
    fn streaming(ip: &str, peer: &str, lease: Duration) -> (Driver<Queue>, UdpSocket, SocketAddr) {
        let opts = DriverOptions {
            caller_tx_stream_gap: Duration::from_secs(3600),
            poll_lease: lease,
            ..DriverOptions::default()
        };
        let (d, peer) = pair(ip, peer, opts);
        let to = peer.local_addr().unwrap();
        sleeps(&d, 1); // not in its first pass, holding the gate
        d.with(|e| e.q().push_back((to, vec![1; 4])));
        assert_eq!(d.posted(true), 1, "the first post is sent by its thread");
        expect(&peer, &[1; 4]);
        (d, peer, to)
    }

    /// Waits (bounded) until the progress thread has slept `n` times.
    fn sleeps(d: &Driver<Queue>, n: u64) {
        let start = Instant::now();
        while d.counters().sleeps < n && start.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(d.counters().sleeps >= n, "the progress thread never slept");
    }

    fn expect(peer: &UdpSocket, want: &[u8]) {
        let mut buf = [0u8; 16];
        let n = peer.recv(&mut buf).expect("a datagram");
        assert_eq!(&buf[..n], want);
    }

    /// A thread that took the first datagram of a message from the engine
    /// and has not yet sent it holds the transmit gate: the progress thread,
    /// woken meanwhile, must not send the message's later datagrams before
    /// it (they would overtake it; a UC receiver then drops the message, and
    /// `ibv_uc_pingpong` waited for it forever). When the gate is free, the
    /// progress thread sends the queued one first.
    #[test]
    fn the_progress_thread_never_overtakes_a_queued_datagram() {
        let (d, peer) = pair("127.0.61.11", "127.0.61.12", DriverOptions::default());
        let to = peer.local_addr().unwrap();
        let tx = d.shared().caller_tx.as_ref().unwrap();
        let mut gate = tx.gate();
        let (first_to, first) = d.with(|e| {
            e.q().extend((1..=3u8).map(|i| (to, vec![i; 8])));
            e.q().pop_front().unwrap()
        });
        gate.q.reset();
        gate.q.slot_mut(0)[..first.len()].copy_from_slice(&first);
        gate.q.push(Item {
            slot: 0,
            to: first_to,
            len: first.len(),
            segments: None,
        });
        d.doorbell();
        peer.set_nonblocking(true).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let mut buf = [0u8; 16];
        assert!(
            peer.recv(&mut buf).is_err(),
            "the progress thread sent while another thread held the gate"
        );
        peer.set_nonblocking(false).unwrap();
        drop(gate);
        d.doorbell();
        for want in 1..=3u8 {
            expect(&peer, &[want; 8]);
        }
    }

    /// What waits in the queue for room keeps the posting threads out: they
    /// ring the doorbell instead of sending, and the progress thread sends
    /// the post's datagram after the waiting one.
    #[test]
    fn a_post_while_datagrams_wait_for_room_goes_to_the_progress_thread() {
        let (d, peer) = pair("127.0.61.13", "127.0.61.14", DriverOptions::default());
        let to = peer.local_addr().unwrap();
        let tx = d.shared().caller_tx.as_ref().unwrap();
        sleeps(&d, 1);
        let writes = d.waker().writes();
        {
            let mut g = tx.gate();
            g.q.reset();
            g.q.slot_mut(0)[..4].copy_from_slice(&[6; 4]);
            g.q.push(Item {
                slot: 0,
                to,
                len: 4,
                segments: None,
            });
        }
        d.with(|e| e.q().push_back((to, vec![7; 4])));
        assert_eq!(d.posted(true), 0, "nothing sent from the posting thread");
        assert!(d.waker().writes() > writes, "the doorbell rang");
        expect(&peer, &[6; 4]);
        expect(&peer, &[7; 4]);
        assert_eq!(d.counters().caller_datagrams, 0);
        assert!(
            tx.gate().q.is_empty(),
            "the progress thread emptied the queue"
        );
    }

    /// The first post is sent by its own thread; a post that follows it
    /// within the stream gap, with nobody polling, rings the doorbell, and
    /// the progress thread sends it (in its batches).
    #[test]
    fn a_stream_of_posts_is_left_to_the_progress_thread() {
        let (d, peer, to) = streaming("127.0.61.15", "127.0.61.16", Duration::from_micros(200));
        let writes = d.waker().writes();
        d.with(|e| e.q().push_back((to, vec![2; 4])));
        assert_eq!(d.posted(true), 0, "a post within the gap is not");
        assert!(d.waker().writes() > writes, "the doorbell rang");
        expect(&peer, &[2; 4]);
        assert_eq!(d.counters().caller_datagrams, 1);
    }

    /// Puts the progress thread to sleep aside for a polling thread's lease
    /// (a poll renews it, the doorbell makes the thread sleep again seeing it).
    fn sleep_aside(d: &Driver<Queue>) {
        let start = Instant::now();
        loop {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "never slept aside"
            );
            let (n, aside) = (d.counters().sleeps, d.counters().aside_sleeps);
            d.drive_receive();
            d.doorbell();
            sleeps(d, n + 1);
            std::thread::sleep(Duration::from_millis(1));
            let c = d.counters();
            if c.sleeps == n + 1 && c.aside_sleeps == aside + 1 && d.shared().polled(d.now()) {
                return;
            }
        }
    }

    /// A post while a thread polls but the progress thread sleeps watching
    /// only the socket (it went to sleep before the lease) is left to the
    /// poll and wakes the progress thread too, which then sleeps aside
    /// without sending it; the poll sends it.
    #[test]
    fn a_post_left_to_a_poll_wakes_a_progress_thread_that_would_not_wake_by_itself() {
        let (d, peer, to) = streaming("127.0.61.21", "127.0.61.22", Duration::from_secs(30));
        let start = Instant::now();
        while !d.shared().rx.asleep_watching() {
            assert!(start.elapsed() < Duration::from_secs(20), "never asleep");
            std::thread::sleep(Duration::from_millis(1));
        }
        let (n, writes) = (d.counters().sleeps, d.waker().writes());
        assert_eq!(d.drive_receive(), 0);
        d.with(|e| e.q().push_back((to, vec![2; 4])));
        assert_eq!(d.posted(false), 0);
        assert!(d.waker().writes() > writes, "the doorbell rang");
        sleeps(&d, n + 1);
        peer.set_nonblocking(true).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let mut buf = [0u8; 8];
        assert!(
            peer.recv(&mut buf).is_err(),
            "the progress thread left it to the poll"
        );
        peer.set_nonblocking(false).unwrap();
        d.drive_receive();
        expect(&peer, &[2; 4]);
        assert_eq!(d.counters().caller_datagrams, 2);
    }

    /// A stream of posts while a thread polls is left to that thread: no
    /// doorbell, and its next poll sends every datagram the engine has, in
    /// one batch, in order.
    #[test]
    fn a_stream_of_posts_while_a_thread_polls_is_sent_by_its_next_poll() {
        let (d, peer, to) = streaming("127.0.61.17", "127.0.61.18", Duration::from_secs(30));
        sleep_aside(&d);
        let writes = d.waker().writes();
        for i in 2..=5u8 {
            d.with(|e| e.q().push_back((to, vec![i; 4])));
            assert_eq!(d.posted(i == 2), 0, "left to the poll");
        }
        assert_eq!(d.waker().writes(), writes, "no doorbell");
        assert_eq!(d.drive_receive(), 0, "nothing to read");
        for i in 2..=5u8 {
            expect(&peer, &[i; 4]);
        }
        let c = d.counters();
        assert_eq!(c.caller_datagrams, 5);
        assert!(c.send_calls < 5, "the poll's four went in one call");
    }

    /// A post left to a poll that never comes is sent by the progress
    /// thread when the lease ends.
    #[test]
    fn a_post_left_to_a_poll_that_never_comes_goes_at_the_leases_end() {
        let (d, peer, to) = streaming("127.0.61.19", "127.0.61.20", Duration::from_millis(50));
        let mut left = false;
        for _ in 0..100 {
            sleep_aside(&d);
            let writes = d.waker().writes();
            d.with(|e| e.q().push_back((to, vec![2; 4])));
            assert_eq!(d.posted(false), 0);
            if d.waker().writes() == writes {
                left = true; // to a poll that never comes
                break;
            }
            // The lease ended between the check and the post: the doorbell took it.
            expect(&peer, &[2; 4]);
        }
        assert!(left, "a post was never left to a poll");
        expect(&peer, &[2; 4]);
        assert_eq!(
            d.counters().caller_datagrams,
            1,
            "the progress thread sent it"
        );
    }

    /// A datagram to our own address goes to the engine inside the flush;
    /// what the engine answers (here a datagram to a peer, as an ACK or a
    /// READ response would be) leaves from the same thread in the next
    /// round, not when the progress thread next wakes.
    #[test]
    fn the_answer_to_a_looped_back_datagram_leaves_from_the_same_thread() {
        let (d, peer) = pair("127.0.61.23", "127.0.61.24", DriverOptions::default());
        let (me, to) = (d.local_addr(), peer.local_addr().unwrap());
        sleeps(&d, 1);
        d.with(|e| {
            e.1 = Some(to);
            e.q().push_back((me, b"ping".to_vec()));
        });
        assert_eq!(d.posted(true), 2, "the ping looped back, the answer sent");
        expect(&peer, b"re:ping");
        let c = d.counters();
        assert_eq!((c.loopback_datagrams, c.caller_datagrams), (1, 2));
    }
}

//! Packets out and timers: the scheduler's side. Each call of
//! [`Engine::poll_transmit`] gives the QP at the front of the ready queue one
//! turn ([`crate::qp::actor::Qp::next_packet`]: one packet, responses before
//! requests) and puts it at the back if it sent; QPs with nothing to send
//! are never visited. A thread that gathers a batch keeps the QPs it gave
//! turns until the batch left ([`crate::sched::TxClaims`]), so several
//! threads transmit at once without reordering a QP's packets. Timers are
//! one deadline per QP in a heap ([`crate::sched::TimerHeap`]); expiry runs
//! only the QPs that are due. The heap may hold a QP earlier than its
//! deadline (a deadline that moved later stays put a while, `Engine::sync`):
//! its expiry then finds nothing due and puts the real deadline in.

use crate::engine::EngineSink;
use crate::handle::QpHandle;
use crate::memory::Memory;
use crate::output::{Burst, Room, Transmit, ROCE_PORT};
use crate::qp::actor::{Qp, QpEnv};
use crate::sched::TxClaims;
use crate::types::QpType;
use crate::Engine;
use lanes::LaneSet;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// The most datagrams [`Engine::transmit_posted_through`] sends: a post's
/// message in runs, or its first packets; the rest wait for turns.
const POSTED_MAX: usize = 4;

impl Engine {
    /// The driver names the peers it reaches with intact datagrams (a
    /// same-host ring whose receiver does not check the ICRC): the RC, UC
    /// and XRC packets to them leave without one (crate::intact). Replaces
    /// the set named before; an empty set seals everything again.
    pub fn set_intact_peers(&self, peers: &[crate::intact::IntactPeer]) {
        self.dev.intact.set(peers);
    }

    /// Writes the next datagram into `buf` (at least one path MTU plus 64
    /// bytes of headers). `None` when nothing is ready now. The QP whose
    /// turn it was goes to the back of the ready queue if it has more.
    pub fn poll_transmit(&self, now: u64, mem: &dyn Memory, buf: &mut [u8]) -> Option<Transmit> {
        let mut claims = TxClaims::default();
        let t = self.poll_transmit_claimed(now, mem, buf, &mut claims);
        self.release_claims(&mut claims);
        t
    }

    /// [`Engine::poll_transmit`] for a thread that gathers a batch before it
    /// sends: the QPs it gives turns stay in `claims` (no other thread gives
    /// them one) until [`Engine::release_claims`], which the thread calls
    /// once the batch left. Each call first takes the QP at the front of the
    /// ready queue, then goes round the claimed QPs that still send. Each
    /// turn holds only its QP's lock (and the scheduler's, to take the QP off
    /// the ready queue).
    pub fn poll_transmit_claimed(
        &self,
        now: u64,
        mem: &dyn Memory,
        buf: &mut [u8],
        claims: &mut TxClaims,
    ) -> Option<Transmit> {
        self.transmit(now, mem, buf, claims, false)
    }

    /// [`Engine::poll_transmit_claimed`] for a driver that puts the
    /// datagram straight into the same-host ring of a peer reached intact
    /// if it goes to one: a QP's request packet to such a peer may take the
    /// message's next packets along (a run, crate::run), as many as `buf`
    /// holds; the [`Transmit`] says so. A run must reach the peer's engine
    /// through `Engine::handle_local_run` with its segments, or not at all.
    pub fn poll_transmit_run(
        &self,
        now: u64,
        mem: &dyn Memory,
        buf: &mut [u8],
        claims: &mut TxClaims,
    ) -> Option<Transmit> {
        self.transmit(now, mem, buf, claims, true)
    }

    /// [`Engine::poll_transmit_run`] for the thread that just posted to QP
    /// `h`: that QP's next packet, its turn given at once (claimed as the
    /// ready queue's QPs are), without the posted list and the ready queue.
    /// `None` when it has none, or when the QP is claimed by another thread
    /// or waits in a ready queue already (then the usual turns take it).
    pub fn poll_transmit_posted(
        &self,
        h: QpHandle,
        now: u64,
        mem: &dyn Memory,
        buf: &mut [u8],
        claims: &mut TxClaims,
    ) -> Option<Transmit> {
        self.claimed_turn(claims, Turn::Posted(h), mem, one(now, buf, true))
    }

    /// [`Engine::poll_transmit_claimed`] of several datagrams at once: the
    /// turn it gives (of the QP at the front of the ready queue, else of a
    /// claimed one) takes that QP's next packets, up to `max`, into the
    /// buffers `burst` gives, in order; how many were built. One lock and
    /// one turn for them, where a call per datagram takes both for each.
    /// The driver calls it again while it has buffers, until it gives 0.
    pub fn poll_transmit_burst<'b>(
        &self,
        now: u64,
        mem: &dyn Memory,
        claims: &mut TxClaims,
        burst: &mut (dyn Burst + 'b),
        max: usize,
    ) -> usize {
        // No buffer, no turn: a turn that built nothing would leave its QP
        // waiting for a wake-up with its packets still to send.
        if max == 0 || burst.buffer().is_none() {
            return 0;
        }
        let turn = |burst: &mut (dyn Burst + 'b),
                    q: &mut Qp,
                    env: &QpEnv<'_>,
                    sink: &mut EngineSink<'_>| {
            let (mut n, mut bytes) = (0, 0);
            while n < max {
                let Some(buf) = burst.buffer() else { break };
                let Some(t) = q.next_packet(now, env, buf, sink, false) else {
                    break;
                };
                burst.built(&t);
                n += 1;
                bytes += t.len as u64;
            }
            (n > 0).then_some((n, n, bytes))
        };
        let gsi = |burst: &mut (dyn Burst + 'b), e: &Self| {
            let t = e.gsi_transmit(burst.buffer()?)?;
            burst.built(&t);
            Some(1)
        };
        self.transmit_with(claims, mem, burst, turn, gsi)
            .unwrap_or(0)
    }

    /// The packets of QP `h`, just posted to, straight into `way` (the
    /// room a driver offers in its peer's same-host ring, [`Room`]):
    /// the QP's turns given at once, each packet published while the QP's
    /// lock is held, so that no claim has to keep its order. For an RC or
    /// UC QP that no thread claims and that waits in no ready queue, while
    /// `way` has room for its peer; at most [`POSTED_MAX`] datagrams (the
    /// rest wait in the ready queue). How many left; `None` when it was not
    /// such a QP or there was no room at all: nothing changed, the usual
    /// turns take it.
    pub fn transmit_posted_through(
        &self,
        h: QpHandle,
        now: u64,
        mem: &dyn Memory,
        way: &mut dyn Room,
    ) -> Option<usize> {
        let q = self.qps.get(h)?.lock();
        if !free(&q) {
            return None;
        }
        let (to, qpn) = through(&q, way)?;
        let sent = self.drive_locked(h, q, mem, |q, env, sink| {
            send_through(q, now, env, sink, way, (to, qpn), POSTED_MAX)
        });
        Some(self.sent_through(sent))
    }

    /// The QPs ready to send whose peers `way` has room for (a stream's
    /// posts leave them ready), their packets straight into `way` as
    /// [`Engine::transmit_posted_through`] sends a post's: each QP's turns
    /// given at once under its lock, no claim (nothing of it is held
    /// outside the lock), `budget` datagrams at most in all. The first
    /// ready QP whose packets cannot go that way (not RC or UC, no room for
    /// its peer) is claimed for the usual turns ([`Engine::poll_transmit_run`]
    /// with the same `claims`), and the rest of the ready queue is left to
    /// them; so is what follows a QP left with more to send (its share or
    /// its room ran out; it is back in the ready queue). How many
    /// datagrams left.
    pub fn transmit_ready_through(
        &self,
        now: u64,
        mem: &dyn Memory,
        claims: &mut TxClaims,
        way: &mut dyn Room,
        budget: usize,
    ) -> usize {
        self.take_posted_in(claims.reach);
        let mut sent = 0;
        while sent < budget {
            let Some(h) = self.next_ready(claims.reach) else {
                break;
            };
            let Some(q) = self.qps.get(h) else { continue };
            let mut q = q.lock();
            // A stale second entry of a QP another thread claims: its
            // claimer's release queues it.
            if q.dp.claimed {
                continue;
            }
            q.dp.scheduled = false;
            let Some(dest) = through(&q, way) else {
                // Claimed for the usual turns, which take the rest of the
                // ready queue as before (one QP claimed here, as their own
                // first turn would have); its wish to send kept, so that a
                // batch that ends before its turn lets it go back to the
                // ready queue.
                q.dp.claimed = true;
                q.dp.wants_tx = true;
                claims.qps.push((h, true));
                break;
            };
            let (done, more) = self.drive_locked(h, q, mem, |q, env, sink| {
                let done = send_through(q, now, env, sink, way, dest, budget - sent);
                (done, q.dp.wants_tx)
            });
            sent += self.sent_through(done);
            if more {
                break;
            }
        }
        sent
    }

    /// `ibv_post_send` of one WR of QP `h` straight into its send queue,
    /// and its packets into `way` as [`Engine::transmit_posted_through`]
    /// sends them: no slot of the send ring written and read back, no
    /// posted list. For a post to an RC or UC QP whose peer `way` has room
    /// for, whose send ring holds nothing and that no other thread posts to
    /// ([`SendRing::direct`]); the WR is checked as a ring post is. A QP
    /// that a thread claims or that waits in a ready queue takes the WQE
    /// but sends nothing here: its turns send it. `None` when it is not
    /// such a post now (nothing posted: the ring's post takes it); else the
    /// check's refusal, or how many datagrams left.
    ///
    /// [`SendRing::direct`]: crate::sq::SendRing::direct
    #[allow(clippy::too_many_arguments)]
    pub fn post_send_through(
        &self,
        h: QpHandle,
        wr: &crate::wr::SendWr<'_>,
        inline: Option<&[u8]>,
        now: u64,
        mem: &dyn Memory,
        way: &mut dyn Room,
    ) -> Option<Result<usize, crate::wr::PostError>> {
        lanes::stamp::at(lanes::stamp::Point::EnginePost);
        let q = self.qps.get(h)?.lock();
        let (to, qpn) = through(&q, way)?;
        let ring = q.send_ring().clone();
        let serial = match ring.direct(wr, q.ctl.state(), q.ctl.attr().max_rd_atomic) {
            Ok(Some(serial)) => serial,
            Ok(None) => return None,
            Err(e) => return Some(Err(e)),
        };
        let inline = wr
            .flags
            .contains(crate::wr::SendFlags::INLINE)
            .then(|| inline.unwrap_or(&[]));
        let sent = self.drive_locked(h, q, mem, |q, env, sink| {
            let posted = crate::qp::actor::PostedSend {
                flushed: false,
                inline,
                ud: None,
                xrc_srqn: 0,
            };
            q.post_send(wr, posted, sink);
            // In the queue: the next poster comes after it.
            drop(serial);
            if free(q) {
                send_through(q, now, env, sink, way, (to, qpn), POSTED_MAX)
            } else {
                (0, 0)
            }
        });
        Some(Ok(self.sent_through(sent)))
    }

    /// Counts what a turn through a room sent; how many datagrams.
    fn sent_through(&self, (n, bytes): (usize, u64)) -> usize {
        let c = self.dev.counters.mine();
        c.packets_sent.add(n as u64);
        c.bytes_sent.add(bytes);
        n
    }

    fn transmit(
        &self,
        now: u64,
        mem: &dyn Memory,
        buf: &mut [u8],
        claims: &mut TxClaims,
        runs: bool,
    ) -> Option<Transmit> {
        // One buffer: the turn below or the MAD takes it.
        self.transmit_with(
            claims,
            mem,
            buf,
            |buf: &mut [u8], q: &mut Qp, env: &QpEnv<'_>, sink: &mut EngineSink<'_>| {
                one(now, buf, runs)(q, env, sink)
            },
            |buf, e| e.gsi_transmit(buf),
        )
    }

    /// A transmit: what was posted joins the queues; the CM's MADs first
    /// (`gsi`), then a turn (`turn`) of the QP at the front of the ready
    /// queue, else of each claimed QP in turn, until one gives something.
    /// Both build into `out`.
    fn transmit_with<O: ?Sized, R>(
        &self,
        claims: &mut TxClaims,
        mem: &dyn Memory,
        out: &mut O,
        mut turn: impl FnMut(
            &mut O,
            &mut Qp,
            &QpEnv<'_>,
            &mut EngineSink<'_>,
        ) -> Option<(R, usize, u64)>,
        gsi: impl FnOnce(&mut O, &Self) -> Option<R>,
    ) -> Option<R> {
        // What was posted on send rings since the last turn joins the queues.
        self.take_posted_in(claims.reach);
        // CM hook: MADs go first (gsi.rs, spec/cm.md §7), claimed as a QP's
        // packets are: one thread at a time takes them until it lets go.
        if self.claim_gsi(claims) {
            if let Some(r) = gsi(out, self) {
                return Some(r);
            }
        }
        let mut turn =
            |q: &mut Qp, env: &QpEnv<'_>, sink: &mut EngineSink<'_>| turn(out, q, env, sink);
        while let Some(h) = self.next_ready(claims.reach) {
            if let Some(r) = self.claimed_turn(claims, Turn::Ready(h), mem, &mut turn) {
                return Some(r);
            }
        }
        let n = claims.qps.len();
        for _ in 0..n {
            let i = claims.next % n;
            claims.next = claims.next.wrapping_add(1);
            if !claims.qps[i].1 {
                continue;
            }
            if let Some(r) = self.claimed_turn(claims, Turn::Claimed(i), mem, &mut turn) {
                return Some(r);
            }
        }
        None
    }

    /// Whether this thread holds the MADs' claim (taken here if the CM
    /// has MADs to send and no other thread holds it; let go in
    /// [`Engine::release_claims`]).
    fn claim_gsi(&self, claims: &mut TxClaims) -> bool {
        if !claims.gsi {
            if !self.gsi_dirty.load(Relaxed) || self.gsi_claimed.swap(true, Acquire) {
                return false;
            }
            claims.gsi = true;
        }
        true
    }

    /// A turn of a QP this thread claims (from the ready queue: claimed
    /// now): what `f` gives, `None` if it gave nothing. `f` says what it
    /// made of the turn, with the datagrams and bytes it sent.
    fn claimed_turn<R>(
        &self,
        claims: &mut TxClaims,
        turn: Turn,
        mem: &dyn Memory,
        f: impl FnOnce(&mut Qp, &QpEnv<'_>, &mut EngineSink<'_>) -> Option<(R, usize, u64)>,
    ) -> Option<R> {
        let h = match turn {
            Turn::Ready(h) | Turn::Posted(h) => h,
            Turn::Claimed(i) => claims.qps[i].0,
        };
        let mut q = self.qps.get(h)?.lock();
        let i = match turn {
            // A stale second entry of a QP another thread claims: its
            // claimer's release queues it.
            Turn::Ready(_) if q.dp.claimed => return None,
            // Another thread's, or queued: the usual turns take it.
            Turn::Posted(_) if q.dp.claimed || q.dp.scheduled => return None,
            Turn::Ready(_) | Turn::Posted(_) => {
                claims.qps.push((h, false));
                claims.qps.len() - 1
            }
            Turn::Claimed(i) => i,
        };
        q.dp.claimed = true;
        q.dp.scheduled = false;
        // A QP with nothing to send (woken by what turned out to need no
        // packet, or queued before its last packet left): no turn until
        // something wakes it, decided without the turn.
        if q.tx_idle() {
            q.dp.wants_tx = false;
            claims.qps[i].1 = false;
            return None;
        }
        let (r, more) = self.drive_locked(h, q, mem, |q, env, sink| {
            let r = f(q, env, sink);
            // A QP that sent and has more has another turn; one that had
            // nothing, or sent its last packet, waits until something wakes
            // it (the test above, while the lock is held: no turn of its own
            // only to find nothing).
            q.dp.wants_tx = r.is_some() && !q.tx_idle();
            (r, q.dp.wants_tx)
        });
        claims.qps[i].1 = more;
        let (r, n, bytes) = r?;
        let c = self.dev.counters.mine();
        c.packets_sent.add(n as u64);
        c.bytes_sent.add(bytes);
        Some(r)
    }

    /// Lets the claimed QPs go (their packets left): each that has more, or
    /// was woken meanwhile (an ACK, a post), goes to the back of the ready
    /// queue. Whether one did.
    pub fn release_claims(&self, claims: &mut TxClaims) -> bool {
        let mut queued = false;
        if std::mem::take(&mut claims.gsi) {
            self.gsi_claimed.store(false, Release);
            queued = self.gsi_dirty.load(Relaxed);
        }
        for (h, _) in claims.qps.drain(..) {
            let Some(q) = self.qps.get(h) else { continue };
            let mut q = q.lock();
            q.dp.claimed = false;
            self.sync(h, &mut q);
            queued |= q.dp.scheduled;
        }
        claims.next = 0;
        queued
    }

    /// The QP at the front of the ready queue of the first of `lanes` that
    /// has one, the calling thread's lane first (each queue's lock is let
    /// go before the QP's is taken).
    fn next_ready(&self, lanes: LaneSet) -> Option<QpHandle> {
        lanes
            .from(lanes::lane())
            .find_map(|i| self.dev.ready.get(i).pop())
    }

    /// When [`Engine::handle_timeout`] is next due, if ever; possibly
    /// earlier, never later: a QP's timer that moved later or stopped stays
    /// in the heap while it is at least a millisecond off (`Engine::sync`),
    /// so a QP that went quiet comes due once more and finds nothing to do.
    ///
    /// Takes no lock unless the CM was reached since the last call: both
    /// earliest deadlines are kept where every thread reads them.
    pub fn poll_timeout(&self) -> Option<u64> {
        let qps = self.dev.timer_first.load(Acquire);
        // CM hook (gsi.rs): the CM's MAD timers join the device's.
        let first = qps.min(self.cm_timeout());
        (first != u64::MAX).then_some(first)
    }

    /// Runs the timers that are due: RNR waits end; ACK timeouts resend from
    /// the oldest unacknowledged PSN or, with the retry budget spent, fail the
    /// oldest WQE with `RETRY_EXC_ERR` (rc-reliability.md §1.3). Afterwards
    /// [`Engine::poll_timeout`] is `None` or later than `now`, unless another
    /// thread set a deadline meanwhile.
    pub fn handle_timeout(&self, now: u64) {
        self.with_cm(|cm| cm.handle_timeout(now)); // CM hook (gsi.rs)
                                                   // The driver's one timer thread calls this: the list is reused.
        let mut due = std::mem::take(&mut *self.dev.due.lock());
        due.clear();
        self.dev
            .sched
            .lock()
            .pop_due(now, &mut due, &self.dev.timer_first);
        // In QP-slot order, so that the ready queue fills in the same order
        // whatever the deadlines were.
        due.sort_unstable_by_key(|h| h.index());
        for &h in &due {
            self.drive_ctl(h, |q, sink| {
                // Off the heap now: the sync puts back whatever deadline the
                // QP has after its timers ran (another thread may have moved
                // it since the heap gave it up).
                q.dp.in_heap = None;
                q.on_timeout(now, sink)
            });
        }
        *self.dev.due.lock() = due;
    }
}

/// Whose turn [`Engine::claimed_turn`] gives.
#[derive(Clone, Copy)]
enum Turn {
    /// The QP at the front of the ready queue, to be claimed.
    Ready(QpHandle),
    /// The `i`th QP the thread claims.
    Claimed(usize),
    /// The QP the thread just posted to, to be claimed unless another
    /// thread claims it or it waits in a ready queue.
    Posted(QpHandle),
}

/// Whether QP `q` may send through a room now: no thread claims it (none
/// holds a packet of it that has yet to leave) and it waits in no ready
/// queue (its turns keep their order).
fn free(q: &crate::qp::actor::Qp) -> bool {
    !q.dp.claimed && !q.dp.scheduled
}

/// Where the packets of QP `q`, an RC or UC QP, go through `way` (its
/// peer's address and QPN), while `way` has room for its peer.
fn through(q: &crate::qp::actor::Qp, way: &mut dyn Room) -> Option<(SocketAddr, u32)> {
    if !matches!(q.ctl.qp_type(), QpType::Rc | QpType::Uc) {
        return None;
    }
    let a = q.ctl.attr();
    let (to, qpn) = (
        SocketAddr::new(a.ah_attr.grh.dgid.ip(), ROCE_PORT),
        a.dest_qp_num,
    );
    // The first room before the turn: without it nothing is taken.
    way.room(to, qpn)?;
    Some((to, qpn))
}

/// A turn's one packet into `buf` (`runs`: as [`Engine::poll_transmit_run`]).
fn one<'b>(
    now: u64,
    buf: &'b mut [u8],
    runs: bool,
) -> impl FnOnce(&mut Qp, &QpEnv<'_>, &mut EngineSink<'_>) -> Option<(Transmit, usize, u64)> + 'b {
    move |q, env, sink| {
        let t = q.next_packet(now, env, buf, sink, runs)?;
        Some((t, 1, t.len as u64))
    }
}

/// The QP's turns at once, each packet published into `way` while the QP's
/// lock is held (`max` at most); the datagrams and bytes sent.
fn send_through(
    q: &mut crate::qp::actor::Qp,
    now: u64,
    env: &crate::qp::actor::QpEnv<'_>,
    sink: &mut crate::engine::EngineSink<'_>,
    way: &mut dyn Room,
    (to, qpn): (SocketAddr, u32),
    max: usize,
) -> (usize, u64) {
    let (mut n, mut bytes) = (0, 0);
    while n < max {
        let Some(buf) = way.room(to, qpn) else { break };
        let Some(t) = q.next_packet(now, env, buf, sink, true) else {
            break;
        };
        way.publish(&t);
        n += 1;
        bytes += t.len as u64;
    }
    // What is left goes to the ready queue (the sync after this).
    q.dp.wants_tx = !q.tx_idle();
    (n, bytes)
}

//! The data path of two engines driven from many threads at once
//! (spec/concurrency.md): every thread holds only the read side of its
//! engine's `RwLock` (`&Engine`) while it transmits, receives, runs timers
//! or takes events, as `sv_io` does; posts go through the send and receive
//! rings without the engine; control verbs take the write side (`&mut`).
//!
//! Two devices, A and B, each with ONE completion queue and ONE shared
//! receive queue that all of its RC QPs use (nine QP slots: four carry
//! traffic throughout, one is the victim, one is created midway, three
//! come and go). Per device, at once:
//! - a poster thread per QP on its send ring (the engine's write side only
//!   for a Flush or Settle), posting SEND, SEND with immediate, WRITE, WRITE
//!   with immediate, READ and fetch-and-add of 8..3500 bytes (up to four
//!   packets), now streaming, now waiting for its completions so that the
//!   next post finds the QP idle; and one thread keeping the SRQ stocked;
//! - transmit, in one of five modes (one test each): serial (one
//!   transmitting thread per device, its datagrams spread by destination QP
//!   over two receiving threads of the peer: each QP's packets in order,
//!   different QPs' handled at once); reorder (two transmitting threads per
//!   device, each handing its batch over itself: a QP's packets may
//!   overtake each other and RC recovers); claims (two transmitting threads
//!   with `poll_transmit_claimed` / `release_claims`: in order again);
//!   lanes (as claims, and each poster sends its own lane's datagrams
//!   after each post, while the two transmitting threads reach every
//!   lane: `sv_io`'s posting threads and progress thread); rooms (as
//!   serial, the transmitting thread claiming, and each poster building
//!   its QP's packets straight into the peer's FIFO after each post, the
//!   transmitting thread every other round the ready QPs' likewise
//!   (`Engine::transmit_ready_through`), each same-host receiving thread
//!   the responses straight back: `sv_io`'s same-host rings,
//!   proto::output::Room). One
//!   receiving path of each device takes `handle_local_datagram` (the
//!   same-host path), the other `handle_datagram`;
//! - CQ polling without the engine: A's CQ by two busy pollers, B's CQ only
//!   by a poller that arms it and sleeps until a completion event that a
//!   `poll_event` thread forwards (a lost event stalls the test);
//! - a timer thread: the virtual clock steps 1 ms per 16 moves, so
//!   `handle_timeout` runs beside everything else, and jumps to the next
//!   deadline when both devices look idle;
//! - a control thread (write side): resizes both CQs up, arms B's SRQ limit,
//!   moves B's victim QP to ERR while both ends of the pair still post and
//!   send, destroys it, creates and connects a new pair that then carries
//!   traffic, destroys A's victim once it failed (retry exceeded), then
//!   three times creates a pair, lets it carry traffic, moves both ends to
//!   ERR and destroys them, and resizes both CQs down.
//!
//! Checked afterwards, from the completions in CQ order: every posted WR
//! completed exactly once, in posting order, on its QP, with its opcode
//! and status (Success everywhere but on the victim pair, whose statuses
//! must be a run of successes, at most one transport error, then flushes);
//! every SEND landed in exactly one SRQ WQE with its bytes, length and
//! immediate, in the order sent, and every acknowledged one was received;
//! every WRITE's bytes and every READ's bytes are where they belong; the
//! fetch-and-adds of all QPs into one word form one chain (each executed
//! exactly once); every SRQ WQE is either completed once or still queued;
//! the datagram counters of the two devices agree and each device's agree
//! with its QPs'; without reordering, no sequence NAK but after an RNR NAK;
//! the async events are exactly one last-WQE event per victim and one
//! SRQ-limit event if and only if the limit was disarmed. A watchdog fails
//! the test (with the state of every QP) if the traffic does not finish in
//! 120 s (a run takes 2-4 s alone, about ten times that beside two more
//! runs on two cores), and any thread's panic fails it at once; no
//! assertion is on speed.

use proto::cq::SharedCq;
use proto::datapath::{AsyncEventKind, Event, EventElement};
use proto::device::DeviceConfig;
use proto::engine::{CqHandle, PdHandle, QpCreate, QpHandle, SrqHandle};
use proto::memory::{AtomicOp, Memory};
use proto::qp::create::QpRequest;
use proto::rq::{RecvRing, RingPost};
use proto::sched::TxClaims;
use proto::sq::{SendPost, SendRing};
use proto::srq::SrqAttr;
use proto::wc::{WcFlags, WcOpcode, WcStatus, WorkCompletion};
use proto::wr::{
    AtomicTarget, ImmData, PostError, RdmaTarget, RecvWr, SendFlags, SendWr, Sge, WrOpcode,
    WrTarget,
};
use proto::{AccessFlags, AttrMask, Engine, Gid, Mtu, QpAttr, QpCap, QpState, QpType};
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::{sleep, JoinHandle};
use std::time::{Duration, Instant};

// ---- layout ----

/// QP slots per device: 0..4 carry traffic throughout, 4 is the victim
/// (moved to ERR and destroyed), 5 is created while traffic flows, 6..9 are
/// created, failed and destroyed one after another while traffic flows.
pub(crate) const NQ: usize = 9;
pub(crate) const STABLE: usize = 4;
pub(crate) const VICTIM: usize = 4;
pub(crate) const FRESH: usize = 5;
pub(crate) const CHURN: usize = 6;

/// A slot whose QPs fail and are destroyed.
pub(crate) fn victim(slot: usize) -> bool {
    slot == VICTIM || slot >= CHURN
}
/// The most WRs a QP posts (the memory layout's bound).
pub(crate) const PER_MAX: u64 = 160;
/// Bytes per WR in the source, local and write-target regions.
pub(crate) const SLOT: u64 = 4096;
pub(crate) const MAX_LEN: u64 = 3500;
/// Receive buffers (one per SRQ WQE, never reused).
pub(crate) const NRECV: u64 = 1024;
pub(crate) const SRQ_WR: u32 = 128;
pub(crate) const RSRC_LEN: u64 = 1 << 16;
/// The traffic of a run finishes within this, or the test fails.
pub(crate) const WATCHDOG_S: u64 = 120;

pub(crate) const BASE: u64 = 0x1000_0000;
pub(crate) const REGION: u64 = NQ as u64 * PER_MAX * SLOT;
/// What this device's WRs send and write (the payload of WR `(slot, seq)`).
pub(crate) const SRC: u64 = BASE;
/// Where this device's READs and fetch-and-adds put what they got.
pub(crate) const LOCAL: u64 = SRC + REGION;
/// Where the peer's WRITEs land.
pub(crate) const WTGT: u64 = LOCAL + REGION;
/// What the peer's READs read.
pub(crate) const RSRC: u64 = WTGT + REGION;
/// SRQ receive buffers.
pub(crate) const RECV: u64 = RSRC + RSRC_LEN;
/// The word every stable and fresh QP of the peer adds to.
pub(crate) const COUNTER: u64 = RECV + NRECV * SLOT;
pub(crate) const MEM_LEN: u64 = COUNTER + 4096 - BASE;

pub(crate) const SEND_ID: u64 = 0x5700 << 48;
pub(crate) const RECV_ID: u64 = 0x5200 << 48;

mod check;
mod threads;
mod world;
use check::*;
use threads::*;
use world::*;

// ---- the run ----

/// The threads of a run: name, handle, and whether it returned (rather
/// than panicked).
pub(crate) struct Threads(pub(crate) Vec<(String, JoinHandle<()>, Arc<AtomicBool>)>);

impl Threads {
    pub(crate) fn spawn(
        &mut self,
        w: &Arc<World>,
        name: &str,
        f: impl FnOnce(&World) + Send + 'static,
    ) {
        let w = w.clone();
        let returned = Arc::new(AtomicBool::new(false));
        let r = returned.clone();
        let h = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                f(&w);
                r.store(true, SeqCst);
            })
            .expect("spawn");
        self.0.push((name.into(), h, returned));
    }
}

/// What the traffic must have produced before it may stop: every stable and
/// fresh WR and every receive its SENDs owe completed, the control thread done.
pub(crate) fn finished(w: &World) -> bool {
    if !w.control_done.load(SeqCst) {
        return false;
    }
    let slots = (0..STABLE).chain([FRESH]);
    for side in 0..2 {
        for slot in slots.clone() {
            if !w.poster_done[side][slot].load(SeqCst)
                || w.send_completions(side, slot) != w.posted[side][slot].load(SeqCst)
            {
                return false;
            }
        }
        let (owed, got) = receives(w, side);
        if got != owed {
            return false;
        }
    }
    true
}

/// Receives `side` owes the peer's stable and fresh QPs for what they
/// posted, and receive completions of its stable and fresh QPs logged.
pub(crate) fn receives(w: &World, side: usize) -> (u64, u64) {
    let slots = (0..STABLE).chain([FRESH]);
    let owed: u64 = slots
        .clone()
        .map(|slot| {
            let n = w.posted[1 - side][slot].load(SeqCst);
            (0..n)
                .filter(|&seq| plan(1 - side, slot, seq).kind.consumes_recv())
                .count() as u64
        })
        .sum();
    let got = lock(&w.sides[side].log)
        .iter()
        .filter(|c| c.wr_id >> 48 == RECV_ID >> 48)
        .filter(|c| {
            let q = c.qp_num;
            slots.clone().any(|k| w.qpn[side][k].load(SeqCst) == q)
        })
        .count() as u64;
    (owed, got)
}

/// The slot of the QP a completion is on (NQ if none).
pub(crate) fn slot_of(w: &World, side: usize, c: &WorkCompletion) -> usize {
    (0..NQ)
        .find(|&k| w.qpn[side][k].load(SeqCst) == c.qp_num)
        .unwrap_or(NQ)
}

pub(crate) fn panic_message(r: std::thread::Result<()>) -> String {
    match r {
        Ok(()) => "no panic".into(),
        Err(p) => p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_string()))
            .unwrap_or_default(),
    }
}

pub(crate) fn diagnostics(w: &World) -> String {
    let mut out = format!(
        "now {} in_flight {} busy {} timer jumps {} control done {}\n",
        w.now.load(SeqCst),
        w.in_flight.load(SeqCst),
        w.busy.load(SeqCst),
        w.timer_jumps.load(SeqCst),
        w.control_done.load(SeqCst)
    );
    out += &format!("control: {:?}\n", lock(&w.control_log));
    for (side, s) in w.sides.iter().enumerate() {
        let log = lock(&s.log);
        let errors: Vec<_> = log
            .iter()
            .filter(|c| c.status != WcStatus::Success)
            .filter(|c| !victim(slot_of(w, side, c)))
            .take(8)
            .collect();
        out += &format!("side {side}: errors on stable QPs: {errors:?}\n");
    }
    for (side, s) in w.sides.iter().enumerate() {
        let (owed, got) = receives(w, side);
        out += &format!(
            "side {side}: {} completions logged, {} in the CQ, receives: {} posted, {} on the SRQ, {owed} owed, {got} completed; {} completion events; async {:?}\n",
            lock(&s.log).len(),
            s.cq_shared.len(),
            w.recv_posted[side].load(SeqCst),
            s.srq_ring.queued(),
            s.completion_events.load(SeqCst),
            lock(&s.asyncs),
        );
        let e = s.e.try_read();
        for slot in 0..NQ {
            let info = w.info(side, slot);
            let state = match (&e, &info) {
                (Ok(e), Some(i)) => format!(
                    "state {:?} tx_pending {} sq {} ring {} (queued {}) {:?}",
                    e.qp(i.h).map(|q| q.ctl.state()),
                    e.qp_tx_pending(i.h),
                    e.qp(i.h).map_or(0, |q| q.send_queue_len()),
                    i.ring.pending(),
                    i.ring.queued(),
                    e.qp(i.h).map(|q| format!(
                        "deadline {:?} una {} next {} epsn {}",
                        q.deadline(),
                        q.una().get(),
                        q.sq_psn().get(),
                        q.epsn().get()
                    )),
                ),
                (Err(_), _) => "engine locked".into(),
                (_, None) => "no QP".into(),
            };
            out += &format!(
                "  slot {slot}: posted {} done {} completions {} {state}\n",
                w.posted[side][slot].load(SeqCst),
                w.poster_done[side][slot].load(SeqCst),
                w.send_completions(side, slot),
            );
        }
        if let Ok(e) = &e {
            out += &format!(
                "  driver work {} next timeout {:?}\n",
                e.has_driver_work(),
                e.poll_timeout()
            );
        }
    }
    out
}

pub(crate) fn run(cfg: Config) -> Arc<World> {
    assert!(cfg.per <= PER_MAX);
    let w = Arc::new(World::new(cfg));
    let mut t = Threads(Vec::new());
    let (wake_tx, wake_rx) = mpsc::channel();
    *lock(&w.wake_b) = Some(wake_tx.clone());
    // Serial and rooms modes: the FIFOs into each device's two receiving
    // threads, made before any thread that sends into them.
    let mut fifo_rx: [Vec<mpsc::Receiver<Vec<u8>>>; 2] = Default::default();
    if matches!(cfg.mode, Mode::Serial | Mode::Rooms) {
        for (to, rxs) in fifo_rx.iter_mut().enumerate() {
            let (txs, r): (Vec<_>, Vec<_>) = (0..2).map(|_| mpsc::channel()).unzip();
            *lock(&w.inbox[to]) = txs;
            *rxs = r;
        }
    }
    for side in 0..2 {
        for slot in 0..NQ {
            t.spawn(&w, &format!("post-{side}-{slot}"), move |w| {
                poster(w, side, slot);
            });
        }
        t.spawn(&w, &format!("srq-{side}"), move |w| srq_poster(w, side));
        t.spawn(&w, &format!("events-{side}"), move |w| event_taker(w, side));
        if !matches!(cfg.mode, Mode::Serial | Mode::Rooms) {
            for k in 0..2 {
                t.spawn(&w, &format!("tx-{side}-{k}"), move |w| {
                    transmit_direct(w, side, k == 1);
                });
            }
        } else {
            let shards = lock(&w.inbox[1 - side]).clone();
            for (k, rx) in std::mem::take(&mut fifo_rx[1 - side])
                .into_iter()
                .enumerate()
            {
                t.spawn(&w, &format!("rx-{}-{k}", 1 - side), move |w| {
                    receiver(w, 1 - side, &rx, k == 1);
                });
            }
            t.spawn(&w, &format!("tx-{side}"), move |w| {
                transmitter(w, side, &shards)
            });
        }
    }
    t.spawn(&w, "poll-a-0", |w| busy_poller(w, 0));
    t.spawn(&w, "poll-a-1", |w| busy_poller(w, 0));
    t.spawn(&w, "poll-b", move |w| event_poller(w, 1, &wake_rx));
    t.spawn(&w, "timer", timer);
    t.spawn(&w, "control", control);

    // The watchdog: the traffic finishes, or the test fails with the state.
    let deadline = Instant::now() + Duration::from_secs(WATCHDOG_S);
    while !finished(&w) {
        // A thread that panicked fails the test with its message at once.
        let dead =
            t.0.iter()
                .position(|(_, h, returned)| h.is_finished() && !returned.load(SeqCst));
        if let Some(i) = dead {
            let d = diagnostics(&w);
            w.stop.store(true, SeqCst);
            let (name, h, _) = t.0.swap_remove(i);
            let msg = panic_message(h.join());
            panic!("thread {name} ended early: {msg}\n{d}");
        }
        if Instant::now() > deadline {
            let d = diagnostics(&w);
            w.stop.store(true, SeqCst);
            panic!("the traffic did not finish in time (deadlock or lost wake-up?)\n{d}");
        }
        sleep(Duration::from_millis(5));
    }
    w.stop.store(true, SeqCst);
    let _ = wake_tx.send(Wake::Stop);
    *lock(&w.wake_b) = None;
    // Every thread ends within a bound; a panic in one fails the test.
    let (done_tx, done_rx) = mpsc::channel();
    let joiner = std::thread::spawn(move || {
        for (name, h, _) in t.0 {
            let r = h.join();
            if r.is_err() {
                let msg = panic_message(r);
                let _ = done_tx.send(Err(format!("thread {name} panicked: {msg}")));
                return;
            }
        }
        let _ = done_tx.send(Ok(()));
    });
    match done_rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("{e}"),
        Err(_) => panic!("threads did not end after the stop\n{}", diagnostics(&w)),
    }
    joiner.join().expect("joiner");
    w
}

#[test]
pub(crate) fn engines_are_shared_between_threads() {
    pub(crate) fn sync<T: Send + Sync>() {}
    sync::<Engine>();
    sync::<PagedMemory>();
}

/// Serial hand-off per sending device (each QP's packets arrive in order),
/// several threads in every engine at once.
#[test]
pub(crate) fn many_threads_one_cq_one_srq_every_wr_exactly_once() {
    let w = run(Config {
        mode: Mode::Serial,
        per: 150,
    });
    report(&w, "serial");
    check(&w);
}

/// Two transmitting threads per device hand datagrams over themselves: a
/// QP's packets may overtake each other, and RC recovers (sequence NAKs,
/// duplicates, retransmission); completions stay exactly once.
#[test]
pub(crate) fn reordering_transmitters_every_wr_exactly_once() {
    let w = run(Config {
        mode: Mode::Reorder,
        per: 100,
    });
    report(&w, "reorder");
    check(&w);
}

/// Two transmitting threads per device with transmit claims: a QP's
/// packets never overtake each other (no sequence NAK but after an RNR
/// NAK), completions exactly once.
#[test]
pub(crate) fn claiming_transmitters_keep_each_qps_order() {
    let w = run(Config {
        mode: Mode::Claims,
        per: 150,
    });
    report(&w, "claims");
    check(&w);
}

/// Posters that build their packets straight into the peer's FIFO (every
/// other post made straight into the send queue), and receivers that
/// build the responses straight back, beside a claiming
/// transmitting thread per device (proto::output::Room): each QP's packets
/// stay in order, completions exactly once.
#[test]
pub(crate) fn packets_built_in_place_beside_a_claiming_transmitter_keep_each_qps_order() {
    let w = run(Config {
        mode: Mode::Rooms,
        per: 150,
    });
    report(&w, "rooms");
    let built = w.built_in_place.load(SeqCst);
    let through = w.posted_through.load(SeqCst);
    eprintln!("rooms: {built} datagrams built in place by posters and receivers, {through} posts made straight into the send queue");
    assert!(built > 0, "datagrams were built in place");
    assert!(through > 0, "posts were made straight into the send queue");
    check(&w);
}

/// Posters that send their own lane's datagrams beside two transmitting
/// threads that reach every lane (crate `lanes`): each QP's packets stay
/// in order, every post leaves, completions exactly once.
#[test]
pub(crate) fn posters_sending_their_own_lanes_beside_transmitters_of_every_lane() {
    let w = run(Config {
        mode: Mode::Lanes,
        per: 150,
    });
    report(&w, "lanes");
    let own = w.own_lane_sent.load(SeqCst);
    eprintln!("lanes: {own} datagrams sent by the posters from their own lanes");
    assert!(own > 0, "the posters sent from their lanes");
    check(&w);
}

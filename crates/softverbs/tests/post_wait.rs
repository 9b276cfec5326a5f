//! A post that answered a request waits for the next one (sv_io's
//! `linger`): a program that spins on its memory for the peer's RDMA WRITE
//! (`ib_write_lat`) finds it there when the post returns, without the
//! progress thread being woken to place it.

mod pair;
use pair::*;
use softverbs::*;
use std::time::Instant;

/// How many rounds each ping-pong runs.
const ROUNDS: u32 = 400;

/// The tests of this file spin; they run one at a time (two spinning
/// tests on two cores would preempt each other's ping-pong).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A post's answered waits and its missed ones, as the counters say.
fn waits(s: &Side) -> (u64, u64) {
    let io = s.ctx.io_counters();
    (io.post_waits - io.post_waits_missed, io.post_waits_missed)
}

/// An 8-byte WRITE of `mr[0..8]` into the peer's `mr[8..16]`, unsignaled
/// (as `ib_write_lat` posts most of its WRITEs), signaled every 32nd.
fn write8(qp: &QueuePair<Rc>, s: &Side, peer: &Side, round: u32) {
    let sg = [s.mr.sge(0, 8)];
    let signaled = round.is_multiple_of(32);
    let flags = if signaled { SIG } else { SendFlags::default() };
    let target = WrTarget::Rdma(peer.mr.remote(8));
    qp.post_send(&send_wr(
        round.into(),
        WrOpcode::RdmaWrite,
        &sg,
        target,
        flags,
    ))
    .unwrap();
    if signaled {
        assert_eq!(ids(&wait(&s.scq, 1)), [(round.into(), WcStatus::Success)]);
    }
}

/// Spins on `mr[8..16]` until it holds `round` (bounded by `T`).
fn spin_for(s: &Side, round: u32) {
    let deadline = Instant::now() + T;
    while u64::from_le_bytes(read(&s.mr, 8, 8).try_into().unwrap()) != u64::from(round) {
        assert!(Instant::now() < deadline, "round {round} never came");
        std::hint::spin_loop();
    }
}

/// [`spin_for`], polling `s`'s send CQ meanwhile (which reads what came
/// for `s`; a WRITE makes no completion there).
fn poll_for(s: &Side, round: u32) {
    let deadline = Instant::now() + T;
    let mut wc = Vec::new();
    while u64::from_le_bytes(read(&s.mr, 8, 8).try_into().unwrap()) != u64::from(round) {
        assert!(Instant::now() < deadline, "round {round} never came");
        wc.clear();
        s.scq.poll(4, &mut wc);
        assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
    }
}

/// One end of a WRITE ping-pong that spins on memory (never polls for the
/// peer's WRITE): the client (`first`) writes round 1; each end then
/// waits for round r in its memory and writes round r (the client r + 1).
/// Returns how many posts found the peer's next WRITE already in memory
/// when they returned, and how many of those had an answered wait.
fn ping_pong(qp: &QueuePair<Rc>, me: &Side, peer: &Side, first: bool) -> (u32, u32) {
    ping_pong_notifying(qp, me, peer, first, None).0
}

/// [`ping_pong`], and before its post of round `notify_at` this end calls
/// `ibv_req_notify_cq` on its send CQ (as a program does before it blocks
/// for a completion); also returns how many of the answered waits came
/// after that call.
fn ping_pong_notifying(
    qp: &QueuePair<Rc>,
    me: &Side,
    peer: &Side,
    first: bool,
    notify_at: Option<u32>,
) -> ((u32, u32), u32) {
    let (mut ready, mut answered, mut after) = (0, 0, 0);
    let mut post = |round: u32, expect: u32| {
        if notify_at == Some(round) {
            me.scq.req_notify(false).unwrap();
        }
        me.mr.write(0, &u64::from(round).to_le_bytes());
        let before = waits(me).0;
        write8(qp, me, peer, round);
        let here = u64::from_le_bytes(read(&me.mr, 8, 8).try_into().unwrap()) == u64::from(expect);
        if waits(me).0 > before {
            // An answered wait placed the answer before the post returned.
            assert!(
                here,
                "round {round}: the wait was answered, the answer is not in memory"
            );
            answered += 1;
            after += u32::from(notify_at.is_some_and(|n| round >= n));
        }
        ready += u32::from(here);
    };
    for round in 1..=ROUNDS {
        if first {
            post(round, round);
            spin_for(me, round);
        } else {
            spin_for(me, round);
            if round < ROUNDS {
                post(round, round + 1);
            } else {
                me.mr.write(0, &u64::from(round).to_le_bytes());
                write8(qp, me, peer, round);
            }
        }
    }
    ((ready, answered), after)
}

fn run(a: &Side, b: &Side) -> ((u32, u32), (u32, u32)) {
    let (qa, qb) = rc_pair(a, b);
    std::thread::scope(|s| {
        let server = s.spawn(|| ping_pong(&qb, b, a, false));
        let client = ping_pong(&qa, a, b, true);
        (client, server.join().unwrap())
    })
}

/// Over UDP and over the same-host rings: every round's WRITE lands, and
/// the posts wait: most find the answer in memory when they return (the
/// waiting thread placed it), and every answered wait did.
#[test]
fn a_write_ping_pong_that_spins_on_memory_finds_each_answer_placed_by_the_post() {
    let _one = serial();
    for same_host in [false, true] {
        let side = |end: &str, host: u8| {
            let name = format!("wait-{same_host}-{end}");
            side_on_path(&name, &format!("127.7.3.{host}"), same_host, 4096)
        };
        let host = if same_host { 12 } else { 10 };
        let (a, b) = (side("a", host), side("b", host + 1));
        let (client, server) = run(&a, &b);
        for (end, s, (ready, answered)) in [("client", &a, client), ("server", &b, server)] {
            let (ok, missed) = waits(s);
            eprintln!(
                "same host {same_host}, {end}: {answered} answered waits of \
                 {ROUNDS} posts ({ok} counted, {missed} missed), {ready} found the answer"
            );
            // The pattern holds after a few rounds; a loaded machine may
            // preempt either end, which breaks it for a few posts (an
            // unoptimised build on two busy cores answered 40 to 397 of
            // 400), so only some answered waits are required.
            assert!(answered > 0, "{end}: no answered wait");
            assert!(ready >= answered);
        }
    }
}

/// One thread drives both ends of a WRITE ping-pong between two devices:
/// a post's wait cannot be answered (the answer needs this thread's next
/// post), so every wait ends at its bound; the doubling streak makes such
/// waits rare, and the exchange still completes every round. The thread
/// polls the receiving device's CQ while it spins, so that it places each
/// WRITE itself and answers it at once: left to the progress threads, a
/// WRITE's placement and the post that answers it are often more than
/// `ANSWER_NS` apart on two cores (the threads of both devices take turns
/// with this one), and the pattern would seldom form at all.
#[test]
fn waits_that_cannot_be_answered_stay_rare() {
    let _one = serial();
    let (a, b) = sides_on("wait-one", 3, 8, 4096);
    let (qa, qb) = rc_pair(&a, &b);
    let posts = 600;
    let started = Instant::now();
    for round in 1..=posts {
        // A writes round r to B, B sees it and writes it back; A sees it.
        for (me, qp, peer) in [(&a, &qa, &b), (&b, &qb, &a)] {
            me.mr.write(0, &u64::from(round).to_le_bytes());
            write8(qp, me, peer, round);
            poll_for(peer, round);
        }
    }
    let missed = waits(&a).1 + waits(&b).1;
    eprintln!(
        "{missed} missed waits in {} posts, {:?}",
        2 * posts,
        started.elapsed()
    );
    assert!(missed > 0, "the pattern was seen: some posts waited");
    // Per device: waits after 2, 4, 8 ... 256 posts in the pattern.
    assert!(missed <= 2 * 9, "{missed} missed waits");
}

/// `ibv_req_notify_cq` says the thread is about to block for its
/// completions: its posts stop waiting (a wait would spin on a core the
/// program gave up) until the pattern has held for 256 posts again. The
/// server calls it before its post of round 150 of 400: it waited before,
/// and none of its 250 posts after waits.
#[test]
fn req_notify_cq_stops_the_waits_of_the_posts_after_it() {
    let _one = serial();
    let side = |end: &str, host: u8| {
        side_on_path(
            &format!("wait-notify-{end}"),
            &format!("127.7.3.{host}"),
            false,
            4096,
        )
    };
    let (a, b) = (side("a", 14), side("b", 15));
    let (qa, qb) = rc_pair(&a, &b);
    let notify_at = 150;
    let ((_, answered), after) = std::thread::scope(|s| {
        let server = s.spawn(|| ping_pong_notifying(&qb, &b, &a, false, Some(notify_at)));
        ping_pong(&qa, &a, &b, true);
        server.join().unwrap()
    });
    let before = answered - after;
    eprintln!("server: {before} answered waits before req_notify_cq, {after} after");
    assert!(
        before > 0,
        "the server's posts never waited before req_notify_cq: nothing to stop"
    );
    assert_eq!(after, 0, "posts after req_notify_cq waited");
}

/// Two QPs of one device write to each other (a loopback pair, as many a
/// test suite sets up), driven by one thread: each post follows exactly one
/// WRITE its device took, moments before, the pattern of a ping-pong. But
/// the device took it from itself, through its own loopback, so no post
/// waits. (While those WRITEs counted, posts waited for the WRITEs their
/// own transmit made: `softverbs perf --threads`, which streams between
/// such pairs, ran at a third of its rate in some runs, spec/performance.md
/// §22.)
#[test]
fn writes_a_device_takes_from_itself_never_make_a_post_wait() {
    let _one = serial();
    let a = side_on_path("wait-self", "127.7.3.30", false, 4096);
    let (q1, q2) = rc_pair(&a, &a);
    for round in 1..=300u32 {
        for qp in [&q1, &q2] {
            a.mr.write(0, &u64::from(round).to_le_bytes());
            write8(qp, &a, &a, round);
            spin_for(&a, round);
        }
    }
    let io = a.ctx.io_counters();
    assert!(
        io.loopback_datagrams >= 600,
        "the pair wrote through its loopback: {io:?}"
    );
    assert_eq!(io.post_waits, 0, "{io:?}");
}

//! Tests of the application threads' transmit (see the parent module).

use super::*;
use crate::engine::{Notification, Transmit};
use crate::Driver;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// An engine that sends what is queued, in order; with an answer
/// address, it answers every datagram it is handed with one to it, and
/// counts it a receive completed if `.3` says the datagrams are requests.
/// With `.4`, `has_work` says no whatever is queued, as the engine does of
/// a post still in its QP's send ring (drained only when asked to send).
#[derive(Default)]
struct Queue(
    Mutex<VecDeque<(SocketAddr, Vec<u8>)>>,
    Option<SocketAddr>,
    AtomicU64,
    bool,
    bool,
);

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
        if self.3 {
            self.2.fetch_add(1, SeqCst);
        }
    }
    fn receives_completed(&self) -> u64 {
        self.2.load(SeqCst)
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
        !self.4 && !self.0.lock().unwrap().is_empty()
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
    fn poll_transmit_claimed(&self, now: Nanos, buf: &mut [u8], c: &mut u32) -> Option<Transmit> {
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

/// A post the engine does not show as work yet (in a send ring it drains
/// only when asked to send) that rang the doorbell: the progress thread,
/// passing while a thread polls, leaves the transmit to that thread's next
/// poll, which sends it. When the progress thread left it only if the
/// engine showed work, 24 tests of the rdma-core suite timed out: the post
/// waited for the lease's end, which the polling thread kept putting off.
#[test]
fn a_post_the_engine_does_not_show_yet_goes_with_the_next_poll() {
    let (d, peer, to) = streaming("127.0.61.41", "127.0.61.42", Duration::from_secs(30));
    d.with(|e| e.4 = true);
    sleep_aside(&d);
    let n = d.counters().sleeps;
    d.with(|e| e.q().push_back((to, vec![3; 4])));
    d.doorbell();
    sleeps(&d, n + 1);
    assert!(d.shared().polled(d.now()), "the lease holds");
    // The next poll sends it (a few, in case the pass was not yet over).
    peer.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 8];
    let got = (0..100).find_map(|_| {
        d.drive_receive();
        std::thread::sleep(Duration::from_millis(1));
        peer.recv(&mut buf).ok()
    });
    assert_eq!(got.map(|n| &buf[..n]), Some(&[3u8; 4][..]), "never sent");
    assert_eq!(
        d.counters().caller_datagrams,
        2,
        "sent by the polling thread"
    );
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

/// A driver whose engine answers `peer` (each datagram a request that
/// completes a receive), its progress thread asleep aside for a poll's
/// lease of `lease`, and the datagram `ping` from the peer waiting in its
/// socket.
fn answering(ip: &str, peer: &str, lease: Duration) -> (Driver<Queue>, UdpSocket, SocketAddr) {
    let opts = DriverOptions {
        poll_lease: lease,
        ..DriverOptions::default()
    };
    let (d, peer) = pair(ip, peer, opts);
    let to = peer.local_addr().unwrap();
    d.with(|e| (e.1, e.3) = (Some(to), true));
    sleep_aside(&d);
    // The progress thread's last pass left its transmit to the poll: taken.
    d.drive_receive();
    peer.send_to(b"ping", d.local_addr()).unwrap();
    (d, peer, to)
}

/// Polls until the engine was handed a datagram (bounded).
fn poll_delivering(d: &Driver<Queue>) {
    let start = Instant::now();
    while d.drive_receive() == 0 {
        assert!(start.elapsed() < Duration::from_secs(20), "nothing came");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Nothing reaches `peer` within 50 ms.
fn silent(peer: &UdpSocket, why: &str) {
    peer.set_nonblocking(true).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let mut buf = [0u8; 16];
    assert!(peer.recv(&mut buf).is_err(), "{why}");
    peer.set_nonblocking(false).unwrap();
}

/// A poll that hands the engine a request (its delivery completes a
/// receive) leaves the engine's answer (an ACK) to the program's next post:
/// it leaves with the reply, both in one system call. A datagram that
/// completes no receive (an ACK, a WRITE) has its answer sent by the poll.
#[test]
fn an_answer_to_a_request_waits_for_the_reply() {
    let (d, peer, to) = answering("127.0.61.25", "127.0.61.26", Duration::from_secs(30));
    poll_delivering(&d);
    assert_eq!(d.counters().deferred_transmits, 1);
    silent(&peer, "the answer was sent before the reply");
    let calls = d.counters().send_calls;
    d.with(|e| e.q().push_back((to, b"pong".to_vec())));
    assert_eq!(d.posted(true), 2, "the answer and the reply");
    expect(&peer, b"re:ping");
    expect(&peer, b"pong");
    assert_eq!(d.counters().send_calls, calls + 1, "in one system call");

    // No receive completed: the answer leaves from the poll.
    d.with(|e| e.3 = false);
    peer.send_to(b"ping", d.local_addr()).unwrap();
    poll_delivering(&d);
    expect(&peer, b"re:ping");
    assert_eq!(d.counters().deferred_transmits, 1);
}

/// A deferred answer leaves when a QP is about to change state or go
/// (`flush_left`); one left at a poll that already had a post left to it
/// is not deferred again: the poll sends both.
#[test]
fn a_deferred_answer_leaves_at_flush_left_and_never_behind_a_waiting_post() {
    let (d, peer, to) = answering("127.0.61.27", "127.0.61.28", Duration::from_secs(30));
    poll_delivering(&d);
    silent(&peer, "deferred");
    d.flush_left();
    expect(&peer, b"re:ping");
    assert!(!d.shared().caller_tx.as_ref().unwrap().is_wanted());

    // A post left to the poll (a stream), then a request's delivery: sent
    // at once, the post first.
    d.with(|e| e.q().push_back((to, b"post".to_vec())));
    assert_eq!(d.posted(false), 0, "left to the poll");
    peer.send_to(b"ping", d.local_addr()).unwrap();
    poll_delivering(&d);
    expect(&peer, b"post");
    expect(&peer, b"re:ping");
    assert_eq!(d.counters().deferred_transmits, 1);
}

/// A deferred answer whose program never posts or polls again leaves
/// from the progress thread when the lease ends.
#[test]
fn a_deferred_answer_nobody_takes_goes_at_the_leases_end() {
    let (d, peer, _) = answering("127.0.61.29", "127.0.61.30", Duration::from_millis(50));
    poll_delivering(&d);
    let sent = d.counters().caller_datagrams;
    expect(&peer, b"re:ping");
    let c = d.counters();
    assert_eq!(c.deferred_transmits, 1);
    assert_eq!(c.caller_datagrams, sent, "the progress thread sent it");
}

/// A deferred answer handed to the progress thread (an exiting thread,
/// which may not transmit itself) leaves from it at once, the lease ended.
#[test]
fn a_deferred_answer_handed_to_the_progress_thread_leaves_from_it() {
    let (d, peer, _) = answering("127.0.61.31", "127.0.61.32", Duration::from_secs(30));
    assert!(!d.has_left(), "nothing left yet");
    poll_delivering(&d);
    let sent = d.counters().caller_datagrams;
    assert!(d.has_left() && d.has_unsent());
    assert_eq!(
        d.hand_work_to_progress(),
        Some(true),
        "this thread's poll left it"
    );
    expect(&peer, b"re:ping");
    assert!(!d.has_left());
    assert_eq!(
        d.counters().caller_datagrams,
        sent,
        "the progress thread sent it"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while d.has_unsent() {
        assert!(std::time::Instant::now() < deadline, "still unsent");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Runs `f` on a thread whose lane is none of `not` (threads get lanes
/// round robin, and other tests start threads too: a few tries).
fn on_another_lane<R: Send>(not: &[usize], f: impl Fn() -> R + Sync) -> (usize, R) {
    for _ in 0..64 {
        let (lane, r) = std::thread::scope(|s| s.spawn(|| (lanes::lane(), f())).join().unwrap());
        if !not.contains(&lane) {
            return (lane, r);
        }
    }
    panic!("no thread on another lane");
}

/// What is left to a poll waits in its lane (crate `lanes`): the lane's
/// own threads take it at once, any other polling thread only once it has
/// waited `caller_tx_lane_wait` (its threads went quiet), or at once if the lane's
/// threads do not poll; what the progress thread leaves in its own lane,
/// or a thread in a lane it took over, any polling thread takes at once.
#[test]
fn left_work_waits_for_its_lane_then_any_poll_takes_it() {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let local = socket.local_addr().unwrap();
    let opts = DriverOptions::default();
    let tx: CallerTx<()> = CallerTx::new(socket, local, &opts, true);
    let wait = u64::try_from(opts.caller_tx_lane_wait.as_nanos()).unwrap();
    let me = lanes::lane();
    let t0 = 1_000_000;
    tx.polls(t0); // this thread polls
                  // A thread of another lane, which polls, left a post to its next poll.
    let (p, ()) = on_another_lane(&[me], || {
        tx.polls(t0);
        tx.want(LaneSet::mine(), t0);
    });
    assert!(
        tx.is_any_wanted() && !tx.is_wanted(),
        "not this thread's lane"
    );
    assert_eq!(
        tx.take_wanted(t0 + wait - 1),
        LaneSet::NONE,
        "its own first"
    );
    assert_eq!(tx.take_wanted(t0 + wait), LaneSet::of(p), "then anyone's");
    assert!(!tx.is_any_wanted(), "taken");
    // A thread of that lane takes what its lane left at once.
    let (_, took) = on_another_lane(&[me], || {
        tx.want(LaneSet::mine(), t0);
        (lanes::lane(), tx.take_wanted(t0 + 1))
    });
    assert_eq!(took.1, LaneSet::of(took.0));
    // The progress thread (on a third lane) leaves its own lane's work to
    // any poll at once, and `p`'s to `p`'s threads first.
    let (q, ()) = on_another_lane(&[me, p], || tx.want_from_progress(LaneSet::of(p), t0));
    assert_eq!(tx.take_wanted(t0 + 1), LaneSet::of(q));
    assert_eq!(tx.take_wanted(t0 + wait), LaneSet::of(p));
    // A lane this thread took over and could not finish goes to any poll
    // at once; its own lane's to its own threads.
    tx.want(LaneSet::of(p).with(LaneSet::mine()), t0);
    assert!(tx.is_wanted());
    let (_, other) = on_another_lane(&[me, p], || tx.take_wanted(t0 + 1));
    assert_eq!(other, LaneSet::of(p));
    assert_eq!(tx.take_wanted(t0 + 1), LaneSet::of(me));
    assert!(!tx.take_all_wanted(), "nothing left");
    // A thread that posts and never polls: its work goes to any poll at once.
    let (r, ()) = on_another_lane(&[me, p], || tx.want(LaneSet::mine(), t0));
    assert_eq!(tx.take_wanted(t0 + 1), LaneSet::of(r));
    // `p`'s threads last polled at t0: work left in `p` waits for them
    // while that is recent, and no longer once it is POLLER_NS old.
    let me_and_p = LaneSet::of(me).with(LaneSet::of(p));
    tx.want_from_progress(LaneSet::of(p), t0 + 1);
    assert_eq!(tx.take_wanted(t0 + 2), LaneSet::of(me));
    assert!(tx.take_all_wanted(), "p's, still waiting");
    let late = t0 + POLLER_NS;
    tx.want_from_progress(LaneSet::of(p), late);
    assert_eq!(tx.take_wanted(late + 1), me_and_p);
}

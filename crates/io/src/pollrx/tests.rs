//! The gate, the lease, the pace and the reads of a polling thread.

use super::*;
use crate::clock::{Clock, Nanos};
use crate::engine::{Notification, Transmit};

/// An engine that keeps what it is handed; `work` is what it says it has
/// to send, `timer` its next deadline.
#[derive(Default)]
struct Keep(Mutex<Vec<(SocketAddr, Vec<u8>)>>, bool, Option<Nanos>);

impl Engine for Keep {
    type Claims = ();
    fn handle_datagram(&self, _: Nanos, from: SocketAddr, _: SocketAddr, p: &[u8]) {
        self.0.lock().unwrap().push((from, p.to_vec()));
    }
    fn poll_transmit(&self, _: Nanos, _: &mut [u8]) -> Option<Transmit> {
        None
    }
    fn poll_timeout(&self) -> Option<Nanos> {
        self.2
    }
    fn has_work(&self) -> bool {
        self.1
    }
    fn handle_timeout(&self, _: Nanos) {}
    fn poll_notification(&self) -> Option<Notification> {
        None
    }
}

/// The engine, to change what it says (no other thread uses it).
fn keep(s: &Shared<Keep>) -> crossbeam_utils::sync::ShardedLockWriteGuard<'_, Keep> {
    s.engine.write().unwrap()
}

/// The state a driver shares, with no progress thread: only this test reads.
fn shared(addr: &str, opts: &DriverOptions) -> (Shared<Keep>, UdpSocket) {
    let socket = crate::socket::bind(addr.parse().unwrap(), 1 << 20, 1 << 20).unwrap();
    let local = socket.local_addr().unwrap();
    let shared = Shared::new(Keep::default(), Clock::new(), &socket, local, opts).unwrap();
    (shared, socket)
}

/// The options with a polling thread's receive on.
fn polling() -> DriverOptions {
    DriverOptions {
        poll_receive: true,
        ..DriverOptions::default()
    }
}

/// Drives until `n` datagrams were delivered (bounded in calls).
fn drive_all(s: &Shared<Keep>, n: usize) -> usize {
    drive_all_for(s, n, None)
}

/// [`drive_all`] as a post waiting for its answer (`seen`) does.
fn drive_all_for(s: &Shared<Keep>, n: usize, seen: Option<u64>) -> usize {
    let mut total = 0;
    for _ in 0..1000 {
        total += drive_for(s, s.clock.now(), seen);
        if total >= n {
            break;
        }
    }
    total
}

#[test]
fn beside_delivering_rings_an_empty_socket_is_read_by_time_not_by_polls() {
    let p = Pace::default();
    let t0: Nanos = 5_000_000;
    // No ring has delivered: every poll reads.
    assert!(p.socket_due(t0));
    p.rings_at.store(t0, Relaxed);
    p.socket_read(t0, 0);
    // However many polls come within the period, none reads it ...
    for i in 1..=10_000 {
        assert!(!p.socket_due(t0 + i), "poll {i} read the socket");
    }
    assert!(!p.socket_due(t0 + SOCKET_EVERY_NS - 1));
    // ... and the first after it does.
    assert!(p.socket_due(t0 + SOCKET_EVERY_NS));
    // A socket that had data is read on every poll.
    p.socket_read(t0 + SOCKET_EVERY_NS, 3);
    assert!(p.socket_due(t0 + SOCKET_EVERY_NS + 1));
    // Rings quiet for long: every poll reads again.
    let late = t0 + RINGS_RECENT_NS;
    p.socket_read(late - 5, 0);
    assert!(!p.socket_due(late - 1));
    assert!(p.socket_due(late));
}

#[test]
fn a_polling_thread_reads_in_order_only_while_the_progress_thread_sleeps() {
    let on = polling();
    let (s, _socket) = shared("127.0.3.41:0", &on);
    let to = s.rx.reader.lock().unwrap().local;
    let client = UdpSocket::bind("127.0.3.42:0").unwrap();
    client.send_to(b"early", to).unwrap();
    // The progress thread is awake: not this thread's to read.
    assert_eq!(drive(&s), 0);
    assert_eq!(s.counters.snapshot().poll_receive_calls, 0);
    s.rx.set_asleep(Some(u64::MAX), false, 0);
    assert_eq!(drive_all(&s, 1), 1);
    assert_eq!(drive(&s), 0, "nothing queued");
    // More than one read's worth (loopback queues before send_to returns).
    for i in 0..10u8 {
        client.send_to(&[i; 20], to).unwrap();
    }
    assert_eq!(drive_all(&s, 10), 10);
    // Someone else holds the gate: no read, no wait.
    client.send_to(b"late", to).unwrap();
    {
        let _gate = s.rx.hold();
        assert_eq!(drive(&s), 0);
    }
    assert_eq!(drive_all(&s, 1), 1);
    let from = client.local_addr().unwrap();
    let mut want = vec![b"early".to_vec()];
    want.extend((0..10u8).map(|i| vec![i; 20]));
    want.push(b"late".to_vec());
    {
        let got = s.engine().0.lock().unwrap().clone();
        assert_eq!(got.iter().map(|(_, p)| p.clone()).collect::<Vec<_>>(), want);
        assert!(got.iter().all(|(f, _)| *f == from));
    }
    let c = s.counters.snapshot();
    assert_eq!((c.poll_receive_datagrams, c.datagrams_received), (12, 12));
    assert!(c.poll_receive_calls >= 4 && c.poll_receive_calls <= 12);
    // Nothing to send, no timer: the progress thread sleeps on.
    assert_eq!(s.doorbell.fd().take().unwrap(), 0);
    // Something to send: it is rung.
    keep(&s).1 = true;
    client.send_to(b"ack", to).unwrap();
    assert_eq!(drive_all(&s, 1), 1);
    assert!(s.doorbell.fd().take().unwrap() > 0);
    s.doorbell.clear();
    // A timer due before the sleep ends: it is rung; one after: not.
    keep(&s).1 = false;
    s.rx.set_asleep(Some(5_000), false, 0);
    for (timer, rung) in [(6_000, false), (4_000, true)] {
        keep(&s).2 = Some(timer);
        client.send_to(b"t", to).unwrap();
        assert_eq!(drive_all(&s, 1), 1);
        assert_eq!(s.doorbell.fd().take().unwrap() > 0, rung, "timer {timer}");
        s.doorbell.clear();
    }
}

#[test]
fn a_waiting_post_reads_while_the_progress_thread_is_awake_and_marks_its_lease() {
    let on = polling();
    let (s, _socket) = shared("127.0.3.52:0", &on);
    let to = s.rx.reader.lock().unwrap().local;
    let client = UdpSocket::bind("127.0.3.53:0").unwrap();
    client.send_to(b"answer", to).unwrap();
    // The progress thread is awake: a poll leaves the socket to it ...
    assert_eq!(drive(&s), 0);
    assert!(!s.rx.by_wait.load(SeqCst));
    // ... a waiting post reads it, unless the progress thread holds it.
    {
        let _gate = s.rx.hold();
        assert_eq!(drive_for(&s, s.clock.now(), Some(0)), 0);
    }
    assert_eq!(drive_all_for(&s, 1, Some(0)), 1);
    assert!(s.rx.by_wait.load(SeqCst), "the lease is the wait's");
    assert!(s.rx.lease(s.clock.now()).is_some());
    // A poll of a CQ renews it as its own.
    drive(&s);
    assert!(!s.rx.by_wait.load(SeqCst));
}

#[test]
fn the_lease_holds_through_a_polls_work_and_counts_from_its_end() {
    let on = DriverOptions {
        poll_lease: std::time::Duration::from_micros(50),
        ..polling()
    };
    let (s, socket) = shared("127.0.3.48:0", &on);
    // Work found at t: the lease holds until the work's longest (not
    // 50 µs), looked at again every 50 µs; then it is over.
    s.rx.working(1_000);
    let end = 1_000 + WORK_LEASE_NS;
    for t in [1_000 + 50_000, end - 10_000] {
        assert!(s.rx.busy(t));
        assert_eq!(s.rx.lease(t), Some((t + 50_000).min(end)));
    }
    assert!(!s.rx.busy(end));
    assert_eq!(s.rx.lease(end), None);
    // The work's end: the lease counts from there, no longer busy.
    s.rx.worked(5_000);
    assert!(!s.rx.busy(5_000));
    assert_eq!(s.rx.lease(5_000), Some(55_000));
    assert_eq!(s.rx.lease(55_000), None);
    // A poll that handed a datagram to the engine renews the lease (from
    // its start: a delivery of one datagram is short): a short lease
    // again, from within the poll.
    let client = UdpSocket::bind("127.0.3.42:0").unwrap();
    client.send_to(b"x", socket.local_addr().unwrap()).unwrap();
    s.rx.set_asleep(Some(u64::MAX), false, 0);
    let before = s.clock.now();
    assert_eq!(drive_all(&s, 1), 1);
    let after = s.clock.now();
    let until = s.rx.lease_until.load(SeqCst);
    assert!(
        until >= before + 50_000 && until <= after + 50_000,
        "{until}"
    );
    assert!(!s.rx.busy(before));
    // A poll that found nothing renews it as well (from its start).
    assert_eq!(drive(&s), 0);
    assert!(s.rx.lease_until.load(SeqCst) <= s.clock.now() + 50_000);
}

#[test]
fn quiet_after_a_while_without_a_poll_unless_working() {
    let on = polling();
    let (s, _socket) = shared("127.0.3.50:0", &on);
    s.rx.renew(100_000);
    assert!(!s.rx.quiet(100_000 + QUIET_NS), "polled just now");
    // A poll renewed the lease, yet none came since: quiet, though the
    // lease holds (the program spins on memory for its peer's data).
    let later = 100_000 + QUIET_NS + 1;
    assert!(s.rx.lease(later).is_some());
    assert!(s.rx.quiet(later));
    // A thread that works on what it found is not quiet.
    s.rx.working(later);
    assert!(!s.rx.quiet(later + QUIET_NS));
    s.rx.worked(later + QUIET_NS);
    assert!(!s.rx.quiet(later + 2 * QUIET_NS));
    assert!(s.rx.quiet(later + 2 * QUIET_NS + 1));
}

#[test]
fn it_steps_aside_when_off_or_with_faults_or_a_capture() {
    let off = DriverOptions {
        poll_receive: false,
        ..DriverOptions::default()
    };
    let faults = DriverOptions {
        faults: "loss=0.5".parse().unwrap(),
        poll_receive: true,
        ..DriverOptions::default()
    };
    let capture = DriverOptions {
        capture: Some("/nonexistent/never-created.pcap".into()),
        poll_receive: true,
        ..DriverOptions::default()
    };
    for (i, opts) in [off, faults, capture].iter().enumerate() {
        let (s, socket) = shared(&format!("127.0.3.{}:0", 43 + i), opts);
        let client = UdpSocket::bind("127.0.3.42:0").unwrap();
        client.send_to(b"x", socket.local_addr().unwrap()).unwrap();
        s.rx.set_asleep(Some(u64::MAX), false, 0);
        assert_eq!(drive(&s), 0, "options {i}");
        assert_eq!(s.counters.snapshot().poll_receive_calls, 0);
        assert!(s.engine().0.lock().unwrap().is_empty());
    }
}

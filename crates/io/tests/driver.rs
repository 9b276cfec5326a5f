//! The driver with fake engines: echo, ping-pong, loopback shortcut, timers,
//! doorbell, notifications, IPv6. Only loopback addresses; every wait bounded.
mod common;

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use common::{fd_readable, start, wait_until, Fake, FakeState, DEADLINE};
use sv_io::{AsyncEvent, Driver, DriverOptions, Notification};

#[test]
fn echo_engine_replies_to_a_plain_udp_client() {
    let d = start(Fake::echo(), "127.0.0.11:0");
    let client = UdpSocket::bind("127.0.0.12:0").unwrap();
    client.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut buf = [0u8; 64];
    for i in 0..10u8 {
        client.send_to(&[i; 33], d.local_addr()).unwrap();
        let (n, from) = client.recv_from(&mut buf).unwrap();
        assert_eq!((n, from, buf[0]), (33, d.local_addr(), i));
    }
    // The counter of the last send may land just after the reply did.
    assert!(wait_until(|| d.counters().datagrams_sent == 10));
    let c = d.counters();
    assert_eq!((c.datagrams_received, c.bytes_received), (10, 330));
    assert_eq!((c.datagrams_sent, c.bytes_sent), (10, 330));
    assert_eq!(
        (c.send_errors, c.recv_errors, c.loopback_datagrams),
        (0, 0, 0)
    );
    d.with(|e| {
        assert_eq!(e.s().inbox[0].from, client.local_addr().unwrap());
        assert_eq!(e.s().inbox[0].to, d.local_addr());
        assert!(e.s().inbox.windows(2).all(|w| w[0].now <= w[1].now));
    });
}

/// Two drivers bounce one datagram: `a` echoes `rounds` times, `b` always.
fn ping_pong(a_addr: &str, b_addr: &str, rounds: u64) {
    let a = start(
        Fake::from(FakeState {
            echo_budget: rounds,
            ..FakeState::default()
        }),
        a_addr,
    );
    let b = start(Fake::echo(), b_addr);
    a.with(|e| e.s().outbox.push_back((b.local_addr(), b"ping".to_vec())));
    a.doorbell();
    // b sees the kick-off plus one per echo of a.
    assert!(wait_until(|| b.counters().datagrams_received == rounds + 1));
    assert!(wait_until(|| a.counters().datagrams_received == rounds + 1));
    a.with(|e| {
        assert!(e
            .s()
            .inbox
            .iter()
            .all(|r| r.from == b.local_addr() && r.payload == b"ping"))
    });
    // Counted after the send call returns: the peer may have read it first.
    assert!(wait_until(|| b.counters().datagrams_sent == rounds + 1));
    assert_eq!(
        a.counters().loopback_datagrams + b.counters().loopback_datagrams,
        0
    );
    // Each side reads only when poll(2) reported the socket readable (one
    // datagram in flight: never a read that finds nothing).
    assert_eq!((a.counters().recv_empty, b.counters().recv_empty), (0, 0));
}

#[test]
fn ping_pong_between_two_drivers_ipv4() {
    ping_pong("127.0.0.21:0", "127.0.0.22:0", 200);
}

#[test]
fn ping_pong_between_two_drivers_ipv6() {
    if UdpSocket::bind("[::1]:0").is_err() {
        eprintln!("skipped: no IPv6 loopback here");
        return;
    }
    ping_pong("[::1]:0", "[::1]:0", 50);
}

#[test]
fn loopback_shortcut_bypasses_the_socket() {
    // An echo engine that talks to itself: 100 bounces without any socket traffic.
    let d = start(
        Fake::from(FakeState {
            echo_budget: 99,
            ..FakeState::default()
        }),
        "127.0.0.31:0",
    );
    let me = d.local_addr();
    d.with(|e| e.s().outbox.push_back((me, vec![7; 100])));
    d.doorbell();
    assert!(wait_until(|| d.counters().loopback_datagrams == 100));
    let c = d.counters();
    assert_eq!(
        (c.loopback_bytes, c.datagrams_sent, c.datagrams_received),
        (10_000, 0, 0)
    );
    d.with(|e| {
        assert_eq!(e.s().inbox.len(), 100);
        assert!(e.s().inbox.iter().all(|r| r.from == me && r.to == me));
    });
}

#[test]
fn timers_fire_in_order_and_not_early() {
    let d = start(Fake::default(), "127.0.0.41:0");
    let now = d.now();
    let ms = 1_000_000;
    let deadlines = [
        now + 30 * ms,
        now + 5 * ms,
        now + 15 * ms,
        now + 15 * ms + 1,
    ];
    d.with(|e| e.s().timers.extend(deadlines));
    d.doorbell();
    assert!(wait_until(|| d.with(|e| e.s().timers.is_empty())));
    d.with(|e| {
        let mut sorted = deadlines.to_vec();
        sorted.sort_unstable();
        assert_eq!(e.s().fired.iter().map(|f| f.0).collect::<Vec<_>>(), sorted);
        assert!(
            e.s().fired.iter().all(|&(deadline, at)| at >= deadline),
            "{:?}",
            e.s().fired
        );
        assert!(e.s().fired.windows(2).all(|w| w[0].1 <= w[1].1));
    });
}

#[test]
fn timer_far_in_the_future_does_not_fire() {
    let d = start(Fake::default(), "127.0.0.42:0");
    let later = d.now() + 3_600_000_000_000;
    d.with(|e| e.s().timers.insert(later));
    d.doorbell();
    std::thread::sleep(Duration::from_millis(20));
    d.with(|e| assert!(e.s().fired.is_empty()));
}

#[test]
fn doorbell_from_another_thread_wakes_a_sleeping_driver() {
    let opts = DriverOptions {
        busy_poll: Duration::ZERO,
        ..DriverOptions::default()
    };
    let sink = UdpSocket::bind("127.0.0.52:0").unwrap();
    sink.set_read_timeout(Some(DEADLINE)).unwrap();
    let d = Driver::start(Fake::default(), "127.0.0.51:0".parse().unwrap(), opts).unwrap();
    // The thread goes to sleep (no work, no deadline) before we post.
    assert!(wait_until(|| d.counters().sleeps >= 1));
    let to = sink.local_addr().unwrap();
    let waker = d.waker();
    let poster = std::thread::scope(|s| {
        s.spawn(|| {
            d.with(|e| e.s().outbox.push_back((to, b"posted".to_vec())));
            waker.ring();
            waker.ring(); // coalesced with the first
        })
        .join()
    });
    poster.unwrap();
    let mut buf = [0u8; 16];
    let (n, from) = sink.recv_from(&mut buf).unwrap();
    assert_eq!((&buf[..n], from), (&b"posted"[..], d.local_addr()));
}

#[test]
fn completion_channel_fd_is_readable_after_notify() {
    let d = start(Fake::default(), "127.0.0.61:0");
    let ch = d.create_completion_channel().unwrap();
    let other = d.create_completion_channel().unwrap();
    assert_ne!(ch.id(), other.id());
    assert!(!fd_readable(ch.as_raw_fd(), 0));
    d.with(|e| {
        e.s().notes.push_back(Notification::Completion {
            channel: ch.id(),
            cq: 0xC0,
        });
        e.s().notes.push_back(Notification::Completion {
            channel: ch.id(),
            cq: 0xC1,
        });
    });
    d.doorbell();
    assert!(fd_readable(ch.as_raw_fd(), 20_000));
    assert!(!fd_readable(other.as_raw_fd(), 0));
    assert!(wait_until(|| ch.pending() == 2));
    assert_eq!(ch.get_event(Some(DEADLINE)).unwrap(), Some(0xC0));
    assert!(fd_readable(ch.as_raw_fd(), 0));
    assert_eq!(ch.try_get_event(), Some(0xC1));
    assert!(!fd_readable(ch.as_raw_fd(), 0));
    assert_eq!(d.counters().notifications, 2);
}

#[test]
fn notification_for_a_closed_channel_is_counted_as_dropped() {
    let d = start(Fake::default(), "127.0.0.62:0");
    let id = d.create_completion_channel().unwrap().id(); // dropped at once
    d.with(|e| {
        e.s()
            .notes
            .push_back(Notification::Completion { channel: id, cq: 1 })
    });
    d.doorbell();
    assert!(wait_until(|| d.counters().notifications_dropped == 1));
}

/// Each context has its own async queue: an event reaches the queue of the
/// context it names and no other; one for a context without a queue (closed,
/// or never opened) is counted as dropped.
#[test]
fn async_events_reach_their_contexts_queue_fd_only() {
    let d = start(Fake::default(), "127.0.0.63:0");
    let (a, b) = (
        d.open_async_queue(1).unwrap(),
        d.open_async_queue(2).unwrap(),
    );
    let ev = |ctx| AsyncEvent {
        kind: 3,
        element: 0xAB,
        ctx,
    };
    d.with(|e| {
        e.s().notes.push_back(Notification::Async(ev(1)));
        e.s().notes.push_back(Notification::Async(ev(7)));
    });
    d.doorbell();
    assert!(fd_readable(a.as_raw_fd(), 20_000));
    assert!(wait_until(|| d.counters().notifications_dropped == 1));
    assert_eq!(a.pop_wait(Some(DEADLINE)).unwrap(), Some(ev(1)));
    assert!(!fd_readable(a.as_raw_fd(), 0));
    assert!(
        !fd_readable(b.as_raw_fd(), 0),
        "context 2's queue got context 1's event"
    );
    assert_eq!(d.counters().notifications, 1);
    // A queue dropped by its context unregisters itself.
    drop(b);
    d.with(|e| e.s().notes.push_back(Notification::Async(ev(2))));
    d.doorbell();
    assert!(wait_until(|| d.counters().notifications_dropped == 2));
}

#[test]
fn send_to_an_unroutable_address_is_counted_not_fatal() {
    // Port 0 is not a valid destination: sendto fails with EINVAL at once, no traffic.
    let d = start(Fake::echo(), "127.0.0.71:0");
    let bad: SocketAddr = "127.0.0.72:0".parse().unwrap();
    d.with(|e| e.s().outbox.push_back((bad, b"x".to_vec())));
    d.doorbell();
    assert!(wait_until(|| d.counters().send_errors == 1));
    // Still alive: it echoes a real datagram afterwards.
    let client = UdpSocket::bind("127.0.0.73:0").unwrap();
    client.set_read_timeout(Some(DEADLINE)).unwrap();
    client.send_to(b"alive", d.local_addr()).unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(client.recv_from(&mut buf).unwrap().0, 5);
}

#[test]
fn bind_errors_are_returned() {
    let taken = UdpSocket::bind("127.0.0.81:0").unwrap();
    let err = Driver::start(
        Fake::default(),
        taken.local_addr().unwrap(),
        DriverOptions::default(),
    );
    assert_eq!(err.unwrap_err().kind(), std::io::ErrorKind::AddrInUse);
}

#[test]
fn shutdown_is_prompt_and_closes_the_socket() {
    let d = start(Fake::default(), "127.0.0.91:0");
    let addr = d.local_addr();
    let started = std::time::Instant::now();
    d.shutdown();
    assert!(started.elapsed() < DEADLINE);
    // The port is free again: the progress thread dropped the socket.
    UdpSocket::bind(addr).unwrap();
}

#[test]
fn a_burst_leaves_in_order_in_few_send_calls_and_arrives_whole() {
    // 100 datagrams queued before the driver starts: they are collected in batches
    // and sent with sendmmsg, so far fewer calls than datagrams; a second driver
    // receives every one, intact and in order.
    let rx = start(Fake::default(), "127.0.0.41:0");
    let to = rx.local_addr();
    let mut engine = Fake::default();
    for i in 0..100u32 {
        let mut d = vec![(i % 251) as u8; 400];
        d[..4].copy_from_slice(&i.to_be_bytes());
        engine.s().outbox.push_back((to, d));
    }
    let tx = start(engine, "127.0.0.42:0");
    assert!(wait_until(|| rx.counters().datagrams_received == 100));
    // The sender counts a batch once its system call returned, which may be
    // after the receiver read it.
    assert!(wait_until(|| tx.counters().datagrams_sent == 100));
    let c = tx.counters();
    assert_eq!((c.datagrams_sent, c.send_errors), (100, 0));
    assert!(
        c.send_calls * 2 < c.datagrams_sent,
        "{} send calls for {} datagrams",
        c.send_calls,
        c.datagrams_sent
    );
    rx.with(|e| {
        assert_eq!(e.s().inbox.len(), 100);
        for (i, r) in e.s().inbox.iter().enumerate() {
            let mut want = vec![(i % 251) as u8; 400];
            want[..4].copy_from_slice(&(i as u32).to_be_bytes());
            assert_eq!(r.payload, want, "datagram {i}");
            assert_eq!((r.from, r.to), (tx.local_addr(), to));
        }
    });
    let r = rx.counters();
    assert!(r.recv_calls >= 1 && r.recv_calls <= r.datagrams_received);
}

/// A read of several datagrams from the socket is a stream's: the progress
/// thread then watches for more before it sleeps (the next burst of a
/// window comes a round trip later and finds it awake), as after a ring's
/// stream batch. Datagrams that come one at a time, each taken before the
/// next is sent (a ping-pong's), never make it watch.
#[test]
fn a_burst_read_from_the_socket_makes_the_progress_thread_watch() {
    let d = start(Fake::default(), "127.0.0.51:0");
    let to = d.local_addr();
    let client = UdpSocket::bind("127.0.0.52:0").unwrap();
    let taken = |d: &Driver<Fake>| d.with(|e| e.s().inbox.len());
    for i in 1..=20 {
        client.send_to(&[1; 40], to).unwrap();
        assert!(wait_until(|| taken(&d) == i), "datagram {i} taken");
    }
    assert_eq!(d.counters().stream_watches, 0, "{:?}", d.counters());
    // Bursts of 16, sent while the engine is held: the progress thread
    // reads what it can, waits for the engine, then reads the rest (its
    // reads grow 1, 2, 4, … while they come back full).
    let mut sent = 20;
    let start = std::time::Instant::now();
    while d.counters().stream_watches == 0 {
        assert!(start.elapsed() < DEADLINE, "no burst read as a stream");
        d.with(|_| {
            for _ in 0..16 {
                client.send_to(&[2; 40], to).unwrap();
            }
        });
        sent += 16;
        assert!(wait_until(|| taken(&d) == sent), "the burst taken");
    }
}

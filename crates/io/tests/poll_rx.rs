//! Receive by a thread that polls a CQ (`Driver::drive_receive`) while it
//! holds the lease on the socket: the progress thread then sleeps without
//! watching the socket, so arrivals do not wake it; the lease ends by
//! itself after the last empty poll (the progress thread takes the socket
//! back) or at once by `end_poll_lease` (`ibv_req_notify_cq`). Only
//! loopback addresses; every wait bounded.
mod common;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use common::{wait_until, Fake, DEADLINE};
use sv_io::{Driver, DriverOptions};

fn start(engine: Fake, addr: &str, lease: Duration, caller_tx: bool) -> Driver<Fake> {
    let opts = DriverOptions {
        poll_receive: true,
        poll_lease: lease,
        caller_tx,
        ..DriverOptions::default()
    };
    Driver::start(engine, addr.parse().unwrap(), opts).unwrap()
}

fn peer(addr: &str) -> UdpSocket {
    let s = UdpSocket::bind(addr).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    s
}

/// Takes the lease and waits until the progress thread sleeps aside.
fn lease(d: &Driver<Fake>) {
    let before = d.counters().aside_sleeps;
    assert_eq!(d.drive_receive(), 0);
    // It sleeps watching the socket: the doorbell makes it sleep again, aside.
    d.doorbell();
    assert!(wait_until(|| {
        d.drive_receive();
        d.counters().aside_sleeps > before
    }));
}

/// Polls until the engine holds `n` datagrams (bounded).
fn poll_until(d: &Driver<Fake>, n: usize) -> bool {
    let start = Instant::now();
    while start.elapsed() < DEADLINE {
        d.drive_receive();
        if d.with(|e| e.s().inbox.len()) >= n {
            return true;
        }
        std::thread::yield_now();
    }
    false
}

#[test]
fn a_polling_thread_receives_without_waking_the_progress_thread() {
    let d = start(
        Fake::default(),
        "127.0.65.1:0",
        Duration::from_secs(10),
        false,
    );
    let p = peer("127.0.65.2:0");
    lease(&d);
    let before = d.counters();
    let start = Instant::now();
    for i in 0..20u8 {
        p.send_to(&[i; 16], d.local_addr()).unwrap();
        assert!(poll_until(&d, i as usize + 1), "datagram {i} delivered");
    }
    let secs = start.elapsed().as_secs();
    let after = d.counters();
    d.with(|e| {
        let got: Vec<u8> = e.s().inbox.iter().map(|r| r.payload[0]).collect();
        assert_eq!(got, (0..20u8).collect::<Vec<_>>(), "in order, once each");
    });
    assert_eq!(
        after.poll_receive_datagrams - before.poll_receive_datagrams,
        20,
        "all read by the polling thread"
    );
    // The progress thread woke only for its own timeouts (one per second at
    // most), not for the 20 arrivals.
    let wakes = after.sleeps - before.sleeps;
    assert!(wakes <= 2 + secs, "{wakes} wake-ups in {secs} s");
    assert_eq!(
        after.recv_calls - before.recv_calls,
        after.poll_receive_calls - before.poll_receive_calls
    );
}

#[test]
fn when_the_lease_ends_the_progress_thread_receives() {
    let d = start(
        Fake::default(),
        "127.0.65.3:0",
        Duration::from_millis(2),
        false,
    );
    let p = peer("127.0.65.4:0");
    lease(&d);
    // This thread stops polling; the datagram still arrives.
    p.send_to(b"late", d.local_addr()).unwrap();
    assert!(wait_until(|| d.with(|e| e.s().inbox.len()) == 1));
    d.with(|e| assert_eq!(e.s().inbox[0].payload, b"late"));
    assert_eq!(
        d.counters().poll_receive_datagrams,
        0,
        "the progress thread read it"
    );
}

#[test]
fn ending_the_lease_gives_the_socket_back_at_once() {
    let d = start(
        Fake::default(),
        "127.0.65.5:0",
        Duration::from_secs(3600),
        false,
    );
    let p = peer("127.0.65.6:0");
    lease(&d);
    let writes = d.waker().writes();
    d.end_poll_lease();
    assert!(
        d.waker().writes() > writes,
        "the sleeping progress thread is woken"
    );
    // Not waiting an hour: the progress thread watches the socket again.
    p.send_to(b"armed", d.local_addr()).unwrap();
    assert!(wait_until(|| d.with(|e| e.s().inbox.len()) == 1));
    assert_eq!(d.counters().poll_receive_datagrams, 0);
    // No lease, nothing to wake: no doorbell.
    let writes = d.waker().writes();
    d.end_poll_lease();
    assert_eq!(d.waker().writes(), writes);
}

/// A post to a busy queue reads no clock: it asks whether the lease holds
/// at the time of the lane's last poll (`Driver::post`). Long after that
/// poll, with the lease over and the progress thread asleep on the socket,
/// the stale time still sees the lease, yet the work is not stranded: the
/// doorbell wakes the progress thread, which sends it.
#[test]
fn a_busy_post_long_after_the_last_poll_still_wakes_the_sender() {
    let d = start(
        Fake::default(),
        "127.0.65.9:0",
        Duration::from_millis(2),
        true,
    );
    let p = peer("127.0.65.10:0");
    lease(&d);
    // The lease ends; the progress thread sleeps watching the socket again.
    let watching = |d: &Driver<Fake>| {
        let c = d.counters();
        c.sleeps - c.aside_sleeps
    };
    let before = watching(&d);
    std::thread::sleep(Duration::from_millis(20));
    assert!(wait_until(|| watching(&d) > before));
    let to = p.local_addr().unwrap();
    d.with(|e| e.s().outbox.push_back((to, b"busy".to_vec())));
    let writes = d.waker().writes();
    let no_direct = |_: &Fake, _: u64, _: &mut dyn sv_io::Room| None::<Result<usize, ()>>;
    // The WR waits on a send ring that was not idle.
    d.post(false, 7, no_direct, || Ok(Some(false))).unwrap();
    assert_eq!(d.waker().writes(), writes + 1, "the doorbell rang");
    let mut buf = [0u8; 8];
    let (n, from) = p.recv_from(&mut buf).unwrap();
    assert_eq!((&buf[..n], from), (&b"busy"[..], d.local_addr()));
    assert_eq!(
        d.counters().caller_datagrams,
        0,
        "the progress thread sent it"
    );
}

#[test]
fn the_polling_thread_sends_the_reply_itself() {
    let d = start(Fake::echo(), "127.0.65.7:0", Duration::from_secs(10), true);
    let p = peer("127.0.65.8:0");
    lease(&d);
    let writes = d.waker().writes();
    p.send_to(b"ping", d.local_addr()).unwrap();
    assert!(poll_until(&d, 1));
    let mut buf = [0u8; 8];
    let (n, from) = p.recv_from(&mut buf).unwrap();
    assert_eq!((&buf[..n], from), (&b"ping"[..], d.local_addr()));
    let c = d.counters();
    assert_eq!((c.poll_receive_datagrams, c.caller_datagrams), (1, 1));
    assert_eq!(d.waker().writes(), writes, "no doorbell: no hand-off");
}

#[test]
fn turned_off_no_lease_and_no_aside_sleep() {
    let opts = DriverOptions {
        poll_receive: false,
        ..DriverOptions::default()
    };
    let d = Driver::start(Fake::default(), "127.0.65.9:0".parse().unwrap(), opts).unwrap();
    assert!(wait_until(|| d.counters().sleeps > 0));
    assert_eq!(d.drive_receive(), 0);
    d.doorbell();
    let sleeps = d.counters().sleeps;
    assert!(wait_until(|| d.counters().sleeps > sleeps));
    assert_eq!(d.counters().aside_sleeps, 0);
}

/// A datagram that waited for the lease's end (the thread stopped polling
/// before its data came) halves the lease; polls that keep renewing it
/// double it back, up to the configured length.
#[test]
fn the_lease_halves_when_data_waits_for_its_end_and_grows_back() {
    let d = start(
        Fake::default(),
        "127.0.65.11:0",
        Duration::from_millis(8),
        false,
    );
    let p = peer("127.0.65.12:0");
    let mut sent = 0;
    for round in 1..=3u64 {
        // A loaded machine may keep this thread off its core past the
        // lease's end before the datagram goes (the lease is 2 ms by round
        // 3): then nothing waited for the end, no halving is due, and the
        // round is tried again, five times at most.
        let mut halved = false;
        for _ in 0..5 {
            lease(&d);
            let shrinks = d.counters().lease_shrinks;
            // Stop polling; the datagram waits until the lease ends.
            p.send_to(&[round as u8], d.local_addr()).unwrap();
            sent += 1;
            assert!(wait_until(|| d.with(|e| e.s().inbox.len()) == sent));
            // At least one halving (a loaded machine may end a lease of
            // the polls in `lease` late enough to count one more).
            let start = Instant::now();
            while d.counters().lease_shrinks == shrinks && start.elapsed() < Duration::from_secs(2)
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            halved = d.counters().lease_shrinks > shrinks;
            if halved {
                break;
            }
        }
        assert!(
            halved,
            "round {round}: the lease never halved in five tries ({} shrinks)",
            d.counters().lease_shrinks
        );
    }
    // Polling on, across several lease ends: it grows back (no new shrink).
    let start = Instant::now();
    let shrinks = d.counters().lease_shrinks;
    let aside = d.counters().aside_sleeps;
    while d.counters().aside_sleeps < aside + 8 && start.elapsed() < DEADLINE {
        d.drive_receive();
        std::thread::yield_now();
    }
    assert_eq!(d.counters().lease_shrinks, shrinks);
}

/// Two drivers on one address as two processes would hold it (a slot each)
/// with the same-host path on, `a` sending to `b`'s slot.
fn same_host_pair(ip: &str) -> (Driver<Fake>, Driver<Fake>, std::net::SocketAddr, Vec<u8>) {
    use std::sync::Arc;
    use sv_io::share::{qpn_range, Slot};
    let ip: std::net::IpAddr = ip.parse().unwrap();
    let start = |slot: Slot| {
        let opts = DriverOptions {
            poll_receive: true,
            poll_lease: Duration::from_secs(30),
            shm: true,
            share: Some(Arc::new(slot)),
            ..DriverOptions::default()
        };
        Driver::start(Fake::default(), std::net::SocketAddr::new(ip, 4791), opts).unwrap()
    };
    let a = start(Slot::claim(ip).unwrap());
    let slot_b = Slot::claim(ip).unwrap();
    let qpn = qpn_range(slot_b.index()).0 + 5;
    let b = start(slot_b);
    // A BTH-shaped datagram whose destination QP is in b's slot.
    let mut d = vec![7u8; 64];
    d[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
    (a, b, std::net::SocketAddr::new(ip, 4791), d)
}

/// Sends `d` from `a` to `b` until `b` accepts `a`'s ring (until then
/// datagrams go by UDP and the shared address), waits until `b` has them
/// all, then takes `b`'s lease. How many were sent.
fn ring_up_and_leased(
    a: &Driver<Fake>,
    b: &Driver<Fake>,
    to: std::net::SocketAddr,
    d: &[u8],
) -> usize {
    let mut sent = 0;
    assert!(wait_until(|| {
        a.with(|e| e.s().outbox.push_back((to, d.to_vec())));
        a.doorbell();
        sent += 1;
        b.drive_receive();
        a.counters().shm_datagrams_sent > 0
    }));
    assert!(wait_until(|| {
        b.drive_receive();
        b.with(|e| e.s().inbox.len()) == sent
    }));
    lease(b);
    sent
}

/// With the same-host path, a thread that polls a CQ reads the rings as it
/// reads the socket: once the ring is up, a datagram from another process of
/// the host reaches the engine through the poll, while the progress thread
/// sleeps aside (its lease of 30 s would keep it from reading it in time).
#[test]
fn a_polling_thread_reads_the_same_host_rings() {
    let (a, b, to, d) = same_host_pair("127.0.92.1");
    let sent = ring_up_and_leased(&a, &b, to, &d);
    let before = b.counters();
    a.with(|e| e.s().outbox.push_back((to, d.clone())));
    a.doorbell();
    assert!(poll_until(&b, sent + 1), "the poll read the ring");
    let after = b.counters();
    assert!(after.shm_datagrams_received > before.shm_datagrams_received);
    assert!(after.poll_receive_datagrams > before.poll_receive_datagrams);
    assert_eq!(after.recv_calls, before.recv_calls, "not from the socket");
}

/// While the rings deliver, a polling thread reads an empty socket only
/// every few polls (a system call each), and a datagram that comes by the
/// socket meanwhile still reaches the engine through a poll.
#[test]
fn while_the_rings_deliver_an_empty_socket_is_read_less_often() {
    let (a, b, to, d) = same_host_pair("127.0.93.1");
    let mut sent = ring_up_and_leased(&a, &b, to, &d);
    // Ring datagrams through the poll, then polls that find nothing: some
    // of them leave the socket unread (bounded: a poll that takes longer
    // than the pace's period reads it every time).
    let before = b.counters();
    let start = Instant::now();
    while b.counters().poll_socket_skips == before.poll_socket_skips {
        assert!(
            start.elapsed() < DEADLINE,
            "no poll skipped the empty socket"
        );
        a.with(|e| e.s().outbox.push_back((to, d.clone())));
        a.doorbell();
        sent += 1;
        assert!(poll_until(&b, sent), "the poll read the ring");
        for _ in 0..64 {
            b.drive_receive();
        }
    }
    // A datagram by the socket still arrives through the polls.
    let udp = peer("127.0.93.9:0");
    udp.send_to(&d, to).unwrap();
    let calls = b.counters().poll_receive_calls;
    assert!(poll_until(&b, sent + 1), "the socket's datagram arrived");
    assert!(
        b.counters().poll_receive_calls > calls,
        "through a poll's read"
    );
}

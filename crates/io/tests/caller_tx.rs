//! The posting thread's own transmit (`Driver::posted`): an idle queue's
//! datagrams leave from the calling thread without a doorbell write; a busy
//! engine, a queue that was not idle or an earlier deadline fall back to the
//! progress thread. Only loopback addresses; every wait bounded.
mod common;

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{mpsc, Arc};

use common::{wait_until, Fake, DEADLINE};
use sv_io::{Driver, DriverOptions};

/// A driver with the caller's transmit on (it is off by default).
fn start(engine: Fake, addr: &str) -> Driver<Fake> {
    let opts = DriverOptions {
        caller_tx: true,
        ..DriverOptions::default()
    };
    Driver::start(engine, addr.parse().unwrap(), opts).unwrap()
}

fn peer(addr: &str) -> UdpSocket {
    let s = UdpSocket::bind(addr).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    s
}

/// Waits until the progress thread sleeps (its first passes are done).
fn asleep(d: &Driver<Fake>) {
    assert!(wait_until(|| d.counters().sleeps > 0));
}

#[test]
fn an_idle_post_leaves_from_the_calling_thread_without_the_doorbell() {
    let d = start(Fake::default(), "127.0.61.1:0");
    let p = peer("127.0.61.2:0");
    asleep(&d);
    let writes = d.waker().writes();
    let to = p.local_addr().unwrap();
    d.with(|e| {
        e.s().outbox.push_back((to, b"one".to_vec()));
        e.s().outbox.push_back((to, b"two".to_vec()));
    });
    assert_eq!(d.posted(true), 2, "both sent by this thread");
    assert_eq!(d.waker().writes(), writes, "no doorbell write");
    let mut buf = [0u8; 16];
    for want in [&b"one"[..], b"two"] {
        let (n, from) = p.recv_from(&mut buf).unwrap();
        assert_eq!((&buf[..n], from), (want, d.local_addr()));
    }
    let c = d.counters();
    assert_eq!(
        (c.caller_datagrams, c.datagrams_sent, c.bytes_sent),
        (2, 2, 6)
    );
    // The loopback shortcut from the calling thread: straight into the engine.
    let me = d.local_addr();
    d.with(|e| e.s().outbox.push_back((me, b"self".to_vec())));
    assert_eq!(d.posted(true), 1);
    d.with(|e| {
        assert_eq!(
            e.s().inbox.last().map(|r| (r.from, &r.payload[..])),
            Some((me, &b"self"[..]))
        )
    });
    assert_eq!(d.counters().loopback_datagrams, 1);
    assert_eq!(d.waker().writes(), writes, "still no doorbell write");
}

#[test]
fn a_post_to_a_queue_that_was_not_idle_rings_the_doorbell() {
    let d = start(Fake::default(), "127.0.61.3:0");
    let p = peer("127.0.61.4:0");
    asleep(&d);
    let writes = d.waker().writes();
    let to = p.local_addr().unwrap();
    d.with(|e| e.s().outbox.push_back((to, b"x".to_vec())));
    assert_eq!(d.posted(false), 0);
    assert_eq!(d.waker().writes(), writes + 1);
    let mut buf = [0u8; 4];
    assert_eq!(p.recv(&mut buf).unwrap(), 1, "the progress thread sent it");
    assert_eq!(d.counters().caller_datagrams, 0);
}

/// The calling thread never waits for the engine lock: with the lock held by
/// another thread (until this one has returned), it rings the doorbell and
/// the progress thread sends the datagram once the lock is free.
#[test]
fn a_post_while_the_engine_is_held_never_waits_for_it() {
    let d = Arc::new(start(Fake::default(), "127.0.61.5:0"));
    let p = peer("127.0.61.6:0");
    asleep(&d);
    let to = p.local_addr().unwrap();
    let (held_tx, held_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let released = Arc::new(AtomicBool::new(false));
    let holder = {
        let (d, released) = (d.clone(), released.clone());
        std::thread::spawn(move || {
            d.with(|e| {
                e.s().outbox.push_back((to, b"held".to_vec()));
                held_tx.send(()).unwrap();
                // Until the poster returned (bounded).
                let _ = done_rx.recv_timeout(DEADLINE);
                released.store(true, SeqCst);
            })
        })
    };
    held_rx.recv_timeout(DEADLINE).unwrap();
    let writes = d.waker().writes();
    assert_eq!(d.posted(true), 0, "nothing sent from here");
    assert!(!released.load(SeqCst), "returned while the lock was held");
    assert_eq!(d.waker().writes(), writes + 1, "the doorbell instead");
    done_tx.send(()).unwrap();
    holder.join().unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(p.recv(&mut buf).unwrap(), 4, "the progress thread sent it");
}

/// A send that arms an engine deadline earlier than the sleeping progress
/// thread's own wake-up rings the doorbell, so the timer fires in time.
#[test]
fn an_earlier_deadline_wakes_the_progress_thread() {
    let d = start(Fake::default(), "127.0.61.7:0");
    let p = peer("127.0.61.8:0");
    asleep(&d);
    let to = p.local_addr().unwrap();
    let writes = d.waker().writes();
    let at = d.now() + 2_000_000;
    d.with(|e| {
        e.s().outbox.push_back((to, b"t".to_vec()));
        e.s().timers.insert(at);
    });
    assert_eq!(d.posted(true), 1);
    assert_eq!(d.waker().writes(), writes + 1, "woken for the deadline");
    assert!(wait_until(|| d.with(|e| !e.s().fired.is_empty())));
    d.with(|e| assert!(e.s().fired[0].1 >= at));
}

#[test]
fn caller_tx_off_always_rings() {
    let opts = DriverOptions {
        caller_tx: false,
        ..DriverOptions::default()
    };
    let d = Driver::start(Fake::default(), "127.0.61.9:0".parse().unwrap(), opts).unwrap();
    let p = peer("127.0.61.10:0");
    asleep(&d);
    let to = p.local_addr().unwrap();
    let writes = d.waker().writes();
    d.with(|e| e.s().outbox.push_back((to, b"o".to_vec())));
    assert_eq!(d.posted(true), 0);
    assert_eq!(d.waker().writes(), writes + 1);
    let mut buf = [0u8; 4];
    assert_eq!(p.recv(&mut buf).unwrap(), 1);
}

/// Posting threads and the progress thread sending at once: the datagrams
/// still leave in the engine's order (a UC message whose packets are
/// reordered is lost: the hang of `ibv_uc_pingpong` with this on). Another
/// thread keeps ringing the doorbell so the progress thread transmits too.
#[test]
fn datagrams_leave_in_the_engines_order_whoever_sends_them() {
    let d = Arc::new(start(Fake::default(), "127.0.61.15:0"));
    let p = peer("127.0.61.16:0");
    asleep(&d);
    let to = p.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let ringer = {
        let (d, stop) = (d.clone(), stop.clone());
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            while !stop.load(SeqCst) && start.elapsed() < DEADLINE {
                d.doorbell();
                std::thread::yield_now();
            }
        })
    };
    const ROUNDS: u32 = 500;
    const PER: u32 = 4;
    // One message of PER datagrams at a time (the peer's buffer holds them).
    let mut seq = 0u32;
    let mut by_caller = 0;
    let mut got = Vec::new();
    let mut buf = [0u8; 8];
    for _ in 0..ROUNDS {
        d.with(|e| {
            for _ in 0..PER {
                e.s().outbox.push_back((to, seq.to_be_bytes().to_vec()));
                seq += 1;
            }
        });
        by_caller += d.posted(true);
        for _ in 0..PER {
            match p.recv(&mut buf) {
                Ok(4) => got.push(u32::from_be_bytes(buf[..4].try_into().unwrap())),
                other => panic!("datagram {} of {seq}: {other:?}", got.len()),
            }
        }
    }
    stop.store(true, SeqCst);
    ringer.join().unwrap();
    assert_eq!(got.len(), (ROUNDS * PER) as usize, "all arrived");
    let first_out_of_order = got.iter().enumerate().find(|(i, &s)| s != *i as u32);
    assert_eq!(
        first_out_of_order, None,
        "in order ({by_caller} sent by the caller)"
    );
}

/// A post that arms a deadline after the sleeping progress thread's own
/// wake-up (the usual ACK timeout, 67 ms, against its sleeps of 25 ms at
/// most while this is on) needs no doorbell: the timer still fires, not
/// before its time.
#[test]
fn a_later_deadline_needs_no_doorbell() {
    let d = start(Fake::default(), "127.0.61.17:0");
    let p = peer("127.0.61.18:0");
    asleep(&d);
    let to = p.local_addr().unwrap();
    let writes = d.waker().writes();
    let at = d.now() + 67_000_000;
    d.with(|e| {
        e.s().outbox.push_back((to, b"t".to_vec()));
        e.s().timers.insert(at);
    });
    assert_eq!(d.posted(true), 1);
    assert_eq!(d.waker().writes(), writes, "no doorbell write");
    assert!(wait_until(|| d.with(|e| !e.s().fired.is_empty())));
    d.with(|e| assert!(e.s().fired[0].1 >= at));
}

//! UDP GSO on send and GRO on receive through two drivers over loopback: a long
//! run of equal-size datagrams (one short last, as the packets of a large RDMA
//! WRITE) leaves in far fewer send calls than datagrams and arrives whole, in
//! order, one datagram per engine call; with both turned off the same data arrives.

mod common;

use common::{wait_until, Fake};
use sv_io::{CounterSnapshot, Driver, DriverOptions};

const N: usize = 300;

fn message() -> Vec<Vec<u8>> {
    (0..N)
        .map(|i| {
            let len = if i + 1 == N { 1000 } else { 4096 };
            let mut d = vec![(i % 251) as u8; len];
            d[..4].copy_from_slice(&(i as u32).to_be_bytes());
            d
        })
        .collect()
}

/// Sends `message()` from `tx` to `rx` (both with `opts`); the counters of both.
fn run(tx: &str, rx: &str, opts: &DriverOptions) -> (CounterSnapshot, CounterSnapshot) {
    let rx = Driver::start(Fake::default(), rx.parse().unwrap(), opts.clone()).unwrap();
    let to = rx.local_addr();
    let mut engine = Fake::default();
    engine
        .s()
        .outbox
        .extend(message().into_iter().map(|d| (to, d)));
    let tx = Driver::start(engine, tx.parse().unwrap(), opts.clone()).unwrap();
    assert!(wait_until(|| rx.counters().datagrams_received == N as u64));
    rx.with(|e| {
        let want = message();
        assert_eq!(e.s().inbox.len(), N);
        for (i, (r, w)) in e.s().inbox.iter().zip(&want).enumerate() {
            assert_eq!(&r.payload, w, "datagram {i}");
            assert_eq!((r.from, r.to), (tx.local_addr(), to));
        }
    });
    (tx.counters(), rx.counters())
}

#[test]
fn a_long_run_leaves_in_gso_sends_and_arrives_whole() {
    let (t, r) = run("127.0.3.141:0", "127.0.3.142:0", &DriverOptions::default());
    assert_eq!(
        (t.datagrams_sent, t.send_errors, t.gso_fallbacks),
        (N as u64, 0, 0)
    );
    assert!(t.gso_datagrams > 0, "{t:?}");
    // Without GSO: at least one call per 64 datagrams (5); with it, groups of 15
    // 4 KiB datagrams, up to 64 groups per call.
    assert!(
        t.send_calls * 20 < t.datagrams_sent,
        "{} send calls",
        t.send_calls
    );
    // GRO: the receiver read coalesced buffers and cut them apart.
    assert!(r.gro_datagrams > 0, "{r:?}");
    assert!(r.recv_calls < r.datagrams_received, "{r:?}");
    assert_eq!(r.recv_errors, 0);
}

#[test]
fn with_gso_and_gro_off_the_same_data_arrives_datagram_by_datagram() {
    let opts = DriverOptions {
        gso: false,
        gro: false,
        ..DriverOptions::default()
    };
    let (t, r) = run("127.0.3.143:0", "127.0.3.144:0", &opts);
    assert_eq!((t.datagrams_sent, t.gso_datagrams), (N as u64, 0));
    assert_eq!(r.gro_datagrams, 0);
    // sendmmsg still batches: at most 64 datagrams a call.
    assert!(t.send_calls * 64 >= t.datagrams_sent);
}

#[test]
fn the_environment_turns_gso_and_gro_off() {
    let mut o = DriverOptions::default();
    assert!(o.gso && o.gro);
    o.apply_env("d", |n| (n == DriverOptions::GSO_ENV).then(|| "0".into()))
        .unwrap();
    assert!(!o.gso && o.gro);
    let mut o = DriverOptions::default();
    o.apply_env("d", |n| (n == DriverOptions::GRO_ENV).then(|| "off".into()))
        .unwrap();
    assert!(o.gso && !o.gro);
    let mut o = DriverOptions::default();
    o.apply_env("d", |n| (n == DriverOptions::GSO_ENV).then(|| "1".into()))
        .unwrap();
    assert!(o.gso && o.gro);
}

//! Measures the driver on loopback (figures only; nothing here gates a test):
//! datagram ping-pong round-trip time between two drivers, one-way datagrams/s
//! into a driver, and the loopback shortcut rate; with a plain blocking UDP
//! ping-pong as baseline. `cargo run --release -p softverbs-io --example io_bench`
#[path = "../tests/common/mod.rs"]
mod common;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use common::{start, wait_until, Fake, FakeState};
use sv_io::{Driver, DriverOptions, Engine, Nanos, Notification, Transmit};

/// Sends `left` datagrams of `size` bytes to `to`, as fast as the driver takes them.
struct Blast {
    to: SocketAddr,
    left: AtomicU64,
    size: usize,
}

impl Engine for Blast {
    type Claims = ();
    fn handle_datagram(&self, _: Nanos, _: SocketAddr, _: SocketAddr, _: &[u8]) {}
    fn poll_transmit(&self, _: Nanos, buf: &mut [u8]) -> Option<Transmit> {
        self.left
            .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
            .ok()?;
        buf[..self.size].fill(0xab);
        Some(Transmit {
            to: self.to,
            len: self.size,
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
}

fn ping_pong(rounds: u64) -> Duration {
    let a = start(
        Fake::from(FakeState {
            echo_budget: rounds - 1,
            ..FakeState::default()
        }),
        "127.0.0.201:0",
    );
    let b = start(Fake::echo(), "127.0.0.202:0");
    let t = Instant::now();
    a.with(|e| e.s().outbox.push_back((b.local_addr(), vec![0; 64])));
    a.doorbell();
    assert!(wait_until(|| a.counters().datagrams_received == rounds));
    t.elapsed() / rounds as u32
}

fn baseline_udp(rounds: u32) -> Duration {
    let a = UdpSocket::bind("127.0.0.203:0").unwrap();
    let b = UdpSocket::bind("127.0.0.204:0").unwrap();
    let peer = b.local_addr().unwrap();
    for s in [&a, &b] {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    }
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        for _ in 0..rounds {
            let (n, from) = b.recv_from(&mut buf).unwrap();
            b.send_to(&buf[..n], from).unwrap();
        }
    });
    let mut buf = [0u8; 64];
    let t = Instant::now();
    for _ in 0..rounds {
        a.send_to(&[1; 64], peer).unwrap();
        a.recv_from(&mut buf).unwrap();
    }
    let rtt = t.elapsed() / rounds;
    echo.join().unwrap();
    rtt
}

/// `count` datagrams of `size` bytes from one driver to another (or to itself).
fn blast(count: u64, size: usize, to_self: bool) -> (f64, u64) {
    let opts = DriverOptions::default;
    let sink = Blast {
        to: "127.0.0.1:9".parse().unwrap(),
        left: 0.into(),
        size,
    };
    let sink = Driver::start(sink, "127.0.0.206:0".parse().unwrap(), opts()).unwrap();
    let src: SocketAddr = "127.0.0.207:0".parse().unwrap();
    let src = Driver::start(
        Blast {
            to: sink.local_addr(),
            left: 0.into(),
            size,
        },
        src,
        opts(),
    )
    .unwrap();
    let target = if to_self {
        src.local_addr()
    } else {
        sink.local_addr()
    };
    let t = Instant::now();
    src.with(|e| (e.to, *e.left.get_mut()) = (target, count));
    src.doorbell();
    let c = || src.counters();
    wait_until(|| c().datagrams_sent + c().loopback_datagrams + c().send_errors == count);
    let secs = t.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(50));
    let got = if to_self {
        c().loopback_datagrams
    } else {
        sink.counters().datagrams_received
    };
    (count as f64 / secs, got)
}

fn main() {
    let rounds = 20_000;
    println!(
        "driver ping-pong RTT (64 B, busy-poll 50 us): {:?}",
        ping_pong(rounds)
    );
    println!(
        "plain UDP blocking ping-pong RTT (64 B):      {:?}",
        baseline_udp(rounds as u32)
    );
    let n = 200_000;
    for size in [64, 1024, 4096] {
        let (rate, got) = blast(n, size, false);
        println!("one-way {size} B: {rate:.0} datagrams/s sent, sink received {got}/{n}");
    }
    let (rate, got) = blast(n, 1024, true);
    println!("loopback shortcut 1024 B: {rate:.0} datagrams/s, {got}/{n} delivered");
}

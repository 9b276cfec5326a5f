//! Fault injection and packet capture through real drivers (fake engines):
//! every fault kind seen by the receiving engine, determinism for a seed,
//! receive-side faults, the loopback shortcut, and the capture file's records.
mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use common::{wait_until, Fake};
use sv_io::{Driver, DriverOptions, FaultConfig};

fn opts(faults: &str, capture: Option<PathBuf>) -> DriverOptions {
    DriverOptions {
        faults: faults.parse().unwrap(),
        capture,
        ..DriverOptions::default()
    }
}

fn driver(addr: &str, o: DriverOptions) -> Driver<Fake> {
    Driver::start(Fake::default(), addr.parse().unwrap(), o).unwrap()
}

fn tmp(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    dir.join(format!("io-faults-{}-{name}.pcap", std::process::id()))
}

/// Queues `n` datagrams numbered 0..n (8-byte index + filler) from `a` to `to`.
fn send_numbered(a: &Driver<Fake>, to: SocketAddr, n: u64) {
    a.with(|e| {
        for i in 0..n {
            let mut p = i.to_be_bytes().to_vec();
            p.resize(64, 0xab);
            e.s().outbox.push_back((to, p));
        }
    });
    a.doorbell();
}

fn index(payload: &[u8]) -> u64 {
    u64::from_be_bytes(payload[..8].try_into().unwrap())
}

/// Sends `n` datagrams through faults and returns the indices B received, in order.
fn run_lossy(
    faults: &str,
    n: u64,
    a_addr: &str,
    b_addr: &str,
) -> (Vec<u64>, sv_io::CounterSnapshot) {
    let a = driver(a_addr, opts(faults, None));
    let b = driver(b_addr, DriverOptions::default());
    send_numbered(&a, b.local_addr(), n);
    let expected = |a: &Driver<Fake>| {
        let c = a.counters();
        n - c.fault_drops + c.fault_duplicates
    };
    // Everything leaves A (sent or dropped), then B has all that was sent.
    assert!(wait_until(
        || a.with(|e| e.s().outbox.is_empty()) && a.counters().datagrams_sent == expected(&a)
    ));
    assert!(wait_until(
        || b.with(|e| e.s().inbox.len() as u64) == expected(&a)
    ));
    let got = b.with(|e| e.s().inbox.iter().map(|r| index(&r.payload)).collect());
    (got, a.counters())
}

#[test]
fn loss_duplication_and_reordering_reach_the_peer() {
    let n = 3000;
    let (got, c) = run_lossy(
        "loss=0.1,dup=0.05,reorder=0.05,seed=11",
        n,
        "127.0.0.141:0",
        "127.0.0.142:0",
    );
    assert!(
        c.fault_drops > 0 && c.fault_duplicates > 0 && c.fault_reorders > 0,
        "{c:?}"
    );
    assert_eq!(c.fault_hold_overflows, 0);
    // Each index arrives 0, 1 or 2 times; the counts add up to the counters.
    let mut seen = vec![0u32; n as usize];
    for &i in &got {
        seen[i as usize] += 1;
    }
    let lost = seen.iter().filter(|&&k| k == 0).count() as u64;
    let doubled = seen.iter().filter(|&&k| k == 2).count() as u64;
    assert!(seen.iter().all(|&k| k <= 2));
    assert_eq!((lost, doubled), (c.fault_drops, c.fault_duplicates));
    // Reordering: some datagram arrives after a later-numbered one.
    let inversions = got.windows(2).filter(|w| w[1] < w[0]).count() as u64;
    assert!(inversions >= 1, "no reordering seen");
    // Rates near the configuration (5 standard deviations).
    let within =
        |k: u64, pop: f64, p: f64| (k as f64 - pop * p).abs() < 5.0 * (pop * p * (1.0 - p)).sqrt();
    assert!(within(c.fault_drops, n as f64, 0.1), "{c:?}");
    assert!(
        within(c.fault_duplicates, (n - c.fault_drops) as f64, 0.05),
        "{c:?}"
    );
}

#[test]
fn same_seed_loses_the_same_datagrams() {
    let lost = |got: &[u64], n: u64| {
        let mut seen = vec![false; n as usize];
        got.iter().for_each(|&i| seen[i as usize] = true);
        (0..n).filter(|&i| !seen[i as usize]).collect::<Vec<_>>()
    };
    let n = 1000;
    let (g1, _) = run_lossy("loss=0.2,seed=5", n, "127.0.0.143:0", "127.0.0.144:0");
    let (g2, _) = run_lossy("loss=0.2,seed=5", n, "127.0.0.143:0", "127.0.0.144:0");
    let (g3, _) = run_lossy("loss=0.2,seed=6", n, "127.0.0.143:0", "127.0.0.144:0");
    assert!(!lost(&g1, n).is_empty());
    assert_eq!(lost(&g1, n), lost(&g2, n));
    assert_ne!(lost(&g1, n), lost(&g3, n));
    // Loss alone keeps the order.
    assert!(g1.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn corruption_flips_exactly_one_bit_outside_byte_4() {
    let n = 200;
    let (a, b) = (
        driver("127.0.0.145:0", opts("corrupt=1,seed=2", None)),
        driver("127.0.0.146:0", DriverOptions::default()),
    );
    send_numbered(&a, b.local_addr(), n);
    assert!(wait_until(|| b.with(|e| e.s().inbox.len()) == n as usize));
    let mut original = [0u8; 64];
    b.with(|e| {
        for (i, r) in e.s().inbox.iter().enumerate() {
            original[..8].copy_from_slice(&(i as u64).to_be_bytes());
            original[8..].fill(0xab);
            let diff: Vec<usize> = (0..64).filter(|&k| r.payload[k] != original[k]).collect();
            assert_eq!(diff.len(), 1, "datagram {i}");
            assert_ne!(diff[0], 4);
            assert_eq!((r.payload[diff[0]] ^ original[diff[0]]).count_ones(), 1);
        }
    });
    assert_eq!(a.counters().fault_corruptions, n);
}

#[test]
fn delay_holds_loopback_datagrams_and_receive_faults_apply_to_them() {
    // Loopback shortcut: one driver, one clock, so the delay is measurable.
    let d = driver("127.0.0.147:0", opts("delay=20ms,dir=both", None));
    send_numbered(&d, d.local_addr(), 5);
    assert!(wait_until(|| d.with(|e| e.s().inbox.len()) == 5));
    d.with(|e| {
        let s = e.s();
        for (r, sent) in s.inbox.iter().zip(&s.sent_at) {
            // Delayed once leaving and once arriving.
            assert!(r.now >= sent + 40_000_000, "held only {} ns", r.now - sent);
        }
    });
    let c = d.counters();
    assert_eq!(
        (c.fault_delays, c.loopback_datagrams, c.datagrams_sent),
        (10, 5, 0)
    );
}

#[test]
fn receive_faults_drop_after_capture() {
    let path = tmp("rx");
    let a = driver("127.0.0.148:0", DriverOptions::default());
    let b = driver("127.0.0.149:0", opts("loss=1,dir=rx", Some(path.clone())));
    send_numbered(&a, b.local_addr(), 50);
    assert!(wait_until(|| b.counters().fault_drops == 50));
    assert_eq!(b.with(|e| e.s().inbox.len()), 0);
    assert_eq!(a.counters().fault_drops, 0);
    let (a_addr, b_addr) = (a.local_addr(), b.local_addr());
    drop(b);
    let records = read_capture(&path);
    assert_eq!(records.len(), 50);
    assert!(records
        .iter()
        .all(|(from, to, p)| *from == a_addr && *to == b_addr && p.len() == 64));
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn capture_records_what_was_sent_and_received() {
    let (pa, pb) = (tmp("a"), tmp("b"));
    let a = driver("127.0.0.150:0", opts("loss=0.5,seed=1", Some(pa.clone())));
    let mut ob = opts("", Some(pb.clone()));
    ob.busy_poll = Duration::ZERO;
    let b = Driver::start(Fake::echo(), "127.0.0.151:0".parse().unwrap(), ob).unwrap();
    send_numbered(&a, b.local_addr(), 100);
    let sent = || a.counters().datagrams_sent;
    // An empty outbox is not enough: the progress thread takes a batch out
    // before its faults decide, so wait until each of the 100 was decided.
    assert!(wait_until(|| {
        let c = a.counters();
        c.datagrams_sent + c.fault_drops == 100 && b.counters().datagrams_sent == c.datagrams_sent
    }));
    assert!(wait_until(|| a.with(|e| e.s().inbox.len() as u64) == sent()));
    // Readable while running (flushed when idle).
    assert!(wait_until(|| read_capture(&pb).len() as u64 == 2 * sent()));
    let (a_addr, b_addr, dropped) = (a.local_addr(), b.local_addr(), a.counters().fault_drops);
    let a_records = a.counters().pcap_records;
    drop(a);
    drop(b);
    let ra = read_capture(&pa);
    // A recorded what it really sent (not the dropped ones) and the echoes.
    assert_eq!(ra.len() as u64, 2 * (100 - dropped));
    assert_eq!(ra.len() as u64, a_records);
    let out: Vec<_> = ra.iter().filter(|(f, _, _)| *f == a_addr).collect();
    assert_eq!(out.len() as u64, 100 - dropped);
    assert!(out.iter().all(|(_, to, _)| *to == b_addr));
    assert!(ra
        .iter()
        .filter(|(f, _, _)| *f == b_addr)
        .all(|(_, to, _)| *to == a_addr));
    std::fs::remove_file(&pa).unwrap();
    std::fs::remove_file(&pb).unwrap();
}

#[test]
fn a_capture_file_is_one_drivers() {
    let path = tmp("shared");
    let _a = driver("127.0.0.152:0", opts("", Some(path.clone())));
    let o = opts("", Some(path.clone()));
    let e = Driver::start(Fake::default(), "127.0.0.153:0".parse().unwrap(), o).unwrap_err();
    assert!(e.to_string().contains("%d"), "{e}");
    let o = opts("", Some(PathBuf::from("/nonexistent-dir/x.pcap")));
    let e = Driver::start(Fake::default(), "127.0.0.153:0".parse().unwrap(), o).unwrap_err();
    assert!(e.to_string().contains("/nonexistent-dir/x.pcap"), "{e}");
    assert!("loss=0.1,bogus=1".parse::<FaultConfig>().is_err());
}

/// (from, to, UDP payload) of every record.
fn read_capture(path: &std::path::Path) -> Vec<(SocketAddr, SocketAddr, Vec<u8>)> {
    let file = std::fs::read(path).unwrap_or_default();
    let Ok(reader) = wire::pcap::PcapReader::new(&file) else {
        return Vec::new();
    };
    reader
        .map_while(Result::ok)
        .map(|r| {
            let (encap, payload) = wire::encap::parse_frame(r.data).unwrap();
            let wire::IpInfo::V4(ip) = encap.ip else {
                panic!("IPv4 expected")
            };
            let from = SocketAddr::new(ip.src.into(), encap.src_port);
            let to = SocketAddr::new(ip.dst.into(), encap.dst_port);
            (from, to, payload.to_vec())
        })
        .collect()
}

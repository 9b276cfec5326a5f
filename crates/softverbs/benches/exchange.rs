//! The whole stack's cost of one message exchange, no second thread: two
//! devices of this process, an RC QP on each, and one thread that plays
//! both ends of an RDMA WRITE ping-pong as `ib_write_lat` does (each end
//! writes 8 bytes into the other's memory, signals every 32nd WRITE, and
//! spins on its own memory for the answer, polling both CQs meanwhile).
//! What one exchange (two WRITEs, two ACKs, their posts, their placement
//! and the polls that carry them) costs above the engine
//! (`proto/benches/engine.rs`): the C ABI aside, everything a latency
//! round trip runs, but on one core, with no waiting for a peer.
//!
//! Run: `cargo bench -p softverbs --bench exchange` (ns per exchange, on
//! the same-host rings and then over UDP; `EXCHANGE_PATH=rings|udp` for
//! one, `EXCHANGE_N` exchanges, 200 000 by default). A post never waits
//! here (`SOFTVERBS_POST_WAIT_US=0`: its answer needs this thread).
//!
//! The times move with the machine's load (spec/performance.md §20);
//! compare builds alternated, several runs each. Under valgrind the
//! progress threads, not this thread, do the work (valgrind runs one thread
//! at a time and a spinning thread keeps it, `--fair-sched=yes` is needed
//! at all), so instruction counts from there describe another path.
//! `SOFTVERBS_LOG=debug` prints the library's log.

#[path = "../tests/pair/mod.rs"]
mod pair;

use pair::*;
use softverbs::*;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// How long any one exchange may take before the program gives up.
const BOUND: Duration = Duration::from_secs(10);

static SPINS: AtomicU64 = AtomicU64::new(0);

/// `me` writes `round` into `peer`'s memory; then this thread polls both
/// ends' send CQs until `peer` holds it.
fn write(qp: &QueuePair<Rc>, me: &Side, peer: &Side, round: u64) {
    me.mr.write(0, &round.to_le_bytes());
    let flags = if round.is_multiple_of(32) {
        SIG
    } else {
        SendFlags::default()
    };
    let sg = [me.mr.sge(0, 8)];
    let target = WrTarget::Rdma(peer.mr.remote(8));
    qp.post_send(&send_wr(round, WrOpcode::RdmaWrite, &sg, target, flags))
        .expect("post");
    let (deadline, mut word, mut wc) = (Instant::now() + BOUND, [0u8; 8], Vec::new());
    loop {
        peer.mr.read(8, &mut word);
        if u64::from_le_bytes(word) == round {
            break;
        }
        SPINS.fetch_add(1, Relaxed);
        wc.clear();
        me.scq.poll(4, &mut wc);
        peer.scq.poll(4, &mut wc);
        assert!(
            wc.iter().all(|w| w.status == WcStatus::Success),
            "a WRITE failed: {wc:?}"
        );
        assert!(
            Instant::now() < deadline,
            "round {round} never arrived\nwriter: {:?}\n{:?}\nreader: {:?}",
            me.ctx.io_counters(),
            qp.counters(),
            peer.ctx.io_counters(),
        );
    }
}

/// `n` exchanges from `first` on.
#[inline(never)]
fn exchange(qa: &QueuePair<Rc>, qb: &QueuePair<Rc>, a: &Side, b: &Side, first: u64, n: u64) {
    for round in first..first + n {
        write(qa, a, b, round);
        write(qb, b, a, round);
    }
}

fn run(path: &str, n: u64) {
    let same_host = path == "rings";
    let a = side_on_path("exchange-a", "127.7.31.1", same_host, 4096);
    let b = side_on_path("exchange-b", "127.7.31.2", same_host, 4096);
    let (qa, qb) = rc_pair(&a, &b);
    // Warm-up: the same-host path opens, the caches fill.
    exchange(&qa, &qb, &a, &b, 1, 1000);
    SPINS.store(0, Relaxed);
    let t = Instant::now();
    exchange(&qa, &qb, &a, &b, 1001, n);
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    let spins = SPINS.load(Relaxed) as f64 / n as f64;
    println!("{path}: {n} exchanges, {ns:.0} ns each, {spins:.2} spins each");
    black_box((qa, qb));
}

fn main() {
    if let Ok(level) = std::env::var("SOFTVERBS_LOG") {
        let level = level
            .parse()
            .unwrap_or(tracing_subscriber::filter::LevelFilter::DEBUG);
        tracing_subscriber::fmt()
            .with_max_level(level)
            .with_writer(std::io::stderr)
            .init();
    }
    // Read when the devices open, below.
    std::env::set_var("SOFTVERBS_POST_WAIT_US", "0");
    let n = std::env::var("EXCHANGE_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let paths = match std::env::var("EXCHANGE_PATH") {
        Ok(p) => vec![p],
        Err(_) => vec!["rings".to_string(), "udp".to_string()],
    };
    for p in paths {
        run(&p, n);
    }
}

//! The simulation scenarios CI runs: a fixed list of seeds of every scenario,
//! plus a few fresh seeds per run (printed, so a failure can be replayed with
//! `cargo run -p softverbs-sim --bin sim -- --seed S --scenario NAME`).

use sim::{run, scenario, special, Summary};

/// Seeds every run checks (found passing; a failure is a regression).
const FIXED: [u64; 12] = [1, 2, 3, 4, 5, 6, 7, 8, 42, 1234, 99_991, 0xdead_beef];

/// Fresh seeds per scenario and run.
const FRESH: u64 = 3;

fn fresh_seeds() -> Vec<u64> {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(7, |d| d.as_nanos() as u64);
    let mut r = sim::rng::Rng::new(t);
    (0..FRESH).map(|_| r.next_u64() % 1_000_000_000).collect()
}

fn seeds() -> Vec<u64> {
    let mut v = FIXED.to_vec();
    let fresh = fresh_seeds();
    println!("fresh seeds this run: {fresh:?}");
    v.extend(fresh);
    v
}

fn each(name: &str, check: impl Fn(u64, &Summary)) {
    for seed in seeds() {
        let s = run(name, seed);
        println!("{}", sim::summary_line(name, seed, &s));
        check(seed, &s);
    }
}

/// Everything the random scenarios have in common: all WRs of the workload
/// completed (the run panics otherwise), and a lossy link made the requesters
/// retransmit.
fn completed_all(seed: u64, s: &Summary) {
    completed_every_wr(seed, s);
    // Memory windows were bound, rotated and used (the mix has them).
    assert!(
        s.window_wrs > 0 && s.window_ops > 0,
        "seed {seed}: {} WRs through windows, {} binds/invalidations",
        s.window_wrs,
        s.window_ops
    );
}

/// Three devices, one QP pair per device pair, each QP posts its WRs.
fn completed_every_wr(seed: u64, s: &Summary) {
    let cfg = scenario::config("clean").expect("clean");
    assert_eq!(s.wrs, 6 * cfg.wrs_per_qp, "seed {seed}");
}

#[test]
fn clean_network_no_retransmission_no_drop() {
    each("clean", |seed, s| {
        completed_all(seed, s);
        let q = &s.dev.qps;
        assert_eq!(
            (
                q.retransmitted_packets,
                q.retransmit_rounds,
                q.timeouts,
                q.duplicates,
                q.dropped
            ),
            (0, 0, 0, 0, 0),
            "seed {seed}: {q:?}"
        );
        assert_eq!(
            q.rnr_naks_sent + q.seq_naks_sent + q.stale_responses,
            0,
            "seed {seed}"
        );
        assert_eq!(
            s.dev.drop_icrc + s.dev.drop_malformed + s.dev.drop_not_accepted,
            0
        );
        assert_eq!(s.net.sent, s.dev.packets_received, "every datagram arrived");
    });
}

#[test]
fn one_percent_loss() {
    each("loss1", |seed, s| {
        completed_all(seed, s);
        assert!(
            s.net.lost > 0 && s.dev.qps.retransmitted_packets > 0,
            "seed {seed}"
        );
    });
}

#[test]
fn five_percent_loss() {
    each("loss5", |seed, s| {
        completed_all(seed, s);
        let q = &s.dev.qps;
        assert!(
            q.retransmitted_packets > 0 && q.retransmit_rounds > 0,
            "seed {seed}: {q:?}"
        );
        // A NAK can itself be lost: never more received than sent.
        assert!(
            q.seq_naks_received > 0 && q.seq_naks_received <= q.seq_naks_sent,
            "seed {seed}"
        );
    });
}

#[test]
fn twenty_percent_loss() {
    each("loss20", |seed, s| {
        completed_all(seed, s);
        let q = &s.dev.qps;
        assert!(q.timeouts > 0 && q.duplicates > 0, "seed {seed}: {q:?}");
        // The responder answered duplicates without executing them again: the
        // memory checks passed; here, they were seen.
        assert!(q.dup_acked + q.dup_reads_answered + q.dup_atomics_answered > 0);
    });
}

#[test]
fn duplication_and_reordering() {
    each("dupreorder", |seed, s| {
        completed_all(seed, s);
        assert!(s.net.duplicated > 0 && s.net.reordered > 0, "seed {seed}");
        assert!(s.dev.qps.duplicates > 0, "seed {seed}");
    });
}

#[test]
fn corruption_is_caught_by_the_icrc() {
    each("corrupt", |seed, s| {
        completed_all(seed, s);
        assert!(s.net.corrupted > 0, "seed {seed}");
        // The run checked: drop_icrc + drop_malformed covers every corruption.
        assert!(s.dev.drop_icrc > 0, "seed {seed}");
    });
}

#[test]
fn a_partition_heals() {
    each("partition", |seed, s| {
        completed_all(seed, s);
        assert!(
            s.net.partitioned > 0 && s.dev.qps.timeouts > 0,
            "seed {seed}"
        );
    });
}

#[test]
fn everything_at_once() {
    each("mixed", completed_all);
}

/// Heavy faults, one READ/atomic in flight at a time, late receives.
#[test]
fn stress() {
    each("stress", |seed, s| {
        completed_all(seed, s);
        let q = &s.dev.qps;
        assert!(
            q.rnr_naks_received > 0 && q.implied_naks + q.timeouts > 0,
            "seed {seed}: {q:?}"
        );
    });
}

/// A dead link ends in RETRY_EXC_ERR after exactly retry_cnt retransmissions,
/// at t0 + (retry_cnt + 1) × 4.096 µs × 2^timeout; the rest is flushed.
#[test]
fn dead_link_for_every_retry_cnt() {
    for n in 0..8 {
        each(&format!("deadlink{n}"), |seed, s| {
            assert_eq!(s.dev.qps.timeouts, n + 1, "seed {seed}");
        });
    }
}

/// RNR with rnr_retry 0..=6 ends in RNR_RETRY_EXC_ERR after exactly rnr_retry
/// RNR retries spaced by the min_rnr_timer table; 7 retries until the
/// receives come.
#[test]
fn rnr_for_every_rnr_retry() {
    for n in 0..8u64 {
        each(&format!("rnr{n}"), |seed, s| {
            if n < 7 {
                assert_eq!(s.dev.qps.rnr_naks_received, n + 1, "seed {seed}");
            } else {
                assert!(s.dev.qps.rnr_naks_received >= 24, "seed {seed}");
                assert!(s.recvs > 0);
            }
        });
    }
}

#[test]
fn every_scenario_name_runs_and_replays_identically() {
    for name in sim::all_names() {
        let (a, b) = (run(&name, 77), run(&name, 77));
        assert_eq!(
            sim::summary_line(&name, 77, &a),
            sim::summary_line(&name, 77, &b),
            "same seed, same run"
        );
    }
    assert_eq!(special::names().len(), 16);
}

#[test]
#[should_panic(expected = "seed=5")]
fn a_failure_names_its_seed() {
    // An impossible expectation: the panic message must carry the seed.
    let w = sim::World::new(scenario::config("clean").expect("clean"), 5);
    sim::fail!(w, "deliberate");
}

/// XRC (spec/xrc.md) under every kind of fault: XRC_SEND QPs reach XRC_RECV
/// QPs and the XRC SRQ each WR names, with every RC operation; every WR
/// completes, every message lands in its receive, memory equals the model,
/// and every datagram of the run is on the XRC transport.
#[test]
fn xrc_under_faults() {
    // XRC_SEND offers no windows (spec/xrc.md): every WR completed.
    each("xrc", completed_every_wr);
    for seed in [1, 77] {
        let cfg = scenario::config("xrc").expect("xrc");
        let mut w = sim::World::new(cfg, seed);
        let s = w.run();
        assert!(s.recvs > 0, "seed {seed}: messages went to the SRQs");
        let not_xrc: Vec<_> = w.tx_log.iter().filter(|t| t.2 >> 5 != 5).collect();
        assert!(
            !w.tx_log.is_empty() && not_xrc.is_empty(),
            "seed {seed}: {not_xrc:?}"
        );
    }
}

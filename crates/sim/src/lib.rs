//! Deterministic simulation of softverbs devices.
//!
//! Several [`proto::Engine`]s run on a virtual clock and talk over a simulated
//! network whose links lose, duplicate, reorder, delay and corrupt datagrams
//! and can be partitioned, all decided by one seeded RNG. A random workload of
//! RC operations runs through a fault phase and then a heal phase that must
//! reach quiescence, while invariant checkers watch:
//!
//! - every posted WR completes exactly once (signaled ones with a completion,
//!   unsignaled ones implied by a later completion, errors always), send
//!   completions in posting order per QP;
//! - every received message lands in the right receive, byte for byte;
//! - the responders' memory equals a shadow model, READs return model bytes,
//!   COMPARE_SWAPs return model values, FETCH_ADDs are linearizable,
//!   ATOMIC_WRITEs land whole;
//! - memory windows: every access through a window's rkey succeeds while the
//!   model has it bound, keys rotate by LOCAL_INV + BIND_MW and by the peer's
//!   SEND_WITH_INV (the receive reports the rkey), and at quiescence each
//!   window is bound with the model's rkey or unbound;
//! - no QP takes more than `retry_cnt` + 1 ACK timeouts in a row, and no ACK
//!   timeout fires earlier than 4.096 µs × 2^timeout after progress;
//! - corrupted datagrams are dropped by the ICRC check.
//!
//! The engines are driven as the drivers drive them, drawn per round from a
//! stream of the seed of its own: a datagram per call, or a driver's
//! batches (a QP's packets by bursts, `Engine::poll_transmit_burst`, and a
//! run of datagrams between two devices taken as one socket read,
//! `Engine::handle_batch`).
//!
//! No threads, no real clock, no I/O: a seed replays exactly.
//!
//! # Running
//!
//! ```text
//! cargo test -p softverbs-sim                                   # the CI scenarios
//! cargo run -p softverbs-sim --bin sim -- --seeds 20            # 20 seeds of every scenario
//! cargo run -p softverbs-sim --bin sim -- --seed 1234 --scenario loss20   # replay one
//! cargo run -p softverbs-sim --bin sim -- --list                # scenario names
//! SIM_TRACE=1 cargo run -p softverbs-sim --bin sim -- --seed 1234 --scenario loss20  # every packet
//! ```
//!
//! Scenarios: `clean`, `loss1`, `loss5`, `loss20`, `dupreorder`, `corrupt`,
//! `partition`, `mixed`, `stress`, `xrc` (XRC_SEND → XRC_RECV QPs and their XRC SRQs;
//! random workloads, fault phase then heal), and the
//! exact ones `deadlink0`..`deadlink7` (RETRY_EXC_ERR after exactly
//! `retry_cnt` retries at the formula's time) and `rnr0`..`rnr7`
//! (RNR_RETRY_EXC_ERR after exactly `rnr_retry` RNR retries; 7 = until a
//! receive is posted).
//!
//! Every failure panics with a message that names the scenario and the seed
//! and prints the replay command.
#![forbid(unsafe_code)]

pub mod device;
pub mod net;
pub use faults::rng;
pub mod scenario;
pub mod special;
pub mod workload;
pub mod world;

pub use world::{Config, Summary, World};

/// Every scenario name: the random-workload ones, then the exact ones.
pub fn all_names() -> Vec<String> {
    let mut v: Vec<String> = scenario::NAMES
        .iter()
        .map(std::string::ToString::to_string)
        .collect();
    v.extend(special::names());
    v
}

/// True if `name` is a scenario.
pub fn known(name: &str) -> bool {
    all_names().iter().any(|n| n == name)
}

/// Runs scenario `name` with `seed`; panics (naming the seed and the replay
/// command) on any violation, including a panic inside an engine.
pub fn run(name: &str, seed: u64) -> Summary {
    assert!(
        known(name),
        "unknown scenario {name:?}; known: {:?}",
        all_names()
    );
    let r = std::panic::catch_unwind(|| {
        if let Some(s) = special::run(name, seed) {
            return s;
        }
        let cfg = scenario::config(name).expect("known");
        World::new(cfg, seed).run()
    });
    match r {
        Ok(s) => s,
        Err(e) => {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| {
                    e.downcast_ref::<&str>()
                        .map(std::string::ToString::to_string)
                })
                .unwrap_or_default();
            if msg.starts_with("[sim ") {
                std::panic::resume_unwind(e);
            }
            panic!(
                "[sim scenario={name} seed={seed}] panic inside the engine: {msg}\n  replay: cargo run -p softverbs-sim --bin sim -- --seed {seed} --scenario {name}"
            );
        }
    }
}

/// One line describing a finished run.
pub fn summary_line(name: &str, seed: u64, s: &Summary) -> String {
    let t = &s.dev;
    format!(
        "{name:<10} seed={seed:<6} ok: {} WRs ({} through windows, {} binds/invalidations), {} recvs, {:.3} ms; net sent {} lost {} part {} dup {} reord {} corrupt {}; drop icrc {} malformed {}; retx {} pkts {} rounds, {} timeouts, {} implied, rnr {}, seq {}, dups {}",
        s.wrs,
        s.window_wrs,
        s.window_ops,
        s.recvs,
        s.end_ns as f64 / 1e6,
        s.net.sent,
        s.net.lost,
        s.net.partitioned,
        s.net.duplicated,
        s.net.reordered,
        s.net.corrupted,
        t.drop_icrc,
        t.drop_malformed,
        t.qps.retransmitted_packets,
        t.qps.retransmit_rounds,
        t.qps.timeouts,
        t.qps.implied_naks,
        t.qps.rnr_naks_received,
        t.qps.seq_naks_received,
        t.qps.duplicates,
    )
}

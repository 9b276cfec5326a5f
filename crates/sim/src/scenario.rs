//! The named scenarios (random workloads under faults). Each one: a fault
//! phase, then a heal phase that must reach quiescence.

use crate::device::QpParams;
use crate::net::Faults;
use crate::workload::Mix;
use crate::world::Config;

/// Names of the random-workload scenarios, in the order `--seeds` runs them.
pub const NAMES: [&str; 10] = [
    "clean",
    "loss1",
    "loss5",
    "loss20",
    "dupreorder",
    "corrupt",
    "partition",
    "mixed",
    "stress",
    "xrc",
];

/// Link latency of every scenario.
pub const DELAY_NS: u64 = 5_000;

/// The QP settings of the random scenarios: timeout 9 (2.097 ms), 7 retries,
/// infinite RNR retries, RNR timer code 2 (20 µs).
pub const QP: QpParams = QpParams {
    timeout: 9,
    retry_cnt: 7,
    rnr_retry: 7,
    min_rnr_timer: 2,
    rd_atomic: 4,
};

/// The configuration of scenario `name`.
///
/// The retry budget cannot run out while the faults last: the fault phase
/// (6 ms) holds fewer than three ACK timeouts (2.1 ms each), and between two
/// timeouts at most one implied NAK counts, so at most six of the seven
/// retries go; the heal phase then delivers every retry. (Longer faults may
/// legitimately end in RETRY_EXC_ERR.)
pub fn config(name: &str) -> Option<Config> {
    let base = base(name);
    let f = |loss: f64, dup: f64, reorder: f64, corrupt: f64| Faults {
        loss,
        dup,
        reorder,
        corrupt,
        delay_ns: DELAY_NS,
        jitter_ns: 2_000,
        reorder_ns: 40_000,
    };
    let cfg = match name {
        "clean" => Config {
            recv_lag_ns: 0,
            ..base
        },
        "loss1" => Config {
            faults: f(0.01, 0.0, 0.0, 0.0),
            ..base
        },
        "loss5" => Config {
            faults: f(0.05, 0.0, 0.0, 0.0),
            ..base
        },
        "loss20" => Config {
            faults: f(0.20, 0.0, 0.0, 0.0),
            ..base
        },
        "dupreorder" => Config {
            faults: f(0.0, 0.05, 0.10, 0.0),
            ..base
        },
        "corrupt" => Config {
            faults: f(0.0, 0.0, 0.0, 0.05),
            ipv6: true,
            ..base
        },
        "partition" => Config {
            partitions: vec![(1_000_000, 4_000_000)],
            faults: f(0.01, 0.0, 0.0, 0.0),
            ..base
        },
        "mixed" => Config {
            faults: f(0.05, 0.02, 0.05, 0.02),
            ipv6: true,
            ..base
        },
        "stress" => Config {
            faults: f(0.10, 0.05, 0.30, 0.02),
            ipv6: true,
            // One READ/atomic in flight at a time, receives often late.
            qp: QpParams {
                rd_atomic: 1,
                min_rnr_timer: 1,
                ..QP
            },
            recv_lag_ns: 100_000,
            post_gap_ns: 2_000,
            ..base
        },
        // XRC (spec/xrc.md): every operation through XRC_SEND → XRC_RECV
        // pairs and their XRC SRQs, under every kind of fault at once.
        "xrc" => Config {
            faults: f(0.05, 0.02, 0.05, 0.02),
            xrc: true,
            mix: Mix::XRC,
            ..base
        },
        _ => return None,
    };
    Some(cfg)
}

/// The settings every scenario starts from: three devices, a clean link,
/// 120 WRs per QP of every kind, receives posted up to 30 µs late.
pub fn base(name: &str) -> Config {
    Config {
        name: name.to_string(),
        devices: 3,
        faults: Faults::clean(DELAY_NS),
        partitions: Vec::new(),
        fault_phase_ns: 6_000_000,
        wrs_per_qp: 120,
        post_gap_ns: 10_000,
        recv_lag_ns: 30_000,
        qp: QP,
        mix: Mix::ALL,
        ipv6: false,
        one_way: false,
        expect_errors: false,
        recv_not_before_ns: 0,
        xrc: false,
    }
}

//! Scenarios with an exact expected outcome: a dead link (RETRY_EXC_ERR after
//! exactly `retry_cnt` retransmissions, at exactly the time the ACK timeout
//! formula gives) and RNR (RNR_RETRY_EXC_ERR after exactly `rnr_retry` RNR
//! retries spaced by the `min_rnr_timer` table; 7 = retry until a receive is
//! posted). Two devices, one QP pair, a fixed-latency link.

use crate::device::QpParams;
use crate::fail;
use crate::net::Faults;
use crate::rng::Rng;
use crate::scenario::{base, DELAY_NS};
use crate::workload::Mix;
use crate::world::{Config, Summary, World};
use proto::timers::{local_ack_timeout_ns, rnr_timer_ns};
use proto::wc::WcStatus;
use proto::QpState;

/// Names of the exact scenarios (`deadlink0`..`deadlink7`, `rnr0`..`rnr7`).
pub fn names() -> Vec<String> {
    let mut v: Vec<String> = (0..8).map(|n| format!("deadlink{n}")).collect();
    v.extend((0..8).map(|n| format!("rnr{n}")));
    v
}

/// Runs exact scenario `name`, or `None` if it is not one.
pub fn run(name: &str, seed: u64) -> Option<Summary> {
    let n = |prefix: &str| {
        name.strip_prefix(prefix)
            .and_then(|x| x.parse::<u8>().ok())
            .filter(|&x| x <= 7)
    };
    if let Some(retry_cnt) = n("deadlink") {
        return Some(dead_link(name, seed, retry_cnt));
    }
    n("rnr").map(|rnr_retry| rnr(name, seed, rnr_retry))
}

fn two_devices(name: &str, qp: QpParams, wrs: u64, mix: Mix) -> Config {
    Config {
        devices: 2,
        faults: Faults::clean(DELAY_NS),
        fault_phase_ns: 0,
        wrs_per_qp: wrs,
        post_gap_ns: 0,
        recv_lag_ns: 0,
        qp,
        mix,
        one_way: true,
        expect_errors: true,
        ..base(name)
    }
}

/// Everything A sends is lost. The oldest WR ends with RETRY_EXC_ERR at
/// t0 + (retry_cnt + 1) × 4.096 µs × 2^timeout, after its first packet went
/// out 1 + retry_cnt times; every other WR is flushed; A's QP is in ERR, B's
/// untouched.
pub fn dead_link(name: &str, seed: u64, retry_cnt: u8) -> Summary {
    let mut rng = Rng::new(seed);
    let timeout = [1u8, 4, 8, 14][rng.below(4) as usize];
    let qp = QpParams {
        timeout,
        retry_cnt,
        ..crate::scenario::QP
    };
    let wrs = rng.range(1, 10);
    // No windows: their local operations would add WRs to the exact count.
    let mix = Mix {
        windows: false,
        ..Mix::ALL
    };
    let mut cfg = two_devices(name, qp, wrs, mix);
    cfg.faults.loss = 1.0;
    let mut w = World::new(cfg, seed);
    w.run_until(None);
    let period = local_ack_timeout_ns(timeout).ok().flatten().unwrap_or(0);
    let Some(&(t0, _, _, psn0)) = w.tx_log.first() else {
        fail!(w, "nothing was sent");
    };
    let q = &w.qps[0];
    let want = t0 + (u64::from(retry_cnt) + 1) * period;
    match q.error {
        Some((WcStatus::RetryExcErr, t, 0)) if t == want => {}
        other => fail!(w, "want RETRY_EXC_ERR on WR 0 at {want} ns, got {other:?}"),
    }
    let sends = w.tx_log.iter().filter(|x| x.1 == 0 && x.3 == psn0).count();
    if sends != 1 + usize::from(retry_cnt) {
        fail!(
            w,
            "first PSN sent {sends} times, want 1 + retry_cnt = {}",
            1 + retry_cnt
        );
    }
    check_failed_and_flushed(&w, wrs);
    let c = w.devs[0].engine.qp_counters(w.qps[0].h).unwrap_or_default();
    if c.timeouts != u64::from(retry_cnt) + 1 || c.retransmit_rounds != u64::from(retry_cnt) {
        fail!(
            w,
            "counters: {} timeouts, {} rounds; want {} and {retry_cnt}",
            c.timeouts,
            c.retransmit_rounds,
            retry_cnt + 1
        );
    }
    w.summary()
}

/// A's WRs all completed (the first with the error, the rest flushed), A in
/// ERR, B in RTS.
fn check_failed_and_flushed(w: &World, wrs: u64) {
    let q = &w.qps[0];
    if !q.outstanding.is_empty() || q.completed != wrs || q.to_post != 0 {
        fail!(
            w,
            "{} of {wrs} WRs completed, {} outstanding",
            q.completed,
            q.outstanding.len()
        );
    }
    let state = |d: usize, i: usize| w.devs[d].engine.qp(w.qps[i].h).map(|x| x.ctl.state()).ok();
    if state(0, 0) != Some(QpState::Err) || state(1, 1) != Some(QpState::Rts) {
        fail!(
            w,
            "QP states {:?} / {:?}, want ERR / RTS",
            state(0, 0),
            state(1, 1)
        );
    }
}

/// A sends SENDs; B posts no receive (rnr_retry < 7) or posts them only after
/// 25 RNR rounds (rnr_retry = 7). With rnr_retry = n < 7 the first
/// SEND ends with RNR_RETRY_EXC_ERR after exactly n + 1 RNR NAKs, each resend
/// exactly one round trip plus the `min_rnr_timer` delay after the previous
/// one. The ACK timeout (65.5 µs) is shorter than the RNR delay for code ≥ 7:
/// the ACK timer is stopped while an RNR wait runs, so it never fires.
pub fn rnr(name: &str, seed: u64, rnr_retry: u8) -> Summary {
    let mut rng = Rng::new(seed);
    let code = rng.range(1, 20) as u8;
    let qp = QpParams {
        timeout: 4,
        retry_cnt: 1,
        rnr_retry,
        min_rnr_timer: code,
        rd_atomic: 4,
    };
    let wrs = rng.range(1, 5);
    let sends = Mix {
        weights: [1, 1, 0, 0, 0, 0, 0, 0, 0],
        windows: false,
    };
    let delay = rnr_timer_ns(code).unwrap_or(0);
    let mut cfg = two_devices(name, qp, wrs, sends);
    // rnr_retry = 7: receives only after 25 RNR rounds (round trip + delay).
    cfg.recv_not_before_ns = if rnr_retry == 7 {
        25 * (delay + 2 * DELAY_NS)
    } else {
        u64::MAX
    };
    let mut w = World::new(cfg, seed);
    w.run_until(None);
    let a = w.devs[0].engine.qp_counters(w.qps[0].h).unwrap_or_default();
    let b = w.devs[1].engine.qp_counters(w.qps[1].h).unwrap_or_default();
    if a.timeouts != 0 || a.rnr_naks_received != b.rnr_naks_sent {
        fail!(
            w,
            "{} ACK timeouts (want 0); RNR NAKs {} received, {} sent",
            a.timeouts,
            a.rnr_naks_received,
            b.rnr_naks_sent
        );
    }
    if rnr_retry == 7 {
        if a.rnr_naks_received < 24 {
            fail!(
                w,
                "only {} RNR NAKs before the receives were posted",
                a.rnr_naks_received
            );
        }
        w.check_quiescent();
        return w.summary();
    }
    let Some(&(t0, _, _, psn0)) = w.tx_log.first() else {
        fail!(w, "nothing was sent");
    };
    let times: Vec<u64> = w
        .tx_log
        .iter()
        .filter(|x| x.1 == 0 && x.3 == psn0)
        .map(|x| x.0)
        .collect();
    let n = u64::from(rnr_retry);
    let step = 2 * DELAY_NS + delay;
    let want: Vec<u64> = (0..=n).map(|k| t0 + k * step).collect();
    if times != want {
        fail!(
            w,
            "first PSN sent at {times:?}, want {want:?} (RTT + RNR delay {delay} ns)"
        );
    }
    let at = t0 + (n + 1) * 2 * DELAY_NS + n * delay;
    match w.qps[0].error {
        Some((WcStatus::RnrRetryExcErr, t, 0)) if t == at => {}
        other => fail!(
            w,
            "want RNR_RETRY_EXC_ERR on WR 0 at {at} ns, got {other:?}"
        ),
    }
    if a.rnr_naks_received != n + 1 {
        fail!(
            w,
            "{} RNR NAKs received, want rnr_retry + 1 = {}",
            a.rnr_naks_received,
            n + 1
        );
    }
    check_failed_and_flushed(&w, wrs);
    w.summary()
}

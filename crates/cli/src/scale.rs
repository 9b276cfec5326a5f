//! `softverbs perf --threads`: how the message rate of one device grows with
//! the threads that use it. One process opens one device; each of N threads
//! (1, 2, 4, 8) gets its own CQ and 8 RC QPs, each connected to a partner QP
//! on the same device (loopback over the device's own address), and streams
//! 64-byte RDMA WRITEs round-robin over its 8 QPs. The aggregate rate is all
//! threads' messages over the wall time from a common start to the last
//! thread's end. With no engine-wide lock in the per-packet path the rate
//! should grow with the threads up to the cores. Single runs on a shared
//! 2-core machine move by 2–4× (spec/performance.md §22), so the phases
//! run in rounds and each row gives the median.

use crate::error::CliError;
use softverbs::*;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const QPS_PER_THREAD: usize = 8;
const SIZE: u32 = 64;
/// WRs outstanding per QP (every 16th signaled).
const DEPTH: usize = 64;
const ALL: AccessFlags = AccessFlags(0xf);
const WAIT: Duration = Duration::from_secs(30);

/// One thread's QPs: the initiators and the partners they write to.
struct Lane {
    cq: CompletionQueue,
    qps: Vec<QueuePair<Rc>>,
    _partners: Vec<QueuePair<Rc>>,
    _partner_cq: CompletionQueue,
}

fn connect_rc(ctx: &Context, a: &QueuePair<Rc>, peer_qpn: u32) -> Result<(), CliError> {
    let gid = ctx.query_gid(1, 0)?;
    let mtu = ctx.query_port(1)?.active_mtu;
    a.to_init(ConnectedInit {
        pkey_index: 0,
        port_num: 1,
        access: ALL,
    })?;
    a.to_rtr(RcRtr {
        ah: AhAttr::roce(gid, 0),
        path_mtu: mtu,
        dest_qp_num: peer_qpn,
        rq_psn: 0,
        max_dest_rd_atomic: 16,
        min_rnr_timer: 1,
    })?;
    a.to_rts(RcRts {
        sq_psn: 0,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 16,
    })?;
    Ok(())
}

fn lane(ctx: &Context, pd: &ProtectionDomain) -> Result<Lane, CliError> {
    let cq = ctx.create_cq(4096)?;
    let partner_cq = ctx.create_cq(64)?;
    let cap = QpCap {
        max_send_wr: DEPTH as u32,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let mut qps = Vec::new();
    let mut partners = Vec::new();
    for _ in 0..QPS_PER_THREAD {
        let mut init = QpInit::new(&cq, &cq);
        init.cap = cap;
        let a = pd.create_rc_qp(&init)?;
        let mut pinit = QpInit::new(&partner_cq, &partner_cq);
        pinit.cap = cap;
        let b = pd.create_rc_qp(&pinit)?;
        connect_rc(ctx, &a, b.qp_num())?;
        connect_rc(ctx, &b, a.qp_num())?;
        qps.push(a);
        partners.push(b);
    }
    Ok(Lane {
        cq,
        qps,
        _partners: partners,
        _partner_cq: partner_cq,
    })
}

/// Streams `iters` WRITEs per QP of `lane`; returns the messages completed.
fn drive(lane: &Lane, mr: &MemoryRegion, slot: usize, iters: usize) -> Result<usize, CliError> {
    let n = lane.qps.len();
    let mut posted = vec![0usize; n];
    let mut signaled_out = vec![0usize; n];
    let mut done = 0usize;
    let mut wcs = Vec::with_capacity(64);
    let sg = [mr.sge(slot * 4096, SIZE)];
    let target = WrTarget::Rdma(RdmaTarget {
        remote_addr: mr.addr() + (slot * 4096 + 2048) as u64,
        rkey: mr.rkey(),
    });
    let deadline = Instant::now() + WAIT;
    while done < iters * n {
        for (q, qp) in lane.qps.iter().enumerate() {
            while posted[q] < iters && signaled_out[q] * 16 < DEPTH {
                let signaled = posted[q] % 16 == 15 || posted[q] + 1 == iters;
                qp.post_send(&SendWr {
                    wr_id: ((q as u64) << 32) | posted[q] as u64,
                    opcode: WrOpcode::RdmaWrite,
                    flags: if signaled {
                        SendFlags::SIGNALED
                    } else {
                        SendFlags(0)
                    },
                    sg_list: &sg,
                    imm_data: ImmData::from_value(0),
                    target,
                })?;
                posted[q] += 1;
                signaled_out[q] += usize::from(signaled);
            }
        }
        wcs.clear();
        if lane.cq.poll(64, &mut wcs) == 0 {
            if Instant::now() > deadline {
                return Err(CliError::Timeout {
                    got: done,
                    want: iters * n,
                    wait: WAIT,
                });
            }
            std::thread::yield_now();
        }
        for wc in &wcs {
            if wc.status != WcStatus::Success {
                return Err(CliError::Completion {
                    wr_id: wc.wr_id,
                    status: wc.status,
                });
            }
            let q = (wc.wr_id >> 32) as usize;
            let i = (wc.wr_id & 0xffff_ffff) as usize;
            signaled_out[q] -= 1;
            // A signaled WR completes itself and the unsignaled ones before it.
            done += if i + 1 == iters && !iters.is_multiple_of(16) {
                iters % 16
            } else {
                16
            };
        }
    }
    Ok(done)
}

/// Thread counts measured, in this order, in every round.
const THREADS: [usize; 4] = [1, 2, 4, 8];

/// Runs the scaling benchmark `rounds` times and prints one row per thread
/// count: the median rate over the rounds, its range, and the median over
/// the rounds of its ratio to the same round's one-thread rate (a round's
/// phases run back to back, so the machine's drift cancels in the ratio).
pub fn run(iters_per_qp: usize, rounds: usize) -> Result<(), CliError> {
    let ctx = Arc::new(devices()?.remove(0).open()?);
    let pd = ctx.alloc_pd()?;
    let mr = Arc::new(pd.reg_mr(8 * 4096 * 2, ALL)?);
    let mut lanes = Vec::new();
    for _ in 0..8 {
        lanes.push(Arc::new(lane(&ctx, &pd)?));
    }
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let rounds = rounds.max(1);
    println!(
        "one device, {QPS_PER_THREAD} RC QPs per thread (each to a partner QP on the same device), \
         {SIZE}-byte RDMA WRITEs, {DEPTH} outstanding per QP, {iters_per_qp} per QP; {cores} cores; \
         {rounds} rounds\n"
    );
    // rates[round][i]: THREADS[i]'s rate in that round; messages[i]: all
    // rounds' messages of THREADS[i].
    let (mut rates, mut messages) = (Vec::new(), [0usize; THREADS.len()]);
    for _ in 0..rounds {
        let mut round = Vec::new();
        for (i, threads) in THREADS.into_iter().enumerate() {
            let (n, rate) = phase(&lanes, &mr, threads, iters_per_qp)?;
            messages[i] += n;
            round.push(rate);
        }
        rates.push(round);
    }
    println!(
        "{:>8} {:>6} {:>12} {:>7} {:>11} {:>9} {:>9} {:>12}",
        "threads", "QPs", "messages", "rounds", "rate[Mpps]", "min", "max", "vs 1 thread"
    );
    // messages: every round's; rate: the rounds' median, min and max.
    for (i, threads) in THREADS.into_iter().enumerate() {
        let mine: Vec<f64> = rates.iter().map(|r| r[i]).collect();
        let ratios: Vec<f64> = rates.iter().map(|r| r[i] / r[0]).collect();
        let (lo, hi) = mine
            .iter()
            .fold((f64::MAX, 0f64), |(l, h), &x| (l.min(x), h.max(x)));
        println!(
            "{threads:>8} {:>6} {:>12} {rounds:>7} {:>11.4} {lo:>9.4} {hi:>9.4} {:>11.2}x",
            threads * QPS_PER_THREAD,
            messages[i],
            median(mine),
            median(ratios),
        );
    }
    Ok(())
}

/// One phase: `threads` lanes stream at once; the messages they completed
/// and their aggregate rate (Mpps) over the wall time from a common start
/// to the last one's end.
fn phase(
    lanes: &[Arc<Lane>],
    mr: &Arc<MemoryRegion>,
    threads: usize,
    iters_per_qp: usize,
) -> Result<(usize, f64), CliError> {
    let start = Arc::new(Barrier::new(threads + 1));
    let mut handles = Vec::new();
    for (t, lane) in lanes.iter().take(threads).enumerate() {
        let (lane, mr, start) = (Arc::clone(lane), Arc::clone(mr), Arc::clone(&start));
        handles.push(std::thread::spawn(move || {
            start.wait();
            drive(&lane, &mr, t, iters_per_qp)
        }));
    }
    start.wait();
    let t0 = Instant::now();
    let mut total = 0;
    let mut first_err = None;
    for h in handles {
        match h.join() {
            Ok(Ok(n)) => total += n,
            Ok(Err(e)) => first_err = first_err.or(Some(e)),
            Err(_) => first_err = first_err.or(Some(CliError::ThreadPanicked)),
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    if let Some(e) = first_err {
        return Err(e);
    }
    Ok((total, total as f64 / secs / 1e6))
}

/// The median (the mean of the middle two of an even count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

//! `softverbs perf --threads`: how the message rate of one device grows with
//! the threads that use it. One process opens one device; each of N threads
//! (1, 2, 4, 8) gets its own CQ and 8 RC QPs, each connected to a partner QP
//! on the same device (loopback over the device's own address), and streams
//! 64-byte RDMA WRITEs round-robin over its 8 QPs. The aggregate rate is all
//! threads' messages over the wall time from a common start to the last
//! thread's end. With no engine-wide lock in the per-packet path the rate
//! should grow with the threads up to the cores.

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

/// Runs the scaling benchmark and prints one row per thread count.
pub fn run(iters_per_qp: usize) -> Result<(), CliError> {
    let ctx = Arc::new(devices()?.remove(0).open()?);
    let pd = ctx.alloc_pd()?;
    let mr = Arc::new(pd.reg_mr(8 * 4096 * 2, ALL)?);
    let mut lanes = Vec::new();
    for _ in 0..8 {
        lanes.push(Arc::new(lane(&ctx, &pd)?));
    }
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    println!(
        "one device, {QPS_PER_THREAD} RC QPs per thread (each to a partner QP on the same device), \
         {SIZE}-byte RDMA WRITEs, {DEPTH} outstanding per QP, {iters_per_qp} per QP; {cores} cores\n"
    );
    println!(
        "{:>8} {:>6} {:>12} {:>10} {:>14} {:>12}",
        "threads", "QPs", "messages", "time[s]", "rate[Mpps]", "vs 1 thread"
    );
    let mut one = None;
    for threads in [1usize, 2, 4, 8] {
        let start = Arc::new(Barrier::new(threads + 1));
        let mut handles = Vec::new();
        for (t, lane) in lanes.iter().take(threads).enumerate() {
            let (lane, mr, start) = (Arc::clone(lane), Arc::clone(&mr), Arc::clone(&start));
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
        let mpps = total as f64 / secs / 1e6;
        let base = *one.get_or_insert(mpps);
        println!(
            "{threads:>8} {:>6} {total:>12} {secs:>10.3} {mpps:>14.4} {:>11.2}x",
            threads * QPS_PER_THREAD,
            mpps / base
        );
    }
    Ok(())
}

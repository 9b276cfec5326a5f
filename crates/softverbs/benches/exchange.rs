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

use softverbs::*;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// How long any one exchange may take before the program gives up.
const BOUND: Duration = Duration::from_secs(10);

struct End {
    ctx: Context,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    mr: MemoryRegion,
}

fn end(name: &str, ip: [u8; 4], same_host: bool) -> End {
    // The process ID in the address, so that two copies do not collide.
    let pid = std::process::id();
    let ip = std::net::Ipv4Addr::new(ip[0], ip[1], (pid >> 8) as u8, pid as u8 & !1 | ip[3]);
    let cfg = DeviceConfig {
        name: format!("{name}-{pid}"),
        addrs: vec![ip.into()],
        active_mtu: Mtu::Mtu1024,
    };
    let ctx = Device::with_config(cfg)
        .with_same_host(same_host)
        .open()
        .expect("open a device");
    let pd = ctx.alloc_pd().expect("PD");
    let cq = ctx.create_cq(256).expect("CQ");
    let mr = pd.reg_mr(4096, AccessFlags(0xf)).expect("MR");
    End { ctx, pd, cq, mr }
}

fn connect(a: &End, b: &End, qa: &QueuePair<Rc>, qb: &QueuePair<Rc>) {
    for (qp, peer, qpn) in [(qa, b, qb.qp_num()), (qb, a, qa.qp_num())] {
        let gid = peer.ctx.query_gid(1, 0).expect("GID");
        qp.to_init(ConnectedInit {
            pkey_index: 0,
            port_num: 1,
            access: AccessFlags(0xf),
        })
        .expect("INIT");
        qp.to_rtr(RcRtr {
            ah: AhAttr::roce(gid, 0),
            path_mtu: Mtu::Mtu1024,
            dest_qp_num: qpn,
            rq_psn: 0,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 1,
        })
        .expect("RTR");
        qp.to_rts(RcRts {
            sq_psn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
        })
        .expect("RTS");
    }
}

static SPINS: AtomicU64 = AtomicU64::new(0);

/// `me` writes `round` into `peer`'s memory; then this thread polls both
/// CQs until `peer` holds it.
fn write(qp: &QueuePair<Rc>, me: &End, peer: &End, round: u64, polled: &End) {
    me.mr.write(0, &round.to_le_bytes());
    let flags = if round.is_multiple_of(32) {
        SendFlags::SIGNALED
    } else {
        SendFlags::default()
    };
    let sg = [me.mr.sge(0, 8)];
    let wr = SendWr {
        wr_id: round,
        opcode: WrOpcode::RdmaWrite,
        sg_list: &sg,
        target: WrTarget::Rdma(peer.mr.remote(8)),
        flags,
        imm_data: ImmData::from_value(0),
    };
    qp.post_send(&wr).expect("post");
    let (deadline, mut word, mut wc) = (Instant::now() + BOUND, [0u8; 8], Vec::new());
    loop {
        peer.mr.read(8, &mut word);
        if u64::from_le_bytes(word) == round {
            break;
        }
        SPINS.fetch_add(1, Relaxed);
        wc.clear();
        me.cq.poll(4, &mut wc);
        polled.cq.poll(4, &mut wc);
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
fn exchange(qa: &QueuePair<Rc>, qb: &QueuePair<Rc>, a: &End, b: &End, first: u64, n: u64) {
    for round in first..first + n {
        write(qa, a, b, round, b);
        write(qb, b, a, round, a);
    }
}

fn run(path: &str, n: u64) {
    let same_host = path == "rings";
    let a = end("exchange-a", [127, 61, 0, 0], same_host);
    let b = end("exchange-b", [127, 61, 0, 1], same_host);
    fn init(e: &End) -> QpInit<'_> {
        let mut i = QpInit::new(&e.cq, &e.cq);
        i.cap = QpCap {
            max_send_wr: 64,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        };
        i
    }
    let qa = a.pd.create_rc_qp(&init(&a)).expect("QP");
    let qb = b.pd.create_rc_qp(&init(&b)).expect("QP");
    connect(&a, &b, &qa, &qb);
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

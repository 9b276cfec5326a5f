//! The `softverbs` command.
//!
//! - `softverbs devinfo` — what `ibv_devinfo -v` shows, for the softverbs device.
//! - `softverbs demo` — the control path end to end: two RC queue pairs brought
//!   RESET→INIT→RTR→RTS, connected to each other, each then queried; and one
//!   refused modify, to show how softverbs explains a mistake.
//! - `softverbs exec [options] -- PROGRAM ARGS…` — runs an unmodified RDMA
//!   program on softverbs (library path; the device's sysfs and /dev identity in
//!   a private user + mount namespace): see [`exec`].
#![forbid(unsafe_code)]

mod bench;
mod error;
mod exec;
mod perf;
mod render;
mod scale;
mod sysfs;

use error::CliError;
use softverbs::*;
use std::process::ExitCode;

fn main() -> ExitCode {
    init_log();
    let os_args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if os_args.first().and_then(|a| a.to_str()) == Some("exec") {
        // Returns only when the program could not be started.
        return match exec::run(&os_args[1..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("softverbs exec: {e}");
                ExitCode::from(127)
            }
        };
    }
    let args: Vec<String> = os_args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let port = flag(&args, "--port").unwrap_or(18515);
    let result = match args.first().map(String::as_str) {
        Some("devinfo") => devinfo().map_err(CliError::from),
        Some("control") => control_demo().map_err(CliError::from),
        Some("demo") | None => perf::run(&perf::Plan::demo(), port),
        Some("perf") if args.iter().any(|a| a == "--threads") => {
            let iters = flag(&args, "--iters").map_or(20_000, usize::from);
            scale::run(iters, flag(&args, "--rounds").map_or(3, usize::from))
        }
        Some("perf") => perf::run(&perf::Plan::full(), port),
        Some("serve") => perf::serve(port),
        Some("-h" | "--help" | "help") => {
            println!("{}", USAGE);
            Ok(())
        }
        Some(other) => {
            eprintln!("softverbs: unknown command {other:?}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Verbs(e)) => {
            eprintln!("softverbs: {e} (errno {})", e.errno());
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("softverbs: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `SOFTVERBS_LOG=error|warn|info|debug|trace` sends the library's log to stderr;
/// refused verbs are logged at `warn` with the reason in words.
fn init_log() {
    match softverbs::log_level_from_env() {
        Ok(Some(level)) => tracing_subscriber::fmt()
            .with_max_level(level)
            .with_writer(std::io::stderr)
            .init(),
        Ok(None) => {}
        Err(e) => eprintln!("softverbs: {e}"),
    }
}

/// The value after `name` in the arguments.
fn flag(args: &[String], name: &str) -> Option<u16> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
}

const USAGE: &str = "usage: softverbs [demo | perf | control | devinfo | serve] [--port N]
       softverbs exec [--lib-dir DIR] [--no-namespace] -- PROGRAM [ARGS...]
  demo     two processes, one RC connection: send latency, RDMA WRITE and READ bandwidth
  perf     the benchmark: SEND, READ and atomic latency; WRITE/READ/SEND bandwidth and
           message rate at several sizes; FETCH_ADD and CMP_SWAP rates; each bandwidth also
           as a ratio of memcpy and iperf3 TCP loopback measured in the same run; then the
           figures of the performance targets (spec/performance.md) beside their targets
  perf --threads [--iters N] [--rounds R]  one device, 1/2/4/8 threads with 8 RC QPs
           each streaming 64-byte WRITEs (N per QP, default 20000), R rounds (default 3):
           aggregate message rate per thread count, median of the rounds
  control  the control path: two RC QPs brought RESET→INIT→RTR→RTS and queried
  devinfo  show the device, its limits, port and GID table
  serve    the server side of demo/perf (started by them; --port, default 18515)
  exec     run an unmodified RDMA program on softverbs, no root (softverbs exec --help)
environment: SOFTVERBS_ADDR, SOFTVERBS_DEVICE, SOFTVERBS_MTU, SOFTVERBS_LOG";

fn open() -> Result<(Device, Context), Error> {
    let dev = devices()?.remove(0);
    let ctx = dev.open()?;
    Ok((dev, ctx))
}

fn devinfo() -> Result<(), Error> {
    let (dev, ctx) = open()?;
    print!("{}", render::device(dev.name(), &ctx)?);
    Ok(())
}

fn control_demo() -> Result<(), Error> {
    let (dev, ctx) = open()?;
    let gid = ctx.query_gid(1, 0)?;
    println!("opened {} — GID[0] {} ({})\n", dev.name(), gid, gid.ip());
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(64)?;
    let a = pd.create_rc_qp(&QpInit::new(&cq, &cq))?;
    let b = pd.create_rc_qp(&QpInit::new(&cq, &cq))?;
    println!(
        "created RC QPs {:#08x} and {:#08x} (state {})",
        a.qp_num(),
        b.qp_num(),
        a.state()?
    );

    let access = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let mtu = ctx.query_port(1)?.active_mtu;
    for (qp, peer, psn) in [(&a, &b, 0x1000), (&b, &a, 0x2000)] {
        qp.to_init(ConnectedInit {
            pkey_index: 0,
            port_num: 1,
            access,
        })?;
        qp.to_rtr(RcRtr {
            ah: AhAttr::roce(gid, 0),
            path_mtu: mtu,
            dest_qp_num: peer.qp_num(),
            rq_psn: psn ^ 0x3000,
            max_dest_rd_atomic: 16,
            min_rnr_timer: 12,
        })?;
        qp.to_rts(RcRts {
            sq_psn: psn,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 16,
        })?;
        println!(
            "QP {:#08x}: RESET→INIT→RTR→RTS, connected to {:#08x}",
            qp.qp_num(),
            peer.qp_num()
        );
    }
    println!();
    for qp in [&a, &b] {
        print!("{}", render::qp(qp.qp_num(), &qp.query()?));
        println!();
    }

    // One mistake, on purpose: a fresh QP asked to go INIT→RTR without DEST_QPN.
    let c = pd.create_rc_qp(&QpInit::new(&cq, &cq))?;
    c.to_init(ConnectedInit {
        pkey_index: 0,
        port_num: 1,
        access,
    })?;
    let attr = QpAttr {
        qp_state: QpState::Rtr,
        ah_attr: AhAttr::roce(gid, 0),
        path_mtu: mtu,
        ..QpAttr::default()
    };
    let mask = AttrMask::STATE
        | AttrMask::AV
        | AttrMask::PATH_MTU
        | AttrMask::RQ_PSN
        | AttrMask::MAX_DEST_RD_ATOMIC
        | AttrMask::MIN_RNR_TIMER;
    match c.modify(&attr, mask) {
        Err(e) => println!(
            "a modify with a mistake is refused, and says why:\n  {} — {e}",
            e.errno()
        ),
        Ok(()) => println!("unexpected: the faulty modify was accepted"),
    }
    println!("  (QP {:#08x} is still {})", c.qp_num(), c.state()?);
    Ok(())
}

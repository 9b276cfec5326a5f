//! `softverbs demo` and `softverbs perf`: a server process and a client
//! process, real RoCEv2 traffic between them, perftest-like results, and the
//! baselines measured in the same run (memcpy; iperf3 TCP loopback when
//! installed) so figures read as ratios on a noisy shared machine.

use crate::bench::{self, summarize, Peer};
use crate::error::CliError;
use softverbs::WrOpcode;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What one run measures.
pub struct Plan {
    pub pingpong: Vec<(usize, u32)>,
    /// One-sided operations timed one at a time: (operation, iterations, size).
    pub op_latency: Vec<(WrOpcode, usize, u32)>,
    /// (operation, iterations, size, depth)
    pub streams: Vec<(WrOpcode, usize, u32, usize)>,
    pub baselines: bool,
}

impl Plan {
    /// The main job: a ping-pong and a WRITE bandwidth run, a few seconds.
    pub fn demo() -> Plan {
        Plan {
            pingpong: vec![(2000, 64)],
            op_latency: vec![],
            streams: vec![
                (WrOpcode::RdmaWrite, 4000, 65536, 128),
                (WrOpcode::RdmaRead, 2000, 65536, 64),
            ],
            baselines: false,
        }
    }

    /// The benchmark: every operation, several sizes, with baselines.
    pub fn full() -> Plan {
        let mut streams = Vec::new();
        for size in [64u32, 4096, 65536] {
            let iters = if size >= 65536 { 4000 } else { 20_000 };
            streams.push((WrOpcode::RdmaWrite, iters, size, 128));
            streams.push((WrOpcode::RdmaRead, iters / 2, size, 64));
            streams.push((WrOpcode::Send, iters, size, 128));
        }
        streams.push((WrOpcode::AtomicFetchAndAdd, 20_000, 8, 16));
        streams.push((WrOpcode::AtomicCmpAndSwp, 20_000, 8, 16));
        let op_latency = vec![
            (WrOpcode::RdmaRead, 5000, 8),
            (WrOpcode::RdmaRead, 2000, 4096),
            (WrOpcode::AtomicFetchAndAdd, 5000, 8),
        ];
        Plan {
            pingpong: vec![(5000, 2), (5000, 8), (2000, 4096)],
            op_latency,
            streams,
            baselines: true,
        }
    }
}

/// Runs the server side until the client says `quit`.
pub fn serve(port: u16) -> Result<(), CliError> {
    let mut peer = bench::accept(port)?;
    loop {
        let line = peer
            .ctrl
            .recv()
            .map_err(CliError::io("reading the client's request"))?;
        let f: Vec<&str> = line.split_whitespace().collect();
        let arg = |i: usize| f.get(i).and_then(|s| s.parse::<usize>().ok()).unwrap_or(0);
        match f.first().copied() {
            Some("pingpong") => peer.echo(arg(1), arg(2) as u32)?,
            Some("send") => {
                let p = &mut peer;
                sink_ready(p, arg(1), arg(2) as u32)?;
            }
            Some("quit") | None => return Ok(()),
            _ => {}
        }
        peer.ctrl
            .send("ok")
            .map_err(CliError::io("answering the client"))?;
    }
}

fn sink_ready(peer: &mut Peer, iters: usize, size: u32) -> Result<(), CliError> {
    // The receives for the first window are posted inside `sink` before any
    // completion is awaited; the client waits for "ready" first.
    peer.ctrl
        .send("ready")
        .map_err(CliError::io("answering the client"))?;
    peer.sink(iters, size)
}

/// Spawns `softverbs serve --port PORT` as a child process.
fn spawn_server(port: u16) -> Result<Child, CliError> {
    let exe = std::env::current_exe().map_err(CliError::io("finding this program"))?;
    Command::new(exe)
        .args(["serve", "--port", &port.to_string()])
        .stdin(Stdio::null())
        .spawn()
        .map_err(CliError::io("starting the server process"))
}

/// Client: runs the plan against a freshly spawned server process.
pub fn run(plan: &Plan, port: u16) -> Result<(), CliError> {
    let mut server = spawn_server(port)?;
    let result = drive(plan, port);
    let waited = wait_child(&mut server, Duration::from_secs(10));
    if !waited {
        let _ = server.kill(); // our own child, by handle
        let _ = server.wait();
    }
    result
}

fn wait_child(c: &mut Child, limit: Duration) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if let Ok(Some(_)) = c.try_wait() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

fn drive(plan: &Plan, port: u16) -> Result<(), CliError> {
    // The baselines first, so every row can be read against them.
    let base = plan.baselines.then(Baselines::measure);
    let mut peer = bench::connect(port)?;
    let ctrl_err = CliError::io("talking to the server");
    println!(
        "two processes on this host, RC over RoCEv2/UDP, {} → peer GID {} (QPN {:#08x})",
        peer.ctx.query_gid(1, 0)?.ip(),
        peer.remote.gid.ip(),
        peer.remote.qpn
    );
    println!("path MTU {} bytes\n", peer.ctx.query_port(1)?.active_mtu);
    println!(
        "{:<22} {:>10} {:>10} {:>12} {:>12} {:>12}",
        "test", "bytes", "iters", "t_median[us]", "t_p99[us]", "t_avg[us]"
    );
    let mut latencies = Vec::new();
    for &(iters, size) in &plan.pingpong {
        peer.ctrl
            .send(&format!("pingpong {iters} {size}"))
            .map_err(ctrl_err)?;
        let mut lat = peer.pingpong(iters, size)?;
        expect(&mut peer, "ok")?;
        let (med, p99, avg) = summarize(&mut lat);
        latencies.push((size, med, p99));
        println!(
            "{:<22} {:>10} {:>10} {:>12.2} {:>12.2} {:>12.2}",
            "send latency (RC)", size, iters, med, p99, avg
        );
    }
    for &(op, iters, size) in &plan.op_latency {
        let mut lat = peer.op_latency(op, iters, size)?;
        let (med, p99, avg) = summarize(&mut lat);
        let bytes = if op.is_atomic() { 8 } else { size };
        println!(
            "{:<22} {:>10} {:>10} {:>12.2} {:>12.2} {:>12.2}",
            latency_name(op),
            bytes,
            iters,
            med,
            p99,
            avg
        );
    }
    if !plan.pingpong.is_empty() {
        println!("(send latency is half a round trip, as ib_send_lat reports it; READ and atomic latency a full one, as ib_read_lat / ib_atomic_lat)");
    }
    let ratio_head = if base.is_some() {
        format!(" {:>10} {:>10}", "/iperf3", "/memcpy")
    } else {
        String::new()
    };
    println!(
        "\n{:<22} {:>10} {:>10} {:>12} {:>12}{ratio_head} {:>9} {:>9}",
        "test", "bytes", "iters", "BW[MB/s]", "MsgRate[Mpps]", "sends/pkt", "recvs/pkt"
    );
    let mut results = Vec::new();
    let mut rates = Vec::new();
    for &(op, iters, size, depth) in &plan.streams {
        if op == WrOpcode::Send {
            peer.ctrl
                .send(&format!("send {iters} {size}"))
                .map_err(ctrl_err)?;
            expect(&mut peer, "ready")?;
        }
        let before = peer.ctx.counters().io;
        let t = peer.stream(op, iters, size, depth)?;
        let after = peer.ctx.counters().io;
        if op == WrOpcode::Send {
            expect(&mut peer, "ok")?;
        }
        let bytes = if op.is_atomic() { 8 } else { size };
        let mbs = (iters as f64 * f64::from(bytes)) / t.as_secs_f64() / 1e6;
        let mpps = iters as f64 / t.as_secs_f64() / 1e6;
        let ratios = base.as_ref().map_or(String::new(), |b| b.ratios(mbs));
        // This side's system calls per datagram (the server's are not seen here).
        let per = |calls: u64, pkts: u64| calls as f64 / pkts.max(1) as f64;
        let sends = per(
            after.send_calls - before.send_calls,
            after.datagrams_sent - before.datagrams_sent,
        );
        let recvs = per(
            after.recv_calls - before.recv_calls,
            after.datagrams_received - before.datagrams_received,
        );
        println!(
            "{:<22} {:>10} {:>10} {:>12.1} {:>12.4}{ratios} {:>9.3} {:>9.3}",
            name(op),
            bytes,
            iters,
            mbs,
            mpps,
            sends,
            recvs
        );
        results.push((op, bytes, mbs));
        rates.push((op, bytes, mpps));
    }
    peer.ctrl.send("quit").map_err(ctrl_err)?;
    if let Some(b) = &base {
        b.report(&results);
        targets(b, &results, &rates, &latencies);
    }
    Ok(())
}

/// The figures of the performance targets (spec/performance.md §1) that
/// this program measures itself, each beside its target. Measured through the
/// Rust API (latency is a SEND ping-pong; `scripts/perftest.sh` prints the
/// same table for unmodified perftest through the drop-in library).
fn targets(
    b: &Baselines,
    bw: &[(WrOpcode, u32, f64)],
    rates: &[(WrOpcode, u32, f64)],
    lat: &[(u32, f64, f64)],
) {
    let bw_of = |op| bw.iter().find(|r| r.0 == op && r.1 == 65536).map(|r| r.2);
    let rate_of = |op, bytes| {
        rates
            .iter()
            .find(|r| r.0 == op && r.1 == bytes)
            .map(|r| r.2)
    };
    let lat2 = lat.iter().find(|l| l.0 == 2);
    let mut rows: Vec<(&str, Option<f64>, &str, &str)> = Vec::new();
    let tcp = b.iperf3.as_ref().ok().copied();
    for (label, op) in [
        ("RDMA WRITE 64 KiB / iperf3 TCP", WrOpcode::RdmaWrite),
        ("RDMA READ 64 KiB / iperf3 TCP", WrOpcode::RdmaRead),
        ("SEND 64 KiB / iperf3 TCP", WrOpcode::Send),
    ] {
        rows.push((label, bw_of(op).zip(tcp).map(|(m, t)| m / t), "x", ">= 1.0"));
    }
    rows.push(("SEND latency 2 B, median", lat2.map(|l| l.1), "us", "<= 5"));
    rows.push(("SEND latency 2 B, p99", lat2.map(|l| l.2), "us", "<= 25"));
    rows.push((
        "RDMA WRITE 64 B message rate",
        rate_of(WrOpcode::RdmaWrite, 64),
        "Mpps",
        ">= 2",
    ));
    rows.push((
        "FETCH_ADD message rate",
        rate_of(WrOpcode::AtomicFetchAndAdd, 8),
        "Mpps",
        ">= 1",
    ));
    println!("\nperformance targets (spec/performance.md), measured in this run:");
    println!(
        "  {:<34} {:>10} {:<5} {:>8}",
        "figure", "measured", "", "target"
    );
    for (label, v, unit, target) in rows {
        let v = v.map_or("-".to_string(), |v| format!("{v:.3}"));
        println!("  {label:<34} {v:>10} {unit:<5} {target:>8}");
    }
    println!("  (thread scaling: softverbs perf --threads)");
}

fn expect(peer: &mut Peer, want: &'static str) -> Result<(), CliError> {
    let got = peer
        .ctrl
        .recv()
        .map_err(CliError::io("reading the server's answer"))?;
    if got != want {
        return Err(CliError::Reply { got, want });
    }
    Ok(())
}

fn name(op: WrOpcode) -> &'static str {
    match op {
        WrOpcode::RdmaWrite => "RDMA WRITE bw",
        WrOpcode::RdmaRead => "RDMA READ bw",
        WrOpcode::Send => "SEND bw",
        WrOpcode::AtomicFetchAndAdd => "FETCH_ADD rate",
        WrOpcode::AtomicCmpAndSwp => "CMP_SWAP rate",
        _ => "other",
    }
}

fn latency_name(op: WrOpcode) -> &'static str {
    match op {
        WrOpcode::RdmaRead => "RDMA READ latency",
        WrOpcode::AtomicFetchAndAdd => "FETCH_ADD latency",
        WrOpcode::AtomicCmpAndSwp => "CMP_SWAP latency",
        _ => "other latency",
    }
}

/// memcpy, the kernel's cross-memory copy and iperf3 TCP loopback,
/// measured in this run.
struct Baselines {
    memcpy: f64,
    /// process_vm_readv(2) in 4 KiB and in 64 KiB calls, MB/s.
    cross_memory: Result<(f64, f64), String>,
    iperf3: Result<f64, String>,
}

impl Baselines {
    fn measure() -> Baselines {
        Baselines {
            memcpy: memcpy_mbs(65536, 1 << 30),
            cross_memory: cross_memory_mbs(4096, 1 << 28)
                .and_then(|small| Ok((small, cross_memory_mbs(65536, 1 << 30)?))),
            iperf3: iperf3_mbs(),
        }
    }

    /// " x/iperf3 x/memcpy" for a bandwidth in MB/s.
    fn ratios(&self, mbs: f64) -> String {
        let tcp = self
            .iperf3
            .as_ref()
            .map_or("-".to_string(), |t| format!("{:.3}", mbs / t));
        format!(" {tcp:>10} {:>10.4}", mbs / self.memcpy)
    }

    fn report(&self, results: &[(WrOpcode, u32, f64)]) {
        let best = results.iter().map(|r| r.2).fold(0.0, f64::max);
        println!("\nbaselines measured in this run (before the RDMA tests):");
        println!(
            "  memcpy 64 KiB blocks       {:>12.1} MB/s   softverbs best / memcpy = {:.4}",
            self.memcpy,
            best / self.memcpy
        );
        match &self.cross_memory {
            Ok((small, large)) => println!(
                "  process_vm_readv 4 / 64 KiB {small:>8.1} / {large:.1} MB/s   \
                 (a same-host single copy's primitive: spec/same-host.md §4)"
            ),
            Err(why) => println!("  process_vm_readv            NOT MEASURED: {why}"),
        }
        match &self.iperf3 {
            Ok(tcp) => println!(
                "  iperf3 TCP loopback        {tcp:>12.1} MB/s   softverbs best / iperf3 = {:.3}",
                best / tcp
            ),
            Err(why) => println!("  iperf3 TCP loopback        NOT MEASURED: {why}"),
        }
    }
}

fn memcpy_mbs(block: usize, total: usize) -> f64 {
    let src = vec![0x5au8; block];
    let mut dst = vec![0u8; block];
    let t0 = Instant::now();
    for i in 0..total / block {
        dst.copy_from_slice(&src);
        std::hint::black_box(&mut dst);
        std::hint::black_box(i);
    }
    total as f64 / t0.elapsed().as_secs_f64() / 1e6
}

/// process_vm_readv(2) of `block`-byte calls within this process, in MB/s
/// (one system call per block: what a single copy per packet or per
/// message would pay).
fn cross_memory_mbs(block: usize, total: usize) -> Result<f64, String> {
    // Page-aligned, as registered buffers usually are: the kernel pins
    // every page a call touches.
    let (src_buf, mut dst_buf) = (vec![0x5au8; block + 4096], vec![0u8; block + 4096]);
    let s = src_buf.as_ptr().align_offset(4096);
    let d = dst_buf.as_ptr().align_offset(4096);
    let (src, dst) = (&src_buf[s..s + block], &mut dst_buf[d..d + block]);
    let t0 = Instant::now();
    for _ in 0..total / block {
        sv_io::cross_memory_copy(dst, src).map_err(|e| format!("process_vm_readv: {e}"))?;
        std::hint::black_box(&mut *dst);
    }
    Ok(total as f64 / t0.elapsed().as_secs_f64() / 1e6)
}

/// iperf3 TCP over 127.0.0.1 for 3 s, in MB/s; why not, if it cannot run.
fn iperf3_mbs() -> Result<f64, String> {
    let port = "15201";
    let mut server = Command::new("iperf3")
        .args(["-s", "-1", "-p", port])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            format!("iperf3 is not installed or cannot start ({e}); apt-get install -y iperf3")
        })?;
    std::thread::sleep(Duration::from_millis(300));
    let out = Command::new("iperf3")
        .args(["-c", "127.0.0.1", "-p", port, "-t", "3", "-J"])
        .output();
    if !wait_child(&mut server, Duration::from_secs(5)) {
        let _ = server.kill(); // our own child, by handle
        let _ = server.wait();
    }
    let out = out.map_err(|e| format!("iperf3 client: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "sum_received": { ... "bits_per_second": N ... }
    let parse = || {
        let rest = &text[text.find("\"sum_received\"")?..];
        let b = rest.find("\"bits_per_second\"")?;
        let num: String = rest[b + 17..]
            .chars()
            .skip_while(|c| !c.is_ascii_digit())
            .take_while(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+'))
            .collect();
        num.parse::<f64>().ok()
    };
    parse()
        .map(|bps| bps / 8e6)
        .ok_or_else(|| format!("could not read iperf3's result (exit {})", out.status))
}

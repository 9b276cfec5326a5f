//! `softverbs exec`: the device's identity in a private user + mount namespace,
//! as the caller and as an unprivileged user; the host left unchanged; real
//! programs (ibv_devinfo, ucx_info) finding the device through it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod netns;
use netns::Netns;

const BIN: &str = env!("CARGO_BIN_EXE_softverbs");
/// The device address of these tests: its GID is known in advance.
const ADDR: &str = "127.0.9.1";
const GID0: &str = "0000:0000:0000:0000:0000:ffff:7f00:0901";

/// The drop-in library's directory, or None (skip; fail under SOFTVERBS_REQUIRE_TOOLS).
fn lib_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("SOFTVERBS_LIBIBVERBS_DIR") {
        return Some(PathBuf::from(d));
    }
    let target = Path::new(BIN).parent()?.parent()?.to_path_buf();
    for profile in ["debug", "release"] {
        let so = target.join(profile).join("libibverbs.so");
        if so.exists() {
            let dir = target.join("libibverbs-exec-test");
            std::fs::create_dir_all(&dir).ok()?;
            let link = dir.join("libibverbs.so.1");
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(&so, &link).ok()?;
            return Some(dir);
        }
    }
    assert!(
        std::env::var_os("SOFTVERBS_REQUIRE_TOOLS").is_none(),
        "the drop-in libibverbs.so.1 is required: set SOFTVERBS_LIBIBVERBS_DIR"
    );
    eprintln!("skipping: no libibverbs.so.1 built (set SOFTVERBS_LIBIBVERBS_DIR)");
    None
}

fn have(tool: &str) -> bool {
    let ok = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("SOFTVERBS_REQUIRE_TOOLS").is_none(),
            "{tool} is required but not installed"
        );
        eprintln!("skipping: {tool} not installed");
    }
    ok
}

/// `softverbs exec [exec_args] -- sh -c script`, optionally as another user, bounded.
fn exec_sh(lib: &Path, prefix: &[&str], exec_args: &[&str], script: &str) -> Output {
    let mut argv: Vec<String> = prefix
        .iter()
        .map(std::string::ToString::to_string)
        .collect();
    argv.push(BIN.into());
    argv.push("exec".into());
    argv.extend(["--lib-dir".to_string(), lib.display().to_string()]);
    argv.extend(exec_args.iter().map(std::string::ToString::to_string));
    argv.extend(["--", "sh", "-c", script].map(String::from));
    let out = Command::new("timeout")
        .arg("60")
        .args(&argv)
        .env("SOFTVERBS_ADDR", ADDR)
        .env_remove("SOFTVERBS_DEVICE")
        .current_dir("/")
        .output()
        .expect("run softverbs exec");
    eprintln!(
        "$ {}\n{}{}",
        argv.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `key=value` lines of a script's output.
fn value(out: &Output, key: &str) -> String {
    let text = String::from_utf8_lossy(&out.stdout);
    let prefix = format!("{key}=");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {key}= in the output"))
        .trim()
        .to_string()
}

const DEV: &str = "/sys/class/infiniband/softverbs0";

/// What every view must show, printed as key=value lines.
fn view_script(shm_name: &str) -> String {
    format!(
        "echo gid0=$(cat {DEV}/ports/1/gids/0)
         echo type0=$(cat {DEV}/ports/1/gid_attrs/types/0)
         echo ndev0=$(cat {DEV}/ports/1/gid_attrs/ndevs/0)
         echo rate=$(cat {DEV}/ports/1/rate)
         echo state=$(cat {DEV}/ports/1/state)
         echo link=$(cat {DEV}/ports/1/link_layer)
         echo guid=$(cat {DEV}/node_guid)
         echo fw=$(cat {DEV}/fw_ver)
         echo numa=$(cat {DEV}/device/numa_node)
         echo ibdev=$(cat /sys/class/infiniband_verbs/uverbs0/ibdev)
         if test -c /dev/infiniband/uverbs0 -a -r /dev/infiniband/uverbs0 -a -w /dev/infiniband/uverbs0; then echo uverbs=chr-rw; else echo uverbs=missing; fi
         if test -d /sys/class/net/lo; then echo net=visible; else echo net=hidden; fi
         if echo x > /dev/null; then echo null=ok; else echo null=broken; fi
         echo shared > /dev/shm/{shm_name} && echo shm=written
         echo uid=$(id -u)"
    )
}

fn check_view(out: &Output, uid: u32) {
    assert!(out.status.success(), "softverbs exec failed");
    assert_eq!(value(out, "gid0"), GID0);
    assert_eq!(value(out, "type0"), "RoCE v2");
    assert_eq!(value(out, "ndev0"), "lo");
    // lo has no link speed: counted as 1000 Mb/s, as the kernel does for RoCE.
    assert_eq!(value(out, "rate"), "2.5 Gb/sec (1X SDR)");
    assert_eq!(value(out, "state"), "4: ACTIVE");
    assert_eq!(value(out, "link"), "Ethernet");
    assert_eq!(value(out, "numa"), "-1");
    assert_eq!(value(out, "ibdev"), "softverbs0");
    assert_eq!(value(out, "uverbs"), "chr-rw");
    assert_eq!(
        value(out, "net"),
        "visible",
        "the rest of /sys/class must stay visible"
    );
    assert_eq!(
        value(out, "null"),
        "ok",
        "the rest of /dev must keep working"
    );
    assert_eq!(value(out, "shm"), "written");
    assert_eq!(
        value(out, "uid"),
        uid.to_string(),
        "the caller's uid maps to itself"
    );
}

fn caller_uid() -> u32 {
    let out = Command::new("id").arg("-u").output().expect("id -u");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a uid")
}

/// /dev/shm is the host's (programs share memory through it) and nothing of
/// the view leaks to the host.
fn check_host_after(shm_name: &str, had_ib: bool) {
    let shm = Path::new("/dev/shm").join(shm_name);
    assert_eq!(std::fs::read_to_string(&shm).unwrap(), "shared\n");
    std::fs::remove_file(&shm).unwrap();
    if !had_ib {
        assert!(
            !Path::new("/dev/infiniband").exists(),
            "the view leaked to the host's /dev"
        );
        assert!(!Path::new("/sys/class/infiniband/softverbs0").exists());
    }
}

#[test]
fn view_as_the_caller_matches_the_device() {
    let Some(lib) = lib_dir() else { return };
    let had_ib = Path::new("/dev/infiniband").exists();
    let shm_name = format!("softverbs-exec-test-{}", std::process::id());
    let out = exec_sh(&lib, &[], &[], &view_script(&shm_name));
    check_view(&out, caller_uid());
    check_host_after(&shm_name, had_ib);
}

#[test]
fn view_as_an_unprivileged_user() {
    let Some(lib) = lib_dir() else { return };
    if caller_uid() != 0 {
        eprintln!("skipping: switching to an unprivileged user needs root (the caller is unprivileged already)");
        return;
    }
    if !have("setpriv") {
        return;
    }
    let had_ib = Path::new("/dev/infiniband").exists();
    let shm_name = format!("softverbs-exec-test-nobody-{}", std::process::id());
    let nobody = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    ];
    let out = exec_sh(&lib, &nobody, &[], &view_script(&shm_name));
    check_view(&out, 65534);
    check_host_after(&shm_name, had_ib);
}

/// The sysfs values are the device's: ibv_devinfo (through the drop-in
/// library, i.e. the verbs) reports the same GUID, firmware and GID.
#[test]
fn sysfs_agrees_with_the_verbs() {
    let Some(lib) = lib_dir() else { return };
    if !have("ibv_devinfo") {
        return;
    }
    let script = format!(
        "echo guid=$(cat {DEV}/node_guid)
         echo fw=$(cat {DEV}/fw_ver)
         echo rate=$(cat {DEV}/ports/1/rate)
         ibv_devinfo -v"
    );
    let out = exec_sh(&lib, &[], &[], &script);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .unwrap_or_else(|| panic!("ibv_devinfo shows no {name}"))
            .trim()
            .to_string()
    };
    assert_eq!(field("node_guid:"), value(&out, "guid"));
    assert_eq!(field("fw_ver:"), value(&out, "fw"));
    // The port's width and speed are its link's (lo: unknown, 1000 Mb/s,
    // 1X SDR), the same in the verbs and in sysfs.
    assert_eq!(field("active_width:"), "1X (1)");
    assert_eq!(field("active_speed:"), "2.5 Gbps (1)");
    assert_eq!(value(&out, "rate"), "2.5 Gb/sec (1X SDR)");
    // ibv_devinfo -v prints "GID[  0]:  ::ffff:127.0.9.1, RoCE v2" (IPv4-mapped form).
    let gid_line = field("GID[  0]:");
    assert!(
        gid_line.contains("127.0.9.1") && gid_line.contains("RoCE v2"),
        "{gid_line}"
    );
}

#[test]
fn no_namespace_sets_only_the_library_path() {
    let Some(lib) = lib_dir() else { return };
    if Path::new("/dev/infiniband").exists() {
        eprintln!("skipping: this host has /dev/infiniband of its own");
        return;
    }
    let script = "echo path=$LD_LIBRARY_PATH; if test -e /dev/infiniband; then echo dev=present; else echo dev=absent; fi";
    let out = exec_sh(&lib, &[], &["--no-namespace"], script);
    assert!(out.status.success());
    let want = std::fs::canonicalize(&lib).unwrap();
    assert!(value(&out, "path").starts_with(&want.display().to_string()));
    assert_eq!(value(&out, "dev"), "absent");
}

#[test]
fn refusals_say_why() {
    let out = Command::new("timeout")
        .args([
            "20",
            BIN,
            "exec",
            "--lib-dir",
            "/nonexistent-softverbs",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(127));
    assert!(
        err.contains("no libibverbs.so.1 in /nonexistent-softverbs"),
        "{err}"
    );

    // A kernel that forbids (more) user namespaces: the limit set to 0 inside
    // a user namespace of our own (the sysctl is per namespace).
    let Some(lib) = lib_dir() else { return };
    if !have("unshare") {
        return;
    }
    let script = format!(
        "echo 0 > /proc/sys/user/max_user_namespaces && exec {BIN} exec --lib-dir {} -- true",
        lib.display()
    );
    let out = Command::new("timeout")
        .args([
            "20",
            "unshare",
            "--user",
            "--map-root-user",
            "sh",
            "-c",
            &script,
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(127), "{err}");
    assert!(
        err.contains("forbids unprivileged user namespaces"),
        "{err}"
    );
    assert!(
        err.contains("user.max_user_namespaces") && err.contains("--no-namespace"),
        "{err}"
    );
}

/// UCX finds the device only through the view: rc_verbs and ud_verbs on softverbs0:1.
#[test]
fn ucx_info_lists_the_device() {
    let Some(lib) = lib_dir() else { return };
    if !have("ucx_info") {
        return;
    }
    let out = exec_sh(&lib, &[], &[], "ucx_info -d");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let section = text
        .split("# Memory domain:")
        .find(|s| s.trim_start().starts_with("softverbs0"))
        .expect("ucx_info -d lists no softverbs0 memory domain");
    for tl in ["rc_verbs", "ud_verbs"] {
        assert!(
            section.contains(&format!("Transport: {tl}")),
            "no {tl} on softverbs0:\n{section}"
        );
    }
    assert!(section.contains("Device: softverbs0:1"));
}

/// Records in a pcap file (24-byte file header, then 16-byte record headers
/// each followed by `incl_len` bytes).
fn pcap_records(path: &Path) -> usize {
    let bytes = std::fs::read(path).unwrap_or_default();
    let (mut at, mut n) = (24, 0);
    while at + 16 <= bytes.len() {
        let incl = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        at += 16 + incl;
        n += 1;
    }
    n
}

/// ucx_perftest between two processes, each under `softverbs exec` on an
/// address of its own, UCX restricted to rc_verbs and ud_verbs (no shared
/// memory, no TCP): the test completes and every process's capture shows the
/// traffic went through softverbs.
fn ucx_perftest(test: &str, addrs: [&str; 2], port: u16) {
    ucx_perftest_in(test, &[], addrs, port, [None, None], "127.0.0.1");
}

/// [`ucx_perftest`], each side optionally in a network namespace, the client
/// reaching the server's out-of-band port at `server`.
fn ucx_perftest_in(
    test: &str,
    extra: &[&str],
    addrs: [&str; 2],
    port: u16,
    netns: [Option<&str>; 2],
    server_ip: &str,
) -> Option<Vec<Vec<u8>>> {
    let lib = lib_dir()?;
    if !have("ucx_perftest") {
        return None;
    }
    const ITERS: usize = 500;
    let dir = std::env::temp_dir().join(format!(
        "softverbs-ucx-{test}-{}-{}",
        addrs[0],
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let run = |addr: &str, peer: Option<&str>, ns: Option<&str>| {
        let mut c = Command::new("timeout");
        c.arg("60");
        if let Some(ns) = ns {
            c.args(["ip", "netns", "exec", ns]);
        }
        c.args([BIN, "exec", "--lib-dir"])
            .arg(&lib)
            .args(["--", "ucx_perftest", "-t", test, "-n", &ITERS.to_string()])
            .args(["-p", &port.to_string()])
            .args(extra)
            .args(peer)
            .env("SOFTVERBS_ADDR", addr)
            .env("SOFTVERBS_PCAP", dir.join(format!("{addr}.pcap")))
            .env("UCX_TLS", "rc_verbs,ud_verbs")
            .env("UCX_NET_DEVICES", "softverbs0:1")
            .current_dir("/");
        c
    };
    let server = run(addrs[0], None, netns[0])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The server listens on its out-of-band port once it has started: until
    // then the client's connect is refused (ucx_perftest says so on stdout),
    // and it tries again (bounded).
    let mut client = run(addrs[1], Some(server_ip), netns[1]).output().unwrap();
    for _ in 0..40 {
        if client.status.success()
            || !String::from_utf8_lossy(&client.stdout).contains("Connection refused")
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
        client = run(addrs[1], Some(server_ip), netns[1]).output().unwrap();
    }
    let server = server.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&client.stdout);
    eprintln!("{text}{}", String::from_utf8_lossy(&client.stderr));
    assert!(
        client.status.success() && server.status.success(),
        "{test}: {:?} {:?}",
        client.status,
        server.status
    );
    assert!(text.contains("Final:"), "{test}: no result line");
    let mut opcodes = Vec::new();
    for addr in addrs {
        let path = dir.join(format!("{addr}.pcap"));
        let n = pcap_records(&path);
        assert!(
            n >= ITERS,
            "{test}: only {n} RoCE datagrams captured on {addr}"
        );
        opcodes.push(pcap_bth_opcodes(&path));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Some(opcodes)
}

/// The BTH opcode of each IPv4 RoCEv2 record of a capture.
fn pcap_bth_opcodes(path: &Path) -> Vec<u8> {
    pcap_bths(path)
        .iter()
        .filter_map(|b| b.first().copied())
        .collect()
}

/// The BTH (12 bytes, or fewer if cut) of each IPv4 RoCEv2 record of a capture.
fn pcap_bths(path: &Path) -> Vec<Vec<u8>> {
    pcap_roce(path).into_iter().map(|r| r.bth).collect()
}

/// One IPv4 RoCEv2 record of a capture: its IP addresses and BTH.
struct RoceRecord {
    src: [u8; 4],
    dst: [u8; 4],
    /// The BTH, 12 bytes (fewer if cut).
    bth: Vec<u8>,
}

impl RoceRecord {
    /// Reliable-connection opcodes (0x00..=0x1f): the ones softverbs retransmits.
    fn is_rc(&self) -> bool {
        self.bth.len() == 12 && self.bth[0] < 0x20
    }

    /// What identifies one transmission of an RC packet: addresses, opcode,
    /// destination QP and PSN.
    fn rc_key(&self) -> ([u8; 4], [u8; 4], u8, [u8; 3], [u8; 3]) {
        let b = &self.bth;
        (
            self.src,
            self.dst,
            b[0],
            [b[5], b[6], b[7]],
            [b[9], b[10], b[11]],
        )
    }
}

/// The IPv4 RoCEv2 records of a capture (Ethernet, IPv4, UDP, then the BTH).
fn pcap_roce(path: &Path) -> Vec<RoceRecord> {
    let bytes = std::fs::read(path).unwrap_or_default();
    let (mut at, mut out) = (24, Vec::new());
    while at + 16 <= bytes.len() {
        let incl = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        let frame = &bytes[(at + 16).min(bytes.len())..(at + 16 + incl).min(bytes.len())];
        if frame.len() > 34 && frame[12..14] == [0x08, 0x00] {
            let ihl = usize::from(frame[14] & 0xf) * 4;
            let bth = 14 + ihl + 8;
            if bth < frame.len() {
                out.push(RoceRecord {
                    src: frame[26..30].try_into().unwrap(),
                    dst: frame[30..34].try_into().unwrap(),
                    bth: frame[bth..frame.len().min(bth + 12)].to_vec(),
                });
            }
        }
        at += 16 + incl;
    }
    out
}

/// UCT-level fetch-and-add on rc_verbs: the captures show real RDMA atomics
/// (FETCH_ADD, opcode 0x14, answered by ATOMIC_ACKNOWLEDGE, 0x12).
#[test]
fn ucx_atomic_fetch_add_is_an_rdma_atomic() {
    let port = 35000 + (std::process::id() % 5000) as u16;
    let extra = ["-d", "softverbs0:1", "-x", "rc_verbs"];
    let addrs = ["127.0.9.41", "127.0.9.42"];
    let Some(ops) = ucx_perftest_in("fadd", &extra, addrs, port, [None, None], "127.0.0.1") else {
        return;
    };
    let count = |op: u8| ops.iter().flatten().filter(|&&o| o == op).count();
    assert!(count(0x14) >= 500, "FETCH_ADD requests: {}", count(0x14));
    assert!(
        count(0x12) >= 500,
        "ATOMIC_ACKNOWLEDGE responses: {}",
        count(0x12)
    );
}

#[test]
fn ucx_tag_latency_over_softverbs() {
    ucx_perftest(
        "tag_lat",
        ["127.0.9.21", "127.0.9.22"],
        20000 + (std::process::id() % 5000) as u16,
    );
}

#[test]
fn ucx_put_bandwidth_over_softverbs() {
    ucx_perftest(
        "ucp_put_bw",
        ["127.0.9.31", "127.0.9.32"],
        25000 + (std::process::id() % 5000) as u16,
    );
}

/// Open MPI 4.1 with `--mca pml ucx`, 4 ranks under one `softverbs exec` (one
/// "host": the ranks share its address), UCX on rc_verbs/ud_verbs only: the
/// ping-pong runs, the allreduce is right, and every rank's capture shows its
/// traffic went through softverbs.
#[test]
fn open_mpi_job_on_one_shared_address() {
    let Some(captures) = mpi_job("plain", None, &[], 1000) else {
        return;
    };
    let records: Vec<usize> = captures.iter().map(Vec::len).collect();
    assert!(
        records.iter().sum::<usize>() >= 4000,
        "the ping-pong went through softverbs: {records:?}"
    );
}

/// Open MPI 4.1 with `--mca pml ucx`, 4 ranks as 2 "hosts" (network namespaces
/// joined by a veth pair) x 2 ranks sharing the namespace's address, UCX on
/// rc_verbs/ud_verbs only: the ping-pong (rank 0 on one host, rank 1 on the
/// other) and the allreduce are right, and the captures show the ping-pong
/// crossing between the hosts' addresses through softverbs.
#[test]
fn open_mpi_job_on_two_hosts() {
    const ITERS: usize = 200;
    let Some((_ns, captures)) = two_host_mpi_job("hosts", &[], ITERS) else {
        return;
    };
    let between = inter_host_records(&captures);
    assert!(
        between >= 4 * ITERS,
        "the ping-pong crossed between the hosts through softverbs: {between} records"
    );
}

/// The two-host job with 2% of the datagrams every device receives lost: the
/// results are still right (the ranks check the ping-pong's data and the
/// allreduce), and the captures (recorded before the receive faults) show RC
/// packets arriving twice: the retransmissions that repaired the losses.
#[test]
fn open_mpi_job_on_two_hosts_under_loss() {
    const ITERS: usize = 200;
    let faults = [("SOFTVERBS_FAULTS", "loss=0.02,seed=5,dir=rx")];
    let Some((_ns, captures)) = two_host_mpi_job("loss", &faults, ITERS) else {
        return;
    };
    let between = inter_host_records(&captures);
    assert!(between >= 4 * ITERS, "{between} inter-host records");
    let retransmitted: usize = captures.iter().map(|c| rc_repeats(c)).sum();
    assert!(
        retransmitted > 0,
        "no RC packet was received twice: the losses were not repaired by retransmission"
    );
    eprintln!("RC packets received again after a loss: {retransmitted}");
}

/// RC packets of a capture seen more than once (same addresses, opcode,
/// destination QP and PSN): retransmissions.
fn rc_repeats(capture: &[RoceRecord]) -> usize {
    let mut seen = std::collections::HashSet::new();
    capture
        .iter()
        .filter(|r| r.is_rc() && !seen.insert(r.rc_key()))
        .count()
}

/// Records of the captures that went from one namespace's address to the other's.
fn inter_host_records(captures: &[Vec<RoceRecord>]) -> usize {
    let ip = |s: &str| s.parse::<std::net::Ipv4Addr>().unwrap().octets();
    let (a, b) = (ip(Netns::ADDRS[0]), ip(Netns::ADDRS[1]));
    captures
        .iter()
        .flatten()
        .filter(|r| (r.src, r.dst) == (a, b) || (r.src, r.dst) == (b, a))
        .count()
}

/// [`mpi_job`] on two fresh network namespaces; the namespaces are returned so
/// they outlive the checks of the captures.
fn two_host_mpi_job(
    tag: &str,
    env: &[(&str, &str)],
    iters: usize,
) -> Option<(Netns, Vec<Vec<RoceRecord>>)> {
    if !have("ip") || !have("unshare") {
        return None;
    }
    let Some(ns) = Netns::create() else {
        eprintln!("skipping: network namespaces need root");
        return None;
    };
    let captures = mpi_job(tag, Some(&ns), env, iters)?;
    Some((ns, captures))
}

/// One MPI job at a time: each keeps 4 ranks polling.
static MPI_JOBS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The `plm_rsh_agent` of a two-host job: mpirun calls it as `AGENT HOST
/// COMMAND...` (as it would call ssh) and it runs COMMAND (an orted) in HOST's
/// network namespace, with HOST as its hostname (UTS namespace), under
/// `softverbs exec` on the namespace's address. No ssh, no tree spawn.
fn rsh_agent(ns: &Netns, lib: &Path) -> String {
    format!(
        r#"#!/bin/sh
host=$1; shift
case $host in
  hostA) ns={} addr={} ;;
  hostB) ns={} addr={} ;;
  *) echo "no such host: $host" >&2; exit 1 ;;
esac
exec ip netns exec "$ns" unshare --uts sh -c \
  'hostname "$0" && export SOFTVERBS_ADDR="$1" && exec "$2" exec --lib-dir "$3" -- sh -c "$4"' \
  "$host" "$addr" {BIN} {} "$*"
"#,
        ns.names[0],
        Netns::ADDRS[0],
        ns.names[1],
        Netns::ADDRS[1],
        lib.display()
    )
}

/// Runs the 4-rank ping-pong + allreduce job (`iters` round trips between
/// ranks 0 and 1) with `env` added: under one `softverbs exec` (`ns` None: the
/// ranks share its address) or on the two namespaces of `ns` (2 ranks each,
/// ranks 0 and 1 on different hosts). Checks that it succeeded with the right
/// allreduce; returns each rank's capture.
fn mpi_job(
    tag: &str,
    ns: Option<&Netns>,
    env: &[(&str, &str)],
    iters: usize,
) -> Option<Vec<Vec<RoceRecord>>> {
    let lib = lib_dir()?;
    if !have("mpirun") || !have("mpicc") {
        return None;
    }
    let _one_at_a_time = MPI_JOBS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = std::env::temp_dir().join(format!("softverbs-mpi-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mpi/pingpong.c");
    let exe = dir.join("pingpong");
    let cc = Command::new("timeout")
        .args(["120", "mpicc", "-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "mpicc: {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let mut cmd = Command::new("timeout");
    cmd.arg("120");
    match ns {
        None => {
            cmd.args([BIN, "exec", "--lib-dir"]).arg(&lib).args([
                "--",
                "mpirun",
                "--allow-run-as-root",
                "--oversubscribe",
                "-np",
                "4",
            ]);
        }
        Some(ns) => {
            let agent = dir.join("rsh-agent");
            std::fs::write(&agent, rsh_agent(ns, &lib)).unwrap();
            std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
            let subnet = format!("{}/24", Netns::ADDRS[0]);
            cmd.args(["ip", "netns", "exec", &ns.names[0]])
                .args([
                    "mpirun",
                    "--allow-run-as-root",
                    "--oversubscribe",
                    "-np",
                    "4",
                ])
                .args(["--host", "hostA:2,hostB:2", "--map-by", "node"])
                .arg("--mca")
                .arg("plm_rsh_agent")
                .arg(&agent)
                .args(["--mca", "plm_rsh_no_tree_spawn", "1"])
                // The two "hosts" share this machine's cores: the ranks are
                // oversubscribed, which mpirun cannot see from the host list
                // (it tells ranks it forks itself). Without yielding, polling
                // ranks starve their devices' threads: ping-pong round trips
                // of tens of ms instead of hundreds of us.
                .args(["--mca", "mpi_yield_when_idle", "1"])
                .args(["--mca", "oob_tcp_if_include", &subnet]);
        }
    }
    cmd.args([
        "--mca",
        "pml",
        "ucx",
        "--mca",
        "btl",
        "^vader,tcp,openib,uct",
    ])
    .args(["--mca", "osc", "^ucx"])
    .args([
        "-x",
        "UCX_TLS",
        "-x",
        "UCX_NET_DEVICES",
        "-x",
        "SOFTVERBS_PCAP",
    ]);
    for (k, _) in env {
        cmd.args(["-x", k]);
    }
    let out = cmd
        .arg(&exe)
        .arg(iters.to_string())
        .envs(env.iter().copied())
        .env_remove("SOFTVERBS_ADDR")
        .env("SOFTVERBS_PCAP", dir.join("%p.pcap"))
        .env("UCX_TLS", "rc_verbs,ud_verbs")
        .env("UCX_NET_DEVICES", "softverbs0:1")
        .current_dir("/")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "mpirun: {:?}", out.status);
    assert!(
        text.contains("allreduce 10 (expect 10)"),
        "allreduce result"
    );
    let captures: Vec<Vec<RoceRecord>> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "pcap"))
        .map(|e| pcap_roce(&e.path()))
        .collect();
    assert_eq!(captures.len(), 4, "one capture per rank");
    let records: Vec<usize> = captures.iter().map(Vec::len).collect();
    assert!(
        records.iter().all(|&n| n > 0),
        "every rank used softverbs: {records:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Some(captures)
}

/// ucx_perftest tag latency between two "hosts": network namespaces joined by
/// a veth pair, each process on its namespace's address.
#[test]
fn ucx_tag_latency_between_two_network_namespaces() {
    if !have("ip") {
        return;
    }
    let Some(ns) = Netns::create() else {
        eprintln!("skipping: network namespaces need root");
        return;
    };
    let names = [Some(ns.names[0].as_str()), Some(ns.names[1].as_str())];
    let port = 30000 + (std::process::id() % 5000) as u16;
    ucx_perftest_in("tag_lat", &[], Netns::ADDRS, port, names, Netns::ADDRS[0]);
}

/// libfabric's verbs provider lists a device's MSG (rdma_cm) domain only for
/// an address of a non-loopback interface (prov/verbs `vrb_getifaddrs` skips
/// `IFF_LOOPBACK`; spec/libfabric.md): on a namespace's veth address
/// `fi_info` shows `softverbs0` as an FI_EP_MSG domain over rdma_cm and,
/// through ofi_rxm, as FI_EP_RDM; on a loopback address only the datagram
/// domain `softverbs0-dgram`.
#[test]
fn libfabric_lists_the_devices_domains() {
    let Some(lib) = lib_dir() else { return };
    if !have("fi_info") || !have("ip") {
        return;
    }
    let on_lo = exec_sh(&lib, &[], &[], "fi_info -p verbs");
    assert!(on_lo.status.success(), "fi_info on loopback");
    let text = String::from_utf8_lossy(&on_lo.stdout);
    assert!(text.contains("domain: softverbs0-dgram"), "{text}");
    assert!(!text.contains("FI_EP_MSG"), "{text}");
    let Some(ns) = Netns::create() else {
        eprintln!("skipping: network namespaces need root");
        return;
    };
    let fi_info = |prov: &str, extra: &[&str]| {
        let out = Command::new("timeout")
            .args([
                "60",
                "ip",
                "netns",
                "exec",
                &ns.names[0],
                BIN,
                "exec",
                "--lib-dir",
            ])
            .arg(&lib)
            .args(["--", "fi_info", "-p", prov])
            .args(extra)
            .env("SOFTVERBS_ADDR", Netns::ADDRS[0])
            .current_dir("/")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        eprintln!("{text}{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "fi_info -p {prov}");
        text
    };
    let text = fi_info("verbs", &[]);
    let msg = text
        .split("provider: ")
        .find(|s| s.contains("type: FI_EP_MSG"))
        .expect("no FI_EP_MSG entry");
    assert!(msg.contains("domain: softverbs0\n"), "{msg}");
    assert!(msg.contains("protocol: FI_PROTO_RDMA_CM_IB_RC"), "{msg}");
    assert!(text.contains("domain: softverbs0-dgram"), "{text}");
    // ofi_rxm asks for MSG endpoints: with no source address the verbs
    // provider binds "localhost", which no RDMA device owns (ENODEV, as on a
    // kernel RDMA stack); given the device's address, it answers.
    let text = fi_info("verbs;ofi_rxm", &["-s", Netns::ADDRS[0]]);
    let rdm = text
        .split("provider: ")
        .find(|s| s.starts_with("verbs;ofi_rxm") && s.contains("type: FI_EP_RDM"))
        .expect("no verbs;ofi_rxm FI_EP_RDM entry");
    assert!(rdm.contains("domain: softverbs0\n"), "{rdm}");
}

/// `fi_pingpong` (libfabric-bin) between the two namespaces of `ns`, server
/// on the first, each under `softverbs exec` on its namespace's address, with
/// data checks (`-c`); returns each side's capture. fi_pingpong 1.17 has no
/// source-address option: its verbs server binds "localhost" (prov/verbs
/// `vrb_get_rdmacm_rai`), which names the device's address in the server's
/// mount namespace here, as it must on any host (spec/libfabric.md).
fn fi_pingpong(
    ns: &Netns,
    lib: &Path,
    tag: &str,
    args: &[&str],
    iters: usize,
) -> Vec<Vec<RoceRecord>> {
    let dir = std::env::temp_dir().join(format!("softverbs-fabric-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let hosts = dir.join("hosts");
    std::fs::write(&hosts, format!("{} localhost\n", Netns::ADDRS[0])).unwrap();
    let run = |side: usize, peer: Option<&str>| {
        let mut c = Command::new("timeout");
        c.args([
            "60",
            "ip",
            "netns",
            "exec",
            &ns.names[side],
            "unshare",
            "--mount",
            "sh",
            "-c",
        ])
        .arg(r#"mount --bind "$0" /etc/hosts && exec "$@""#)
        .arg(&hosts)
        .args([BIN, "exec", "--lib-dir"])
        .arg(lib)
        .args(["--", "fi_pingpong", "-I", &iters.to_string(), "-c"])
        .args(args)
        .args(peer)
        .env("SOFTVERBS_ADDR", Netns::ADDRS[side])
        .env("SOFTVERBS_PCAP", dir.join(format!("{side}.pcap")))
        .current_dir("/");
        c
    };
    let server = run(0, None)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The server's control port opens once it has started: until then the
    // client's connect is refused, and it tries again (bounded).
    let mut client = run(1, Some(Netns::ADDRS[0])).output().unwrap();
    for _ in 0..40 {
        if client.status.success()
            || !String::from_utf8_lossy(&client.stderr).contains("Connection refused")
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
        client = run(1, Some(Netns::ADDRS[0])).output().unwrap();
    }
    let server = server.wait_with_output().unwrap();
    for (side, out) in [("server", &server), ("client", &client)] {
        let text = String::from_utf8_lossy(&out.stdout);
        eprintln!(
            "{side}: {:?}\n{text}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{tag}: the {side} failed");
        // "bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec", then one
        // line per size: every message sent was acknowledged.
        let result = text
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(&iters.to_string()))
            .unwrap_or_else(|| panic!("{tag}: no result line from the {side}"));
        assert_eq!(
            result.split_whitespace().nth(2),
            Some(format!("={iters}").as_str()),
            "{tag}: {result}"
        );
    }
    let captures = (0..2)
        .map(|side| pcap_roce(&dir.join(format!("{side}.pcap"))))
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    captures
}

/// `fi_pingpong -p verbs -e msg`: MSG endpoints connected by rdma_cm (our
/// librdmacm), between two network namespaces, data checked; the captures
/// show the ping-pong crossing between the namespaces' addresses as RC.
#[test]
fn libfabric_msg_pingpong_between_two_network_namespaces() {
    const ITERS: usize = 200;
    let Some(lib) = lib_dir() else { return };
    if !have("fi_pingpong") || !have("ip") || !have("unshare") {
        return;
    }
    let Some(ns) = Netns::create() else {
        eprintln!("skipping: network namespaces need root");
        return;
    };
    let args = ["-p", "verbs", "-e", "msg", "-S", "4096"];
    let captures = fi_pingpong(&ns, &lib, "msg", &args, ITERS);
    let between = inter_host_records(&captures);
    assert!(between >= 2 * ITERS, "{between} inter-host records");
    let rc = captures.iter().flatten().filter(|r| r.is_rc()).count();
    assert!(rc >= 2 * ITERS, "{rc} RC records");
}

/// `fi_pingpong -p "verbs;ofi_rxm" -e rdm`: reliable datagram endpoints
/// (ofi_rxm over verbs MSG endpoints it connects itself through rdma_cm),
/// between two network namespaces, data checked, through softverbs.
#[test]
fn libfabric_rdm_pingpong_between_two_network_namespaces() {
    const ITERS: usize = 200;
    let Some(lib) = lib_dir() else { return };
    if !have("fi_pingpong") || !have("ip") || !have("unshare") {
        return;
    }
    let Some(ns) = Netns::create() else {
        eprintln!("skipping: network namespaces need root");
        return;
    };
    let args = ["-p", "verbs;ofi_rxm", "-e", "rdm", "-S", "4096"];
    let captures = fi_pingpong(&ns, &lib, "rdm", &args, ITERS);
    let between = inter_host_records(&captures);
    assert!(between >= 2 * ITERS, "{between} inter-host records");
}

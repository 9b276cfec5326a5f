//! `softverbs exec`: the device's identity in a private user + mount namespace,
//! as the caller and as an unprivileged user; the host left unchanged; real
//! programs (ibv_devinfo, ucx_info) finding the device through it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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
    assert_eq!(value(out, "rate"), "100 Gb/sec (4X EDR)");
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

/// The BTH (12 bytes, or fewer if cut) of each IPv4 RoCEv2 record of a capture
/// (Ethernet, IPv4, UDP, then the BTH).
fn pcap_bths(path: &Path) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(path).unwrap_or_default();
    let (mut at, mut out) = (24, Vec::new());
    while at + 16 <= bytes.len() {
        let incl = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        let frame = &bytes[(at + 16).min(bytes.len())..(at + 16 + incl).min(bytes.len())];
        if frame.len() > 14 && frame[12..14] == [0x08, 0x00] {
            let ihl = usize::from(frame[14] & 0xf) * 4;
            let bth = 14 + ihl + 8;
            if bth < frame.len() {
                out.push(frame[bth..frame.len().min(bth + 12)].to_vec());
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
    let Some(captures) = mpi_job("plain", &[]) else {
        return;
    };
    let records: Vec<usize> = captures.iter().map(Vec::len).collect();
    assert!(
        records.iter().all(|&n| n > 0),
        "every rank used softverbs: {records:?}"
    );
    assert!(
        records.iter().sum::<usize>() >= 4000,
        "the ping-pong went through softverbs: {records:?}"
    );
}

/// Runs the 4-rank job under one `softverbs exec` with `env` added; the BTHs
/// (first 12 bytes of each RoCE payload) of each rank's capture.
fn mpi_job(tag: &str, env: &[(&str, &str)]) -> Option<Vec<Vec<Vec<u8>>>> {
    let lib = lib_dir()?;
    if !have("mpirun") || !have("mpicc") {
        return None;
    }
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
    let out = Command::new("timeout")
        .args(["120", BIN, "exec", "--lib-dir"])
        .arg(&lib)
        .args([
            "--",
            "mpirun",
            "--allow-run-as-root",
            "--oversubscribe",
            "-np",
            "4",
        ])
        .args([
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
        ])
        .arg(&exe)
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
    let captures: Vec<Vec<Vec<u8>>> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "pcap"))
        .map(|e| pcap_bths(&e.path()))
        .collect();
    assert_eq!(captures.len(), 4, "one capture per rank");
    let _ = std::fs::remove_dir_all(&dir);
    Some(captures)
}

/// Two network namespaces joined by a veth pair (deleted on drop).
struct Netns {
    names: [String; 2],
}

impl Netns {
    const ADDRS: [&'static str; 2] = ["10.78.0.1", "10.78.0.2"];

    fn create() -> Option<Netns> {
        let ip = |args: &[&str]| {
            let o = Command::new("timeout")
                .arg("20")
                .arg("ip")
                .args(args)
                .output();
            o.is_ok_and(|o| o.status.success())
        };
        let pid = std::process::id();
        let ns = Netns {
            names: [format!("svxA{pid}"), format!("svxB{pid}")],
        };
        if !ip(&["netns", "add", &ns.names[0]]) {
            return None; // not root: no namespaces here
        }
        let (a, b) = (ns.names[0].as_str(), ns.names[1].as_str());
        let (va, vb) = (format!("svxa{pid}"), format!("svxb{pid}"));
        let (aa, ab) = (
            format!("{}/24", Self::ADDRS[0]),
            format!("{}/24", Self::ADDRS[1]),
        );
        let steps: [&[&str]; 8] = [
            &["netns", "add", b],
            &[
                "link", "add", &va, "netns", a, "type", "veth", "peer", "name", &vb, "netns", b,
            ],
            &["-n", a, "addr", "add", &aa, "dev", &va],
            &["-n", b, "addr", "add", &ab, "dev", &vb],
            &["-n", a, "link", "set", &va, "up"],
            &["-n", b, "link", "set", &vb, "up"],
            &["-n", a, "link", "set", "lo", "up"],
            &["-n", b, "link", "set", "lo", "up"],
        ];
        for step in steps {
            assert!(ip(step), "ip {}", step.join(" "));
        }
        Some(ns)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("timeout")
                .args(["20", "ip", "netns", "delete", n])
                .output();
        }
    }
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

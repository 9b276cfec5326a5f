//! Open MPI 4.1 (`--mca pml ucx`) through `softverbs exec`, UCX on rc_verbs and
//! ud_verbs only: a ping-pong and an allreduce checked for their results, with
//! 4 ranks on one shared address, as 2 "hosts" (network namespaces joined by a
//! veth pair) x 2 ranks, and the same under loss.

use std::path::Path;
use std::process::Command;

mod common;
use common::pcap::{inter_host_records, pcap_roce, rc_repeats, RoceRecord};
use common::{have, lib_dir, two_hosts, BIN, HOSTS};
use testkit::Netns;

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
    let between = inter_host_records(&captures, HOSTS);
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
    let between = inter_host_records(&captures, HOSTS);
    assert!(between >= 4 * ITERS, "{between} inter-host records");
    let retransmitted: usize = captures.iter().map(|c| rc_repeats(c)).sum();
    assert!(
        retransmitted > 0,
        "no RC packet was received twice: the losses were not repaired by retransmission"
    );
    eprintln!("RC packets received again after a loss: {retransmitted}");
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
    let Some(ns) = two_hosts() else {
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
        HOSTS[0],
        ns.names[1],
        HOSTS[1],
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
            let subnet = format!("{}/24", HOSTS[0]);
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

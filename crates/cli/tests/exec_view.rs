//! `softverbs exec`: the device's identity in a private user + mount namespace,
//! as the caller and as an unprivileged user; the host left unchanged;
//! ibv_devinfo (through the verbs) agreeing with the view; the refusals.

use std::path::Path;
use std::process::{Command, Output};

mod common;
use common::{exec_sh, have, lib_dir, value, BIN, GID0};

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

//! RAW_PACKET QPs and flow steering through the C ABI
//! (`tests/c/raw_checks.c`): EPERM without CAP_NET_RAW (as user nobody,
//! setpriv); as root, the seed's modify rows, the refusals, and a frame sent
//! on the loopback interface delivered back through a flow, whole, while a
//! frame the flow does not match is not.

mod common;

use std::process::Command;

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn run(prefix: &[&str], exe: &std::path::Path, mode: &str, addr: &str) -> std::process::Output {
    Command::new("timeout")
        .arg("60")
        .args(prefix)
        .arg(exe)
        .arg(mode)
        .env("LD_LIBRARY_PATH", common::lib_dir())
        .env("SOFTVERBS_ADDR", addr)
        .env("SOFTVERBS_LOG", "warn")
        .output()
        .unwrap()
}

fn assert_ok(o: &std::process::Output) {
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && stdout.trim() == "ok",
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn raw_packet_through_the_c_abi() {
    if !common::have_verbs_h() {
        return;
    }
    if !is_root() || !have("setpriv") {
        eprintln!("skipping: needs root (for CAP_NET_RAW) and setpriv");
        return;
    }
    let exe = common::compile_c("raw_checks");
    let o = run(&[], &exe, "root", "127.33.0.1");
    assert_ok(&o);
    let nobody = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
    ];
    let o = run(&nobody, &exe, "eperm", "127.33.0.2");
    assert_ok(&o);
    let _ = std::fs::remove_file(&exe);
}

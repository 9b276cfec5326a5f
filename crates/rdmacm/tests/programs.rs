//! Unmodified Debian programs (rdmacm-utils 44.0) through the drop-in
//! librdmacm.so.1 and libibverbs.so.1: every one binds (they are linked
//! BIND_NOW, so a missing symbol or version node stops them at load), and the
//! clients run address resolution, route resolution and QP creation on
//! softverbs, then stop at `rdma_connect`, which answers ENOSYS until the CM
//! protocol is attached (the reason is logged). (`rping -c` gets there too,
//! but then cancels its CQ thread blocked in `ibv_get_cq_event`, which
//! softverbs' libibverbs does not yet let a pthread_cancel interrupt, so it
//! is left out until it can exit.)

mod common;

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    // Bounded: a hang is a failure, not a stuck suite.
    Command::new("timeout")
        .arg("30")
        .args(args)
        .env("LD_LIBRARY_PATH", common::lib_dir())
        .env("SOFTVERBS_LOG", "warn")
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn every_rdmacm_utils_program_binds() {
    for prog in [
        "ucmatose",
        "rdma_client",
        "rdma_server",
        "rdma_xclient",
        "rdma_xserver",
        "rping",
        "udaddy",
        "mckey",
        "cmtime",
        "riostream",
        "rstream",
        "rcopy",
        "udpong",
    ] {
        if !common::have(prog) {
            return;
        }
        let out = run(&[prog, "-h"]);
        let t = text(&out);
        assert_ne!(out.status.code(), Some(127), "{prog} did not load:\n{t}");
        assert!(
            !t.contains("symbol lookup error") && !t.contains("not found"),
            "{prog}: loader error:\n{t}"
        );
        assert!(
            t.to_lowercase().contains("usage") || t.contains(&format!("{prog} -")),
            "{prog} -h printed no usage:\n{t}"
        );
    }
}

/// Runs a client against 127.0.0.1 and checks it got as far as `rdma_connect`.
fn reaches_connect(args: &[&str], progress: &str) {
    if !common::have(args[0]) {
        return;
    }
    let out = run(args);
    let t = text(&out);
    assert!(
        t.contains(progress),
        "{args:?} did not reach {progress:?}:\n{t}"
    );
    assert!(
        t.contains("rdma_connect refused (ENOSYS): connection management (IBTA CM MADs on QP1) is not attached"),
        "{args:?}: the refusal is not logged:\n{t}"
    );
    // Nothing before rdma_connect was refused.
    let refusals: Vec<&str> = t
        .lines()
        .filter(|l| l.contains(" refused (") && !l.contains("rdma_connect refused"))
        .collect();
    assert!(
        refusals.is_empty(),
        "{args:?}: unexpected refusals:\n{}",
        refusals.join("\n")
    );
    assert!(
        !out.status.success(),
        "{args:?} cannot succeed without a CM"
    );
}

#[test]
fn ucmatose_client_resolves_creates_its_qp_and_stops_at_connect() {
    reaches_connect(
        &["ucmatose", "-s", "127.0.0.1"],
        "cmatose: failure connecting: Function not implemented",
    );
}

#[test]
fn udaddy_client_resolves_creates_its_ud_qp_and_stops_at_connect() {
    reaches_connect(
        &["udaddy", "-s", "127.0.0.1"],
        "udaddy: failure connecting: Function not implemented",
    );
}

#[test]
fn rdma_client_creates_its_endpoint_and_stops_at_connect() {
    reaches_connect(
        &["rdma_client", "-s", "127.0.0.1"],
        "rdma_connect: Function not implemented",
    );
}

//! What NCCL's IB transport needs of libibverbs (spec/nccl.md), checked the
//! way NCCL loads it: a C program with no link-time dependency on libibverbs
//! (`tests/c/nccl_checks.c`) dlopens "libibverbs.so" (NCCL tries it before
//! "libibverbs.so.1"), must get this library, resolves every verb NCCL needs
//! with `dlvsym(…, "IBVERBS_1.1")` and the optional newer ones at their own
//! versions, then makes NCCL's start-up calls through those pointers.

mod common;

use std::process::Command;

#[test]
fn nccl_resolves_every_verb_it_uses() {
    if !common::have_verbs_h() {
        return;
    }
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/c/nccl_checks.c");
    let exe = std::env::temp_dir().join(format!("softverbs-nccl-checks-{}", std::process::id()));
    let cc = Command::new("cc")
        .args(["-std=gnu11", "-Wall", "-Werror", "-O1", "-o"])
        .arg(&exe)
        .arg(src)
        .arg("-ldl")
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "cc nccl_checks.c failed:\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new("timeout")
        .arg("60")
        .arg(&exe)
        .env("LD_LIBRARY_PATH", common::lib_dir())
        .env("SOFTVERBS_LOG", "warn")
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&exe);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}{stderr}");
    assert!(out.status.success(), "nccl_checks failed ({})", out.status);
    assert_eq!(stdout.lines().last(), Some("ok"));
    for sym in [
        "ibv_query_ece@IBVERBS_1.10: yes",
        "ibv_reg_mr_iova2@IBVERBS_1.8: yes",
    ] {
        assert!(stdout.contains(sym), "{sym}");
    }
}

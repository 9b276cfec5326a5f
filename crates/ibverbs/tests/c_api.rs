//! A C program built against the system `<infiniband/verbs.h>` and linked to
//! this library (so its symbol versions are checked at link and load time)
//! drives the ABI as C programs do: bad input, every posting path of the
//! header, `ibv_cq_ex`, completion channels with poll(2), async events
//! (`tests/c/api_checks.c`).

mod common;

#[test]
fn c_program_drives_the_abi() {
    if !common::have_verbs_h() {
        return;
    }
    // Bounded: a hang is a failure, not a stuck suite.
    let out = common::run_c_program("api_checks");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "api_checks failed ({}):\n{stderr}",
        out.status
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    // Refusals are logged with their reason in words.
    assert!(
        stderr.contains("ibv_alloc_pd refused (EINVAL): the context pointer is NULL"),
        "log:\n{stderr}"
    );
    assert!(
        stderr.contains("DEST_QPN"),
        "the missing attribute is named:\n{stderr}"
    );
}

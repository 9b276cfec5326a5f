//! Completion timestamps through the C ABI (`tests/c/clock_checks.c`):
//! `hca_core_clock` and `completion_timestamp_mask` in
//! `ibv_query_device_ex`, the raw clock of `ibv_query_rt_values_ex`, and
//! `ibv_wc_read_completion_ts` / `_wallclock_ns` on an `ibv_cq_ex` created
//! with the timestamp flags: each completion's stamp lies between two
//! readings of the device clock, receive after send, wall clock near time(2).

mod common;

#[test]
fn completions_carry_the_device_clock() {
    if !common::have_verbs_h() {
        return;
    }
    let out = common::run_c_program("clock_checks");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.trim() == "ok",
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

//! Whether a wait interrupted by a signal resumes or fails with `EINTR`.
//!
//! rdma-core's blocking calls are a `read(2)` or `write(2)` on a kernel file
//! (`ibv_get_cq_event`, `ibv_get_async_event`, `rdma_get_cm_event`): the
//! kernel restarts them after a handler installed with `SA_RESTART`, and
//! otherwise they fail with `EINTR` (signal(7)). softverbs waits in
//! `poll(2)`, which the kernel never restarts, so after `EINTR` this decides
//! as the kernel would have: resume when every installed handler has
//! `SA_RESTART`, else fail. Which signal came is not known here, so a
//! process with one handler of each kind gets `EINTR` (qperf ends its tests
//! with a SIGALRM handler without `SA_RESTART` and relies on it).
//! Included by path in crates/rdmacm as well.

/// True when the interrupted wait should resume (see the module doc).
pub fn restart_after_signal() -> bool {
    // Signals a fault raises never interrupt a wait.
    const FAULTS: [libc::c_int; 5] = [
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGFPE,
        libc::SIGILL,
        libc::SIGTRAP,
    ];
    for sig in (1..=libc::SIGRTMAX()).filter(|s| !FAULTS.contains(s)) {
        // SAFETY: all-zero is a valid sigaction to be overwritten.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: queries (NULL new action) the disposition of one signal.
        if unsafe { libc::sigaction(sig, std::ptr::null(), &raw mut old) } != 0 {
            continue;
        }
        let handled = old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN;
        if handled && old.sa_flags & libc::SA_RESTART == 0 {
            return false;
        }
    }
    true
}

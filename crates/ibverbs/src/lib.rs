//! A drop-in `libibverbs.so.1`: the verbs C ABI of rdma-core 44 over softverbs.
//!
//! Programs built against rdma-core (ibv_rc_pingpong, perftest, pyverbs, …) load
//! this library instead of the system one, through `LD_LIBRARY_PATH=<dir>` or
//! `LD_PRELOAD=<dir>/libibverbs.so.1` (`scripts/build-ibverbs.sh` builds it).
//! Every public symbol and version node of the real library is exported
//! (`exports.txt`), the context is an extended `verbs_context` so the header's
//! inline functions (`ibv_post_send`, `ibv_poll_cq`, `ibv_create_qp_ex`,
//! `ibv_wr_*`, `ibv_start_poll`, …) reach this code, and each function reports
//! errors the way rdma-core documents for it (return value or errno). A refused
//! call is logged with its reason in words when `SOFTVERBS_LOG=warn` (or finer).
//!
//! Objects handed to C are `repr(C)` blocks: the public verbs struct first, then
//! a magic word and the softverbs object behind it. Every entry point checks the
//! pointer (NULL, magic) before use, so a wrong or stale pointer gets `EINVAL`
//! instead of a crash whenever the memory is still mapped.
//!
//! # Layers
//!
//! A file imports only what sits below it, as drawn here (tests/layering.rs
//! checks the drawing against the imports). Each object's block sits in its
//! file with the calls on it; what two files share sits below both; what
//! must name many files (the context's ops tables, the QP's `ibv_wr_*`
//! builders that a new QP carries) sits above them.
//!
//! ```text
//! ops                 ibv_open_device: the context's ops tables; ibv_ack_async_event
//! qp::create          ibv_create_qp, create_qp_ex, open_qp (XRC_RECV), RSS QPs
//! wq                  WQs and RSS indirection tables (their receives post through post)
//! post                ibv_post_send/recv, ibv_bind_mw, the ibv_wr_* builders
//! flow                steering rules on a QP (ibv_create_flow)
//! qp                  the QP block and its ibv_wr_* batch; modify, query, destroy
//! srq  ah  dm         SRQs (XRC SRQs on xrc and cq); address handles; device memory
//! cq  memory  xrc     CQs; MRs and memory windows; XRC domains
//! domain  private     PDs, parent and thread domains (DomainHold); the private ABI
//! device              the device list and the device queries
//! context             the context block, its object registry, channels, async events
//! convert  misc  stubs    C structs <-> softverbs; the small exports
//! ffi  util  restart  private_abi    ground floor: C mirrors, errno, blocks
//! ```
#![allow(clippy::missing_safety_doc)] // C entry points: the man pages are the contract
#![allow(unsafe_code)] // the C-ABI crate (DESIGN.md §3.8); every block has a SAFETY line

pub mod ffi;

mod ah;
mod context;
mod convert;
mod cq;
mod device;
mod dm;
mod domain;
mod flow;
mod memory;
mod misc;
mod ops;
mod post;
mod private;
mod private_abi;
mod qp;
mod restart;
mod srq;
mod stubs;
mod util;
mod wq;
mod xrc;

/// Gives the exports a module defines their default versions (the
/// `.symver` directives build.rs generated for it from `exports.txt`). Not in
/// unit-test builds, which link without the version script.
macro_rules! symver {
    ($module:literal) => {
        #[cfg(not(test))]
        include!(concat!(env!("OUT_DIR"), "/symver_", $module, ".rs"));
    };
}
pub(crate) use symver;

//! A drop-in `librdmacm.so.1`: the RDMA connection manager API of rdma-core 44
//! (`<rdma/rdma_cma.h>`) for unmodified programs, over softverbs.
//!
//! Programs built against rdma-core load it instead of the system library
//! through `LD_LIBRARY_PATH=<dir>` (`scripts/build-ibverbs.sh` puts it beside
//! the drop-in libibverbs.so.1). Every default-version symbol and version node
//! of the real library is exported (`exports.txt`, checked against
//! spec/rdmacm-abi.md); each call reports errors as rdma-core documents (−1 and
//! `errno`, or the value the manual page names), and every refusal is logged
//! with its reason in words when `SOFTVERBS_LOG=warn` (or finer).
//!
//! # One engine per process
//! A process has one softverbs engine, and `id->verbs` must be the very
//! `ibv_context` our libibverbs.so.1 hands out, because programs call `ibv_*`
//! on it. So this library links dynamically to libibverbs.so.1 (`DT_NEEDED`,
//! like rdma-core's) and uses the public verbs for verbs things
//! (`ibv_get_device_list`, `ibv_open_device`, `ibv_alloc_pd`, `ibv_create_cq`,
//! `ibv_create_qp`, `ibv_modify_qp`, …). What it needs from the engine beyond
//! them goes through the small private interface our libibverbs.so.1 exports
//! under its own version node `SOFTVERBS_PRIVATE_1` (`softverbs_*` functions,
//! see [`verbs`]); with another libibverbs the loader refuses this library.
//!
//! # What is real and what is not yet
//! Event channels (real pollable fds, blocking or `O_NONBLOCK`), events and
//! their ack accounting, synchronous ids, port spaces, binding and ports,
//! address and route resolution, devices, `rdma_getaddrinfo`, options, QPs and
//! SRQs on ids, `rdma_init_qp_attr`, the non-connecting parts of
//! `rdma_create_ep`. The connection calls (connect, listen, accept, reject,
//! disconnect, notify, establish, get_request) go through one internal
//! interface ([`cm::Cm`]) to the device's CM in libibverbs (`softcm`,
//! spec/rdmacm-abi.md §3.10), RDMA_PS_UDP through SIDR; multicast joins
//! map the group to its RoCE v2 MGID and attach the id's QP ([`mcast`]). The rsocket calls: `rsocket` answers
//! `ENOSYS`; `rpoll`/`rselect` serve ordinary descriptors (there can be no
//! rsocket); the others answer `EBADF` (their descriptor cannot be an rsocket).
//!
//! # Layers
//!
//! A file imports only what sits below it, as drawn here (tests/layering.rs
//! checks the drawing against the imports). An id's block and its event accounting sit low; what reaches the CM sits
//! above the CM; QPs ask the CM's tables, below the pump that makes QPs for
//! connection requests.
//!
//! ```text
//! ep                      rdma_create_ep / rdma_destroy_ep
//! route                   address and route resolution (binds through conn)
//! conn                    the calls that reach the CM; rdma_bind_addr, rdma_destroy_id
//! softcm                  SoftCm: the connection calls over the device's CM
//! softcm::pump            the CM event thread (makes ids and QPs for requests)
//! qp                      QPs and SRQs on ids (INIT attributes from softcm::state)
//! softcm::state  cm  mcast   the CM's tables and QP moves; the Cm interface; multicast
//! id                      the id block, its state, ports, create, free
//! channel                 event channels, events and their ack accounting
//! device  addrinfo  rsocket   the devices (contexts, PDs); rdma_getaddrinfo; rsockets
//! verbs                   the libibverbs calls and its private interface
//! ffi  util  net  ports  rate   ground floor: C mirrors, errno, addresses, port table
//! ```
#![allow(unsafe_code)] // the C ABI: every block has a SAFETY line
#![allow(clippy::missing_safety_doc)] // C entry points: the man pages are the contract

pub mod ffi;
pub mod verbs;

mod addrinfo;
mod channel;
mod cm;
mod conn;
mod device;
mod ep;
mod id;
mod mcast;
mod net;
mod ports;
mod qp;
mod rate;
#[path = "../../ibverbs/src/restart.rs"]
mod restart;
mod route;
mod rsocket;
mod softcm;
mod util;

/// Gives the exports a module defines their default versions (the
/// `.symver` directives build.rs generated for it from `exports.txt`).
/// An export is never called from another module (its `_impl` is): in a
/// release build a cross-module call can leave a `.symver` in a codegen unit
/// without the definition, which the assembler refuses.
macro_rules! symver {
    ($module:literal) => {
        include!(concat!(env!("OUT_DIR"), "/symver_", $module, ".rs"));
    };
}
pub(crate) use symver;

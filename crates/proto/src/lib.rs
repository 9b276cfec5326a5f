//! The sans-IO softverbs engine.
//!
//! `proto` owns every rule of the verbs object model and decides everything as a
//! pure function of its inputs: it holds no sockets, threads or clocks and contains
//! no `unsafe`. This first layer is the control path: the device model
//! ([`device`]), the object tables ([`table`]), protection domains, memory regions,
//! completion queues, shared receive queues, address handles and queue pairs
//! ([`qp`]) with the exact modify-QP state machine of the Linux kernel
//! (`shared/spec/qp-state-machine.md`) and query semantics (`shared/spec/qp-query.md`).
//!
//! Every refusal is an [`Error`] that names what was wrong and maps to the errno
//! Linux returns in the same case ([`Error::errno`]).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod ah;
pub mod cq;
pub mod datapath;
pub mod device;
pub mod engine;
pub mod error;
pub mod handle;
pub mod mask;
pub mod memory;
pub mod mr;
pub mod output;
pub mod qp;
pub mod rng;
#[cfg(test)]
mod spec_md;
pub mod srq;
pub mod table;
pub mod timers;
pub mod types;
pub mod wc;
pub mod wr;

pub use engine::Engine;
pub use error::{Errno, Error};
pub use mask::AttrMask;
pub use types::*;

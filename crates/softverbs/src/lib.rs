//! softverbs: RDMA verbs with no RDMA hardware, no kernel module and no root.
//!
//! A userspace RoCEv2 device behind a safe Rust API with verbs names:
//! [`devices`] lists the devices, [`Device::open`] gives a [`Context`], and from
//! there [`ProtectionDomain`], [`MemoryRegion`], [`CompletionQueue`],
//! [`SharedReceiveQueue`], [`AddressHandle`] and [`QueuePair`].
//!
//! Queue pairs follow the verbs rules exactly (states, transitions, required and
//! optional attributes, query semantics, error codes); every refusal is an
//! [`Error`] that says in words what was wrong and carries the errno Linux would
//! return ([`Error::errno`]). The common path is typed: a [`QueuePair<Rc>`] only
//! accepts RC transitions, and each transition's required attributes are struct
//! fields, so forgetting one does not compile:
//!
//! ```
//! use softverbs::*;
//! # fn main() -> Result<(), Error> {
//! let ctx = devices()?[0].open()?;
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(16)?;
//! let a = pd.create_rc_qp(&QpInit::new(&cq, &cq))?;
//! let b = pd.create_rc_qp(&QpInit::new(&cq, &cq))?;
//! let gid = ctx.query_gid(1, 0)?;
//! for (qp, peer) in [(&a, &b), (&b, &a)] {
//!     qp.to_init(ConnectedInit { pkey_index: 0, port_num: 1, access: AccessFlags::REMOTE_WRITE })?;
//!     qp.to_rtr(RcRtr {
//!         ah: AhAttr::roce(gid, 0),
//!         path_mtu: Mtu::Mtu1024,
//!         dest_qp_num: peer.qp_num(),
//!         rq_psn: 0,
//!         max_dest_rd_atomic: 16,
//!         min_rnr_timer: 12,
//!     })?;
//!     qp.to_rts(RcRts { sq_psn: 0, timeout: 14, retry_cnt: 7, rnr_retry: 7, max_rd_atomic: 16 })?;
//! }
//! assert_eq!(a.state()?, QpState::Rts);
//! # Ok(()) }
//! ```
//!
//! The general [`QueuePair::modify`] (attributes plus mask, as `ibv_modify_qp`)
//! is there too, for code that needs every knob (and for the C ABI).
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod abi;
mod ah;
mod config;
mod context;
mod counters;
mod cq;
mod datapath;
mod device;
mod error;
mod mem;
mod mr;
mod pd;
mod qp;
mod srq;
mod transition;

pub use abi::ExternalMemoryRegion;
pub use ah::AddressHandle;
pub use config::{devices, Device};
pub use context::Context;
pub use counters::{DeviceCounters, EngineCounters, IoCounters, QpCounters};
pub use cq::CompletionQueue;
pub use datapath::{AsyncEvent, CompletionChannel};
pub use error::{DestroyError, Error};
pub use mr::MemoryRegion;
pub use pd::ProtectionDomain;
pub use qp::{AnyTransport, QpInfo, QpInit, QueuePair, Rc, Transport, Uc, Ud};
pub use srq::SharedReceiveQueue;
pub use transition::{
    ConnectedInit, DatagramInit, Drain, Modify, RcRtr, RcRts, Resume, SqPsnRts, ToError, ToReset,
    ToInit, ToRtr, ToRts, Transition, UcRtr, UdRtr,
};

pub use proto::device::{AtomicCap, DeviceAttr, DeviceConfig, PortAttr, PortState};
pub use sv_io::{FaultConfig, FaultConfigError, FaultDirection};
pub use proto::srq::SrqAttr;
pub use proto::wc::{WcFlags, WcOpcode, WcStatus, WorkCompletion};
pub use proto::wr::{
    AtomicTarget, ImmData, PostError, RdmaTarget, RecvWr, SendFlags, SendWr, Sge, WrOpcode, WrTarget,
};
pub use proto::{
    AccessFlags, AhAttr, AttrMask, Errno, Gid, GlobalRoute, Mtu, QpAttr, QpCap, QpState, QpType,
};


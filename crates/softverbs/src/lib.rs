//! softverbs: RDMA verbs with no RDMA hardware, no kernel module and no root.
//!
//! A userspace RoCEv2 device behind a safe Rust API with verbs names:
//! [`devices`] lists the devices, [`Device::open`] gives a [`Context`], and from
//! there [`ProtectionDomain`], [`MemoryRegion`], [`MemoryWindow`],
//! [`CompletionQueue`], [`SharedReceiveQueue`], [`AddressHandle`] and
//! [`QueuePair`].
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
//! Connections can also be made the way rdma_cm makes them: [`cm::Listener`]
//! and [`cm::connect`] exchange IBTA CM messages on QP1 (interoperable with
//! Linux's rdma_cm) and hand back a [`cm::Connection`] whose RC QP is in RTS
//! with the attributes the CM negotiated; [`cm::resolve_ud`] finds a UD
//! service's QPN and Q_Key (SIDR).
//!
//! The general [`QueuePair::modify`] (attributes plus mask, as `ibv_modify_qp`)
//! is there too, for code that needs every knob (and for the C ABI).
//!
//! # Faults, capture and counters
//!
//! A device can inject faults into its own traffic and write every packet to
//! a pcap file, configured by the environment (every device reads it) or per
//! device:
//! - `SOFTVERBS_FAULTS="loss=0.05,dup=0.01,reorder=0.02,delay=200us,corrupt=0.001,seed=7,dir=tx"`
//!   — every key, and what each does, in [`sv_io::faults`]; or
//!   [`Device::with_faults`] with a parsed [`FaultConfig`]. Deterministic for a
//!   seed (the n-th datagram of a direction always gets the same fate); applies
//!   to the datagrams the device sends (`dir=tx`, the default), receives
//!   (`rx`) or both, including those between QPs of one device.
//! - `SOFTVERBS_PCAP=/tmp/%d-%p.pcap` (`%d` device name, `%p` process ID) or
//!   [`Device::with_capture`]: sent datagrams are recorded after transmit
//!   faults (what went on the wire), received ones before receive faults;
//!   Wireshark/tshark decode them as RoCEv2 (`-d udp.port==4791,infiniband`).
//!   The file is flushed when the device is idle and complete once it closes.
//!
//! A bad value is an [`Error::Config`] naming the variable and the key, when
//! the device opens. What happened is counted: [`Context::counters`] gives the
//! engine's device counters (drops by reason, the sum over QPs) and the
//! driver's (datagrams, send errors, faults injected by kind, pcap records);
//! [`QueuePair::counters`] gives one QP's (retransmissions, timeouts, RNR and
//! sequence NAKs, duplicates, drops).
//!
//! # Layers
//!
//! A file imports only what sits below it, as drawn here, top floor first
//! (`tests/layering.rs` checks the drawing against the imports);
//! what is made from an object owns its constructor (`Context::alloc_pd` is
//! in pd.rs, `ProtectionDomain::create_srq` in srq.rs), so the maker does not
//! import what it makes:
//!
//! ```text
//! counters                        the device's counters (engine, driver, CM)
//! cm                              the CM's face: its children's types
//! cm::sidr  raw                   SIDR (on cm::conn); RAW_PACKET QPs, TSO, flows
//! cm::conn  datapath  rss  transition  xrc    connections; posting and polling; RSS; typed transitions; XRC
//! qp                              queue pairs (knows an RSS table only as qp::RssTable)
//! ah  dm  mr  mw  srq             the objects made on a PD, each with its constructor
//! cm::port  config  cq  pd        the CM port; device lists and options; CQs and PDs (made on a context)
//! context                         an open device and its queries
//! device                          the driver and the engine as the API shares them
//! cm::channel  error              CM event routing; the error type
//! cm::common  mem  wq             ground floor: CM types and limits, memory access, WQ states
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod ah;
pub mod cm;
mod config;
mod context;
mod counters;
mod cq;
mod datapath;
mod device;
mod dm;
mod error;
mod mem;
mod mr;
mod mw;
mod pd;
mod qp;
pub mod raw;
mod rss;
mod srq;
mod transition;
mod wq;
mod xrc;

pub use ah::AddressHandle;
pub use config::{devices, flush_open_devices, log_level_from_env, Device};
pub use context::Context;
pub use counters::{DeviceCounters, EngineCounters, GsiCounters, IoCounters, QpCounters};
pub use cq::CompletionQueue;
pub use datapath::{AsyncEvent, CompletionChannel};
pub use dm::{DeviceMemory, DmMemoryRegion};
pub use error::{ConfigError, DestroyError, Error, OsError};
pub use mr::{MemoryRegion, Rereg};
pub use mw::{BindRequest, MemoryWindow, MwError, MwType};
pub use pd::ProtectionDomain;
pub use proto::rss::{fields as rx_hash_fields, pick as rss_pick, toeplitz};
pub use proto::xrcd::{XrcdKey, O_CREAT, O_EXCL};
pub use qp::{AnyTransport, Flow, QpInfo, QpInit, QueuePair, Rc, Transport, Uc, Ud};
pub use rss::{RwqIndTable, WorkQueue};
pub use srq::SharedReceiveQueue;
pub use transition::{
    ConnectedInit, DatagramInit, Drain, Modify, RcRtr, RcRts, Resume, SqPsnRts, ToError, ToInit,
    ToReset, ToRtr, ToRts, Transition, UcRtr, UdRtr,
};
pub use wq::{RssError, WqState, MAX_HASH_KEY_LEN, MAX_LOG_IND_TBL_SIZE};
pub use xrc::XrcDomain;

pub use proto::device::{
    AtomicCap, DeviceAttr, DeviceConfig, DeviceInfo, Identity, PortAttr, PortState,
};
pub use proto::srq::SrqAttr;
pub use proto::wc::{WcFlags, WcOpcode, WcStatus, WorkCompletion};
pub use proto::wr::{
    AtomicTarget, FlushTarget, ImmData, PostError, RdmaTarget, RecvWr, SendFlags, SendWr, Sge,
    WrOpcode, WrTarget, FLUSH_GLOBAL, FLUSH_MR, FLUSH_PERSISTENT, FLUSH_RANGE,
};
pub use proto::{
    AccessFlags, AhAttr, AttrMask, Errno, Gid, GlobalRoute, MigState, Mtu, QpAttr, QpCap, QpState,
    QpType,
};
pub use sv_io::{FaultConfig, FaultConfigError, FaultDirection, FaultValueError};

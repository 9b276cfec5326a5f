//! Connection management: connect and accept RC queue pairs over IBTA CM on
//! RoCEv2 (MADs on QP1, with rdma_cm's service IDs and private-data header,
//! spec/cm.md), and resolve UD services (SIDR).
//!
//! The device's [`proto::cm::Cm`] runs inside its engine (QP1, driven by the
//! progress thread); this module is its owner. [`Listener`] listens on
//! (device address, port, port space) and yields [`ConnectRequest`]s that
//! [`ConnectRequest::accept`] or [`ConnectRequest::reject`]; [`connect`]
//! sends a REQ and returns a [`Connection`]. Both drive the caller's RC QP
//! through INIT → RTR → RTS with the attributes the CM negotiated (QPNs,
//! PSNs, MTU, responder resources / initiator depth, retry counts, ACK
//! timeout), as `rdma_accept`/`rdma_connect` do. [`Connection::disconnect`]
//! moves the QP to ERR (flushing its work requests) and sends the DREQ (or
//! the DREP when the peer disconnected first).
//!
//! Every call blocks at most for the timeout it is given. Events are also
//! available without blocking, each object's on a file descriptor that is
//! readable while events wait ([`CmChannel`]): the C ABI's event channel polls it.
//!
//! # The interface for librdmacm: [`CmPort`]
//! librdmacm owns its ids and drives its QPs itself (`rdma_init_qp_attr` +
//! `ibv_modify_qp`), so it needs the CM one level lower than the objects
//! above: [`crate::Context::cm_port`] gives the device's CM as `ib_cm` does
//! (listen, connect with per-id [`CmTiming`], accept, reject, RTU,
//! establish, disconnect, destroy, QP attributes, SIDR), and every id's
//! events go to the [`CmChannel`] it is routed to — one per
//! `rdma_event_channel`, whose fd is the channel's eventfd. The mapping of
//! each `rdma_*` call is spec/cm.md §7.

pub(crate) mod channel;
pub(crate) mod common;
mod conn;
mod port;
mod sidr;

pub use channel::CmChannel;
pub use common::*;
pub use conn::*;
pub use port::*;
pub use sidr::*;

//! [`Cm`], what the connection calls (conn.rs) need from a connection
//! manager: the one narrow interface between this library and the CM
//! protocol (IBTA CM MADs on QP1, a sans-IO state machine in crates/proto
//! driven by the engine's progress thread). softcm's `SoftCm` is it, reached
//! through libibverbs' private interface (spec/rdmacm-abi.md §3.10–3.11);
//! [`NoCm`] answers `ENOSYS` with a logged reason if that libibverbs lacks
//! it. `conn::cm` chooses. Below both: it knows ids, not how they connect.
//! A QP's attributes for its connection are not asked here but of the CM's
//! tables (`softcm::state::qp_attr`), which QPs sit on: they answer `None`
//! for an id without a connection, as every id is without the CM.

use crate::ffi::*;
use crate::id::IdBlock;
use crate::util::*;
use std::ffi::{c_int, c_void};
use std::net::IpAddr;

/// What the connection calls need from a connection manager. Events it
/// produces go to the id's channel (`IdBlock::post`); QP transitions through
/// the public verbs, as rdma-core's librdmacm does them.
pub(crate) trait Cm: Sync {
    /// Sends a REQ (RC/UC) or SIDR_REQ (UD) to the resolved destination.
    fn connect(&self, id: &IdBlock, param: Option<&rdma_conn_param>) -> Result<(), c_int>;
    /// Starts taking REQs for the id's bound address and port.
    fn listen(&self, id: &IdBlock, backlog: c_int) -> Result<(), c_int>;
    /// Answers a connection request with a REP (or SIDR_REP).
    fn accept(&self, id: &IdBlock, param: Option<&rdma_conn_param>) -> Result<(), c_int>;
    /// Answers a connection request with a REJ carrying `private_data`.
    fn reject(&self, id: &IdBlock, private_data: &[u8]) -> Result<(), c_int>;
    /// Sends a DREQ (or DREP).
    fn disconnect(&self, id: &IdBlock) -> Result<(), c_int>;
    /// Reports a QP event that completes the connection (RTU not yet seen).
    fn notify(&self, id: &IdBlock, event: c_int) -> Result<(), c_int>;
    /// Sends the RTU of a connection whose REP the program handled itself.
    fn establish(&self, id: &IdBlock) -> Result<(), c_int>;
    /// Joins (`join`) or leaves a multicast group.
    fn multicast(
        &self,
        id: &IdBlock,
        group: IpAddr,
        join: bool,
        context: *mut c_void,
    ) -> Result<(), c_int>;
    /// Forgets the id (it is being destroyed).
    fn destroy(&self, id: &IdBlock);
}

/// The connection manager until the CM protocol is attached: no connection
/// can exist, so every call that needs one answers `ENOSYS`.
pub(crate) struct NoCm;

impl NoCm {
    fn missing(verb: &str) -> c_int {
        refuse(
            verb,
            libc::ENOSYS,
            "connection management (IBTA CM MADs on QP1) is not attached to softverbs' librdmacm yet; \
             address and route resolution, ids, QPs and events work",
        )
    }
}

impl Cm for NoCm {
    fn connect(&self, _: &IdBlock, _: Option<&rdma_conn_param>) -> Result<(), c_int> {
        Err(Self::missing("rdma_connect"))
    }
    fn listen(&self, _: &IdBlock, _: c_int) -> Result<(), c_int> {
        Err(Self::missing("rdma_listen"))
    }
    fn accept(&self, _: &IdBlock, _: Option<&rdma_conn_param>) -> Result<(), c_int> {
        Err(Self::missing("rdma_accept"))
    }
    fn reject(&self, _: &IdBlock, _: &[u8]) -> Result<(), c_int> {
        Err(Self::missing("rdma_reject"))
    }
    fn disconnect(&self, _: &IdBlock) -> Result<(), c_int> {
        Err(Self::missing("rdma_disconnect"))
    }
    fn notify(&self, _: &IdBlock, _: c_int) -> Result<(), c_int> {
        Err(Self::missing("rdma_notify"))
    }
    fn establish(&self, _: &IdBlock) -> Result<(), c_int> {
        Err(Self::missing("rdma_establish"))
    }
    fn multicast(&self, _: &IdBlock, _: IpAddr, join: bool, _: *mut c_void) -> Result<(), c_int> {
        Err(Self::missing(if join {
            "rdma_join_multicast"
        } else {
            "rdma_leave_multicast"
        }))
    }
    fn destroy(&self, _: &IdBlock) {}
}

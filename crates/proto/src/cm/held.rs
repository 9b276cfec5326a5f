//! REQs held for a service ID that is bound but not yet listened on.
//!
//! rdma_cm programs may tell their peer a port between `rdma_bind_addr` and
//! `rdma_listen` (qperf's `cm_open_server` sends the port it bound, then
//! listens). With the kernel the listen is one system call right after, so a
//! REQ essentially never finds the port bound and not yet listening; in a
//! userspace device the binder can be descheduled between the two calls
//! while the peer's REQ is already handled. The CM therefore holds such a REQ
//! (bounded in number and time) instead of rejecting it at once: `listen`
//! takes it as if it had just arrived; a release of the binding or the end
//! of the hold answers it as before (REJ, invalid service ID).

use crate::types::Gid;

/// How long a REQ waits for the listen of its bound service ID (ns).
pub const HOLD_NS: u64 = 200 * super::timing::MS_NS;
/// At most this many REQs are held at once; more are rejected at once.
pub const MAX_HELD: usize = 64;

/// One held REQ: the MAD as received and where it came from.
#[derive(Debug, Clone)]
pub(super) struct HeldReq {
    pub service_id: u64,
    pub from: Gid,
    /// The requester's comm ID and CA GUID (a resent REQ is the same one).
    pub remote_id: u32,
    pub remote_guid: u64,
    pub arrived: u64,
    pub mad: Vec<u8>,
}

impl HeldReq {
    /// When the hold ends.
    pub fn deadline(&self) -> u64 {
        self.arrived.saturating_add(HOLD_NS)
    }
}

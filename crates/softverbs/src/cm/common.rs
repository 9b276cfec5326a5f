//! What the CM's objects share: the private-data limits, [`CmError`],
//! [`ConnectOptions`], the protocol-level types [`super::CmPort`] speaks
//! (spec/cm.md §7), and the helpers that apply the CM's attributes to a QP.
//! Imports nothing else of the crate.

pub use proto::cm::{
    AcceptParams, CmAccess, CmAh, CmEvent, CmQpAttrs, ConnId, ConnReply, ConnRequest,
    ConnectParams, ListenId, PathParams, QpTarget,
};
use proto::types::Gid;
use std::net::IpAddr;
use std::time::Duration;
pub use wire::cm::TransportType;
pub use wire::{Psn, Qpn};

pub use proto::cm::{CmCounters, CmTiming, DropReason};
pub use wire::cm::cma::PortSpace;
pub use wire::cm::{RejReason, SidrStatus};

/// The user's part of REQ private data (92 bytes minus the 36-byte header).
pub const REQ_PRIVATE_DATA_MAX: usize = 56;
/// Private data of a REP.
pub const REP_PRIVATE_DATA_MAX: usize = 196;
/// Private data of a REJ.
pub const REJ_PRIVATE_DATA_MAX: usize = 148;

/// What went wrong with a connection, in words and with the peer's answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[allow(missing_docs)] // the fields are what the variant's text names
pub enum CmError {
    /// The peer refused (REJ); `private_data` is the REJ's 148 bytes.
    #[error("rejected by the peer: {reason:?}")]
    Rejected {
        reason: RejReason,
        private_data: Vec<u8>,
    },
    /// Nobody listens on that port at the peer (REJ invalid service ID).
    #[error("nobody listens on port {port} at {peer}")]
    NobodyListening { peer: IpAddr, port: u16 },
    /// The peer never answered: the REQ (or REP) was sent `sends` times.
    #[error("no answer after {sends} sends (unreachable)")]
    Unreachable { sends: u8 },
    /// The caller's own wait ran out before the CM reached an outcome.
    #[error("no outcome within {0:?}")]
    TimedOut(Duration),
    /// The connection went down (DREQ) while waiting for something else.
    #[error("the peer disconnected")]
    Disconnected,
    /// A SIDR request was answered with a failure status.
    #[error("SIDR answered {0:?}")]
    Sidr(SidrStatus),
    /// The CM refused the call (state, lengths, listener in use).
    #[error(transparent)]
    Cm(#[from] proto::cm::CmError),
    /// A verbs call on the QP failed (its modify to INIT/RTR/RTS/ERR).
    #[error("queue pair: {0}")]
    Qp(#[from] proto::Error),
    /// The peer's addresses are of another family than the device's.
    #[error("{peer} is not reachable from the device's address {local}")]
    AddressFamily { local: IpAddr, peer: IpAddr },
    /// An operating-system resource (the event fd) could not be made.
    #[error("event fd: {0}")]
    Os(std::io::ErrorKind),
    /// Private data longer than the message carries.
    #[error("{what} private data is {len} bytes, at most {max}")]
    PrivateDataTooLong {
        what: &'static str,
        len: usize,
        max: usize,
    },
}

/// How to connect (`struct rdma_conn_param` and the id's options).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectOptions {
    /// Port space of the service (rdma_cm: TCP for RC).
    pub port_space: PortSpace,
    /// At most [`REQ_PRIVATE_DATA_MAX`] bytes.
    pub private_data: Vec<u8>,
    /// RDMA READs/atomics we accept at once (0..=255).
    pub responder_resources: u8,
    /// RDMA READs/atomics we issue at once.
    pub initiator_depth: u8,
    /// Transport retries (0..=7).
    pub retry_count: u8,
    /// RNR retries (0..=7, 7 = infinite).
    pub rnr_retry_count: u8,
    /// MAD timing (rdma_cm's defaults: life 18, response timeout 20, 15 retries).
    pub timing: CmTiming,
    /// The longest this call waits for an outcome (beyond it: [`CmError::TimedOut`]).
    pub wait: Duration,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            port_space: PortSpace::Tcp,
            private_data: Vec::new(),
            responder_resources: 16,
            initiator_depth: 16,
            retry_count: 7,
            rnr_retry_count: 7,
            timing: CmTiming {
                packet_life_time: 18,
                cm_response_timeout: 20,
                max_cm_retries: 15,
            },
            wait: Duration::from_secs(120),
        }
    }
}

/// A PSN to start from: different per connection, as rdma_cm's random seq_num.
pub(super) fn start_psn(salt: u32) -> Psn {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    Psn::from_masked(t.wrapping_mul(2_654_435_761) ^ salt.wrapping_mul(40_503))
}

pub(super) fn device_ip(e: &proto::Engine) -> IpAddr {
    e.info().gids.first().copied().unwrap_or(Gid::ZERO).ip()
}

/// Applies the CM's attributes for `target` to the QP (one `modify_qp`).
pub(super) fn modify_to(
    e: &mut proto::Engine,
    qp: proto::engine::QpHandle,
    id: ConnId,
    target: QpTarget,
) -> Result<(), CmError> {
    let a: CmQpAttrs = e.cm_mut().qp_attrs(id, target)?;
    let (attr, mask) = a
        .to_verbs(target, 0)
        .ok_or(proto::cm::CmError::OutOfRange {
            field: "path_mtu",
            value: u64::from(a.path_mtu.unwrap_or(0)),
            max: 5,
        })?;
    e.modify_qp(qp, &attr, mask)?;
    Ok(())
}

/// Per-process, per-start entropy for the CM's comm IDs and TIDs.
pub(crate) fn seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ (u64::from(std::process::id()) << 32)
}

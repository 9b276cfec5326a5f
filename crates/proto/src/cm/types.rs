//! What goes in and out of the connection manager: identifiers, the
//! parameters of connect/accept/SIDR, the events for the owner, datagrams to
//! send, the QP attributes handed out, errors and counters.
//!
//! Fields are named after the IBTA message fields and `ib_qp_attr` members
//! they carry (spec/cm.md §2, §6); only the ones with a twist are documented.
#![allow(missing_docs)]

use wire::cm::{RejReason, SidrStatus, TransportType};
use wire::mad::{MadError, MAD_LEN};
use wire::{Psn, Qpn};

use crate::types::Gid;

/// A connection (or SIDR request): our local communication ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u32);

/// A listener, by the service ID it listens on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ListenId(pub u64);

/// A MAD to send: to QP1 of `to` (spec/cm.md §1.2: BTH dest QP 1, DETH
/// Q_Key 0x80010000, P_Key 0xFFFF; the device adds those headers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    pub to: Gid,
    pub mad: [u8; MAD_LEN],
}

/// The device-wide settings of a CM (spec/cm.md §3.4, §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmConfig {
    /// Our port GID (source of our MADs).
    pub local_gid: Gid,
    /// Our node GUID, the "Local CA GUID" of REQ/REP.
    pub ca_guid: u64,
    /// The device's local CA ACK delay code (REP Target ACK Delay).
    pub ack_delay: u8,
    /// Packet life time code of our paths (rdma_cm on RoCE: 18).
    pub packet_life_time: u8,
    /// CM response timeout code we announce (rdma_cm: 20).
    pub cm_response_timeout: u8,
    /// Max CM retries we announce and use (rdma_cm: 15).
    pub max_cm_retries: u8,
    /// Service timeout code of our MRAs (rdma_cm: 24).
    pub mra_service_timeout: u8,
    /// At most this many connections and SIDR requests at once.
    pub max_connections: usize,
    /// Seeds comm ID allocation and the TID's high word.
    pub seed: u64,
}

impl CmConfig {
    /// The rdma_cm defaults (spec/cm.md §3.4, §4.6) for `local_gid` and `ca_guid`.
    pub fn rdma_cm(local_gid: Gid, ca_guid: u64, seed: u64) -> CmConfig {
        CmConfig {
            local_gid,
            ca_guid,
            ack_delay: 15,
            packet_life_time: 18,
            cm_response_timeout: 20,
            max_cm_retries: 15,
            mra_service_timeout: 24,
            max_connections: 4096,
            seed,
        }
    }
}

/// The MAD timing of one connection attempt (codes as in [`CmConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmTiming {
    /// Packet life time code (rdma_cm on RoCE: 18).
    pub packet_life_time: u8,
    /// CM response timeout code (rdma_cm: 20; 6144 ms per REQ with life 18).
    pub cm_response_timeout: u8,
    /// Resends after the first send (rdma_cm: 15, so 16 sends in all).
    pub max_cm_retries: u8,
}

impl CmTiming {
    /// The timing a CM was configured with.
    pub fn of(cfg: &CmConfig) -> CmTiming {
        CmTiming {
            packet_life_time: cfg.packet_life_time,
            cm_response_timeout: cfg.cm_response_timeout,
            max_cm_retries: cfg.max_cm_retries,
        }
    }
}

/// Path values carried in the REQ's primary path (spec/cm.md §3.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathParams {
    pub hop_limit: u8,
    pub traffic_class: u8,
    /// 20 bits.
    pub flow_label: u32,
    pub sl: u8,
    pub packet_rate: u8,
}

impl Default for PathParams {
    /// A routed RoCEv2 path: hop limit 64, everything else 0.
    fn default() -> Self {
        PathParams {
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            sl: 0,
            packet_rate: 0,
        }
    }
}

/// What `connect` needs (`rdma_connect`'s conn_param and route, spec/cm.md §3.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectParams {
    pub peer: Gid,
    pub service_id: u64,
    pub qpn: Qpn,
    pub transport: TransportType,
    /// The PSN we expect to receive first (our RQ PSN, spec/cm.md §6).
    pub starting_psn: Psn,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: bool,
    /// 0..=7.
    pub retry_count: u8,
    /// 0..=7.
    pub rnr_retry_count: u8,
    pub srq: bool,
    /// IB MTU code 1..=5.
    pub path_mtu: u8,
    pub path: PathParams,
    /// At most 92 bytes (the rdma_cm header included).
    pub private_data: Vec<u8>,
}

/// What `accept` needs (`rdma_accept`'s conn_param, spec/cm.md §3.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptParams {
    pub qpn: Qpn,
    /// The PSN we expect to receive first (our RQ PSN).
    pub starting_psn: Psn,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: bool,
    pub rnr_retry_count: u8,
    pub srq: bool,
    /// At most 196 bytes.
    pub private_data: Vec<u8>,
}

/// A connection request as the passive side's owner sees it (the REQ's
/// fields from the receiver's point of view, `cm_format_req_event`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnRequest {
    pub service_id: u64,
    pub remote_qpn: Qpn,
    pub remote_ca_guid: u64,
    pub transport: TransportType,
    pub remote_starting_psn: Psn,
    /// The REQ's Initiator Depth (our responder resources).
    pub responder_resources: u8,
    /// The REQ's Responder Resources (our initiator depth).
    pub initiator_depth: u8,
    pub flow_control: bool,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub path_mtu: u8,
    /// All 92 bytes of the REQ's private data.
    pub private_data: Vec<u8>,
}

/// A reply as the active side's owner sees it (`cma_set_rep_event_data`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnReply {
    pub remote_qpn: Qpn,
    pub remote_ca_guid: u64,
    pub remote_starting_psn: Psn,
    /// The REP's Initiator Depth (our responder resources).
    pub responder_resources: u8,
    /// The REP's Responder Resources (our initiator depth).
    pub initiator_depth: u8,
    pub flow_control: bool,
    pub rnr_retry_count: u8,
    pub srq: bool,
    /// All 196 bytes of the REP's private data.
    pub private_data: Vec<u8>,
}

/// What happened, for the owner (mapped to rdma_cm events as cma.c does,
/// spec/cm.md §4.3, §5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent {
    /// A REQ for one of our listeners: accept or reject `id`.
    ConnectRequest {
        id: ConnId,
        listen: ListenId,
        from: Gid,
        request: ConnRequest,
    },
    /// A REP for our REQ: move the QP to RTR/RTS, then `rtu` (or `reject`).
    ConnectResponse { id: ConnId, reply: ConnReply },
    /// The connection is up (RTU received, or we sent it).
    Established { id: ConnId },
    /// The peer refused; 148 bytes of its private data.
    Rejected {
        id: ConnId,
        reason: RejReason,
        private_data: Vec<u8>,
    },
    /// Our REQ or REP went unanswered after `sends` transmissions.
    Unreachable { id: ConnId, sends: u8 },
    /// The connection is going down (DREQ received, DREP received, or our
    /// DREQ unanswered: `timed_out`). Reported once per connection.
    Disconnected { id: ConnId, timed_out: bool },
    /// TimeWait is over; `id` is forgotten.
    TimewaitExit { id: ConnId },
    /// A SIDR_REQ for one of our listeners: answer with `sidr_reply`.
    SidrRequest {
        id: ConnId,
        listen: ListenId,
        from: Gid,
        pkey: u16,
        /// All 216 bytes.
        private_data: Vec<u8>,
    },
    /// Our SIDR_REQ was answered with success.
    SidrResolved {
        id: ConnId,
        qpn: Qpn,
        qkey: u32,
        /// All 136 bytes.
        private_data: Vec<u8>,
    },
    /// Our SIDR_REQ failed: a non-success status, or `None` after `sends`
    /// unanswered transmissions.
    SidrUnreachable {
        id: ConnId,
        status: Option<SidrStatus>,
        sends: u8,
    },
}

impl CmEvent {
    /// The connection (or SIDR request) the event is about.
    pub fn id(&self) -> ConnId {
        match self {
            CmEvent::ConnectRequest { id, .. }
            | CmEvent::SidrRequest { id, .. }
            | CmEvent::ConnectResponse { id, .. }
            | CmEvent::Established { id }
            | CmEvent::Rejected { id, .. }
            | CmEvent::Unreachable { id, .. }
            | CmEvent::Disconnected { id, .. }
            | CmEvent::TimewaitExit { id }
            | CmEvent::SidrResolved { id, .. }
            | CmEvent::SidrUnreachable { id, .. } => *id,
        }
    }
}

/// QP access flags the CM asks for (`cm_init_qp_init_attr`, spec/cm.md §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmAccess {
    pub remote_write: bool,
    pub remote_read: bool,
    pub remote_atomic: bool,
}

/// The address vector of the connection's primary path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmAh {
    pub dgid: Gid,
    pub sgid: Gid,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
    pub sl: u8,
}

/// The QP attributes for one transition, as `ib_cm_init_qp_attr` gives them
/// (spec/cm.md §6). `None` = not part of this transition's mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CmQpAttrs {
    pub access: Option<CmAccess>,
    pub pkey_index: Option<u16>,
    pub port_num: Option<u8>,
    pub ah: Option<CmAh>,
    pub path_mtu: Option<u8>,
    pub dest_qpn: Option<Qpn>,
    pub rq_psn: Option<Psn>,
    pub max_dest_rd_atomic: Option<u8>,
    pub min_rnr_timer: Option<u8>,
    pub sq_psn: Option<Psn>,
    pub timeout: Option<u8>,
    pub retry_cnt: Option<u8>,
    pub rnr_retry: Option<u8>,
    pub max_rd_atomic: Option<u8>,
}

/// The QP state whose attributes are asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpTarget {
    Init,
    Rtr,
    Rts,
}

/// Why a call on the CM was refused. Each maps to the errno rdma_cm uses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CmError {
    #[error("no connection with local comm ID 0x{0:08x}")]
    UnknownId(u32),
    #[error("{op} is not allowed in CM state {state}")]
    WrongState {
        op: &'static str,
        state: &'static str,
    },
    #[error("{what} private data is {len} bytes, at most {max}")]
    PrivateDataTooLong {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("{field} is {value}, at most {max}")]
    OutOfRange {
        field: &'static str,
        value: u64,
        max: u64,
    },
    #[error("service ID 0x{0:016x} already has a listener")]
    AlreadyListening(u64),
    #[error("no listener on service ID 0x{0:016x}")]
    UnknownListener(u64),
    #[error("connection table full ({0} entries)")]
    TooManyConnections(usize),
}

impl CmError {
    /// The errno Linux returns in the same case.
    pub fn errno(&self) -> i32 {
        const EINVAL: i32 = 22;
        const ENOMEM: i32 = 12;
        const EADDRINUSE: i32 = 98;
        match self {
            CmError::AlreadyListening(_) => EADDRINUSE,
            CmError::TooManyConnections(_) => ENOMEM,
            _ => EINVAL,
        }
    }
}

/// Why a received MAD was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DropReason {
    /// Not 256 bytes, or cut short.
    Length,
    /// Base version, class, class version or method not a CM Send.
    NotCmSend,
    /// LAP, APR, ClassPortInfo or an unknown attribute.
    Attribute,
    /// A reserved code or an over-long length field.
    BadField,
    /// No connection with the comm IDs the MAD names.
    UnknownCommId,
    /// The connection exists but the MAD is not valid in its state.
    WrongState,
    /// The MAD names a connection with another peer.
    ForeignSource,
    /// A DREQ naming a QPN that is not this connection's.
    WrongQpn,
    /// No room for another connection.
    NoResources,
}

impl DropReason {
    /// Every reason, in counter order.
    pub const ALL: [DropReason; 9] = [
        DropReason::Length,
        DropReason::NotCmSend,
        DropReason::Attribute,
        DropReason::BadField,
        DropReason::UnknownCommId,
        DropReason::WrongState,
        DropReason::ForeignSource,
        DropReason::WrongQpn,
        DropReason::NoResources,
    ];

    /// The reason a parse error stands for.
    pub fn of(e: &MadError) -> DropReason {
        match e {
            MadError::Wire(_) | MadError::Length(_) => DropReason::Length,
            MadError::NotGsi(_) => DropReason::NotCmSend,
            MadError::BaseVersion(_)
            | MadError::NotCm(_)
            | MadError::ClassVersion(_)
            | MadError::Method(_) => DropReason::NotCmSend,
            MadError::Attribute(_) => DropReason::Attribute,
            MadError::Reserved { .. } | MadError::TooLong { .. } => DropReason::BadField,
        }
    }

    fn index(self) -> usize {
        DropReason::ALL.iter().position(|r| *r == self).unwrap_or(0)
    }
}

/// Message kinds in counter order: REQ, MRA, REJ, REP, RTU, DREQ, DREP,
/// SIDR_REQ, SIDR_REP (attribute IDs 0x10..=0x18).
pub const COUNTED_MESSAGES: usize = 9;

/// What the CM did, for `softverbs counters` and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CmCounters {
    /// MADs sent by attribute (first sends and resends).
    pub sent: [u64; COUNTED_MESSAGES],
    /// Of `sent`, resends after a timeout.
    pub retransmitted: [u64; COUNTED_MESSAGES],
    /// MADs accepted by attribute.
    pub received: [u64; COUNTED_MESSAGES],
    /// Duplicates recognised (REQ, REP, RTU, DREQ, MRA, SIDR_REQ).
    pub duplicates: u64,
    dropped: [u64; DropReason::ALL.len()],
}

impl CmCounters {
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.dropped[reason.index()]
    }

    pub fn total_dropped(&self) -> u64 {
        self.dropped.iter().sum()
    }

    pub(crate) fn drop(&mut self, reason: DropReason) {
        self.dropped[reason.index()] += 1;
    }

    /// Index of an attribute in the per-message arrays.
    pub fn slot(attr_id: u16) -> Option<usize> {
        (0x10..=0x18)
            .contains(&attr_id)
            .then(|| usize::from(attr_id - 0x10))
    }
}

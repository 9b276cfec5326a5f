//! The C layouts of the private CM interface (`SOFTVERBS_PRIVATE_1`): the one
//! definition both sides use, libibverbs (`private.rs`, which implements the
//! `softverbs_cm_*` calls) and librdmacm (which includes this file by path:
//! the two libraries share no Rust code at run time, only these layouts).

/// `struct softverbs_cm_connect`: what `softverbs_cm_connect` sends (a REQ).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SoftverbsCmConnect {
    /// Our address and port (the rdma_cm header's source) and the peer's.
    pub src: libc::sockaddr_storage,
    pub dst: libc::sockaddr_storage,
    /// rdma_cm port space (`RDMA_PS_TCP`, ...): the service ID is ps << 16 | dst port.
    pub ps: u32,
    pub qp_num: u32,
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    /// IB MTU code 1..=5.
    pub path_mtu: u8,
    /// The CM's transport code: 1 UC, 3 XRC (extended), else RC.
    pub uc: u8,
    pub packet_life_time: u8,
    pub cm_response_timeout: u8,
    pub max_cm_retries: u8,
    pub private_data_len: u8,
    /// The caller's private data (the rdma_cm header is added here).
    pub private_data: *const std::ffi::c_void,
}

/// `struct softverbs_cm_accept`: what `softverbs_cm_accept` sends (a REP).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SoftverbsCmAccept {
    pub qp_num: u32,
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub private_data_len: u8,
    pub private_data: *const std::ffi::c_void,
}

/// Event kinds of `struct softverbs_cm_event`.
pub const SOFTVERBS_CM_CONNECT_REQUEST: u32 = 0;
pub const SOFTVERBS_CM_CONNECT_RESPONSE: u32 = 1;
pub const SOFTVERBS_CM_ESTABLISHED: u32 = 2;
pub const SOFTVERBS_CM_REJECTED: u32 = 3;
pub const SOFTVERBS_CM_UNREACHABLE: u32 = 4;
pub const SOFTVERBS_CM_DISCONNECTED: u32 = 5;
pub const SOFTVERBS_CM_TIMEWAIT_EXIT: u32 = 6;
pub const SOFTVERBS_CM_SIDR_REQUEST: u32 = 7;
pub const SOFTVERBS_CM_SIDR_RESOLVED: u32 = 8;
pub const SOFTVERBS_CM_SIDR_UNREACHABLE: u32 = 9;

/// `struct softverbs_cm_event`: one CM event, flat.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SoftverbsCmEvent {
    pub kind: u32,
    /// The connection (local comm ID).
    pub id: u32,
    /// CONNECT_REQUEST / SIDR_REQUEST: the listener's handle.
    pub listen: u64,
    /// REJECTED: the IBTA reject reason; SIDR: the status (or 0x100 when unanswered);
    /// DISCONNECTED: 1 when our DREQ went unanswered.
    pub status: u32,
    pub remote_qpn: u32,
    pub remote_psn: u32,
    pub qkey: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub path_mtu: u8,
    /// UNREACHABLE: how many times the MAD was sent.
    pub sends: u8,
    /// The peer's GID (an IPv4-mapped IPv6 address for IPv4).
    pub from: [u8; 16],
    pub private_data_len: u32,
    /// All the message's private data (REQ 92, REP 196, REJ 148, SIDR 216/136).
    pub private_data: [u8; 256],
}

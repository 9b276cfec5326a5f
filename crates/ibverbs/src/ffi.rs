//! `repr(C)` mirrors of the `<infiniband/verbs.h>` (rdma-core 44) structures
//! that cross the ABI. Names follow the C ones; sizes and offsets are checked
//! against the system header by `tests/layout.rs`.
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};

/// `pthread_mutex_t` (40 bytes on x86_64): opaque to us, zeroed.
pub type PthreadMutex = [u64; 5];
/// `pthread_cond_t` (48 bytes): opaque to us, zeroed.
pub type PthreadCond = [u64; 6];

/// A slot for a function pointer in an ops table (NULL = absent).
pub type Op = *const c_void;

#[repr(C)]
pub struct ibv_device {
    pub _ops: [Op; 2],
    pub node_type: c_int,
    pub transport_type: c_int,
    pub name: [c_char; 64],
    pub dev_name: [c_char; 64],
    pub dev_path: [c_char; 256],
    pub ibdev_path: [c_char; 256],
}

/// `struct ibv_context_ops`: only the data-path slots are live.
#[repr(C)]
pub struct ibv_context_ops {
    pub _compat: [Op; 7],
    pub alloc_mw: Op,
    pub bind_mw: Op,
    pub dealloc_mw: Op,
    pub _compat_create_cq: Op,
    pub poll_cq: Op,
    pub req_notify_cq: Op,
    pub _compat2: [Op; 7],
    pub post_srq_recv: Op,
    pub _compat3: [Op; 4],
    pub post_send: Op,
    pub post_recv: Op,
    pub _compat4: [Op; 5],
}

#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: PthreadMutex,
    pub abi_compat: *mut c_void,
}

/// `struct verbs_context`: the extended ops grow downwards from the embedded
/// `ibv_context`, so they sit at negative offsets from what programs hold.
#[repr(C)]
pub struct verbs_context {
    pub query_port: Op,
    pub advise_mr: Op,
    pub alloc_null_mr: Op,
    pub read_counters: Op,
    pub attach_counters_point_flow: Op,
    pub create_counters: Op,
    pub destroy_counters: Op,
    pub reg_dm_mr: Op,
    pub alloc_dm: Op,
    pub free_dm: Op,
    pub modify_flow_action_esp: Op,
    pub destroy_flow_action: Op,
    pub create_flow_action_esp: Op,
    pub modify_qp_rate_limit: Op,
    pub alloc_parent_domain: Op,
    pub dealloc_td: Op,
    pub alloc_td: Op,
    pub modify_cq: Op,
    pub post_srq_ops: Op,
    pub destroy_rwq_ind_table: Op,
    pub create_rwq_ind_table: Op,
    pub destroy_wq: Op,
    pub modify_wq: Op,
    pub create_wq: Op,
    pub query_rt_values: Op,
    pub create_cq_ex: Op,
    pub priv_: *mut c_void,
    pub query_device_ex: Op,
    pub ibv_destroy_flow: Op,
    pub abi_placeholder2: Op,
    pub ibv_create_flow: Op,
    pub abi_placeholder1: Op,
    pub open_qp: Op,
    pub create_qp_ex: Op,
    pub get_srq_num: Op,
    pub create_srq_ex: Op,
    pub open_xrcd: Op,
    pub close_xrcd: Op,
    pub abi_placeholder3: u64,
    pub sz: usize,
    pub context: ibv_context,
}

/// `__VERBS_ABI_IS_EXTENDED`.
pub const VERBS_ABI_IS_EXTENDED: *mut c_void = usize::MAX as *mut c_void;

#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_mw`.
#[repr(C)]
pub struct ibv_mw {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub rkey: u32,
    pub handle: u32,
    /// `enum ibv_mw_type`.
    pub type_: u32,
}

/// `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind_info {
    pub mr: *mut ibv_mr,
    pub addr: u64,
    pub length: u64,
    pub mw_access_flags: u32,
}

/// `struct ibv_mw_bind` (`ibv_bind_mw`).
#[repr(C)]
pub struct ibv_mw_bind {
    pub wr_id: u64,
    pub send_flags: u32,
    pub bind_info: ibv_mw_bind_info,
}

/// The `tso` member of `ibv_send_wr`'s last union (at the offset of `bind_mw`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_tso {
    pub hdr: *mut c_void,
    pub hdr_sz: u16,
    pub mss: u16,
}

/// The `bind_mw` member of `ibv_send_wr`'s last union (the other is `tso`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_bind_mw {
    pub mw: *mut ibv_mw,
    pub rkey: u32,
    pub bind_info: ibv_mw_bind_info,
}

#[repr(C)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: PthreadMutex,
    pub cond: PthreadCond,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

/// `struct ibv_cq_ex`: an `ibv_cq` followed by the poll-by-parts functions.
#[repr(C)]
pub struct ibv_cq_ex {
    pub cq: ibv_cq,
    pub comp_mask: u32,
    pub status: u32,
    pub wr_id: u64,
    pub start_poll: Op,
    pub next_poll: Op,
    pub end_poll: Op,
    pub read_opcode: Op,
    pub read_vendor_err: Op,
    pub read_byte_len: Op,
    pub read_imm_data: Op,
    pub read_qp_num: Op,
    pub read_src_qp: Op,
    pub read_wc_flags: Op,
    pub read_slid: Op,
    pub read_sl: Op,
    pub read_dlid_path_bits: Op,
    pub read_completion_ts: Op,
    pub read_cvlan: Op,
    pub read_flow_tag: Op,
    pub read_tm_info: Op,
    pub read_completion_wallclock_ns: Op,
}

#[repr(C)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub handle: u32,
    pub mutex: PthreadMutex,
    pub cond: PthreadCond,
    pub events_completed: u32,
}

#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    pub qp_num: u32,
    pub state: u32,
    pub qp_type: u32,
    pub mutex: PthreadMutex,
    pub cond: PthreadCond,
    pub events_completed: u32,
}

/// `struct ibv_qp_ex`: an `ibv_qp` followed by the `ibv_wr_*` builders.
#[repr(C)]
pub struct ibv_qp_ex {
    pub qp_base: ibv_qp,
    pub comp_mask: u64,
    pub wr_id: u64,
    pub wr_flags: u32,
    pub wr_atomic_cmp_swp: Op,
    pub wr_atomic_fetch_add: Op,
    pub wr_bind_mw: Op,
    pub wr_local_inv: Op,
    pub wr_rdma_read: Op,
    pub wr_rdma_write: Op,
    pub wr_rdma_write_imm: Op,
    pub wr_send: Op,
    pub wr_send_imm: Op,
    pub wr_send_inv: Op,
    pub wr_send_tso: Op,
    pub wr_set_ud_addr: Op,
    pub wr_set_xrc_srqn: Op,
    pub wr_set_inline_data: Op,
    pub wr_set_inline_data_list: Op,
    pub wr_set_sge: Op,
    pub wr_set_sge_list: Op,
    pub wr_start: Op,
    pub wr_complete: Op,
    pub wr_abort: Op,
    pub wr_atomic_write: Op,
}

#[repr(C)]
pub struct ibv_ah {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub handle: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u32,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_ud {
    pub ah: *mut ibv_ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// The `wr` union of `ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    pub rdma: ibv_rdma,
    pub atomic: ibv_atomic,
    pub ud: ibv_ud,
}

#[repr(C)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: u32,
    pub send_flags: u32,
    pub imm_data: u32,
    pub wr: ibv_send_wr_wr,
    pub qp_type: u32,
    /// The `bind_mw` / `tso` union (48 bytes): `bind_mw` is read for
    /// IBV_WR_BIND_MW, `tso` ([`ibv_send_wr_tso`]) for IBV_WR_TSO.
    pub bind_mw: ibv_send_wr_bind_mw,
}

#[repr(C)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

#[repr(C, align(8))]
#[derive(Clone, Copy, Default)]
pub struct ibv_gid {
    pub raw: [u8; 16],
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_attr {
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

#[repr(C)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: u32,
    pub sq_sig_all: c_int,
}

#[repr(C)]
pub struct ibv_rx_hash_conf {
    pub rx_hash_function: u8,
    pub rx_hash_key_len: u8,
    pub rx_hash_key: *mut u8,
    pub rx_hash_fields_mask: u64,
}

#[repr(C)]
pub struct ibv_qp_init_attr_ex {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: u32,
    pub sq_sig_all: c_int,
    pub comp_mask: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut c_void,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    pub rx_hash_conf: ibv_rx_hash_conf,
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

#[repr(C)]
pub struct ibv_cq_init_attr_ex {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut ibv_comp_channel,
    pub comp_vector: u32,
    pub wc_flags: u64,
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut ibv_pd,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

#[repr(C)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

#[repr(C)]
pub struct ibv_xrcd {
    pub context: *mut ibv_context,
}

#[repr(C)]
pub struct ibv_xrcd_init_attr {
    pub comp_mask: u32,
    pub fd: c_int,
    pub oflags: c_int,
}

#[repr(C)]
pub struct ibv_qp_open_attr {
    pub comp_mask: u32,
    pub qp_num: u32,
    pub xrcd: *mut ibv_xrcd,
    pub qp_context: *mut c_void,
    pub qp_type: u32,
}

#[repr(C)]
pub struct ibv_srq_init_attr_ex {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
    pub comp_mask: u32,
    pub srq_type: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut c_void,
    pub cq: *mut ibv_cq,
    pub tm_cap: [u32; 2],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: u32,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: u32,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_td_init_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_td_init_attr {
    pub comp_mask: u32,
}

/// `struct ibv_td`.
#[repr(C)]
pub struct ibv_td {
    pub context: *mut ibv_context,
}

/// `struct ibv_parent_domain_init_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_parent_domain_init_attr {
    pub pd: *mut ibv_pd,
    pub td: *mut ibv_td,
    pub comp_mask: u32,
    pub alloc: Op,
    pub free: Op,
    pub pd_context: *mut c_void,
}

/// `struct ibv_alloc_dm_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_alloc_dm_attr {
    pub length: usize,
    pub log_align_req: u32,
    pub comp_mask: u32,
}

/// `struct ibv_dm`: the program calls the two copy functions through it
/// (`ibv_memcpy_to_dm` / `ibv_memcpy_from_dm` are inline in verbs.h).
#[repr(C)]
pub struct ibv_dm {
    pub context: *mut ibv_context,
    pub memcpy_to_dm: Op,
    pub memcpy_from_dm: Op,
    pub comp_mask: u32,
    pub handle: u32,
}

/// `struct ibv_odp_caps`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_odp_caps {
    pub general_caps: u64,
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
}

/// `struct ibv_device_attr_ex`: the classic attributes, then the extensions
/// softverbs reports (ODP caps, timestamp mask and clock, device memory size,
/// port count); the rest (TSO, RSS, packet pacing, tag matching, CQ
/// moderation, PCI atomics) stays zero.
#[repr(C)]
pub struct ibv_device_attr_ex {
    pub orig_attr: ibv_device_attr,
    pub comp_mask: u32,
    pub odp_caps: ibv_odp_caps,
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    /// tso_caps, rss_caps, max_wq_type_rq, packet_pacing_caps,
    /// raw_packet_caps, tm_caps, cq_mod_caps.
    pub _caps: [u8; 88],
    pub max_dm_size: u64,
    /// pci_atomic_caps (and padding).
    pub _pci_atomic_caps: [u8; 8],
    pub xrc_odp_caps: u32,
    pub phys_port_cnt_ex: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_port_attr {
    pub state: u32,
    pub max_mtu: u32,
    pub active_mtu: u32,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// What the exported `ibv_query_port` may write: everything before
/// `port_cap_flags2` (the header's `struct _compat_ibv_port_attr`).
pub const COMPAT_PORT_ATTR_SIZE: usize = 48;

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

#[repr(C)]
pub struct ibv_async_event {
    pub element: *mut c_void,
    pub event_type: u32,
}

#[repr(C)]
pub struct ibv_data_buf {
    pub addr: *mut c_void,
    pub length: usize,
}

#[repr(C)]
pub struct ibv_poll_cq_attr {
    pub comp_mask: u32,
}

#[repr(C)]
pub struct ibv_query_device_ex_input {
    pub comp_mask: u32,
}

/// `struct ibv_flow` (24 bytes).
#[repr(C)]
#[derive(Debug)]
pub struct ibv_flow {
    pub comp_mask: u32,
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_wq`.
#[repr(C)]
pub struct ibv_wq {
    pub context: *mut ibv_context,
    pub wq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub cq: *mut ibv_cq,
    pub wq_num: u32,
    pub handle: u32,
    pub state: u32,
    pub wq_type: u32,
    pub post_recv: Op,
    pub mutex: PthreadMutex,
    pub cond: PthreadCond,
    pub events_completed: u32,
    pub comp_mask: u32,
}

/// `struct ibv_wq_init_attr`.
#[repr(C)]
pub struct ibv_wq_init_attr {
    pub wq_context: *mut c_void,
    pub wq_type: u32,
    pub max_wr: u32,
    pub max_sge: u32,
    pub pd: *mut ibv_pd,
    pub cq: *mut ibv_cq,
    pub comp_mask: u32,
    pub create_flags: u32,
}

/// `struct ibv_wq_attr`.
#[repr(C)]
pub struct ibv_wq_attr {
    pub attr_mask: u32,
    pub wq_state: u32,
    pub curr_wq_state: u32,
    pub flags: u32,
    pub flags_mask: u32,
}

/// `struct ibv_rwq_ind_table`.
#[repr(C)]
pub struct ibv_rwq_ind_table {
    pub context: *mut ibv_context,
    pub ind_tbl_handle: c_int,
    pub ind_tbl_num: c_int,
    pub comp_mask: u32,
}

/// `struct ibv_rwq_ind_table_init_attr`.
#[repr(C)]
pub struct ibv_rwq_ind_table_init_attr {
    pub log_ind_tbl_size: u32,
    pub ind_tbl: *mut *mut ibv_wq,
    pub comp_mask: u32,
}

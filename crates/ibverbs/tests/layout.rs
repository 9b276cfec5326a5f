//! Every `repr(C)` mirror in `src/ffi.rs` against the system `<infiniband/verbs.h>`:
//! a C program compiled here prints each struct's size and alignment and each
//! field's offset and size, and they must equal Rust's.

#[allow(dead_code)]
#[path = "../src/ffi.rs"]
mod ffi;

mod common;

use ffi::*;
use softverbs_cabi_build::layout;
use softverbs_cabi_build::layout::Check;

#[test]
fn every_mirror_matches_verbs_h() {
    if !common::have_verbs_h() {
        return;
    }
    let mut checks: Vec<Check> = Vec::new();
    layout!(checks;
        ibv_device = "struct ibv_device" {
            _ops = "_ops", node_type = "node_type", transport_type = "transport_type", name = "name",
            dev_name = "dev_name", dev_path = "dev_path", ibdev_path = "ibdev_path",
        }
        ibv_context_ops = "struct ibv_context_ops" {
            alloc_mw = "alloc_mw", bind_mw = "bind_mw", dealloc_mw = "dealloc_mw", poll_cq = "poll_cq",
            req_notify_cq = "req_notify_cq", post_srq_recv = "post_srq_recv", post_send = "post_send",
            post_recv = "post_recv",
        }
        ibv_context = "struct ibv_context" {
            device = "device", ops = "ops", cmd_fd = "cmd_fd", async_fd = "async_fd",
            num_comp_vectors = "num_comp_vectors", mutex = "mutex", abi_compat = "abi_compat",
        }
        verbs_context = "struct verbs_context" {
            query_port = "query_port", advise_mr = "advise_mr", alloc_null_mr = "alloc_null_mr",
            read_counters = "read_counters", attach_counters_point_flow = "attach_counters_point_flow",
            create_counters = "create_counters", destroy_counters = "destroy_counters", reg_dm_mr = "reg_dm_mr",
            alloc_dm = "alloc_dm", free_dm = "free_dm", modify_flow_action_esp = "modify_flow_action_esp",
            destroy_flow_action = "destroy_flow_action", create_flow_action_esp = "create_flow_action_esp",
            modify_qp_rate_limit = "modify_qp_rate_limit", alloc_parent_domain = "alloc_parent_domain",
            dealloc_td = "dealloc_td", alloc_td = "alloc_td", modify_cq = "modify_cq", post_srq_ops = "post_srq_ops",
            destroy_rwq_ind_table = "destroy_rwq_ind_table", create_rwq_ind_table = "create_rwq_ind_table",
            destroy_wq = "destroy_wq", modify_wq = "modify_wq", create_wq = "create_wq",
            query_rt_values = "query_rt_values", create_cq_ex = "create_cq_ex", priv_ = "priv",
            query_device_ex = "query_device_ex", ibv_destroy_flow = "ibv_destroy_flow",
            abi_placeholder2 = "ABI_placeholder2", ibv_create_flow = "ibv_create_flow",
            abi_placeholder1 = "ABI_placeholder1", open_qp = "open_qp", create_qp_ex = "create_qp_ex",
            get_srq_num = "get_srq_num", create_srq_ex = "create_srq_ex", open_xrcd = "open_xrcd",
            close_xrcd = "close_xrcd", abi_placeholder3 = "_ABI_placeholder3", sz = "sz", context = "context",
        }
        ibv_pd = "struct ibv_pd" { context = "context", handle = "handle" }
        ibv_mr = "struct ibv_mr" {
            context = "context", pd = "pd", addr = "addr", length = "length", handle = "handle", lkey = "lkey",
            rkey = "rkey",
        }
        ibv_comp_channel = "struct ibv_comp_channel" { context = "context", fd = "fd", refcnt = "refcnt" }
        ibv_cq = "struct ibv_cq" {
            context = "context", channel = "channel", cq_context = "cq_context", handle = "handle", cqe = "cqe",
            mutex = "mutex", cond = "cond", comp_events_completed = "comp_events_completed",
            async_events_completed = "async_events_completed",
        }
        ibv_cq_ex = "struct ibv_cq_ex" {
            comp_mask = "comp_mask", status = "status", wr_id = "wr_id", start_poll = "start_poll",
            next_poll = "next_poll", end_poll = "end_poll", read_opcode = "read_opcode",
            read_vendor_err = "read_vendor_err", read_byte_len = "read_byte_len", read_imm_data = "read_imm_data",
            read_qp_num = "read_qp_num", read_src_qp = "read_src_qp", read_wc_flags = "read_wc_flags",
            read_slid = "read_slid", read_sl = "read_sl", read_dlid_path_bits = "read_dlid_path_bits",
            read_completion_ts = "read_completion_ts", read_cvlan = "read_cvlan", read_flow_tag = "read_flow_tag",
            read_tm_info = "read_tm_info", read_completion_wallclock_ns = "read_completion_wallclock_ns",
        }
        ibv_srq = "struct ibv_srq" {
            context = "context", srq_context = "srq_context", pd = "pd", handle = "handle", mutex = "mutex",
            cond = "cond", events_completed = "events_completed",
        }
        ibv_qp = "struct ibv_qp" {
            context = "context", qp_context = "qp_context", pd = "pd", send_cq = "send_cq", recv_cq = "recv_cq",
            srq = "srq", handle = "handle", qp_num = "qp_num", state = "state", qp_type = "qp_type",
            mutex = "mutex", cond = "cond", events_completed = "events_completed",
        }
        ibv_qp_ex = "struct ibv_qp_ex" {
            qp_base = "qp_base", comp_mask = "comp_mask", wr_id = "wr_id", wr_flags = "wr_flags",
            wr_atomic_cmp_swp = "wr_atomic_cmp_swp", wr_atomic_fetch_add = "wr_atomic_fetch_add",
            wr_bind_mw = "wr_bind_mw", wr_local_inv = "wr_local_inv", wr_rdma_read = "wr_rdma_read",
            wr_rdma_write = "wr_rdma_write", wr_rdma_write_imm = "wr_rdma_write_imm", wr_send = "wr_send",
            wr_send_imm = "wr_send_imm", wr_send_inv = "wr_send_inv", wr_send_tso = "wr_send_tso",
            wr_set_ud_addr = "wr_set_ud_addr", wr_set_xrc_srqn = "wr_set_xrc_srqn",
            wr_set_inline_data = "wr_set_inline_data", wr_set_inline_data_list = "wr_set_inline_data_list",
            wr_set_sge = "wr_set_sge", wr_set_sge_list = "wr_set_sge_list", wr_start = "wr_start",
            wr_complete = "wr_complete", wr_abort = "wr_abort", wr_atomic_write = "wr_atomic_write",
        }
        ibv_ah = "struct ibv_ah" { context = "context", pd = "pd", handle = "handle" }
        ibv_wc = "struct ibv_wc" {
            wr_id = "wr_id", status = "status", opcode = "opcode", vendor_err = "vendor_err", byte_len = "byte_len",
            imm_data = "imm_data", qp_num = "qp_num", src_qp = "src_qp", wc_flags = "wc_flags",
            pkey_index = "pkey_index", slid = "slid", sl = "sl", dlid_path_bits = "dlid_path_bits",
        }
        ibv_sge = "struct ibv_sge" { addr = "addr", length = "length", lkey = "lkey" }
        ibv_rdma = "struct { uint64_t remote_addr; uint32_t rkey; }" { remote_addr = "remote_addr", rkey = "rkey" }
        ibv_atomic = "struct { uint64_t remote_addr; uint64_t compare_add; uint64_t swap; uint32_t rkey; }" {
            remote_addr = "remote_addr", compare_add = "compare_add", swap = "swap", rkey = "rkey",
        }
        ibv_ud = "struct { struct ibv_ah *ah; uint32_t remote_qpn; uint32_t remote_qkey; }" {
            ah = "ah", remote_qpn = "remote_qpn", remote_qkey = "remote_qkey",
        }
        ibv_send_wr = "struct ibv_send_wr" {
            wr_id = "wr_id", next = "next", sg_list = "sg_list", num_sge = "num_sge", opcode = "opcode",
            send_flags = "send_flags", imm_data = "imm_data", wr = "wr", qp_type = "qp_type",
            _bind_mw_tso = "bind_mw",
        }
        ibv_recv_wr = "struct ibv_recv_wr" { wr_id = "wr_id", next = "next", sg_list = "sg_list", num_sge = "num_sge" }
        ibv_qp_cap = "struct ibv_qp_cap" {
            max_send_wr = "max_send_wr", max_recv_wr = "max_recv_wr", max_send_sge = "max_send_sge",
            max_recv_sge = "max_recv_sge", max_inline_data = "max_inline_data",
        }
        ibv_gid = "union ibv_gid" { raw = "raw" }
        ibv_global_route = "struct ibv_global_route" {
            dgid = "dgid", flow_label = "flow_label", sgid_index = "sgid_index", hop_limit = "hop_limit",
            traffic_class = "traffic_class",
        }
        ibv_ah_attr = "struct ibv_ah_attr" {
            grh = "grh", dlid = "dlid", sl = "sl", src_path_bits = "src_path_bits", static_rate = "static_rate",
            is_global = "is_global", port_num = "port_num",
        }
        ibv_qp_attr = "struct ibv_qp_attr" {
            qp_state = "qp_state", cur_qp_state = "cur_qp_state", path_mtu = "path_mtu",
            path_mig_state = "path_mig_state", qkey = "qkey", rq_psn = "rq_psn", sq_psn = "sq_psn",
            dest_qp_num = "dest_qp_num", qp_access_flags = "qp_access_flags", cap = "cap", ah_attr = "ah_attr",
            alt_ah_attr = "alt_ah_attr", pkey_index = "pkey_index", alt_pkey_index = "alt_pkey_index",
            en_sqd_async_notify = "en_sqd_async_notify", sq_draining = "sq_draining",
            max_rd_atomic = "max_rd_atomic", max_dest_rd_atomic = "max_dest_rd_atomic",
            min_rnr_timer = "min_rnr_timer", port_num = "port_num", timeout = "timeout", retry_cnt = "retry_cnt",
            rnr_retry = "rnr_retry", alt_port_num = "alt_port_num", alt_timeout = "alt_timeout",
            rate_limit = "rate_limit",
        }
        ibv_qp_init_attr = "struct ibv_qp_init_attr" {
            qp_context = "qp_context", send_cq = "send_cq", recv_cq = "recv_cq", srq = "srq", cap = "cap",
            qp_type = "qp_type", sq_sig_all = "sq_sig_all",
        }
        ibv_rx_hash_conf = "struct ibv_rx_hash_conf" {
            rx_hash_function = "rx_hash_function", rx_hash_key_len = "rx_hash_key_len",
            rx_hash_key = "rx_hash_key", rx_hash_fields_mask = "rx_hash_fields_mask",
        }
        ibv_qp_init_attr_ex = "struct ibv_qp_init_attr_ex" {
            qp_context = "qp_context", send_cq = "send_cq", recv_cq = "recv_cq", srq = "srq", cap = "cap",
            qp_type = "qp_type", sq_sig_all = "sq_sig_all", comp_mask = "comp_mask", pd = "pd", xrcd = "xrcd",
            create_flags = "create_flags", max_tso_header = "max_tso_header", rwq_ind_tbl = "rwq_ind_tbl",
            rx_hash_conf = "rx_hash_conf", source_qpn = "source_qpn", send_ops_flags = "send_ops_flags",
        }
        ibv_cq_init_attr_ex = "struct ibv_cq_init_attr_ex" {
            cqe = "cqe", cq_context = "cq_context", channel = "channel", comp_vector = "comp_vector",
            wc_flags = "wc_flags", comp_mask = "comp_mask", flags = "flags", parent_domain = "parent_domain",
        }
        ibv_srq_attr = "struct ibv_srq_attr" { max_wr = "max_wr", max_sge = "max_sge", srq_limit = "srq_limit" }
        ibv_srq_init_attr = "struct ibv_srq_init_attr" { srq_context = "srq_context", attr = "attr" }
        ibv_srq_init_attr_ex = "struct ibv_srq_init_attr_ex" {
            srq_context = "srq_context", attr = "attr", comp_mask = "comp_mask", srq_type = "srq_type", pd = "pd",
            xrcd = "xrcd", cq = "cq", tm_cap = "tm_cap",
        }
        ibv_device_attr = "struct ibv_device_attr" {
            fw_ver = "fw_ver", node_guid = "node_guid", sys_image_guid = "sys_image_guid",
            max_mr_size = "max_mr_size", page_size_cap = "page_size_cap", vendor_id = "vendor_id",
            vendor_part_id = "vendor_part_id", hw_ver = "hw_ver", max_qp = "max_qp", max_qp_wr = "max_qp_wr",
            device_cap_flags = "device_cap_flags", max_sge = "max_sge", max_sge_rd = "max_sge_rd",
            max_cq = "max_cq", max_cqe = "max_cqe", max_mr = "max_mr", max_pd = "max_pd",
            max_qp_rd_atom = "max_qp_rd_atom", max_ee_rd_atom = "max_ee_rd_atom",
            max_res_rd_atom = "max_res_rd_atom", max_qp_init_rd_atom = "max_qp_init_rd_atom",
            max_ee_init_rd_atom = "max_ee_init_rd_atom", atomic_cap = "atomic_cap", max_ee = "max_ee",
            max_rdd = "max_rdd", max_mw = "max_mw", max_raw_ipv6_qp = "max_raw_ipv6_qp",
            max_raw_ethy_qp = "max_raw_ethy_qp", max_mcast_grp = "max_mcast_grp",
            max_mcast_qp_attach = "max_mcast_qp_attach", max_total_mcast_qp_attach = "max_total_mcast_qp_attach",
            max_ah = "max_ah", max_fmr = "max_fmr", max_map_per_fmr = "max_map_per_fmr", max_srq = "max_srq",
            max_srq_wr = "max_srq_wr", max_srq_sge = "max_srq_sge", max_pkeys = "max_pkeys",
            local_ca_ack_delay = "local_ca_ack_delay", phys_port_cnt = "phys_port_cnt",
        }
        ibv_device_attr_ex = "struct ibv_device_attr_ex" {
            orig_attr = "orig_attr", comp_mask = "comp_mask", odp_caps = "odp_caps",
            completion_timestamp_mask = "completion_timestamp_mask", hca_core_clock = "hca_core_clock",
            device_cap_flags_ex = "device_cap_flags_ex", max_dm_size = "max_dm_size",
            xrc_odp_caps = "xrc_odp_caps",
            phys_port_cnt_ex = "phys_port_cnt_ex",
        }
        ibv_td = "struct ibv_td" { context = "context", }
        ibv_parent_domain_init_attr = "struct ibv_parent_domain_init_attr" {
            pd = "pd", td = "td", comp_mask = "comp_mask", alloc = "alloc", free = "free",
            pd_context = "pd_context",
        }
        ibv_alloc_dm_attr = "struct ibv_alloc_dm_attr" {
            length = "length", log_align_req = "log_align_req", comp_mask = "comp_mask",
        }
        ibv_dm = "struct ibv_dm" {
            context = "context", memcpy_to_dm = "memcpy_to_dm", memcpy_from_dm = "memcpy_from_dm",
            comp_mask = "comp_mask", handle = "handle",
        }
        ibv_odp_caps = "struct ibv_odp_caps" {
            general_caps = "general_caps", rc_odp_caps = "per_transport_caps.rc_odp_caps",
            uc_odp_caps = "per_transport_caps.uc_odp_caps", ud_odp_caps = "per_transport_caps.ud_odp_caps",
        }
        ibv_port_attr = "struct ibv_port_attr" {
            state = "state", max_mtu = "max_mtu", active_mtu = "active_mtu", gid_tbl_len = "gid_tbl_len",
            port_cap_flags = "port_cap_flags", max_msg_sz = "max_msg_sz", bad_pkey_cntr = "bad_pkey_cntr",
            qkey_viol_cntr = "qkey_viol_cntr", pkey_tbl_len = "pkey_tbl_len", lid = "lid", sm_lid = "sm_lid",
            lmc = "lmc", max_vl_num = "max_vl_num", sm_sl = "sm_sl", subnet_timeout = "subnet_timeout",
            init_type_reply = "init_type_reply", active_width = "active_width", active_speed = "active_speed",
            phys_state = "phys_state", link_layer = "link_layer", flags = "flags",
            port_cap_flags2 = "port_cap_flags2",
        }
        ibv_gid_entry = "struct ibv_gid_entry" {
            gid = "gid", gid_index = "gid_index", port_num = "port_num", gid_type = "gid_type",
            ndev_ifindex = "ndev_ifindex",
        }
        ibv_async_event = "struct ibv_async_event" { element = "element", event_type = "event_type" }
        ibv_data_buf = "struct ibv_data_buf" { addr = "addr", length = "length" }
        ibv_poll_cq_attr = "struct ibv_poll_cq_attr" { comp_mask = "comp_mask" }
        ibv_query_device_ex_input = "struct ibv_query_device_ex_input" { comp_mask = "comp_mask" }
        ibv_flow = "struct ibv_flow" { comp_mask = "comp_mask", context = "context", handle = "handle" }
        ibv_wq = "struct ibv_wq" {
            context = "context", wq_context = "wq_context", pd = "pd", cq = "cq", wq_num = "wq_num",
            handle = "handle", state = "state", wq_type = "wq_type", post_recv = "post_recv", mutex = "mutex",
            cond = "cond", events_completed = "events_completed", comp_mask = "comp_mask",
        }
        ibv_wq_init_attr = "struct ibv_wq_init_attr" {
            wq_context = "wq_context", wq_type = "wq_type", max_wr = "max_wr", max_sge = "max_sge", pd = "pd",
            cq = "cq", comp_mask = "comp_mask", create_flags = "create_flags",
        }
        ibv_wq_attr = "struct ibv_wq_attr" {
            attr_mask = "attr_mask", wq_state = "wq_state", curr_wq_state = "curr_wq_state", flags = "flags",
            flags_mask = "flags_mask",
        }
        ibv_rwq_ind_table = "struct ibv_rwq_ind_table" {
            context = "context", ind_tbl_handle = "ind_tbl_handle", ind_tbl_num = "ind_tbl_num",
            comp_mask = "comp_mask",
        }
        ibv_rwq_ind_table_init_attr = "struct ibv_rwq_ind_table_init_attr" {
            log_ind_tbl_size = "log_ind_tbl_size", ind_tbl = "ind_tbl", comp_mask = "comp_mask",
        }
    );
    // The embedded bases and the unions of ibv_send_wr's `wr`.
    checks.push(Check {
        c_expr: "sizeof(((struct ibv_send_wr *)0)->wr)".into(),
        rust: std::mem::size_of::<ibv_send_wr_wr>(),
    });
    checks.push(Check {
        c_expr: "offsetof(struct ibv_send_wr, wr.rdma.rkey)".into(),
        rust: 40 + std::mem::offset_of!(ibv_rdma, rkey),
    });
    checks.push(Check {
        c_expr: "offsetof(struct ibv_send_wr, wr.atomic.rkey)".into(),
        rust: 40 + std::mem::offset_of!(ibv_atomic, rkey),
    });
    checks.push(Check {
        c_expr: "offsetof(struct ibv_send_wr, wr.ud.remote_qkey)".into(),
        rust: 40 + std::mem::offset_of!(ibv_ud, remote_qkey),
    });
    checks.push(Check {
        c_expr: "offsetof(struct ibv_cq_ex, comp_mask) == sizeof(struct ibv_cq)".into(),
        rust: 1,
    });
    checks.push(Check {
        c_expr: "offsetof(struct verbs_context, context) + sizeof(struct ibv_context)".into(),
        rust: std::mem::size_of::<verbs_context>(),
    });
    checks.push(Check {
        c_expr: "(size_t)__VERBS_ABI_IS_EXTENDED".into(),
        rust: VERBS_ABI_IS_EXTENDED as usize,
    });
    checks.push(Check {
        c_expr: "offsetof(struct ibv_port_attr, port_cap_flags2)".into(),
        rust: COMPAT_PORT_ATTR_SIZE,
    });

    let n = layout::assert_matches_c(&["infiniband/verbs.h"], "verbs.h", &checks);
    eprintln!("{n} sizes, alignments and offsets match verbs.h");
}

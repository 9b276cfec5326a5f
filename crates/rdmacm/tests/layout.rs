//! Every `repr(C)` mirror in `src/ffi.rs` against the system
//! `<rdma/rdma_cma.h>` (librdmacm-dev) and `<infiniband/sa.h>`: a C program
//! compiled here prints each struct's size and alignment, each field's offset
//! and size, and the header's constants, and they must equal Rust's.

#[allow(dead_code, unused_imports)]
#[path = "../src/ffi.rs"]
mod ffi;

#[allow(dead_code)]
#[path = "../src/rate.rs"]
mod rate;

mod common;

use ffi::*;
use softverbs_cabi_build::layout;
use softverbs_cabi_build::layout::Check;

/// `consts!(checks; RUST_CONST = "C_EXPR", …)`.
macro_rules! consts {
    ($checks:ident; $($r:expr => $c:literal),* $(,)?) => {$(
        $checks.push(Check { c_expr: format!("(size_t)({})", $c), rust: $r as usize });
    )*};
}

#[test]
fn every_mirror_matches_rdma_cma_h() {
    if !common::have_header("rdma/rdma_cma.h", "librdmacm-dev") {
        return;
    }
    let mut checks: Vec<Check> = Vec::new();
    layout!(checks;
        rdma_ib_addr = "struct rdma_ib_addr" { sgid = "sgid", dgid = "dgid", pkey = "pkey" }
        rdma_addr = "struct rdma_addr" { src = "src_storage", dst = "dst_storage", ibaddr = "addr.ibaddr" }
        rdma_route = "struct rdma_route" { addr = "addr", path_rec = "path_rec", num_paths = "num_paths" }
        rdma_event_channel = "struct rdma_event_channel" { fd = "fd" }
        rdma_cm_id = "struct rdma_cm_id" {
            verbs = "verbs", channel = "channel", context = "context", qp = "qp", route = "route", ps = "ps",
            port_num = "port_num", event = "event", send_cq_channel = "send_cq_channel", send_cq = "send_cq",
            recv_cq_channel = "recv_cq_channel", recv_cq = "recv_cq", srq = "srq", pd = "pd", qp_type = "qp_type",
        }
        rdma_conn_param = "struct rdma_conn_param" {
            private_data = "private_data", private_data_len = "private_data_len",
            responder_resources = "responder_resources", initiator_depth = "initiator_depth",
            flow_control = "flow_control", retry_count = "retry_count", rnr_retry_count = "rnr_retry_count",
            srq = "srq", qp_num = "qp_num",
        }
        rdma_ud_param = "struct rdma_ud_param" {
            private_data = "private_data", private_data_len = "private_data_len", ah_attr = "ah_attr",
            qp_num = "qp_num", qkey = "qkey",
        }
        rdma_cm_event = "struct rdma_cm_event" {
            id = "id", listen_id = "listen_id", event = "event", status = "status", param = "param",
        }
        rdma_addrinfo = "struct rdma_addrinfo" {
            ai_flags = "ai_flags", ai_family = "ai_family", ai_qp_type = "ai_qp_type",
            ai_port_space = "ai_port_space", ai_src_len = "ai_src_len", ai_dst_len = "ai_dst_len",
            ai_src_addr = "ai_src_addr", ai_dst_addr = "ai_dst_addr", ai_src_canonname = "ai_src_canonname",
            ai_dst_canonname = "ai_dst_canonname", ai_route_len = "ai_route_len", ai_route = "ai_route",
            ai_connect_len = "ai_connect_len", ai_connect = "ai_connect", ai_next = "ai_next",
        }
        rdma_cm_join_mc_attr_ex = "struct rdma_cm_join_mc_attr_ex" {
            comp_mask = "comp_mask", join_flags = "join_flags", addr = "addr",
        }
        ibv_sa_path_rec = "struct ibv_sa_path_rec" {
            dgid = "dgid", sgid = "sgid", dlid = "dlid", slid = "slid", raw_traffic = "raw_traffic",
            flow_label = "flow_label", hop_limit = "hop_limit", traffic_class = "traffic_class",
            reversible = "reversible", numb_path = "numb_path", pkey = "pkey", sl = "sl",
            mtu_selector = "mtu_selector", mtu = "mtu", rate_selector = "rate_selector", rate = "rate",
            packet_life_time_selector = "packet_life_time_selector", packet_life_time = "packet_life_time",
            preference = "preference",
        }
        ibv_ece = "struct ibv_ece" { vendor_id = "vendor_id", options = "options", comp_mask = "comp_mask" }
    );
    checks.push(Check {
        c_expr: "sizeof(((struct rdma_cm_event *)0)->param)".into(),
        rust: std::mem::size_of::<rdma_cm_event_param>(),
    });
    for (i, name) in EVENT_NAMES.iter().enumerate() {
        checks.push(Check {
            c_expr: format!("(size_t){name}"),
            rust: i,
        });
    }
    consts!(checks;
        RDMA_CM_EVENT_ADDR_RESOLVED => "RDMA_CM_EVENT_ADDR_RESOLVED",
        RDMA_CM_EVENT_ADDR_ERROR => "RDMA_CM_EVENT_ADDR_ERROR",
        RDMA_CM_EVENT_ROUTE_RESOLVED => "RDMA_CM_EVENT_ROUTE_RESOLVED",
        RDMA_CM_EVENT_ROUTE_ERROR => "RDMA_CM_EVENT_ROUTE_ERROR",
        RDMA_CM_EVENT_REJECTED => "RDMA_CM_EVENT_REJECTED",
        RDMA_PS_IPOIB => "RDMA_PS_IPOIB",
        RDMA_PS_TCP => "RDMA_PS_TCP",
        RDMA_PS_UDP => "RDMA_PS_UDP",
        RDMA_PS_IB => "RDMA_PS_IB",
        RDMA_UDP_QKEY => "RDMA_UDP_QKEY",
        IBV_QPT_RC => "IBV_QPT_RC",
        IBV_QPT_UC => "IBV_QPT_UC",
        IBV_QPT_UD => "IBV_QPT_UD",
        RDMA_OPTION_ID => "RDMA_OPTION_ID",
        RDMA_OPTION_IB => "RDMA_OPTION_IB",
        RDMA_OPTION_ID_TOS => "RDMA_OPTION_ID_TOS",
        RDMA_OPTION_ID_REUSEADDR => "RDMA_OPTION_ID_REUSEADDR",
        RDMA_OPTION_ID_AFONLY => "RDMA_OPTION_ID_AFONLY",
        RDMA_OPTION_ID_ACK_TIMEOUT => "RDMA_OPTION_ID_ACK_TIMEOUT",
        RDMA_OPTION_IB_PATH => "RDMA_OPTION_IB_PATH",
        RAI_PASSIVE => "RAI_PASSIVE",
        RAI_NUMERICHOST => "RAI_NUMERICHOST",
        RAI_NOROUTE => "RAI_NOROUTE",
        RAI_FAMILY => "RAI_FAMILY",
    );

    for (_, name, value) in rate::IBV_RATES {
        checks.push(Check {
            c_expr: format!("(size_t){name}"),
            rust: value as usize,
        });
    }

    let n = layout::assert_matches_c(&["rdma/rdma_cma.h"], "rdma_cma.h", &checks);
    eprintln!("{n} sizes, alignments, offsets and constants match rdma_cma.h");
}

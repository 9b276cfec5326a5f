//! The conversions between the `verbs.h` attribute structs and softverbs'
//! types, both ways, each written once as a field list.

use crate::ffi::*;
use proto::types::{AhAttr, GlobalRoute};
use proto::{Gid, QpCap};
use softverbs::{QpAttr, SrqAttr};

/// `both_ways!(C <-> Rust, to_rust, to_c { same-named fields } { nested: to_rust / to_c })`.
macro_rules! both_ways {
    ($c:ident <-> $r:ident, $to_r:ident, $to_c:ident { $($f:ident),* $(,)? } { $($n:ident: $nr:ident / $nc:ident),* $(,)? }) => {
        pub(crate) fn $to_r(a: &$c) -> $r {
            $r { $($f: a.$f,)* $($n: $nr(&a.$n),)* }
        }
        pub(crate) fn $to_c(a: &$r) -> $c {
            $c { $($f: a.$f,)* $($n: $nc(&a.$n),)* }
        }
    };
}

fn gid(g: &ibv_gid) -> Gid {
    Gid(g.raw)
}

fn c_gid(g: &Gid) -> ibv_gid {
    ibv_gid { raw: g.0 }
}

both_ways!(ibv_qp_cap <-> QpCap, qp_cap, c_qp_cap {
    max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data,
} {});

both_ways!(ibv_global_route <-> GlobalRoute, global_route, c_global_route {
    flow_label, sgid_index, hop_limit, traffic_class,
} { dgid: gid / c_gid });

both_ways!(ibv_ah_attr <-> AhAttr, ah_attr, c_ah_attr {
    dlid, sl, src_path_bits, static_rate, is_global, port_num,
} { grh: global_route / c_global_route });

both_ways!(ibv_qp_attr <-> QpAttr, qp_attr, c_qp_attr {
    qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num, qp_access_flags,
    pkey_index, alt_pkey_index, en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic,
    min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout, rate_limit,
} { cap: qp_cap / c_qp_cap, ah_attr: ah_attr / c_ah_attr, alt_ah_attr: ah_attr / c_ah_attr });

both_ways!(ibv_srq_attr <-> SrqAttr, srq_attr, c_srq_attr { max_wr, max_sge, srq_limit } {});

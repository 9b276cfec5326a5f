//! Readable renderings of device and QP attributes.

use softverbs::*;
use std::fmt::Write;

/// The device, its port and GID table, in `ibv_devinfo -v` style.
pub fn device(name: &str, ctx: &Context) -> Result<String, Error> {
    let a = ctx.query_device();
    let p = ctx.query_port(1)?;
    let mut s = String::new();
    let mut line = |k: &str, v: String| writeln!(s, "\t{k:<28}{v}").expect("String write");
    line("hca_id:", name.to_string());
    line("transport:", "InfiniBand (0) — RoCEv2 over UDP".into());
    line("fw_ver:", a.fw_ver.clone());
    line("node_guid:", format!("{:016x}", a.node_guid));
    line("vendor_id:", format!("{:#x}", a.vendor_id));
    line("max_mr_size:", format!("{:#x}", a.max_mr_size));
    line("max_qp:", a.max_qp.to_string());
    line("max_qp_wr:", a.max_qp_wr.to_string());
    line("max_sge:", a.max_sge.to_string());
    line("max_cq / max_cqe:", format!("{} / {}", a.max_cq, a.max_cqe));
    line("max_mr / max_pd:", format!("{} / {}", a.max_mr, a.max_pd));
    line("max_qp_rd_atom:", a.max_qp_rd_atom.to_string());
    line("max_qp_init_rd_atom:", a.max_qp_init_rd_atom.to_string());
    line(
        "max_srq / max_srq_wr:",
        format!("{} / {}", a.max_srq, a.max_srq_wr),
    );
    line("max_srq_sge:", a.max_srq_sge.to_string());
    line("atomic_cap:", format!("{:?}", a.atomic_cap));
    line("port 1 state:", format!("{:?}", p.state));
    line(
        "max_mtu / active_mtu:",
        format!("{} / {}", p.max_mtu, p.active_mtu),
    );
    line("link_layer:", "Ethernet".into());
    line(
        "gid_tbl_len / pkey_tbl_len:",
        format!("{} / {}", p.gid_tbl_len, p.pkey_tbl_len),
    );
    for i in 0..p.gid_tbl_len {
        if let Ok(g) = ctx.query_gid(1, i) {
            line(&format!("GID[{i}]:"), format!("{g}, RoCE v2 ({})", g.ip()));
        }
    }
    Ok(s)
}

/// `ibv_query_qp` of one QP: every attribute valid in its state.
pub fn qp(qpn: u32, info: &QpInfo) -> String {
    let a = &info.attr;
    let v = info.valid;
    let mut s = format!(
        "QP {qpn:#08x} ({:?}), state {}\n",
        info.qp_type,
        info.state()
    );
    let mut row = |bit: AttrMask, k: &str, val: String| {
        if v.contains(bit) {
            writeln!(s, "  {k:<20}{val}").expect("String write");
        }
    };
    row(AttrMask::PORT, "port_num", a.port_num.to_string());
    row(AttrMask::PKEY_INDEX, "pkey_index", a.pkey_index.to_string());
    row(
        AttrMask::ACCESS_FLAGS,
        "qp_access_flags",
        a.qp_access_flags.to_string(),
    );
    row(AttrMask::QKEY, "qkey", format!("{:#x}", a.qkey));
    row(AttrMask::PATH_MTU, "path_mtu", a.path_mtu.to_string());
    row(
        AttrMask::DEST_QPN,
        "dest_qp_num",
        format!("{:#08x}", a.dest_qp_num),
    );
    row(AttrMask::RQ_PSN, "rq_psn", format!("{:#08x}", a.rq_psn));
    row(AttrMask::SQ_PSN, "sq_psn", format!("{:#08x}", a.sq_psn));
    row(
        AttrMask::AV,
        "ah_attr.dgid",
        format!("{} ({})", a.ah_attr.grh.dgid, a.ah_attr.grh.dgid.ip()),
    );
    row(
        AttrMask::AV,
        "ah_attr.sgid_index",
        a.ah_attr.grh.sgid_index.to_string(),
    );
    row(
        AttrMask::AV,
        "ah_attr.hop_limit",
        a.ah_attr.grh.hop_limit.to_string(),
    );
    row(
        AttrMask::MAX_DEST_RD_ATOMIC,
        "max_dest_rd_atomic",
        a.max_dest_rd_atomic.to_string(),
    );
    row(
        AttrMask::MIN_RNR_TIMER,
        "min_rnr_timer",
        a.min_rnr_timer.to_string(),
    );
    row(
        AttrMask::MAX_QP_RD_ATOMIC,
        "max_rd_atomic",
        a.max_rd_atomic.to_string(),
    );
    row(
        AttrMask::TIMEOUT,
        "timeout",
        format!("{} ({:.1} ms)", a.timeout, ack_timeout_ms(a.timeout)),
    );
    row(AttrMask::RETRY_CNT, "retry_cnt", a.retry_cnt.to_string());
    let rnr = if a.rnr_retry == 7 {
        "7 (infinite)".to_string()
    } else {
        a.rnr_retry.to_string()
    };
    row(AttrMask::RNR_RETRY, "rnr_retry", rnr);
    let c = info.cap;
    row(
        AttrMask::CAP,
        "cap",
        format!(
            "send_wr {} recv_wr {} send_sge {} recv_sge {} inline {}",
            c.max_send_wr, c.max_recv_wr, c.max_send_sge, c.max_recv_sge, c.max_inline_data
        ),
    );
    row(AttrMask::CAP, "sq_sig_all", info.sq_sig_all.to_string());
    s
}

/// IBA local ACK timeout: 4.096 µs × 2^timeout (0 = infinite).
fn ack_timeout_ms(code: u8) -> f64 {
    if code == 0 {
        return f64::INFINITY;
    }
    4.096e-3 * f64::from(1u32 << code.min(31))
}

//! Making queue pairs: `ibv_create_qp`, the `create_qp_ex` and `open_qp`
//! ops (an XRC_RECV QP is made in, or opened through, its XRC domain,
//! spec/xrc.md), RSS QPs over a WQ table (spec/raw-packet.md §6). A new QP's
//! block carries the `ibv_wr_*` builders of post.rs, so this file sits above
//! post.rs, which sits above the QP block (qp/mod.rs).

use super::QpBlock;
use crate::context::ctx_block;
use crate::convert::{c_qp_cap, qp_cap};
use crate::cq::CqBlock;
use crate::domain::{DomainHold, PdBlock};
use crate::ffi::*;
use crate::post::qp_ex_ops;
use crate::srq::SrqBlock;
use crate::util::*;
use crate::wq::IndTableBlock;
use crate::xrc::xrcd_block;
use softverbs::QpInit;
use std::ffi::{c_int, c_void};
use std::sync::Mutex;

/// `IBV_QP_INIT_ATTR_PD`.
const QP_INIT_ATTR_PD: u32 = 1;
/// `IBV_QP_INIT_ATTR_CREATE_FLAGS`.
const QP_INIT_ATTR_CREATE_FLAGS: u32 = 1 << 2;
/// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`.
const QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;
/// `IBV_QP_EX_WITH_FLUSH`.
const SEND_OPS_WITH_FLUSH: u64 = 1 << 11;
/// `IBV_QP_INIT_ATTR_IND_TABLE`, `IBV_QP_INIT_ATTR_RX_HASH`: an RSS QP.
const QP_INIT_ATTR_IND_TABLE: u32 = 1 << 4;
const QP_INIT_ATTR_RX_HASH: u32 = 1 << 5;

/// An RSS QP (spec/raw-packet.md §6): RAW_PACKET, both the table and the
/// hash configuration; it has no queues of its own, so CQs, SRQ and
/// capacities are not read.
unsafe fn create_rss(
    verb: &str,
    pdb: &PdBlock,
    a: &ibv_qp_init_attr_ex,
) -> Result<softverbs::QueuePair, c_int> {
    let both = QP_INIT_ATTR_IND_TABLE | QP_INIT_ATTR_RX_HASH;
    if a.comp_mask & both != both || a.qp_type != 8 {
        return Err(refuse(
            verb,
            EINVAL,
            "an RSS QP is a RAW_PACKET QP with both IBV_QP_INIT_ATTR_IND_TABLE and _RX_HASH",
        ));
    }
    let table = block::<IndTableBlock>(verb, a.rwq_ind_tbl.cast())?;
    let h = &a.rx_hash_conf;
    let len = usize::from(h.rx_hash_key_len);
    if h.rx_hash_key.is_null() && len > 0 {
        return Err(refuse(verb, EINVAL, "rx_hash_key is NULL"));
    }
    let key = if len == 0 {
        Vec::new()
    } else {
        // SAFETY: the caller's key of rx_hash_key_len bytes.
        unsafe { std::slice::from_raw_parts(h.rx_hash_key, len) }.to_vec()
    };
    pdb.pd()
        .create_rss_qp(
            table.table(),
            h.rx_hash_function,
            &key,
            h.rx_hash_fields_mask,
        )
        .map_err(|e| errno_of(&e))
}

/// `IBV_QP_INIT_ATTR_MAX_TSO_HEADER`.
const QP_INIT_ATTR_MAX_TSO_HEADER: u32 = 1 << 3;

/// `max_tso_header` (spec/raw-packet.md §4), read only with its comp_mask
/// bit; softverbs checks it (RAW_PACKET only, at most the device's limit).
fn tso_header(a: &ibv_qp_init_attr_ex) -> u16 {
    if a.comp_mask & QP_INIT_ATTR_MAX_TSO_HEADER != 0 {
        a.max_tso_header
    } else {
        0
    }
}

/// Creates a QP from an `ibv_qp_init_attr_ex` whose fields past `sq_sig_all`
/// are read only when `ext` (the plain `ibv_qp_init_attr` is a prefix of it).
unsafe fn create(
    verb: &str,
    pd: *mut ibv_pd,
    a: *mut ibv_qp_init_attr_ex,
    ext: bool,
) -> Result<*mut ibv_qp, c_int> {
    if a.is_null() {
        return Err(refuse(verb, EINVAL, "qp_init_attr is NULL"));
    }
    // SAFETY: non-NULL attributes from the caller; `ext` says how long they are.
    let (comp_mask, create_flags, send_ops_flags, max_tso_header) = if ext {
        let a = unsafe { &*a };
        let has = |bit: u32| a.comp_mask & bit != 0;
        let create_flags = if has(QP_INIT_ATTR_CREATE_FLAGS) {
            a.create_flags
        } else {
            0
        };
        let send_ops_flags = if has(QP_INIT_ATTR_SEND_OPS_FLAGS) {
            a.send_ops_flags
        } else {
            0
        };
        (a.comp_mask, create_flags, send_ops_flags, tso_header(a))
    } else {
        (QP_INIT_ATTR_PD, 0, 0, 0)
    };
    // ibv_wr_flush sits past the end of rdma-core 44's ibv_qp_ex, which is
    // what this library hands out: a QP promising it would be called there.
    if send_ops_flags & SEND_OPS_WITH_FLUSH != 0 {
        return Err(refuse(
            verb,
            EOPNOTSUPP,
            "send_ops_flags has IBV_QP_EX_WITH_FLUSH: ibv_wr_flush is not in this library's ibv_qp_ex (rdma-core 44)",
        ));
    }
    // SAFETY: the common prefix is valid in both forms.
    let (qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all) = unsafe {
        let a = &*a;
        (
            a.qp_context,
            a.send_cq,
            a.recv_cq,
            a.srq,
            a.cap,
            a.qp_type,
            a.sq_sig_all,
        )
    };
    let pdb = block::<PdBlock>(verb, pd)?;
    // spec/xrc.md §2: an XRC_SEND QP has no receive side; its recv_cq may be NULL.
    let recv_cq = if qp_type == QPT_XRC_SEND && recv_cq.is_null() {
        send_cq
    } else {
        recv_cq
    };
    let rss = ext && comp_mask & (QP_INIT_ATTR_IND_TABLE | QP_INIT_ATTR_RX_HASH) != 0;
    let qp = if rss {
        // SAFETY: `ext`: the caller's full ibv_qp_init_attr_ex.
        unsafe { create_rss(verb, pdb, &*a) }?
    } else {
        if send_cq.is_null() || recv_cq.is_null() {
            return Err(refuse(
                verb,
                EINVAL,
                "send_cq and recv_cq are required (NULL given)",
            ));
        }
        let scq = block::<CqBlock>(verb, send_cq)?;
        let rcq = block::<CqBlock>(verb, recv_cq)?;
        let srqb = if srq.is_null() {
            None
        } else {
            Some(block::<SrqBlock>(verb, srq)?)
        };
        let init = QpInit {
            send_cq: scq.cq(),
            recv_cq: rcq.cq(),
            srq: srqb.map(SrqBlock::srq),
            cap: qp_cap(&cap),
            sq_sig_all: sq_sig_all != 0,
            comp_mask,
            create_flags,
            send_ops_flags,
            max_tso_header,
        };
        pdb.pd()
            .create_qp(&init, qp_type)
            .map_err(|e| errno_of(&e))?
    };
    // The capacities granted go back to the caller, as the kernel's do.
    // SAFETY: the caller's attributes, writable.
    unsafe { (*a).cap = c_qp_cap(&qp.cap()) };
    let cqs = (send_cq, recv_cq);
    // SAFETY: the PD's own context.
    Ok(unsafe { register(verb, pdb.c.context, pd, cqs, srq, qp_context, qp) })
}

/// The C block of a new (or opened) QP, in its context's registry.
///
/// # Safety
/// `context` is the live context the QP was made in (or NULL).
pub(crate) unsafe fn register(
    verb: &str,
    context: *mut ibv_context,
    pd: *mut ibv_pd,
    (send_cq, recv_cq): (*mut ibv_cq, *mut ibv_cq),
    srq: *mut ibv_srq,
    qp_context: *mut c_void,
    qp: softverbs::QueuePair,
) -> *mut ibv_qp {
    let (qp_type, id) = (qp.qp_type().raw(), qp.id());
    let c = ibv_qp_ex {
        qp_base: ibv_qp {
            context,
            qp_context,
            pd,
            send_cq,
            recv_cq,
            srq,
            handle: 0,
            qp_num: qp.qp_num(),
            state: 0,
            qp_type,
            mutex: [0; 5],
            cond: [0; 6],
            events_completed: 0,
        },
        comp_mask: 0,
        wr_id: 0,
        wr_flags: 0,
        ..qp_ex_ops()
    };
    let p = into_c(QpBlock {
        c,
        magic: QpBlock::MAGIC,
        inner: qp,
        batch: Mutex::default(),
        // SAFETY: `pd` is NULL or the live PD the QP was made in.
        _domain: unsafe { DomainHold::of(pd) },
    });
    // SAFETY: the caller's live context (`ctx_block` checks it).
    if let Ok(ctx) = unsafe { ctx_block(verb, context) } {
        ctx.objects().qps.insert(id, p as usize);
    }
    p
}

/// `IBV_QPT_XRC_SEND`, `IBV_QPT_XRC_RECV`.
const QPT_XRC_SEND: u32 = 9;
const QPT_XRC_RECV: u32 = 10;

#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    create(
        "ibv_create_qp",
        pd,
        attr.cast::<ibv_qp_init_attr_ex>(),
        false,
    )
    .unwrap_or_else(|e| {
        set_errno(e);
        std::ptr::null_mut()
    })
}

/// `verbs_context.create_qp_ex`.
pub(crate) unsafe extern "C" fn create_qp_ex(
    context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    const VERB: &str = "ibv_create_qp_ex";
    let r = (|| {
        if attr.is_null() {
            return Err(refuse(VERB, EINVAL, "qp_init_attr_ex is NULL"));
        }
        // SAFETY: non-NULL attributes from the caller.
        let (mask, pd) = unsafe { ((*attr).comp_mask, (*attr).pd) };
        // SAFETY: as above.
        if unsafe { (*attr).qp_type } == QPT_XRC_RECV {
            // SAFETY: as above.
            return unsafe { create_recv_qp(context, &mut *attr) };
        }
        if mask & QP_INIT_ATTR_PD == 0 {
            return Err(refuse(
                VERB,
                EINVAL,
                "comp_mask lacks IBV_QP_INIT_ATTR_PD: a PD is required",
            ));
        }
        let pdb = block::<PdBlock>(VERB, pd)?;
        if pdb.c.context != context {
            return Err(refuse(VERB, EINVAL, "the PD belongs to another context"));
        }
        create(VERB, pd, attr, true)
    })();
    r.unwrap_or_else(|e| {
        set_errno(e);
        std::ptr::null_mut()
    })
}

/// `IBV_QP_INIT_ATTR_XRCD`.
const QP_INIT_ATTR_XRCD: u32 = 1 << 1;

/// `ibv_create_qp_ex` of an XRC_RECV QP: in `attr.xrcd`, with no PD, CQs or
/// SRQ (they are NULL in the QP); its capacities come back 0.
pub(crate) unsafe fn create_recv_qp(
    context: *mut ibv_context,
    attr: &mut ibv_qp_init_attr_ex,
) -> Result<*mut ibv_qp, c_int> {
    const VERB: &str = "ibv_create_qp_ex";
    if attr.comp_mask & QP_INIT_ATTR_XRCD == 0 {
        let why = "an XRC_RECV QP needs an XRC domain (comp_mask IBV_QP_INIT_ATTR_XRCD)";
        return Err(refuse(VERB, EINVAL, why));
    }
    let x = xrcd_block(VERB, attr.xrcd.cast())?;
    if x.c.context != context {
        return Err(refuse(
            VERB,
            EINVAL,
            "the XRC domain belongs to another context",
        ));
    }
    let qp = x.xrcd().create_recv_qp().map_err(|e| errno_of(&e))?;
    attr.cap = c_qp_cap(&qp.cap());
    let cqs = (std::ptr::null_mut(), std::ptr::null_mut());
    let (pd, srq) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: the caller's context, which the XRCD was checked to be in.
    Ok(unsafe { register(VERB, context, pd, cqs, srq, attr.qp_context, qp) })
}

/// `enum ibv_qp_open_attr_mask`.
const QP_OPEN_ATTR_NUM: u32 = 1;
const QP_OPEN_ATTR_XRCD: u32 = 1 << 1;
const QP_OPEN_ATTR_CONTEXT: u32 = 1 << 2;
const QP_OPEN_ATTR_TYPE: u32 = 1 << 3;
const QP_OPEN_ATTR_RESERVED: u32 = 1 << 4;

/// `verbs_context.open_qp`: another handle to an XRC_RECV QP of the domain
/// (rdma-core `ibv_cmd_open_qp`: `NUM`, `XRCD` and `TYPE` are required).
pub(crate) unsafe extern "C" fn open_qp(
    context: *mut ibv_context,
    attr: *mut ibv_qp_open_attr,
) -> *mut ibv_qp {
    const VERB: &str = "ibv_open_qp";
    let r = (|| {
        if attr.is_null() {
            return Err(refuse(VERB, EINVAL, "qp_open_attr is NULL"));
        }
        // SAFETY: non-NULL attributes from the caller.
        let a = unsafe { &*attr };
        if a.comp_mask >= QP_OPEN_ATTR_RESERVED {
            let why = format_args!("comp_mask {:#x} has unknown bits", a.comp_mask);
            return Err(refuse(VERB, EOPNOTSUPP, why));
        }
        let need = QP_OPEN_ATTR_NUM | QP_OPEN_ATTR_XRCD | QP_OPEN_ATTR_TYPE;
        if a.comp_mask & need != need {
            let why = "comp_mask must include IBV_QP_OPEN_ATTR_NUM, _XRCD and _TYPE";
            return Err(refuse(VERB, EINVAL, why));
        }
        if a.qp_type != softverbs::QpType::XrcRecv.raw() {
            let why = format_args!("qp_type {}: only XRC_RECV QPs can be opened", a.qp_type);
            return Err(refuse(VERB, EINVAL, why));
        }
        let x = xrcd_block(VERB, a.xrcd)?;
        let qp = x.xrcd().open_qp(a.qp_num).map_err(|e| errno_of(&e))?;
        let qp_context: *mut c_void = if a.comp_mask & QP_OPEN_ATTR_CONTEXT != 0 {
            a.qp_context
        } else {
            std::ptr::null_mut()
        };
        if x.c.context != context {
            return Err(refuse(
                VERB,
                EINVAL,
                "the XRC domain belongs to another context",
            ));
        }
        let cqs = (std::ptr::null_mut(), std::ptr::null_mut());
        let (pd, srq) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: the caller's context, which the XRCD was checked to be in.
        Ok(unsafe { register(VERB, context, pd, cqs, srq, qp_context, qp) })
    })();
    r.unwrap_or_else(|e| {
        set_errno(e);
        std::ptr::null_mut()
    })
}

crate::symver!("qp_create");

//! Queue pairs: `ibv_create_qp(_ex)`, `ibv_modify_qp`, `ibv_query_qp`,
//! `ibv_destroy_qp`, `ibv_qp_to_qp_ex`. softverbs checks every rule (the
//! kernel's modify table, required and optional attributes, values) and says
//! in words what was wrong; this layer converts the C structs.

use crate::convert::{c_qp_cap, c_query_attr, checked_qp_attr, qp_cap};
use crate::cq::CqBlock;
use crate::ffi::*;
use crate::memory::PdBlock;
use crate::post::Batch;
use crate::srq::SrqBlock;
use crate::util::*;
use softverbs::{AttrMask, QpInit};
use std::ffi::{c_int, c_void};
use std::sync::{Mutex, MutexGuard, PoisonError};

#[repr(C)]
pub(crate) struct QpBlock {
    pub c: ibv_qp_ex,
    magic: u64,
    pub inner: softverbs::QueuePair,
    /// The `ibv_wr_*` batch being built (between `wr_start` and `wr_complete`).
    batch: Mutex<Batch>,
    /// Set when made through a parent domain (its dealloc waits for it).
    _domain: Option<crate::domain::DomainHold>,
}
impl_block!(QpBlock, ibv_qp, "queue pair", 0x736f_6674_7170_3031);

impl QpBlock {
    pub(crate) fn batch(&self) -> MutexGuard<'_, Batch> {
        self.batch.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

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
    let table = block::<crate::wq::IndTableBlock>(verb, a.rwq_ind_tbl.cast())?;
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
            srq: srqb.map(super::srq::SrqBlock::srq),
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
        ..crate::post::qp_ex_ops()
    };
    let p = into_c(QpBlock {
        c,
        magic: QpBlock::MAGIC,
        inner: qp,
        batch: Mutex::default(),
        // SAFETY: `pd` is NULL or the live PD the QP was made in.
        _domain: unsafe { crate::domain::DomainHold::of(pd) },
    });
    // SAFETY: the caller's live context (`ctx_block` checks it).
    if let Ok(ctx) = unsafe { crate::context::ctx_block(verb, context) } {
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
            return unsafe { crate::xrc::create_recv_qp(context, &mut *attr) };
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

#[no_mangle]
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
) -> c_int {
    let b = match block::<QpBlock>("ibv_modify_qp", qp) {
        Ok(b) => b,
        Err(e) => return e,
    };
    if attr.is_null() {
        return refuse("ibv_modify_qp", EINVAL, "attr is NULL");
    }
    let mask = AttrMask(attr_mask as u32);
    // SAFETY: non-NULL attributes from the caller.
    let a = match checked_qp_attr(unsafe { &*attr }, mask) {
        Ok(a) => a,
        Err(e) => return refuse("ibv_modify_qp", e.errno(), e),
    };
    match b.inner.modify(&a, mask) {
        Ok(()) => {
            if let Ok(info) = b.inner.query() {
                // SAFETY: the live QP's public field, which programs read.
                unsafe { (*qp).state = info.attr.qp_state.raw() };
            }
            0
        }
        Err(e) => errno_of(&e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _attr_mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    let b = match block::<QpBlock>("ibv_query_qp", qp) {
        Ok(b) => b,
        Err(e) => return e,
    };
    if attr.is_null() || init_attr.is_null() {
        return refuse("ibv_query_qp", EINVAL, "attr or init_attr is NULL");
    }
    let info = match b.inner.query() {
        Ok(i) => i,
        Err(e) => return errno_of(&e),
    };
    let base = &b.c.qp_base;
    // SAFETY: non-NULL out-pointers from the caller; `qp` is live.
    unsafe {
        attr.write(c_query_attr(&info));
        init_attr.write(ibv_qp_init_attr {
            qp_context: base.qp_context,
            send_cq: base.send_cq,
            recv_cq: base.recv_cq,
            srq: base.srq,
            cap: c_qp_cap(&info.cap),
            qp_type: info.qp_type.raw(),
            sq_sig_all: c_int::from(info.sq_sig_all),
        });
        (*qp).state = info.attr.qp_state.raw();
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    let b = match block::<QpBlock>("ibv_destroy_qp", qp) {
        Ok(b) => b,
        Err(e) => return e,
    };
    // ibv_destroy_qp(3): fails while attached to a multicast group (EBUSY).
    if let Err(e) = b.inner.destroyable() {
        return errno_of(&e);
    }
    if let Ok(ctx) = crate::context::ctx_block("ibv_destroy_qp", b.c.qp_base.context) {
        // An XRC_RECV QP may have several handles (ibv_open_qp): the registry
        // forgets only the one it names, if it is this one.
        let mut objects = ctx.objects();
        if objects.qps.get(&b.inner.id()) == Some(&(qp as usize)) {
            objects.qps.remove(&b.inner.id());
        }
    }
    free::<QpBlock>(qp);
    0
}

/// `ibv_qp_to_qp_ex`: every QP of this library is an `ibv_qp_ex`.
#[no_mangle]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    match block::<QpBlock>("ibv_qp_to_qp_ex", qp) {
        Ok(_) => qp.cast::<ibv_qp_ex>(),
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

pub(crate) unsafe fn ack_async(qp: *mut ibv_qp) {
    if let Ok(b) = block::<QpBlock>("ibv_ack_async_event", qp) {
        let _guard = b.batch();
        // SAFETY: the live QP's public counter, updated under its lock.
        unsafe { (*qp).events_completed += 1 };
    }
}

/// `ibv_query_ece` / `ibv_set_ece`: no enhanced connection establishment.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_ece(qp: *mut ibv_qp, _ece: *mut c_void) -> c_int {
    match block::<QpBlock>("ibv_query_ece", qp) {
        Ok(_) => refuse(
            "ibv_query_ece",
            EOPNOTSUPP,
            "enhanced connection establishment is not offered",
        ),
        Err(e) => e,
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_set_ece(qp: *mut ibv_qp, _ece: *mut c_void) -> c_int {
    match block::<QpBlock>("ibv_set_ece", qp) {
        Ok(_) => refuse(
            "ibv_set_ece",
            EOPNOTSUPP,
            "enhanced connection establishment is not offered",
        ),
        Err(e) => e,
    }
}

/// `ibv_query_qp_data_in_order`: 0, i.e. no promise that data lands in order
/// before the completion (the portable answer; programs then poll the CQ).
#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp_data_in_order(
    qp: *mut ibv_qp,
    _op: u32,
    _flags: u32,
) -> c_int {
    let _ = block::<QpBlock>("ibv_query_qp_data_in_order", qp);
    0
}

crate::symver!("qp");

/// `ibv_attach_mcast` / `ibv_detach_mcast`: UD QPs only; `gid` a multicast GID
/// (spec/multicast.md). `lid` is ignored, as on every RoCE port (kernel
/// `is_valid_mcast_lid`).
unsafe fn mcast(what: &'static str, qp: *mut ibv_qp, gid: *const ibv_gid, attach: bool) -> c_int {
    let b = match block::<QpBlock>(what, qp) {
        Ok(b) => b,
        Err(e) => return e,
    };
    if gid.is_null() {
        return refuse(what, EINVAL, "gid is NULL");
    }
    // SAFETY: non-NULL, points to the caller's 16-byte GID for the call.
    let gid = softverbs::Gid(unsafe { (*gid).raw });
    let r = if attach {
        b.inner.attach_mcast(&gid)
    } else {
        b.inner.detach_mcast(&gid)
    };
    match r {
        Ok(()) => 0,
        Err(e) => errno_of(&e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_attach_mcast(
    qp: *mut ibv_qp,
    gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    // SAFETY: the caller's QP and GID pointers, checked inside.
    unsafe { mcast("ibv_attach_mcast", qp, gid, true) }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_detach_mcast(
    qp: *mut ibv_qp,
    gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    // SAFETY: the caller's QP and GID pointers, checked inside.
    unsafe { mcast("ibv_detach_mcast", qp, gid, false) }
}

//! Shared receive queues.

use crate::context::ctx_block;
use crate::convert::{c_srq_attr, srq_attr};
use crate::domain::PdBlock;
use crate::ffi::*;
use crate::util::*;
use std::ffi::c_int;

#[repr(C)]
pub(crate) struct SrqBlock {
    pub c: ibv_srq,
    magic: u64,
    inner: Option<softverbs::SharedReceiveQueue>,
    /// Set when made through a parent domain (its dealloc waits for it).
    _domain: Option<crate::domain::DomainHold>,
}
impl_block!(
    SrqBlock,
    ibv_srq,
    "shared receive queue",
    0x736f_6674_7372_7131
);

impl SrqBlock {
    pub(crate) fn srq(&self) -> &softverbs::SharedReceiveQueue {
        self.inner.as_ref().expect("a live SRQ block holds its SRQ")
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_srq(
    pd: *mut ibv_pd,
    init: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    const VERB: &str = "ibv_create_srq";
    let r = block::<PdBlock>(VERB, pd).and_then(|pdb| {
        if init.is_null() {
            return Err(refuse(VERB, EINVAL, "srq_init_attr is NULL"));
        }
        // SAFETY: non-NULL attributes from the caller.
        let (ctx_ptr, a) = (pdb.c.context, unsafe { &mut *init });
        let srq = pdb
            .pd()
            .create_srq(srq_attr(&a.attr))
            .map_err(|e| errno_of(&e))?;
        // The sizes granted go back to the caller, as the kernel's do.
        if let Ok(granted) = srq.query() {
            a.attr.max_wr = granted.max_wr;
            a.attr.max_sge = granted.max_sge;
        }
        // SAFETY: the PD's own context.
        Ok(unsafe { register(VERB, ctx_ptr, a.srq_context, pd, srq) })
    });
    r.unwrap_or_else(|e| {
        set_errno(e);
        std::ptr::null_mut()
    })
}

/// The C block of a new SRQ, in its context's registry (for async events).
///
/// # Safety
/// `ctx_ptr` is the live context the SRQ was made in (or NULL).
unsafe fn register(
    verb: &str,
    ctx_ptr: *mut ibv_context,
    srq_context: *mut std::ffi::c_void,
    pd: *mut ibv_pd,
    srq: softverbs::SharedReceiveQueue,
) -> *mut ibv_srq {
    let id = srq.id();
    let c = ibv_srq {
        context: ctx_ptr,
        srq_context,
        pd,
        handle: 0,
        mutex: [0; 5],
        cond: [0; 6],
        events_completed: 0,
    };
    let p = into_c(SrqBlock {
        c,
        magic: SrqBlock::MAGIC,
        inner: Some(srq),
        // SAFETY: `pd` is NULL or the live PD the SRQ was made in.
        _domain: unsafe { crate::domain::DomainHold::of(pd) },
    });
    // SAFETY: the caller's live context (`ctx_block` checks it).
    if let Ok(ctx) = unsafe { ctx_block(verb, ctx_ptr) } {
        ctx.objects().srqs.insert(id, p as usize);
    }
    p
}

/// `enum ibv_srq_init_attr_mask`.
const SRQ_INIT_ATTR_TYPE: u32 = 1;
const SRQ_INIT_ATTR_PD: u32 = 1 << 1;
const SRQ_INIT_ATTR_XRCD: u32 = 1 << 2;
const SRQ_INIT_ATTR_CQ: u32 = 1 << 3;
const SRQ_INIT_ATTR_TM: u32 = 1 << 4;
/// `enum ibv_srq_type`.
const SRQT_BASIC: u32 = 0;
const SRQT_XRC: u32 = 1;

/// `verbs_context.create_srq_ex` (verbs.h's `ibv_create_srq_ex` calls it for
/// everything but a plain basic SRQ): a basic SRQ, or an XRC SRQ with a PD,
/// an XRC domain and a CQ (spec/xrc.md §2). Tag matching: `EOPNOTSUPP`.
pub(crate) unsafe extern "C" fn create_srq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    const VERB: &str = "ibv_create_srq_ex";
    let r = (|| {
        if attr.is_null() {
            return Err(refuse(VERB, EINVAL, "srq_init_attr_ex is NULL"));
        }
        // SAFETY: non-NULL attributes from the caller.
        let a = unsafe { &mut *attr };
        let has = |bit: u32| a.comp_mask & bit != 0;
        let srq_type = if has(SRQ_INIT_ATTR_TYPE) {
            a.srq_type
        } else {
            SRQT_BASIC
        };
        if has(SRQ_INIT_ATTR_TM) || srq_type > SRQT_XRC {
            let why = format_args!("srq_type {srq_type}: tag-matching SRQs are not offered");
            return Err(refuse(VERB, EOPNOTSUPP, why));
        }
        if !has(SRQ_INIT_ATTR_PD) {
            return Err(refuse(VERB, EINVAL, "comp_mask lacks IBV_SRQ_INIT_ATTR_PD"));
        }
        let pdb = block::<PdBlock>(VERB, a.pd)?;
        if pdb.c.context != context {
            return Err(refuse(VERB, EINVAL, "the PD belongs to another context"));
        }
        let srq = if srq_type == SRQT_XRC {
            if !has(SRQ_INIT_ATTR_XRCD) || !has(SRQ_INIT_ATTR_CQ) {
                let why = "an XRC SRQ needs IBV_SRQ_INIT_ATTR_XRCD and IBV_SRQ_INIT_ATTR_CQ";
                return Err(refuse(VERB, EINVAL, why));
            }
            let x = crate::xrc::xrcd_block(VERB, a.xrcd.cast())?;
            let cq = block::<crate::cq::CqBlock>(VERB, a.cq)?;
            pdb.pd()
                .create_xrc_srq(x.xrcd(), cq.cq(), srq_attr(&a.attr))
        } else {
            pdb.pd().create_srq(srq_attr(&a.attr))
        }
        .map_err(|e| errno_of(&e))?;
        if let Ok(granted) = srq.query() {
            a.attr.max_wr = granted.max_wr;
            a.attr.max_sge = granted.max_sge;
        }
        // SAFETY: the caller's context, which the PD was checked to be in.
        Ok(unsafe { register(VERB, context, a.srq_context, a.pd, srq) })
    })();
    r.unwrap_or_else(|e| {
        set_errno(e);
        std::ptr::null_mut()
    })
}

/// `verbs_context.get_srq_num`.
pub(crate) unsafe extern "C" fn get_srq_num(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int {
    let b = match block::<SrqBlock>("ibv_get_srq_num", srq) {
        Ok(b) => b,
        Err(e) => return e,
    };
    if srq_num.is_null() {
        return refuse("ibv_get_srq_num", EINVAL, "srq_num is NULL");
    }
    match b.srq().srq_num() {
        Ok(n) => {
            // SAFETY: the caller's non-NULL out-pointer.
            unsafe { srq_num.write(n) };
            0
        }
        Err(e) => errno_of(&e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    let b = match block::<SrqBlock>("ibv_modify_srq", srq) {
        Ok(b) => b,
        Err(e) => return e,
    };
    if attr.is_null() {
        return refuse("ibv_modify_srq", EINVAL, "attr is NULL");
    }
    // SAFETY: non-NULL attributes from the caller.
    let a = srq_attr(unsafe { &*attr });
    b.srq()
        .modify(&a, mask as u32)
        .err()
        .map_or(0, |e| errno_of(&e))
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    let b = match block::<SrqBlock>("ibv_query_srq", srq) {
        Ok(b) => b,
        Err(e) => return e,
    };
    if attr.is_null() {
        return refuse("ibv_query_srq", EINVAL, "attr is NULL");
    }
    match b.srq().query() {
        Ok(a) => {
            // SAFETY: non-NULL out-pointer.
            unsafe { attr.write(c_srq_attr(&a)) };
            0
        }
        Err(e) => errno_of(&e),
    }
}

/// `ibv_destroy_srq`: `EBUSY` while a QP uses it.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    let b = match block::<SrqBlock>("ibv_destroy_srq", srq) {
        Ok(b) => std::ptr::from_ref::<SrqBlock>(b).cast_mut(),
        Err(e) => return e,
    };
    // SAFETY: a live block; only the destroy path takes the SRQ out.
    let inner = unsafe { (*b).inner.take() }.expect("live SRQ");
    let id = inner.id();
    if let Err(refused) = inner.destroy() {
        // SAFETY: as above: put it back unchanged.
        unsafe { (*b).inner = Some(refused.object) };
        return errno_of(&refused.error);
    }
    if let Ok(ctx) = ctx_block("ibv_destroy_srq", (*srq).context) {
        ctx.objects().srqs.remove(&id);
    }
    free::<SrqBlock>(srq);
    0
}

pub(crate) unsafe fn ack_async(srq: *mut ibv_srq) {
    if let Ok(b) = block::<SrqBlock>("ibv_ack_async_event", srq) {
        // SAFETY: the live SRQ's public counter.
        unsafe {
            (*std::ptr::from_ref::<SrqBlock>(b).cast_mut())
                .c
                .events_completed += 1
        };
    }
}

crate::symver!("srq");

//! Receive work queues and their indirection tables (the `verbs_context`
//! ops `create_wq`, `modify_wq`, `destroy_wq`, `create_rwq_ind_table`,
//! `destroy_rwq_ind_table`, and `ibv_wq.post_recv`), over softverbs' RSS
//! objects (spec/raw-packet.md §6).

use crate::context::ctx_block;
use crate::cq::CqBlock;
use crate::domain::PdBlock;
use crate::ffi::*;
use crate::util::*;
use softverbs::{RwqIndTable, WorkQueue, WqState};
use std::ffi::c_int;

#[repr(C)]
pub(crate) struct WqBlock {
    pub c: ibv_wq,
    magic: u64,
    inner: Option<WorkQueue>,
    /// Set when made through a parent domain (its dealloc waits for it).
    _domain: Option<crate::domain::DomainHold>,
}
impl_block!(WqBlock, ibv_wq, "work queue", 0x736f_6674_7771_3031);

impl WqBlock {
    fn wq(&self) -> &WorkQueue {
        self.inner.as_ref().expect("a live WQ block holds its WQ")
    }
}

#[repr(C)]
pub(crate) struct IndTableBlock {
    pub c: ibv_rwq_ind_table,
    magic: u64,
    inner: Option<RwqIndTable>,
}
impl_block!(
    IndTableBlock,
    ibv_rwq_ind_table,
    "indirection table",
    0x736f_6674_7274_3031
);

impl IndTableBlock {
    pub(crate) fn table(&self) -> &RwqIndTable {
        self.inner
            .as_ref()
            .expect("a live table block holds its table")
    }
}

/// `IBV_WQT_RQ`.
const WQT_RQ: u32 = 0;
/// `IBV_WQ_INIT_ATTR_FLAGS`.
const WQ_INIT_ATTR_FLAGS: u32 = 1;
/// `IBV_WQ_ATTR_STATE`, `_CURR_STATE`, `_FLAGS`.
const WQ_ATTR_STATE: u32 = 1;
const WQ_ATTR_CURR_STATE: u32 = 1 << 1;
const WQ_ATTR_FLAGS: u32 = 1 << 2;

fn fail<T>(e: c_int) -> *mut T {
    set_errno(e);
    std::ptr::null_mut()
}

pub(crate) unsafe extern "C" fn create_wq(
    context: *mut ibv_context,
    attr: *mut ibv_wq_init_attr,
) -> *mut ibv_wq {
    const VERB: &str = "ibv_create_wq";
    if attr.is_null() {
        return fail(refuse(VERB, EINVAL, "wq_init_attr is NULL"));
    }
    // SAFETY: the caller's non-NULL attributes.
    let a = unsafe { &*attr };
    let r = (|| {
        ctx_block(VERB, context)?;
        if a.wq_type != WQT_RQ {
            return Err(refuse(
                VERB,
                EINVAL,
                format_args!("wq_type {}: only IBV_WQT_RQ", a.wq_type),
            ));
        }
        if a.comp_mask & !WQ_INIT_ATTR_FLAGS != 0 {
            return Err(refuse(
                VERB,
                EINVAL,
                format_args!("comp_mask {:#x}", a.comp_mask),
            ));
        }
        if a.comp_mask & WQ_INIT_ATTR_FLAGS != 0 && a.create_flags != 0 {
            return Err(refuse(
                VERB,
                EOPNOTSUPP,
                format_args!(
                    "create_flags {:#x}: no WQ offloads are offered",
                    a.create_flags
                ),
            ));
        }
        let pd = block::<PdBlock>(VERB, a.pd)?;
        let cq = block::<CqBlock>(VERB, a.cq)?;
        let wq = pd
            .pd()
            .create_wq(cq.cq(), a.max_wr, a.max_sge)
            .map_err(|e| errno_of(&e))?;
        Ok(into_c(WqBlock {
            c: ibv_wq {
                context,
                wq_context: a.wq_context,
                pd: a.pd,
                cq: a.cq,
                wq_num: wq.wq_num(),
                handle: 0,
                state: WqState::Reset.raw(),
                wq_type: WQT_RQ,
                post_recv: post_wq_recv as Op,
                mutex: [0; 5],
                cond: [0; 6],
                events_completed: 0,
                comp_mask: 0,
            },
            magic: WqBlock::MAGIC,
            inner: Some(wq),
            // SAFETY: the live PD checked above.
            _domain: unsafe { crate::domain::DomainHold::of(a.pd) },
        }))
    })();
    r.unwrap_or_else(fail)
}

pub(crate) unsafe extern "C" fn modify_wq(wq: *mut ibv_wq, attr: *mut ibv_wq_attr) -> c_int {
    const VERB: &str = "ibv_modify_wq";
    let b = match block::<WqBlock>(VERB, wq) {
        Ok(b) => b,
        Err(e) => return e,
    };
    if attr.is_null() {
        return refuse(VERB, EINVAL, "wq_attr is NULL");
    }
    // SAFETY: the caller's non-NULL attributes.
    let a = unsafe { &*attr };
    let known = WQ_ATTR_STATE | WQ_ATTR_CURR_STATE | WQ_ATTR_FLAGS;
    if a.attr_mask & !known != 0 {
        return refuse(VERB, EINVAL, format_args!("attr_mask {:#x}", a.attr_mask));
    }
    if a.attr_mask & WQ_ATTR_FLAGS != 0 && a.flags_mask != 0 {
        return refuse(VERB, EOPNOTSUPP, "WQ flags: no WQ offloads are offered");
    }
    let state = |v: u32| {
        WqState::from_raw(v).ok_or_else(|| refuse(VERB, EINVAL, format_args!("wq state {v}")))
    };
    let curr = if a.attr_mask & WQ_ATTR_CURR_STATE != 0 {
        match state(a.curr_wq_state) {
            Ok(s) => Some(s),
            Err(e) => return e,
        }
    } else {
        None
    };
    if a.attr_mask & WQ_ATTR_STATE == 0 {
        return 0;
    }
    let to = match state(a.wq_state) {
        Ok(s) => s,
        Err(e) => return e,
    };
    match b.wq().modify(to, curr) {
        Ok(()) => {
            // SAFETY: the live WQ's public state field.
            unsafe { (*wq).state = to.raw() };
            0
        }
        Err(e) => errno_of(&e),
    }
}

pub(crate) unsafe extern "C" fn destroy_wq(wq: *mut ibv_wq) -> c_int {
    let b = match block::<WqBlock>("ibv_destroy_wq", wq) {
        Ok(b) => std::ptr::from_ref::<WqBlock>(b).cast_mut(),
        Err(e) => return e,
    };
    // SAFETY: a live block; only the destroy path takes the WQ out.
    let inner = unsafe { (*b).inner.take() }.expect("live WQ");
    if let Err(refused) = inner.destroy() {
        // SAFETY: as above: put it back unchanged.
        unsafe { (*b).inner = Some(refused.object) };
        return errno_of(&refused.error);
    }
    free::<WqBlock>(wq);
    0
}

unsafe extern "C" fn post_wq_recv(
    wq: *mut ibv_wq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    const VERB: &str = "ibv_post_wq_recv";
    match block::<WqBlock>(VERB, wq) {
        // SAFETY: the caller's WR list and out-pointer.
        Ok(b) => unsafe { crate::post::post_recv_list(VERB, wr, bad_wr, |w| b.wq().post_recv(w)) },
        Err(e) => e,
    }
}

pub(crate) unsafe extern "C" fn create_rwq_ind_table(
    context: *mut ibv_context,
    attr: *mut ibv_rwq_ind_table_init_attr,
) -> *mut ibv_rwq_ind_table {
    const VERB: &str = "ibv_create_rwq_ind_table";
    if attr.is_null() {
        return fail(refuse(VERB, EINVAL, "init_attr is NULL"));
    }
    // SAFETY: the caller's non-NULL attributes.
    let a = unsafe { &*attr };
    let r = (|| {
        let ctx = ctx_block(VERB, context)?;
        if a.comp_mask != 0 {
            return Err(refuse(
                VERB,
                EINVAL,
                format_args!("comp_mask {:#x}", a.comp_mask),
            ));
        }
        if a.log_ind_tbl_size > softverbs::MAX_LOG_IND_TBL_SIZE || a.ind_tbl.is_null() {
            return Err(refuse(
                VERB,
                EINVAL,
                format_args!(
                    "log_ind_tbl_size {} (at most {}), ind_tbl {:?}",
                    a.log_ind_tbl_size,
                    softverbs::MAX_LOG_IND_TBL_SIZE,
                    a.ind_tbl
                ),
            ));
        }
        let n = 1usize << a.log_ind_tbl_size;
        let mut wqs = Vec::with_capacity(n);
        for i in 0..n {
            // SAFETY: the caller's array of 2^log_ind_tbl_size WQ pointers.
            let p = unsafe { *a.ind_tbl.add(i) };
            wqs.push(block::<WqBlock>(VERB, p)?.wq());
        }
        let table = ctx
            .ctx
            .create_rwq_ind_table(a.log_ind_tbl_size, &wqs)
            .map_err(|e| errno_of(&e))?;
        Ok(into_c(IndTableBlock {
            c: ibv_rwq_ind_table {
                context,
                ind_tbl_handle: 0,
                ind_tbl_num: 0,
                comp_mask: 0,
            },
            magic: IndTableBlock::MAGIC,
            inner: Some(table),
        }))
    })();
    r.unwrap_or_else(fail)
}

pub(crate) unsafe extern "C" fn destroy_rwq_ind_table(t: *mut ibv_rwq_ind_table) -> c_int {
    let b = match block::<IndTableBlock>("ibv_destroy_rwq_ind_table", t) {
        Ok(b) => std::ptr::from_ref::<IndTableBlock>(b).cast_mut(),
        Err(e) => return e,
    };
    // SAFETY: a live block; only the destroy path takes the table out.
    let inner = unsafe { (*b).inner.take() }.expect("live table");
    if let Err(refused) = inner.destroy() {
        // SAFETY: as above: put it back unchanged.
        unsafe { (*b).inner = Some(refused.object) };
        return errno_of(&refused.error);
    }
    free::<IndTableBlock>(t);
    0
}

//! Shared receive queues.

use crate::context::ctx_block;
use crate::convert::{c_srq_attr, srq_attr};
use crate::ffi::*;
use crate::memory::PdBlock;
use crate::util::*;
use std::ffi::c_int;

#[repr(C)]
pub(crate) struct SrqBlock {
    pub c: ibv_srq,
    magic: u64,
    inner: Option<softverbs::SharedReceiveQueue>,
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
        let id = srq.id();
        let c = ibv_srq {
            context: ctx_ptr,
            srq_context: a.srq_context,
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
        });
        if let Ok(ctx) = ctx_block(VERB, ctx_ptr) {
            ctx.objects().srqs.insert(id, p as usize);
        }
        Ok(p)
    });
    r.unwrap_or_else(|e| {
        set_errno(e);
        std::ptr::null_mut()
    })
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

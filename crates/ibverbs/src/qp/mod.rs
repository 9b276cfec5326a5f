//! Queue pairs: the block behind an `ibv_qp` (with the `ibv_wr_*` batch
//! being built on it), `ibv_modify_qp`, `ibv_query_qp`, `ibv_destroy_qp`,
//! `ibv_qp_to_qp_ex`, multicast. softverbs checks every rule (the kernel's
//! modify table, required and optional attributes, values) and says in words
//! what was wrong; this layer converts the C structs. QPs are made in
//! [`create`], which sits above posting (post.rs) as the block sits below it.

pub(crate) mod create;

use crate::convert::{c_qp_cap, c_query_attr, checked_qp_attr};
use crate::domain::DomainHold;
use crate::ffi::*;
use crate::util::*;
use softverbs::{AttrMask, ImmData, SendFlags, Sge, WrOpcode, WrTarget};
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
    _domain: Option<DomainHold>,
}
impl_block!(QpBlock, ibv_qp, "queue pair", 0x736f_6674_7170_3031);

impl QpBlock {
    pub(crate) fn batch(&self) -> MutexGuard<'_, Batch> {
        self.batch.lock().unwrap_or_else(PoisonError::into_inner)
    }
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

/// A WR being built between `ibv_wr_start` and `ibv_wr_complete`.
pub(crate) struct Pending {
    pub(crate) wr_id: u64,
    pub(crate) opcode: WrOpcode,
    pub(crate) flags: SendFlags,
    pub(crate) imm: ImmData,
    pub(crate) target: WrTarget,
    pub(crate) sges: Vec<Sge>,
    pub(crate) inline: Option<Vec<u8>>,
    /// `ibv_wr_set_xrc_srqn` (XRC_SEND).
    pub(crate) xrc_srqn: u32,
    /// `ibv_wr_send_tso`: the header (copied) and the segment size.
    pub(crate) tso: Option<(Vec<u8>, u16)>,
}

/// The batch of a QP: its WRs and the first builder error, which
/// `ibv_wr_complete` reports.
#[derive(Default)]
pub(crate) struct Batch {
    pub(crate) wrs: Vec<Pending>,
    pub(crate) error: Option<c_int>,
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

//! `rdma_create_ep` / `rdma_destroy_ep` (spec/rdmacm-abi.md §3.8, rdma-core
//! cma.c): a synchronous id bound (passive) or resolved with its QP (active).

use crate::ffi::*;
use crate::id::{self, id_block};
use crate::util::*;
use std::ffi::{c_int, c_void};

/// The timeout rdma-core gives both resolutions, in milliseconds.
const RESOLVE_TIMEOUT_MS: c_int = 2000;

/// The active and passive halves of `rdma_create_ep`.
unsafe fn setup(
    id: *mut rdma_cm_id,
    res: &rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_attr: *mut ibv_qp_init_attr,
) -> c_int {
    const VERB: &str = "rdma_create_ep";
    if res.ai_flags & RAI_PASSIVE != 0 {
        // SAFETY: a live id and the caller's address.
        if unsafe { crate::conn::rdma_bind_addr_impl(id, res.ai_src_addr) } != 0 {
            return -1;
        }
        let Ok(b) = id_block(VERB, id) else { return -1 };
        let mut st = b.lock();
        if !pd.is_null() {
            // SAFETY: under the id's lock.
            unsafe { (*b.c()).pd = pd };
        }
        if !qp_attr.is_null() {
            // SAFETY: the caller's attributes, copied.
            let mut a: ibv_qp_init_attr = unsafe { std::ptr::read(qp_attr) };
            a.qp_type = res.ai_qp_type as u32;
            st.passive_qp_attr = Some(Box::new(a));
        }
        return 0;
    }
    // SAFETY: a live id and the caller's addresses.
    if unsafe {
        crate::route::rdma_resolve_addr_impl(
            id,
            res.ai_src_addr,
            res.ai_dst_addr,
            RESOLVE_TIMEOUT_MS,
        )
    } != 0
    {
        return -1;
    }
    if res.ai_route_len != 0 {
        return fail(refuse(VERB, libc::ENOSYS, "ai_route (an SA path record, InfiniBand) is not offered: RoCE routes come from rdma_resolve_route"));
    }
    // SAFETY: a live id.
    if unsafe { crate::route::rdma_resolve_route_impl(id, RESOLVE_TIMEOUT_MS) } != 0 {
        return -1;
    }
    if !qp_attr.is_null() {
        // SAFETY: the caller's attributes.
        unsafe { (*qp_attr).qp_type = res.ai_qp_type as u32 };
        // SAFETY: a live id and the caller's attributes.
        if unsafe { crate::qp::rdma_create_qp_impl(id, pd, qp_attr) } != 0 {
            return -1;
        }
    }
    if res.ai_connect_len != 0 && !res.ai_connect.is_null() {
        let Ok(b) = id_block(VERB, id) else { return -1 };
        // SAFETY: the caller's buffer of ai_connect_len bytes.
        let data =
            unsafe { std::slice::from_raw_parts(res.ai_connect as *const u8, res.ai_connect_len) };
        b.lock().connect_data = data.to_vec();
    }
    0
}

/// `int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res,
/// struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)`.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    const VERB: &str = "rdma_create_ep";
    init_log();
    if id.is_null() || res.is_null() {
        return fail(refuse(VERB, libc::EINVAL, "id or res is NULL"));
    }
    // SAFETY: non-NULL addrinfo from the caller.
    let res = unsafe { &*res };
    let new = match id::create(
        VERB,
        std::ptr::null_mut(),
        std::ptr::null_mut::<c_void>(),
        res.ai_port_space as u32,
        res.ai_qp_type as u32,
    ) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    // SAFETY: a new live id.
    if unsafe { setup(new, res, pd, qp_init_attr) } != 0 {
        let e = errno();
        // SAFETY: the id just made.
        unsafe { rdma_destroy_ep(new) };
        return fail(e);
    }
    // SAFETY: non-NULL out-pointer.
    unsafe { *id = new };
    0
}

/// `void rdma_destroy_ep(struct rdma_cm_id *id)`.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
    let Ok(b) = id_block("rdma_destroy_ep", id) else {
        return;
    };
    // SAFETY: the caller owns the id.
    let (qp, srq) = unsafe { ((*b.c()).qp, (*b.c()).srq) };
    if !qp.is_null() {
        // SAFETY: a live id.
        unsafe { crate::qp::rdma_destroy_qp_impl(id) };
    }
    if !srq.is_null() {
        // SAFETY: a live id.
        unsafe { crate::qp::rdma_destroy_srq_impl(id) };
    }
    let _ = crate::conn::destroy("rdma_destroy_ep", id);
}

crate::symver!("ep");

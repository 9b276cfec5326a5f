//! The verbs this library calls: the public ABI of libibverbs.so.1 (resolved
//! at load time to the process's one drop-in libibverbs, see the crate doc),
//! the two header inlines it needs, and softverbs' private interface.
//!
//! # The private interface (`SOFTVERBS_PRIVATE_1`, exported by crates/ibverbs)
//! - `int softverbs_private_version(void)`: 2.
//! - `int softverbs_query_addr(struct ibv_context *, uint8_t port, int gid_index,
//!   struct sockaddr_storage *)`: the IP address behind a GID (0, `ENODATA`
//!   past the last one, `EINVAL`).
//!
//! - `softverbs_cm_*`: the device's connection manager (spec/rdmacm-abi.md
//!   §3.11), declared in [`cm`].

use crate::ffi::*;
use std::ffi::{c_int, c_void};

#[link(name = "ibverbs")]
extern "C" {
    pub fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device;
    pub fn ibv_free_device_list(list: *mut *mut ibv_device);
    pub fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context;
    pub fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd;
    pub fn ibv_query_port(context: *mut ibv_context, port: u8, attr: *mut ibv_port_attr) -> c_int;
    pub fn ibv_query_device(
        context: *mut ibv_context,
        attr: *mut crate::ffi::verbs::ibv_device_attr,
    ) -> c_int;
    pub fn ibv_get_pkey_index(context: *mut ibv_context, port: u8, pkey: u16) -> c_int;
    pub fn ibv_create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel;
    pub fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int;
    pub fn ibv_create_cq(
        context: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
    ) -> *mut ibv_cq;
    pub fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int;
    pub fn ibv_create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp;
    pub fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int;
    pub fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int;
    pub fn ibv_create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq;
    pub fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int;
    pub fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;
    pub fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;

    pub fn softverbs_private_version() -> c_int;
    pub fn softverbs_query_addr(
        context: *mut ibv_context,
        port: u8,
        gid_index: c_int,
        addr: *mut libc::sockaddr_storage,
    ) -> c_int;
}

/// The private interface version this library is built for.
pub const PRIVATE_VERSION: c_int = 2;

/// `IBV_QP_INIT_ATTR_PD`, `IBV_SRQ_INIT_ATTR_*`, `IBV_SRQT_BASIC`.
pub const IBV_QP_INIT_ATTR_PD: u32 = 1;
pub const IBV_SRQ_INIT_ATTR_TYPE: u32 = 1;
pub const IBV_SRQ_INIT_ATTR_PD: u32 = 2;
pub const IBV_SRQT_BASIC: u32 = 0;

/// The extended op at `offset` of the context's `verbs_context`, if the
/// context is extended and the op is present (the header's `verbs_get_ctx_op`).
///
/// # Safety
/// `ctx` is a live context of libibverbs.
unsafe fn ctx_op(ctx: *mut ibv_context, offset: usize) -> Option<*const c_void> {
    let base = std::mem::offset_of!(verbs_context, context);
    // SAFETY: per the contract; an extended context has its verbs_context before it.
    unsafe {
        if (*ctx).abi_compat != verbs::VERBS_ABI_IS_EXTENDED {
            return None;
        }
        let v = ctx.cast::<u8>().sub(base) as *const verbs_context;
        if (*v).sz < base - offset {
            return None;
        }
        let op = *v.cast::<u8>().add(offset).cast::<*const c_void>();
        (!op.is_null()).then_some(op)
    }
}

/// The header's inline `ibv_create_qp_ex`.
///
/// # Safety
/// `ctx` is a live context; `attr` is valid.
pub unsafe fn ibv_create_qp_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    // SAFETY: per the contract.
    unsafe {
        if (*attr).comp_mask == IBV_QP_INIT_ATTR_PD {
            return ibv_create_qp((*attr).pd, attr.cast::<ibv_qp_init_attr>());
        }
        let Some(op) = ctx_op(ctx, std::mem::offset_of!(verbs_context, create_qp_ex)) else {
            crate::util::set_errno(libc::EOPNOTSUPP);
            return std::ptr::null_mut();
        };
        let f: unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp =
            std::mem::transmute(op);
        f(ctx, attr)
    }
}

/// The header's inline `ibv_create_srq_ex`.
///
/// # Safety
/// `ctx` is a live context; `attr` is valid.
pub unsafe fn ibv_create_srq_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    // SAFETY: per the contract.
    unsafe {
        let mask = (*attr).comp_mask;
        if mask & !(IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE) == 0
            && (mask & IBV_SRQ_INIT_ATTR_PD) != 0
            && ((mask & IBV_SRQ_INIT_ATTR_TYPE) == 0 || (*attr).srq_type == IBV_SRQT_BASIC)
        {
            return ibv_create_srq((*attr).pd, attr.cast::<ibv_srq_init_attr>());
        }
        let Some(op) = ctx_op(ctx, std::mem::offset_of!(verbs_context, create_srq_ex)) else {
            crate::util::set_errno(libc::EOPNOTSUPP);
            return std::ptr::null_mut();
        };
        let f: unsafe extern "C" fn(*mut ibv_context, *mut ibv_srq_init_attr_ex) -> *mut ibv_srq =
            std::mem::transmute(op);
        f(ctx, attr)
    }
}

/// The header's inline `ibv_open_xrcd`.
///
/// # Safety
/// `ctx` is a live context; `attr` is valid.
pub unsafe fn ibv_open_xrcd(
    ctx: *mut ibv_context,
    attr: *mut verbs::ibv_xrcd_init_attr,
) -> *mut verbs::ibv_xrcd {
    // SAFETY: per the contract.
    unsafe {
        let Some(op) = ctx_op(ctx, std::mem::offset_of!(verbs_context, open_xrcd)) else {
            crate::util::set_errno(libc::EOPNOTSUPP);
            return std::ptr::null_mut();
        };
        let f: unsafe extern "C" fn(
            *mut ibv_context,
            *mut verbs::ibv_xrcd_init_attr,
        ) -> *mut verbs::ibv_xrcd = std::mem::transmute(op);
        f(ctx, attr)
    }
}

#[path = "../../ibverbs/src/private_abi.rs"]
mod private_abi;

/// The connection manager's part of the private interface (its layouts are
/// libibverbs' own, `crates/ibverbs/src/private_abi.rs`).
pub mod cm {
    use super::*;

    /// `struct softverbs_cm_channel`: opaque.
    #[repr(C)]
    pub struct SoftverbsCmChannel {
        _opaque: [u8; 0],
    }

    pub use super::private_abi::*;

    #[link(name = "ibverbs")]
    extern "C" {
        pub fn softverbs_cm_channel_create(ch: *mut *mut SoftverbsCmChannel) -> c_int;
        pub fn softverbs_cm_channel_fd(ch: *mut SoftverbsCmChannel) -> c_int;
        pub fn softverbs_cm_get_event(
            ch: *mut SoftverbsCmChannel,
            timeout_ms: c_int,
            ev: *mut SoftverbsCmEvent,
        ) -> c_int;
        pub fn softverbs_cm_listen(
            ctx: *mut ibv_context,
            ch: *mut SoftverbsCmChannel,
            ps: u32,
            port: u16,
            listen: *mut u64,
        ) -> c_int;
        pub fn softverbs_cm_stop_listening(ctx: *mut ibv_context, listen: u64) -> c_int;
        pub fn softverbs_cm_reserve(ctx: *mut ibv_context, ps: u32, port: u16) -> c_int;
        pub fn softverbs_cm_release(ctx: *mut ibv_context, ps: u32, port: u16) -> c_int;
        pub fn softverbs_cm_connect(
            ctx: *mut ibv_context,
            ch: *mut SoftverbsCmChannel,
            p: *const SoftverbsCmConnect,
            id: *mut u32,
        ) -> c_int;
        pub fn softverbs_cm_accept(
            ctx: *mut ibv_context,
            id: u32,
            p: *const SoftverbsCmAccept,
        ) -> c_int;
        pub fn softverbs_cm_reject(
            ctx: *mut ibv_context,
            id: u32,
            private_data: *const c_void,
            len: u8,
        ) -> c_int;
        pub fn softverbs_cm_ready_to_use(ctx: *mut ibv_context, id: u32) -> c_int;
        pub fn softverbs_cm_establish(ctx: *mut ibv_context, id: u32) -> c_int;
        pub fn softverbs_cm_disconnect(ctx: *mut ibv_context, id: u32) -> c_int;
        pub fn softverbs_cm_destroy(ctx: *mut ibv_context, id: u32) -> c_int;
        pub fn softverbs_cm_flush(ctx: *mut ibv_context, timeout_ms: c_int) -> c_int;
        #[allow(clippy::too_many_arguments)]
        pub fn softverbs_cm_sidr_request(
            ctx: *mut ibv_context,
            ch: *mut SoftverbsCmChannel,
            src: *const libc::sockaddr_storage,
            dst: *const libc::sockaddr_storage,
            ps: u32,
            private_data: *const c_void,
            len: u8,
            id: *mut u32,
        ) -> c_int;
        pub fn softverbs_cm_sidr_reply(
            ctx: *mut ibv_context,
            id: u32,
            status: u8,
            qpn: u32,
            qkey: u32,
            private_data: *const c_void,
            len: u8,
        ) -> c_int;
        pub fn softverbs_cm_qp_attr(
            ctx: *mut ibv_context,
            id: u32,
            target: u32,
            attr: *mut ibv_qp_attr,
            mask: *mut c_int,
        ) -> c_int;
    }
}

//! `rdma_getaddrinfo` / `rdma_freeaddrinfo` (spec/rdmacm-abi.md §3.7, after
//! rdma-core addrinfo.c): getaddrinfo(3) and one `rdma_addrinfo` from its
//! first result. Allocated with malloc so the layout is C's own.

use crate::ffi::*;
use crate::util::*;
use std::ffi::{c_char, c_int, c_void};

/// A malloc'ed copy of `len` bytes (NULL for none).
fn dup(src: *const c_void, len: usize) -> *mut c_void {
    if src.is_null() || len == 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: malloc, then a copy of `len` bytes the caller owns.
    unsafe {
        let p = libc::malloc(len);
        if !p.is_null() {
            std::ptr::copy_nonoverlapping(src.cast::<u8>(), p.cast::<u8>(), len);
        }
        p
    }
}

/// The getaddrinfo hints of an `rdma_addrinfo` (`ucma_convert_to_ai`).
fn to_ai_hints(h: &rdma_addrinfo) -> libc::addrinfo {
    // SAFETY: all-zero is a valid addrinfo.
    let mut ai: libc::addrinfo = unsafe { std::mem::zeroed() };
    if h.ai_flags & RAI_PASSIVE != 0 {
        ai.ai_flags |= libc::AI_PASSIVE;
    }
    if h.ai_flags & RAI_NUMERICHOST != 0 {
        ai.ai_flags |= libc::AI_NUMERICHOST;
    }
    if h.ai_flags & RAI_FAMILY != 0 || h.ai_family != 0 {
        ai.ai_family = h.ai_family;
    }
    ai.ai_socktype = match h.ai_qp_type as u32 {
        IBV_QPT_RC => libc::SOCK_STREAM,
        IBV_QPT_UD => libc::SOCK_DGRAM,
        _ => 0,
    };
    ai.ai_protocol = match h.ai_port_space as u32 {
        RDMA_PS_TCP => libc::IPPROTO_TCP,
        RDMA_PS_UDP | RDMA_PS_IPOIB => libc::IPPROTO_UDP,
        _ => 0,
    };
    ai
}

/// Fills `rai` from the first getaddrinfo result (`ucma_convert_to_rai`).
fn from_ai(rai: &mut rdma_addrinfo, hints: &rdma_addrinfo, ai: &libc::addrinfo, passive: bool) {
    rai.ai_qp_type = if hints.ai_qp_type != 0 {
        hints.ai_qp_type
    } else {
        match ai.ai_socktype {
            libc::SOCK_STREAM => IBV_QPT_RC as c_int,
            libc::SOCK_DGRAM => IBV_QPT_UD as c_int,
            _ => 0,
        }
    };
    rai.ai_port_space = if hints.ai_port_space != 0 {
        hints.ai_port_space
    } else {
        match ai.ai_protocol {
            libc::IPPROTO_TCP => RDMA_PS_TCP as c_int,
            libc::IPPROTO_UDP => RDMA_PS_UDP as c_int,
            _ => 0,
        }
    };
    rai.ai_family = ai.ai_family;
    let addr = dup(ai.ai_addr as *const c_void, ai.ai_addrlen as usize).cast::<libc::sockaddr>();
    // SAFETY: NULL or getaddrinfo's NUL-terminated name.
    let canon = if ai.ai_canonname.is_null() {
        std::ptr::null_mut()
    } else {
        unsafe { libc::strdup(ai.ai_canonname) }
    };
    if passive || ai.ai_flags & libc::AI_PASSIVE != 0 {
        rai.ai_flags = RAI_PASSIVE;
        rai.ai_src_addr = addr;
        rai.ai_src_len = ai.ai_addrlen;
        rai.ai_src_canonname = canon;
    } else {
        rai.ai_dst_addr = addr;
        rai.ai_dst_len = ai.ai_addrlen;
        rai.ai_dst_canonname = canon;
    }
}

/// `int rdma_getaddrinfo(const char *node, const char *service,
/// const struct rdma_addrinfo *hints, struct rdma_addrinfo **res)`:
/// 0, an `EAI_*` code from getaddrinfo(3), or −1 with `errno`.
#[no_mangle]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    const VERB: &str = "rdma_getaddrinfo";
    init_log();
    if res.is_null() {
        return fail(refuse(VERB, libc::EINVAL, "res is NULL"));
    }
    if node.is_null() && service.is_null() && hints.is_null() {
        return fail(refuse(
            VERB,
            libc::EINVAL,
            "node, service and hints are all NULL",
        ));
    }
    // SAFETY: all-zero is a valid rdma_addrinfo (the default hints).
    let none: rdma_addrinfo = unsafe { std::mem::zeroed() };
    // SAFETY: NULL or the caller's hints.
    let h = if hints.is_null() {
        &none
    } else {
        unsafe { &*hints }
    };
    // SAFETY: calloc of one rdma_addrinfo; checked.
    let rai =
        unsafe { libc::calloc(1, std::mem::size_of::<rdma_addrinfo>()) }.cast::<rdma_addrinfo>();
    if rai.is_null() {
        return fail(libc::ENOMEM);
    }
    // SAFETY: just allocated and zeroed.
    let r = unsafe { &mut *rai };
    // rdma-core: getaddrinfo(3) only for a node or a service; else the
    // result is the hints' own (a passive user's source address, say).
    if !node.is_null() || !service.is_null() {
        let ai_hints = to_ai_hints(h);
        let mut ai: *mut libc::addrinfo = std::ptr::null_mut();
        // SAFETY: C strings or NULL from the caller; valid hints and out-pointer.
        let rc = unsafe {
            libc::getaddrinfo(
                node,
                service,
                if hints.is_null() {
                    std::ptr::null()
                } else {
                    &raw const ai_hints
                },
                &raw mut ai,
            )
        };
        if rc != 0 {
            // SAFETY: gai_strerror returns a static string.
            let why = unsafe { std::ffi::CStr::from_ptr(libc::gai_strerror(rc)) }.to_string_lossy();
            tracing::warn!(target: "softverbs", "{VERB} refused (EAI {rc}): getaddrinfo: {why}");
            // SAFETY: ours, still empty.
            unsafe { libc::free(rai.cast::<c_void>()) };
            return rc;
        }
        // SAFETY: getaddrinfo succeeded: `ai` is a list of at least one.
        from_ai(r, h, unsafe { &*ai }, h.ai_flags & RAI_PASSIVE != 0);
        // SAFETY: from getaddrinfo.
        unsafe { libc::freeaddrinfo(ai) };
    } else {
        r.ai_flags = h.ai_flags;
        r.ai_family = h.ai_family;
        r.ai_qp_type = h.ai_qp_type;
        r.ai_port_space = h.ai_port_space;
        if h.ai_dst_len != 0 {
            r.ai_dst_addr =
                dup(h.ai_dst_addr as *const c_void, h.ai_dst_len as usize).cast::<libc::sockaddr>();
            r.ai_dst_len = h.ai_dst_len;
        }
    }
    if r.ai_src_len == 0 && h.ai_src_len != 0 {
        r.ai_src_addr =
            dup(h.ai_src_addr as *const c_void, h.ai_src_len as usize).cast::<libc::sockaddr>();
        r.ai_src_len = h.ai_src_len;
    }
    // SAFETY: non-NULL out-pointer.
    unsafe { *res = rai };
    0
}

/// `void rdma_freeaddrinfo(struct rdma_addrinfo *res)`: the list and what it owns.
#[no_mangle]
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    let mut p = res;
    while !p.is_null() {
        // SAFETY: a list made by rdma_getaddrinfo (malloc'ed members).
        unsafe {
            let next = (*p).ai_next;
            for m in [
                (*p).ai_src_addr.cast::<c_void>(),
                (*p).ai_dst_addr.cast::<c_void>(),
                (*p).ai_src_canonname.cast::<c_void>(),
                (*p).ai_dst_canonname.cast::<c_void>(),
                (*p).ai_route,
                (*p).ai_connect,
            ] {
                libc::free(m);
            }
            libc::free(p.cast::<c_void>());
            p = next;
        }
    }
}

crate::symver!("addrinfo");

//! The private interface of this library to the other drop-in libraries of
//! softverbs (librdmacm.so.1), exported under its own version node
//! `SOFTVERBS_PRIVATE_1`, never in rdma-core's nodes.
//!
//! One process has one softverbs engine, and `rdma_cm_id.verbs` must be the
//! very `ibv_context` this library hands out, so librdmacm links to this
//! library and uses the public verbs for verbs things. What the connection
//! manager needs beyond them goes through the `softverbs_*` functions here.
//! They return 0 or an errno value (never -1) and log each refusal.

use crate::context::ctx_block;
use crate::device::device_block_of;
use crate::ffi::*;
use crate::util::*;
use std::ffi::c_int;
use std::net::IpAddr;

/// The version of this interface; a caller built for version N needs N.
const PRIVATE_VERSION: c_int = 1;

/// `int softverbs_private_version(void)`: [`PRIVATE_VERSION`].
#[no_mangle]
pub extern "C" fn softverbs_private_version() -> c_int {
    PRIVATE_VERSION
}

/// `int softverbs_query_addr(struct ibv_context *ctx, uint8_t port,
/// int gid_index, struct sockaddr_storage *addr)`: the IP address (port 0)
/// the device uses for GID `gid_index` of `port`. `ENODATA` past the last
/// address, `EINVAL` for a bad context, port or pointer.
#[no_mangle]
pub unsafe extern "C" fn softverbs_query_addr(
    context: *mut ibv_context,
    port: u8,
    gid_index: c_int,
    addr: *mut libc::sockaddr_storage,
) -> c_int {
    const VERB: &str = "softverbs_query_addr";
    // SAFETY: ctx_block checks the pointer.
    let b = match unsafe { ctx_block(VERB, context) } {
        Ok(b) => b,
        Err(e) => return e,
    };
    if addr.is_null() || gid_index < 0 {
        return refuse(VERB, EINVAL, "addr is NULL or gid_index negative");
    }
    if let Err(e) = b.ctx.query_port(port) {
        return errno_of(&e);
    }
    let dev = match device_block_of(VERB, b.v.context.device) {
        Ok(d) => d,
        Err(e) => return e,
    };
    let Some(ip) = dev.device.config().addrs.get(gid_index as usize) else {
        return ENODATA;
    };
    // SAFETY: an all-zero sockaddr_storage is valid.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match ip {
        IpAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
            let sin = unsafe { &mut *(&raw mut ss).cast::<libc::sockaddr_in>() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_addr.s_addr = u32::from_ne_bytes(v4.octets());
        }
        IpAddr::V6(v6) => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { &mut *(&raw mut ss).cast::<libc::sockaddr_in6>() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_addr.s6_addr = v6.octets();
        }
    }
    // SAFETY: non-NULL out-pointer from the caller.
    unsafe { addr.write(ss) };
    0
}

crate::symver!("private");

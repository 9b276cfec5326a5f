//! The calls that reach the connection manager: `rdma_connect`,
//! `rdma_listen`, `rdma_accept`, `rdma_reject(_ece)`, `rdma_disconnect`,
//! `rdma_notify`, `rdma_establish`, `rdma_join_multicast(_ex)`,
//! `rdma_leave_multicast`, `rdma_get_request`, and `rdma_bind_addr` and
//! `rdma_destroy_id`, which tell the CM of the bound port and of the id's end.
//!
//! Each checks what it can check locally (the id, its state, the arguments),
//! then hands the work to the connection manager through [`Cm`] (cm.rs):
//! [`SoftCm`] when libibverbs offers the CM, else [`NoCm`] ([`cm`] chooses).
//! Multicast needs no CM message on RoCE (crate::mcast). The mapping of each call onto the
//! CM state machine is spec/cm.md §7.

use crate::cm::{Cm, NoCm};
use crate::ffi::*;
use crate::id::{self, id_block, IdBlock, IdState, State};
use crate::net;
use crate::softcm::SoftCm;
use crate::util::*;
use std::ffi::{c_int, c_void};
use std::net::IpAddr;

/// The process's connection manager: softverbs' CM when libibverbs offers
/// its private interface at our version, else [`NoCm`].
pub(crate) fn cm() -> &'static dyn Cm {
    static NO: NoCm = NoCm;
    static SOFT: SoftCm = SoftCm;
    // SAFETY: a plain function of the libibverbs we link to.
    if unsafe { crate::verbs::softverbs_private_version() } == crate::verbs::PRIVATE_VERSION {
        &SOFT
    } else {
        &NO
    }
}

/// Binds the id ([`id::bind`]) and tells the CM the port, so that a REQ for
/// it finds the CM ready (`softcm::prepare`); every bind, explicit or
/// implicit (`rdma_listen`, `rdma_resolve_addr`), goes through here.
pub(crate) fn bind(
    verb: &str,
    b: &IdBlock,
    st: &mut IdState,
    ip: IpAddr,
    port: u16,
) -> Result<(), c_int> {
    let (dev, port) = id::bind(verb, b, st, ip, port)?;
    crate::softcm::prepare(dev, b, port);
    Ok(())
}

/// `rdma_destroy_id`'s body: the CM forgets the id between the ack of its
/// own last event (sync mode) and the end of the id ([`id::free`]).
pub(crate) fn destroy(verb: &str, p: *mut rdma_cm_id) -> Result<(), c_int> {
    let b = id_block(verb, p)?;
    id::ack_own_event(verb, b);
    cm().destroy(b);
    // SAFETY: `p` is the live id `b`, which the CM has forgotten.
    unsafe { id::free(p) };
    Ok(())
}

/// `int rdma_destroy_id(struct rdma_cm_id *id)`.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    ret(destroy("rdma_destroy_id", id))
}

/// `int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)`.
/// The body of `rdma_bind_addr`, for this library's own callers (an export is
/// never called across modules: its `.symver` must sit with its definition).
pub(crate) unsafe fn rdma_bind_addr_impl(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> c_int {
    const VERB: &str = "rdma_bind_addr";
    let r = id_block(VERB, id).and_then(|b| {
        if addr.is_null() {
            return Err(refuse(VERB, libc::EINVAL, "addr is NULL"));
        }
        // SAFETY: non-NULL sockaddr from the caller.
        let (ip, port) = unsafe { net::from_sockaddr(addr) }
            .map_err(|e| refuse(VERB, e, "the address family is not AF_INET or AF_INET6"))?;
        let mut st = b.lock();
        bind(VERB, b, &mut st, ip, port)
    });
    ret(r)
}

#[no_mangle]
pub unsafe extern "C" fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    unsafe { rdma_bind_addr_impl(id, addr) }
}

/// rdma-core `ucma_valid_param`'s local part: PS_TCP without a QP needs
/// parameters (the QP number comes from them).
fn check_param(
    verb: &str,
    b: &IdBlock,
    param: *const rdma_conn_param,
) -> Result<Option<rdma_conn_param>, c_int> {
    // SAFETY: the caller owns the id.
    let has_qp = !unsafe { (*b.c()).qp }.is_null();
    if b.ps() == RDMA_PS_TCP && !has_qp && param.is_null() {
        return Err(refuse(
            verb,
            libc::EINVAL,
            "an RDMA_PS_TCP id without a QP needs conn_param (its qp_num)",
        ));
    }
    // SAFETY: NULL or the caller's parameters.
    Ok((!param.is_null()).then(|| unsafe { *param }))
}

/// `int rdma_connect(struct rdma_cm_id *, struct rdma_conn_param *)`.
#[no_mangle]
pub unsafe extern "C" fn rdma_connect(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> c_int {
    const VERB: &str = "rdma_connect";
    let r = id_block(VERB, id).and_then(|b| {
        let p = check_param(VERB, b, conn_param)?;
        if b.lock().state != State::RouteResolved {
            return Err(refuse(
                VERB,
                libc::EINVAL,
                "the id's route is not resolved (rdma_resolve_route first)",
            ));
        }
        cm().connect(b, p.as_ref())?;
        b.complete(VERB)
    });
    ret(r)
}

/// `int rdma_listen(struct rdma_cm_id *id, int backlog)`.
#[no_mangle]
pub unsafe extern "C" fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
    const VERB: &str = "rdma_listen";
    let r = id_block(VERB, id).and_then(|b| {
        let mut st = b.lock();
        if st.state == State::Idle {
            // Kernel `rdma_listen`: an idle id binds to the IPv4 wildcard first.
            bind(VERB, b, &mut st, IpAddr::from([0u8; 4]), 0)?;
        }
        if st.state != State::AddrBound {
            return Err(refuse(
                VERB,
                libc::EINVAL,
                format_args!("the id is in state {:?}, not bound", st.state),
            ));
        }
        id::listen_port(VERB, b)?;
        drop(st);
        // Only a CM makes the listen real; without one the id stays bound
        // (kernel `rdma_listen`: back to ADDR_BOUND on failure).
        if let Err(e) = cm().listen(b, backlog) {
            id::unlisten_port(b);
            return Err(e);
        }
        b.lock().state = State::Listen;
        Ok(())
    });
    ret(r)
}

/// `int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)`.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_request(
    listen: *mut rdma_cm_id,
    id: *mut *mut rdma_cm_id,
) -> c_int {
    const VERB: &str = "rdma_get_request";
    let r = id_block(VERB, listen).and_then(|b| {
        let st = b.lock();
        if st.sync_channel.is_none() || id.is_null() {
            return Err(refuse(
                VERB,
                libc::EINVAL,
                "the listening id is not synchronous, or the out-pointer is NULL",
            ));
        }
        if st.state != State::Listen {
            return Err(refuse(
                VERB,
                libc::EINVAL,
                format_args!("the id is in state {:?}, not listening", st.state),
            ));
        }
        drop(st);
        let new = crate::softcm::get_request(VERB, b)?;
        // SAFETY: non-NULL out-pointer from the caller.
        unsafe { *id = new };
        Ok(())
    });
    ret(r)
}

/// `int rdma_accept(struct rdma_cm_id *, struct rdma_conn_param *)`.
#[no_mangle]
pub unsafe extern "C" fn rdma_accept(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> c_int {
    const VERB: &str = "rdma_accept";
    let r = id_block(VERB, id).and_then(|b| {
        let p = check_param(VERB, b, conn_param)?;
        cm().accept(b, p.as_ref())?;
        if b.qp_type() == IBV_QPT_UD {
            return Ok(());
        }
        b.complete(VERB)
    });
    ret(r)
}

fn reject(verb: &str, id: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int {
    let r = id_block(verb, id).and_then(|b| {
        let pd = if data.is_null() || len == 0 {
            &[][..]
        } else {
            // SAFETY: the caller's buffer of `len` bytes.
            unsafe { std::slice::from_raw_parts(data.cast::<u8>(), usize::from(len)) }
        };
        cm().reject(b, pd)
    });
    ret(r)
}

/// `int rdma_reject(struct rdma_cm_id *, const void *private_data, uint8_t len)`.
#[no_mangle]
pub unsafe extern "C" fn rdma_reject(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    reject("rdma_reject", id, private_data, private_data_len)
}

/// `int rdma_reject_ece(struct rdma_cm_id *, const void *private_data, uint8_t len)`.
#[no_mangle]
pub unsafe extern "C" fn rdma_reject_ece(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    reject("rdma_reject_ece", id, private_data, private_data_len)
}

/// `int rdma_disconnect(struct rdma_cm_id *id)`.
#[no_mangle]
pub unsafe extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    const VERB: &str = "rdma_disconnect";
    ret(id_block(VERB, id).and_then(|b| {
        cm().disconnect(b)?;
        b.complete(VERB)
    }))
}

/// `int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)`.
#[no_mangle]
pub unsafe extern "C" fn rdma_notify(id: *mut rdma_cm_id, event: c_int) -> c_int {
    ret(id_block("rdma_notify", id).and_then(|b| cm().notify(b, event)))
}

/// `int rdma_establish(struct rdma_cm_id *id)`.
#[no_mangle]
pub unsafe extern "C" fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
    ret(id_block("rdma_establish", id).and_then(|b| cm().establish(b)))
}

fn multicast(
    verb: &str,
    id: *mut rdma_cm_id,
    addr: *const libc::sockaddr,
    join: bool,
    context: *mut c_void,
) -> c_int {
    let r = id_block(verb, id).and_then(|b| {
        if addr.is_null() {
            return Err(refuse(verb, libc::EINVAL, "addr is NULL"));
        }
        // SAFETY: non-NULL sockaddr from the caller.
        let (ip, _) = unsafe { crate::net::from_sockaddr(addr) }.map_err(|_| {
            refuse(
                verb,
                libc::EINVAL,
                "the group address is not AF_INET or AF_INET6",
            )
        })?;
        cm().multicast(b, ip, join, context)?;
        // rdma-core: a synchronous join waits for its event; a leave has none.
        if join {
            b.complete(verb)
        } else {
            Ok(())
        }
    });
    ret(r)
}

/// `int rdma_join_multicast(struct rdma_cm_id *, struct sockaddr *addr, void *context)`.
#[no_mangle]
pub unsafe extern "C" fn rdma_join_multicast(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
    context: *mut c_void,
) -> c_int {
    multicast("rdma_join_multicast", id, addr, true, context)
}

/// `int rdma_join_multicast_ex(struct rdma_cm_id *, struct rdma_cm_join_mc_attr_ex *, void *context)`.
#[no_mangle]
pub unsafe extern "C" fn rdma_join_multicast_ex(
    id: *mut rdma_cm_id,
    attr: *mut rdma_cm_join_mc_attr_ex,
    context: *mut c_void,
) -> c_int {
    const VERB: &str = "rdma_join_multicast_ex";
    // rdma-core: the address and the join flags are required; no other bits.
    const ADDRESS: u32 = 1;
    const JOIN_FLAGS: u32 = 2;
    if attr.is_null() {
        return fail(refuse(VERB, libc::EINVAL, "mc_join_attr is NULL"));
    }
    // SAFETY: non-NULL attributes from the caller.
    let a = unsafe { &*attr };
    if a.comp_mask & !(ADDRESS | JOIN_FLAGS) != 0
        || a.comp_mask & ADDRESS == 0
        || a.comp_mask & JOIN_FLAGS == 0
    {
        return fail(refuse(
            VERB,
            libc::EINVAL,
            format_args!(
                "comp_mask {:#x} must be exactly ADDRESS | JOIN_FLAGS",
                a.comp_mask
            ),
        ));
    }
    if a.join_flags > 1 {
        return fail(refuse(
            VERB,
            libc::EINVAL,
            format_args!(
                "join_flags {} is not FULLMEMBER or SENDONLY_FULLMEMBER",
                a.join_flags
            ),
        ));
    }
    multicast(VERB, id, a.addr, true, context)
}

/// `int rdma_leave_multicast(struct rdma_cm_id *, struct sockaddr *addr)`.
#[no_mangle]
pub unsafe extern "C" fn rdma_leave_multicast(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
) -> c_int {
    multicast(
        "rdma_leave_multicast",
        id,
        addr,
        false,
        std::ptr::null_mut(),
    )
}

crate::symver!("conn");

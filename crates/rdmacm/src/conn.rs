//! The connection calls: `rdma_connect`, `rdma_listen`, `rdma_accept`,
//! `rdma_reject(_ece)`, `rdma_disconnect`, `rdma_notify`, `rdma_establish`,
//! `rdma_join_multicast(_ex)`, `rdma_leave_multicast`, `rdma_get_request`.
//!
//! Each checks what it can check locally (the id, its state, the arguments),
//! then hands the work to the connection manager through [`Cm`], the one
//! narrow interface between this library and the CM protocol (IBTA CM MADs on
//! QP1, a sans-IO state machine in crates/proto driven by the engine's
//! progress thread). [`crate::softcm::SoftCm`] is it, reached through
//! libibverbs' private interface (spec/rdmacm-abi.md §3.10–3.11); [`NoCm`]
//! answers `ENOSYS` with a logged reason if that libibverbs lacks it.
//! Multicast needs no CM message on RoCE (crate::mcast). The mapping of each call onto the
//! CM state machine is spec/cm.md §7.

use crate::ffi::*;
use crate::id::{self, id_block, IdBlock, State};
use crate::util::*;
use std::ffi::{c_int, c_void};
use std::net::IpAddr;

/// What the connection calls need from a connection manager. Events it
/// produces go to the id's channel (`IdBlock::post`); QP transitions through
/// the public verbs, as rdma-core's librdmacm does them.
pub(crate) trait Cm: Sync {
    /// Sends a REQ (RC/UC) or SIDR_REQ (UD) to the resolved destination.
    fn connect(&self, id: &IdBlock, param: Option<&rdma_conn_param>) -> Result<(), c_int>;
    /// Starts taking REQs for the id's bound address and port.
    fn listen(&self, id: &IdBlock, backlog: c_int) -> Result<(), c_int>;
    /// Answers a connection request with a REP (or SIDR_REP).
    fn accept(&self, id: &IdBlock, param: Option<&rdma_conn_param>) -> Result<(), c_int>;
    /// Answers a connection request with a REJ carrying `private_data`.
    fn reject(&self, id: &IdBlock, private_data: &[u8]) -> Result<(), c_int>;
    /// Sends a DREQ (or DREP).
    fn disconnect(&self, id: &IdBlock) -> Result<(), c_int>;
    /// Reports a QP event that completes the connection (RTU not yet seen).
    fn notify(&self, id: &IdBlock, event: c_int) -> Result<(), c_int>;
    /// Sends the RTU of a connection whose REP the program handled itself.
    fn establish(&self, id: &IdBlock) -> Result<(), c_int>;
    /// Joins (`join`) or leaves a multicast group.
    fn multicast(
        &self,
        id: &IdBlock,
        group: IpAddr,
        join: bool,
        context: *mut c_void,
    ) -> Result<(), c_int>;
    /// The QP attributes of a connection for `attr.qp_state`, or `None` when
    /// the id has no connection (then the INIT attributes apply).
    fn init_qp_attr(&self, id: &IdBlock, attr: &mut ibv_qp_attr) -> Option<Result<c_int, c_int>>;
    /// Forgets the id (it is being destroyed).
    fn destroy(&self, id: &IdBlock);
}

/// The connection manager until the CM protocol is attached: no connection
/// can exist, so every call that needs one answers `ENOSYS`.
pub(crate) struct NoCm;

impl NoCm {
    fn missing(verb: &str) -> c_int {
        refuse(
            verb,
            libc::ENOSYS,
            "connection management (IBTA CM MADs on QP1) is not attached to softverbs' librdmacm yet; \
             address and route resolution, ids, QPs and events work",
        )
    }
}

impl Cm for NoCm {
    fn connect(&self, _: &IdBlock, _: Option<&rdma_conn_param>) -> Result<(), c_int> {
        Err(Self::missing("rdma_connect"))
    }
    fn listen(&self, _: &IdBlock, _: c_int) -> Result<(), c_int> {
        Err(Self::missing("rdma_listen"))
    }
    fn accept(&self, _: &IdBlock, _: Option<&rdma_conn_param>) -> Result<(), c_int> {
        Err(Self::missing("rdma_accept"))
    }
    fn reject(&self, _: &IdBlock, _: &[u8]) -> Result<(), c_int> {
        Err(Self::missing("rdma_reject"))
    }
    fn disconnect(&self, _: &IdBlock) -> Result<(), c_int> {
        Err(Self::missing("rdma_disconnect"))
    }
    fn notify(&self, _: &IdBlock, _: c_int) -> Result<(), c_int> {
        Err(Self::missing("rdma_notify"))
    }
    fn establish(&self, _: &IdBlock) -> Result<(), c_int> {
        Err(Self::missing("rdma_establish"))
    }
    fn multicast(&self, _: &IdBlock, _: IpAddr, join: bool, _: *mut c_void) -> Result<(), c_int> {
        Err(Self::missing(if join {
            "rdma_join_multicast"
        } else {
            "rdma_leave_multicast"
        }))
    }
    fn init_qp_attr(&self, _: &IdBlock, _: &mut ibv_qp_attr) -> Option<Result<c_int, c_int>> {
        None
    }
    fn destroy(&self, _: &IdBlock) {}
}

/// The process's connection manager: softverbs' CM when libibverbs offers
/// its private interface at our version, else [`NoCm`].
pub(crate) fn cm() -> &'static dyn Cm {
    static NO: NoCm = NoCm;
    static SOFT: crate::softcm::SoftCm = crate::softcm::SoftCm;
    // SAFETY: a plain function of the libibverbs we link to.
    if unsafe { crate::verbs::softverbs_private_version() } == crate::verbs::PRIVATE_VERSION {
        &SOFT
    } else {
        &NO
    }
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
            id::bind(VERB, b, &mut st, IpAddr::from([0u8; 4]), 0)?;
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

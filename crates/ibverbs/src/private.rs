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
const PRIVATE_VERSION: c_int = 2;

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

// ---- The connection manager (spec/cm.md §7, spec/rdmacm-abi.md §5) ----
//
// The device's CM at the level of the kernel's ib_cm ([`softverbs::cm::CmPort`]).
// Events of the connections and listeners a channel was given go to that
// channel ([`softverbs::cm::CmChannel`]): its fd is readable while events wait.

use softverbs::cm::{
    cma_header, AcceptParams, CmChannel, CmError, CmEvent, CmPort, CmTiming, ConnId, ConnectParams,
    ListenId, PathParams, PortSpace, QpTarget, TransportType,
};
use softverbs::cm::{Psn, Qpn};
use std::ffi::c_void;
use std::sync::Arc;

/// `struct softverbs_cm_channel`: opaque to C.
pub struct SoftverbsCmChannel(Arc<CmChannel>);

pub use crate::private_abi::*;

fn cm_refuse(verb: &str, e: &CmError) -> c_int {
    let errno = match e {
        CmError::Cm(c) => c.errno(),
        CmError::PrivateDataTooLong { .. } | CmError::AddressFamily { .. } => EINVAL,
        CmError::Os(_) => libc::EMFILE,
        CmError::Qp(_) => EINVAL,
        _ => EINVAL,
    };
    refuse(verb, errno, e)
}

/// The CM of the device behind `context`.
fn port_of(verb: &str, context: *mut ibv_context) -> Result<CmPort, c_int> {
    // SAFETY: ctx_block checks the pointer.
    let b = unsafe { ctx_block(verb, context) }?;
    Ok(b.ctx.cm_port())
}

fn chan_of<'a>(verb: &str, ch: *mut SoftverbsCmChannel) -> Result<&'a Arc<CmChannel>, c_int> {
    if ch.is_null() {
        return Err(refuse(verb, EINVAL, "the CM channel is NULL"));
    }
    // SAFETY: a channel made by softverbs_cm_channel_create and not destroyed (the caller's duty).
    Ok(unsafe { &(*ch).0 })
}

fn bytes<'a>(p: *const c_void, len: u8) -> &'a [u8] {
    if p.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: the caller's buffer of `len` bytes.
        unsafe { std::slice::from_raw_parts(p.cast::<u8>(), usize::from(len)) }
    }
}

fn port_space(verb: &str, ps: u32) -> Result<PortSpace, c_int> {
    u16::try_from(ps)
        .ok()
        .and_then(PortSpace::from_code)
        .ok_or_else(|| refuse(verb, EINVAL, format_args!("port space {ps:#x} is unknown")))
}

fn out<T>(p: *mut T, v: T) {
    // SAFETY: a non-NULL out-pointer from the caller (checked by each caller).
    unsafe { p.write(v) }
}

fn code(r: Result<(), c_int>) -> c_int {
    r.err().unwrap_or(0)
}

/// `int softverbs_cm_channel_create(struct softverbs_cm_channel **out)`.
#[no_mangle]
pub unsafe extern "C" fn softverbs_cm_channel_create(ch: *mut *mut SoftverbsCmChannel) -> c_int {
    const VERB: &str = "softverbs_cm_channel_create";
    if ch.is_null() {
        return refuse(VERB, EINVAL, "the out-pointer is NULL");
    }
    match CmChannel::new() {
        Ok(c) => {
            out(ch, Box::into_raw(Box::new(SoftverbsCmChannel(c))));
            0
        }
        Err(e) => cm_refuse(VERB, &e),
    }
}

/// `void softverbs_cm_channel_destroy(struct softverbs_cm_channel *)`.
#[no_mangle]
pub unsafe extern "C" fn softverbs_cm_channel_destroy(ch: *mut SoftverbsCmChannel) {
    if !ch.is_null() {
        // SAFETY: made by softverbs_cm_channel_create; the caller gives it up.
        drop(unsafe { Box::from_raw(ch) });
    }
}

/// `int softverbs_cm_channel_fd(struct softverbs_cm_channel *)`: readable
/// while events wait (-1 for NULL).
#[no_mangle]
pub unsafe extern "C" fn softverbs_cm_channel_fd(ch: *mut SoftverbsCmChannel) -> c_int {
    chan_of("softverbs_cm_channel_fd", ch).map_or(-1, |c| c.fd())
}

/// `int softverbs_cm_get_event(struct softverbs_cm_channel *, int timeout_ms,
/// struct softverbs_cm_event *)`: the oldest event, waiting at most
/// `timeout_ms` (negative: 0); `EAGAIN` when none came.
#[no_mangle]
pub unsafe extern "C" fn softverbs_cm_get_event(
    ch: *mut SoftverbsCmChannel,
    timeout_ms: c_int,
    ev: *mut SoftverbsCmEvent,
) -> c_int {
    const VERB: &str = "softverbs_cm_get_event";
    let c = match chan_of(VERB, ch) {
        Ok(c) => c,
        Err(e) => return e,
    };
    if ev.is_null() {
        return refuse(VERB, EINVAL, "the event out-pointer is NULL");
    }
    let wait = std::time::Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0));
    let Some(e) = c.next_event(Some(wait)) else {
        return libc::EAGAIN;
    };
    out(ev, flat_event(e));
    0
}

fn flat_event(e: CmEvent) -> SoftverbsCmEvent {
    let mut f = SoftverbsCmEvent {
        kind: 0,
        id: 0,
        listen: 0,
        status: 0,
        remote_qpn: 0,
        remote_psn: 0,
        qkey: 0,
        responder_resources: 0,
        initiator_depth: 0,
        flow_control: 0,
        retry_count: 0,
        rnr_retry_count: 0,
        srq: 0,
        path_mtu: 0,
        sends: 0,
        from: [0; 16],
        private_data_len: 0,
        private_data: [0; 256],
    };
    let mut pd: &[u8] = &[];
    match &e {
        CmEvent::ConnectRequest {
            id,
            listen,
            from,
            request: r,
        } => {
            f.kind = SOFTVERBS_CM_CONNECT_REQUEST;
            f.id = id.0;
            f.listen = listen.0;
            f.from = from.0;
            f.remote_qpn = r.remote_qpn.get();
            f.remote_psn = r.remote_starting_psn.get();
            f.responder_resources = r.responder_resources;
            f.initiator_depth = r.initiator_depth;
            f.flow_control = u8::from(r.flow_control);
            f.retry_count = r.retry_count;
            f.rnr_retry_count = r.rnr_retry_count;
            f.srq = u8::from(r.srq);
            f.path_mtu = r.path_mtu;
            pd = &r.private_data;
        }
        CmEvent::ConnectResponse { id, reply: r } => {
            f.kind = SOFTVERBS_CM_CONNECT_RESPONSE;
            f.id = id.0;
            f.remote_qpn = r.remote_qpn.get();
            f.remote_psn = r.remote_starting_psn.get();
            f.responder_resources = r.responder_resources;
            f.initiator_depth = r.initiator_depth;
            f.flow_control = u8::from(r.flow_control);
            f.rnr_retry_count = r.rnr_retry_count;
            f.srq = u8::from(r.srq);
            pd = &r.private_data;
        }
        CmEvent::Established { id } => {
            f.kind = SOFTVERBS_CM_ESTABLISHED;
            f.id = id.0;
        }
        CmEvent::Rejected {
            id,
            reason,
            private_data,
        } => {
            f.kind = SOFTVERBS_CM_REJECTED;
            f.id = id.0;
            f.status = u32::from(reason.code());
            pd = private_data;
        }
        CmEvent::Unreachable { id, sends } => {
            f.kind = SOFTVERBS_CM_UNREACHABLE;
            f.id = id.0;
            f.sends = *sends;
        }
        CmEvent::Disconnected { id, timed_out } => {
            f.kind = SOFTVERBS_CM_DISCONNECTED;
            f.id = id.0;
            f.status = u32::from(*timed_out);
        }
        CmEvent::TimewaitExit { id } => {
            f.kind = SOFTVERBS_CM_TIMEWAIT_EXIT;
            f.id = id.0;
        }
        CmEvent::SidrRequest {
            id,
            listen,
            from,
            private_data,
            ..
        } => {
            f.kind = SOFTVERBS_CM_SIDR_REQUEST;
            f.id = id.0;
            f.listen = listen.0;
            f.from = from.0;
            pd = private_data;
        }
        CmEvent::SidrResolved {
            id,
            qpn,
            qkey,
            private_data,
        } => {
            f.kind = SOFTVERBS_CM_SIDR_RESOLVED;
            f.id = id.0;
            f.remote_qpn = qpn.get();
            f.qkey = *qkey;
            pd = private_data;
        }
        CmEvent::SidrUnreachable { id, status, sends } => {
            f.kind = SOFTVERBS_CM_SIDR_UNREACHABLE;
            f.id = id.0;
            f.status = status.map_or(0x100, |s| u32::from(s.code()));
            f.sends = *sends;
        }
    }
    let n = pd.len().min(f.private_data.len());
    f.private_data[..n].copy_from_slice(&pd[..n]);
    f.private_data_len = n as u32;
    f
}

/// `int softverbs_cm_listen(struct ibv_context *, struct softverbs_cm_channel *,
/// uint32_t ps, uint16_t port, uint64_t *listen)`: REQs for service ID
/// ps << 16 | port go to the channel. `EADDRINUSE` if someone listens there.
#[no_mangle]
pub unsafe extern "C" fn softverbs_cm_listen(
    context: *mut ibv_context,
    ch: *mut SoftverbsCmChannel,
    ps: u32,
    port: u16,
    listen: *mut u64,
) -> c_int {
    const VERB: &str = "softverbs_cm_listen";
    code((|| {
        let (cm, c, ps) = (
            port_of(VERB, context)?,
            chan_of(VERB, ch)?,
            port_space(VERB, ps)?,
        );
        if listen.is_null() {
            return Err(refuse(VERB, EINVAL, "the listen out-pointer is NULL"));
        }
        let l = cm.listen(ps, port, c).map_err(|e| cm_refuse(VERB, &e))?;
        out(listen, l.0);
        Ok(())
    })())
}

/// `int softverbs_cm_reserve(struct ibv_context *, uint32_t ps, uint16_t port)`:
/// `port` of `ps` is bound (`rdma_bind_addr`); a REQ for it that comes
/// before the listen is held for it, not rejected. Each call needs its
/// `softverbs_cm_release`.
#[no_mangle]
pub unsafe extern "C" fn softverbs_cm_reserve(
    context: *mut ibv_context,
    ps: u32,
    port: u16,
) -> c_int {
    const VERB: &str = "softverbs_cm_reserve";
    code((|| {
        let (cm, ps) = (port_of(VERB, context)?, port_space(VERB, ps)?);
        cm.reserve(ps, port);
        Ok(())
    })())
}

/// `int softverbs_cm_release(struct ibv_context *, uint32_t ps, uint16_t port)`:
/// undoes one `softverbs_cm_reserve`.
#[no_mangle]
pub unsafe extern "C" fn softverbs_cm_release(
    context: *mut ibv_context,
    ps: u32,
    port: u16,
) -> c_int {
    const VERB: &str = "softverbs_cm_release";
    code((|| {
        let (cm, ps) = (port_of(VERB, context)?, port_space(VERB, ps)?);
        cm.release(ps, port);
        Ok(())
    })())
}

/// `int softverbs_cm_stop_listening(struct ibv_context *, uint64_t listen)`.
#[no_mangle]
pub unsafe extern "C" fn softverbs_cm_stop_listening(
    context: *mut ibv_context,
    listen: u64,
) -> c_int {
    const VERB: &str = "softverbs_cm_stop_listening";
    code(port_of(VERB, context).and_then(|cm| {
        cm.stop_listening(ListenId(listen))
            .map_err(|e| cm_refuse(VERB, &e))
    }))
}

/// `int softverbs_cm_connect(struct ibv_context *, struct softverbs_cm_channel *,
/// const struct softverbs_cm_connect *, uint32_t *id)`: sends a REQ whose
/// private data is the rdma_cm header and the caller's bytes (at most 56).
#[no_mangle]
pub unsafe extern "C" fn softverbs_cm_connect(
    context: *mut ibv_context,
    ch: *mut SoftverbsCmChannel,
    param: *const SoftverbsCmConnect,
    id: *mut u32,
) -> c_int {
    const VERB: &str = "softverbs_cm_connect";
    code((|| {
        let (cm, c) = (port_of(VERB, context)?, chan_of(VERB, ch)?);
        if param.is_null() || id.is_null() {
            return Err(refuse(VERB, EINVAL, "param or the id out-pointer is NULL"));
        }
        // SAFETY: non-NULL parameters from the caller.
        let p = unsafe { &*param };
        let ps = port_space(VERB, p.ps)?;
        let addr = |ss: &libc::sockaddr_storage, which: &str| {
            sockaddr_ip(ss).ok_or_else(|| {
                refuse(
                    VERB,
                    EINVAL,
                    format_args!("the {which} address is not AF_INET or AF_INET6"),
                )
            })
        };
        let (src, src_port) = addr(&p.src, "source")?;
        let (dst, dst_port) = addr(&p.dst, "destination")?;
        let user = bytes(p.private_data, p.private_data_len);
        if user.len() > softverbs::cm::REQ_PRIVATE_DATA_MAX {
            return Err(refuse(
                VERB,
                EINVAL,
                format_args!(
                    "REQ private data is {} bytes, at most {}",
                    user.len(),
                    softverbs::cm::REQ_PRIVATE_DATA_MAX
                ),
            ));
        }
        let params = ConnectParams {
            peer: dst.into(),
            service_id: (u64::from(ps as u16) << 16) | u64::from(dst_port),
            qpn: Qpn::from_masked(p.qp_num),
            transport: match p.uc {
                1 => TransportType::Uc,
                3 => TransportType::Extended,
                _ => TransportType::Rc,
            },
            starting_psn: Psn::from_masked(p.starting_psn),
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            flow_control: p.flow_control != 0,
            retry_count: p.retry_count.min(7),
            rnr_retry_count: p.rnr_retry_count.min(7),
            srq: p.srq != 0,
            path_mtu: p.path_mtu,
            path: PathParams::default(),
            private_data: cma_header(src, src_port, dst, user),
        };
        let timing = CmTiming {
            packet_life_time: p.packet_life_time,
            cm_response_timeout: p.cm_response_timeout,
            max_cm_retries: p.max_cm_retries,
        };
        let conn = cm
            .connect(&params, timing, c)
            .map_err(|e| cm_refuse(VERB, &e))?;
        out(id, conn.0);
        Ok(())
    })())
}

fn sockaddr_ip(ss: &libc::sockaddr_storage) -> Option<(IpAddr, u16)> {
    match c_int::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says sockaddr_in, which fits in the storage.
            let sin = unsafe { &*std::ptr::from_ref(ss).cast::<libc::sockaddr_in>() };
            Some((
                IpAddr::from(sin.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(sin.sin_port),
            ))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { &*std::ptr::from_ref(ss).cast::<libc::sockaddr_in6>() };
            Some((
                IpAddr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
            ))
        }
        _ => None,
    }
}

/// `int softverbs_cm_route(struct ibv_context *, uint32_t id, struct softverbs_cm_channel *)`:
/// the connection's later events go to this channel.
#[no_mangle]
pub unsafe extern "C" fn softverbs_cm_route(
    context: *mut ibv_context,
    id: u32,
    ch: *mut SoftverbsCmChannel,
) -> c_int {
    const VERB: &str = "softverbs_cm_route";
    code((|| {
        let (cm, c) = (port_of(VERB, context)?, chan_of(VERB, ch)?);
        cm.route(ConnId(id), c);
        Ok(())
    })())
}

/// `int softverbs_cm_accept(struct ibv_context *, uint32_t id, const struct softverbs_cm_accept *)`:
/// the REP for a CONNECT_REQUEST.
#[no_mangle]
pub unsafe extern "C" fn softverbs_cm_accept(
    context: *mut ibv_context,
    id: u32,
    param: *const SoftverbsCmAccept,
) -> c_int {
    const VERB: &str = "softverbs_cm_accept";
    code((|| {
        let cm = port_of(VERB, context)?;
        if param.is_null() {
            return Err(refuse(VERB, EINVAL, "param is NULL"));
        }
        // SAFETY: non-NULL parameters from the caller.
        let p = unsafe { &*param };
        let a = AcceptParams {
            qpn: Qpn::from_masked(p.qp_num),
            starting_psn: Psn::from_masked(p.starting_psn),
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            flow_control: p.flow_control != 0,
            rnr_retry_count: p.rnr_retry_count.min(7),
            srq: p.srq != 0,
            private_data: bytes(p.private_data, p.private_data_len).to_vec(),
        };
        cm.accept(ConnId(id), &a).map_err(|e| cm_refuse(VERB, &e))
    })())
}

/// `int softverbs_cm_reject(struct ibv_context *, uint32_t id, const void *private_data, uint8_t len)`:
/// REJ, consumer defined (reason 28).
#[no_mangle]
pub unsafe extern "C" fn softverbs_cm_reject(
    context: *mut ibv_context,
    id: u32,
    private_data: *const c_void,
    len: u8,
) -> c_int {
    const VERB: &str = "softverbs_cm_reject";
    code(port_of(VERB, context).and_then(|cm| {
        cm.reject(ConnId(id), bytes(private_data, len))
            .map_err(|e| cm_refuse(VERB, &e))
    }))
}

macro_rules! simple_cm_call {
    ($(#[$m:meta])* $name:ident, $method:ident $(, $arg:expr)?) => {
        $(#[$m])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(context: *mut ibv_context, id: u32) -> c_int {
            const VERB: &str = stringify!($name);
            code(port_of(VERB, context).and_then(|cm| {
                cm.$method(ConnId(id) $(, $arg)?).map_err(|e| cm_refuse(VERB, &e))
            }))
        }
    };
}

simple_cm_call!(
    /// `int softverbs_cm_ready_to_use(struct ibv_context *, uint32_t id)`: RTU after a CONNECT_RESPONSE.
    softverbs_cm_ready_to_use, ready_to_use, &[]
);
simple_cm_call!(
    /// `int softverbs_cm_establish(struct ibv_context *, uint32_t id)`: passive side up without the RTU.
    softverbs_cm_establish, establish
);
/// `int softverbs_cm_disconnect(struct ibv_context *, uint32_t id)`: DREQ,
/// or DREP after DISCONNECTED. `EALREADY` (logged at debug: not an error for
/// `rdma_disconnect`, which succeeds then, as the kernel's does) when neither
/// is due any more: the connection is in TimeWait or gone down already.
#[no_mangle]
pub unsafe extern "C" fn softverbs_cm_disconnect(context: *mut ibv_context, id: u32) -> c_int {
    const VERB: &str = "softverbs_cm_disconnect";
    code(
        port_of(VERB, context).and_then(|cm| match cm.disconnect(ConnId(id), &[]) {
            Ok(()) => Ok(()),
            Err(CmError::Cm(e @ proto::cm::CmError::WrongState { .. })) => {
                tracing::debug!(target: "softverbs", "{VERB}: no DREQ or DREP is due: {e}");
                Err(libc::EALREADY)
            }
            Err(e) => Err(cm_refuse(VERB, &e)),
        }),
    )
}
/// `int softverbs_cm_destroy(struct ibv_context *, uint32_t id)`: forgets
/// the connection; 0 also when the CM forgot it already (rejected, timed out).
#[no_mangle]
pub unsafe extern "C" fn softverbs_cm_destroy(context: *mut ibv_context, id: u32) -> c_int {
    const VERB: &str = "softverbs_cm_destroy";
    code(
        port_of(VERB, context).and_then(|cm| match cm.destroy(ConnId(id)) {
            Ok(()) | Err(CmError::Cm(proto::cm::CmError::UnknownId(_))) => Ok(()),
            Err(e) => Err(cm_refuse(VERB, &e)),
        }),
    )
}

/// `int softverbs_cm_sidr_request(struct ibv_context *, struct softverbs_cm_channel *,
/// const struct sockaddr_storage *src, const struct sockaddr_storage *dst, uint32_t ps,
/// const void *private_data, uint8_t len, uint32_t *id)`: a SIDR_REQ for `dst`'s port
/// (its private data: the rdma_cm header and the caller's bytes, at most 180).
#[no_mangle]
pub unsafe extern "C" fn softverbs_cm_sidr_request(
    context: *mut ibv_context,
    ch: *mut SoftverbsCmChannel,
    src: *const libc::sockaddr_storage,
    dst: *const libc::sockaddr_storage,
    ps: u32,
    private_data: *const c_void,
    len: u8,
    id: *mut u32,
) -> c_int {
    const VERB: &str = "softverbs_cm_sidr_request";
    code((|| {
        let (cm, c, ps) = (
            port_of(VERB, context)?,
            chan_of(VERB, ch)?,
            port_space(VERB, ps)?,
        );
        if src.is_null() || dst.is_null() || id.is_null() {
            return Err(refuse(
                VERB,
                EINVAL,
                "an address or the id out-pointer is NULL",
            ));
        }
        // SAFETY: non-NULL addresses from the caller.
        let (s, d) = unsafe { (sockaddr_ip(&*src), sockaddr_ip(&*dst)) };
        let ((src, src_port), (dst, dst_port)) = s
            .zip(d)
            .ok_or_else(|| refuse(VERB, EINVAL, "an address is not AF_INET or AF_INET6"))?;
        let pd = cma_header(src, src_port, dst, bytes(private_data, len));
        let conn = cm
            .sidr_request(dst, ps, dst_port, &pd, c)
            .map_err(|e| cm_refuse(VERB, &e))?;
        out(id, conn.0);
        Ok(())
    })())
}

/// `int softverbs_cm_sidr_reply(struct ibv_context *, uint32_t id, uint8_t status,
/// uint32_t qpn, uint32_t qkey, const void *private_data, uint8_t len)`: the SIDR_REP
/// (status 0: the service is `qpn` with `qkey`).
#[no_mangle]
pub unsafe extern "C" fn softverbs_cm_sidr_reply(
    context: *mut ibv_context,
    id: u32,
    status: u8,
    qpn: u32,
    qkey: u32,
    private_data: *const c_void,
    len: u8,
) -> c_int {
    const VERB: &str = "softverbs_cm_sidr_reply";
    code(port_of(VERB, context).and_then(|cm| {
        cm.sidr_reply(
            ConnId(id),
            softverbs::cm::SidrStatus::from_code(status),
            qpn,
            qkey,
            bytes(private_data, len),
        )
        .map_err(|e| cm_refuse(VERB, &e))
    }))
}

/// `int softverbs_cm_flush(struct ibv_context *, int timeout_ms)`: waits
/// until the CM's queued MADs went out (`ETIMEDOUT` after `timeout_ms`).
#[no_mangle]
pub unsafe extern "C" fn softverbs_cm_flush(context: *mut ibv_context, timeout_ms: c_int) -> c_int {
    const VERB: &str = "softverbs_cm_flush";
    code(port_of(VERB, context).and_then(|cm| {
        let t = std::time::Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0));
        if cm.flush(t) {
            Ok(())
        } else {
            tracing::debug!(target: "softverbs", "{VERB}: MADs still queued after {timeout_ms} ms");
            Err(libc::ETIMEDOUT)
        }
    }))
}

/// `int softverbs_cm_qp_attr(struct ibv_context *, uint32_t id, enum ibv_qp_state target,
/// struct ibv_qp_attr *, int *mask)`: the attributes (INIT, RTR or RTS) the
/// CM negotiated, as `rdma_init_qp_attr` gives them.
#[no_mangle]
pub unsafe extern "C" fn softverbs_cm_qp_attr(
    context: *mut ibv_context,
    id: u32,
    target: u32,
    attr: *mut ibv_qp_attr,
    mask: *mut c_int,
) -> c_int {
    const VERB: &str = "softverbs_cm_qp_attr";
    code((|| {
        let cm = port_of(VERB, context)?;
        if attr.is_null() || mask.is_null() {
            return Err(refuse(VERB, EINVAL, "attr or mask is NULL"));
        }
        let t = match target {
            1 => QpTarget::Init,
            2 => QpTarget::Rtr,
            3 => QpTarget::Rts,
            _ => {
                return Err(refuse(
                    VERB,
                    EINVAL,
                    format_args!("QP state {target} is not INIT, RTR or RTS"),
                ))
            }
        };
        let a = cm
            .qp_attrs(ConnId(id), t)
            .map_err(|e| cm_refuse(VERB, &e))?;
        let (qa, m) = a
            .to_verbs(t, 0)
            .ok_or_else(|| refuse(VERB, EINVAL, "the CM's path MTU is not an IB MTU"))?;
        out(attr, crate::convert::c_qp_attr(&qa));
        out(mask, m.0 as c_int);
        Ok(())
    })())
}

crate::symver!("private");

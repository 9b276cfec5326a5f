//! `rdma_resolve_addr` and `rdma_resolve_route` (spec/rdmacm-abi.md §3.4,
//! §3.5): which softverbs device reaches a destination, and the RoCE path
//! record to it. Both complete at once (softverbs needs no neighbour or SA
//! query) and report through the id's channel as the kernel does.

use crate::conn;
use crate::device::{self, Dev};
use crate::ffi::*;
use crate::id::{self, IdBlock, State};
use crate::net;
use crate::util::*;
use crate::verbs;
use std::ffi::c_int;
use std::net::IpAddr;

/// The kernel's packet lifetime for RoCE routes (cma.c `CMA_IBOE_PACKET_LIFETIME`).
const CMA_IBOE_PACKET_LIFETIME: u8 = 18;
/// `IB_SA_EQ`: the selectors of a RoCE path record.
const IB_SA_EQ: u8 = 1;
/// The hop limit of a routed RoCEv2 path (the IPv4 default TTL the route gives).
const HOP_LIMIT: u8 = 64;

/// The device that reaches `dst`, and the source address on it.
/// `Err` is the synchronous failure (no route); `Ok(None)` means the route's
/// source address belongs to no softverbs device (ADDR_ERROR, `-ENODEV`).
fn route_to(
    verb: &str,
    dst: IpAddr,
    bound: Option<&'static Dev>,
) -> Result<Option<(&'static Dev, IpAddr)>, c_int> {
    if net::is_loopback(&dst) || dst.is_unspecified() {
        // Loopback destinations: the device on loopback (kernel `cma_resolve_loopback`
        // for the wildcard; a 127/8 route's source is loopback too).
        let dev = match bound {
            Some(d) if d.on_loopback() => Some(d),
            Some(_) => None,
            None => device::on_loopback(verb)?,
        };
        return Ok(dev.and_then(|d| d.addr_for(&dst).map(|a| (d, a))));
    }
    if dst.is_multicast() {
        // A group is reached from the bound device's own interface (IPv4 sends
        // multicast out of the interface holding the source address,
        // spec/multicast.md §1); unbound, from the device of the route's source.
        if let Some(b) = bound {
            return Ok(b.addr_for(&dst).map(|a| (b, a)));
        }
    }
    let src = net::route_source(dst)
        .map_err(|e| refuse(verb, e, format_args!("the host has no route to {dst}")))?;
    // A destination that is a device's own address is reached by that device.
    let own = device::owning(verb, &dst)?;
    let dev = match (bound, own) {
        (Some(b), _) => b
            .addrs
            .contains(&src)
            .then_some(b)
            .or(own.filter(|o| std::ptr::eq(*o, b))),
        (None, Some(o)) => Some(o),
        (None, None) => device::owning(verb, &src)?,
    };
    Ok(dev.map(|d| {
        (
            d,
            if d.addrs.contains(&src) {
                src
            } else {
                d.addr_for(&dst).unwrap_or(src)
            },
        )
    }))
}

/// `rdma_resolve_addr`'s body.
fn resolve_addr(
    verb: &str,
    b: &'static IdBlock,
    src: Option<(IpAddr, u16)>,
    dst: (IpAddr, u16),
) -> Result<(), c_int> {
    let mut st = b.lock();
    if st.state == State::Idle {
        // Bind first: the source given, else the wildcard of the destination's family.
        let (ip, port) = src.unwrap_or((net::any_of(&dst.0), 0));
        if ip.is_ipv4() != dst.0.is_ipv4() {
            return Err(refuse(
                verb,
                libc::EINVAL,
                "source and destination address families differ",
            ));
        }
        conn::bind(verb, b, &mut st, ip, port)?;
    }
    if st.state != State::AddrBound {
        return Err(refuse(
            verb,
            libc::EINVAL,
            format_args!("the id is in state {:?}, not bound", st.state),
        ));
    }
    let found = route_to(verb, dst.0, st.dev)?;
    st.state = State::AddrQuery;
    // SAFETY: under the id's lock.
    unsafe {
        let c = &mut *b.c();
        c.route.addr.dst = net::to_storage(dst.0, dst.1);
        c.route.addr.ibaddr.dgid.raw = net::gid_of(dst.0);
    }
    let Some((dev, src_ip)) = found else {
        tracing::warn!(target: "softverbs", "{verb}: ADDR_ERROR (ENODEV): no softverbs device reaches {} (a device's addresses come from SOFTVERBS_ADDR)", dst.0);
        st.state = State::AddrBound;
        b.post(&st, RDMA_CM_EVENT_ADDR_ERROR, -libc::ENODEV);
        return Ok(());
    };
    if st.dev.is_none() {
        b.attach(&mut st, dev, src_ip, verb)?;
    }
    let port = b.src().map_or(0, |(_, p)| p);
    let src_ip = b
        .src()
        .map(|(ip, _)| ip)
        .filter(|ip| !ip.is_unspecified())
        .unwrap_or(src_ip);
    // SAFETY: under the id's lock.
    unsafe {
        let c = &mut *b.c();
        c.route.addr.src = net::to_storage(src_ip, port);
        c.route.addr.ibaddr.sgid.raw = net::gid_of(src_ip);
    }
    st.state = State::AddrResolved;
    b.post(&st, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
    Ok(())
}

/// The RoCE path record of a resolved id (kernel `cma_resolve_iboe_route`).
fn path_record(b: &IdBlock, st: &id::IdState) -> ibv_sa_path_rec {
    // SAFETY: all-zero is a valid port attribute block; the context is open.
    let mut pa: ibv_port_attr = unsafe { std::mem::zeroed() };
    if let Some(d) = st.dev {
        // SAFETY: an open context and a full-size out-struct.
        unsafe { verbs::ibv_query_port(d.ctx, 1, &raw mut pa) };
    }
    let (src, sport) = b.src().unwrap_or((net::any_of(&IpAddr::from([0u8; 4])), 0));
    let (dst, dport) = b.dst().unwrap_or((src, 0));
    // kernel `cma_get_roce_udp_flow_label`.
    let flow_label = (u32::from(sport) * 31 + u32::from(dport)) & 0xfffff;
    let tos = st.opts.tos.unwrap_or(0);
    ibv_sa_path_rec {
        dgid: ibv_gid {
            raw: net::gid_of(dst),
        },
        sgid: ibv_gid {
            raw: net::gid_of(src),
        },
        dlid: 0,
        slid: 0,
        raw_traffic: 0,
        flow_label: flow_label.to_be(),
        hop_limit: HOP_LIMIT,
        traffic_class: tos,
        reversible: 1,
        numb_path: 1,
        pkey: 0xffff_u16.to_be(),
        sl: 0,
        mtu_selector: IB_SA_EQ,
        mtu: pa.active_mtu as u8,
        rate_selector: IB_SA_EQ,
        rate: crate::rate::port_rate(pa.active_width, pa.active_speed),
        packet_life_time_selector: IB_SA_EQ,
        packet_life_time: match st.opts.ack_timeout {
            Some(t) if t > 0 => t - 1,
            _ => CMA_IBOE_PACKET_LIFETIME,
        },
        preference: 0,
    }
}

/// `rdma_resolve_route`'s body.
fn resolve_route(verb: &str, b: &IdBlock) -> Result<(), c_int> {
    let mut st = b.lock();
    if st.state != State::AddrResolved {
        return Err(refuse(
            verb,
            libc::EINVAL,
            format_args!(
                "the id is in state {:?}: resolve its address first",
                st.state
            ),
        ));
    }
    let rec = path_record(b, &st);
    if rec.mtu == 0 {
        st.state = State::AddrResolved;
        b.post(&st, RDMA_CM_EVENT_ROUTE_ERROR, -libc::EINVAL);
        return Ok(());
    }
    let mut boxed = Box::new(rec);
    // SAFETY: under the id's lock; the record lives in the id's state.
    unsafe {
        let c = &mut *b.c();
        c.route.path_rec = &raw mut *boxed;
        c.route.num_paths = 1;
    }
    st.path = Some(boxed);
    st.state = State::RouteResolved;
    b.post(&st, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
    Ok(())
}

/// `int rdma_resolve_addr(struct rdma_cm_id *, struct sockaddr *src, struct sockaddr *dst, int timeout_ms)`.
/// The body of `rdma_resolve_addr`, for this library's own callers (an export is
/// never called across modules: its `.symver` must sit with its definition).
pub(crate) unsafe fn rdma_resolve_addr_impl(
    id: *mut rdma_cm_id,
    src_addr: *mut libc::sockaddr,
    dst_addr: *mut libc::sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    const VERB: &str = "rdma_resolve_addr";
    let r = id::id_block(VERB, id).and_then(|b| {
        if dst_addr.is_null() {
            return Err(refuse(VERB, libc::EINVAL, "dst_addr is NULL"));
        }
        let fam = |e| refuse(VERB, e, "the address family is not AF_INET or AF_INET6");
        // SAFETY: non-NULL sockaddrs from the caller.
        let dst = unsafe { net::from_sockaddr(dst_addr) }.map_err(fam)?;
        let src = if src_addr.is_null() {
            None
        } else {
            // SAFETY: as above.
            Some(unsafe { net::from_sockaddr(src_addr) }.map_err(fam)?)
        };
        resolve_addr(VERB, b, src, dst)?;
        b.complete(VERB)
    });
    ret(r)
}

#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src_addr: *mut libc::sockaddr,
    dst_addr: *mut libc::sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    unsafe { rdma_resolve_addr_impl(id, src_addr, dst_addr, _timeout_ms) }
}

/// `int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)`.
/// The body of `rdma_resolve_route`, for this library's own callers (an export is
/// never called across modules: its `.symver` must sit with its definition).
pub(crate) unsafe fn rdma_resolve_route_impl(id: *mut rdma_cm_id, _timeout_ms: c_int) -> c_int {
    const VERB: &str = "rdma_resolve_route";
    let r = id::id_block(VERB, id).and_then(|b| {
        resolve_route(VERB, b)?;
        b.complete(VERB)
    });
    ret(r)
}

#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_route(id: *mut rdma_cm_id, _timeout_ms: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    unsafe { rdma_resolve_route_impl(id, _timeout_ms) }
}

crate::symver!("route");

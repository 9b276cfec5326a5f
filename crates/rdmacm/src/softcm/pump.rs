//! The event pump of the connection manager: one thread per device context
//! reads the engine's CM events and turns each into the rdma_cm event of its
//! id (connection requests make their new id; a UD request carries its
//! address handle), queued on the id's channel.

use super::state::{connect_qp, qp_of, qp_to_err, tables, IdCm, DISPATCH, ON_EVENT_THREAD};
use crate::channel::Pending;
use crate::device;
use crate::ffi::*;
use crate::id::{self, IdBlock, State};
use crate::net;
use crate::util::*;
use crate::verbs::cm as sv;
use std::ffi::c_int;
use std::net::IpAddr;

/// Blocks the asynchronous signals in this library thread, so that a signal
/// sent to the process reaches (and interrupts) one of the program's threads,
/// as with rdma-core, which adds no thread.
fn block_async_signals() {
    // SAFETY: sigset_t is plain data, filled by sigfillset before use;
    // pthread_sigmask changes only this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&raw mut set);
        for s in [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGFPE,
            libc::SIGILL,
            libc::SIGTRAP,
        ] {
            libc::sigdelset(&raw mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &raw const set, std::ptr::null_mut());
    }
}

/// A conn event for `id`, with `private_data` (its length as the kernel
/// reports it: the whole field of the message).
fn conn_pending(
    id: usize,
    event: u32,
    status: c_int,
    ev: &sv::SoftverbsCmEvent,
    private_data: &[u8],
) -> Pending {
    let mut p = Pending::new(id, event, status);
    p.param.conn = rdma_conn_param {
        private_data: std::ptr::null(),
        private_data_len: u8::try_from(private_data.len()).unwrap_or(u8::MAX),
        responder_resources: ev.responder_resources,
        initiator_depth: ev.initiator_depth,
        flow_control: ev.flow_control,
        retry_count: ev.retry_count,
        rnr_retry_count: ev.rnr_retry_count,
        srq: ev.srq,
        qp_num: ev.remote_qpn,
    };
    p.private_data = private_data.to_vec();
    p
}

pub(super) fn post(b: &IdBlock, p: Pending) {
    let st = b.lock();
    st.channel.push(p);
}

pub(super) fn event_thread(ctx: usize, chan: usize) {
    ON_EVENT_THREAD.with(|f| f.set(true));
    block_async_signals();
    let ch = chan as *mut sv::SoftverbsCmChannel;
    loop {
        // SAFETY: all-zero is a valid event (plain numbers and arrays).
        let mut ev: sv::SoftverbsCmEvent = unsafe { std::mem::zeroed() };
        // SAFETY: our channel, never destroyed; a valid out-pointer.
        if unsafe { sv::softverbs_cm_get_event(ch, 1000, &raw mut ev) } != 0 {
            continue;
        }
        let _g = lock(&DISPATCH);
        dispatch(ctx as *mut ibv_context, &ev);
    }
}

fn dispatch(ctx: *mut ibv_context, ev: &sv::SoftverbsCmEvent) {
    const VERB: &str = "rdma_get_cm_event";
    let key = ctx as usize;
    tracing::debug!(target: "softverbs", "CM event {} for connection {:#x}", ev.kind, ev.id);
    let pd = &ev.private_data[..(ev.private_data_len as usize).min(256)];
    if ev.kind == sv::SOFTVERBS_CM_CONNECT_REQUEST || ev.kind == sv::SOFTVERBS_CM_SIDR_REQUEST {
        let listener = tables(|t| t.listens.get(&(key, ev.listen)).copied()).and_then(id::live);
        match listener {
            Some(l) => {
                if let Err(e) =
                    connect_request(ctx, l, ev, pd, ev.kind == sv::SOFTVERBS_CM_SIDR_REQUEST)
                {
                    tracing::warn!(target: "softverbs", "{VERB}: a connection request was refused ({}): no id for it", errno_name(e));
                    // SAFETY: an open context.
                    unsafe { sv::softverbs_cm_reject(ctx, ev.id, std::ptr::null(), 0) };
                }
            }
            // SAFETY: an open context.
            None => unsafe {
                sv::softverbs_cm_reject(ctx, ev.id, std::ptr::null(), 0);
            },
        }
        return;
    }
    let Some(b) = tables(|t| t.conns.get(&(key, ev.id)).copied()).and_then(id::live) else {
        tracing::debug!(target: "softverbs", "CM event {} for a destroyed id", ev.kind);
        return;
    };
    let set = |f: &dyn Fn(&mut IdCm) -> bool| tables(|t| t.ids.get_mut(&b.addr()).is_some_and(f));
    match ev.kind {
        sv::SOFTVERBS_CM_CONNECT_RESPONSE => {
            let qp = qp_of(b);
            if qp.is_null() {
                // The program moves its QP itself, then calls rdma_establish.
                post(
                    b,
                    conn_pending(b.addr(), RDMA_CM_EVENT_CONNECT_RESPONSE, 0, ev, pd),
                );
                return;
            }
            let r = connect_qp(VERB, ctx, ev.id, qp, None, None).and_then(|()| {
                // SAFETY: an open context.
                match unsafe { sv::softverbs_cm_ready_to_use(ctx, ev.id) } {
                    0 => Ok(()),
                    e => Err(refuse(VERB, e, "the RTU could not be sent")),
                }
            });
            match r {
                Ok(()) => {
                    if set(&|c| !std::mem::replace(&mut c.established, true)) {
                        post(
                            b,
                            conn_pending(b.addr(), RDMA_CM_EVENT_ESTABLISHED, 0, ev, pd),
                        );
                    }
                }
                Err(e) => {
                    // SAFETY: an open context.
                    unsafe { sv::softverbs_cm_reject(ctx, ev.id, std::ptr::null(), 0) };
                    post(b, Pending::new(b.addr(), RDMA_CM_EVENT_CONNECT_ERROR, -e));
                }
            }
        }
        sv::SOFTVERBS_CM_ESTABLISHED if set(&|c| !std::mem::replace(&mut c.established, true)) => {
            post(b, Pending::new(b.addr(), RDMA_CM_EVENT_ESTABLISHED, 0));
        }
        sv::SOFTVERBS_CM_REJECTED => {
            qp_to_err(b);
            let status = c_int::try_from(ev.status).unwrap_or(c_int::MAX);
            post(
                b,
                conn_pending(b.addr(), RDMA_CM_EVENT_REJECTED, status, ev, pd),
            );
        }
        sv::SOFTVERBS_CM_SIDR_RESOLVED => {
            let mut p = Pending::new(b.addr(), RDMA_CM_EVENT_ESTABLISHED, 0);
            let ud = ud_param(b.dst().map(|(ip, _)| ip), ev, pd);
            p.param.ud = ud;
            p.private_data = pd.to_vec();
            post(b, p);
        }
        sv::SOFTVERBS_CM_SIDR_UNREACHABLE => {
            // Kernel `cma_sidr_rep_handler`: UNREACHABLE, status the SIDR_REP's.
            let status = if ev.status == 0x100 {
                -libc::ETIMEDOUT
            } else {
                c_int::try_from(ev.status).unwrap_or(c_int::MAX)
            };
            post(b, Pending::new(b.addr(), RDMA_CM_EVENT_UNREACHABLE, status));
        }
        sv::SOFTVERBS_CM_UNREACHABLE => {
            qp_to_err(b);
            post(
                b,
                Pending::new(b.addr(), RDMA_CM_EVENT_UNREACHABLE, -libc::ETIMEDOUT),
            );
        }
        sv::SOFTVERBS_CM_DISCONNECTED
            if set(&|c| !std::mem::replace(&mut c.disconnected, true)) =>
        {
            // rdma-core `rdma_get_cm_event`: DISCONNECTED leaves the QP alone
            // (rdma_disconnect moves it to ERR); programs may destroy it with
            // ibv_destroy_qp right after their own rdma_disconnect (rping).
            post(b, Pending::new(b.addr(), RDMA_CM_EVENT_DISCONNECTED, 0));
        }
        _ => {}
    }
}

/// `param.ud` of a SIDR event: the private data's length, the address
/// vector to `peer` (a RoCE GRH, port 1, source GID 0), the QP and Q_Key.
fn ud_param(peer: Option<IpAddr>, ev: &sv::SoftverbsCmEvent, pd: &[u8]) -> rdma_ud_param {
    // SAFETY: all-zero is a valid rdma_ud_param (NULL pointer, numbers).
    let mut ud: rdma_ud_param = unsafe { std::mem::zeroed() };
    ud.private_data_len = u8::try_from(pd.len()).unwrap_or(u8::MAX);
    if let Some(ip) = peer {
        ud.ah_attr.grh.dgid.raw = net::gid_of(ip);
        ud.ah_attr.grh.hop_limit = 64;
        ud.ah_attr.is_global = 1;
        ud.ah_attr.port_num = 1;
    }
    ud.qp_num = ev.remote_qpn;
    ud.qkey = ev.qkey;
    ud
}

/// The rdma_cm header's addresses: (peer, peer port, our address).
pub(super) fn cma_addrs(pd: &[u8]) -> Option<(IpAddr, u16, IpAddr)> {
    if pd.len() < 36 {
        return None;
    }
    let ipv = pd[1] >> 4;
    let port = u16::from_be_bytes([pd[2], pd[3]]);
    let addr = |a: &[u8]| -> Option<IpAddr> {
        match ipv {
            4 => Some(IpAddr::from(<[u8; 4]>::try_from(&a[12..16]).ok()?)),
            6 => Some(IpAddr::from(<[u8; 16]>::try_from(a).ok()?)),
            _ => None,
        }
    };
    Some((addr(&pd[4..20])?, port, addr(&pd[20..36])?))
}

/// CONNECT_REQUEST: a new id for the request (rdma-core
/// `ucma_process_conn_req`), the event on the listener's channel.
fn connect_request(
    ctx: *mut ibv_context,
    l: &IdBlock,
    ev: &sv::SoftverbsCmEvent,
    pd: &[u8],
    sidr: bool,
) -> Result<(), c_int> {
    const VERB: &str = "rdma_get_cm_event";
    let (peer, peer_port, local) = cma_addrs(pd).ok_or_else(|| {
        refuse(
            VERB,
            libc::EINVAL,
            "the REQ's private data has no rdma_cm header",
        )
    })?;
    let dev = device::devices(VERB)?
        .iter()
        .find(|d| d.ctx == ctx)
        .ok_or_else(|| {
            refuse(
                VERB,
                libc::ENODEV,
                "the request came through a device librdmacm does not know",
            )
        })?;
    let (lchan, sync, context, passive) = {
        let st = l.lock();
        // SAFETY: the listener's fields.
        let c = unsafe { &*l.c() };
        (
            c.channel,
            st.sync_channel.is_some(),
            c.context,
            st.passive_qp_attr.as_deref().map(|a| {
                // SAFETY: a plain C struct, copied bit for bit as rdma-core does.
                unsafe { std::ptr::read(a) }
            }),
        )
    };
    let lport = l.src().map_or(0, |(_, p)| p);
    let new = id::create(
        VERB,
        if sync { std::ptr::null_mut() } else { lchan },
        context,
        l.ps(),
        l.qp_type(),
    )?;
    let nb = id::id_block(VERB, new)?;
    {
        let mut st = nb.lock();
        let local = if local.is_unspecified() {
            dev.addrs.first().copied().unwrap_or(local)
        } else {
            local
        };
        nb.attach(&mut st, dev, local, VERB)?;
        // SAFETY: under the new id's lock.
        unsafe {
            let c = &mut *nb.c();
            c.route.addr.src = net::to_storage(local, lport);
            c.route.addr.dst = net::to_storage(peer, peer_port);
            c.route.addr.ibaddr.dgid.raw = net::gid_of(peer);
        }
        st.state = State::Connect;
    }
    tables(|t| {
        t.conns.insert((ctx as usize, ev.id), nb.addr());
        t.ids.insert(
            nb.addr(),
            IdCm {
                ctx: ctx as usize,
                conn: Some(ev.id),
                req_rr: ev.responder_resources,
                req_id: ev.initiator_depth,
                ..IdCm::default()
            },
        );
    });
    if let Some(mut attr) = passive {
        // SAFETY: the new id and a copy of the listener's attributes.
        let r = unsafe { crate::qp::rdma_create_qp_impl(new, (*l.c()).pd, &raw mut attr) };
        if r != 0 {
            tracing::warn!(target: "softverbs", "{VERB}: the passive endpoint's QP could not be made for a request");
        }
    }
    let user = &pd[36..];
    let mut p = conn_pending(nb.addr(), RDMA_CM_EVENT_CONNECT_REQUEST, 0, ev, user);
    if sidr {
        // Kernel `cma_req_handler` for a SIDR_REQ: `param.ud`, 216 − 36 bytes.
        p.param.ud = ud_param(Some(peer), ev, user);
    }
    p.listen_id = l.addr();
    post(l, p);
    Ok(())
}

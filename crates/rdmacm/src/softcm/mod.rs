//! [`SoftCm`]: the connection calls over the device's CM, reached through
//! libibverbs' private interface (`softverbs_cm_*` in `SOFTVERBS_PRIVATE_1`,
//! spec/rdmacm-abi.md §5).
//!
//! One CM channel per device context; a thread per channel takes the CM's
//! events and does what the kernel's cma.c and rdma-core's librdmacm do with
//! them: a CONNECT_REQUEST makes a new id (on the listener's channel, its
//! `verbs` the listener's device, its QP made from `rdma_create_ep`'s
//! attributes), a REP drives the id's QP INIT→RTR→RTS and sends the RTU
//! before ESTABLISHED is reported (`ucma_process_conn_resp`), and every event
//! is queued on the id's rdma_cm channel, whose fd becomes readable.

use crate::channel::{self, Pending};
use crate::cm::Cm;
use crate::device;
use crate::ffi::*;
use crate::id::{IdBlock, State};
use crate::util::*;
use crate::verbs::{self, cm as sv};
use std::ffi::{c_int, c_void};
use std::net::IpAddr;

mod pump;
pub(crate) mod state;

use pump::{event_thread, post};
use state::{
    connect_qp, ctx_of, id_cm, qp_of, qp_to_err, tables, RdAtomic, Tables, DISPATCH,
    ON_EVENT_THREAD, TABLES,
};

/// The connection manager of softverbs' devices.
pub(crate) struct SoftCm;

/// The CM channel of `ctx`, made (with its event thread) on first use.
fn channel_for(verb: &str, ctx: *mut ibv_context) -> Result<*mut sv::SoftverbsCmChannel, c_int> {
    let key = ctx as usize;
    let mut g = lock(&TABLES);
    let t = g.get_or_insert_with(Tables::default);
    if let Some(&c) = t.channels.get(&key) {
        return Ok(c as *mut sv::SoftverbsCmChannel);
    }
    let mut ch = std::ptr::null_mut();
    // SAFETY: a valid out-pointer.
    let r = unsafe { sv::softverbs_cm_channel_create(&raw mut ch) };
    if r != 0 {
        return Err(refuse(verb, r, "libibverbs could not make a CM channel"));
    }
    let chan = ch as usize;
    std::thread::Builder::new()
        .name("rdmacm-events".into())
        .spawn(move || event_thread(key, chan))
        .map_err(|e| refuse(verb, libc::EAGAIN, format_args!("the CM event thread: {e}")))?;
    t.channels.insert(key, chan);
    static AT_EXIT: std::sync::Once = std::sync::Once::new();
    // SAFETY: registers a plain extern "C" function.
    AT_EXIT.call_once(|| unsafe {
        libc::atexit(tell_peers_at_exit);
    });
    Ok(ch)
}

/// Makes the CM channels (and event threads) of `dev`, or of every device,
/// when an id is bound, so that a later `rdma_listen` is one quick call: a
/// program may tell its peer the bound port and listen just after (qperf's
/// server does), and the peer's REQ must not find it still setting up, as
/// the kernel's listen is a single system call.
///
/// The bound port is also reserved in each device's CM: a REQ for it that
/// comes before the listen (which a descheduled program may call only
/// after its peer's REQ arrived) is held for the listen, not rejected
/// (spec/cm.md §8). [`SoftCm::destroy`] releases it.
pub(crate) fn prepare(dev: Option<&'static device::Dev>, id: &IdBlock, port: u16) {
    const VERB: &str = "rdma_bind_addr";
    // SAFETY: a plain function of the libibverbs we link to.
    if unsafe { verbs::softverbs_private_version() } != verbs::PRIVATE_VERSION {
        return;
    }
    let ctxs: Vec<*mut ibv_context> = match dev {
        Some(d) => vec![d.ctx],
        None => device::devices(VERB)
            .map(|ds| ds.iter().map(|d| d.ctx).collect())
            .unwrap_or_default(),
    };
    let mut reserved = Vec::new();
    for ctx in ctxs {
        // A failure here shows again, logged, where the channel is needed.
        let _ = channel_for(VERB, ctx);
        // SAFETY: an open context.
        if unsafe { sv::softverbs_cm_reserve(ctx, id.ps(), port) } == 0 {
            reserved.push(ctx as usize);
        }
    }
    tables(|t| t.reserved.insert(id.addr(), (id.ps(), port, reserved)));
}

/// At `exit`, what the kernel does when a process's rdma_cm file closes
/// (ucma.c `ucma_close` destroys every id; cm.c `cm_destroy_id` sends a DREQ
/// for an established connection, a DREP after the peer's DREQ, a REJ for
/// a pending request): the device's CM lives in this process and dies with
/// it, so a program that exits without destroying its ids (a forked qperf
/// server) would otherwise leave its peer waiting for DISCONNECTED.
extern "C" fn tell_peers_at_exit() {
    // A thread inside the CM at exit holds the tables: then do nothing
    // rather than hang the exit.
    let Ok(g) = TABLES.try_lock() else {
        return;
    };
    let conns: Vec<(usize, u32)> = g
        .as_ref()
        .map(|t| t.conns.keys().copied().collect())
        .unwrap_or_default();
    drop(g);
    let mut ctxs: Vec<usize> = Vec::new();
    for (ctx, conn) in conns {
        // SAFETY: contexts stay open for the life of the process.
        unsafe { sv::softverbs_cm_destroy(ctx as *mut ibv_context, conn) };
        if !ctxs.contains(&ctx) {
            ctxs.push(ctx);
        }
    }
    for ctx in ctxs {
        // SAFETY: as above.
        unsafe { sv::softverbs_cm_flush(ctx as *mut ibv_context, 200) };
    }
}

fn random_psn() -> u32 {
    let mut v: u32 = 0;
    // SAFETY: getrandom(2) into a u32.
    let n = unsafe { libc::getrandom((&raw mut v).cast::<c_void>(), 4, libc::GRND_NONBLOCK) };
    if n != 4 {
        v = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
    }
    v & 0x00ff_ffff
}

/// `RDMA_MAX_RESP_RES` / `RDMA_MAX_INIT_DEPTH`: "as many as the device allows".
const RDMA_MAX_RD_ATOMIC: u8 = 0xff;

/// The device's limits as rdma-core's `ucma_init_device` keeps them
/// (`max_qp_rd_atom`, `max_qp_init_rd_atom`, cut to a byte).
fn rd_atomic_limits(verb: &str, ctx: *mut ibv_context) -> Result<RdAtomic, c_int> {
    // SAFETY: all-zero is a valid ibv_device_attr.
    let mut a: crate::ffi::verbs::ibv_device_attr = unsafe { std::mem::zeroed() };
    // SAFETY: an open context and a valid out-pointer.
    if unsafe { verbs::ibv_query_device(ctx, &raw mut a) } != 0 {
        return Err(refuse(verb, libc::EINVAL, "ibv_query_device failed"));
    }
    Ok(RdAtomic {
        responder_resources: a.max_qp_rd_atom as u8,
        initiator_depth: a.max_qp_init_rd_atom as u8,
    })
}

/// What `rdma_connect` (`base`: the device's limits) or `rdma_accept`
/// (`base`: the REQ's values cut to the limits) settles, rdma-core
/// `ucma_valid_param` and `rdma_connect`/`rdma_accept`: 0xff takes `base`;
/// another value above the device's limit is EINVAL in the TCP port space
/// (`checked`; rdma-core checks no other).
fn settle_rd_atomic(
    verb: &str,
    param: Option<&rdma_conn_param>,
    max: RdAtomic,
    base: RdAtomic,
    checked: bool,
) -> Result<RdAtomic, c_int> {
    let Some(p) = param else { return Ok(base) };
    let pick = |asked: u8, limit: u8, base: u8, what: &str| {
        if asked == RDMA_MAX_RD_ATOMIC {
            Ok(base)
        } else if checked && asked > limit {
            Err(refuse(
                verb,
                libc::EINVAL,
                format_args!("conn_param.{what} = {asked} is above the device's limit {limit}"),
            ))
        } else {
            Ok(asked)
        }
    };
    Ok(RdAtomic {
        responder_resources: pick(
            p.responder_resources,
            max.responder_resources,
            base.responder_resources,
            "responder_resources",
        )?,
        initiator_depth: pick(
            p.initiator_depth,
            max.initiator_depth,
            base.initiator_depth,
            "initiator_depth",
        )?,
    })
}

fn bytes<'a>(p: *const c_void, len: u8) -> &'a [u8] {
    if p.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: the caller's buffer of `len` bytes.
        unsafe { std::slice::from_raw_parts(p.cast::<u8>(), usize::from(len)) }
    }
}

impl Cm for SoftCm {
    fn connect(&self, b: &IdBlock, param: Option<&rdma_conn_param>) -> Result<(), c_int> {
        const VERB: &str = "rdma_connect";
        let ctx = ctx_of(b);
        let ch = channel_for(VERB, ctx)?;
        if b.qp_type() == IBV_QPT_UD {
            return self.sidr_connect(b, ctx, ch, param);
        }
        let qp = qp_of(b);
        // SAFETY: the id's fields, owned by the caller.
        let (c, srq) = unsafe { (&*b.c(), !(*b.c()).srq.is_null()) };
        let connect_data = b.lock().connect_data.clone();
        let max = rd_atomic_limits(VERB, ctx)?;
        let rd = settle_rd_atomic(VERB, param, max, max, b.ps() == RDMA_PS_TCP)?;
        let data = match param {
            Some(p) => bytes(p.private_data, p.private_data_len).to_vec(),
            None => connect_data,
        };
        // SAFETY: all-zero is a valid ibv_port_attr.
        let mut pa: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: an open context.
        if unsafe { verbs::ibv_query_port(ctx, c.port_num, &raw mut pa) } != 0 {
            return Err(refuse(
                VERB,
                libc::EINVAL,
                "ibv_query_port failed on the id's port",
            ));
        }
        let p = sv::SoftverbsCmConnect {
            src: c.route.addr.src,
            dst: c.route.addr.dst,
            ps: b.ps(),
            // SAFETY: the id's QP.
            qp_num: if qp.is_null() {
                param.map_or(0, |p| p.qp_num)
            } else {
                unsafe { (*qp).qp_num }
            },
            starting_psn: random_psn(),
            responder_resources: rd.responder_resources,
            initiator_depth: rd.initiator_depth,
            flow_control: param.map_or(1, |p| p.flow_control),
            retry_count: param.map_or(7, |p| p.retry_count.min(7)),
            rnr_retry_count: param.map_or(7, |p| p.rnr_retry_count.min(7)),
            srq: u8::from(srq || param.is_some_and(|p| p.srq != 0)),
            path_mtu: u8::try_from(pa.active_mtu).unwrap_or(1),
            // The CM's transport code (1 UC, 3 XRC: spec/xrc.md §8).
            uc: match b.qp_type() {
                IBV_QPT_UC => 1,
                9 | 10 => 3,
                _ => 0,
            },
            packet_life_time: 18,
            cm_response_timeout: 20,
            max_cm_retries: 15,
            private_data_len: u8::try_from(data.len())
                .map_err(|_| refuse(VERB, libc::EINVAL, "private data longer than 255 bytes"))?,
            private_data: data.as_ptr().cast(),
        };
        let mut conn = 0u32;
        // The answer may come before the id is in the tables: the event
        // thread waits for them.
        let _dispatch = lock(&DISPATCH);
        // SAFETY: an open context, our channel, parameters that live through the call.
        let r = unsafe { sv::softverbs_cm_connect(ctx, ch, &raw const p, &raw mut conn) };
        if r != 0 {
            return Err(refuse(VERB, r, "the CM refused the REQ"));
        }
        tables(|t| {
            t.conns.insert((ctx as usize, conn), b.addr());
            let e = t.ids.entry(b.addr()).or_default();
            e.ctx = ctx as usize;
            e.conn = Some(conn);
        });
        b.lock().state = State::Connect;
        Ok(())
    }

    fn listen(&self, b: &IdBlock, _backlog: c_int) -> Result<(), c_int> {
        const VERB: &str = "rdma_listen";
        let port = b.src().map_or(0, |(_, p)| p);
        let ctx = ctx_of(b);
        let ctxs: Vec<*mut ibv_context> = if ctx.is_null() {
            device::devices(VERB)?.iter().map(|d| d.ctx).collect()
        } else {
            vec![ctx]
        };
        let mut done = Vec::new();
        let _dispatch = lock(&DISPATCH);
        for ctx in ctxs {
            let r = channel_for(VERB, ctx).and_then(|ch| {
                let mut l = 0u64;
                // SAFETY: an open context, our channel, a valid out-pointer.
                match unsafe { sv::softverbs_cm_listen(ctx, ch, b.ps(), port, &raw mut l) } {
                    0 => Ok(l),
                    e => Err(refuse(
                        VERB,
                        e,
                        format_args!("the CM refused to listen on port {port}"),
                    )),
                }
            });
            match r {
                Ok(l) => done.push((ctx as usize, l)),
                Err(e) => {
                    for (c, l) in done {
                        // SAFETY: an open context.
                        unsafe { sv::softverbs_cm_stop_listening(c as *mut ibv_context, l) };
                    }
                    return Err(e);
                }
            }
        }
        tables(|t| {
            for k in &done {
                t.listens.insert(*k, b.addr());
            }
            t.ids.entry(b.addr()).or_default().listens = done;
        });
        Ok(())
    }

    fn accept(&self, b: &IdBlock, param: Option<&rdma_conn_param>) -> Result<(), c_int> {
        const VERB: &str = "rdma_accept";
        let c = id_cm(b)
            .filter(|c| c.conn.is_some())
            .ok_or_else(|| refuse(VERB, libc::EINVAL, "the id is not a connection request"))?;
        let conn = c.conn.unwrap_or(0);
        let ctx = c.ctx as *mut ibv_context;
        if b.qp_type() == IBV_QPT_UD {
            let data = param.map_or(&[][..], |p| bytes(p.private_data, p.private_data_len));
            let qp = qp_of(b);
            // SAFETY: the id's QP.
            let qpn = if qp.is_null() {
                param.map_or(0, |p| p.qp_num)
            } else {
                unsafe { (*qp).qp_num }
            };
            return sidr_reply(VERB, b, ctx, conn, 0, qpn, data);
        }
        let qp = qp_of(b);
        // SAFETY: the id's SRQ field.
        let srq = !unsafe { (*b.c()).srq }.is_null();
        let data = param.map_or(&[][..], |p| bytes(p.private_data, p.private_data_len));
        let max = rd_atomic_limits(VERB, ctx)?;
        let req = RdAtomic {
            responder_resources: c.req_rr.min(max.responder_resources),
            initiator_depth: c.req_id.min(max.initiator_depth),
        };
        let rd = settle_rd_atomic(VERB, param, max, req, b.ps() == RDMA_PS_TCP)?;
        let a = sv::SoftverbsCmAccept {
            // SAFETY: the id's QP.
            qp_num: if qp.is_null() {
                param.map_or(0, |p| p.qp_num)
            } else {
                unsafe { (*qp).qp_num }
            },
            starting_psn: random_psn(),
            responder_resources: rd.responder_resources,
            initiator_depth: rd.initiator_depth,
            flow_control: param.map_or(1, |p| p.flow_control),
            rnr_retry_count: param.map_or(7, |p| p.rnr_retry_count.min(7)),
            srq: u8::from(srq || param.is_some_and(|p| p.srq != 0)),
            private_data_len: data.len() as u8,
            private_data: data.as_ptr().cast(),
        };
        // Kernel order (`rdma_accept` → `ucma_modify_qp_rtr`/`_rts`): the QP
        // is in RTS, its RQ PSN the one the REP announces, before the REP goes.
        if !qp.is_null() {
            connect_qp(VERB, ctx, conn, qp, Some(a.starting_psn), Some(rd))?;
        }
        // SAFETY: an open context, parameters that live through the call.
        let r = unsafe { sv::softverbs_cm_accept(ctx, conn, &raw const a) };
        if r != 0 {
            return Err(refuse(VERB, r, "the CM refused the REP"));
        }
        Ok(())
    }

    fn reject(&self, b: &IdBlock, private_data: &[u8]) -> Result<(), c_int> {
        const VERB: &str = "rdma_reject";
        let c = id_cm(b)
            .filter(|c| c.conn.is_some())
            .ok_or_else(|| refuse(VERB, libc::EINVAL, "the id is not a connection request"))?;
        if b.qp_type() == IBV_QPT_UD {
            // SIDR_REP status 2 (rejected), kernel `rdma_reject` for UD.
            return sidr_reply(
                VERB,
                b,
                c.ctx as *mut ibv_context,
                c.conn.unwrap_or(0),
                2,
                0,
                private_data,
            );
        }
        let len = u8::try_from(private_data.len()).unwrap_or(u8::MAX);
        // SAFETY: an open context and the caller's bytes.
        match unsafe {
            sv::softverbs_cm_reject(
                c.ctx as *mut ibv_context,
                c.conn.unwrap_or(0),
                private_data.as_ptr().cast(),
                len,
            )
        } {
            0 => Ok(()),
            e => Err(refuse(VERB, e, "the CM refused the REJ")),
        }
    }

    fn disconnect(&self, b: &IdBlock) -> Result<(), c_int> {
        const VERB: &str = "rdma_disconnect";
        let c = id_cm(b)
            .filter(|c| c.conn.is_some())
            .ok_or_else(|| refuse(VERB, libc::EINVAL, "the id has no connection"))?;
        qp_to_err(b);
        // Kernel `rdma_disconnect`: a DREQ, else a DREP; when neither is due
        // (the peer's DREQ was answered already: TimeWait) the call still
        // succeeds.
        // SAFETY: an open context.
        let r =
            unsafe { sv::softverbs_cm_disconnect(c.ctx as *mut ibv_context, c.conn.unwrap_or(0)) };
        if r != 0 {
            tracing::debug!(target: "softverbs", "{VERB}: neither DREQ nor DREP was due (the connection is down already)");
        }
        Ok(())
    }

    fn notify(&self, b: &IdBlock, event: c_int) -> Result<(), c_int> {
        const IBV_EVENT_COMM_EST: c_int = 4;
        if event != IBV_EVENT_COMM_EST {
            // Kernel `ib_cm_notify`: other events are accepted and ignored here.
            return Ok(());
        }
        self.establish_passive(b)
    }

    fn establish(&self, b: &IdBlock) -> Result<(), c_int> {
        const VERB: &str = "rdma_establish";
        if !qp_of(b).is_null() {
            return Err(refuse(
                VERB,
                libc::EINVAL,
                "the id has a QP: librdmacm completes its connection itself",
            ));
        }
        let c = id_cm(b)
            .filter(|c| c.conn.is_some())
            .ok_or_else(|| refuse(VERB, libc::EINVAL, "the id has no connection"))?;
        // SAFETY: an open context.
        match unsafe {
            sv::softverbs_cm_ready_to_use(c.ctx as *mut ibv_context, c.conn.unwrap_or(0))
        } {
            0 => {
                let first = tables(|t| {
                    t.ids
                        .get_mut(&b.addr())
                        .is_some_and(|c| !std::mem::replace(&mut c.established, true))
                });
                if first {
                    post(b, Pending::new(b.addr(), RDMA_CM_EVENT_ESTABLISHED, 0));
                }
                Ok(())
            }
            e => Err(refuse(VERB, e, "the CM refused the RTU")),
        }
    }

    fn multicast(
        &self,
        b: &IdBlock,
        group: IpAddr,
        join: bool,
        context: *mut c_void,
    ) -> Result<(), c_int> {
        if join {
            crate::mcast::join("rdma_join_multicast", b, group, context)
        } else {
            crate::mcast::leave("rdma_leave_multicast", b, group)
        }
    }

    fn destroy(&self, b: &IdBlock) {
        crate::mcast::forget(b);
        if let Some((ps, port, ctxs)) = tables(|t| t.reserved.remove(&b.addr())) {
            for ctx in ctxs {
                // SAFETY: an open context.
                unsafe { sv::softverbs_cm_release(ctx as *mut ibv_context, ps, port) };
            }
        }
        let Some(c) = tables(|t| {
            let c = t.ids.remove(&b.addr())?;
            if let Some(conn) = c.conn {
                t.conns.remove(&(c.ctx, conn));
            }
            for k in &c.listens {
                t.listens.remove(k);
            }
            Some(c)
        }) else {
            return;
        };
        // SAFETY: open contexts.
        unsafe {
            if let Some(conn) = c.conn {
                sv::softverbs_cm_destroy(c.ctx as *mut ibv_context, conn);
                // The device's CM ends with the process, which may exit right
                // after this: the DREP/REJ/DREQ just queued must leave first.
                sv::softverbs_cm_flush(c.ctx as *mut ibv_context, 200);
            }
            for (ctx, l) in c.listens {
                sv::softverbs_cm_stop_listening(ctx as *mut ibv_context, l);
            }
        }
        if !ON_EVENT_THREAD.with(std::cell::Cell::get) {
            // Waits for an event being handled with this id to be done.
            drop(lock(&DISPATCH));
        }
    }
}

/// Sends the SIDR_REP and forgets the request (the CM does too).
fn sidr_reply(
    verb: &str,
    b: &IdBlock,
    ctx: *mut ibv_context,
    conn: u32,
    status: u8,
    qpn: u32,
    data: &[u8],
) -> Result<(), c_int> {
    let len = u8::try_from(data.len()).unwrap_or(u8::MAX);
    // SAFETY: an open context and the caller's bytes.
    let r = unsafe {
        sv::softverbs_cm_sidr_reply(
            ctx,
            conn,
            status,
            qpn,
            RDMA_UDP_QKEY,
            data.as_ptr().cast(),
            len,
        )
    };
    if r != 0 {
        return Err(refuse(verb, r, "the CM refused the SIDR_REP"));
    }
    tables(|t| {
        t.conns.remove(&(ctx as usize, conn));
        if let Some(c) = t.ids.get_mut(&b.addr()) {
            c.conn = None;
        }
    });
    Ok(())
}

impl SoftCm {
    /// `rdma_connect` on a UD id: a SIDR_REQ (kernel `cma_resolve_ib_udp`).
    fn sidr_connect(
        &self,
        b: &IdBlock,
        ctx: *mut ibv_context,
        ch: *mut sv::SoftverbsCmChannel,
        param: Option<&rdma_conn_param>,
    ) -> Result<(), c_int> {
        const VERB: &str = "rdma_connect";
        let connect_data = b.lock().connect_data.clone();
        let data = match param {
            Some(p) => bytes(p.private_data, p.private_data_len).to_vec(),
            None => connect_data,
        };
        // SAFETY: the id's addresses, owned by the caller.
        let (src, dst) = unsafe { ((*b.c()).route.addr.src, (*b.c()).route.addr.dst) };
        let mut conn = 0u32;
        let _dispatch = lock(&DISPATCH);
        // SAFETY: an open context, our channel, addresses and bytes that live through the call.
        let r = unsafe {
            sv::softverbs_cm_sidr_request(
                ctx,
                ch,
                &raw const src,
                &raw const dst,
                b.ps(),
                data.as_ptr().cast(),
                u8::try_from(data.len()).unwrap_or(u8::MAX),
                &raw mut conn,
            )
        };
        if r != 0 {
            return Err(refuse(VERB, r, "the CM refused the SIDR_REQ"));
        }
        tables(|t| {
            t.conns.insert((ctx as usize, conn), b.addr());
            let e = t.ids.entry(b.addr()).or_default();
            e.ctx = ctx as usize;
            e.conn = Some(conn);
        });
        b.lock().state = State::Connect;
        Ok(())
    }

    /// `rdma_notify(IBV_EVENT_COMM_EST)`: the passive side is up (first data before the RTU).
    fn establish_passive(&self, b: &IdBlock) -> Result<(), c_int> {
        const VERB: &str = "rdma_notify";
        let c = id_cm(b)
            .filter(|c| c.conn.is_some())
            .ok_or_else(|| refuse(VERB, libc::EINVAL, "the id has no connection"))?;
        // SAFETY: an open context.
        match unsafe { sv::softverbs_cm_establish(c.ctx as *mut ibv_context, c.conn.unwrap_or(0)) }
        {
            0 => Ok(()),
            e => Err(refuse(VERB, e, "the CM refused COMM_EST")),
        }
    }
}

/// `rdma_get_request`'s body (rdma-core): the next event of a synchronous
/// listener must be a CONNECT_REQUEST; its id keeps the event.
pub(crate) fn get_request(verb: &str, l: &IdBlock) -> Result<*mut rdma_cm_id, c_int> {
    let ch = l.lock().channel.clone();
    let ev = channel::get_event(&ch)?;
    // SAFETY: a delivered event.
    let (kind, status, id) = unsafe { ((*ev).event, (*ev).status, (*ev).id) };
    if status != 0 || kind != RDMA_CM_EVENT_CONNECT_REQUEST {
        let _ = channel::ack_event(verb, ev);
        return Err(refuse(
            verb,
            if status != 0 {
                status.abs()
            } else {
                libc::EINVAL
            },
            format_args!(
                "the listener's next event is {kind}, status {status}, not a connection request"
            ),
        ));
    }
    // SAFETY: the new id, owned by the caller now.
    unsafe { (*id).event = ev };
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::pump::cma_addrs;
    use std::net::IpAddr;

    fn header(ipv: u8, port: u16, src: [u8; 16], dst: [u8; 16]) -> Vec<u8> {
        let mut h = vec![0u8; 36];
        h[0] = 0x00;
        h[1] = ipv << 4;
        h[2..4].copy_from_slice(&port.to_be_bytes());
        h[4..20].copy_from_slice(&src);
        h[20..36].copy_from_slice(&dst);
        h
    }

    #[test]
    fn cma_header_ipv4_addresses_sit_in_the_last_four_bytes() {
        let mut s = [0u8; 16];
        s[12..].copy_from_slice(&[127, 0, 9, 2]);
        let mut d = [0u8; 16];
        d[12..].copy_from_slice(&[127, 0, 9, 1]);
        let h = header(4, 40001, s, d);
        assert_eq!(
            cma_addrs(&h),
            Some((
                IpAddr::from([127, 0, 9, 2]),
                40001,
                IpAddr::from([127, 0, 9, 1])
            ))
        );
    }

    #[test]
    fn cma_header_ipv6_and_bad_headers() {
        let s = std::net::Ipv6Addr::LOCALHOST.octets();
        let h = header(6, 7, s, s);
        assert_eq!(cma_addrs(&h), Some((IpAddr::from(s), 7, IpAddr::from(s))));
        assert_eq!(cma_addrs(&h[..35]), None, "shorter than the header");
        assert_eq!(cma_addrs(&header(5, 7, s, s)), None, "IP version 5");
    }
}

//! What the CM knows of ids and connections (its tables), and the moves of
//! an id's QP with the CM's attributes: what both the connection calls
//! (softcm/mod.rs) and the event pump (pump.rs) use, and what QPs
//! (crate::qp) ask of the CM. It knows ids and the public verbs, nothing
//! that makes ids or QPs.

use crate::ffi::*;
use crate::id::IdBlock;
use crate::util::*;
use crate::verbs::{self, cm as sv};
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::Mutex;

const IBV_QPS_INIT: u32 = 1;
const IBV_QPS_RTR: u32 = 2;
const IBV_QPS_RTS: u32 = 3;
const IBV_QPS_ERR: u32 = 6;
const IBV_QP_STATE: c_int = 1;

/// What the CM knows of one rdma_cm id.
#[derive(Debug, Default, Clone)]
pub(super) struct IdCm {
    /// The device context of its connection.
    pub(super) ctx: usize,
    pub(super) conn: Option<u32>,
    /// (context, listen handle) per device listened on.
    pub(super) listens: Vec<(usize, u64)>,
    /// The REQ's responder resources / initiator depth (passive side).
    pub(super) req_rr: u8,
    pub(super) req_id: u8,
    pub(super) established: bool,
    pub(super) disconnected: bool,
}

#[derive(Default)]
pub(super) struct Tables {
    /// (context, connection) -> id address.
    pub(super) conns: HashMap<(usize, u32), usize>,
    /// (context, listen handle) -> listening id address.
    pub(super) listens: HashMap<(usize, u64), usize>,
    pub(super) ids: HashMap<usize, IdCm>,
    /// context -> CM channel.
    pub(super) channels: HashMap<usize, usize>,
    /// id address -> (port space, port, contexts) of its binding, reserved
    /// in those devices' CMs (`softverbs_cm_reserve`) until it is destroyed.
    pub(super) reserved: HashMap<usize, (u32, u16, Vec<usize>)>,
}

pub(super) static TABLES: Mutex<Option<Tables>> = Mutex::new(None);
/// Held while the event thread handles an event, so that `rdma_destroy_id`
/// never frees an id the thread is using.
pub(super) static DISPATCH: Mutex<()> = Mutex::new(());

thread_local! {
    pub(super) static ON_EVENT_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

pub(super) fn tables<R>(f: impl FnOnce(&mut Tables) -> R) -> R {
    f(lock(&TABLES).get_or_insert_with(Tables::default))
}

pub(super) fn id_cm(b: &IdBlock) -> Option<IdCm> {
    tables(|t| t.ids.get(&b.addr()).cloned())
}

pub(super) fn ctx_of(b: &IdBlock) -> *mut ibv_context {
    // SAFETY: `verbs` is set once when the id gets its device.
    unsafe { (*b.c()).verbs }
}

pub(super) fn qp_of(b: &IdBlock) -> *mut ibv_qp {
    // SAFETY: the id's own field.
    unsafe { (*b.c()).qp }
}

/// Moves the id's QP to `state` with the CM's attributes for it (rdma-core
/// `ucma_modify_qp_rtr`/`_rts`: INIT again first, then RTR, then RTS).
/// `rd`: the passive side's (responder resources, initiator depth) as
/// `rdma_accept` settled them, which replace the REQ's in RTR and RTS.
fn modify_qp(
    verb: &str,
    ctx: *mut ibv_context,
    conn: u32,
    qp: *mut ibv_qp,
    state: u32,
    rq_psn: Option<u32>,
    rd: Option<RdAtomic>,
) -> Result<(), c_int> {
    // SAFETY: all-zero is a valid ibv_qp_attr.
    let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
    let mut mask: c_int = 0;
    // SAFETY: an open context and valid out-pointers.
    let r = unsafe { sv::softverbs_cm_qp_attr(ctx, conn, state, &raw mut attr, &raw mut mask) };
    if r != 0 {
        return Err(refuse(
            verb,
            r,
            format_args!("the CM has no attributes for QP state {state}"),
        ));
    }
    if let Some(psn) = rq_psn.filter(|_| state == IBV_QPS_RTR) {
        attr.rq_psn = psn;
    }
    // rdma-core `ucma_modify_qp_rtr(id, resp_res)` / `ucma_modify_qp_rts(id, init_depth)`.
    match (rd, state) {
        (Some(rd), IBV_QPS_RTR) => attr.max_dest_rd_atomic = rd.responder_resources,
        (Some(rd), IBV_QPS_RTS) => attr.max_rd_atomic = rd.initiator_depth,
        _ => {}
    }
    // SAFETY: the id's QP.
    match unsafe { verbs::ibv_modify_qp(qp, &raw mut attr, mask) } {
        0 => Ok(()),
        e => Err(refuse(
            verb,
            e,
            format_args!("ibv_modify_qp to state {state} with the CM's attributes failed"),
        )),
    }
}

/// INIT (again), RTR, RTS with the CM's attributes; `rq_psn`: the passive
/// side's own starting PSN, chosen before the REP that announces it.
pub(super) fn connect_qp(
    verb: &str,
    ctx: *mut ibv_context,
    conn: u32,
    qp: *mut ibv_qp,
    rq_psn: Option<u32>,
    rd: Option<RdAtomic>,
) -> Result<(), c_int> {
    for s in [IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS] {
        modify_qp(verb, ctx, conn, qp, s, rq_psn, rd)?;
    }
    Ok(())
}

/// Responder resources and initiator depth of a connection, from this side.
#[derive(Debug, Clone, Copy)]
pub(super) struct RdAtomic {
    pub(super) responder_resources: u8,
    pub(super) initiator_depth: u8,
}

/// Moves the id's QP (if it still has one) to ERR, under the id's lock so
/// that a concurrent `rdma_destroy_qp` never frees it meanwhile.
pub(super) fn qp_to_err(b: &IdBlock) {
    let _st = b.lock();
    let qp = qp_of(b);
    if qp.is_null() {
        return;
    }
    // SAFETY: all-zero is a valid ibv_qp_attr.
    let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
    attr.qp_state = IBV_QPS_ERR;
    // SAFETY: the id's QP.
    unsafe { verbs::ibv_modify_qp(qp, &raw mut attr, IBV_QP_STATE) };
}

/// The QP attributes of the id's connection for `attr.qp_state`
/// (`rdma_init_qp_attr`, and a QP made on a connected id), or `None` when the
/// id has no connection (always, without the CM), or is UD.
pub(crate) fn qp_attr(b: &IdBlock, attr: &mut ibv_qp_attr) -> Option<Result<c_int, c_int>> {
    const VERB: &str = "rdma_init_qp_attr";
    let c = id_cm(b)?;
    let conn = c.conn?;
    if b.qp_type() == IBV_QPT_UD {
        return None;
    }
    let mut mask: c_int = 0;
    // SAFETY: an open context and valid out-pointers.
    let r = unsafe {
        sv::softverbs_cm_qp_attr(
            c.ctx as *mut ibv_context,
            conn,
            attr.qp_state,
            attr,
            &raw mut mask,
        )
    };
    Some(if r == 0 {
        Ok(mask)
    } else {
        Err(refuse(
            VERB,
            r,
            "the CM has no QP attributes for that state",
        ))
    })
}

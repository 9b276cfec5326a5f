//! QPs and SRQs on ids: `rdma_create_qp(_ex)`, `rdma_destroy_qp`,
//! `rdma_init_qp_attr`, `rdma_create_srq(_ex)`, `rdma_destroy_srq`
//! (spec/rdmacm-abi.md §3.6), all through the public verbs.

use crate::ffi::*;
use crate::id::{id_block, IdBlock};
use crate::util::*;
use crate::verbs::{self, *};
use std::ffi::{c_int, c_void};

const IBV_QPS_INIT: u32 = 1;
const IBV_QPS_RTR: u32 = 2;
const IBV_QPS_RTS: u32 = 3;
const IBV_QP_STATE: c_int = 1;
const IBV_QP_ACCESS_FLAGS: c_int = 1 << 3;
const IBV_QP_PKEY_INDEX: c_int = 1 << 4;
const IBV_QP_PORT: c_int = 1 << 5;
const IBV_QP_QKEY: c_int = 1 << 6;
const IBV_QP_SQ_PSN: c_int = 1 << 16;

fn is_ud(qp_type: u32) -> bool {
    qp_type == IBV_QPT_UD
}

/// The INIT attributes of the id's QP (kernel `cma_ib_init_qp_attr`): P_Key
/// index of 0xffff, port, and the Q_Key (UD) or no remote access (connected).
fn init_attrs(verb: &str, b: &IdBlock, attr: &mut ibv_qp_attr) -> Result<c_int, c_int> {
    // SAFETY: the caller owns the id.
    let (verbs_ctx, port) = unsafe { ((*b.c()).verbs, (*b.c()).port_num) };
    if verbs_ctx.is_null() {
        return Err(refuse(
            verb,
            libc::EINVAL,
            "the id has no device yet: bind it to an address or resolve one first",
        ));
    }
    // SAFETY: an open context.
    let index = unsafe { verbs::ibv_get_pkey_index(verbs_ctx, port, 0xffff_u16.to_be()) };
    if index < 0 {
        return Err(refuse(verb, libc::EINVAL, "the device has no P_Key 0xffff"));
    }
    attr.pkey_index = index as u16;
    attr.port_num = port;
    let mut mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    if is_ud(b.qp_type()) {
        attr.qkey = match b.ps() {
            RDMA_PS_UDP | RDMA_PS_IB => RDMA_UDP_QKEY,
            _ => {
                return Err(refuse(verb, libc::ENOENT, "RDMA_PS_IPOIB takes the Q_Key of the IPoIB broadcast group from an SA, which RoCE has not"))
            }
        };
        mask |= IBV_QP_QKEY;
    } else {
        attr.qp_access_flags = 0;
        mask |= IBV_QP_ACCESS_FLAGS;
    }
    Ok(mask)
}

/// `rdma_init_qp_attr`'s body: the CM's answer for a connection (its tables,
/// `softcm::state`), else the INIT attributes with the state asked (kernel
/// `rdma_init_qp_attr`).
fn init_qp_attr(verb: &str, b: &IdBlock, attr: &mut ibv_qp_attr) -> Result<c_int, c_int> {
    if let Some(r) = crate::softcm::state::qp_attr(b, attr) {
        return r;
    }
    let state = attr.qp_state;
    let mask = init_attrs(verb, b, attr)?;
    attr.qp_state = state;
    Ok(mask)
}

/// Makes the id's CQs that are missing, each with its own completion channel
/// (rdma-core `ucma_create_cqs`: receive first).
fn create_cqs(verb: &str, c: &mut rdma_cm_id, send: u32, recv: u32) -> Result<(), c_int> {
    let (ctx, me) = (
        c.verbs,
        std::ptr::from_mut::<rdma_cm_id>(c).cast::<c_void>(),
    );
    let make = |size: u32| -> Result<(*mut ibv_comp_channel, *mut ibv_cq), c_int> {
        // SAFETY: an open context.
        let ch = unsafe { verbs::ibv_create_comp_channel(ctx) };
        if ch.is_null() {
            return Err(refuse(verb, libc::ENOMEM, "ibv_create_comp_channel failed"));
        }
        // SAFETY: as above; the CQ context is the id, as rdma-core passes it.
        let cq = unsafe { verbs::ibv_create_cq(ctx, size as c_int, me, ch, 0) };
        if cq.is_null() {
            // SAFETY: the channel just made.
            unsafe { verbs::ibv_destroy_comp_channel(ch) };
            return Err(refuse(
                verb,
                libc::ENOMEM,
                format_args!("ibv_create_cq({size}) failed"),
            ));
        }
        Ok((ch, cq))
    };
    if recv != 0 {
        (c.recv_cq_channel, c.recv_cq) = make(recv)?;
    }
    if send != 0 {
        (c.send_cq_channel, c.send_cq) = make(send)?;
    }
    Ok(())
}

/// Destroys the CQs and channels the id made (rdma-core `ucma_destroy_cqs`),
/// except while an XRC_RECV id's XRC SRQ completes on them: they go with it.
fn destroy_cqs(c: &mut rdma_cm_id) {
    if c.qp_type == IBV_QPT_XRC_RECV && !c.srq.is_null() {
        return;
    }
    // SAFETY: objects this library made on the id, destroyed once.
    unsafe {
        if !c.recv_cq.is_null() {
            verbs::ibv_destroy_cq(c.recv_cq);
            if !c.send_cq.is_null() && c.send_cq != c.recv_cq {
                verbs::ibv_destroy_cq(c.send_cq);
            }
        } else if !c.send_cq.is_null() {
            verbs::ibv_destroy_cq(c.send_cq);
        }
        if !c.recv_cq_channel.is_null() {
            verbs::ibv_destroy_comp_channel(c.recv_cq_channel);
        }
        if !c.send_cq_channel.is_null() && c.send_cq_channel != c.recv_cq_channel {
            verbs::ibv_destroy_comp_channel(c.send_cq_channel);
        }
    }
    c.recv_cq = std::ptr::null_mut();
    c.send_cq = std::ptr::null_mut();
    c.recv_cq_channel = std::ptr::null_mut();
    c.send_cq_channel = std::ptr::null_mut();
}

/// Moves a new QP to INIT (connected) or RTS (UD) as rdma-core does.
fn init_qp(verb: &str, b: &IdBlock, qp: *mut ibv_qp) -> Result<(), c_int> {
    // SAFETY: all-zero is a valid ibv_qp_attr.
    let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
    attr.qp_state = IBV_QPS_INIT;
    let mask = init_qp_attr(verb, b, &mut attr)?;
    let modify = |attr: &mut ibv_qp_attr, mask: c_int, to: &str| {
        // SAFETY: a QP we just created.
        match unsafe { verbs::ibv_modify_qp(qp, attr, mask) } {
            0 => Ok(()),
            e => Err(refuse(
                verb,
                e,
                format_args!("ibv_modify_qp to {to} failed"),
            )),
        }
    };
    modify(&mut attr, mask, "INIT")?;
    if is_ud(b.qp_type()) {
        attr.qp_state = IBV_QPS_RTR;
        modify(&mut attr, IBV_QP_STATE, "RTR")?;
        attr.qp_state = IBV_QPS_RTS;
        attr.sq_psn = 0;
        modify(&mut attr, IBV_QP_STATE | IBV_QP_SQ_PSN, "RTS")?;
    }
    Ok(())
}

/// `IBV_QPT_XRC_RECV`, `IBV_QP_INIT_ATTR_XRCD`.
const IBV_QPT_XRC_RECV: u32 = 10;
const IBV_QP_INIT_ATTR_XRCD: u32 = 1 << 1;

/// The XRC domain of a device's XRC targets and XRC SRQs, opened (without a
/// file) on first use and kept while the process runs (rdma-core
/// `ucma_get_xrcd`: one per device, fd -1, `O_CREAT`; spec/xrc.md §8).
fn xrcd_of(verb: &str, ctx: *mut ibv_context) -> Result<*mut c_void, c_int> {
    static XRCDS: std::sync::Mutex<Vec<(usize, usize)>> = std::sync::Mutex::new(Vec::new());
    let mut t = XRCDS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(&(_, x)) = t.iter().find(|(c, _)| *c == ctx as usize) {
        return Ok(x as *mut c_void);
    }
    let mut a = crate::ffi::verbs::ibv_xrcd_init_attr {
        comp_mask: 3,
        fd: -1,
        oflags: libc::O_CREAT,
    };
    // SAFETY: an open context and our attributes.
    let x = unsafe { verbs::ibv_open_xrcd(ctx, &raw mut a) };
    if x.is_null() {
        return Err(refuse(verb, errno(), "ibv_open_xrcd failed"));
    }
    t.push((ctx as usize, x as usize));
    Ok(x.cast())
}

/// `rdma_create_qp_ex`'s body.
fn create_qp_ex(verb: &str, b: &IdBlock, attr: &mut ibv_qp_init_attr_ex) -> Result<(), c_int> {
    let _st = b.lock();
    // SAFETY: under the id's lock.
    let c = unsafe { &mut *b.c() };
    if !c.qp.is_null() {
        return Err(refuse(verb, libc::EINVAL, "the id has a QP already"));
    }
    if c.verbs.is_null() {
        return Err(refuse(
            verb,
            libc::EINVAL,
            "the id has no device yet: bind it to an address or resolve one first",
        ));
    }
    if attr.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || attr.pd.is_null() {
        attr.comp_mask |= IBV_QP_INIT_ATTR_PD;
        attr.pd = c.pd;
    // SAFETY: a PD pointer from the caller.
    } else if unsafe { (*attr.pd).context } != c.verbs {
        return Err(refuse(
            verb,
            libc::EINVAL,
            "the PD belongs to another device than the id",
        ));
    }
    if (!c.recv_cq.is_null() && !attr.recv_cq.is_null() && c.recv_cq != attr.recv_cq)
        || (!c.send_cq.is_null() && !attr.send_cq.is_null() && c.send_cq != attr.send_cq)
    {
        return Err(refuse(
            verb,
            libc::EINVAL,
            "the id has CQs already and the attributes name others",
        ));
    }
    let send = if attr.send_cq.is_null() && c.send_cq.is_null() {
        attr.cap.max_send_wr
    } else {
        0
    };
    let recv = if attr.recv_cq.is_null() && c.recv_cq.is_null() {
        attr.cap.max_recv_wr
    } else {
        0
    };
    if let Err(e) = create_cqs(verb, c, send, recv) {
        destroy_cqs(c);
        return Err(e);
    }
    if attr.send_cq.is_null() {
        attr.send_cq = c.send_cq;
    }
    if attr.recv_cq.is_null() {
        attr.recv_cq = c.recv_cq;
    }
    if !c.srq.is_null() && attr.srq.is_null() {
        attr.srq = c.srq;
    }
    if attr.qp_type == IBV_QPT_XRC_RECV
        && (attr.comp_mask & IBV_QP_INIT_ATTR_XRCD == 0 || attr.xrcd.is_null())
    {
        attr.xrcd = xrcd_of(verb, c.verbs)?;
        attr.comp_mask |= IBV_QP_INIT_ATTR_XRCD;
    }
    // SAFETY: an open context and the caller's attributes.
    let qp = unsafe { verbs::ibv_create_qp_ex(c.verbs, attr) };
    if qp.is_null() {
        let e = errno();
        destroy_cqs(c);
        return Err(refuse(
            verb,
            if e == 0 { libc::ENOMEM } else { e },
            "ibv_create_qp failed (libibverbs logged why)",
        ));
    }
    if let Err(e) = init_qp(verb, b, qp) {
        // SAFETY: the QP just made.
        unsafe { verbs::ibv_destroy_qp(qp) };
        destroy_cqs(c);
        return Err(e);
    }
    // SAFETY: a live QP (an XRC_RECV QP has no PD: the id keeps its own).
    let qp_pd = unsafe { (*qp).pd };
    if !qp_pd.is_null() {
        c.pd = qp_pd;
    }
    c.qp = qp;
    Ok(())
}

/// `int rdma_create_qp_ex(struct rdma_cm_id *, struct ibv_qp_init_attr_ex *)`.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_init_attr_ex,
) -> c_int {
    const VERB: &str = "rdma_create_qp_ex";
    let r = id_block(VERB, id).and_then(|b| {
        if attr.is_null() {
            return Err(refuse(VERB, libc::EINVAL, "qp_init_attr is NULL"));
        }
        // SAFETY: non-NULL attributes from the caller.
        create_qp_ex(VERB, b, unsafe { &mut *attr })
    });
    ret(r)
}

/// `int rdma_create_qp(struct rdma_cm_id *, struct ibv_pd *, struct ibv_qp_init_attr *)`.
/// The body of `rdma_create_qp`, for this library's own callers (an export is
/// never called across modules: its `.symver` must sit with its definition).
pub(crate) unsafe fn rdma_create_qp_impl(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    const VERB: &str = "rdma_create_qp";
    let r = id_block(VERB, id).and_then(|b| {
        if attr.is_null() {
            return Err(refuse(VERB, libc::EINVAL, "qp_init_attr is NULL"));
        }
        // SAFETY: all-zero is a valid ibv_qp_init_attr_ex; the first part is
        // the caller's ibv_qp_init_attr (same layout, rdma-core copies it too).
        let mut ex: ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
        let n = std::mem::size_of::<ibv_qp_init_attr>();
        // SAFETY: both buffers hold at least `n` bytes.
        unsafe { std::ptr::copy_nonoverlapping(attr as *const u8, (&raw mut ex).cast::<u8>(), n) };
        ex.comp_mask = IBV_QP_INIT_ATTR_PD;
        // SAFETY: the caller owns the id.
        ex.pd = if pd.is_null() {
            unsafe { (*b.c()).pd }
        } else {
            pd
        };
        let r = create_qp_ex(VERB, b, &mut ex);
        // SAFETY: as above, back into the caller's struct.
        unsafe {
            std::ptr::copy_nonoverlapping((&raw const ex).cast::<u8>(), attr.cast::<u8>(), n)
        };
        r
    });
    ret(r)
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    unsafe { rdma_create_qp_impl(id, pd, attr) }
}

/// `void rdma_destroy_qp(struct rdma_cm_id *id)`.
/// The body of `rdma_destroy_qp`, for this library's own callers (an export is
/// never called across modules: its `.symver` must sit with its definition).
pub(crate) unsafe fn rdma_destroy_qp_impl(id: *mut rdma_cm_id) {
    let Ok(b) = id_block("rdma_destroy_qp", id) else {
        return;
    };
    let _st = b.lock();
    // SAFETY: under the id's lock.
    let c = unsafe { &mut *b.c() };
    let qp = std::mem::replace(&mut c.qp, std::ptr::null_mut());
    if !qp.is_null() {
        // SAFETY: the id's QP (no longer reachable through the id), destroyed once.
        unsafe { verbs::ibv_destroy_qp(qp) };
    }
    destroy_cqs(c);
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    // SAFETY: the caller's arguments, passed on.
    unsafe { rdma_destroy_qp_impl(id) }
}

/// `int rdma_init_qp_attr(struct rdma_cm_id *, struct ibv_qp_attr *, int *qp_attr_mask)`.
#[no_mangle]
pub unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    qp_attr: *mut ibv_qp_attr,
    qp_attr_mask: *mut c_int,
) -> c_int {
    const VERB: &str = "rdma_init_qp_attr";
    let r = id_block(VERB, id).and_then(|b| {
        if qp_attr.is_null() || qp_attr_mask.is_null() {
            return Err(refuse(
                VERB,
                libc::EINVAL,
                "qp_attr or qp_attr_mask is NULL",
            ));
        }
        // SAFETY: non-NULL out-structs from the caller.
        let mask = init_qp_attr(VERB, b, unsafe { &mut *qp_attr })?;
        // SAFETY: as above.
        unsafe { *qp_attr_mask = mask };
        Ok(())
    });
    ret(r)
}

const IBV_SRQ_INIT_ATTR_XRCD: u32 = 1 << 2;
const IBV_SRQ_INIT_ATTR_CQ: u32 = 1 << 3;
const IBV_SRQT_XRC: u32 = 1;

/// `int rdma_create_srq_ex(struct rdma_cm_id *, struct ibv_srq_init_attr_ex *)`.
/// The body of `rdma_create_srq_ex`, for this library's own callers (an export is
/// never called across modules: its `.symver` must sit with its definition).
pub(crate) unsafe fn rdma_create_srq_ex_impl(
    id: *mut rdma_cm_id,
    attr: *mut ibv_srq_init_attr_ex,
) -> c_int {
    const VERB: &str = "rdma_create_srq_ex";
    let r = id_block(VERB, id).and_then(|b| {
        if attr.is_null() {
            return Err(refuse(VERB, libc::EINVAL, "srq_init_attr is NULL"));
        }
        // SAFETY: non-NULL attributes from the caller.
        let attr = unsafe { &mut *attr };
        if attr.comp_mask & IBV_SRQ_INIT_ATTR_TYPE == 0 {
            return Err(refuse(
                VERB,
                libc::EINVAL,
                "comp_mask lacks IBV_SRQ_INIT_ATTR_TYPE",
            ));
        }
        let _st = b.lock();
        // SAFETY: under the id's lock.
        let c = unsafe { &mut *b.c() };
        if c.verbs.is_null() {
            return Err(refuse(
                VERB,
                libc::EINVAL,
                "the id has no device yet: bind it to an address or resolve one first",
            ));
        }
        if attr.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 || attr.pd.is_null() {
            attr.pd = c.pd;
            attr.comp_mask |= IBV_SRQ_INIT_ATTR_PD;
        }
        if attr.srq_type == IBV_SRQT_XRC {
            // rdma-core: the device's XRC domain and the id's receive CQ.
            if attr.comp_mask & IBV_SRQ_INIT_ATTR_XRCD == 0 || attr.xrcd.is_null() {
                attr.xrcd = xrcd_of(VERB, c.verbs)?;
            }
            if attr.comp_mask & IBV_SRQ_INIT_ATTR_CQ == 0 || attr.cq.is_null() {
                if c.recv_cq.is_null() {
                    create_cqs(VERB, c, 0, attr.attr.max_wr)?;
                }
                attr.cq = c.recv_cq;
            }
            attr.comp_mask |= IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
        }
        // SAFETY: an open context and the caller's attributes.
        let srq = unsafe { verbs::ibv_create_srq_ex(c.verbs, attr) };
        if srq.is_null() {
            return Err(refuse(
                VERB,
                if errno() == 0 { libc::ENOMEM } else { errno() },
                "ibv_create_srq failed",
            ));
        }
        if c.pd.is_null() {
            c.pd = attr.pd;
        }
        c.srq = srq;
        Ok(())
    });
    ret(r)
}

#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_srq_init_attr_ex,
) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    unsafe { rdma_create_srq_ex_impl(id, attr) }
}

/// `int rdma_create_srq(struct rdma_cm_id *, struct ibv_pd *, struct ibv_srq_init_attr *)`.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> c_int {
    if attr.is_null() {
        return fail(refuse(
            "rdma_create_srq",
            libc::EINVAL,
            "srq_init_attr is NULL",
        ));
    }
    // SAFETY: all-zero is a valid ibv_srq_init_attr_ex; the caller's struct is its prefix.
    let mut ex: ibv_srq_init_attr_ex = unsafe { std::mem::zeroed() };
    let n = std::mem::size_of::<ibv_srq_init_attr>();
    // SAFETY: both hold at least `n` bytes.
    unsafe { std::ptr::copy_nonoverlapping(attr as *const u8, (&raw mut ex).cast::<u8>(), n) };
    ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
    // rdma-core `rdma_create_srq`: an XRC SRQ on an XRC_RECV id.
    let xrc = id_block("rdma_create_srq", id).is_ok_and(|b| b.qp_type() == IBV_QPT_XRC_RECV);
    ex.srq_type = if xrc { IBV_SRQT_XRC } else { IBV_SRQT_BASIC };
    ex.pd = pd;
    // SAFETY: forwarding the caller's id.
    let r = unsafe { rdma_create_srq_ex_impl(id, &raw mut ex) };
    // SAFETY: back into the caller's struct.
    unsafe { std::ptr::copy_nonoverlapping((&raw const ex).cast::<u8>(), attr.cast::<u8>(), n) };
    r
}

/// `void rdma_destroy_srq(struct rdma_cm_id *id)`.
/// The body of `rdma_destroy_srq`, for this library's own callers (an export is
/// never called across modules: its `.symver` must sit with its definition).
pub(crate) unsafe fn rdma_destroy_srq_impl(id: *mut rdma_cm_id) {
    let Ok(b) = id_block("rdma_destroy_srq", id) else {
        return;
    };
    let _st = b.lock();
    // SAFETY: under the id's lock.
    let c = unsafe { &mut *b.c() };
    if !c.srq.is_null() {
        // SAFETY: the id's SRQ, destroyed once.
        unsafe { verbs::ibv_destroy_srq(c.srq) };
        c.srq = std::ptr::null_mut();
    }
    destroy_cqs(c);
}

#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_srq(id: *mut rdma_cm_id) {
    // SAFETY: the caller's arguments, passed on.
    unsafe { rdma_destroy_srq_impl(id) }
}

crate::symver!("qp");

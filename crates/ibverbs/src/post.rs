//! Posting work requests: the `ibv_post_send` / `ibv_post_recv` /
//! `ibv_post_srq_recv` / `ibv_bind_mw` ops slots, and the `ibv_wr_*` builders
//! of `ibv_qp_ex`.

use crate::ah::AhBlock;
use crate::ffi::*;
use crate::memory::{bind_target, MwBlock};
use crate::qp::{Batch, Pending, QpBlock};
use crate::srq::SrqBlock;
use crate::util::*;
use proto::wr::{check_inline_len, sg_total_len, TargetKind};
use softverbs::raw;
use softverbs::{
    AtomicTarget, ImmData, RdmaTarget, RecvWr, SendFlags, SendWr, Sge, WrOpcode, WrTarget,
};
use std::ffi::{c_int, c_void};
use sv_io::stamp::Point;

/// More SGEs than any device offers: refused before anything is copied.
const SGE_LIMIT: usize = 1024;

/// Copies a C SGE list (`num_sge` entries at `sg_list`) into `out`.
unsafe fn sges(
    verb: &str,
    sg_list: *const ibv_sge,
    num_sge: c_int,
    out: &mut Vec<Sge>,
) -> Result<(), c_int> {
    out.clear();
    let n = usize::try_from(num_sge)
        .map_err(|_| refuse(verb, EINVAL, format_args!("num_sge {num_sge} is negative")))?;
    if n > SGE_LIMIT {
        return Err(refuse(
            verb,
            EINVAL,
            format_args!("num_sge {n} exceeds any max_sge"),
        ));
    }
    if n > 0 && sg_list.is_null() {
        return Err(refuse(
            verb,
            EINVAL,
            format_args!("sg_list is NULL with num_sge {n}"),
        ));
    }
    for i in 0..n {
        // SAFETY: the caller's list holds num_sge entries.
        let s = unsafe { *sg_list.add(i) };
        out.push(Sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        });
    }
    Ok(())
}

/// Gathers the bytes of an inline send from the SGE addresses (inline data
/// needs no lkey: the library copies it at post time).
fn gather_inline(verb: &str, qp: &QpBlock, sg: &[Sge], out: &mut Vec<u8>) -> Result<(), c_int> {
    // proto's check, before any byte of the caller's is read.
    check_inline_len(sg_total_len(sg), qp.inner.cap().max_inline_data)
        .map_err(|e| refuse(verb, e.errno().raw(), e))?;
    out.clear();
    for s in sg {
        if s.length > 0 && s.addr == 0 {
            return Err(refuse(verb, EINVAL, "an inline SGE has address 0"));
        }
        // SAFETY: ibv_post_send(3): the SGEs of an inline WR name readable
        // memory of the caller's, read here, before the call returns.
        out.extend_from_slice(unsafe {
            std::slice::from_raw_parts(s.addr as usize as *const u8, s.length as usize)
        });
    }
    Ok(())
}

fn ud_target(
    verb: &str,
    ah: *mut ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) -> Result<WrTarget, c_int> {
    // SAFETY: `block` checks the pointer.
    let b = unsafe { block::<AhBlock>(verb, ah) }?;
    Ok(b.ah().ud(remote_qpn, remote_qkey))
}

/// Posts one C send WR.
unsafe fn post_one(
    qp: &QpBlock,
    wr: &ibv_send_wr,
    sg: &mut Vec<Sge>,
    inline: &mut Vec<u8>,
) -> Result<(), c_int> {
    const VERB: &str = "ibv_post_send";
    let opcode = WrOpcode::from_raw(wr.opcode).ok_or_else(|| {
        refuse(
            VERB,
            EINVAL,
            format_args!("opcode {} is not an ibv_wr_opcode", wr.opcode),
        )
    })?;
    sges(VERB, wr.sg_list, wr.num_sge, sg)?;
    // SAFETY: the union member the opcode and QP type select (proto's choice,
    // the one its check_post_send holds the WR to).
    let target = unsafe {
        match TargetKind::of(opcode, qp.inner.qp_type()) {
            TargetKind::Ud => {
                ud_target(VERB, wr.wr.ud.ah, wr.wr.ud.remote_qpn, wr.wr.ud.remote_qkey)?
            }
            TargetKind::Rdma => WrTarget::Rdma(RdmaTarget {
                remote_addr: wr.wr.rdma.remote_addr,
                rkey: wr.wr.rdma.rkey,
            }),
            TargetKind::Atomic => {
                let a = wr.wr.atomic;
                WrTarget::Atomic(AtomicTarget {
                    remote_addr: a.remote_addr,
                    compare_add: a.compare_add,
                    swap: a.swap,
                    rkey: a.rkey,
                })
            }
            TargetKind::None => WrTarget::None,
            // The same field as imm_data (verbs.h: "When opcode is *_INV:
            // stores the rkey to invalidate"), in host order.
            TargetKind::Invalidate => WrTarget::Invalidate { rkey: wr.imm_data },
            // rdma-core 44's ibv_send_wr has no member for FLUSH's
            // arguments: it is posted with ibv_wr_flush only, which this
            // library's ibv_qp_ex (rdma-core 44's) does not have.
            TargetKind::Flush => {
                return Err(refuse(
                    VERB,
                    EOPNOTSUPP,
                    "IBV_WR_FLUSH cannot be expressed in an ibv_send_wr (rdma-core posts it with ibv_wr_flush)",
                ))
            }
            TargetKind::Bind => {
                let b = wr.bind_mw;
                let w = block::<MwBlock>(VERB, b.mw)?;
                bind_target(VERB, w, b.rkey, &b.bind_info)?
            }
        }
    };
    let flags = SendFlags(wr.send_flags);
    // IBV_WR_TSO: its header and segment size are the union's `tso` member.
    let tso = if opcode == WrOpcode::Tso {
        // SAFETY: the member IBV_WR_TSO selects, at the union's offset.
        let t = unsafe { *(&raw const wr.bind_mw).cast::<ibv_send_wr_tso>() };
        Some((tso_header(VERB, t.hdr, t.hdr_sz)?, t.mss))
    } else {
        None
    };
    let send = SendWr {
        wr_id: wr.wr_id,
        opcode,
        flags,
        sg_list: sg,
        imm_data: ImmData::from_c_field(wr.imm_data),
        target,
    };
    let gathered = if flags.contains(SendFlags::INLINE) && opcode.allows_inline() {
        gather_inline(VERB, qp, sg, inline)?;
        Some(inline.as_slice())
    } else {
        None
    };
    if let Some((hdr, mss)) = tso {
        return raw::post_send_tso_gathered(&qp.inner, &send, gathered, hdr, mss)
            .map_err(|e| errno_of(&e));
    }
    // `qp_type.xrc.remote_srqn`: read by XRC_SEND QPs only (spec/xrc.md §5).
    raw::post_send_gathered_xrc(&qp.inner, &send, gathered, wr.qp_type).map_err(|e| errno_of(&e))
}

/// The caller's TSO header (`hdr`, `hdr_sz` bytes), read now as a provider
/// copies it into the WQE at post time (mlx5 `set_tso_eth_seg`).
unsafe fn tso_header<'a>(verb: &str, hdr: *const c_void, hdr_sz: u16) -> Result<&'a [u8], c_int> {
    if hdr.is_null() {
        if hdr_sz == 0 {
            return Ok(&[]);
        }
        return Err(refuse(
            verb,
            EINVAL,
            format_args!("tso.hdr is NULL with hdr_sz {hdr_sz}"),
        ));
    }
    // SAFETY: ibv_post_send(3) / ibv_wr_send_tso(3): `hdr` points to
    // `hdr_sz` readable bytes of the caller's for the call's duration.
    Ok(unsafe { std::slice::from_raw_parts(hdr.cast::<u8>(), usize::from(hdr_sz)) })
}

/// `ibv_post_send` (the ops slot): posts the list in order; on the first
/// refusal sets `*bad_wr` to it and returns its errno.
pub(crate) unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    sv_io::ab::at_post();
    sv_io::stamp::at(Point::PostEntry);
    let b = match block::<QpBlock>("ibv_post_send", qp) {
        Ok(b) => b,
        Err(e) => return e,
    };
    // The SGE list and inline bytes of each WR are copied into buffers this
    // thread keeps from call to call: posting allocates nothing once they
    // have grown to the largest WR seen.
    thread_local! {
        static SCRATCH: std::cell::RefCell<(Vec<Sge>, Vec<u8>)> =
            const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
    }
    let post_list = |sg: &mut Vec<Sge>, inline: &mut Vec<u8>| {
        let mut cur = wr;
        while !cur.is_null() {
            // SAFETY: the caller's linked list of WRs.
            if let Err(e) = unsafe { post_one(b, &*cur, sg, inline) } {
                if !bad_wr.is_null() {
                    // SAFETY: the caller's out-pointer.
                    unsafe { *bad_wr = cur };
                }
                return e;
            }
            // SAFETY: as above.
            cur = unsafe { (*cur).next };
        }
        0
    };
    let r = SCRATCH.with(|s| match s.try_borrow_mut() {
        Ok(mut s) => {
            let (sg, inline) = &mut *s;
            post_list(sg, inline)
        }
        // Not reentered in practice; fresh buffers if it ever is.
        Err(_) => post_list(&mut Vec::new(), &mut Vec::new()),
    });
    sv_io::stamp::at(Point::PostExit);
    r
}

/// `ibv_bind_mw` (the ops slot; libibverbs' inline wrapper has checked the
/// type, the NULL-MR case and the PDs): a BIND_MW work request on `qp` with
/// the key part advanced (`ibv_inc_rkey`); `mw->rkey` is the new rkey once
/// posted. The bind completes on the send CQ.
pub(crate) unsafe extern "C" fn bind_mw(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    mw_bind: *mut ibv_mw_bind,
) -> c_int {
    const VERB: &str = "ibv_bind_mw";
    let r = (|| {
        let q = block::<QpBlock>(VERB, qp)?;
        let w = block::<MwBlock>(VERB, mw)?;
        if mw_bind.is_null() {
            return Err(refuse(VERB, EINVAL, "mw_bind is NULL"));
        }
        if w.inner.mw_type() != softverbs::MwType::One {
            return Err(refuse(
                VERB,
                EINVAL,
                "ibv_bind_mw binds type 1 windows; bind a type 2 window with an IBV_WR_BIND_MW work request",
            ));
        }
        // SAFETY: the caller's struct (checked non-NULL).
        let bind = unsafe { &*mw_bind };
        let rkey = (w.c.rkey & !0xff) | (w.c.rkey.wrapping_add(1) & 0xff);
        let target = bind_target(VERB, w, rkey, &bind.bind_info)?;
        let wr = SendWr {
            wr_id: bind.wr_id,
            opcode: WrOpcode::BindMw,
            flags: SendFlags(bind.send_flags),
            sg_list: &[],
            imm_data: ImmData::default(),
            target,
        };
        raw::post_send_gathered(&q.inner, &wr, None).map_err(|e| errno_of(&e))?;
        Ok(rkey)
    })();
    match r {
        Ok(rkey) => {
            // SAFETY: a live window block (checked above).
            unsafe { (*mw).rkey = rkey };
            0
        }
        Err(e) => e,
    }
}

/// Posts a C receive list through `post` (QP or SRQ).
pub(crate) unsafe fn post_recv_list(
    verb: &str,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    post: impl Fn(&RecvWr<'_>) -> Result<(), softverbs::Error>,
) -> c_int {
    let mut sg = Vec::new();
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: the caller's linked list of WRs.
        let w = unsafe { &*cur };
        let r = sges(verb, w.sg_list, w.num_sge, &mut sg).and_then(|()| {
            post(&RecvWr {
                wr_id: w.wr_id,
                sg_list: &sg,
            })
            .map_err(|e| errno_of(&e))
        });
        if let Err(e) = r {
            if !bad_wr.is_null() {
                // SAFETY: the caller's out-pointer.
                unsafe { *bad_wr = cur };
            }
            return e;
        }
        cur = w.next;
    }
    0
}

pub(crate) unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    match block::<QpBlock>("ibv_post_recv", qp) {
        Ok(b) => post_recv_list("ibv_post_recv", wr, bad_wr, |w| b.inner.post_recv(w)),
        Err(e) => e,
    }
}

pub(crate) unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    match block::<SrqBlock>("ibv_post_srq_recv", srq) {
        Ok(b) => post_recv_list("ibv_post_srq_recv", wr, bad_wr, |w| b.srq().post_recv(w)),
        Err(e) => e,
    }
}

// ---- ibv_qp_ex: the ibv_wr_* builders ----

/// Runs `f` on the QP's batch.
unsafe fn with_batch(qp: *mut ibv_qp_ex, f: impl FnOnce(&QpBlock, &mut Batch)) {
    if let Ok(b) = block::<QpBlock>("ibv_wr", qp.cast::<ibv_qp>()) {
        f(b, &mut b.batch());
    }
}

/// Starts a new WR of `opcode`, taking `wr_id` and `wr_flags` from the QP.
unsafe fn begin(qp: *mut ibv_qp_ex, opcode: WrOpcode, imm: u32, target: WrTarget) {
    // SAFETY: fields the program sets directly before each builder call.
    let (wr_id, flags) = unsafe { ((*qp).wr_id, (*qp).wr_flags) };
    with_batch(qp, |_, batch| {
        batch.wrs.push(Pending {
            wr_id,
            opcode,
            flags: SendFlags(flags),
            imm: ImmData::from_c_field(imm),
            target,
            sges: Vec::new(),
            inline: None,
            xrc_srqn: 0,
            tso: None,
        })
    });
}

/// Changes the WR begun last; a setter with no WR begun is an error that
/// `ibv_wr_complete` reports.
unsafe fn last(
    qp: *mut ibv_qp_ex,
    what: &str,
    f: impl FnOnce(&QpBlock, &mut Pending) -> Result<(), c_int>,
) {
    with_batch(qp, |b, batch| {
        let r = match batch.wrs.last_mut() {
            Some(p) => f(b, p),
            None => Err(refuse(
                what,
                EINVAL,
                "no work request begun (call ibv_wr_send() etc. first)",
            )),
        };
        if let Err(e) = r {
            batch.error.get_or_insert(e);
        }
    });
}

unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    with_batch(qp, |_, batch| *batch = Batch::default());
}

unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    let b = match block::<QpBlock>("ibv_wr_complete", qp.cast::<ibv_qp>()) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let batch = std::mem::take(&mut *b.batch());
    if let Some(e) = batch.error {
        return e;
    }
    let mut gathered = Vec::new();
    for p in &batch.wrs {
        let wr = SendWr {
            wr_id: p.wr_id,
            opcode: p.opcode,
            flags: p.flags,
            sg_list: &p.sges,
            imm_data: p.imm,
            target: p.target,
        };
        // IBV_SEND_INLINE in wr_flags with ibv_wr_set_sge: the SGEs' bytes are the inline data.
        let inline = match &p.inline {
            Some(bytes) => Some(bytes.as_slice()),
            None if p.flags.contains(SendFlags::INLINE) && p.opcode.allows_inline() => {
                if let Err(e) = gather_inline("ibv_wr_complete", b, &p.sges, &mut gathered) {
                    return e;
                }
                Some(gathered.as_slice())
            }
            None => None,
        };
        let posted = match &p.tso {
            Some((hdr, mss)) => raw::post_send_tso_gathered(&b.inner, &wr, inline, hdr, *mss),
            None => raw::post_send_gathered_xrc(&b.inner, &wr, inline, p.xrc_srqn),
        };
        if let Err(e) = posted {
            return errno_of(&e);
        }
    }
    0
}

unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    with_batch(qp, |_, batch| *batch = Batch::default());
}

unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    begin(qp, WrOpcode::Send, 0, WrTarget::None);
}

unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp_ex, imm: u32) {
    begin(qp, WrOpcode::SendWithImm, imm, WrTarget::None);
}

unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    begin(
        qp,
        WrOpcode::RdmaWrite,
        0,
        WrTarget::Rdma(RdmaTarget { remote_addr, rkey }),
    );
}

unsafe extern "C" fn wr_rdma_write_imm(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm: u32) {
    begin(
        qp,
        WrOpcode::RdmaWriteWithImm,
        imm,
        WrTarget::Rdma(RdmaTarget { remote_addr, rkey }),
    );
}

unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    begin(
        qp,
        WrOpcode::RdmaRead,
        0,
        WrTarget::Rdma(RdmaTarget { remote_addr, rkey }),
    );
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    let t = AtomicTarget {
        remote_addr,
        compare_add: compare,
        swap,
        rkey,
    };
    begin(qp, WrOpcode::AtomicCmpAndSwp, 0, WrTarget::Atomic(t));
}

unsafe extern "C" fn wr_atomic_fetch_add(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    add: u64,
) {
    let t = AtomicTarget {
        remote_addr,
        compare_add: add,
        swap: 0,
        rkey,
    };
    begin(qp, WrOpcode::AtomicFetchAndAdd, 0, WrTarget::Atomic(t));
}

unsafe extern "C" fn wr_bind_mw(
    qp: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    info: *const ibv_mw_bind_info,
) {
    const VERB: &str = "ibv_wr_bind_mw";
    let target = (|| {
        let w = block::<MwBlock>(VERB, mw)?;
        if info.is_null() {
            return Err(refuse(VERB, EINVAL, "bind_info is NULL"));
        }
        // SAFETY: the caller's struct (checked non-NULL).
        bind_target(VERB, w, rkey, unsafe { &*info })
    })();
    match target {
        Ok(t) => {
            begin(qp, WrOpcode::BindMw, 0, t);
            // The program reads mw->rkey for the new key, as rdma-core's
            // providers set it when the bind is posted.
            // SAFETY: a live window block (checked above).
            unsafe { (*mw).rkey = ((*mw).rkey & !0xff) | (rkey & 0xff) };
        }
        Err(e) => with_batch(qp, |_, batch| {
            batch.error.get_or_insert(e);
        }),
    }
}
unsafe extern "C" fn wr_local_inv(qp: *mut ibv_qp_ex, rkey: u32) {
    begin(qp, WrOpcode::LocalInv, 0, WrTarget::Invalidate { rkey });
}
unsafe extern "C" fn wr_send_inv(qp: *mut ibv_qp_ex, rkey: u32) {
    begin(qp, WrOpcode::SendWithInv, 0, WrTarget::Invalidate { rkey });
}
/// `ibv_wr_send_tso`: the header is copied now (mlx5 copies it into the WQE).
unsafe extern "C" fn wr_send_tso(qp: *mut ibv_qp_ex, hdr: *mut c_void, hdr_sz: u16, mss: u16) {
    const VERB: &str = "ibv_wr_send_tso";
    begin(qp, WrOpcode::Tso, 0, WrTarget::None);
    last(qp, VERB, |_, p| {
        // SAFETY: the caller's header of hdr_sz bytes.
        let h = unsafe { tso_header(VERB, hdr, hdr_sz) }?;
        p.tso = Some((h.to_vec(), mss));
        Ok(())
    });
}
unsafe extern "C" fn wr_set_xrc_srqn(qp: *mut ibv_qp_ex, srqn: u32) {
    last(qp, "ibv_wr_set_xrc_srqn", |_, p| {
        p.xrc_srqn = srqn;
        Ok(())
    });
}
/// `ibv_wr_atomic_write`: the 8 bytes at `data` are taken now (IBA 1.5 ATOMIC WRITE).
unsafe extern "C" fn wr_atomic_write(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    data: *const c_void,
) {
    begin(
        qp,
        WrOpcode::AtomicWrite,
        0,
        WrTarget::Rdma(RdmaTarget { remote_addr, rkey }),
    );
    last(qp, "ibv_wr_atomic_write", |_, p| {
        if data.is_null() {
            return Err(refuse("ibv_wr_atomic_write", EINVAL, "atomic_wr is NULL"));
        }
        // SAFETY: ibv_wr_atomic_write(3): `data` points at 8 bytes, read now.
        let bytes = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), 8) };
        p.flags = p.flags | SendFlags::INLINE;
        p.inline = Some(bytes.to_vec());
        // The length the posting checks see (8); the bytes are the inline ones.
        p.sges = vec![Sge {
            addr: data as u64,
            length: 8,
            lkey: 0,
        }];
        Ok(())
    });
}
unsafe extern "C" fn wr_set_ud_addr(
    qp: *mut ibv_qp_ex,
    ah: *mut ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    last(qp, "ibv_wr_set_ud_addr", |_, p| {
        p.target = ud_target("ibv_wr_set_ud_addr", ah, remote_qpn, remote_qkey)?;
        Ok(())
    });
}

unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    last(qp, "ibv_wr_set_sge", |_, p| {
        p.sges = vec![Sge { addr, length, lkey }];
        Ok(())
    });
}

unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge) {
    last(qp, "ibv_wr_set_sge_list", |_, p| {
        let n = c_int::try_from(num_sge).unwrap_or(c_int::MAX);
        // SAFETY: the caller's list of num_sge entries (checked inside).
        unsafe { sges("ibv_wr_set_sge_list", sg_list, n, &mut p.sges) }
    });
}

unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    let buf = ibv_data_buf { addr, length };
    wr_set_inline_data_list(qp, 1, &raw const buf);
}

unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ibv_qp_ex,
    num_buf: usize,
    buf_list: *const ibv_data_buf,
) {
    last(qp, "ibv_wr_set_inline_data", |b, p| {
        if num_buf > SGE_LIMIT || (num_buf > 0 && buf_list.is_null()) {
            return Err(refuse(
                "ibv_wr_set_inline_data",
                EINVAL,
                "buffer list NULL or too long",
            ));
        }
        let mut sg = Vec::with_capacity(num_buf);
        for i in 0..num_buf {
            // SAFETY: the caller's list of num_buf entries.
            let d = unsafe { &*buf_list.add(i) };
            let length = u32::try_from(d.length)
                .map_err(|_| refuse("ibv_wr_set_inline_data", EINVAL, "buffer too long"))?;
            sg.push(Sge {
                addr: d.addr as u64,
                length,
                lkey: 0,
            });
        }
        let mut bytes = Vec::new();
        gather_inline("ibv_wr_set_inline_data", b, &sg, &mut bytes)?;
        p.flags = p.flags | SendFlags::INLINE;
        p.inline = Some(bytes);
        Ok(())
    });
}

/// An `ibv_qp_ex` with every builder set and an empty base (filled by the caller).
pub(crate) fn qp_ex_ops() -> ibv_qp_ex {
    // SAFETY: ibv_qp_ex is plain data (integers, pointers): all-zero is valid.
    let mut q: ibv_qp_ex = unsafe { std::mem::zeroed() };
    q.wr_atomic_cmp_swp = wr_atomic_cmp_swp as Op;
    q.wr_atomic_fetch_add = wr_atomic_fetch_add as Op;
    q.wr_bind_mw = wr_bind_mw as Op;
    q.wr_local_inv = wr_local_inv as Op;
    q.wr_rdma_read = wr_rdma_read as Op;
    q.wr_rdma_write = wr_rdma_write as Op;
    q.wr_rdma_write_imm = wr_rdma_write_imm as Op;
    q.wr_send = wr_send as Op;
    q.wr_send_imm = wr_send_imm as Op;
    q.wr_send_inv = wr_send_inv as Op;
    q.wr_send_tso = wr_send_tso as Op;
    q.wr_set_ud_addr = wr_set_ud_addr as Op;
    q.wr_set_xrc_srqn = wr_set_xrc_srqn as Op;
    q.wr_set_inline_data = wr_set_inline_data as Op;
    q.wr_set_inline_data_list = wr_set_inline_data_list as Op;
    q.wr_set_sge = wr_set_sge as Op;
    q.wr_set_sge_list = wr_set_sge_list as Op;
    q.wr_start = wr_start as Op;
    q.wr_complete = wr_complete as Op;
    q.wr_abort = wr_abort as Op;
    q.wr_atomic_write = wr_atomic_write as Op;
    q
}

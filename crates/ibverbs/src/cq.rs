//! Completion queues: `ibv_create_cq(_ex)`, `ibv_poll_cq`, the `ibv_cq_ex`
//! poll-by-parts functions, notification, resize and destroy.

use crate::context::{ctx_block, ChannelBlock};
use crate::ffi::*;
use crate::util::*;
use softverbs::raw;
use softverbs::WorkCompletion;
use std::ffi::{c_int, c_void};
use std::sync::{Mutex, MutexGuard, PoisonError};
use sv_io::stamp::Point;

#[repr(C)]
pub(crate) struct CqBlock {
    pub c: ibv_cq_ex,
    magic: u64,
    pub inner: Option<softverbs::CompletionQueue>,
    /// Completions taken from the queue, and the one `ibv_cq_ex` reads.
    state: Mutex<PollState>,
    /// Set when made through a parent domain (its dealloc waits for it).
    _domain: Option<crate::domain::DomainHold>,
}
impl_block!(CqBlock, ibv_cq, "completion queue", 0x736f_6674_6371_3031);

#[derive(Default)]
struct PollState {
    buf: Vec<WorkCompletion>,
    current: Option<WorkCompletion>,
}

impl CqBlock {
    pub(crate) fn cq(&self) -> &softverbs::CompletionQueue {
        self.inner.as_ref().expect("a live CQ block holds its CQ")
    }

    fn state(&self) -> MutexGuard<'_, PollState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn c_ptr(&self) -> *mut ibv_cq {
        (&raw const self.c.cq).cast_mut()
    }
}

/// The `ibv_cq_ex` wc_flags we can read: byte_len, imm, qp_num, src_qp, slid,
/// sl, dlid_path_bits, the completion timestamp (1 << 7, the device clock's
/// nanoseconds) and its wall-clock time (1 << 11); no VLAN, flow tag or tag
/// matching.
const WC_EX_SUPPORTED: u64 = 0x7f | 1 << 7 | 1 << 11;
/// `IBV_CQ_INIT_ATTR_MASK_FLAGS`.
const CQ_INIT_ATTR_MASK_FLAGS: u32 = 1;
/// `IBV_CQ_INIT_ATTR_MASK_PD`: the CQ belongs to a parent domain.
const CQ_INIT_ATTR_MASK_PD: u32 = 2;
/// `IBV_CREATE_CQ_ATTR_SINGLE_THREADED`: a hint we may ignore.
const CREATE_CQ_ATTR_SINGLE_THREADED: u32 = 1;

const NULL: Op = std::ptr::null();

unsafe fn create(
    verb: &str,
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
    parent_domain: *mut ibv_pd,
) -> Result<*mut CqBlock, c_int> {
    let b = ctx_block(verb, context)?;
    let ch = if channel.is_null() {
        None
    } else {
        Some(block::<ChannelBlock>(verb, channel)?)
    };
    let cq = raw::create_cq_ex(&b.ctx, cqe, comp_vector, ch.map(|c| &c.inner))
        .map_err(|e| errno_of(&e))?;
    let id = cq.id();
    let c = ibv_cq_ex {
        cq: ibv_cq {
            context,
            channel,
            cq_context,
            handle: 0,
            cqe: cq.cqe() as c_int,
            mutex: [0; 5],
            cond: [0; 6],
            comp_events_completed: 0,
            async_events_completed: 0,
        },
        comp_mask: 0,
        status: 0,
        wr_id: 0,
        start_poll: start_poll as Op,
        next_poll: next_poll as Op,
        end_poll: end_poll as Op,
        read_opcode: read_opcode as Op,
        read_vendor_err: read_vendor_err as Op,
        read_byte_len: read_byte_len as Op,
        read_imm_data: read_imm_data as Op,
        read_qp_num: read_qp_num as Op,
        read_src_qp: read_src_qp as Op,
        read_wc_flags: read_wc_flags as Op,
        read_slid: read_slid as Op,
        read_sl: read_sl as Op,
        read_dlid_path_bits: read_dlid_path_bits as Op,
        read_completion_ts: read_completion_ts as Op,
        read_cvlan: NULL,
        read_flow_tag: NULL,
        read_tm_info: NULL,
        read_completion_wallclock_ns: read_completion_wallclock_ns as Op,
    };
    let p = into_c(CqBlock {
        c,
        magic: CqBlock::MAGIC,
        inner: Some(cq),
        state: Mutex::default(),
        // SAFETY: NULL or the parent domain the caller checked.
        _domain: unsafe { crate::domain::DomainHold::of(parent_domain) },
    })
    .cast::<CqBlock>();
    if let Some(ch) = ch {
        ch.cqs().insert(id, p as usize);
        // SAFETY: `channel` is live (checked above); the count is what
        // ibv_destroy_comp_channel checks, kept under the channel's lock.
        unsafe { (*channel).refcnt += 1 };
    }
    b.objects().cqs.insert(id, p as usize);
    Ok(p)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    match create(
        "ibv_create_cq",
        context,
        cqe,
        cq_context,
        channel,
        comp_vector,
        std::ptr::null_mut(),
    ) {
        Ok(p) => p.cast::<ibv_cq>(),
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

/// `verbs_context.create_cq_ex`.
pub(crate) unsafe extern "C" fn create_cq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    const VERB: &str = "ibv_create_cq_ex";
    let r = (|| {
        if attr.is_null() {
            return Err(refuse(VERB, EINVAL, "cq_attr is NULL"));
        }
        // SAFETY: non-NULL attributes from the caller.
        let a = unsafe { &*attr };
        if a.comp_mask & !(CQ_INIT_ATTR_MASK_FLAGS | CQ_INIT_ATTR_MASK_PD) != 0 {
            return Err(refuse(
                VERB,
                EOPNOTSUPP,
                format_args!(
                    "comp_mask {:#x}: only IBV_CQ_INIT_ATTR_MASK_FLAGS and _PD are offered",
                    a.comp_mask
                ),
            ));
        }
        // A CQ of a parent domain (mlx5: EINVAL unless it is one).
        if a.comp_mask & CQ_INIT_ATTR_MASK_PD != 0 {
            // SAFETY: the caller's pointer, checked inside.
            unsafe { crate::domain::is_parent_domain(VERB, a.parent_domain)? };
        }
        if a.comp_mask & CQ_INIT_ATTR_MASK_FLAGS != 0
            && a.flags & !CREATE_CQ_ATTR_SINGLE_THREADED != 0
        {
            return Err(refuse(
                VERB,
                EOPNOTSUPP,
                format_args!(
                    "flags {:#x}: only IBV_CREATE_CQ_ATTR_SINGLE_THREADED is offered",
                    a.flags
                ),
            ));
        }
        if a.wc_flags & !WC_EX_SUPPORTED != 0 {
            return Err(refuse(
                VERB,
                EOPNOTSUPP,
                format_args!(
                    "wc_flags {:#x}: VLAN, flow tag and tag matching are not offered",
                    a.wc_flags
                ),
            ));
        }
        let cqe = c_int::try_from(a.cqe)
            .map_err(|_| refuse(VERB, EINVAL, format_args!("cqe {} too large", a.cqe)))?;
        let vector = c_int::try_from(a.comp_vector).unwrap_or(c_int::MAX);
        // SAFETY: pointers from the caller, checked inside.
        let parent_domain = if a.comp_mask & CQ_INIT_ATTR_MASK_PD != 0 {
            a.parent_domain
        } else {
            std::ptr::null_mut()
        };
        // SAFETY: pointers from the caller, checked inside.
        unsafe {
            create(
                VERB,
                context,
                cqe,
                a.cq_context,
                a.channel,
                vector,
                parent_domain,
            )
        }
    })();
    match r {
        Ok(p) => p.cast::<ibv_cq_ex>(),
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

/// `ibv_destroy_cq`: `EBUSY` while a QP uses it.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    let b = match block::<CqBlock>("ibv_destroy_cq", cq) {
        Ok(b) => std::ptr::from_ref::<CqBlock>(b).cast_mut(),
        Err(e) => return e,
    };
    // SAFETY: a live block; only the destroy path takes the CQ out.
    let inner = unsafe { (*b).inner.take() }.expect("live CQ");
    let id = inner.id();
    if let Err(refused) = inner.destroy() {
        // SAFETY: as above: put it back unchanged.
        unsafe { (*b).inner = Some(refused.object) };
        return errno_of(&refused.error);
    }
    // SAFETY: the fields of a live block.
    let (context, channel) = unsafe { ((*cq).context, (*cq).channel) };
    if channel.is_null() {
        // no channel to detach from
    } else if let Ok(ch) = block::<ChannelBlock>("ibv_destroy_cq", channel) {
        ch.cqs().remove(&id);
        // SAFETY: live channel (checked).
        unsafe { (*channel).refcnt -= 1 };
    }
    if let Ok(ctx) = ctx_block("ibv_destroy_cq", context) {
        ctx.objects().cqs.remove(&id);
    }
    free::<CqBlock>(cq);
    0
}

/// `ibv_resize_cq`: `EINVAL` below the completions queued or above max_cqe.
#[no_mangle]
pub unsafe extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    let b = match block::<CqBlock>("ibv_resize_cq", cq) {
        Ok(b) => b,
        Err(e) => return e,
    };
    match raw::resize_cq(b.cq(), cqe) {
        Ok(n) => {
            // SAFETY: the live CQ's public field.
            unsafe { (*cq).cqe = n as c_int };
            0
        }
        Err(e) => errno_of(&e),
    }
}

fn to_c(w: &WorkCompletion) -> ibv_wc {
    ibv_wc {
        wr_id: w.wr_id,
        status: w.status.raw(),
        opcode: w.opcode.raw(),
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        imm_data: w.imm_data.to_c_field(),
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: w.wc_flags.0,
        pkey_index: w.pkey_index,
        slid: w.slid,
        sl: w.sl,
        dlid_path_bits: w.dlid_path_bits,
    }
}

/// `ibv_poll_cq` (the ops slot): completions written to `wc`, their count, or
/// a negative value on error.
pub(crate) unsafe extern "C" fn poll_cq(
    cq: *mut ibv_cq,
    num_entries: c_int,
    wc: *mut ibv_wc,
) -> c_int {
    sv_io::stamp::at(Point::PollEntry);
    let b = match block::<CqBlock>("ibv_poll_cq", cq) {
        Ok(b) => b,
        Err(e) => return -e,
    };
    if num_entries < 0 || (num_entries > 0 && wc.is_null()) {
        return -refuse("ibv_poll_cq", EINVAL, "num_entries negative or wc NULL");
    }
    // Straight from the CQ's ring into the caller's array: no engine lock,
    // no buffer in between.
    let mut i = 0;
    let n = raw::poll_cq_into(b.cq(), num_entries as usize, |w| {
        // SAFETY: the caller's array holds num_entries entries; poll_cq_into
        // hands over at most that many.
        unsafe { wc.add(i).write(to_c(&w)) };
        i += 1;
    });
    sv_io::stamp::at(if n > 0 {
        Point::PollFound
    } else {
        Point::PollEmpty
    });
    n as c_int
}

/// `ibv_req_notify_cq` (the ops slot).
pub(crate) unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    match block::<CqBlock>("ibv_req_notify_cq", cq) {
        Ok(b) => b
            .cq()
            .req_notify(solicited_only != 0)
            .err()
            .map_or(0, |e| errno_of(&e)),
        Err(e) => e,
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: u32) {
    if let Ok(b) = block::<CqBlock>("ibv_ack_cq_events", cq) {
        let _st = b.state();
        // SAFETY: the live CQ's public counter, updated under its lock.
        unsafe { (*b.c_ptr()).comp_events_completed += nevents };
    }
}

pub(crate) unsafe fn ack_async(cq: *mut ibv_cq) {
    if let Ok(b) = block::<CqBlock>("ibv_ack_async_event", cq) {
        let _st = b.state();
        // SAFETY: as above.
        unsafe { (*b.c_ptr()).async_events_completed += 1 };
    }
}

// ---- ibv_cq_ex: start_poll / next_poll / end_poll and the readers ----

unsafe fn poll_one(cq: *mut ibv_cq_ex) -> c_int {
    let b = match block::<CqBlock>("ibv_start_poll", cq.cast::<ibv_cq>()) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let mut st = b.state();
    st.buf.clear();
    if b.cq().poll(1, &mut st.buf) == 0 {
        st.current = None;
        return ENOENT;
    }
    let w = st.buf[0];
    st.current = Some(w);
    // SAFETY: the live CQ's public fields that programs read directly.
    unsafe {
        (*cq).status = w.status.raw();
        (*cq).wr_id = w.wr_id;
    }
    0
}

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: NULL or the caller's attributes.
    if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
        return refuse("ibv_start_poll", EINVAL, "poll_cq_attr.comp_mask must be 0");
    }
    poll_one(cq)
}

unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    poll_one(cq)
}

unsafe extern "C" fn end_poll(_cq: *mut ibv_cq_ex) {}

/// Reads a field of the completion `start_poll`/`next_poll` returned.
unsafe fn read<T: Default>(cq: *mut ibv_cq_ex, f: impl FnOnce(&WorkCompletion) -> T) -> T {
    match block::<CqBlock>("ibv_wc_read", cq.cast::<ibv_cq>()) {
        Ok(b) => b.state().current.as_ref().map(f).unwrap_or_default(),
        Err(_) => T::default(),
    }
}

/// The device clock at the completion, in `hca_core_clock` ticks (ns).
unsafe extern "C" fn read_completion_ts(cq: *mut ibv_cq_ex) -> u64 {
    read(cq, |w| w.timestamp_ns)
}
unsafe extern "C" fn read_completion_wallclock_ns(cq: *mut ibv_cq_ex) -> u64 {
    let ts = read(cq, |w| w.timestamp_ns);
    // SAFETY: the CQ's public context field, checked as a context block.
    let context = unsafe { (*cq).cq.context };
    match ctx_block("ibv_wc_read_completion_wallclock_ns", context) {
        Ok(b) => b.ctx.wallclock_ns(ts),
        Err(_) => 0,
    }
}
unsafe extern "C" fn read_opcode(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| w.opcode.raw())
}
unsafe extern "C" fn read_vendor_err(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| w.vendor_err)
}
unsafe extern "C" fn read_byte_len(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| w.byte_len)
}
unsafe extern "C" fn read_imm_data(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| w.imm_data.to_c_field())
}
unsafe extern "C" fn read_qp_num(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| w.qp_num)
}
unsafe extern "C" fn read_src_qp(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| w.src_qp)
}
unsafe extern "C" fn read_wc_flags(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| w.wc_flags.0)
}
unsafe extern "C" fn read_slid(cq: *mut ibv_cq_ex) -> u32 {
    read(cq, |w| u32::from(w.slid))
}
unsafe extern "C" fn read_sl(cq: *mut ibv_cq_ex) -> u8 {
    read(cq, |w| w.sl)
}
unsafe extern "C" fn read_dlid_path_bits(cq: *mut ibv_cq_ex) -> u8 {
    read(cq, |w| w.dlid_path_bits)
}

crate::symver!("cq");

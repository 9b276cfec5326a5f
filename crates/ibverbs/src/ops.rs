//! The top floor: the context's ops tables and what reaches every kind of
//! object. `ibv_open_device` makes an extended `verbs_context` whose ops
//! (`ibv_post_send`, `ibv_poll_cq`, `ibv_create_qp_ex`, …, called by verbs.h's
//! inline functions) name an entry point of nearly every module, and
//! `ibv_ack_async_event` counts an event on the CQ, SRQ or QP it named; so
//! this file sits above them all and nothing imports it.

use crate::context::open_context;
use crate::device::device_block_of;
use crate::ffi::*;
use crate::util::*;
use std::ffi::c_int;

#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    flush_at_exit();
    let opened = device_block_of("ibv_open_device", device).and_then(|b| {
        let ctx = b
            .device
            .open()
            .map_err(|e| open_refused(b.device.name(), &e))?;
        open_context((&raw const b.dev).cast_mut(), ctx, context_ops())
    });
    match opened {
        Ok(p) => p,
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

/// Once per process: at `exit(3)`, what a poll left for the program's
/// next post (an ACK, spec/rc-reliability.md §3) leaves, even if the
/// program never closes its devices (a killed process still takes it).
/// With `SOFTVERBS_LOG` at debug or trace, a line on stderr says so (by
/// write(2): the exiting thread's logger is gone).
fn flush_at_exit() {
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    static SAY: AtomicBool = AtomicBool::new(false);
    extern "C" fn flush() {
        sv_io::ab::report();
        sv_io::stamp::report();
        if softverbs::flush_open_devices() > 0 && SAY.load(Relaxed) {
            const LINE: &[u8] =
                b"softverbs: at exit, the progress thread sent what a poll had left\n";
            // SAFETY: writes a static buffer of its length to fd 2.
            let _ = unsafe { libc::write(2, LINE.as_ptr().cast(), LINE.len()) };
        }
    }
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let level = std::env::var("SOFTVERBS_LOG").unwrap_or_default();
        SAY.store(level.contains("debug") || level.contains("trace"), Relaxed);
        // SAFETY: registers a function of this library that takes no
        // arguments and does not unwind (flush_open_devices only tries a
        // lock, rings doorbells and sleeps); glibc runs it at exit(3), or at
        // this library's dlclose (atexit binds it to this object).
        if unsafe { libc::atexit(flush) } != 0 {
            tracing::debug!("atexit refused the exit-time flush");
        }
    });
}

/// A device that cannot open says why: programs report only "couldn't get
/// context". Logged at `error`; also printed when `SOFTVERBS_LOG` is unset.
fn open_refused(name: &str, e: &softverbs::Error) -> c_int {
    tracing::error!(target: "softverbs", "ibv_open_device({name}): {e}");
    if std::env::var_os("SOFTVERBS_LOG").is_none() {
        eprintln!("libibverbs (softverbs): cannot open {name}: {e}");
    }
    errno_of(e)
}

const NULL: Op = std::ptr::null();

/// The ops a context of this library offers: a `verbs_context` with every
/// slot set and the rest of its `ibv_context` empty (filled by
/// `context::open_context`).
fn context_ops() -> verbs_context {
    let ops = ibv_context_ops {
        _compat: [NULL; 7],
        alloc_mw: crate::memory::alloc_mw as Op,
        bind_mw: crate::post::bind_mw as Op,
        dealloc_mw: crate::memory::dealloc_mw as Op,
        _compat_create_cq: NULL,
        poll_cq: crate::cq::poll_cq as Op,
        req_notify_cq: crate::cq::req_notify_cq as Op,
        _compat2: [NULL; 7],
        post_srq_recv: crate::post::post_srq_recv as Op,
        _compat3: [NULL; 4],
        post_send: crate::post::post_send as Op,
        post_recv: crate::post::post_recv as Op,
        _compat4: [NULL; 5],
    };
    let context = ibv_context {
        device: std::ptr::null_mut(),
        ops,
        cmd_fd: -1,
        async_fd: -1,
        num_comp_vectors: 0,
        mutex: [0; 5],
        abi_compat: std::ptr::null_mut(),
    };
    verbs_context {
        query_port: crate::device::query_port_op as Op,
        advise_mr: crate::memory::advise_mr as Op,
        alloc_null_mr: NULL,
        read_counters: NULL,
        attach_counters_point_flow: NULL,
        create_counters: NULL,
        destroy_counters: NULL,
        reg_dm_mr: crate::dm::reg_dm_mr as Op,
        alloc_dm: crate::dm::alloc_dm as Op,
        free_dm: crate::dm::free_dm as Op,
        modify_flow_action_esp: NULL,
        destroy_flow_action: NULL,
        create_flow_action_esp: NULL,
        modify_qp_rate_limit: NULL,
        alloc_parent_domain: crate::domain::alloc_parent_domain as Op,
        dealloc_td: crate::domain::dealloc_td as Op,
        alloc_td: crate::domain::alloc_td as Op,
        modify_cq: NULL,
        post_srq_ops: NULL,
        destroy_rwq_ind_table: crate::wq::destroy_rwq_ind_table as Op,
        create_rwq_ind_table: crate::wq::create_rwq_ind_table as Op,
        destroy_wq: crate::wq::destroy_wq as Op,
        modify_wq: crate::wq::modify_wq as Op,
        create_wq: crate::wq::create_wq as Op,
        query_rt_values: crate::device::query_rt_values as Op,
        create_cq_ex: crate::cq::create_cq_ex as Op,
        priv_: std::ptr::null_mut(),
        query_device_ex: crate::device::query_device_ex as Op,
        ibv_destroy_flow: crate::flow::destroy_flow as Op,
        abi_placeholder2: NULL,
        ibv_create_flow: crate::flow::create_flow as Op,
        abi_placeholder1: NULL,
        open_qp: crate::qp::create::open_qp as Op,
        create_qp_ex: crate::qp::create::create_qp_ex as Op,
        get_srq_num: crate::srq::get_srq_num as Op,
        create_srq_ex: crate::srq::create_srq_ex as Op,
        open_xrcd: crate::xrc::open_xrcd as Op,
        close_xrcd: crate::xrc::close_xrcd as Op,
        abi_placeholder3: 0,
        sz: std::mem::size_of::<verbs_context>(),
        context,
    }
}

/// `ibv_ack_async_event`: counts the event as handled on its object.
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_async_event(event: *mut ibv_async_event) {
    if event.is_null() {
        return;
    }
    // SAFETY: the caller passes an event from ibv_get_async_event.
    let (kind, element) = unsafe { ((*event).event_type, (*event).element) };
    // SAFETY: the element is the live object the event named (the caller may
    // not destroy it before acknowledging, per the man page).
    unsafe {
        match kind {
            0 => crate::cq::ack_async(element.cast::<ibv_cq>()),
            14 | 15 => crate::srq::ack_async(element.cast::<ibv_srq>()),
            _ => crate::qp::ack_async(element.cast::<ibv_qp>()),
        }
    }
}

crate::symver!("ops");

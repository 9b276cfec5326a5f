//! Contexts (`ibv_close_device`): the block behind an `ibv_context`, the
//! registry of its objects for asynchronous events (`ibv_get_async_event`),
//! and completion channels. The context is made, with its ops table, by
//! `ibv_open_device` in ops.rs; an event is acknowledged there too, on the
//! object it names.

use crate::ffi::*;
use crate::util::*;
use softverbs::raw;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// An open context. Programs hold `&v.context`, 320 bytes in: the extended
/// ops sit before it, as in rdma-core's providers.
#[repr(C)]
pub(crate) struct CtxBlock {
    pub v: verbs_context,
    magic: u64,
    pub ctx: softverbs::Context,
    /// `ctx->cmd_fd`: programs may dup() or poll() it, so it is a real fd.
    _cmd_fd: OwnedFd,
    objects: Mutex<Objects>,
}
const CTX_MAGIC: u64 = 0x736f_6674_6374_7831;

/// What async events can name, by softverbs id: the C objects they map to.
#[derive(Default)]
pub(crate) struct Objects {
    pub qps: HashMap<u64, usize>,
    pub cqs: HashMap<u64, usize>,
    pub srqs: HashMap<u64, usize>,
}

impl CtxBlock {
    /// The registry of this context's objects (for async events).
    pub(crate) fn objects(&self) -> MutexGuard<'_, Objects> {
        self.objects.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The pointer C holds.
    pub(crate) fn c(&self) -> *mut ibv_context {
        (&raw const self.v.context).cast_mut()
    }
}

/// The context block behind an `ibv_context *`: `EINVAL` for NULL or a
/// pointer that is not a live context of this library.
///
/// # Safety
/// `p` is NULL or points into readable memory at least 328 bytes long with
/// 320 readable bytes before it (true of every context we handed out).
pub(crate) unsafe fn ctx_block<'a>(
    verb: &str,
    p: *const ibv_context,
) -> Result<&'a CtxBlock, c_int> {
    if p.is_null() {
        return Err(refuse(verb, EINVAL, "the context pointer is NULL"));
    }
    let off = std::mem::offset_of!(verbs_context, context);
    // SAFETY: per the contract; the block starts with the verbs_context.
    let b = unsafe { &*p.cast::<u8>().sub(off).cast::<CtxBlock>() };
    if b.magic != CTX_MAGIC {
        return Err(refuse(
            verb,
            EINVAL,
            format_args!("{p:?} is not a live context of this library"),
        ));
    }
    Ok(b)
}

/// Makes the context of an opened device: `v` is the ops table (ops.rs),
/// completed here with the device, the file descriptors and the ABI word.
pub(crate) fn open_context(
    device: *mut ibv_device,
    ctx: softverbs::Context,
    mut v: verbs_context,
) -> Result<*mut ibv_context, c_int> {
    // SAFETY: plain eventfd(2); the result is checked before use.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(refuse(
            "ibv_open_device",
            errno(),
            "no file descriptor for cmd_fd",
        ));
    }
    // SAFETY: `fd` is a new descriptor we own.
    let cmd_fd = unsafe { OwnedFd::from_raw_fd(fd) };
    make_blocking(raw::async_event_fd(&ctx));
    v.context = ibv_context {
        device,
        ops: v.context.ops,
        cmd_fd: cmd_fd.as_raw_fd(),
        async_fd: raw::async_event_fd(&ctx),
        num_comp_vectors: 1,
        mutex: [0; 5],
        abi_compat: VERBS_ABI_IS_EXTENDED,
    };
    let b = Box::new(CtxBlock {
        v,
        magic: CTX_MAGIC,
        ctx,
        _cmd_fd: cmd_fd,
        objects: Mutex::default(),
    });
    Ok(Box::leak(b).c())
}

/// `ibv_close_device`: the objects still open stay usable until destroyed
/// (softverbs keeps the device alive while anything uses it).
#[no_mangle]
pub unsafe extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
    let b = match ctx_block("ibv_close_device", context) {
        Ok(b) => std::ptr::from_ref::<CtxBlock>(b).cast_mut(),
        Err(e) => return e,
    };
    // SAFETY: a live block from `open_context`; cleared before it is freed.
    unsafe {
        (*b).magic = 0;
        drop(Box::from_raw(b));
    }
    0
}

// ---- completion channels ----

#[repr(C)]
pub(crate) struct ChannelBlock {
    pub c: ibv_comp_channel,
    magic: u64,
    pub inner: softverbs::CompletionChannel,
    /// The CQs attached, by softverbs id → `CqBlock` address.
    pub cqs: Mutex<HashMap<u64, usize>>,
}
impl_block!(
    ChannelBlock,
    ibv_comp_channel,
    "completion channel",
    0x736f_6674_6368_6e31
);

impl ChannelBlock {
    pub(crate) fn cqs(&self) -> MutexGuard<'_, HashMap<u64, usize>> {
        self.cqs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(
    context: *mut ibv_context,
) -> *mut ibv_comp_channel {
    let made = ctx_block("ibv_create_comp_channel", context).and_then(|b| {
        let inner = b.ctx.create_comp_channel().map_err(|e| errno_of(&e))?;
        make_blocking(inner.fd());
        let c = ibv_comp_channel {
            context,
            fd: inner.fd(),
            refcnt: 0,
        };
        Ok(into_c(ChannelBlock {
            c,
            magic: ChannelBlock::MAGIC,
            inner,
            cqs: Mutex::default(),
        }))
    });
    made.unwrap_or_else(|e| {
        set_errno(e);
        std::ptr::null_mut()
    })
}

/// `ibv_destroy_comp_channel`: `EBUSY` while CQs use it.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    let b = match block::<ChannelBlock>("ibv_destroy_comp_channel", channel) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let n = b.cqs().len();
    if n > 0 {
        return refuse(
            "ibv_destroy_comp_channel",
            libc::EBUSY,
            format_args!("{n} CQ(s) still use the channel"),
        );
    }
    free::<ChannelBlock>(channel);
    0
}

/// Clears `O_NONBLOCK` on an event fd handed to C. As with rdma-core, the
/// channel and async fds start blocking and `ibv_get_*_event` waits; a caller
/// that wants `EAGAIN` sets `O_NONBLOCK` itself, which [`nonblocking`] sees.
/// (The engine's eventfd is only read when it is known to be non-zero, so
/// blocking mode never makes our own side wait.)
fn make_blocking(fd: c_int) {
    // SAFETY: fcntl on a descriptor we own; failure leaves it as it was.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 && flags & libc::O_NONBLOCK != 0 {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
}

/// Whether the caller made `fd` non-blocking (then reads must not wait).
fn nonblocking(fd: c_int) -> bool {
    // SAFETY: fcntl(F_GETFL) on a descriptor; an error reads as blocking.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    flags >= 0 && flags & libc::O_NONBLOCK != 0
}

/// `ibv_get_cq_event`: waits for the next event (or `EAGAIN` at once on a
/// non-blocking fd); −1 with errno on error. A cancellation point, as
/// rdma-core's read(2) on the channel fd is: `C-unwind`, so that
/// pthread_cancel's forced unwind may pass through (no destructor is live
/// while it waits).
#[no_mangle]
pub unsafe extern "C-unwind" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    let b = match block::<ChannelBlock>("ibv_get_cq_event", channel) {
        Ok(b) => b,
        Err(e) => {
            set_errno(e);
            return -1;
        }
    };
    if cq.is_null() || cq_context.is_null() {
        set_errno(refuse(
            "ibv_get_cq_event",
            EINVAL,
            "cq or cq_context out-pointer is NULL",
        ));
        return -1;
    }
    loop {
        let id = if nonblocking(b.c.fd) {
            raw::try_get_event(&b.inner)
        } else {
            // Waits in poll(2), a cancellation point, so that a thread
            // blocked here can be cancelled (rping's CQ thread is).
            loop {
                if let Some(id) = raw::try_get_event(&b.inner) {
                    break Some(id);
                }
                let mut pfd = libc::pollfd {
                    fd: b.c.fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                if unsafe { libc::poll(&raw mut pfd, 1, -1) } < 0 {
                    let e = std::io::Error::last_os_error();
                    if e.kind() != std::io::ErrorKind::Interrupted {
                        set_errno(refuse("ibv_get_cq_event", EINVAL, e));
                        return -1;
                    }
                    // rdma-core's read(2) fails with EINTR unless SA_RESTART.
                    if !crate::restart::restart_after_signal() {
                        set_errno(libc::EINTR);
                        return -1;
                    }
                }
            }
        };
        let Some(id) = id else {
            set_errno(EAGAIN);
            return -1;
        };
        // An event for a CQ destroyed since is skipped.
        if let Some(&p) = b.cqs().get(&id) {
            let c = p as *mut ibv_cq;
            // SAFETY: registered CQs are live until unregistered at destroy.
            unsafe {
                *cq = c;
                *cq_context = (*c).cq_context;
            }
            return 0;
        }
    }
}

/// `ibv_get_async_event`: waits for the next event (or `EAGAIN` at once on a
/// non-blocking `async_fd`); −1 with errno on error.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_async_event(
    context: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    let b = match ctx_block("ibv_get_async_event", context) {
        Ok(b) => b,
        Err(e) => {
            set_errno(e);
            return -1;
        }
    };
    if event.is_null() {
        set_errno(refuse("ibv_get_async_event", EINVAL, "event is NULL"));
        return -1;
    }
    loop {
        let ev = if nonblocking(b.v.context.async_fd) {
            raw::try_async_event(&b.ctx)
        } else {
            match b.ctx.get_async_event(None) {
                Ok(ev) => ev,
                Err(e) => {
                    set_errno(errno_of(&e));
                    return -1;
                }
            }
        };
        let Some(ev) = ev else {
            set_errno(EAGAIN);
            return -1;
        };
        let objects = b.objects();
        let element = match ev.kind {
            0 => objects.cqs.get(&ev.element),
            14 | 15 => objects.srqs.get(&ev.element),
            _ => objects.qps.get(&ev.element),
        };
        if let Some(&p) = element {
            // SAFETY: non-NULL out-pointer.
            unsafe {
                event.write(ibv_async_event {
                    element: p as *mut c_void,
                    event_type: ev.kind,
                })
            };
            return 0;
        }
        // Not an object of this context (or destroyed since): skip it.
    }
}

crate::symver!("context");

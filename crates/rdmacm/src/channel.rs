//! Event channels and events: `rdma_create_event_channel`,
//! `rdma_destroy_event_channel`, `rdma_get_cm_event`, `rdma_ack_cm_event`,
//! `rdma_event_str` (spec/rdmacm-abi.md §3.1).
//!
//! A channel's fd is an eventfd that is readable exactly while events are
//! queued (the count is 1 then, 0 when the queue is empty; both changes
//! happen under the queue lock), so `poll(2)` on it works as on the kernel's
//! `rdma_cm` fd. `rdma_get_cm_event` waits with poll(2) unless the program set
//! `O_NONBLOCK` on the fd, in which case an empty queue gives `EAGAIN`.

use crate::ffi::*;
use crate::util::*;
use std::cell::UnsafeCell;
use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, c_int};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex};

/// The event accounting of one id: events reported to it (taken off its
/// channel) and acked, for `rdma_destroy_id`'s and `rdma_migrate_id`'s wait.
#[derive(Default)]
pub(crate) struct Acks {
    /// (reported, acked).
    counts: Mutex<(u64, u64)>,
    acked: Condvar,
}

impl Acks {
    fn reported(&self) {
        lock(&self.counts).0 += 1;
    }

    fn completed(&self) {
        // Notify while the count is locked: once it is released, a waiting
        // rdma_destroy_id may see the counts equal and free the id.
        let mut c = lock(&self.counts);
        c.1 += 1;
        self.acked.notify_all();
        drop(c);
    }

    /// Waits until every event reported for the id has been acked.
    pub fn wait_acked(&self) {
        let mut c = lock(&self.counts);
        while c.1 < c.0 {
            c = self
                .acked
                .wait(c)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

/// The accounting of each live id, by `IdBlock` address: an id is tracked
/// from its creation until it is destroyed, so an event of an id destroyed
/// since counts nowhere.
static ACKS: Mutex<Option<HashMap<usize, Arc<Acks>>>> = Mutex::new(None);

/// Counts the events of the id at `id` on `acks` from now on.
pub(crate) fn track(id: usize, acks: Arc<Acks>) {
    lock(&ACKS)
        .get_or_insert_with(HashMap::new)
        .insert(id, acks);
}

/// Stops counting events of the id at `id` (it is being destroyed).
pub(crate) fn untrack(id: usize) {
    if let Some(m) = lock(&ACKS).as_mut() {
        m.remove(&id);
    }
}

/// The accounting of the id at `id`, if it is live.
fn acks_of(id: usize) -> Option<Arc<Acks>> {
    lock(&ACKS).as_ref().and_then(|m| m.get(&id).cloned())
}

/// An event waiting in a channel, for the id at `id` (an `IdBlock` address).
pub(crate) struct Pending {
    pub id: usize,
    pub listen_id: usize,
    pub event: u32,
    pub status: c_int,
    /// The event's parameters; their private data pointer is set on delivery.
    pub param: rdma_cm_event_param,
    pub private_data: Vec<u8>,
}

// SAFETY: the raw pointers inside `param` are NULL until delivery, or (a
// multicast event's) the program's own context pointer, never dereferenced here.
unsafe impl Send for Pending {}

impl Pending {
    /// The id whose event counts this event belongs to: a CONNECT_REQUEST's
    /// listener (rdma-core counts it there, so the new id can be destroyed
    /// before the event is acked, and the listener waits for the ack),
    /// otherwise the event's own id.
    fn owner(&self) -> usize {
        if self.listen_id != 0 {
            self.listen_id
        } else {
            self.id
        }
    }

    /// An event with no parameters.
    pub fn new(id: usize, event: u32, status: c_int) -> Pending {
        // SAFETY: all-zero is a valid parameter union (NULL pointers, zeros).
        let param = unsafe { std::mem::zeroed() };
        Pending {
            id,
            listen_id: 0,
            event,
            status,
            param,
            private_data: Vec::new(),
        }
    }
}

/// The queue behind a channel fd.
pub(crate) struct Channel {
    efd: OwnedFd,
    queue: Mutex<VecDeque<Pending>>,
}

impl Channel {
    fn new() -> Result<Arc<Channel>, c_int> {
        // SAFETY: plain eventfd(2); checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(errno());
        }
        // SAFETY: a new descriptor we own.
        let efd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Arc::new(Channel {
            efd,
            queue: Mutex::new(VecDeque::new()),
        }))
    }

    pub fn fd(&self) -> c_int {
        self.efd.as_raw_fd()
    }

    /// Makes the fd readable (count 0 → 1). Called with the queue lock held.
    fn raise(&self) {
        let one: u64 = 1;
        // SAFETY: writing 8 bytes to our eventfd; the count stays ≤ 1.
        unsafe { libc::write(self.fd(), (&raw const one).cast(), 8) };
    }

    /// Makes the fd unreadable (count 1 → 0). Called with the queue lock held
    /// when the queue was non-empty, so the count is 1 and read(2) returns at
    /// once even on a blocking fd.
    fn lower(&self) {
        let mut v: u64 = 0;
        // SAFETY: reading 8 bytes from our eventfd into a u64.
        unsafe { libc::read(self.fd(), (&raw mut v).cast(), 8) };
    }

    /// Queues an event.
    pub fn push(&self, p: Pending) {
        let mut q = lock(&self.queue);
        if q.is_empty() {
            self.raise();
        }
        q.push_back(p);
    }

    /// Removes and returns the queued events of one id (destroy, migrate).
    pub fn take_for(&self, id: usize) -> Vec<Pending> {
        let mut q = lock(&self.queue);
        let was = !q.is_empty();
        let (mine, rest): (VecDeque<_>, VecDeque<_>) =
            q.drain(..).partition(|p| p.id == id || p.listen_id == id);
        *q = rest;
        if was && q.is_empty() {
            self.lower();
        }
        mine.into()
    }

    /// The next event: counted as reported to its id under the queue lock (so
    /// a concurrent destroy either removes it or waits for its ack).
    fn pop(&self) -> Option<Pending> {
        let mut q = lock(&self.queue);
        let p = q.pop_front()?;
        if q.is_empty() {
            self.lower();
        }
        if let Some(a) = acks_of(p.owner()) {
            a.reported();
        }
        Some(p)
    }

    /// Waits for the next event; `EAGAIN` if none and the fd is non-blocking.
    pub fn next(&self) -> Result<Pending, c_int> {
        loop {
            if let Some(p) = self.pop() {
                return Ok(p);
            }
            // SAFETY: F_GETFL on our fd.
            let flags = unsafe { libc::fcntl(self.fd(), libc::F_GETFL) };
            if flags >= 0 && flags & libc::O_NONBLOCK != 0 {
                return Err(libc::EAGAIN);
            }
            let mut pfd = libc::pollfd {
                fd: self.fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            if unsafe { libc::poll(&raw mut pfd, 1, -1) } < 0 {
                let e = errno();
                // rdma-core's write(2) to the rdma_cm file fails with EINTR
                // unless the handler has SA_RESTART.
                if e != libc::EINTR || !crate::restart::restart_after_signal() {
                    return Err(e);
                }
            }
        }
    }
}

/// What C holds: `struct rdma_event_channel` and the queue behind it.
#[repr(C)]
pub(crate) struct ChannelBlock {
    c: rdma_event_channel,
    pub ch: Arc<Channel>,
}

static CHANNELS: Registry = Registry::new("event channel");
static EVENTS: Registry = Registry::new("event");

/// A new channel block, registered; C sees `*mut rdma_event_channel`.
pub(crate) fn new_channel(verb: &str) -> Result<*mut rdma_event_channel, c_int> {
    let ch = Channel::new().map_err(|e| refuse(verb, e, "eventfd(2) failed"))?;
    let b = Box::into_raw(Box::new(ChannelBlock {
        c: rdma_event_channel { fd: ch.fd() },
        ch,
    }));
    CHANNELS.insert(b);
    Ok(b.cast::<rdma_event_channel>())
}

/// The queue of a live channel.
pub(crate) fn channel_of(verb: &str, p: *mut rdma_event_channel) -> Result<Arc<Channel>, c_int> {
    CHANNELS.check(verb, p)?;
    // SAFETY: registered, so a live ChannelBlock.
    Ok(unsafe { (*(p as *const ChannelBlock)).ch.clone() })
}

/// Frees a channel block (the queue lives on while ids still hold it).
pub(crate) fn free_channel(p: *mut rdma_event_channel) {
    if CHANNELS.remove(p) {
        // SAFETY: registered until now, made by `new_channel`.
        drop(unsafe { Box::from_raw(p.cast::<ChannelBlock>()) });
    }
}

/// A delivered event: `struct rdma_cm_event` and the private data it points to.
#[repr(C)]
struct EventBlock {
    c: UnsafeCell<rdma_cm_event>,
    /// The id the ack is counted on ([`Pending::owner`]).
    id: usize,
    private_data: Vec<u8>,
}

/// Hands an event to C: allocates and registers its block.
fn deliver(p: Pending) -> *mut rdma_cm_event {
    let b = Box::new(EventBlock {
        c: UnsafeCell::new(rdma_cm_event {
            id: p.id as *mut rdma_cm_id,
            listen_id: p.listen_id as *mut rdma_cm_id,
            event: p.event,
            status: p.status,
            param: p.param,
        }),
        id: p.owner(),
        private_data: p.private_data,
    });
    let raw = Box::into_raw(b);
    // SAFETY: just made; the private data buffer lives as long as the block.
    unsafe {
        let b = &*raw;
        if !b.private_data.is_empty() {
            (*b.c.get()).param.conn.private_data = b.private_data.as_ptr().cast();
        }
    }
    EVENTS.insert(raw);
    raw.cast::<rdma_cm_event>()
}

/// Waits for and delivers the next event of `ch` (`rdma_get_cm_event`'s body).
pub(crate) fn get_event(ch: &Channel) -> Result<*mut rdma_cm_event, c_int> {
    let p = ch.next()?;
    Ok(deliver(p))
}

/// Acks a delivered event (`rdma_ack_cm_event`'s body).
pub(crate) fn ack_event(verb: &str, event: *mut rdma_cm_event) -> Result<(), c_int> {
    EVENTS.check(verb, event)?;
    // Two threads acking one event both pass the check: only the one that
    // takes it out of the registry may free it.
    if !EVENTS.remove(event) {
        tracing::warn!(target: "softverbs", "{verb}: event {event:p} was acked already");
        return Err(libc::EINVAL);
    }
    // SAFETY: registered until now (we removed it), made by `deliver`.
    let b = unsafe { Box::from_raw(event.cast::<EventBlock>()) };
    if let Some(a) = acks_of(b.id) {
        a.completed();
    }
    Ok(())
}

/// `struct rdma_event_channel *rdma_create_event_channel(void)`.
#[no_mangle]
pub extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    init_log();
    // Opening the devices here, as rdma-core's ucma_init does, reports a
    // missing device at the first call.
    if let Err(e) = crate::device::devices("rdma_create_event_channel") {
        set_errno(e);
        return std::ptr::null_mut();
    }
    new_channel("rdma_create_event_channel").unwrap_or_else(|e| {
        set_errno(e);
        std::ptr::null_mut()
    })
}

/// `void rdma_destroy_event_channel(struct rdma_event_channel *channel)`.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
    if CHANNELS
        .check("rdma_destroy_event_channel", channel)
        .is_ok()
    {
        free_channel(channel);
    }
}

/// `int rdma_get_cm_event(struct rdma_event_channel *, struct rdma_cm_event **)`.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_cm_event(
    channel: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    const VERB: &str = "rdma_get_cm_event";
    let r = channel_of(VERB, channel).and_then(|ch| {
        if event.is_null() {
            return Err(refuse(VERB, libc::EINVAL, "the event out-pointer is NULL"));
        }
        let e = get_event(&ch)?;
        // SAFETY: non-NULL out-pointer from the caller.
        unsafe { *event = e };
        Ok(())
    });
    ret(r)
}

/// `int rdma_ack_cm_event(struct rdma_cm_event *event)`.
#[no_mangle]
pub unsafe extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    ret(ack_event("rdma_ack_cm_event", event))
}

/// `const char *rdma_event_str(enum rdma_cm_event_type event)`.
#[no_mangle]
pub extern "C" fn rdma_event_str(event: u32) -> *const c_char {
    static NAMES: OnceLockNames = OnceLockNames::new();
    NAMES.get(event)
}

/// The event names as NUL-terminated C strings, made once.
struct OnceLockNames(std::sync::OnceLock<Vec<std::ffi::CString>>);

impl OnceLockNames {
    const fn new() -> Self {
        OnceLockNames(std::sync::OnceLock::new())
    }

    fn get(&self, event: u32) -> *const c_char {
        let names = self.0.get_or_init(|| {
            EVENT_NAMES
                .iter()
                .chain(["UNKNOWN EVENT"].iter())
                .map(|n| std::ffi::CString::new(*n).expect("no NUL in the names"))
                .collect()
        });
        let i = (event as usize).min(EVENT_NAMES.len());
        names[i].as_ptr()
    }
}

crate::symver!("channel");

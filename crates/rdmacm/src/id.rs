//! Ids: `rdma_create_id`, binding (`rdma_bind_addr` is in conn.rs, as is
//! `rdma_destroy_id`: both tell the CM),
//! `rdma_set_option`, `rdma_migrate_id`, `rdma_get_src_port`/`dst_port`,
//! `rdma_set_local_ece`/`rdma_get_remote_ece`, and what the other modules
//! share about an id: its state, device, port, options and event accounting
//! (spec/rdmacm-abi.md §3.1–3.3).

use crate::channel::{self, Acks, Channel, Pending};
use crate::device::{self, Dev};
use crate::ffi::*;
use crate::net;
use crate::ports::{Owner, PortTable};
use crate::util::*;
use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

/// The CM states an id passes through here (kernel `enum rdma_cm_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    Idle,
    AddrQuery,
    AddrResolved,
    RouteResolved,
    AddrBound,
    Listen,
    /// A REQ sent, or a request taken (kernel RDMA_CM_CONNECT).
    Connect,
}

/// `rdma_set_option` values.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Options {
    pub tos: Option<u8>,
    pub reuseaddr: bool,
    pub afonly: Option<bool>,
    pub ack_timeout: Option<u8>,
}

/// What an id holds besides its C struct.
pub(crate) struct IdState {
    pub channel: Arc<Channel>,
    /// Synchronous mode: the private channel block to free with the id.
    pub sync_channel: Option<*mut rdma_event_channel>,
    pub state: State,
    pub dev: Option<&'static Dev>,
    pub bound: bool,
    pub opts: Options,
    pub path: Option<Box<ibv_sa_path_rec>>,
    /// The QP attributes `rdma_create_ep(RAI_PASSIVE)` keeps for requests.
    pub passive_qp_attr: Option<Box<ibv_qp_init_attr>>,
    /// The private data `rdma_create_ep` keeps for `rdma_connect`.
    pub connect_data: Vec<u8>,
    pub local_ece: ibv_ece,
    pub remote_ece: ibv_ece,
}

/// An id: `struct rdma_cm_id` first, as C sees it.
#[repr(C)]
pub(crate) struct IdBlock {
    c: UnsafeCell<rdma_cm_id>,
    st: Mutex<IdState>,
    /// Its events, reported and acked, for `rdma_destroy_id`'s wait.
    acks: Arc<Acks>,
}

// SAFETY: the C struct is written only under `st`'s lock (C reads it as the
// API allows); everything else is behind mutexes.
unsafe impl Send for IdBlock {}
// SAFETY: as above.
unsafe impl Sync for IdBlock {}

static IDS: Registry = Registry::new("rdma_cm_id");
static PORTS: Mutex<Option<PortTable>> = Mutex::new(None);

/// The id block at `addr`, if live.
pub(crate) fn live(addr: usize) -> Option<&'static IdBlock> {
    let p = addr as *const IdBlock;
    // SAFETY: registered, so a live IdBlock; freed only after leaving the registry.
    IDS.contains(p).then(|| unsafe { &*p })
}

/// The id block behind a C pointer: `EINVAL` (logged) unless live.
pub(crate) fn id_block(verb: &str, p: *mut rdma_cm_id) -> Result<&'static IdBlock, c_int> {
    IDS.check(verb, p)?;
    // SAFETY: registered, so a live IdBlock.
    Ok(unsafe { &*(p as *const IdBlock) })
}

impl IdBlock {
    /// The pointer C holds.
    pub fn c(&self) -> *mut rdma_cm_id {
        self.c.get()
    }

    pub fn addr(&self) -> usize {
        std::ptr::from_ref::<IdBlock>(self) as usize
    }

    /// Locks the id; the C struct may be written through [`IdBlock::c`] while held.
    pub fn lock(&self) -> MutexGuard<'_, IdState> {
        lock(&self.st)
    }

    /// The port space and QP type.
    pub fn ps(&self) -> u32 {
        // SAFETY: `ps` never changes after creation.
        unsafe { (*self.c()).ps }
    }

    pub fn qp_type(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.c()).qp_type }
    }

    /// The source and destination addresses (AF_UNSPEC: `None`).
    pub fn src(&self) -> Option<(IpAddr, u16)> {
        // SAFETY: read under the caller's lock or by the owner thread.
        net::from_storage(unsafe { &(*self.c()).route.addr.src })
    }

    pub fn dst(&self) -> Option<(IpAddr, u16)> {
        // SAFETY: as above.
        net::from_storage(unsafe { &(*self.c()).route.addr.dst })
    }

    /// Attaches the id to a device: `verbs`, `port_num`, `pd`, `ibaddr.sgid`
    /// (rdma-core `ucma_get_device`).
    pub fn attach(
        &self,
        st: &mut IdState,
        dev: &'static Dev,
        src: IpAddr,
        verb: &str,
    ) -> Result<(), c_int> {
        let pd = dev.pd(verb)?;
        // SAFETY: under the id's lock.
        let c = unsafe { &mut *self.c() };
        c.verbs = dev.ctx;
        c.port_num = 1;
        c.pd = pd;
        c.route.addr.ibaddr.sgid.raw = net::gid_of(src);
        c.route.addr.ibaddr.pkey = 0xffff_u16.to_be();
        st.dev = Some(dev);
        Ok(())
    }

    /// Queues an event for this id on its channel.
    pub fn post(&self, st: &IdState, event: u32, status: c_int) {
        st.channel.push(Pending::new(self.addr(), event, status));
    }

    /// Synchronous mode: waits for this id's next event (rdma-core
    /// `ucma_complete`): acks the previous one, keeps the new one in
    /// `id->event`, and turns an error status into the call's errno.
    pub fn complete(&self, verb: &str) -> Result<(), c_int> {
        let ch = {
            let st = self.lock();
            if st.sync_channel.is_none() {
                return Ok(());
            }
            st.channel.clone()
        };
        // SAFETY: the id's own field, touched by its owner thread in sync mode.
        let prev = unsafe { std::mem::replace(&mut (*self.c()).event, std::ptr::null_mut()) };
        if !prev.is_null() {
            channel::ack_event(verb, prev)?;
        }
        let ev = channel::get_event(&ch)?;
        // SAFETY: as above; `ev` is a delivered event.
        let (kind, status) = unsafe {
            (*self.c()).event = ev;
            ((*ev).event, (*ev).status)
        };
        match status {
            0 => Ok(()),
            _ if kind == RDMA_CM_EVENT_REJECTED => Err(libc::ECONNREFUSED),
            s => Err(s.abs()),
        }
    }
}

/// `rdma_create_id2`'s body: a new id on `channel` (NULL: synchronous).
pub(crate) fn create(
    verb: &str,
    channel: *mut rdma_event_channel,
    context: *mut c_void,
    ps: u32,
    qp_type: u32,
) -> Result<*mut rdma_cm_id, c_int> {
    device::devices(verb)?;
    // Kernel ucma.c `ucma_get_qp_type`.
    let qp_type = match ps {
        RDMA_PS_TCP => IBV_QPT_RC,
        RDMA_PS_UDP | RDMA_PS_IPOIB => IBV_QPT_UD,
        RDMA_PS_IB => qp_type,
        _ => {
            return Err(refuse(
                verb,
                libc::EINVAL,
                format_args!(
                "port space {ps:#x} is not RDMA_PS_TCP, RDMA_PS_UDP, RDMA_PS_IPOIB or RDMA_PS_IB"
            ),
            ))
        }
    };
    let (channel, sync_channel) = if channel.is_null() {
        let p = channel::new_channel(verb)?;
        (p, Some(p))
    } else {
        (channel, None)
    };
    let ch = channel::channel_of(verb, channel)?;
    // SAFETY: all-zero is a valid rdma_cm_id (NULL pointers, AF_UNSPEC addresses).
    let mut c: rdma_cm_id = unsafe { std::mem::zeroed() };
    c.channel = channel;
    c.context = context;
    c.ps = ps;
    c.qp_type = qp_type;
    let b = Box::new(IdBlock {
        c: UnsafeCell::new(c),
        st: Mutex::new(IdState {
            channel: ch,
            sync_channel,
            state: State::Idle,
            dev: None,
            bound: false,
            opts: Options::default(),
            path: None,
            passive_qp_attr: None,
            connect_data: Vec::new(),
            local_ece: ibv_ece::default(),
            remote_ece: ibv_ece::default(),
        }),
        acks: Arc::default(),
    });
    let acks = Arc::clone(&b.acks);
    let raw = Box::into_raw(b);
    channel::track(raw as usize, acks);
    IDS.insert(raw);
    Ok(raw.cast::<rdma_cm_id>())
}

/// Sync mode: acks the id's own last event (rdma-core does so in
/// `rdma_destroy_id`).
pub(crate) fn ack_own_event(verb: &str, b: &IdBlock) {
    // SAFETY: the caller owns the id.
    let ev = unsafe { std::mem::replace(&mut (*b.c()).event, std::ptr::null_mut()) };
    if !ev.is_null() {
        let _ = channel::ack_event(verb, ev);
    }
}

/// The end of `rdma_destroy_id` (conn.rs), once the CM has forgotten the id:
/// its queued events are discarded, delivered ones waited for until acked,
/// its port released, its block (and a sync id's channel) freed.
///
/// # Safety
/// `p` is a live id, not used again.
pub(crate) unsafe fn free(p: *mut rdma_cm_id) {
    // SAFETY: per the contract, a live IdBlock.
    let b = unsafe { &*(p as *const IdBlock) };
    let ch = b.lock().channel.clone();
    // Queued events are discarded; delivered ones must be acked first.
    drop(ch.take_for(b.addr()));
    b.acks.wait_acked();
    IDS.remove(p);
    channel::untrack(b.addr());
    release_port(b);
    let st = b.lock();
    if let Some(sc) = st.sync_channel {
        channel::free_channel(sc);
    }
    drop(st);
    // SAFETY: made by `create`, unregistered above.
    drop(unsafe { Box::from_raw(p.cast::<IdBlock>()) });
}

fn ports() -> MutexGuard<'static, Option<PortTable>> {
    lock(&PORTS)
}

pub(crate) fn release_port(b: &IdBlock) {
    if let Some(t) = ports().as_mut() {
        t.release(b.addr());
    }
}

/// Marks the id's port listening (kernel `cma_bind_listen`).
pub(crate) fn listen_port(verb: &str, b: &IdBlock) -> Result<(), c_int> {
    ports()
        .get_or_insert_with(PortTable::default)
        .listen(b.addr())
        .map_err(|e| refuse(verb, e.errno(), e))
}

/// Undoes [`listen_port`] when the listen fails.
pub(crate) fn unlisten_port(b: &IdBlock) {
    if let Some(t) = ports().as_mut() {
        t.unlisten(b.addr());
    }
}

/// A random start for the ephemeral port search (`cma_alloc_any_port`).
fn random_start(low: u16, high: u16) -> u16 {
    let mut v: u32 = 0;
    // SAFETY: getrandom(2) into a u32; on failure the time is used.
    let n = unsafe { libc::getrandom((&raw mut v).cast::<c_void>(), 4, libc::GRND_NONBLOCK) };
    if n != 4 {
        v = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
    }
    low + (v % (u32::from(high - low) + 1)) as u16
}

/// `rdma_bind_addr`'s body (kernel `rdma_bind_addr`), with the state check
/// already done by the caller when it binds implicitly: the device bound to
/// (`None`: the wildcard) and the port. The CM is told in `conn::bind`.
pub(crate) fn bind(
    verb: &str,
    b: &IdBlock,
    st: &mut IdState,
    ip: IpAddr,
    port: u16,
) -> Result<(Option<&'static Dev>, u16), c_int> {
    if st.state != State::Idle {
        return Err(refuse(
            verb,
            libc::EINVAL,
            format_args!(
                "the id is not idle (state {:?}): it is bound already",
                st.state
            ),
        ));
    }
    let dev = if ip.is_unspecified() {
        None
    } else {
        match device::owning(verb, &ip)? {
            Some(d) => Some(d),
            None if net::is_host_addr(ip) => {
                return Err(refuse(verb, libc::ENODEV, format_args!("{ip} is an address of this host but no softverbs device has it (SOFTVERBS_ADDR sets a device's addresses)")))
            }
            None => {
                return Err(refuse(verb, libc::EADDRNOTAVAIL, format_args!("{ip} is not an address of this host")))
            }
        }
    };
    if port != 0 && port < 1024 && !net_bind_service_capable() {
        return Err(refuse(
            verb,
            libc::EACCES,
            format_args!("port {port} is below 1024 and the process lacks CAP_NET_BIND_SERVICE"),
        ));
    }
    let afonly = st.opts.afonly.unwrap_or(ip.is_ipv4() || bindv6only());
    let owner = Owner {
        key: b.addr(),
        addr: ip,
        reuse: st.opts.reuseaddr,
        afonly,
        listening: false,
    };
    let (low, high) = net::local_port_range();
    let port = ports()
        .get_or_insert_with(PortTable::default)
        .bind(b.ps(), port, owner, (low, high), random_start(low, high))
        .map_err(|e| refuse(verb, e.errno(), e))?;
    if let Some(d) = dev {
        if let Err(e) = b.attach(st, d, ip, verb) {
            release_port(b);
            return Err(e);
        }
    }
    // SAFETY: under the id's lock.
    unsafe {
        let c = &mut *b.c();
        c.route.addr.src = net::to_storage(ip, port);
        // The destination takes the family (kernel: `daddr->sa_family = addr->sa_family`).
        c.route.addr.dst.ss_family = c.route.addr.src.ss_family;
    }
    st.opts.afonly = Some(afonly);
    st.bound = true;
    st.state = State::AddrBound;
    Ok((dev, port))
}

/// Whether the process may bind ports below 1024 (CAP_NET_BIND_SERVICE in
/// the effective set, from /proc/self/status).
fn net_bind_service_capable() -> bool {
    const CAP_NET_BIND_SERVICE: u32 = 10;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("CapEff:"))?;
            u64::from_str_radix(line.split_whitespace().nth(1)?, 16).ok()
        })
        .is_some_and(|caps| caps & (1 << CAP_NET_BIND_SERVICE) != 0)
}

/// `net.ipv6.bindv6only`.
fn bindv6only() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv6/bindv6only").is_ok_and(|s| s.trim() == "1")
}

/// `int rdma_create_id(struct rdma_event_channel *, struct rdma_cm_id **, void *context, enum rdma_port_space)`.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: u32,
) -> c_int {
    const VERB: &str = "rdma_create_id";
    init_log();
    if id.is_null() {
        return fail(refuse(VERB, libc::EINVAL, "the id out-pointer is NULL"));
    }
    // rdma-core `rdma_create_id`: UD for UDP/IPoIB, RC otherwise.
    let qp_type = if ps == RDMA_PS_IPOIB || ps == RDMA_PS_UDP {
        IBV_QPT_UD
    } else {
        IBV_QPT_RC
    };
    match create(VERB, channel, context, ps, qp_type) {
        Ok(p) => {
            // SAFETY: non-NULL out-pointer.
            unsafe { *id = p };
            0
        }
        Err(e) => fail(e),
    }
}

/// `int rdma_set_option(struct rdma_cm_id *, int level, int optname, void *optval, size_t optlen)`.
#[no_mangle]
pub unsafe extern "C" fn rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: usize,
) -> c_int {
    const VERB: &str = "rdma_set_option";
    let r = id_block(VERB, id).and_then(|b| {
        if optval.is_null() {
            return Err(refuse(VERB, libc::EINVAL, "optval is NULL"));
        }
        // SAFETY: the caller's buffer of `optlen` bytes, read after the size check.
        let read_u8 = || (optlen == 1).then(|| unsafe { *(optval as *const u8) });
        // SAFETY: as above.
        let read_int = || (optlen == 4).then(|| unsafe { *(optval as *const c_int) });
        let bad_len = |what: &str| refuse(VERB, libc::EINVAL, format_args!("{what} takes {}, not {optlen} bytes", if what.contains("TOS") || what.contains("ACK") { "a uint8_t" } else { "an int" }));
        let mut st = b.lock();
        // Kernel ucma.c `ucma_set_option_id`, cma.c `rdma_set_*`.
        match (level, optname) {
            (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS) => st.opts.tos = Some(read_u8().ok_or_else(|| bad_len("RDMA_OPTION_ID_TOS"))?),
            (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR) => {
                let v = read_int().ok_or_else(|| bad_len("RDMA_OPTION_ID_REUSEADDR"))?;
                if st.state != State::Idle && !(st.state == State::AddrBound && st.opts.reuseaddr == (v != 0)) {
                    return Err(refuse(VERB, libc::EINVAL, "REUSEADDR can change only before the id is bound"));
                }
                st.opts.reuseaddr = v != 0;
            }
            (RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY) => {
                let v = read_int().ok_or_else(|| bad_len("RDMA_OPTION_ID_AFONLY"))?;
                if st.state != State::Idle {
                    return Err(refuse(VERB, libc::EINVAL, "AFONLY can change only before the id is bound"));
                }
                st.opts.afonly = Some(v != 0);
            }
            (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) => st.opts.ack_timeout = Some(read_u8().ok_or_else(|| bad_len("RDMA_OPTION_ID_ACK_TIMEOUT"))?),
            (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH) => {
                return Err(refuse(VERB, libc::ENOSYS, "RDMA_OPTION_IB_PATH (a path record from an SA, InfiniBand) is not offered: RoCE routes come from rdma_resolve_route"))
            }
            _ => return Err(refuse(VERB, libc::ENOSYS, format_args!("no option {optname} at level {level} in rdma-core 44"))),
        }
        Ok(())
    });
    ret(r)
}

/// `int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)`.
#[no_mangle]
pub unsafe extern "C" fn rdma_migrate_id(
    id: *mut rdma_cm_id,
    channel: *mut rdma_event_channel,
) -> c_int {
    const VERB: &str = "rdma_migrate_id";
    let r = id_block(VERB, id).and_then(|b| {
        let was_sync = b.lock().sync_channel;
        if was_sync.is_some() && channel.is_null() {
            return Err(refuse(VERB, libc::EINVAL, "the id is synchronous already"));
        }
        let (new, new_sync) = if channel.is_null() {
            let p = channel::new_channel(VERB)?;
            (p, Some(p))
        } else {
            (channel, None)
        };
        let ch = match channel::channel_of(VERB, new) {
            Ok(c) => c,
            Err(e) => return Err(e),
        };
        if was_sync.is_some() {
            // SAFETY: the caller owns the id.
            let ev = unsafe { std::mem::replace(&mut (*b.c()).event, std::ptr::null_mut()) };
            if !ev.is_null() {
                channel::ack_event(VERB, ev)?;
            }
        }
        let mut st = b.lock();
        // The id's queued events move with it (kernel `ucma_move_events`).
        for p in st.channel.take_for(b.addr()) {
            ch.push(p);
        }
        st.channel = ch;
        st.sync_channel = new_sync;
        // SAFETY: under the id's lock.
        unsafe { (*b.c()).channel = new };
        drop(st);
        if let Some(old) = was_sync {
            channel::free_channel(old);
        }
        b.acks.wait_acked();
        Ok(())
    });
    ret(r)
}

/// `__be16 rdma_get_src_port(struct rdma_cm_id *id)`: 0 for a bad id.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    id_block("rdma_get_src_port", id)
        .ok()
        .and_then(IdBlock::src)
        .map_or(0, |(_, p)| p.to_be())
}

/// `__be16 rdma_get_dst_port(struct rdma_cm_id *id)`: 0 for a bad id.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    id_block("rdma_get_dst_port", id)
        .ok()
        .and_then(IdBlock::dst)
        .map_or(0, |(_, p)| p.to_be())
}

/// `int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)`.
#[no_mangle]
pub unsafe extern "C" fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    const VERB: &str = "rdma_set_local_ece";
    let r = id_block(VERB, id).and_then(|b| {
        // SAFETY: the caller owns the id.
        if ece.is_null() || !unsafe { (*b.c()).qp }.is_null() {
            return Err(refuse(
                VERB,
                libc::EINVAL,
                "ece is NULL or the id has a QP already",
            ));
        }
        // SAFETY: non-NULL ece from the caller.
        b.lock().local_ece = unsafe { *ece };
        Ok(())
    });
    ret(r)
}

/// `int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)`.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    const VERB: &str = "rdma_get_remote_ece";
    let r = id_block(VERB, id).and_then(|b| {
        // SAFETY: the caller owns the id.
        if ece.is_null() || !unsafe { (*b.c()).qp }.is_null() {
            return Err(refuse(
                VERB,
                libc::EINVAL,
                "ece is NULL or the id has a QP already",
            ));
        }
        let remote = b.lock().remote_ece;
        // SAFETY: non-NULL ece from the caller.
        unsafe {
            (*ece).vendor_id = remote.vendor_id;
            (*ece).options = remote.options;
        }
        Ok(())
    });
    ret(r)
}

crate::symver!("id");

//! The RDMA devices of the process, as the CM sees them: each opened once
//! (through libibverbs, so `id->verbs` is the context programs use), with its
//! addresses (from the private interface) and a PD shared by its ids
//! (rdma-core `ucma_init`, `ucma_get_pd`). Kept for the life of the process.
//! Also `rdma_get_devices` / `rdma_free_devices`.

use crate::ffi::*;
use crate::net::is_loopback;
use crate::util::*;
use crate::verbs;
use std::ffi::c_int;
use std::net::IpAddr;
use std::sync::{Mutex, OnceLock};

/// One device: its open context, addresses and shared PD.
pub(crate) struct Dev {
    pub ctx: *mut ibv_context,
    /// The addresses, GID index order (one per GID).
    pub addrs: Vec<IpAddr>,
    pd: Mutex<usize>,
}

// SAFETY: the context pointer is a libibverbs object usable from any thread;
// the PD slot is behind a mutex.
unsafe impl Send for Dev {}
// SAFETY: as above.
unsafe impl Sync for Dev {}

impl Dev {
    /// The device's PD shared by its ids, allocated on first use.
    pub fn pd(&self, verb: &str) -> Result<*mut ibv_pd, c_int> {
        let mut pd = lock(&self.pd);
        if *pd == 0 {
            // SAFETY: `ctx` is an open context.
            let p = unsafe { verbs::ibv_alloc_pd(self.ctx) };
            if p.is_null() {
                return Err(refuse(
                    verb,
                    errno(),
                    "ibv_alloc_pd failed for the device's shared PD",
                ));
            }
            *pd = p as usize;
        }
        Ok(*pd as *mut ibv_pd)
    }

    /// Whether the device sits on loopback.
    pub fn on_loopback(&self) -> bool {
        self.addrs.iter().any(is_loopback)
    }

    /// The device address of `ip`'s family to use as a source: the first.
    pub fn addr_for(&self, dst: &IpAddr) -> Option<IpAddr> {
        self.addrs
            .iter()
            .find(|a| a.is_ipv4() == dst.is_ipv4())
            .copied()
    }
}

/// The devices, opened on first use (`ucma_init`); an error is kept.
pub(crate) fn devices(verb: &str) -> Result<&'static [Dev], c_int> {
    static DEVICES: OnceLock<Result<Vec<Dev>, c_int>> = OnceLock::new();
    init_log();
    DEVICES
        .get_or_init(|| open_all(verb))
        .as_deref()
        .map_err(|e| *e)
}

fn open_all(verb: &str) -> Result<Vec<Dev>, c_int> {
    // SAFETY: a plain call; the loader guaranteed the symbol exists.
    let version = unsafe { verbs::softverbs_private_version() };
    if version != verbs::PRIVATE_VERSION {
        return Err(refuse(
            verb,
            libc::ENODEV,
            format_args!(
                "libibverbs.so.1 offers softverbs private interface {version}, this library needs {}",
                verbs::PRIVATE_VERSION
            ),
        ));
    }
    let mut n: c_int = 0;
    // SAFETY: valid out-pointer.
    let list = unsafe { verbs::ibv_get_device_list(&raw mut n) };
    if list.is_null() {
        return Err(refuse(verb, errno(), "ibv_get_device_list failed"));
    }
    let mut devs = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: the list holds `n` device pointers.
        let ctx = unsafe { verbs::ibv_open_device(*list.add(i)) };
        if ctx.is_null() {
            tracing::warn!(target: "softverbs", "{verb}: device {i} does not open (errno {}); skipped", errno());
            continue;
        }
        devs.push(Dev {
            ctx,
            addrs: addrs_of(ctx),
            pd: Mutex::new(0),
        });
    }
    // SAFETY: from ibv_get_device_list; the contexts stay open.
    unsafe { verbs::ibv_free_device_list(list) };
    if devs.is_empty() {
        return Err(refuse(verb, libc::ENODEV, "no RDMA device opens"));
    }
    Ok(devs)
}

/// The addresses behind the device's GIDs, in GID order.
fn addrs_of(ctx: *mut ibv_context) -> Vec<IpAddr> {
    let mut addrs = Vec::new();
    for index in 0..256 {
        // SAFETY: all-zero is a valid sockaddr_storage.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        // SAFETY: an open context and a valid out-pointer.
        if unsafe { verbs::softverbs_query_addr(ctx, 1, index, &raw mut ss) } != 0 {
            break;
        }
        if let Some((ip, _)) = crate::net::from_storage(&ss) {
            addrs.push(ip);
        }
    }
    addrs
}

/// The device that owns `ip`.
pub(crate) fn owning(verb: &str, ip: &IpAddr) -> Result<Option<&'static Dev>, c_int> {
    Ok(devices(verb)?.iter().find(|d| d.addrs.contains(ip)))
}

/// The device on loopback, if any.
pub(crate) fn on_loopback(verb: &str) -> Result<Option<&'static Dev>, c_int> {
    Ok(devices(verb)?.iter().find(|d| d.on_loopback()))
}

/// `struct ibv_context **rdma_get_devices(int *num_devices)`: a NULL-terminated
/// array of the contexts (the ones ids use), freed by `rdma_free_devices`.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut ibv_context {
    let devs = match devices("rdma_get_devices") {
        Ok(d) => d,
        Err(e) => {
            set_errno(e);
            if !num_devices.is_null() {
                // SAFETY: the caller's out-pointer.
                unsafe { *num_devices = 0 };
            }
            return std::ptr::null_mut();
        }
    };
    // SAFETY: calloc of (n+1) pointers; checked below.
    let list = unsafe { libc::calloc(devs.len() + 1, std::mem::size_of::<*mut ibv_context>()) }
        .cast::<*mut ibv_context>();
    if list.is_null() {
        set_errno(libc::ENOMEM);
        return list;
    }
    for (i, d) in devs.iter().enumerate() {
        // SAFETY: i < n+1 slots.
        unsafe { *list.add(i) = d.ctx };
    }
    if !num_devices.is_null() {
        // SAFETY: the caller's out-pointer.
        unsafe { *num_devices = devs.len() as c_int };
    }
    list
}

/// `void rdma_free_devices(struct ibv_context **list)`.
#[no_mangle]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    // SAFETY: NULL or the array rdma_get_devices calloc'ed.
    unsafe { libc::free(list.cast::<libc::c_void>()) };
}

crate::symver!("device");

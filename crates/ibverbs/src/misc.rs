//! The helpers of the public ABI that need no device: strings, rate
//! conversions, sysfs reads, fork support, and the features softverbs does
//! not offer (multicast, import, dma-buf), refused with `EOPNOTSUPP`.

use crate::util::*;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

/// `ibv_wc_status_str`: rdma-core's words for each status.
#[no_mangle]
pub extern "C" fn ibv_wc_status_str(status: u32) -> *const c_char {
    static STRS: OnceLock<Vec<CString>> = OnceLock::new();
    let strs = STRS.get_or_init(|| {
        proto::wc::WC_STATUSES
            .iter()
            .map(|r| CString::new(r.2).expect("no NUL in status text"))
            .collect()
    });
    match proto::wc::WcStatus::from_raw(status) {
        Some(s) => strs[s as usize].as_ptr(),
        None => c"unknown".as_ptr(),
    }
}

const EVENT_STRS: [&CStr; 20] = [
    c"CQ error",
    c"local work queue catastrophic error",
    c"invalid request local work queue error",
    c"local access violation work queue error",
    c"communication established",
    c"send queue drained",
    c"path migrated",
    c"path migration request error",
    c"local catastrophic error",
    c"port active",
    c"port error",
    c"LID change",
    c"P_Key change",
    c"SM change",
    c"SRQ catastrophic error",
    c"SRQ limit reached",
    c"last WQE reached",
    c"client reregistration",
    c"GID table change",
    c"WQ fatal",
];

#[no_mangle]
pub extern "C" fn ibv_event_type_str(event: u32) -> *const c_char {
    EVENT_STRS
        .get(event as usize)
        .copied()
        .unwrap_or(c"unknown")
        .as_ptr()
}

#[no_mangle]
pub extern "C" fn ibv_node_type_str(node_type: c_int) -> *const c_char {
    const S: [&CStr; 7] = [
        c"InfiniBand channel adapter",
        c"InfiniBand switch",
        c"InfiniBand router",
        c"iWARP NIC",
        c"usNIC",
        c"usNIC UDP",
        c"unspecified",
    ];
    let i = usize::try_from(node_type - 1).ok();
    i.and_then(|i| S.get(i))
        .copied()
        .unwrap_or(c"unknown")
        .as_ptr()
}

#[no_mangle]
pub extern "C" fn ibv_port_state_str(state: u32) -> *const c_char {
    const S: [&CStr; 6] = [
        c"no state change (NOP)",
        c"down",
        c"init",
        c"armed",
        c"active",
        c"active defer",
    ];
    S.get(state as usize)
        .copied()
        .unwrap_or(c"unknown")
        .as_ptr()
}

/// `enum ibv_rate`, its multiple of 2.5 Gb/s (0: none) and its Mb/s.
const RATES: [(c_int, c_int, c_int); 21] = [
    (2, 1, 2500),
    (5, 2, 5000),
    (3, 4, 10000),
    (6, 8, 20000),
    (4, 12, 30000),
    (7, 16, 40000),
    (8, 24, 60000),
    (9, 32, 80000),
    (10, 48, 120000),
    (11, 0, 14062),
    (12, 0, 56250),
    (13, 0, 112500),
    (14, 0, 168750),
    (15, 0, 25781),
    (16, 0, 103125),
    (17, 0, 206250),
    (18, 0, 309375),
    (19, 0, 28125),
    (20, 0, 53125),
    (21, 0, 425000),
    (22, 0, 637500),
];
/// `IBV_RATE_MAX`.
const RATE_MAX: c_int = 0;

#[no_mangle]
pub extern "C" fn ibv_rate_to_mult(rate: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.0 == rate && r.1 != 0)
        .map_or(-1, |r| r.1)
}

#[no_mangle]
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.1 == mult && mult != 0)
        .map_or(RATE_MAX, |r| r.0)
}

#[no_mangle]
pub extern "C" fn ibv_rate_to_mbps(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}

#[no_mangle]
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    RATES.iter().find(|r| r.2 == mbps).map_or(RATE_MAX, |r| r.0)
}

#[no_mangle]
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    c"/sys".as_ptr()
}

/// `ibv_read_sysfs_file`: reads `<dir>/<file>` into `buf` (NUL-terminated,
/// trailing newline removed); its length, or −1. softverbs devices have no
/// sysfs entries, so for them this finds nothing, as for a missing attribute.
#[no_mangle]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
        set_errno(EINVAL);
        return -1;
    }
    // SAFETY: NUL-terminated strings from the caller.
    let (d, f) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
    let path = format!("{}/{}", d.to_string_lossy(), f.to_string_lossy());
    let Ok(data) = std::fs::read(&path) else {
        set_errno(ENOENT);
        return -1;
    };
    let mut n = data.len().min(size - 1);
    if n > 0 && data[n - 1] == b'\n' {
        n -= 1;
    }
    // SAFETY: the caller's buffer holds `size` > n bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
    n as c_int
}

/// `ibv_fork_init`: nothing to do: softverbs pins no memory, so a child
/// process never shares registered pages with the device.
#[no_mangle]
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}

/// `IBV_FORK_UNNEEDED`: fork is safe without `ibv_fork_init`.
#[no_mangle]
pub extern "C" fn ibv_is_fork_initialized() -> c_int {
    2
}

#[no_mangle]
pub extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

#[no_mangle]
pub extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

#[no_mangle]
pub extern "C" fn ibv_resolve_eth_l2_from_gid(
    _context: *mut c_void,
    _attr: *mut c_void,
    _eth_mac: *mut u8,
    _vid: *mut u16,
) -> c_int {
    refuse(
        "ibv_resolve_eth_l2_from_gid",
        EOPNOTSUPP,
        "softverbs resolves no Ethernet addresses (it speaks UDP)",
    )
}

macro_rules! not_offered_ptr {
    ($($name:ident: $why:literal),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> *mut c_void {
            set_errno(refuse(stringify!($name), EOPNOTSUPP, $why));
            std::ptr::null_mut()
        }
    )*};
}

not_offered_ptr! {
    ibv_import_device: "sharing a context by its command fd needs a kernel driver",
    ibv_import_pd: "sharing objects between processes needs a kernel driver",
    ibv_import_mr: "sharing objects between processes needs a kernel driver",
    ibv_import_dm: "sharing objects between processes needs a kernel driver",
}

#[no_mangle]
pub extern "C" fn ibv_unimport_pd(_pd: *mut c_void) {}
#[no_mangle]
pub extern "C" fn ibv_unimport_mr(_mr: *mut c_void) {}
#[no_mangle]
pub extern "C" fn ibv_unimport_dm(_dm: *mut c_void) {}

macro_rules! kernel_copy {
    ($($name:ident),* $(,)?) => {$(
        /// A copy between verbs and kernel (uverbs) structs, used by librdmacm
        /// with the kernel's rdma_cm only, which softverbs does not have.
        #[no_mangle]
        pub extern "C" fn $name(_dst: *mut c_void, _src: *const c_void) {
            refuse(stringify!($name), EOPNOTSUPP, "kernel (uverbs) structs are never exchanged: there is no kernel driver");
        }
    )*};
}

kernel_copy!(
    ibv_copy_ah_attr_from_kern,
    ibv_copy_qp_attr_from_kern,
    ibv_copy_path_rec_from_kern,
    ibv_copy_path_rec_to_kern,
);

crate::symver!("misc");

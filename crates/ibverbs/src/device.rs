//! The device list and the device-level queries: `ibv_get_device_list`,
//! `ibv_query_device(_ex)`, `ibv_query_port`, the GID and P_Key tables
//! (`ibv_open_device` is in ops.rs, above every object).

use crate::context::{ctx_block, CtxBlock};
use crate::ffi::*;
use crate::util::*;
use proto::device::{DeviceAttr, PortAttr};
use softverbs::raw;
use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;

/// An `ibv_device` inside a block shaped like rdma-core's private
/// `verbs_device` (712 bytes) so that provider libraries loaded by perftest
/// (libmlx5, libefa) read a NULL ops pointer at offset 664 and leave it alone.
#[repr(C)]
pub(crate) struct DeviceBlock {
    pub dev: ibv_device,
    provider_ops: *const c_void,
    _verbs_device_rest: [u64; 5],
    magic: u64,
    pub index: u32,
    pub device: softverbs::Device,
}
impl_block!(DeviceBlock, ibv_device, "device", 0x736f_6674_6465_7631);

// SAFETY: the raw pointer field is always NULL; the rest is Send + Sync.
unsafe impl Send for DeviceBlock {}
// SAFETY: as above.
unsafe impl Sync for DeviceBlock {}

/// The devices of this process, made once (from the environment) and kept for
/// the life of the process, as contexts may outlive `ibv_free_device_list`.
fn devices() -> Result<&'static [DeviceBlock], c_int> {
    static DEVICES: OnceLock<Result<Vec<DeviceBlock>, c_int>> = OnceLock::new();
    init_log();
    DEVICES
        .get_or_init(|| {
            let list = softverbs::devices()
                .map_err(|e| refuse("ibv_get_device_list", errno_of(&e), &e))?;
            Ok(list
                .into_iter()
                .enumerate()
                .map(|(i, d)| device_block(i as u32, d))
                .collect())
        })
        .as_deref()
        .map_err(|e| *e)
}

fn device_block(index: u32, device: softverbs::Device) -> DeviceBlock {
    let mut dev = ibv_device {
        _ops: [std::ptr::null(); 2],
        node_type: 1,      // IBV_NODE_CA
        transport_type: 0, // IBV_TRANSPORT_IB (RoCE reports IB transport)
        name: [0; 64],
        dev_name: [0; 64],
        dev_path: [0; 256],
        ibdev_path: [0; 256],
    };
    let name = device.name().to_string();
    fill_c_str(&mut dev.name, &name);
    fill_c_str(&mut dev.dev_name, &format!("uverbs{index}"));
    fill_c_str(
        &mut dev.dev_path,
        &format!("/sys/class/infiniband_verbs/uverbs{index}"),
    );
    fill_c_str(
        &mut dev.ibdev_path,
        &format!("/sys/class/infiniband/{name}"),
    );
    DeviceBlock {
        dev,
        provider_ops: std::ptr::null(),
        _verbs_device_rest: [0; 5],
        magic: <DeviceBlock as Block>::MAGIC,
        index,
        device,
    }
}

/// The device block behind a pointer, if it is one of ours.
pub(crate) fn device_block_of(
    verb: &str,
    p: *const ibv_device,
) -> Result<&'static DeviceBlock, c_int> {
    let list = devices()?;
    list.iter()
        .find(|b| std::ptr::eq(&raw const b.dev, p))
        .ok_or_else(|| {
            refuse(
                verb,
                EINVAL,
                format_args!("{p:?} is not a device of this library"),
            )
        })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    let list = match devices() {
        Ok(l) => l,
        Err(e) => {
            set_errno(e);
            return std::ptr::null_mut();
        }
    };
    if !num_devices.is_null() {
        // SAFETY: the caller passes a valid out-pointer or NULL.
        unsafe { *num_devices = list.len() as c_int };
    }
    let mut ptrs: Vec<*mut ibv_device> =
        list.iter().map(|b| (&raw const b.dev).cast_mut()).collect();
    ptrs.push(std::ptr::null_mut());
    Box::into_raw(ptrs.into_boxed_slice()).cast::<*mut ibv_device>()
}

#[no_mangle]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    if list.is_null() {
        return;
    }
    let n = devices().map_or(0, <[DeviceBlock]>::len) + 1;
    // SAFETY: `list` came from `ibv_get_device_list`, a boxed slice of n pointers.
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(list, n)) });
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
    match device_block_of("ibv_get_device_name", device) {
        Ok(b) => b.dev.name.as_ptr(),
        Err(e) => {
            set_errno(e);
            std::ptr::null()
        }
    }
}

/// The node GUID, in network byte order (`__be64`).
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_guid(device: *mut ibv_device) -> u64 {
    match device_block_of("ibv_get_device_guid", device) {
        Ok(b) => raw::node_guid(&b.device).to_be(),
        Err(e) => {
            set_errno(e);
            0
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_index(device: *mut ibv_device) -> c_int {
    match device_block_of("ibv_get_device_index", device) {
        Ok(b) => b.index as c_int,
        Err(_) => -1,
    }
}

pub(crate) fn device_attr(a: &DeviceAttr) -> ibv_device_attr {
    let i = |v: u32| v.min(i32::MAX as u32) as c_int;
    let mut fw_ver = [0; 64];
    fill_c_str(&mut fw_ver, &a.fw_ver);
    ibv_device_attr {
        fw_ver,
        node_guid: a.node_guid.to_be(),
        sys_image_guid: a.sys_image_guid.to_be(),
        max_mr_size: a.max_mr_size,
        page_size_cap: a.page_size_cap,
        vendor_id: a.vendor_id,
        vendor_part_id: a.vendor_part_id,
        hw_ver: a.hw_ver,
        max_qp: i(a.max_qp),
        max_qp_wr: i(a.max_qp_wr),
        device_cap_flags: a.device_cap_flags,
        max_sge: i(a.max_sge),
        max_sge_rd: i(a.max_sge_rd),
        max_cq: i(a.max_cq),
        max_cqe: i(a.max_cqe),
        max_mr: i(a.max_mr),
        max_pd: i(a.max_pd),
        max_qp_rd_atom: i(a.max_qp_rd_atom),
        max_ee_rd_atom: i(a.max_ee_rd_atom),
        max_res_rd_atom: i(a.max_res_rd_atom),
        max_qp_init_rd_atom: i(a.max_qp_init_rd_atom),
        max_ee_init_rd_atom: i(a.max_ee_init_rd_atom),
        atomic_cap: a.atomic_cap as u32,
        max_ee: i(a.max_ee),
        max_rdd: i(a.max_rdd),
        max_mw: i(a.max_mw),
        max_raw_ipv6_qp: i(a.max_raw_ipv6_qp),
        max_raw_ethy_qp: i(a.max_raw_ethy_qp),
        max_mcast_grp: i(a.max_mcast_grp),
        max_mcast_qp_attach: i(a.max_mcast_qp_attach),
        max_total_mcast_qp_attach: i(a.max_total_mcast_qp_attach),
        max_ah: i(a.max_ah),
        max_fmr: i(a.max_fmr),
        max_map_per_fmr: i(a.max_map_per_fmr),
        max_srq: i(a.max_srq),
        max_srq_wr: i(a.max_srq_wr),
        max_srq_sge: i(a.max_srq_sge),
        max_pkeys: a.max_pkeys,
        local_ca_ack_delay: a.local_ca_ack_delay,
        phys_port_cnt: a.phys_port_cnt,
    }
}

pub(crate) fn port_attr(p: &PortAttr) -> ibv_port_attr {
    ibv_port_attr {
        state: p.state as u32,
        max_mtu: p.max_mtu as u32,
        active_mtu: p.active_mtu as u32,
        gid_tbl_len: p.gid_tbl_len as c_int,
        port_cap_flags: p.port_cap_flags,
        max_msg_sz: p.max_msg_sz,
        bad_pkey_cntr: p.bad_pkey_cntr,
        qkey_viol_cntr: p.qkey_viol_cntr,
        pkey_tbl_len: p.pkey_tbl_len,
        lid: p.lid,
        sm_lid: p.sm_lid,
        lmc: p.lmc,
        max_vl_num: p.max_vl_num,
        sm_sl: p.sm_sl,
        subnet_timeout: p.subnet_timeout,
        init_type_reply: p.init_type_reply,
        active_width: p.active_width,
        active_speed: p.active_speed,
        phys_state: p.phys_state,
        link_layer: p.link_layer,
        flags: 0,
        port_cap_flags2: 0,
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_device(
    context: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    let b = match ctx_block("ibv_query_device", context) {
        Ok(b) => b,
        Err(e) => return e,
    };
    if attr.is_null() {
        return refuse("ibv_query_device", EINVAL, "device_attr is NULL");
    }
    // SAFETY: non-NULL out-pointer from the caller.
    unsafe { attr.write(device_attr(&b.ctx.query_device())) };
    0
}

/// `verbs_context.query_device_ex`: the classic attributes plus the extended
/// part (on-demand paging: spec/odp.md). Writes at most `attr_size` bytes.
pub(crate) unsafe extern "C" fn query_device_ex(
    context: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    let b = match ctx_block("ibv_query_device_ex", context) {
        Ok(b) => b,
        Err(e) => return e,
    };
    // SAFETY: NULL or the caller's input struct.
    if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
        return refuse("ibv_query_device_ex", EINVAL, "input->comp_mask must be 0");
    }
    if attr.is_null() || attr_size < std::mem::size_of::<ibv_device_attr>() {
        return refuse(
            "ibv_query_device_ex",
            EINVAL,
            format_args!("attr is NULL or attr_size {attr_size} too small"),
        );
    }
    let odp = proto::mr::ODP_CAPS;
    let a = b.ctx.query_device();
    let full = ibv_device_attr_ex {
        orig_attr: device_attr(&a),
        comp_mask: 0,
        odp_caps: ibv_odp_caps {
            general_caps: odp.general,
            rc_odp_caps: odp.rc,
            uc_odp_caps: odp.uc,
            ud_odp_caps: odp.ud,
        },
        // Completion timestamps count the device clock's nanoseconds in 64 bits.
        completion_timestamp_mask: u64::MAX,
        hca_core_clock: softverbs::Context::CORE_CLOCK_KHZ,
        // The legacy bits and the extended ones (kernel ib_uverbs_ex_query_device).
        device_cap_flags_ex: u64::from(a.device_cap_flags)
            | proto::device::cap_flags::EX_ATOMIC_WRITE,
        _caps: caps_blob(a.max_qp),
        max_dm_size: proto::dm::MAX_DM_SIZE,
        _pci_atomic_caps: [0; 8],
        xrc_odp_caps: odp.xrc,
        phys_port_cnt_ex: 1,
    };
    let n = attr_size.min(std::mem::size_of::<ibv_device_attr_ex>());
    // SAFETY: the caller's buffer holds `attr_size` ≥ n bytes; `full` holds n.
    unsafe { std::ptr::copy_nonoverlapping((&raw const full).cast::<u8>(), attr.cast::<u8>(), n) };
    0
}

fn query_port_into(
    verb: &str,
    context: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    size: usize,
) -> c_int {
    // SAFETY: ctx_block checks the pointer.
    let b = match unsafe { ctx_block(verb, context) } {
        Ok(b) => b,
        Err(e) => return e,
    };
    if attr.is_null() {
        return refuse(verb, EINVAL, "port_attr is NULL");
    }
    match b.ctx.query_port(port) {
        Ok(p) => {
            let full = port_attr(&p);
            let n = size.min(std::mem::size_of::<ibv_port_attr>());
            // SAFETY: the caller's buffer holds at least `size` ≥ n bytes.
            unsafe {
                std::ptr::copy_nonoverlapping((&raw const full).cast::<u8>(), attr.cast::<u8>(), n)
            };
            0
        }
        Err(e) => errno_of(&e),
    }
}

/// The exported `ibv_query_port` writes only the compat part (48 bytes): the
/// header's inline version zeroes the rest and calls the op when present.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_port(
    context: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    query_port_into("ibv_query_port", context, port, attr, COMPAT_PORT_ATTR_SIZE)
}

/// `verbs_context.query_port`: writes `min(attr_size, sizeof)` bytes, and
/// zeroes a larger caller's struct first (rdma-core `__lib_query_port`), so
/// fields of a newer `ibv_port_attr` than ours read as 0: NCCL passes its own
/// copy with `active_speed_ex`, which it reads as "XDR or faster" if non-zero.
pub(crate) unsafe extern "C" fn query_port_op(
    context: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    attr_size: usize,
) -> c_int {
    if !attr.is_null() && attr_size > std::mem::size_of::<ibv_port_attr>() {
        // SAFETY: the caller's buffer holds `attr_size` bytes.
        unsafe { std::ptr::write_bytes(attr.cast::<u8>(), 0, attr_size) };
    }
    query_port_into("ibv_query_port", context, port, attr, attr_size)
}

/// `ibv_query_gid`: −1 on error (not an errno); an empty slot reads as zeros.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid(
    context: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    let Ok(b) = ctx_block("ibv_query_gid", context) else {
        return -1;
    };
    if gid.is_null() || index < 0 {
        refuse("ibv_query_gid", EINVAL, "gid is NULL or index negative");
        return -1;
    }
    let raw = match b.ctx.query_gid(port, index as u32) {
        Ok(g) => g.0,
        Err(e) if errno_of(&e) == ENODATA => [0; 16],
        Err(_) => return -1,
    };
    // SAFETY: non-NULL out-pointer.
    unsafe { (*gid).raw = raw };
    0
}

/// `IBV_GID_TYPE_ROCE_V2`.
const GID_TYPE_ROCE_V2: u32 = 2;

fn gid_entry(b: &CtxBlock, port: u8, index: u32) -> Result<ibv_gid_entry, c_int> {
    let g = b.ctx.query_gid(port, index).map_err(|e| errno_of(&e))?;
    Ok(ibv_gid_entry {
        gid: ibv_gid { raw: g.0 },
        gid_index: index,
        port_num: u32::from(port),
        gid_type: GID_TYPE_ROCE_V2,
        ndev_ifindex: ndev_ifindex(g.0),
    })
}

/// The index of the network interface holding a RoCE GID's address (the
/// kernel's `gid_attr->ndev`, reported by rdma-core as `ndev_ifindex`; the same
/// interface sysfs `gid_attrs/ndevs` names), 0 when no interface holds it.
fn ndev_ifindex(raw: [u8; 16]) -> u32 {
    let v6 = std::net::Ipv6Addr::from(raw);
    let ip = v6
        .to_ipv4_mapped()
        .map_or(std::net::IpAddr::V6(v6), std::net::IpAddr::V4);
    sv_io::host::interface_of(ip)
        .and_then(|name| sv_io::host::interface_index(&name))
        .unwrap_or(0)
}

/// `ibv_query_gid_ex`: returns an errno value (`ENODATA` for an empty slot).
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    context: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    let b = match ctx_block("ibv_query_gid_ex", context) {
        Ok(b) => b,
        Err(e) => return e,
    };
    if entry.is_null()
        || flags != 0
        || entry_size < std::mem::size_of::<ibv_gid_entry>()
        || port_num > 255
    {
        return refuse(
            "ibv_query_gid_ex",
            EINVAL,
            "entry NULL, flags not 0, entry_size too small or bad port",
        );
    }
    match gid_entry(b, port_num as u8, gid_index) {
        Ok(g) => {
            // SAFETY: the caller's entry holds at least sizeof(ibv_gid_entry).
            unsafe { entry.write(g) };
            0
        }
        Err(e) => e,
    }
}

/// `ibv_query_gid_table`: the valid entries, or a negative errno (`-EINVAL`
/// when the buffer is too small).
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_table(
    context: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    let b = match ctx_block("ibv_query_gid_table", context) {
        Ok(b) => b,
        Err(e) => return -(e as isize),
    };
    if entries.is_null() || flags != 0 || entry_size < std::mem::size_of::<ibv_gid_entry>() {
        return -(refuse(
            "ibv_query_gid_table",
            EINVAL,
            "entries NULL, flags not 0 or entry_size too small",
        ) as isize);
    }
    let len = b.ctx.query_port(1).map_or(0, |p| p.gid_tbl_len);
    let valid: Vec<ibv_gid_entry> = (0..len).filter_map(|i| gid_entry(b, 1, i).ok()).collect();
    if valid.len() > max_entries {
        return -(refuse(
            "ibv_query_gid_table",
            EINVAL,
            format_args!("{} entries do not fit in {max_entries}", valid.len()),
        ) as isize);
    }
    for (i, g) in valid.iter().enumerate() {
        // SAFETY: entry i < max_entries of `entry_size` bytes each.
        unsafe {
            entries
                .cast::<u8>()
                .add(i * entry_size)
                .cast::<ibv_gid_entry>()
                .write_unaligned(*g)
        };
    }
    valid.len() as isize
}

/// `ibv_query_gid_type` (private ABI): `IBV_GID_TYPE_SYSFS_ROCE_V2` (1).
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid_type(
    context: *mut ibv_context,
    port_num: u8,
    index: u32,
    gid_type: *mut u32,
) -> c_int {
    let b = match ctx_block("ibv_query_gid_type", context) {
        Ok(b) => b,
        Err(e) => return e,
    };
    if gid_type.is_null() {
        return refuse("ibv_query_gid_type", EINVAL, "type is NULL");
    }
    if let Err(e) = b.ctx.query_port(port_num) {
        return errno_of(&e);
    }
    let len = b.ctx.query_port(port_num).map_or(0, |p| p.gid_tbl_len);
    if index >= len {
        return refuse(
            "ibv_query_gid_type",
            EINVAL,
            format_args!("GID index {index} beyond the table ({len})"),
        );
    }
    // SAFETY: non-NULL out-pointer.
    unsafe { *gid_type = 1 };
    0
}

/// `ibv_query_pkey`: the P_Key in network byte order; −1 on error.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_pkey(
    context: *mut ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    let Ok(b) = ctx_block("ibv_query_pkey", context) else {
        return -1;
    };
    if pkey.is_null() || index < 0 {
        refuse("ibv_query_pkey", EINVAL, "pkey is NULL or index negative");
        return -1;
    }
    match b.ctx.query_pkey(port, index as u32) {
        Ok(p) => {
            // SAFETY: non-NULL out-pointer.
            unsafe { *pkey = p.to_be() };
            0
        }
        Err(_) => -1,
    }
}

/// `ibv_get_pkey_index`: the index of a P_Key (network byte order), or −1.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_pkey_index(
    context: *mut ibv_context,
    port: u8,
    pkey: u16,
) -> c_int {
    let Ok(b) = ctx_block("ibv_get_pkey_index", context) else {
        return -1;
    };
    let len = b.ctx.query_port(port).map_or(0, |p| p.pkey_tbl_len);
    (0..len)
        .find(|&i| {
            b.ctx
                .query_pkey(port, u32::from(i))
                .is_ok_and(|p| p.to_be() == pkey)
        })
        .map_or(-1, c_int::from)
}

crate::symver!("device");

/// `IBV_VALUES_MASK_RAW_CLOCK`.
const VALUES_MASK_RAW_CLOCK: u32 = 1;

/// `struct ibv_values_ex`.
#[repr(C)]
pub(crate) struct ibv_values_ex {
    comp_mask: u32,
    raw_clock: libc::timespec,
}

/// `verbs_context.query_rt_values` (`ibv_query_rt_values_ex`): the raw clock
/// is the device clock that completion timestamps count (ns, `hca_core_clock`
/// 1 GHz), as a timespec. `comp_mask` comes back as the values filled.
pub(crate) unsafe extern "C" fn query_rt_values(
    context: *mut ibv_context,
    values: *mut ibv_values_ex,
) -> c_int {
    const VERB: &str = "ibv_query_rt_values_ex";
    let b = match crate::context::ctx_block(VERB, context) {
        Ok(b) => b,
        Err(e) => return e,
    };
    if values.is_null() {
        return refuse(VERB, EINVAL, "values is NULL");
    }
    // SAFETY: the caller's non-NULL, writable values.
    let v = unsafe { &mut *values };
    let mut filled = 0;
    if v.comp_mask & VALUES_MASK_RAW_CLOCK != 0 {
        let ns = b.ctx.clock_ns();
        v.raw_clock.tv_sec = (ns / 1_000_000_000) as libc::time_t;
        v.raw_clock.tv_nsec = (ns % 1_000_000_000) as libc::c_long;
        filled |= VALUES_MASK_RAW_CLOCK;
    }
    v.comp_mask = filled;
    0
}

/// `tso_caps` … `cq_mod_caps` of `ibv_device_attr_ex` (88 bytes from offset
/// 288): all zero (no packet pacing, raw-packet offloads, tag matching or
/// CQ moderation) but `tso_caps` (spec/raw-packet.md §4: up to
/// `proto::tso::MAX_TSO` payload bytes per TSO WR, on RAW_PACKET QPs),
/// `rss_caps` and `max_wq_type_rq` (spec/raw-packet.md §6):
/// RSS on RAW_PACKET QPs, tables of up to 2^8 WQs, the IPv4/IPv6 address and
/// TCP/UDP port fields, Toeplitz. A WQ is a QP of the engine, so WQs and
/// tables are bounded by `max_qp`.
fn put32_at(c: &mut [u8; 88], at: usize, v: u32) {
    c[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

fn caps_blob(max_qp: u32) -> [u8; 88] {
    let mut c = [0u8; 88];
    put32_at(&mut c, 0, proto::tso::MAX_TSO); // tso_caps.max_tso
    put32_at(&mut c, 4, 1 << 8); // tso_caps.supported_qpts: IBV_QPT_RAW_PACKET
    let rss = 8; // rss_caps
    let put32 =
        |c: &mut [u8; 88], at: usize, v: u32| c[at..at + 4].copy_from_slice(&v.to_ne_bytes());
    put32(&mut c, rss, 1 << 8); // supported_qpts: IBV_QPT_RAW_PACKET
    put32(&mut c, rss + 4, max_qp); // max_rwq_indirection_tables
    put32(&mut c, rss + 8, 1 << softverbs::MAX_LOG_IND_TBL_SIZE); // max_rwq_indirection_table_size
    let fields = softverbs::rx_hash_fields::SUPPORTED;
    c[rss + 16..rss + 24].copy_from_slice(&fields.to_ne_bytes()); // rx_hash_fields_mask
    c[rss + 24] = 1; // rx_hash_function: IBV_RX_HASH_FUNC_TOEPLITZ
    put32(&mut c, 40, max_qp); // max_wq_type_rq
    c
}

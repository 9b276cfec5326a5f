//! The device model: what `ibv_query_device`, `ibv_query_port`, `ibv_query_gid`
//! and `ibv_query_pkey` report, and the limits every other check uses.
//!
//! Limits are at least as generous as Linux Soft-RoCE's (`rxe_param.h`), and
//! every value was chosen so that ibv_devinfo, perftest and pyverbs accept it
//! (`shared/spec/ibverbs-abi.md` §5).

use crate::error::Error;
use crate::types::{Gid, Mtu};
use std::net::IpAddr;

/// `enum ibv_atomic_cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicCap {
    /// No atomics (`IBV_ATOMIC_NONE`).
    None = 0,
    /// Atomic within this HCA (`IBV_ATOMIC_HCA`).
    Hca = 1,
    /// Atomic with CPU and other HCAs (`IBV_ATOMIC_GLOB`).
    Global = 2,
}

/// `struct ibv_device_attr`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version string.
    pub fw_ver: String,
    /// Node GUID (host byte order).
    pub node_guid: u64,
    /// System image GUID (host byte order).
    pub sys_image_guid: u64,
    /// Largest MR.
    pub max_mr_size: u64,
    /// Supported page sizes.
    pub page_size_cap: u64,
    /// Vendor ID: 0xffffff, a neutral value as Soft-RoCE reports.
    pub vendor_id: u32,
    /// Vendor part ID.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// Maximum number of QPs.
    pub max_qp: u32,
    /// Maximum outstanding WRs per queue.
    pub max_qp_wr: u32,
    /// `enum ibv_device_cap_flags`.
    pub device_cap_flags: u32,
    /// Maximum SGEs per WR.
    pub max_sge: u32,
    /// Maximum SGEs per RDMA READ WR.
    pub max_sge_rd: u32,
    /// Maximum number of CQs.
    pub max_cq: u32,
    /// Maximum CQEs per CQ.
    pub max_cqe: u32,
    /// Maximum number of MRs.
    pub max_mr: u32,
    /// Maximum number of PDs.
    pub max_pd: u32,
    /// Responder resources per QP (max `max_dest_rd_atomic`).
    pub max_qp_rd_atom: u32,
    /// EE responder resources (RD; 0).
    pub max_ee_rd_atom: u32,
    /// Responder resources per device.
    pub max_res_rd_atom: u32,
    /// Initiator depth per QP (max `max_rd_atomic`).
    pub max_qp_init_rd_atom: u32,
    /// EE initiator depth (RD; 0).
    pub max_ee_init_rd_atom: u32,
    /// Atomic guarantees.
    pub atomic_cap: AtomicCap,
    /// EE contexts (RD; 0).
    pub max_ee: u32,
    /// RDDs (RD; 0).
    pub max_rdd: u32,
    /// Memory windows.
    pub max_mw: u32,
    /// Raw IPv6 QPs.
    pub max_raw_ipv6_qp: u32,
    /// Raw Ethertype QPs.
    pub max_raw_ethy_qp: u32,
    /// Multicast groups.
    pub max_mcast_grp: u32,
    /// QPs per multicast group.
    pub max_mcast_qp_attach: u32,
    /// QP attachments in all.
    pub max_total_mcast_qp_attach: u32,
    /// Address handles.
    pub max_ah: u32,
    /// FMRs (obsolete; 0).
    pub max_fmr: u32,
    /// Maps per FMR (obsolete; 0).
    pub max_map_per_fmr: u32,
    /// SRQs.
    pub max_srq: u32,
    /// WRs per SRQ.
    pub max_srq_wr: u32,
    /// SGEs per SRQ WR.
    pub max_srq_sge: u32,
    /// P_Key table length.
    pub max_pkeys: u16,
    /// Local CA ACK delay (same encoding as the ACK timeout).
    pub local_ca_ack_delay: u8,
    /// Number of ports.
    pub phys_port_cnt: u8,
}

/// `IBV_DEVICE_*` capability bits we really provide.
pub mod cap_flags {
    /// Ports can be shut down (a software port is always up; reported as rxe does).
    pub const SHUTDOWN_PORT: u32 = 1 << 9;
    /// System image GUID is valid.
    pub const SYS_IMAGE_GUID: u32 = 1 << 11;
    /// RC QPs generate RNR NAKs.
    pub const RC_RNR_NAK_GEN: u32 = 1 << 12;
    /// SRQs can be resized (`ibv_modify_srq` with `IBV_SRQ_MAX_WR`).
    pub const SRQ_RESIZE: u32 = 1 << 13;
    /// Port active event.
    pub const PORT_ACTIVE_EVENT: u32 = 1 << 14;
}

/// The largest inline data a send WR may carry.
pub const MAX_INLINE_DATA: u32 = 1024;
/// The largest message (`max_msg_sz`): 2^31 bytes.
pub const MAX_MSG_SZ: u32 = 1 << 31;
/// QPNs start here; 0 and 1 are SMI/GSI and 2..16 are kept free, as rxe does.
pub const FIRST_QPN: u32 = 16;

/// The QPNs a device hands out: all of them, or a process's share of an address
/// shared by several processes (the I/O layer's slots), so QPNs are unique per address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpnSpace {
    /// The first QPN.
    pub first: u32,
    /// The last QPN (inclusive).
    pub last: u32,
}

impl QpnSpace {
    /// Every QPN but 0, 1 (SMI, GSI), 2..16 (kept free) and 0xffffff (multicast).
    pub const ALL: QpnSpace = QpnSpace {
        first: FIRST_QPN,
        last: 0xff_fffe,
    };

    /// How many QPNs it holds.
    pub fn len(&self) -> u32 {
        self.last.saturating_sub(self.first) + 1
    }

    /// Whether it holds none (never, for a valid space).
    pub fn is_empty(&self) -> bool {
        self.last < self.first
    }

    /// Whether `qpn` is in it.
    pub fn contains(&self, qpn: u32) -> bool {
        (self.first..=self.last).contains(&qpn)
    }

    /// The QPN after `qpn`, wrapping from the last to the first.
    pub fn after(&self, qpn: u32) -> u32 {
        if qpn >= self.last || qpn < self.first {
            self.first
        } else {
            qpn + 1
        }
    }
}

impl DeviceAttr {
    /// The limits of a softverbs device with the given node GUID.
    pub fn softverbs(node_guid: u64) -> DeviceAttr {
        const M: u32 = 1 << 20;
        DeviceAttr {
            fw_ver: concat!("softverbs ", env!("CARGO_PKG_VERSION")).to_string(),
            node_guid,
            sys_image_guid: node_guid,
            max_mr_size: u64::MAX,
            page_size_cap: 0xffff_f000,
            vendor_id: 0xff_ffff,
            vendor_part_id: 0,
            hw_ver: 0,
            max_qp: M,
            max_qp_wr: M,
            device_cap_flags: cap_flags::SHUTDOWN_PORT
                | cap_flags::SYS_IMAGE_GUID
                | cap_flags::RC_RNR_NAK_GEN
                | cap_flags::SRQ_RESIZE
                | cap_flags::PORT_ACTIVE_EVENT,
            max_sge: 32,
            max_sge_rd: 32,
            max_cq: M,
            max_cqe: (1 << 22) - 1,
            max_mr: M,
            max_pd: M,
            max_qp_rd_atom: 128,
            max_ee_rd_atom: 0,
            max_res_rd_atom: 128 * 1024,
            max_qp_init_rd_atom: 128,
            max_ee_init_rd_atom: 0,
            atomic_cap: AtomicCap::Hca,
            max_ee: 0,
            max_rdd: 0,
            max_mw: 0,
            max_raw_ipv6_qp: 0,
            max_raw_ethy_qp: 0,
            max_mcast_grp: crate::mcast::MAX_GROUPS as u32,
            max_mcast_qp_attach: crate::mcast::MAX_QPS_PER_GROUP as u32,
            max_total_mcast_qp_attach: crate::mcast::MAX_ATTACHMENTS as u32,
            max_ah: M,
            max_fmr: 0,
            max_map_per_fmr: 0,
            max_srq: M,
            max_srq_wr: M,
            max_srq_sge: 32,
            max_pkeys: 1,
            local_ca_ack_delay: 15,
            phys_port_cnt: 1,
        }
    }
}

/// `enum ibv_port_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortState {
    /// `IBV_PORT_DOWN`.
    Down = 1,
    /// `IBV_PORT_INIT`.
    Init = 2,
    /// `IBV_PORT_ARMED`.
    Armed = 3,
    /// `IBV_PORT_ACTIVE`.
    Active = 4,
}

/// `IBV_LINK_LAYER_ETHERNET`.
pub const LINK_LAYER_ETHERNET: u8 = 2;
/// `IBV_PORT_CM_SUP`.
pub const PORT_CM_SUP: u32 = 1 << 16;
/// `IBV_PORT_IP_BASED_GIDS`.
pub const PORT_IP_BASED_GIDS: u32 = 1 << 26;

/// `struct ibv_port_attr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortAttr {
    /// Logical port state.
    pub state: PortState,
    /// Largest MTU supported.
    pub max_mtu: Mtu,
    /// MTU in use.
    pub active_mtu: Mtu,
    /// GID table length.
    pub gid_tbl_len: u32,
    /// Capability flags.
    pub port_cap_flags: u32,
    /// Largest message.
    pub max_msg_sz: u32,
    /// Bad P_Key counter.
    pub bad_pkey_cntr: u32,
    /// Q_Key violation counter.
    pub qkey_viol_cntr: u32,
    /// P_Key table length.
    pub pkey_tbl_len: u16,
    /// LID (0 on RoCE).
    pub lid: u16,
    /// SM LID (0 on RoCE).
    pub sm_lid: u16,
    /// LMC.
    pub lmc: u8,
    /// Maximum VLs.
    pub max_vl_num: u8,
    /// SM SL.
    pub sm_sl: u8,
    /// Subnet timeout.
    pub subnet_timeout: u8,
    /// Init type reply.
    pub init_type_reply: u8,
    /// Active width (`IB_WIDTH_*`: 1X = 1, 4X = 2, …), from the link ([`LinkRate`]).
    pub active_width: u8,
    /// Active speed (`IB_SPEED_*`: SDR = 1, …, EDR = 32), from the link ([`LinkRate`]).
    pub active_speed: u8,
    /// Physical state (5 = LinkUp).
    pub phys_state: u8,
    /// Link layer (Ethernet).
    pub link_layer: u8,
}

/// A RoCE port's width and speed, derived from its net device's link speed as
/// the kernel does for Soft-RoCE and every RoCE driver without lane counts
/// (torvalds/linux `drivers/infiniband/core/verbs.c` `ib_get_eth_speed`: a net
/// device whose speed is unknown counts as 1000 Mb/s; `ib_get_width_and_speed`
/// without lanes: the table [`ETH_SPEED_TABLE`]). UCX, NCCL and the rdma_cm
/// path's rate turn these into bandwidth, so they say what the link is, not
/// what a NIC could be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkRate {
    /// `IB_WIDTH_*`.
    pub width: u8,
    /// `IB_SPEED_*`.
    pub speed: u8,
}

/// `(net device speed up to, in Mb/s; IB width; IB speed)`, ascending, the
/// kernel's `ib_get_width_and_speed` for a device that reports no lane count.
pub const ETH_SPEED_TABLE: [(u32, u8, u8); 9] = [
    (1_000, 1, 1),      // 1X SDR
    (10_000, 1, 8),     // 1X FDR10
    (20_000, 2, 2),     // 4X DDR
    (25_000, 1, 32),    // 1X EDR
    (40_000, 2, 8),     // 4X FDR10
    (50_000, 16, 32),   // 2X EDR
    (100_000, 2, 32),   // 4X EDR
    (200_000, 2, 64),   // 4X HDR
    (u32::MAX, 2, 128), // 4X NDR
];

impl LinkRate {
    /// The rate of a port whose net device runs at `mbps` (None: unknown,
    /// e.g. `lo`, which has no link settings: counted as 1000 Mb/s).
    pub fn from_eth_mbps(mbps: Option<u32>) -> LinkRate {
        let mbps = mbps.unwrap_or(1_000);
        let (_, width, speed) = ETH_SPEED_TABLE
            .iter()
            .copied()
            .find(|(up_to, _, _)| mbps <= *up_to)
            .unwrap_or(ETH_SPEED_TABLE[ETH_SPEED_TABLE.len() - 1]);
        LinkRate { width, speed }
    }
}

impl PortAttr {
    /// The port's width and speed become `rate`'s.
    pub fn set_link(&mut self, rate: LinkRate) {
        self.active_width = rate.width;
        self.active_speed = rate.speed;
    }

    /// Port 1 of a softverbs device with `gid_tbl_len` GIDs, on a link of
    /// unknown speed until [`PortAttr::set_link`].
    pub fn softverbs(gid_tbl_len: u32, active_mtu: Mtu) -> PortAttr {
        let link = LinkRate::from_eth_mbps(None);
        PortAttr {
            state: PortState::Active,
            max_mtu: Mtu::Mtu4096,
            active_mtu,
            gid_tbl_len,
            port_cap_flags: PORT_CM_SUP | PORT_IP_BASED_GIDS,
            max_msg_sz: MAX_MSG_SZ,
            bad_pkey_cntr: 0,
            qkey_viol_cntr: 0,
            pkey_tbl_len: 1,
            lid: 0,
            sm_lid: 0,
            lmc: 0,
            max_vl_num: 1,
            sm_sl: 0,
            subnet_timeout: 0,
            init_type_reply: 0,
            active_width: link.width,
            active_speed: link.speed,
            phys_state: 5,
            link_layer: LINK_LAYER_ETHERNET,
        }
    }
}

/// `enum ibv_gid_type`: RoCE v2 (`IBV_GID_TYPE_ROCE_V2` = 2).
pub const GID_TYPE_ROCE_V2: u32 = 2;

/// The one P_Key: the default full-membership key.
pub const DEFAULT_PKEY: u16 = 0xffff;

/// The static description of a device: its name, addresses and limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceConfig {
    /// Device name, e.g. `softverbs0`.
    pub name: String,
    /// Addresses, one GID each, index 0 first.
    pub addrs: Vec<IpAddr>,
    /// The MTU reported as `active_mtu` and used by default.
    pub active_mtu: Mtu,
}

/// A device's identity and tables: what the query verbs return.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    /// Device name.
    pub name: String,
    /// `ibv_query_device`.
    pub attr: DeviceAttr,
    /// `ibv_query_port(1)`.
    pub port: PortAttr,
    /// The GID table.
    pub gids: Vec<Gid>,
    /// What the kernel's sysfs shows of a device beside the verbs attributes.
    pub ident: Identity,
}

/// The parts of a device's identity that no verb reports but programs read
/// from sysfs (`/sys/class/infiniband/<dev>/…`, kernel `drivers/infiniband/core/sysfs.c`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `node_type`: `RDMA_NODE_IB_CA` (1), as every RoCE device (rxe included) reports.
    pub node_type: u8,
    /// `node_desc`: the node description (64 bytes at most).
    pub node_desc: String,
    /// `hca_type`: the adapter's model name.
    pub hca_type: String,
    /// `board_id`: the board's identifier.
    pub board_id: String,
    /// `device/numa_node`: -1, no NUMA affinity (a software device runs on any CPU).
    pub numa_node: i32,
    /// `infiniband_verbs/uverbsN/abi_version`: the driver's user-verbs ABI
    /// version (the drop-in library is both sides of it; 1).
    pub uverbs_abi_version: u32,
}

impl Identity {
    /// A softverbs device's identity.
    pub fn softverbs(name: &str) -> Identity {
        Identity {
            node_type: 1,
            node_desc: format!("softverbs {name}"),
            hca_type: "softverbs".to_string(),
            board_id: concat!("softverbs-", env!("CARGO_PKG_VERSION")).to_string(),
            numa_node: -1,
            uverbs_abi_version: 1,
        }
    }
}

impl DeviceInfo {
    /// Builds the device description from its configuration.
    pub fn new(config: &DeviceConfig) -> DeviceInfo {
        let gids: Vec<Gid> = config.addrs.iter().map(|a| Gid::from(*a)).collect();
        let node_guid = guid_from(gids.first().copied().unwrap_or(Gid::ZERO), &config.name);
        DeviceInfo {
            name: config.name.clone(),
            attr: DeviceAttr::softverbs(node_guid),
            port: PortAttr::softverbs(gids.len().max(1) as u32, config.active_mtu),
            gids,
            ident: Identity::softverbs(&config.name),
        }
    }

    /// `ibv_query_port`: port 1 only.
    pub fn query_port(&self, port: u8) -> Result<PortAttr, Error> {
        self.check_port(port)?;
        Ok(self.port)
    }

    /// `ibv_query_gid`: an index beyond the table is `EINVAL`; an empty slot `ENODATA`.
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Gid, Error> {
        self.check_port(port)?;
        if index >= self.port.gid_tbl_len {
            return Err(Error::GidIndex {
                index,
                len: self.port.gid_tbl_len,
            });
        }
        match self.gids.get(index as usize) {
            Some(g) if !g.is_zero() => Ok(*g),
            _ => Err(Error::GidEmpty { index }),
        }
    }

    /// `ibv_query_pkey`: index 0 holds 0xffff.
    pub fn query_pkey(&self, port: u8, index: u32) -> Result<u16, Error> {
        self.check_port(port)?;
        if index >= u32::from(self.port.pkey_tbl_len) {
            return Err(Error::PkeyIndex {
                index,
                len: u32::from(self.port.pkey_tbl_len),
            });
        }
        Ok(DEFAULT_PKEY)
    }

    /// Port numbers are 1-based; this device has one port.
    pub fn check_port(&self, port: u8) -> Result<(), Error> {
        if port == 0 || port > self.attr.phys_port_cnt {
            return Err(Error::NoSuchPort { port });
        }
        Ok(())
    }
}

/// A stable EUI-64-like GUID derived from the first address and the name.
fn guid_from(gid: Gid, name: &str) -> u64 {
    // FNV-1a: any stable mix will do; the GUID only has to differ between devices.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in gid.0.iter().chain(name.as_bytes()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    // Locally administered, as a software device's should be.
    (h & !0x0100_0000_0000_0000) | 0x0200_0000_0000_0000
}

#[cfg(test)]
mod tests {
    #[test]
    fn link_rates_follow_the_kernels_table() {
        use super::LinkRate;
        let r = |mbps| {
            let l = LinkRate::from_eth_mbps(mbps);
            (l.width, l.speed)
        };
        assert_eq!(r(None), (1, 1), "unknown: 1000 Mb/s, 1X SDR");
        assert_eq!(r(Some(1_000)), (1, 1));
        assert_eq!(r(Some(10_000)), (1, 8), "veth, 10GbE: 1X FDR10");
        assert_eq!(r(Some(25_000)), (1, 32));
        assert_eq!(r(Some(40_000)), (2, 8));
        assert_eq!(r(Some(100_000)), (2, 32), "100GbE: 4X EDR");
        assert_eq!(r(Some(400_000)), (2, 128));
        let mut last = 0;
        for (up_to, _, _) in super::ETH_SPEED_TABLE {
            assert!(up_to > last, "the table ascends");
            last = up_to;
        }
    }

    use super::*;
    use std::net::Ipv4Addr;

    fn info() -> DeviceInfo {
        DeviceInfo::new(&DeviceConfig {
            name: "softverbs0".into(),
            addrs: vec![IpAddr::V4(Ipv4Addr::new(127, 1, 2, 3))],
            active_mtu: Mtu::Mtu1024,
        })
    }

    #[test]
    fn limits_at_least_rxe() {
        let a = info().attr;
        assert!(a.max_qp >= 0x10000 && a.max_qp_wr >= 0x4000 && a.max_sge >= 32);
        assert!(a.max_cqe >= 0x7fff && a.max_qp_rd_atom >= 128 && a.max_qp_init_rd_atom >= 128);
        assert!(a.max_srq_wr >= 0x4000 && a.max_srq_sge >= 27 && a.max_mr_size == u64::MAX);
        assert_eq!(a.atomic_cap, AtomicCap::Hca);
    }

    #[test]
    fn gid_is_ipv4_mapped_and_errors_are_right() {
        let d = info();
        let g = d.query_gid(1, 0).unwrap();
        assert_eq!(g.0[10..12], [0xff, 0xff]);
        assert_eq!(g.0[12..], [127, 1, 2, 3]);
        assert_eq!(d.query_gid(1, 1).unwrap_err().errno(), crate::Errno::EINVAL);
        assert_eq!(d.query_gid(2, 0).unwrap_err().errno(), crate::Errno::EINVAL);
        assert_eq!(d.query_pkey(1, 0).unwrap(), 0xffff);
        assert_eq!(
            d.query_pkey(1, 1).unwrap_err().errno(),
            crate::Errno::EINVAL
        );
        let p = d.query_port(1).unwrap();
        assert_eq!(
            (p.state, p.max_mtu, p.link_layer),
            (PortState::Active, Mtu::Mtu4096, 2)
        );
        assert!(d.query_port(0).is_err());
    }
}

//! Verbs value types: QP types and states, MTUs, access flags, GIDs, address
//! vectors and the QP attribute and capability structures.
//!
//! [`QpAttr`] carries `struct ibv_qp_attr`'s fields as types: states, MTU,
//! migration state and access flags cannot hold a number outside their enum.
//! The C ABI (crates/ibverbs) turns raw numbers into these types and refuses,
//! in words, the ones that name nothing; the value rules that remain (ranges,
//! device limits, which flags a QP takes) are checked here for both faces.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `enum ibv_qp_type` (plus the kernel-only SMI/GSI used by the modify table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Kernel QP0 (not on RoCE); table only.
    Smi,
    /// Kernel QP1; table only.
    Gsi,
    /// Reliable connection (`IBV_QPT_RC` = 2).
    Rc,
    /// Unreliable connection (`IBV_QPT_UC` = 3).
    Uc,
    /// Unreliable datagram (`IBV_QPT_UD` = 4).
    Ud,
    /// Raw Ethernet (`IBV_QPT_RAW_PACKET` = 8).
    RawPacket,
    /// XRC initiator (`IBV_QPT_XRC_SEND` = 9, kernel XRC_INI).
    XrcSend,
    /// XRC target (`IBV_QPT_XRC_RECV` = 10, kernel XRC_TGT).
    XrcRecv,
}

impl QpType {
    /// Every type, in table order.
    pub const ALL: [QpType; 8] = [
        QpType::Ud,
        QpType::Uc,
        QpType::Rc,
        QpType::XrcSend,
        QpType::XrcRecv,
        QpType::RawPacket,
        QpType::Smi,
        QpType::Gsi,
    ];

    /// The types a user can create on softverbs through a PD (XRC_RECV QPs
    /// are made in an XRC domain instead, spec/xrc.md §2).
    pub const SUPPORTED: [QpType; 4] = [QpType::Rc, QpType::Uc, QpType::Ud, QpType::XrcSend];

    /// From the `ibv_qp_type` value.
    pub fn from_raw(v: u32) -> Option<QpType> {
        Some(match v {
            0 => QpType::Smi,
            1 => QpType::Gsi,
            2 => QpType::Rc,
            3 => QpType::Uc,
            4 => QpType::Ud,
            8 => QpType::RawPacket,
            9 => QpType::XrcSend,
            10 => QpType::XrcRecv,
            _ => return None,
        })
    }

    /// The `ibv_qp_type` value.
    pub fn raw(self) -> u32 {
        match self {
            QpType::Smi => 0,
            QpType::Gsi => 1,
            QpType::Rc => 2,
            QpType::Uc => 3,
            QpType::Ud => 4,
            QpType::RawPacket => 8,
            QpType::XrcSend => 9,
            QpType::XrcRecv => 10,
        }
    }

    /// Connected transports (one fixed peer QP).
    pub fn is_connected(self) -> bool {
        matches!(
            self,
            QpType::Rc | QpType::Uc | QpType::XrcSend | QpType::XrcRecv
        )
    }

    /// Reliable transports: RC and its extension XRC (both halves), which
    /// acknowledge, retry and answer RDMA READ/atomics the same way
    /// (spec/xrc.md §4).
    pub fn is_reliable(self) -> bool {
        matches!(self, QpType::Rc | QpType::XrcSend | QpType::XrcRecv)
    }

    /// Datagram-style QPs, which carry a Q_Key.
    pub fn has_qkey(self) -> bool {
        matches!(self, QpType::Ud | QpType::Gsi | QpType::Smi)
    }
}

impl fmt::Display for QpType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QpType::Smi => "an SMI",
            QpType::Gsi => "a GSI",
            QpType::Rc => "an RC",
            QpType::Uc => "a UC",
            QpType::Ud => "a UD",
            QpType::RawPacket => "a RAW_PACKET",
            QpType::XrcSend => "an XRC_SEND",
            QpType::XrcRecv => "an XRC_RECV",
        })
    }
}

/// `enum ibv_qp_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum QpState {
    /// Created, unconfigured.
    #[default]
    Reset = 0,
    /// Initialized: receives may be posted.
    Init = 1,
    /// Ready to receive.
    Rtr = 2,
    /// Ready to send.
    Rts = 3,
    /// Send queue drain.
    Sqd = 4,
    /// Send queue error (UC/UD only).
    Sqe = 5,
    /// Error: everything is flushed.
    Err = 6,
}

impl QpState {
    /// All seven states in numeric order.
    pub const ALL: [QpState; 7] = [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqd,
        QpState::Sqe,
        QpState::Err,
    ];

    /// From the numeric value; `None` for values above 6 (incl. IBV_QPS_UNKNOWN).
    pub fn from_raw(v: u32) -> Option<QpState> {
        QpState::ALL.get(v as usize).copied()
    }

    /// The `ibv_qp_state` value.
    pub fn raw(self) -> u32 {
        self as u32
    }

    /// The short verbs name (`"RTS"`).
    pub fn name(self) -> &'static str {
        ["RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"][self as usize]
    }
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `enum ibv_mtu`. The default is the 1024 bytes the data path assumes for
/// a QP whose path MTU was not set (and that fits a 1500-byte Ethernet MTU).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes.
    #[default]
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

impl Mtu {
    /// From the `ibv_mtu` value (1..=5).
    pub fn from_raw(v: u32) -> Option<Mtu> {
        [
            Mtu::Mtu256,
            Mtu::Mtu512,
            Mtu::Mtu1024,
            Mtu::Mtu2048,
            Mtu::Mtu4096,
        ]
        .get((v as usize).wrapping_sub(1))
        .copied()
    }

    /// The payload size in bytes.
    pub fn bytes(self) -> u32 {
        128 << (self as u32)
    }

    /// The `ibv_mtu` value.
    pub fn raw(self) -> u32 {
        self as u32
    }
}

impl fmt::Display for Mtu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bytes())
    }
}

/// `enum ibv_access_flags` bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AccessFlags(pub u32);

impl AccessFlags {
    /// `IBV_ACCESS_LOCAL_WRITE`.
    pub const LOCAL_WRITE: AccessFlags = AccessFlags(1);
    /// `IBV_ACCESS_REMOTE_WRITE`.
    pub const REMOTE_WRITE: AccessFlags = AccessFlags(1 << 1);
    /// `IBV_ACCESS_REMOTE_READ`.
    pub const REMOTE_READ: AccessFlags = AccessFlags(1 << 2);
    /// `IBV_ACCESS_REMOTE_ATOMIC`.
    pub const REMOTE_ATOMIC: AccessFlags = AccessFlags(1 << 3);
    /// `IBV_ACCESS_MW_BIND`.
    pub const MW_BIND: AccessFlags = AccessFlags(1 << 4);
    /// `IBV_ACCESS_ZERO_BASED`.
    pub const ZERO_BASED: AccessFlags = AccessFlags(1 << 5);
    /// `IBV_ACCESS_ON_DEMAND`.
    pub const ON_DEMAND: AccessFlags = AccessFlags(1 << 6);
    /// `IBV_ACCESS_HUGETLB` (a hint).
    pub const HUGETLB: AccessFlags = AccessFlags(1 << 7);
    /// `IBV_ACCESS_FLUSH_GLOBAL`.
    pub const FLUSH_GLOBAL: AccessFlags = AccessFlags(1 << 8);
    /// `IBV_ACCESS_FLUSH_PERSISTENT`.
    pub const FLUSH_PERSISTENT: AccessFlags = AccessFlags(1 << 9);
    /// `IBV_ACCESS_RELAXED_ORDERING` (first of the optional range, bits 20..=29).
    pub const RELAXED_ORDERING: AccessFlags = AccessFlags(1 << 20);
    /// The optional range (`IBV_ACCESS_OPTIONAL_RANGE`): ignored when unsupported.
    pub const OPTIONAL_RANGE: AccessFlags = AccessFlags(0x3ff0_0000);
    /// The bits a QP's `qp_access_flags` may carry: rxe's
    /// `RXE_ACCESS_SUPPORTED_QP` (= its MR set: the four access bits, MW_BIND,
    /// ON_DEMAND, the flush bits and the optional range). Only the remote bits
    /// mean anything for a QP; the others are kept and ignored (mlx5 ignores
    /// them too), so programs that pass their MR's flags work.
    pub const QP_SUPPORTED: AccessFlags = AccessFlags(
        0xf | Self::MW_BIND.0
            | Self::ON_DEMAND.0
            | Self::FLUSH_GLOBAL.0
            | Self::FLUSH_PERSISTENT.0
            | Self::OPTIONAL_RANGE.0,
    );

    /// True if every bit of `other` is set.
    pub const fn contains(self, other: AccessFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for AccessFlags {
    type Output = AccessFlags;
    fn bitor(self, rhs: AccessFlags) -> AccessFlags {
        AccessFlags(self.0 | rhs.0)
    }
}

impl fmt::Display for AccessFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 10] = [
            "LOCAL_WRITE",
            "REMOTE_WRITE",
            "REMOTE_READ",
            "REMOTE_ATOMIC",
            "MW_BIND",
            "ZERO_BASED",
            "ON_DEMAND",
            "HUGETLB",
            "FLUSH_GLOBAL",
            "FLUSH_PERSISTENT",
        ];
        let mut parts: Vec<String> = (0..10)
            .filter(|b| self.0 & (1 << b) != 0)
            .map(|b| NAMES[b].to_string())
            .collect();
        let rest = self.0 & !0x3ff;
        if rest != 0 {
            parts.push(format!("{rest:#x}"));
        }
        if parts.is_empty() {
            return f.write_str("none");
        }
        f.write_str(&parts.join("|"))
    }
}

/// A 128-bit GID. On RoCE it is an IPv6 address, IPv4 as `::ffff:a.b.c.d`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The all-zero GID (an empty table entry).
    pub const ZERO: Gid = Gid([0; 16]);

    /// True for the all-zero GID.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    /// The low 64 bits (`global.interface_id`, as a big-endian number).
    pub fn interface_id(&self) -> u64 {
        u64::from_be_bytes(self.0[8..].try_into().unwrap_or([0; 8]))
    }

    /// The IP address this GID stands for (IPv4 when IPv4-mapped,
    /// `::ffff:a.b.c.d`, as `Ipv6Addr::to_ipv4_mapped` says). Read per
    /// datagram (peer checks, ICRC pseudo-header): one 128-bit compare.
    #[inline]
    pub fn ip(&self) -> IpAddr {
        let v = u128::from_be_bytes(self.0);
        if v >> 32 == 0xffff {
            IpAddr::V4(Ipv4Addr::from(v as u32))
        } else {
            IpAddr::V6(Ipv6Addr::from(v))
        }
    }
}

impl From<IpAddr> for Gid {
    fn from(ip: IpAddr) -> Gid {
        match ip {
            IpAddr::V4(v4) => Gid::from(v4),
            IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }
}

impl From<Ipv4Addr> for Gid {
    fn from(v4: Ipv4Addr) -> Gid {
        Gid(v4.to_ipv6_mapped().octets())
    }
}

impl fmt::Display for Gid {
    /// The `ibv_devinfo` form: eight groups of four hex digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({})", self.ip())
    }
}

/// `struct ibv_global_route`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GlobalRoute {
    /// Destination GID.
    pub dgid: Gid,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Index of the source GID in the local GID table.
    pub sgid_index: u8,
    /// Hop limit (IPv4 TTL / IPv6 hop limit).
    pub hop_limit: u8,
    /// Traffic class (IPv4 TOS / IPv6 traffic class).
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`: an address vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AhAttr {
    /// The GRH fields (used when `is_global` = 1; always on RoCE).
    pub grh: GlobalRoute,
    /// Destination LID (meaningless on RoCE).
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits (meaningless on RoCE).
    pub src_path_bits: u8,
    /// Static rate.
    pub static_rate: u8,
    /// 1 when `grh` is valid.
    pub is_global: u8,
    /// Local port.
    pub port_num: u8,
}

impl AhAttr {
    /// A RoCE address vector: to `dgid`, from local GID `sgid_index`, on port 1,
    /// hop limit 64 (the GRH is mandatory on RoCE).
    pub fn roce(dgid: Gid, sgid_index: u8) -> AhAttr {
        AhAttr {
            grh: GlobalRoute {
                dgid,
                flow_label: 0,
                sgid_index,
                hop_limit: 64,
                traffic_class: 0,
            },
            is_global: 1,
            port_num: 1,
            ..AhAttr::default()
        }
    }
}

/// `struct ibv_qp_cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpCap {
    /// Send WRs that may be outstanding.
    pub max_send_wr: u32,
    /// Receive WRs that may be outstanding.
    pub max_recv_wr: u32,
    /// Scatter/gather elements per send WR.
    pub max_send_sge: u32,
    /// Scatter/gather elements per receive WR.
    pub max_recv_sge: u32,
    /// Bytes of inline data per send WR.
    pub max_inline_data: u32,
}

/// `enum ibv_mig_state`: the path-migration state (APM; not used on RoCE, but
/// stored and reported like any attribute).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MigState {
    /// `IBV_MIG_MIGRATED` (0).
    #[default]
    Migrated = 0,
    /// `IBV_MIG_REARM` (1).
    Rearm = 1,
    /// `IBV_MIG_ARMED` (2).
    Armed = 2,
}

impl MigState {
    /// From the `ibv_mig_state` value (0..=2).
    pub fn from_raw(v: u32) -> Option<MigState> {
        [MigState::Migrated, MigState::Rearm, MigState::Armed]
            .get(v as usize)
            .copied()
    }

    /// The `ibv_mig_state` value.
    pub fn raw(self) -> u32 {
        self as u32
    }
}

/// `struct ibv_qp_attr` with its enumerated fields as types.
///
/// `Default` is the attribute set of a QP in RESET: state RESET, nothing
/// granted, and the 1024-byte path MTU the data path assumes until
/// `IBV_QP_PATH_MTU` is set (which attributes are set is the valid mask's say).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpAttr {
    /// The requested state (`IBV_QP_STATE`), or the current one on query.
    pub qp_state: QpState,
    /// The caller's idea of the current state (`IBV_QP_CUR_STATE`).
    pub cur_qp_state: QpState,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Path-migration state.
    pub path_mig_state: MigState,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Receive PSN (24 bits used).
    pub rq_psn: u32,
    /// Send PSN (24 bits used).
    pub sq_psn: u32,
    /// Destination QP number (24 bits).
    pub dest_qp_num: u32,
    /// Remote access flags.
    pub qp_access_flags: AccessFlags,
    /// Capacities.
    pub cap: QpCap,
    /// Primary path address vector.
    pub ah_attr: AhAttr,
    /// Alternate path address vector.
    pub alt_ah_attr: AhAttr,
    /// Primary P_Key index.
    pub pkey_index: u16,
    /// Alternate P_Key index.
    pub alt_pkey_index: u16,
    /// Request the SQ-drained async event.
    pub en_sqd_async_notify: u8,
    /// SQ is draining (query only).
    pub sq_draining: u8,
    /// Outstanding RDMA READ/atomic as initiator.
    pub max_rd_atomic: u8,
    /// Responder resources for RDMA READ/atomic.
    pub max_dest_rd_atomic: u8,
    /// Minimum RNR NAK timer code (0..=31).
    pub min_rnr_timer: u8,
    /// Primary port.
    pub port_num: u8,
    /// Local ACK timeout code (0..=31).
    pub timeout: u8,
    /// Transport retry count (0..=7).
    pub retry_cnt: u8,
    /// RNR retry count (0..=7, 7 = infinite).
    pub rnr_retry: u8,
    /// Alternate port.
    pub alt_port_num: u8,
    /// Alternate local ACK timeout.
    pub alt_timeout: u8,
    /// Rate limit in kbps (`ibv_modify_qp_rate_limit`; RAW_PACKET only).
    pub rate_limit: u32,
}

/// An IBA 24-bit number (PSN, QPN) mask.
pub const MASK_24: u32 = 0x00ff_ffff;

/// `struct ibv_sge`: one local buffer of a WR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    /// Start address (or offset into a zero-based MR).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// L_Key of the MR that covers the buffer.
    pub lkey: u32,
}

/// Total byte length of a scatter/gather list (u64: 32 SGEs of 4 GiB do not overflow).
pub fn sg_total_len(sg_list: &[Sge]) -> u64 {
    sg_list.iter().map(|s| u64::from(s.length)).sum()
}

#[cfg(test)]
mod gid_tests {
    use super::*;

    /// [`Gid::ip`] as first written, through the standard library.
    fn ip_by_std(g: &Gid) -> IpAddr {
        let v6 = Ipv6Addr::from(g.0);
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4000))]

        /// Any 16 bytes, and IPv4-mapped GIDs with any one byte changed.
        #[test]
        fn ip_is_the_standard_librarys(bytes: [u8; 16], v4: [u8; 4], at in 0usize..16, x: u8) {
            let g = Gid(bytes);
            proptest::prop_assert_eq!(g.ip(), ip_by_std(&g));
            let mapped = Gid::from(Ipv4Addr::from(v4));
            proptest::prop_assert_eq!(mapped.ip(), IpAddr::V4(Ipv4Addr::from(v4)));
            let mut near = mapped;
            near.0[at] ^= x;
            proptest::prop_assert_eq!(near.ip(), ip_by_std(&near));
        }
    }
}

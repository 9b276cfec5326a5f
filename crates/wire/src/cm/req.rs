//! REQ (spec/cm.md §2.1, §2.2; table 106): the active side's connection
//! request — service ID, CA GUID, QP, starting PSN, RDMA read resources,
//! timeouts and retry counts, the primary and alternate paths, and 92 bytes
//! of private data (the first 36 are rdma_cm's [`super::cma`] header). Promise
//! as in [`crate::cm`]; `parse` refuses Transport Service Type 2 (reserved).

use super::bits::{self, cm_fields, cm_private_data};
use super::TransportType;
use crate::field::{self, fixed_header_view};
use crate::mad::{MadError, DATA_LEN};
use crate::{PKey, Psn, Qkey, Qpn};

pub const SERVICE_ID_OFFSET: usize = 8;
pub const LOCAL_CA_GUID_OFFSET: usize = 16;
/// Where the primary path starts (§2.2).
pub const PRIMARY_PATH: usize = 52;
/// Where the alternate path starts (§2.2): the primary's layout, 44 bytes on.
pub const ALTERNATE_PATH: usize = 96;
pub const PRIVATE_DATA_OFFSET: usize = 140;
pub const PRIVATE_DATA_LEN: usize = 92;

fixed_header_view!("REQ", DATA_LEN);

cm_fields! {
    (local_comm_id, set_local_comm_id) = (0, 0, 32);
    (local_qkey, set_local_qkey) = (28, 0, 32);
    (local_qpn, set_local_qpn) = (32, 0, 24);
    (responder_resources, set_responder_resources) = (35, 0, 8);
    (local_eecn, set_local_eecn) = (36, 0, 24);
    (initiator_depth, set_initiator_depth) = (39, 0, 8);
    (remote_eecn, set_remote_eecn) = (40, 0, 24);
    /// Remote CM Response Timeout 43[0]:5.
    (remote_cm_response_timeout, set_remote_cm_response_timeout) = (43, 0, 5);
    /// Transport Service Type 43[5]:2.
    (transport_service_type, set_transport_service_type) = (43, 5, 2);
    /// End-to-End Flow Control 43[7]:1.
    (flow_control, set_flow_control) = (43, 7, 1);
    (starting_psn, set_starting_psn) = (44, 0, 24);
    /// Local CM Response Timeout 47[0]:5.
    (local_cm_response_timeout, set_local_cm_response_timeout) = (47, 0, 5);
    /// Retry Count 47[5]:3.
    (retry_count, set_retry_count) = (47, 5, 3);
    (pkey, set_pkey) = (48, 0, 16);
    /// Path Packet Payload MTU 50[0]:4.
    (path_mtu, set_path_mtu) = (50, 0, 4);
    /// RDC Exists 50[4]:1.
    (rdc_exists, set_rdc_exists) = (50, 4, 1);
    /// RNR Retry Count 50[5]:3.
    (rnr_retry_count, set_rnr_retry_count) = (50, 5, 3);
    /// Max CM Retries 51[0]:4.
    (max_cm_retries, set_max_cm_retries) = (51, 0, 4);
    /// SRQ 51[4]:1.
    (srq, set_srq) = (51, 4, 1);
    /// Extended Transport Type 51[5]:3.
    (extended_transport_type, set_extended_transport_type) = (51, 5, 3);
    /// SAP Supported 139[5]:1.
    (sap_supported, set_sap_supported) = (139, 5, 1);
}

cm_private_data!();

/// A path's bit fields relative to its start (§2.2): `(name, byte, bit, width)`.
pub const PATH_FIELDS: [(&str, usize, u32, u32); 9] = [
    ("local_lid", 0, 0, 16),
    ("remote_lid", 2, 0, 16),
    ("flow_label", 36, 0, 20),
    ("packet_rate", 39, 2, 6),
    ("traffic_class", 40, 0, 8),
    ("hop_limit", 41, 0, 8),
    ("sl", 42, 0, 4),
    ("subnet_local", 42, 4, 1),
    ("local_ack_timeout", 43, 0, 5),
];
const LOCAL_GID: usize = 4;
const REMOTE_GID: usize = 20;

/// One path of a REQ (primary or alternate, §2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Path {
    pub local_lid: u16,
    pub remote_lid: u16,
    pub local_gid: [u8; 16],
    pub remote_gid: [u8; 16],
    /// 20 bits.
    pub flow_label: u32,
    /// 6 bits.
    pub packet_rate: u8,
    pub traffic_class: u8,
    pub hop_limit: u8,
    /// 4 bits.
    pub sl: u8,
    pub subnet_local: bool,
    /// 5 bits.
    pub local_ack_timeout: u8,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn service_id(&self) -> u64 {
        field::read_u64(self.bytes(), SERVICE_ID_OFFSET)
    }
    pub fn local_ca_guid(&self) -> u64 {
        field::read_u64(self.bytes(), LOCAL_CA_GUID_OFFSET)
    }

    /// The path at `base` ([`PRIMARY_PATH`] or [`ALTERNATE_PATH`]).
    pub fn path(&self, base: usize) -> Path {
        let b = self.bytes();
        let f = |i: usize| {
            let (_, byte, bit, width) = PATH_FIELDS[i];
            bits::get(b, base + byte, bit, width)
        };
        let gid = |at: usize| {
            let mut g = [0u8; 16];
            g.copy_from_slice(&b[base + at..base + at + 16]);
            g
        };
        Path {
            local_lid: f(0) as u16,
            remote_lid: f(1) as u16,
            local_gid: gid(LOCAL_GID),
            remote_gid: gid(REMOTE_GID),
            flow_label: f(2),
            packet_rate: f(3) as u8,
            traffic_class: f(4) as u8,
            hop_limit: f(5) as u8,
            sl: f(6) as u8,
            subnet_local: f(7) != 0,
            local_ack_timeout: f(8) as u8,
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_service_id(&mut self, id: u64) {
        field::write_u64(self.bytes_mut(), SERVICE_ID_OFFSET, id);
    }
    pub fn set_local_ca_guid(&mut self, guid: u64) {
        field::write_u64(self.bytes_mut(), LOCAL_CA_GUID_OFFSET, guid);
    }

    /// Writes every field of the path at `base`.
    pub fn set_path(&mut self, base: usize, path: &Path) {
        let values = [
            u32::from(path.local_lid),
            u32::from(path.remote_lid),
            path.flow_label,
            u32::from(path.packet_rate),
            u32::from(path.traffic_class),
            u32::from(path.hop_limit),
            u32::from(path.sl),
            u32::from(path.subnet_local),
            u32::from(path.local_ack_timeout),
        ];
        let b = self.bytes_mut();
        for ((_, byte, bit, width), value) in PATH_FIELDS.iter().zip(values) {
            bits::set(b, base + byte, *bit, *width, value);
        }
        b[base + LOCAL_GID..base + LOCAL_GID + 16].copy_from_slice(&path.local_gid);
        b[base + REMOTE_GID..base + REMOTE_GID + 16].copy_from_slice(&path.remote_gid);
    }
}

/// A parsed REQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub local_comm_id: u32,
    pub service_id: u64,
    pub local_ca_guid: u64,
    pub local_qkey: Qkey,
    pub local_qpn: Qpn,
    pub responder_resources: u8,
    pub local_eecn: u32,
    pub initiator_depth: u8,
    pub remote_eecn: u32,
    pub remote_cm_response_timeout: u8,
    pub transport: TransportType,
    pub flow_control: bool,
    /// The PSN the REQ's sender expects to receive (spec/cm.md §6).
    pub starting_psn: Psn,
    pub local_cm_response_timeout: u8,
    pub retry_count: u8,
    pub pkey: PKey,
    /// IB MTU code (1 = 256 … 5 = 4096).
    pub path_mtu: u8,
    pub rdc_exists: bool,
    pub rnr_retry_count: u8,
    pub max_cm_retries: u8,
    pub srq: bool,
    pub extended_transport_type: u8,
    pub primary_path: Path,
    pub alternate_path: Path,
    pub sap_supported: bool,
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, MadError> {
        packet.check_len()?;
        // cm_msgs.h cm_req_get_qp_type: 0 RC, 1 UC, 3 extended; 2 reserved.
        let transport = match packet.transport_service_type() {
            0 => TransportType::Rc,
            1 => TransportType::Uc,
            3 => TransportType::Extended,
            value => {
                return Err(MadError::Reserved {
                    field: "REQ Transport Service Type",
                    value,
                })
            }
        };
        let mut private_data = [0u8; PRIVATE_DATA_LEN];
        private_data.copy_from_slice(packet.private_data());
        Ok(Repr {
            local_comm_id: packet.local_comm_id(),
            service_id: packet.service_id(),
            local_ca_guid: packet.local_ca_guid(),
            local_qkey: Qkey(packet.local_qkey()),
            local_qpn: Qpn::from_masked(packet.local_qpn()),
            responder_resources: packet.responder_resources() as u8,
            local_eecn: packet.local_eecn(),
            initiator_depth: packet.initiator_depth() as u8,
            remote_eecn: packet.remote_eecn(),
            remote_cm_response_timeout: packet.remote_cm_response_timeout() as u8,
            transport,
            flow_control: packet.flow_control() != 0,
            starting_psn: Psn::from_masked(packet.starting_psn()),
            local_cm_response_timeout: packet.local_cm_response_timeout() as u8,
            retry_count: packet.retry_count() as u8,
            pkey: PKey(packet.pkey() as u16),
            path_mtu: packet.path_mtu() as u8,
            rdc_exists: packet.rdc_exists() != 0,
            rnr_retry_count: packet.rnr_retry_count() as u8,
            max_cm_retries: packet.max_cm_retries() as u8,
            srq: packet.srq() != 0,
            extended_transport_type: packet.extended_transport_type() as u8,
            primary_path: packet.path(PRIMARY_PATH),
            alternate_path: packet.path(ALTERNATE_PATH),
            sap_supported: packet.sap_supported() != 0,
            private_data,
        })
    }

    pub const fn buffer_len(&self) -> usize {
        DATA_LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.bytes_mut()[..DATA_LEN].fill(0);
        packet.set_local_comm_id(self.local_comm_id);
        packet.set_service_id(self.service_id);
        packet.set_local_ca_guid(self.local_ca_guid);
        packet.set_local_qkey(self.local_qkey.0);
        packet.set_local_qpn(self.local_qpn.get());
        packet.set_responder_resources(u32::from(self.responder_resources));
        packet.set_local_eecn(self.local_eecn);
        packet.set_initiator_depth(u32::from(self.initiator_depth));
        packet.set_remote_eecn(self.remote_eecn);
        packet.set_remote_cm_response_timeout(u32::from(self.remote_cm_response_timeout));
        packet.set_transport_service_type(self.transport as u32);
        packet.set_flow_control(u32::from(self.flow_control));
        packet.set_starting_psn(self.starting_psn.get());
        packet.set_local_cm_response_timeout(u32::from(self.local_cm_response_timeout));
        packet.set_retry_count(u32::from(self.retry_count));
        packet.set_pkey(u32::from(self.pkey.0));
        packet.set_path_mtu(u32::from(self.path_mtu));
        packet.set_rdc_exists(u32::from(self.rdc_exists));
        packet.set_rnr_retry_count(u32::from(self.rnr_retry_count));
        packet.set_max_cm_retries(u32::from(self.max_cm_retries));
        packet.set_srq(u32::from(self.srq));
        packet.set_extended_transport_type(u32::from(self.extended_transport_type));
        packet.set_path(PRIMARY_PATH, &self.primary_path);
        packet.set_path(ALTERNATE_PATH, &self.alternate_path);
        packet.set_sap_supported(u32::from(self.sap_supported));
        packet
            .private_data_mut()
            .copy_from_slice(&self.private_data);
    }

    /// True when the alternate path is present (its Local Port LID is not 0,
    /// `cm_req_has_alt_path`).
    pub fn has_alternate_path(&self) -> bool {
        self.alternate_path.local_lid != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SGID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 1];
    const DGID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 2];

    /// A REQ as rdma_cm sends it over RoCE (spec/cm.md §3.4): TCP port 18515,
    /// timeouts 20, 15 CM retries, permissive LIDs, hop limit 64.
    fn bytes() -> [u8; DATA_LEN] {
        let mut b = [0u8; DATA_LEN];
        b[..52].copy_from_slice(&[
            0x5E,
            0x5E,
            0x00,
            0x01,
            0,
            0,
            0,
            0, // local comm id, reserved
            0,
            0,
            0,
            0,
            0x01,
            0x06,
            0x48,
            0x53, // service id 0x1064853
            0x02,
            0x11,
            0x22,
            0xFF,
            0xFE,
            0x33,
            0x44,
            0x55, // CA GUID
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0, // reserved, qkey
            0x00,
            0x00,
            0x11,
            4, // qpn 0x11, responder resources 4
            0,
            0,
            0,
            2, // eecn, initiator depth 2
            0,
            0,
            0,
            (20 << 3), // remote eecn, remote cm timeout 20, RC, no flow control
            0x12,
            0x34,
            0x56,
            (20 << 3) | 7, // psn, local cm timeout 20, retry 7
            0xFF,
            0xFF,
            (3 << 4) | 7,
            15 << 4, // pkey, mtu 1024, rnr 7, max cm retries 15
        ]);
        b[52..56].copy_from_slice(&[0xFF, 0xFF, 0xFF, 0xFF]);
        b[56..72].copy_from_slice(&SGID);
        b[72..88].copy_from_slice(&DGID);
        b[88..92].copy_from_slice(&[0x0A, 0xBC, 0xD0, 3]); // flow label 0xABCD, rate 3
        b[92..96].copy_from_slice(&[0, 64, 0, 19 << 3]); // tc 0, hop 64, sl 0, ack timeout 19
        b[140] = 0; // cma version
        b[141] = 0x40;
        b[231] = 0xEE;
        b
    }

    fn repr() -> Repr {
        let mut private_data = [0u8; PRIVATE_DATA_LEN];
        private_data[1] = 0x40;
        private_data[PRIVATE_DATA_LEN - 1] = 0xEE;
        Repr {
            local_comm_id: 0x5E5E_0001,
            service_id: 0x0106_4853,
            local_ca_guid: 0x0211_22FF_FE33_4455,
            local_qkey: Qkey(0),
            local_qpn: Qpn::from_masked(0x11),
            responder_resources: 4,
            local_eecn: 0,
            initiator_depth: 2,
            remote_eecn: 0,
            remote_cm_response_timeout: 20,
            transport: TransportType::Rc,
            flow_control: false,
            starting_psn: Psn::from_masked(0x12_3456),
            local_cm_response_timeout: 20,
            retry_count: 7,
            pkey: PKey(0xFFFF),
            path_mtu: 3,
            rdc_exists: false,
            rnr_retry_count: 7,
            max_cm_retries: 15,
            srq: false,
            extended_transport_type: 0,
            primary_path: Path {
                local_lid: 0xFFFF,
                remote_lid: 0xFFFF,
                local_gid: SGID,
                remote_gid: DGID,
                flow_label: 0xABCD,
                packet_rate: 3,
                traffic_class: 0,
                hop_limit: 64,
                sl: 0,
                subnet_local: false,
                local_ack_timeout: 19,
            },
            alternate_path: Path::default(),
            sap_supported: false,
            private_data,
        }
    }

    #[test]
    fn deconstruct() {
        let b = bytes();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.service_id(), 0x0106_4853);
        assert_eq!(
            (p.local_qpn(), p.responder_resources(), p.initiator_depth()),
            (0x11, 4, 2)
        );
        assert_eq!(
            (p.remote_cm_response_timeout(), p.transport_service_type()),
            (20, 0)
        );
        assert_eq!((p.local_cm_response_timeout(), p.retry_count()), (20, 7));
        assert_eq!(
            (p.path_mtu(), p.rnr_retry_count(), p.max_cm_retries()),
            (3, 7, 15)
        );
        assert_eq!(p.path(PRIMARY_PATH), repr().primary_path);
        assert_eq!(p.path(ALTERNATE_PATH), Path::default());
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; DATA_LEN];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_local_comm_id(0x5E5E_0001);
        p.set_service_id(0x0106_4853);
        p.set_local_ca_guid(0x0211_22FF_FE33_4455);
        p.set_local_qpn(0x11);
        p.set_responder_resources(4);
        p.set_initiator_depth(2);
        p.set_remote_cm_response_timeout(20);
        p.set_starting_psn(0x12_3456);
        p.set_local_cm_response_timeout(20);
        p.set_retry_count(7);
        p.set_pkey(0xFFFF);
        p.set_path_mtu(3);
        p.set_rnr_retry_count(7);
        p.set_max_cm_retries(15);
        p.set_path(PRIMARY_PATH, &repr().primary_path);
        p.private_data_mut()[1] = 0x40;
        p.private_data_mut()[PRIVATE_DATA_LEN - 1] = 0xEE;
        assert_eq!(buf, bytes());
    }

    #[test]
    fn parse() {
        let b = bytes();
        assert_eq!(Repr::parse(&Packet::new_unchecked(&b[..])), Ok(repr()));
        let mut reserved = b;
        reserved[43] |= 2 << 1;
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&reserved[..])),
            Err(MadError::Reserved {
                field: "REQ Transport Service Type",
                value: 2
            })
        );
        let mut uc = b;
        uc[43] |= 1 << 1;
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&uc[..])).map(|r| r.transport),
            Ok(TransportType::Uc)
        );
    }

    #[test]
    fn emit() {
        let mut buf = [0xEE; DATA_LEN];
        repr().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, bytes());
    }

    #[test]
    fn path_fields_lie_inside_both_paths() {
        for base in [PRIMARY_PATH, ALTERNATE_PATH] {
            for (name, byte, bit, width) in PATH_FIELDS {
                assert!(base + byte + 4 <= DATA_LEN, "{name}");
                assert!(bit + width <= 32, "{name}");
            }
            assert!(base + REMOTE_GID + 16 <= PRIVATE_DATA_OFFSET);
        }
    }
}

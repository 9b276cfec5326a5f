//! REP (spec/cm.md §2.5; table 110): the passive side's QP, starting PSN,
//! RDMA read resources, target ACK delay, CA GUID and 196 bytes of private
//! data. Promise as in [`crate::cm`].

use super::bits::{cm_fields, cm_private_data};
use crate::field::{self, fixed_header_view};
use crate::mad::{MadError, DATA_LEN};
use crate::{Psn, Qkey, Qpn};

pub const LOCAL_CA_GUID_OFFSET: usize = 28;
pub const PRIVATE_DATA_OFFSET: usize = 36;
pub const PRIVATE_DATA_LEN: usize = 196;

fixed_header_view!("REP", DATA_LEN);

cm_fields! {
    (local_comm_id, set_local_comm_id) = (0, 0, 32);
    (remote_comm_id, set_remote_comm_id) = (4, 0, 32);
    (local_qkey, set_local_qkey) = (8, 0, 32);
    (local_qpn, set_local_qpn) = (12, 0, 24);
    (local_eecn, set_local_eecn) = (16, 0, 24);
    (starting_psn, set_starting_psn) = (20, 0, 24);
    (responder_resources, set_responder_resources) = (24, 0, 8);
    (initiator_depth, set_initiator_depth) = (25, 0, 8);
    /// Target ACK Delay 26[0]:5.
    (target_ack_delay, set_target_ack_delay) = (26, 0, 5);
    /// Failover Accepted 26[5]:2.
    (failover_accepted, set_failover_accepted) = (26, 5, 2);
    /// End-to-End Flow Control 26[7]:1.
    (flow_control, set_flow_control) = (26, 7, 1);
    /// RNR Retry Count 27[0]:3.
    (rnr_retry_count, set_rnr_retry_count) = (27, 0, 3);
    /// SRQ 27[3]:1.
    (srq, set_srq) = (27, 3, 1);
}

cm_private_data!();

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn local_ca_guid(&self) -> u64 {
        field::read_u64(self.bytes(), LOCAL_CA_GUID_OFFSET)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_local_ca_guid(&mut self, guid: u64) {
        field::write_u64(self.bytes_mut(), LOCAL_CA_GUID_OFFSET, guid);
    }
}

/// A parsed REP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub local_qkey: Qkey,
    pub local_qpn: Qpn,
    pub local_eecn: u32,
    /// The PSN the REP's sender expects to receive (spec/cm.md §6).
    pub starting_psn: Psn,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub target_ack_delay: u8,
    pub failover_accepted: u8,
    pub flow_control: bool,
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub local_ca_guid: u64,
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, MadError> {
        packet.check_len()?;
        let mut private_data = [0u8; PRIVATE_DATA_LEN];
        private_data.copy_from_slice(packet.private_data());
        Ok(Repr {
            local_comm_id: packet.local_comm_id(),
            remote_comm_id: packet.remote_comm_id(),
            local_qkey: Qkey(packet.local_qkey()),
            local_qpn: Qpn::from_masked(packet.local_qpn()),
            local_eecn: packet.local_eecn(),
            starting_psn: Psn::from_masked(packet.starting_psn()),
            responder_resources: packet.responder_resources() as u8,
            initiator_depth: packet.initiator_depth() as u8,
            target_ack_delay: packet.target_ack_delay() as u8,
            failover_accepted: packet.failover_accepted() as u8,
            flow_control: packet.flow_control() != 0,
            rnr_retry_count: packet.rnr_retry_count() as u8,
            srq: packet.srq() != 0,
            local_ca_guid: packet.local_ca_guid(),
            private_data,
        })
    }

    pub const fn buffer_len(&self) -> usize {
        DATA_LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.bytes_mut()[..DATA_LEN].fill(0);
        packet.set_local_comm_id(self.local_comm_id);
        packet.set_remote_comm_id(self.remote_comm_id);
        packet.set_local_qkey(self.local_qkey.0);
        packet.set_local_qpn(self.local_qpn.get());
        packet.set_local_eecn(self.local_eecn);
        packet.set_starting_psn(self.starting_psn.get());
        packet.set_responder_resources(u32::from(self.responder_resources));
        packet.set_initiator_depth(u32::from(self.initiator_depth));
        packet.set_target_ack_delay(u32::from(self.target_ack_delay));
        packet.set_failover_accepted(u32::from(self.failover_accepted));
        packet.set_flow_control(u32::from(self.flow_control));
        packet.set_rnr_retry_count(u32::from(self.rnr_retry_count));
        packet.set_srq(u32::from(self.srq));
        packet.set_local_ca_guid(self.local_ca_guid);
        packet
            .private_data_mut()
            .copy_from_slice(&self.private_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes() -> [u8; DATA_LEN] {
        let mut b = [0u8; DATA_LEN];
        b[..36].copy_from_slice(&[
            0,
            0,
            0x10,
            0x01, // local comm id
            0,
            0,
            0x20,
            0x02, // remote comm id
            0,
            0,
            0,
            0, // qkey
            0x00,
            0x00,
            0x12,
            0, // qpn 0x12
            0,
            0,
            0,
            0, // eecn
            0xAB,
            0xCD,
            0xEF,
            0, // psn
            16,
            8,                   // resources, depth
            (15 << 3) | 1,       // ack delay 15, failover 0, flow control 1
            (7 << 5) | (1 << 4), // rnr 7, srq
            0x02,
            0x11,
            0x22,
            0xFF,
            0xFE,
            0x33,
            0x44,
            0x55, // CA GUID
        ]);
        b[36] = 0x99;
        b
    }

    fn repr() -> Repr {
        let mut private_data = [0u8; PRIVATE_DATA_LEN];
        private_data[0] = 0x99;
        Repr {
            local_comm_id: 0x1001,
            remote_comm_id: 0x2002,
            local_qkey: Qkey(0),
            local_qpn: Qpn::from_masked(0x12),
            local_eecn: 0,
            starting_psn: Psn::from_masked(0xAB_CDEF),
            responder_resources: 16,
            initiator_depth: 8,
            target_ack_delay: 15,
            failover_accepted: 0,
            flow_control: true,
            rnr_retry_count: 7,
            srq: true,
            local_ca_guid: 0x0211_22FF_FE33_4455,
            private_data,
        }
    }

    #[test]
    fn deconstruct() {
        let b = bytes();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!((p.local_qpn(), p.starting_psn()), (0x12, 0xAB_CDEF));
        assert_eq!(
            (
                p.target_ack_delay(),
                p.flow_control(),
                p.rnr_retry_count(),
                p.srq()
            ),
            (15, 1, 7, 1)
        );
        assert_eq!(p.local_ca_guid(), 0x0211_22FF_FE33_4455);
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; DATA_LEN];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_local_comm_id(0x1001);
        p.set_remote_comm_id(0x2002);
        p.set_local_qpn(0x12);
        p.set_starting_psn(0xAB_CDEF);
        p.set_responder_resources(16);
        p.set_initiator_depth(8);
        p.set_target_ack_delay(15);
        p.set_flow_control(1);
        p.set_rnr_retry_count(7);
        p.set_srq(1);
        p.set_local_ca_guid(0x0211_22FF_FE33_4455);
        p.private_data_mut()[0] = 0x99;
        assert_eq!(buf, bytes());
    }

    #[test]
    fn parse() {
        let mut b = bytes();
        b[15] = 0xFF; // reserved bits ignored
        b[27] |= 0x0F;
        assert_eq!(Repr::parse(&Packet::new_unchecked(&b[..])), Ok(repr()));
    }

    #[test]
    fn emit() {
        let mut buf = [0xEE; DATA_LEN];
        repr().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, bytes());
    }
}

//! SIDR_REP (spec/cm.md §2.9; table 120): the answer to a SIDR_REQ — status,
//! QPN, service ID, Q_Key, up to 72 bytes of additional information, 136
//! bytes of private data. Promise as in [`crate::cm`]; `parse` refuses an
//! Additional Information Length over 72.

use super::bits::{cm_fields, cm_private_data};
use super::SidrStatus;
use crate::field::{self, fixed_header_view};
use crate::mad::{MadError, DATA_LEN};
use crate::{Qkey, Qpn};

pub const SERVICE_ID_OFFSET: usize = 12;
pub const INFO_OFFSET: usize = 24;
pub const INFO_LEN: usize = 72;
pub const PRIVATE_DATA_OFFSET: usize = 96;
pub const PRIVATE_DATA_LEN: usize = 136;

fixed_header_view!("SIDR_REP", DATA_LEN);

cm_fields! {
    (request_id, set_request_id) = (0, 0, 32);
    (status, set_status) = (4, 0, 8);
    (info_len, set_info_len) = (5, 0, 8);
    (qpn, set_qpn) = (8, 0, 24);
    (qkey, set_qkey) = (20, 0, 32);
}

cm_private_data!();

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn service_id(&self) -> u64 {
        field::read_u64(self.bytes(), SERVICE_ID_OFFSET)
    }
    pub fn info(&self) -> &[u8] {
        &self.bytes()[INFO_OFFSET..INFO_OFFSET + INFO_LEN]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_service_id(&mut self, id: u64) {
        field::write_u64(self.bytes_mut(), SERVICE_ID_OFFSET, id);
    }
    pub fn info_mut(&mut self) -> &mut [u8] {
        &mut self.bytes_mut()[INFO_OFFSET..INFO_OFFSET + INFO_LEN]
    }
}

/// A parsed SIDR_REP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub request_id: u32,
    pub status: SidrStatus,
    pub info_len: u8,
    pub qpn: Qpn,
    pub service_id: u64,
    pub qkey: Qkey,
    pub info: [u8; INFO_LEN],
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, MadError> {
        packet.check_len()?;
        let info_len = packet.info_len();
        if info_len > INFO_LEN as u32 {
            return Err(MadError::TooLong {
                field: "SIDR_REP Additional Information Length",
                len: info_len,
                max: INFO_LEN as u32,
            });
        }
        let mut info = [0u8; INFO_LEN];
        info.copy_from_slice(packet.info());
        let mut private_data = [0u8; PRIVATE_DATA_LEN];
        private_data.copy_from_slice(packet.private_data());
        Ok(Repr {
            request_id: packet.request_id(),
            status: SidrStatus::from_code(packet.status() as u8),
            info_len: info_len as u8,
            qpn: Qpn::from_masked(packet.qpn()),
            service_id: packet.service_id(),
            qkey: Qkey(packet.qkey()),
            info,
            private_data,
        })
    }

    pub const fn buffer_len(&self) -> usize {
        DATA_LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.bytes_mut()[..DATA_LEN].fill(0);
        packet.set_request_id(self.request_id);
        packet.set_status(u32::from(self.status.code()));
        packet.set_info_len(u32::from(self.info_len));
        packet.set_qpn(self.qpn.get());
        packet.set_service_id(self.service_id);
        packet.set_qkey(self.qkey.0);
        packet.info_mut().copy_from_slice(&self.info);
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
        b[..24].copy_from_slice(&[
            0, 0, 0x0A, 0x0B, 0, 0, 0, 0, // request id, status 0, info len 0
            0x00, 0x01, 0x23, 0, // qpn 0x123
            0, 0, 0, 0, 0x01, 0x11, 0x1F, 0x90, // service id
            0x01, 0x23, 0x45, 0x67, // RDMA_UDP_QKEY
        ]);
        b[96] = 0x55;
        b
    }

    fn repr() -> Repr {
        let mut private_data = [0u8; PRIVATE_DATA_LEN];
        private_data[0] = 0x55;
        Repr {
            request_id: 0x0A0B,
            status: SidrStatus::Success,
            info_len: 0,
            qpn: Qpn::from_masked(0x123),
            service_id: 0x0111_1F90,
            qkey: Qkey(0x0123_4567),
            info: [0; INFO_LEN],
            private_data,
        }
    }

    #[test]
    fn deconstruct() {
        let b = bytes();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(
            (p.request_id(), p.status(), p.qpn(), p.qkey()),
            (0x0A0B, 0, 0x123, 0x0123_4567)
        );
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; DATA_LEN];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_request_id(0x0A0B);
        p.set_qpn(0x123);
        p.set_service_id(0x0111_1F90);
        p.set_qkey(0x0123_4567);
        p.private_data_mut()[0] = 0x55;
        assert_eq!(buf, bytes());
    }

    #[test]
    fn parse() {
        let b = bytes();
        assert_eq!(Repr::parse(&Packet::new_unchecked(&b[..])), Ok(repr()));
        let mut long = b;
        long[5] = 73;
        assert!(matches!(
            Repr::parse(&Packet::new_unchecked(&long[..])),
            Err(MadError::TooLong { len: 73, .. })
        ));
    }

    #[test]
    fn emit() {
        let mut buf = [0xEE; DATA_LEN];
        repr().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, bytes());
    }
}

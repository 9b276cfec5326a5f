//! SIDR_REQ (spec/cm.md §2.8; table 119): a request to resolve a service ID
//! to a UD QP — request ID, P_Key, service ID, 216 bytes of private data (the
//! first 36 are rdma_cm's [`super::cma`] header). Promise as in [`crate::cm`].

use super::bits::{cm_fields, cm_private_data};
use crate::field::{self, fixed_header_view};
use crate::mad::{MadError, DATA_LEN};
use crate::PKey;

pub const SERVICE_ID_OFFSET: usize = 8;
pub const PRIVATE_DATA_OFFSET: usize = 16;
pub const PRIVATE_DATA_LEN: usize = 216;

fixed_header_view!("SIDR_REQ", DATA_LEN);

cm_fields! {
    (request_id, set_request_id) = (0, 0, 32);
    (pkey, set_pkey) = (4, 0, 16);
}

cm_private_data!();

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn service_id(&self) -> u64 {
        field::read_u64(self.bytes(), SERVICE_ID_OFFSET)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_service_id(&mut self, id: u64) {
        field::write_u64(self.bytes_mut(), SERVICE_ID_OFFSET, id);
    }
}

/// A parsed SIDR_REQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub request_id: u32,
    pub pkey: PKey,
    pub service_id: u64,
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, MadError> {
        packet.check_len()?;
        let mut private_data = [0u8; PRIVATE_DATA_LEN];
        private_data.copy_from_slice(packet.private_data());
        Ok(Repr {
            request_id: packet.request_id(),
            pkey: PKey(packet.pkey() as u16),
            service_id: packet.service_id(),
            private_data,
        })
    }

    pub const fn buffer_len(&self) -> usize {
        DATA_LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.bytes_mut()[..DATA_LEN].fill(0);
        packet.set_request_id(self.request_id);
        packet.set_pkey(u32::from(self.pkey.0));
        packet.set_service_id(self.service_id);
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
        b[..16].copy_from_slice(&[
            0, 0, 0x0A, 0x0B, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 0x01, 0x11, 0x1F, 0x90,
        ]);
        b[16] = 0;
        b[17] = 0x40;
        b
    }

    fn repr() -> Repr {
        let mut private_data = [0u8; PRIVATE_DATA_LEN];
        private_data[1] = 0x40;
        Repr {
            request_id: 0x0A0B,
            pkey: PKey(0xFFFF),
            service_id: 0x0111_1F90, // RDMA_PS_UDP, port 8080
            private_data,
        }
    }

    #[test]
    fn deconstruct() {
        let b = bytes();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(
            (p.request_id(), p.pkey(), p.service_id()),
            (0x0A0B, 0xFFFF, 0x0111_1F90)
        );
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; DATA_LEN];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_request_id(0x0A0B);
        p.set_pkey(0xFFFF);
        p.set_service_id(0x0111_1F90);
        p.private_data_mut()[1] = 0x40;
        assert_eq!(buf, bytes());
    }

    #[test]
    fn parse() {
        let mut b = bytes();
        b[6] = 0xFF; // reserved
        assert_eq!(Repr::parse(&Packet::new_unchecked(&b[..])), Ok(repr()));
    }

    #[test]
    fn emit() {
        let mut buf = [0xEE; DATA_LEN];
        repr().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, bytes());
    }
}

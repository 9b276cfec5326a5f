//! DREQ (spec/cm.md §2.7; table 112): the two comm IDs, the remote QPN the
//! request is for, and 220 bytes of private data. Promise as in [`crate::cm`].

use super::bits::{cm_fields, cm_private_data};
use crate::field::fixed_header_view;
use crate::mad::{MadError, DATA_LEN};
use crate::Qpn;

pub const PRIVATE_DATA_OFFSET: usize = 12;
pub const PRIVATE_DATA_LEN: usize = 220;

fixed_header_view!("DREQ", DATA_LEN);

cm_fields! {
    (local_comm_id, set_local_comm_id) = (0, 0, 32);
    (remote_comm_id, set_remote_comm_id) = (4, 0, 32);
    /// Remote QPN/EECN 8:24.
    (remote_qpn, set_remote_qpn) = (8, 0, 24);
}

cm_private_data!();

/// A parsed DREQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub remote_qpn: Qpn,
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
            remote_qpn: Qpn::from_masked(packet.remote_qpn()),
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
        packet.set_remote_qpn(self.remote_qpn.get());
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
        b[..12].copy_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2, 0x12, 0x34, 0x56, 0]);
        b[12] = 0x77;
        b
    }

    fn repr() -> Repr {
        let mut private_data = [0u8; PRIVATE_DATA_LEN];
        private_data[0] = 0x77;
        Repr {
            local_comm_id: 1,
            remote_comm_id: 2,
            remote_qpn: Qpn::from_masked(0x12_3456),
            private_data,
        }
    }

    #[test]
    fn deconstruct() {
        let b = bytes();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(
            (p.local_comm_id(), p.remote_comm_id(), p.remote_qpn()),
            (1, 2, 0x12_3456)
        );
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; DATA_LEN];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_local_comm_id(1);
        p.set_remote_comm_id(2);
        p.set_remote_qpn(0x12_3456);
        p.private_data_mut()[0] = 0x77;
        assert_eq!(buf, bytes());
    }

    #[test]
    fn parse() {
        let mut b = bytes();
        b[11] = 0xFF; // reserved low byte of the QPN word is ignored
        assert_eq!(Repr::parse(&Packet::new_unchecked(&b[..])), Ok(repr()));
    }

    #[test]
    fn emit() {
        let mut buf = [0xEE; DATA_LEN];
        repr().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, bytes());
    }
}

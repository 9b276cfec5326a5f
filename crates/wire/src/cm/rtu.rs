//! RTU and DREP (spec/cm.md §2.6; tables 111 and 113): the two comm IDs and
//! 224 bytes of private data. Promise as in [`crate::cm`].

use super::bits::{cm_fields, cm_private_data};
use crate::field::fixed_header_view;
use crate::mad::{MadError, DATA_LEN};

pub const PRIVATE_DATA_OFFSET: usize = 8;
pub const PRIVATE_DATA_LEN: usize = 224;

fixed_header_view!("RTU/DREP", DATA_LEN);

cm_fields! {
    (local_comm_id, set_local_comm_id) = (0, 0, 32);
    (remote_comm_id, set_remote_comm_id) = (4, 0, 32);
}

cm_private_data!();

/// A parsed RTU or DREP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
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
            private_data,
        })
    }

    pub const fn buffer_len(&self) -> usize {
        DATA_LEN
    }

    /// Writes the whole message (reserved bytes 0) into a [`DATA_LEN`] buffer.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.bytes_mut()[..DATA_LEN].fill(0);
        packet.set_local_comm_id(self.local_comm_id);
        packet.set_remote_comm_id(self.remote_comm_id);
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
        b[..8].copy_from_slice(&[0x11, 0x22, 0x33, 0x44, 0xA1, 0xB2, 0xC3, 0xD4]);
        b[8] = 0x5A;
        b[DATA_LEN - 1] = 0xA5;
        b
    }

    fn repr() -> Repr {
        let mut private_data = [0u8; PRIVATE_DATA_LEN];
        private_data[0] = 0x5A;
        private_data[PRIVATE_DATA_LEN - 1] = 0xA5;
        Repr {
            local_comm_id: 0x1122_3344,
            remote_comm_id: 0xA1B2_C3D4,
            private_data,
        }
    }

    #[test]
    fn deconstruct() {
        let b = bytes();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.local_comm_id(), 0x1122_3344);
        assert_eq!(p.remote_comm_id(), 0xA1B2_C3D4);
        assert_eq!(p.private_data()[0], 0x5A);
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; DATA_LEN];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_local_comm_id(0x1122_3344);
        p.set_remote_comm_id(0xA1B2_C3D4);
        p.private_data_mut()[0] = 0x5A;
        p.private_data_mut()[PRIVATE_DATA_LEN - 1] = 0xA5;
        assert_eq!(buf, bytes());
    }

    #[test]
    fn parse() {
        let b = bytes();
        assert_eq!(Repr::parse(&Packet::new_unchecked(&b[..])), Ok(repr()));
        assert!(Repr::parse(&Packet::new_unchecked(&b[..DATA_LEN - 1])).is_err());
    }

    #[test]
    fn emit() {
        let mut buf = [0xEE; DATA_LEN];
        repr().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, bytes());
    }
}

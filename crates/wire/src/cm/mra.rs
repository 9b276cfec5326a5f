//! MRA (spec/cm.md §2.3; table 107): which message is acknowledged, the
//! sender's service timeout, 222 bytes of private data. Promise as in
//! [`crate::cm`]; `parse` refuses Message MRAed = 3 (reserved).

use super::bits::{cm_fields, cm_private_data};
use super::MsgKind;
use crate::field::fixed_header_view;
use crate::mad::{MadError, DATA_LEN};

pub const PRIVATE_DATA_OFFSET: usize = 10;
pub const PRIVATE_DATA_LEN: usize = 222;

fixed_header_view!("MRA", DATA_LEN);

cm_fields! {
    (local_comm_id, set_local_comm_id) = (0, 0, 32);
    (remote_comm_id, set_remote_comm_id) = (4, 0, 32);
    /// Message MRAed 8[0]:2.
    (message_mraed, set_message_mraed) = (8, 0, 2);
    /// Service Timeout 9[0]:5.
    (service_timeout, set_service_timeout) = (9, 0, 5);
}

cm_private_data!();

/// A parsed MRA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub message_mraed: MsgKind,
    /// 5 bits: the sender needs 4.096 µs × 2^t more.
    pub service_timeout: u8,
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
            message_mraed: MsgKind::from_bits("MRA Message MRAed", packet.message_mraed())?,
            service_timeout: packet.service_timeout() as u8,
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
        packet.set_message_mraed(self.message_mraed as u32);
        packet.set_service_timeout(u32::from(self.service_timeout));
        packet
            .private_data_mut()
            .copy_from_slice(&self.private_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // MRA of a REP with service timeout 24 (CMA_CM_MRA_SETTING's low bits).
    fn bytes() -> [u8; DATA_LEN] {
        let mut b = [0u8; DATA_LEN];
        b[..10].copy_from_slice(&[0, 0, 0, 9, 0, 0, 0, 8, 0x40, 24 << 3]);
        b
    }

    fn repr() -> Repr {
        Repr {
            local_comm_id: 9,
            remote_comm_id: 8,
            message_mraed: MsgKind::Rep,
            service_timeout: 24,
            private_data: [0; PRIVATE_DATA_LEN],
        }
    }

    #[test]
    fn deconstruct() {
        let b = bytes();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!((p.message_mraed(), p.service_timeout()), (1, 24));
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; DATA_LEN];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_local_comm_id(9);
        p.set_remote_comm_id(8);
        p.set_message_mraed(1);
        p.set_service_timeout(24);
        assert_eq!(buf, bytes());
    }

    #[test]
    fn parse() {
        let b = bytes();
        assert_eq!(Repr::parse(&Packet::new_unchecked(&b[..])), Ok(repr()));
        let mut reserved = b;
        reserved[8] = 0xC0;
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&reserved[..])),
            Err(MadError::Reserved {
                field: "MRA Message MRAed",
                value: 3
            })
        );
    }

    #[test]
    fn emit() {
        let mut buf = [0xEE; DATA_LEN];
        repr().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, bytes());
    }
}

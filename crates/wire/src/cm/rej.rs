//! REJ (spec/cm.md §2.4; table 108): which message is refused, why, up to 72
//! bytes of additional rejection information (ARI) and 148 bytes of private
//! data. Promise as in [`crate::cm`]; `parse` refuses Message REJected = 3 and
//! a Reject Info Length over 72.

use super::bits::{cm_fields, cm_private_data};
use super::{MsgKind, RejReason};
use crate::field::fixed_header_view;
use crate::mad::{MadError, DATA_LEN};

pub const ARI_OFFSET: usize = 12;
pub const ARI_LEN: usize = 72;
pub const PRIVATE_DATA_OFFSET: usize = 84;
pub const PRIVATE_DATA_LEN: usize = 148;

fixed_header_view!("REJ", DATA_LEN);

cm_fields! {
    (local_comm_id, set_local_comm_id) = (0, 0, 32);
    (remote_comm_id, set_remote_comm_id) = (4, 0, 32);
    /// Message REJected 8[0]:2.
    (message_rejected, set_message_rejected) = (8, 0, 2);
    /// Reject Info Length 9[0]:7.
    (reject_info_len, set_reject_info_len) = (9, 0, 7);
    /// Reason 10:16.
    (reason, set_reason) = (10, 0, 16);
}

cm_private_data!();

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn ari(&self) -> &[u8] {
        &self.bytes()[ARI_OFFSET..ARI_OFFSET + ARI_LEN]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn ari_mut(&mut self) -> &mut [u8] {
        &mut self.bytes_mut()[ARI_OFFSET..ARI_OFFSET + ARI_LEN]
    }
}

/// A parsed REJ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub message_rejected: MsgKind,
    pub reason: RejReason,
    /// How many bytes of `ari` are meaningful (≤ 72).
    pub ari_len: u8,
    pub ari: [u8; ARI_LEN],
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, MadError> {
        packet.check_len()?;
        let ari_len = packet.reject_info_len();
        if ari_len > ARI_LEN as u32 {
            return Err(MadError::TooLong {
                field: "REJ Reject Info Length",
                len: ari_len,
                max: ARI_LEN as u32,
            });
        }
        let mut ari = [0u8; ARI_LEN];
        ari.copy_from_slice(packet.ari());
        let mut private_data = [0u8; PRIVATE_DATA_LEN];
        private_data.copy_from_slice(packet.private_data());
        Ok(Repr {
            local_comm_id: packet.local_comm_id(),
            remote_comm_id: packet.remote_comm_id(),
            message_rejected: MsgKind::from_bits(
                "REJ Message REJected",
                packet.message_rejected(),
            )?,
            reason: RejReason::from_code(packet.reason() as u16),
            ari_len: ari_len as u8,
            ari,
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
        packet.set_message_rejected(self.message_rejected as u32);
        packet.set_reject_info_len(u32::from(self.ari_len));
        packet.set_reason(u32::from(self.reason.code()));
        packet.ari_mut().copy_from_slice(&self.ari);
        packet
            .private_data_mut()
            .copy_from_slice(&self.private_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // "Nobody listens": REJ of a REQ, reason 8, local comm ID 0 (cm_issue_rej).
    fn bytes() -> [u8; DATA_LEN] {
        let mut b = [0u8; DATA_LEN];
        b[..12].copy_from_slice(&[0, 0, 0, 0, 0xDE, 0xAD, 0xBE, 0xEF, 0x00, 8 << 1, 0, 8]);
        b[12..20].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        b[84] = 0x42;
        b
    }

    fn repr() -> Repr {
        let mut ari = [0u8; ARI_LEN];
        ari[..8].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        let mut private_data = [0u8; PRIVATE_DATA_LEN];
        private_data[0] = 0x42;
        Repr {
            local_comm_id: 0,
            remote_comm_id: 0xDEAD_BEEF,
            message_rejected: MsgKind::Req,
            reason: RejReason::InvalidServiceId,
            ari_len: 8,
            ari,
            private_data,
        }
    }

    #[test]
    fn deconstruct() {
        let b = bytes();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(
            (p.message_rejected(), p.reject_info_len(), p.reason()),
            (0, 8, 8)
        );
        assert_eq!(&p.ari()[..8], &[1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; DATA_LEN];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_remote_comm_id(0xDEAD_BEEF);
        p.set_reject_info_len(8);
        p.set_reason(8);
        p.ari_mut()[..8].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        p.private_data_mut()[0] = 0x42;
        assert_eq!(buf, bytes());
    }

    #[test]
    fn parse() {
        let b = bytes();
        assert_eq!(Repr::parse(&Packet::new_unchecked(&b[..])), Ok(repr()));
        let mut long = b;
        long[9] = 73 << 1;
        assert!(matches!(
            Repr::parse(&Packet::new_unchecked(&long[..])),
            Err(MadError::TooLong { len: 73, .. })
        ));
        let mut unknown = b;
        unknown[11] = 34;
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&unknown[..])).map(|r| r.reason),
            Ok(RejReason::Other(34))
        );
    }

    #[test]
    fn emit() {
        let mut buf = [0xEE; DATA_LEN];
        repr().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, bytes());
    }
}

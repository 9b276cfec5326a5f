//! Datagram Extended Transport Header, 8 bytes (roce-wire.md §5; UD, RD).
//!
//! Owns: DETH view and repr. Promise: no accessor panics after `check_len`;
//! `emit` never panics on a [`LEN`]-byte buffer and writes the reserved byte as 0.

use crate::field::{self, fixed_header_view};
use crate::{Error, Qkey, Qpn};

/// DETH size in bytes.
pub const LEN: usize = 8;

fixed_header_view!("DETH", LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Bytes 0–3: Q_Key.
    pub fn qkey(&self) -> Qkey {
        Qkey(field::read_u32(self.bytes(), 0))
    }
    /// Bytes 5–7: source QPN (byte 4 reserved).
    pub fn src_qp(&self) -> Qpn {
        Qpn::from_masked(field::read_u24(self.bytes(), 5))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_qkey(&mut self, qkey: Qkey) {
        field::write_u32(self.bytes_mut(), 0, qkey.0);
    }
    /// Writes bytes 4–7: reserved 0 and the source QPN.
    pub fn set_src_qp(&mut self, qpn: Qpn) {
        field::write_u32(self.bytes_mut(), 4, qpn.get());
    }
}

/// A parsed DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub qkey: Qkey,
    pub src_qp: Qpn,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            qkey: packet.qkey(),
            src_qp: packet.src_qp(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_qkey(self.qkey);
        packet.set_src_qp(self.src_qp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // ud.pcap frame 1: DETH qkey=0x11111111 srcQP=0x000022.
    const BYTES: [u8; 8] = [0x11, 0x11, 0x11, 0x11, 0, 0, 0, 0x22];
    const REPR: Repr = Repr {
        qkey: Qkey(0x1111_1111),
        src_qp: Qpn::from_masked(0x22),
    };

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!((p.qkey(), p.src_qp()), (REPR.qkey, REPR.src_qp));
    }

    #[test]
    fn construct() {
        let mut buf = [0xAA; LEN];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_qkey(REPR.qkey);
        p.set_src_qp(REPR.src_qp);
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse() {
        assert_eq!(Repr::parse(&Packet::new_unchecked(&BYTES[..])), Ok(REPR));
        let mut reserved = BYTES;
        reserved[4] = 0xFF; // reserved byte ignored on receive
        assert_eq!(Repr::parse(&Packet::new_unchecked(&reserved[..])), Ok(REPR));
        assert!(matches!(
            Repr::parse(&Packet::new_unchecked(&BYTES[..7])),
            Err(Error::Truncated {
                header: "DETH",
                need: 8,
                have: 7
            })
        ));
    }

    #[test]
    fn emit() {
        let mut buf = [0xAA; LEN];
        REPR.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }
}

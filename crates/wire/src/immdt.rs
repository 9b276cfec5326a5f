//! Immediate Data extended transport header, 4 bytes (roce-wire.md §5).
//!
//! Owns: ImmDt view and repr. The value is opaque: `imm` is the four wire bytes
//! read big-endian, so `imm.to_be_bytes()` are exactly the bytes to deliver in
//! `wc.imm_data` (network byte order, §5). Promise: no accessor panics after
//! `check_len`; `emit` never panics on a [`LEN`]-byte buffer.

use crate::field::{self, fixed_header_view};
use crate::Error;

/// ImmDt size in bytes.
pub const LEN: usize = 4;

fixed_header_view!("ImmDt", LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn imm(&self) -> u32 {
        field::read_u32(self.bytes(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_imm(&mut self, imm: u32) {
        field::write_u32(self.bytes_mut(), 0, imm);
    }
}

/// A parsed ImmDt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub imm: u32,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr { imm: packet.imm() })
    }

    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_imm(self.imm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // rc_imm.pcap frame 1: ImmDt=0x11223344.
    const BYTES: [u8; 4] = [0x11, 0x22, 0x33, 0x44];
    const REPR: Repr = Repr { imm: 0x1122_3344 };

    #[test]
    fn deconstruct() {
        assert_eq!(Packet::new_checked(&BYTES[..]).unwrap().imm(), REPR.imm);
    }

    #[test]
    fn construct() {
        let mut buf = [0xAA; LEN];
        Packet::new_unchecked(&mut buf[..]).set_imm(REPR.imm);
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse() {
        assert_eq!(Repr::parse(&Packet::new_unchecked(&BYTES[..])), Ok(REPR));
        assert!(Repr::parse(&Packet::new_unchecked(&BYTES[..3])).is_err());
    }

    #[test]
    fn emit() {
        let mut buf = [0xAA; LEN];
        REPR.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
        assert_eq!(REPR.imm.to_be_bytes(), BYTES); // wc.imm_data bytes
    }
}

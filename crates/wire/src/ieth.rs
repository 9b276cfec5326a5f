//! Invalidate Extended Transport Header, 4 bytes (roce-wire.md §5).
//!
//! Owns: IETH view and repr (the R_Key the responder invalidates). Promise: no
//! accessor panics after `check_len`; `emit` never panics on a [`LEN`]-byte buffer.

use crate::field::{self, fixed_header_view};
use crate::{Error, Rkey};

/// IETH size in bytes.
pub const LEN: usize = 4;

fixed_header_view!("IETH", LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn rkey(&self) -> Rkey {
        Rkey(field::read_u32(self.bytes(), 0))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_rkey(&mut self, rkey: Rkey) {
        field::write_u32(self.bytes_mut(), 0, rkey.0);
    }
}

/// A parsed IETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub rkey: Rkey,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            rkey: packet.rkey(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_rkey(self.rkey);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BYTES: [u8; 4] = [0x00, 0x12, 0x34, 0x56];
    const REPR: Repr = Repr {
        rkey: Rkey(0x0012_3456),
    };

    #[test]
    fn deconstruct() {
        assert_eq!(Packet::new_checked(&BYTES[..]).unwrap().rkey(), REPR.rkey);
    }

    #[test]
    fn construct() {
        let mut buf = [0xAA; LEN];
        Packet::new_unchecked(&mut buf[..]).set_rkey(REPR.rkey);
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse() {
        assert_eq!(Repr::parse(&Packet::new_unchecked(&BYTES[..])), Ok(REPR));
        assert!(Repr::parse(&Packet::new_unchecked(&BYTES[..2])).is_err());
    }

    #[test]
    fn emit() {
        let mut buf = [0xAA; LEN];
        REPR.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }
}

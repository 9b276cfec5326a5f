//! XRC Extended Transport Header, 4 bytes (roce-wire.md §5, §4.5).
//!
//! Owns: XRCETH view and repr (the target XRC SRQ number). Promise: no accessor
//! panics after `check_len`; `emit` never panics on a [`LEN`]-byte buffer and
//! writes the reserved byte as 0.

use crate::field::{self, fixed_header_view};
use crate::{Error, XrcSrqn};

/// XRCETH size in bytes.
pub const LEN: usize = 4;

fixed_header_view!("XRCETH", LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Bytes 1–3 (byte 0 reserved).
    pub fn xrc_srqn(&self) -> XrcSrqn {
        XrcSrqn::from_masked(field::read_u24(self.bytes(), 1))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes all 4 bytes (reserved byte 0).
    pub fn set_xrc_srqn(&mut self, srqn: XrcSrqn) {
        field::write_u32(self.bytes_mut(), 0, srqn.get());
    }
}

/// A parsed XRCETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub xrc_srqn: XrcSrqn,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            xrc_srqn: packet.xrc_srqn(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_xrc_srqn(self.xrc_srqn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BYTES: [u8; 4] = [0x00, 0xab, 0xcd, 0xef];
    const REPR: Repr = Repr {
        xrc_srqn: XrcSrqn::from_masked(0xabcdef),
    };

    #[test]
    fn deconstruct() {
        assert_eq!(
            Packet::new_checked(&BYTES[..]).unwrap().xrc_srqn(),
            REPR.xrc_srqn
        );
    }

    #[test]
    fn construct() {
        let mut buf = [0xAA; LEN];
        Packet::new_unchecked(&mut buf[..]).set_xrc_srqn(REPR.xrc_srqn);
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse() {
        assert_eq!(Repr::parse(&Packet::new_unchecked(&BYTES[..])), Ok(REPR));
        let reserved = [0xFF, 0xab, 0xcd, 0xef];
        assert_eq!(Repr::parse(&Packet::new_unchecked(&reserved[..])), Ok(REPR));
        assert!(Repr::parse(&Packet::new_unchecked(&BYTES[..3])).is_err());
    }

    #[test]
    fn emit() {
        let mut buf = [0xAA; LEN];
        REPR.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }
}

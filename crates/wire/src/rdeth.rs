//! Reliable Datagram Extended Transport Header, 4 bytes (roce-wire.md §5; RD only).
//!
//! Owns: RDETH view and repr. Present so RD packets parse; nothing else uses RD.
//! Promise: no accessor panics after `check_len`; `emit` never panics on a
//! [`LEN`]-byte buffer and writes the reserved byte as 0.

use crate::field::{self, fixed_header_view};
use crate::{Eecn, Error};

/// RDETH size in bytes.
pub const LEN: usize = 4;

fixed_header_view!("RDETH", LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Bytes 1–3: EE context (byte 0 reserved).
    pub fn eecn(&self) -> Eecn {
        Eecn::from_masked(field::read_u24(self.bytes(), 1))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_eecn(&mut self, eecn: Eecn) {
        field::write_u32(self.bytes_mut(), 0, eecn.get());
    }
}

/// A parsed RDETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub eecn: Eecn,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            eecn: packet.eecn(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_eecn(self.eecn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BYTES: [u8; 4] = [0x00, 0x01, 0x02, 0x03];
    const REPR: Repr = Repr {
        eecn: Eecn::from_masked(0x010203),
    };

    #[test]
    fn quartet() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.eecn(), REPR.eecn);
        assert_eq!(Repr::parse(&p), Ok(REPR));
        let mut buf = [0xAA; LEN];
        Packet::new_unchecked(&mut buf[..]).set_eecn(REPR.eecn);
        assert_eq!(buf, BYTES);
        let mut buf = [0xAA; LEN];
        REPR.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
        assert!(Repr::parse(&Packet::new_unchecked(&BYTES[..3])).is_err());
    }
}

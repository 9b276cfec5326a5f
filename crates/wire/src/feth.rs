//! Flush Extended Transport Header, 4 bytes (roce-wire.md §5; IBA 1.5 FLUSH).
//!
//! Owns: FETH view and repr. Promise: no accessor panics after `check_len`;
//! `emit` never panics on a [`LEN`]-byte buffer; reserved bits are written 0.

use crate::field::fixed_header_view;
use crate::Error;

/// FETH size in bytes.
pub const LEN: usize = 4;

fixed_header_view!("FETH", LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Byte 3 bits 5..4: selectivity level (0 = range, 1 = whole MR).
    pub fn selectivity(&self) -> u8 {
        (self.bytes()[3] >> 4) & 3
    }
    /// Byte 3 bits 3..0: placement type (bit 0 global visibility, bit 1 persistence).
    pub fn placement(&self) -> u8 {
        self.bytes()[3] & 0x0F
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes all 4 bytes.
    pub fn set_fields(&mut self, selectivity: u8, placement: u8) {
        let b = self.bytes_mut();
        b[..3].fill(0);
        b[3] = ((selectivity & 3) << 4) | (placement & 0x0F);
    }
}

/// A parsed FETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// 0..=3.
    pub selectivity: u8,
    /// 0..=15.
    pub placement: u8,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            selectivity: packet.selectivity(),
            placement: packet.placement(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_fields(self.selectivity, self.placement);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BYTES: [u8; 4] = [0, 0, 0, 0x13];
    const REPR: Repr = Repr {
        selectivity: 1,
        placement: 3,
    };

    #[test]
    fn quartet() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!((p.selectivity(), p.placement()), (1, 3));
        assert_eq!(Repr::parse(&p), Ok(REPR));
        let mut buf = [0xAA; LEN];
        Packet::new_unchecked(&mut buf[..]).set_fields(1, 3);
        assert_eq!(buf, BYTES);
        let mut buf = [0xAA; LEN];
        REPR.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }
}

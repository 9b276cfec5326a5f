//! Atomic Extended Transport Header, 28 bytes (roce-wire.md §5).
//!
//! Owns: AtomicETH view and repr. Promise: no accessor panics after
//! `check_len`; `emit` never panics on a [`LEN`]-byte buffer. The 8-byte
//! alignment of the address is the responder's check, not the parser's.

use crate::field::{self, fixed_header_view};
use crate::{Error, Rkey};

/// AtomicETH size in bytes (packed, §5).
pub const LEN: usize = 28;

fixed_header_view!("AtomicETH", LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Bytes 0–7: virtual address.
    pub fn va(&self) -> u64 {
        field::read_u64(self.bytes(), 0)
    }
    /// Bytes 8–11: R_Key.
    pub fn rkey(&self) -> Rkey {
        Rkey(field::read_u32(self.bytes(), 8))
    }
    /// Bytes 12–19: swap data (CMP_SWAP) or add data (FETCH_ADD).
    pub fn swap_add(&self) -> u64 {
        field::read_u64(self.bytes(), 12)
    }
    /// Bytes 20–27: compare data (CMP_SWAP only).
    pub fn compare(&self) -> u64 {
        field::read_u64(self.bytes(), 20)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_va(&mut self, va: u64) {
        field::write_u64(self.bytes_mut(), 0, va);
    }
    pub fn set_rkey(&mut self, rkey: Rkey) {
        field::write_u32(self.bytes_mut(), 8, rkey.0);
    }
    pub fn set_swap_add(&mut self, v: u64) {
        field::write_u64(self.bytes_mut(), 12, v);
    }
    pub fn set_compare(&mut self, v: u64) {
        field::write_u64(self.bytes_mut(), 20, v);
    }
}

/// A parsed AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub va: u64,
    pub rkey: Rkey,
    /// Swap value (CMP_SWAP) or addend (FETCH_ADD).
    pub swap_add: u64,
    /// Compare value (CMP_SWAP; sent as given for FETCH_ADD).
    pub compare: u64,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            va: packet.va(),
            rkey: packet.rkey(),
            swap_add: packet.swap_add(),
            compare: packet.compare(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_va(self.va);
        packet.set_rkey(self.rkey);
        packet.set_swap_add(self.swap_add);
        packet.set_compare(self.compare);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BYTES: [u8; 28] = [
        0x00, 0x00, 0x56, 0x1a, 0x41, 0x5a, 0xc0, 0x40, // va
        0x00, 0x00, 0x0a, 0xa0, // rkey
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // swap/add
        0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, // compare
    ];
    const REPR: Repr = Repr {
        va: 0x561a_415a_c040,
        rkey: Rkey(0xaa0),
        swap_add: 0x0102_0304_0506_0708,
        compare: 0xf1f2_f3f4_f5f6_f7f8,
    };

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(
            (p.va(), p.rkey(), p.swap_add(), p.compare()),
            (REPR.va, REPR.rkey, REPR.swap_add, REPR.compare)
        );
    }

    #[test]
    fn construct() {
        let mut buf = [0xAA; LEN];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_va(REPR.va);
        p.set_rkey(REPR.rkey);
        p.set_swap_add(REPR.swap_add);
        p.set_compare(REPR.compare);
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse() {
        assert_eq!(Repr::parse(&Packet::new_unchecked(&BYTES[..])), Ok(REPR));
        assert!(matches!(
            Repr::parse(&Packet::new_unchecked(&BYTES[..27])),
            Err(Error::Truncated {
                header: "AtomicETH",
                need: 28,
                have: 27
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

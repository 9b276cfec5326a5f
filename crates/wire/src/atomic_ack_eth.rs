//! Atomic ACK Extended Transport Header, 8 bytes (roce-wire.md §5).
//!
//! Owns: AtomicAckETH view and repr (the original remote value). Promise: no
//! accessor panics after `check_len`; `emit` never panics on a [`LEN`]-byte buffer.

use crate::field::{self, fixed_header_view};
use crate::Error;

/// AtomicAckETH size in bytes.
pub const LEN: usize = 8;

fixed_header_view!("AtomicAckETH", LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Bytes 0–7: the remote value before the atomic operation.
    pub fn orig(&self) -> u64 {
        field::read_u64(self.bytes(), 0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_orig(&mut self, v: u64) {
        field::write_u64(self.bytes_mut(), 0, v);
    }
}

/// A parsed AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub orig: u64,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            orig: packet.orig(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_orig(self.orig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // rc_atomic.pcap frame 2: AtomicAckETH orig=0x20f77e249172e6e0.
    const BYTES: [u8; 8] = [0x20, 0xf7, 0x7e, 0x24, 0x91, 0x72, 0xe6, 0xe0];
    const REPR: Repr = Repr {
        orig: 0x20f7_7e24_9172_e6e0,
    };

    #[test]
    fn deconstruct() {
        assert_eq!(Packet::new_checked(&BYTES[..]).unwrap().orig(), REPR.orig);
    }

    #[test]
    fn construct() {
        let mut buf = [0xAA; LEN];
        Packet::new_unchecked(&mut buf[..]).set_orig(REPR.orig);
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse() {
        assert_eq!(Repr::parse(&Packet::new_unchecked(&BYTES[..])), Ok(REPR));
        assert!(Repr::parse(&Packet::new_unchecked(&BYTES[..7])).is_err());
    }

    #[test]
    fn emit() {
        let mut buf = [0xAA; LEN];
        REPR.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }
}

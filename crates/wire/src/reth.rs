//! RDMA Extended Transport Header, 16 bytes (roce-wire.md §5).
//!
//! Owns: RETH view and repr. Promise: no accessor panics after `check_len`;
//! `emit` never panics on a [`LEN`]-byte buffer. The DMA length is carried as
//! sent; the responder enforces the 2^31 limit (§6).

use crate::field::{self, fixed_header_view};
use crate::{Error, Rkey};

/// RETH size in bytes.
pub const LEN: usize = 16;

fixed_header_view!("RETH", LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Bytes 0–7: virtual address.
    pub fn va(&self) -> u64 {
        field::read_u64(self.bytes(), 0)
    }
    /// Bytes 8–11: R_Key.
    pub fn rkey(&self) -> Rkey {
        Rkey(field::read_u32(self.bytes(), 8))
    }
    /// Bytes 12–15: DMA length of the whole RDMA operation.
    pub fn dma_len(&self) -> u32 {
        field::read_u32(self.bytes(), 12)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_va(&mut self, va: u64) {
        field::write_u64(self.bytes_mut(), 0, va);
    }
    pub fn set_rkey(&mut self, rkey: Rkey) {
        field::write_u32(self.bytes_mut(), 8, rkey.0);
    }
    pub fn set_dma_len(&mut self, len: u32) {
        field::write_u32(self.bytes_mut(), 12, len);
    }
}

/// A parsed RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub va: u64,
    pub rkey: Rkey,
    pub dma_len: u32,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            va: packet.va(),
            rkey: packet.rkey(),
            dma_len: packet.dma_len(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_va(self.va);
        packet.set_rkey(self.rkey);
        packet.set_dma_len(self.dma_len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // uc_write.pcap frame 1: RETH va=0x55be60c39000 rkey=0x00001043 len=3000.
    const BYTES: [u8; 16] = [
        0, 0, 0x55, 0xbe, 0x60, 0xc3, 0x90, 0x00, 0, 0, 0x10, 0x43, 0, 0, 0x0b, 0xb8,
    ];
    const REPR: Repr = Repr {
        va: 0x55be_60c3_9000,
        rkey: Rkey(0x1043),
        dma_len: 3000,
    };

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(
            (p.va(), p.rkey(), p.dma_len()),
            (REPR.va, REPR.rkey, REPR.dma_len)
        );
    }

    #[test]
    fn construct() {
        let mut buf = [0xAA; LEN];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_va(REPR.va);
        p.set_rkey(REPR.rkey);
        p.set_dma_len(REPR.dma_len);
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse() {
        assert_eq!(Repr::parse(&Packet::new_unchecked(&BYTES[..])), Ok(REPR));
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&BYTES[..15])),
            Err(Error::Truncated {
                header: "RETH",
                need: 16,
                have: 15
            })
        );
    }

    #[test]
    fn emit() {
        let mut buf = [0xAA; LEN];
        REPR.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }
}

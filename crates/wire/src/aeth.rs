//! ACK Extended Transport Header, 4 bytes (roce-wire.md §5, §5.1).
//!
//! Owns: AETH view and repr, the syndrome decoding ([`Syndrome`], [`NakCode`])
//! and the credit-code table. Promise: no accessor panics after `check_len`;
//! `Repr::parse` rejects reserved syndromes (bit 7 set, class 10, NAK codes 5–31).

use core::fmt;

use crate::field::{self, fixed_header_view};
use crate::{Error, Msn};

/// AETH size in bytes.
pub const LEN: usize = 4;

fixed_header_view!("AETH", LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Byte 0: the raw syndrome byte.
    pub fn syndrome_raw(&self) -> u8 {
        self.bytes()[0]
    }
    /// Bytes 1–3: MSN.
    pub fn msn(&self) -> Msn {
        Msn::from_masked(field::read_u24(self.bytes(), 1))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_syndrome_raw(&mut self, syndrome: u8) {
        self.bytes_mut()[0] = syndrome;
    }
    pub fn set_msn(&mut self, msn: Msn) {
        field::write_u24(self.bytes_mut(), 1, msn.get());
    }
}

/// NAK codes, syndrome class 11 (§5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    PsnSequenceError = 0,
    InvalidRequest = 1,
    RemoteAccessError = 2,
    RemoteOperationalError = 3,
    InvalidRdRequest = 4,
}

/// A decoded AETH syndrome (§5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// ACK with a credit code 0..=31 (31 = no end-to-end credit limit).
    Ack {
        credit_code: u8,
    },
    /// RNR NAK with an RNR timer code 0..=31.
    RnrNak {
        timer_code: u8,
    },
    Nak(NakCode),
}

/// The credit code rxe always sends: "invalid", i.e. no credit limit (§5.1).
pub const CREDITS_UNLIMITED: u8 = 31;

/// Credit code → number of credits for codes 0..=30 (§5.1, rdmavt `credit_table`).
pub const CREDIT_TABLE: [u16; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
    2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
];

/// Credits for a credit code; `None` for 31 (unlimited) or out of range.
pub const fn credit_count(code: u8) -> Option<u16> {
    if (code as usize) < CREDIT_TABLE.len() {
        Some(CREDIT_TABLE[code as usize])
    } else {
        None
    }
}

impl Syndrome {
    /// Decodes a syndrome byte; `None` for reserved values (§5.1: bit 7
    /// reserved, class 10 reserved, NAK codes 5–31 reserved).
    pub const fn from_byte(byte: u8) -> Option<Syndrome> {
        let low = byte & 0x1F;
        match byte >> 5 {
            0 => Some(Syndrome::Ack { credit_code: low }),
            1 => Some(Syndrome::RnrNak { timer_code: low }),
            3 => match low {
                0 => Some(Syndrome::Nak(NakCode::PsnSequenceError)),
                1 => Some(Syndrome::Nak(NakCode::InvalidRequest)),
                2 => Some(Syndrome::Nak(NakCode::RemoteAccessError)),
                3 => Some(Syndrome::Nak(NakCode::RemoteOperationalError)),
                4 => Some(Syndrome::Nak(NakCode::InvalidRdRequest)),
                _ => None,
            },
            _ => None,
        }
    }

    /// The syndrome byte (codes are masked to 5 bits).
    pub const fn to_byte(self) -> u8 {
        match self {
            Syndrome::Ack { credit_code } => credit_code & 0x1F,
            Syndrome::RnrNak { timer_code } => 0x20 | (timer_code & 0x1F),
            Syndrome::Nak(code) => 0x60 | code as u8,
        }
    }

    /// An ACK with no credit limit, as rxe sends (§5.1: 0x1F).
    pub const fn ack_unlimited() -> Syndrome {
        Syndrome::Ack {
            credit_code: CREDITS_UNLIMITED,
        }
    }

    pub const fn is_ack(self) -> bool {
        matches!(self, Syndrome::Ack { .. })
    }
}

impl fmt::Display for Syndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Syndrome::Ack { credit_code } => write!(f, "ACK(credits={credit_code})"),
            Syndrome::RnrNak { timer_code } => write!(f, "RNR_NAK(timer={timer_code})"),
            Syndrome::Nak(code) => write!(f, "NAK({code:?})"),
        }
    }
}

/// A parsed AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub syndrome: Syndrome,
    pub msn: Msn,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        let raw = packet.syndrome_raw();
        let syndrome = Syndrome::from_byte(raw).ok_or(Error::BadSyndrome(raw))?;
        Ok(Repr {
            syndrome,
            msn: packet.msn(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_syndrome_raw(self.syndrome.to_byte());
        packet.set_msn(self.msn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // rc_send.pcap frame 6: AETH ACK syn=0x1f MSN=2.
    const BYTES: [u8; 4] = [0x1f, 0, 0, 2];
    const REPR: Repr = Repr {
        syndrome: Syndrome::Ack { credit_code: 31 },
        msn: Msn::from_masked(2),
    };

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!((p.syndrome_raw(), p.msn().get()), (0x1f, 2));
    }

    #[test]
    fn construct() {
        let mut buf = [0xAA; LEN];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_syndrome_raw(0x1f);
        p.set_msn(Msn::from_masked(2));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse() {
        assert_eq!(Repr::parse(&Packet::new_unchecked(&BYTES[..])), Ok(REPR));
        // rc_rnr_nak.pcap frame 2: RNR NAK 0x3c; rc_nak_access.pcap frame 2: NAK 0x62.
        let rnr = Repr::parse(&Packet::new_unchecked(&[0x3c, 0, 0, 0][..])).unwrap();
        assert_eq!(rnr.syndrome, Syndrome::RnrNak { timer_code: 28 });
        let nak = Repr::parse(&Packet::new_unchecked(&[0x62, 0, 0, 0][..])).unwrap();
        assert_eq!(nak.syndrome, Syndrome::Nak(NakCode::RemoteAccessError));
    }

    #[test]
    fn emit() {
        let mut buf = [0xAA; LEN];
        REPR.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn syndrome_byte_space() {
        // §5.1: ACK 0x00-0x1F, RNR NAK 0x20-0x3F, NAK 0x60-0x64; all else reserved.
        for byte in 0..=255u8 {
            let valid = byte <= 0x3F || (0x60..=0x64).contains(&byte);
            let decoded = Syndrome::from_byte(byte);
            assert_eq!(decoded.is_some(), valid, "0x{byte:02x}");
            if let Some(s) = decoded {
                assert_eq!(s.to_byte(), byte);
            }
        }
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&[0x40, 0, 0, 0][..])),
            Err(Error::BadSyndrome(0x40))
        );
    }

    #[test]
    fn credit_table_endpoints() {
        assert_eq!(credit_count(0), Some(0));
        assert_eq!(credit_count(5), Some(6));
        assert_eq!(credit_count(30), Some(32768));
        assert_eq!(credit_count(CREDITS_UNLIMITED), None);
    }
}

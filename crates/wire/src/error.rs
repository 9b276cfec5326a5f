//! The one error type of the crate.
//!
//! Owns: [`Error`]. Promise: every rejection of input says what was wrong and
//! where (which header, how many bytes were needed), never a bare "invalid".

use crate::opcode::{HeaderSet, Opcode};

/// Why bytes could not be parsed or a representation could not be emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The buffer ended inside `header`.
    #[error("truncated {header}: need {need} bytes, have {have}")]
    Truncated {
        header: &'static str,
        need: usize,
        have: usize,
    },
    /// The BTH opcode is not in the opcode table (roce-wire.md §4).
    #[error("unknown opcode 0x{0:02x}")]
    UnknownOpcode(u8),
    /// BTH TVer must be 0 (roce-wire.md §3).
    #[error("BTH transport header version {0} (must be 0)")]
    BadTver(u8),
    /// PadCnt does not fit the packet, or payload + pad is not a multiple of 4 (§6).
    #[error("bad pad count {pad} for {data_len} bytes of payload+pad")]
    BadPad { pad: u8, data_len: usize },
    /// The opcode carries no payload but bytes follow its headers (§4).
    #[error("{opcode} carries no payload but {len} bytes follow the headers")]
    UnexpectedPayload { opcode: Opcode, len: usize },
    /// The opcode demands an exact payload length (ATOMIC_WRITE: 8, §4.1).
    #[error("{opcode} needs a payload of exactly {expected} bytes, got {len}")]
    BadPayloadLen {
        opcode: Opcode,
        expected: usize,
        len: usize,
    },
    /// AETH syndrome byte with reserved bits or a reserved code (§5.1).
    #[error("reserved AETH syndrome 0x{0:02x}")]
    BadSyndrome(u8),
    /// A representation's extension headers do not match its opcode.
    #[error("{opcode} needs headers {expected}, representation has {got}")]
    HeaderMismatch {
        opcode: Opcode,
        expected: HeaderSet,
        got: HeaderSet,
    },
    /// `emit` got a payload of another length than the representation says.
    #[error("payload is {got} bytes, representation says {expected}")]
    PayloadLenMismatch { expected: usize, got: usize },
    /// The caller's buffer is shorter than `buffer_len()`.
    #[error("buffer too small: need {need} bytes, have {have}")]
    BufferTooSmall { need: usize, have: usize },
    /// The ICRC does not match the packet (§8.3).
    #[error("ICRC mismatch: packet has 0x{found:08x}, computed 0x{computed:08x}")]
    BadIcrc { found: u32, computed: u32 },
    /// A value does not fit its protocol field (e.g. a 24-bit QPN ≥ 2^24).
    #[error("{field} value 0x{value:x} out of range")]
    OutOfRange { field: &'static str, value: u64 },
    /// An Ethernet/IP/UDP/pcap framing problem, named by `what`.
    #[error("malformed {layer}: {what}")]
    Malformed {
        layer: &'static str,
        what: &'static str,
    },
}

/// Shorthand used throughout the crate.
pub type Result<T> = core::result::Result<T, Error>;

//! The opcode table (roce-wire.md §4) as data, and segmentation helpers.
//!
//! Owns: [`Opcode`] (a byte proven to be in the table), [`OpcodeInfo`] rows,
//! [`TABLE`], [`Transport`], [`Operation`], [`Position`], [`MessageKind`], and
//! next-opcode selection for segmented messages ([`Opcode::segment`]).
//! Promise: every `Opcode` value has a row, so its accessors never fail.

use core::fmt;

pub use crate::headers::HeaderSet;
use crate::Error;

/// Transport service, bits 7..5 of the opcode (§3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    Rc = 0,
    Uc = 1,
    Rd = 2,
    Ud = 3,
    Cnp = 4,
    Xrc = 5,
}

/// What a packet does, independent of its place in a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    Send,
    SendWithImm,
    SendWithInv,
    Write,
    WriteWithImm,
    ReadRequest,
    ReadResponse,
    Ack,
    AtomicAck,
    CompareSwap,
    FetchAdd,
    Resync,
    Flush,
    AtomicWrite,
    Cnp,
}

/// A packet's place in its message. Single-packet operations are `Only`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    First,
    Middle,
    Last,
    Only,
}

impl Position {
    /// The position of packet `index` (0-based) of a message of `count` packets.
    pub const fn of(index: usize, count: usize) -> Position {
        match (index == 0, index + 1 >= count) {
            (true, true) => Position::Only,
            (true, false) => Position::First,
            (false, true) => Position::Last,
            (false, false) => Position::Middle,
        }
    }
}

/// How much payload an opcode carries (§4 "P" column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadRule {
    /// No payload (and PadCnt 0).
    None,
    /// Any length (0 included; per-packet MTU rules belong to the responder, §6).
    Any,
    /// Exactly this many bytes (ATOMIC_WRITE: 8).
    Exactly(usize),
}

/// Messages that are segmented into FIRST/MIDDLE/LAST packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageKind {
    Send,
    SendWithImm,
    SendWithInv,
    Write,
    WriteWithImm,
    ReadResponse,
}

/// One row of the opcode table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    pub code: u8,
    pub name: &'static str,
    pub operation: Operation,
    pub position: Position,
    /// Extension headers after the BTH.
    pub headers: HeaderSet,
    pub payload: PayloadRule,
}

impl OpcodeInfo {
    const fn new(
        code: u8,
        name: &'static str,
        operation: Operation,
        position: Position,
        headers: HeaderSet,
    ) -> Self {
        let payload = match operation {
            Operation::Send
            | Operation::SendWithImm
            | Operation::SendWithInv
            | Operation::Write
            | Operation::WriteWithImm
            | Operation::ReadResponse => PayloadRule::Any,
            // §4.1: ATOMIC_WRITE carries exactly 8 bytes.
            Operation::AtomicWrite => PayloadRule::Exactly(8),
            _ => PayloadRule::None,
        };
        OpcodeInfo {
            code,
            name,
            operation,
            position,
            headers,
            payload,
        }
    }
}

/// An opcode that is in [`TABLE`]. Invariant: `TABLE` has a row for it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Opcode(u8);

const N: HeaderSet = HeaderSet::EMPTY;
const RDETH: HeaderSet = HeaderSet::RDETH;
const DETH: HeaderSet = HeaderSet::DETH;
const XRC: HeaderSet = HeaderSet::XRCETH;
const FETH: HeaderSet = HeaderSet::FETH;
const RETH: HeaderSet = HeaderSet::RETH;
const ATOM: HeaderSet = HeaderSet::ATOMIC_ETH;
const IMM: HeaderSet = HeaderSet::IMMDT;
const IETH: HeaderSet = HeaderSet::IETH;
const AETH: HeaderSet = HeaderSet::AETH;
const AACK: HeaderSet = HeaderSet::ATOMIC_ACK_ETH;
const CNPR: HeaderSet = HeaderSet::CNP_RESERVED;
const RD_REQ: HeaderSet = RDETH.with(DETH);

macro_rules! opcode_table {
    ($($name:ident = $code:literal, $op:ident, $pos:ident, $hdr:expr;)*) => {
        impl Opcode {
            $(
                #[doc = concat!("Opcode ", stringify!($code), " ", stringify!($name), ".")]
                pub const $name: Opcode = Opcode($code);
            )*
        }
        /// The opcode table (§4.1–4.6), one row per defined opcode.
        pub const TABLE: &[OpcodeInfo] = &[
            $(OpcodeInfo::new($code, stringify!($name), Operation::$op, Position::$pos, $hdr),)*
        ];
    };
}

opcode_table! {
    // §4.1 RC
    RC_SEND_FIRST = 0x00, Send, First, N;
    RC_SEND_MIDDLE = 0x01, Send, Middle, N;
    RC_SEND_LAST = 0x02, Send, Last, N;
    RC_SEND_LAST_WITH_IMMEDIATE = 0x03, SendWithImm, Last, IMM;
    RC_SEND_ONLY = 0x04, Send, Only, N;
    RC_SEND_ONLY_WITH_IMMEDIATE = 0x05, SendWithImm, Only, IMM;
    RC_RDMA_WRITE_FIRST = 0x06, Write, First, RETH;
    RC_RDMA_WRITE_MIDDLE = 0x07, Write, Middle, N;
    RC_RDMA_WRITE_LAST = 0x08, Write, Last, N;
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09, WriteWithImm, Last, IMM;
    RC_RDMA_WRITE_ONLY = 0x0A, Write, Only, RETH;
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0B, WriteWithImm, Only, RETH.with(IMM);
    RC_RDMA_READ_REQUEST = 0x0C, ReadRequest, Only, RETH;
    RC_RDMA_READ_RESPONSE_FIRST = 0x0D, ReadResponse, First, AETH;
    RC_RDMA_READ_RESPONSE_MIDDLE = 0x0E, ReadResponse, Middle, N;
    RC_RDMA_READ_RESPONSE_LAST = 0x0F, ReadResponse, Last, AETH;
    RC_RDMA_READ_RESPONSE_ONLY = 0x10, ReadResponse, Only, AETH;
    RC_ACKNOWLEDGE = 0x11, Ack, Only, AETH;
    RC_ATOMIC_ACKNOWLEDGE = 0x12, AtomicAck, Only, AETH.with(AACK);
    RC_COMPARE_SWAP = 0x13, CompareSwap, Only, ATOM;
    RC_FETCH_ADD = 0x14, FetchAdd, Only, ATOM;
    RC_SEND_LAST_WITH_INVALIDATE = 0x16, SendWithInv, Last, IETH;
    RC_SEND_ONLY_WITH_INVALIDATE = 0x17, SendWithInv, Only, IETH;
    RC_FLUSH = 0x1C, Flush, Only, FETH.with(RETH);
    RC_ATOMIC_WRITE = 0x1D, AtomicWrite, Only, RETH;
    // §4.2 UC: same header sets as RC 0x00-0x0B.
    UC_SEND_FIRST = 0x20, Send, First, N;
    UC_SEND_MIDDLE = 0x21, Send, Middle, N;
    UC_SEND_LAST = 0x22, Send, Last, N;
    UC_SEND_LAST_WITH_IMMEDIATE = 0x23, SendWithImm, Last, IMM;
    UC_SEND_ONLY = 0x24, Send, Only, N;
    UC_SEND_ONLY_WITH_IMMEDIATE = 0x25, SendWithImm, Only, IMM;
    UC_RDMA_WRITE_FIRST = 0x26, Write, First, RETH;
    UC_RDMA_WRITE_MIDDLE = 0x27, Write, Middle, N;
    UC_RDMA_WRITE_LAST = 0x28, Write, Last, N;
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29, WriteWithImm, Last, IMM;
    UC_RDMA_WRITE_ONLY = 0x2A, Write, Only, RETH;
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2B, WriteWithImm, Only, RETH.with(IMM);
    // §4.3 RD: requests carry RDETH+DETH, responses RDETH.
    RD_SEND_FIRST = 0x40, Send, First, RD_REQ;
    RD_SEND_MIDDLE = 0x41, Send, Middle, RD_REQ;
    RD_SEND_LAST = 0x42, Send, Last, RD_REQ;
    RD_SEND_LAST_WITH_IMMEDIATE = 0x43, SendWithImm, Last, RD_REQ.with(IMM);
    RD_SEND_ONLY = 0x44, Send, Only, RD_REQ;
    RD_SEND_ONLY_WITH_IMMEDIATE = 0x45, SendWithImm, Only, RD_REQ.with(IMM);
    RD_RDMA_WRITE_FIRST = 0x46, Write, First, RD_REQ.with(RETH);
    RD_RDMA_WRITE_MIDDLE = 0x47, Write, Middle, RD_REQ;
    RD_RDMA_WRITE_LAST = 0x48, Write, Last, RD_REQ;
    RD_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x49, WriteWithImm, Last, RD_REQ.with(IMM);
    RD_RDMA_WRITE_ONLY = 0x4A, Write, Only, RD_REQ.with(RETH);
    RD_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x4B, WriteWithImm, Only, RD_REQ.with(RETH).with(IMM);
    RD_RDMA_READ_REQUEST = 0x4C, ReadRequest, Only, RD_REQ.with(RETH);
    RD_RDMA_READ_RESPONSE_FIRST = 0x4D, ReadResponse, First, RDETH.with(AETH);
    RD_RDMA_READ_RESPONSE_MIDDLE = 0x4E, ReadResponse, Middle, RDETH;
    RD_RDMA_READ_RESPONSE_LAST = 0x4F, ReadResponse, Last, RDETH.with(AETH);
    RD_RDMA_READ_RESPONSE_ONLY = 0x50, ReadResponse, Only, RDETH.with(AETH);
    RD_ACKNOWLEDGE = 0x51, Ack, Only, RDETH.with(AETH);
    RD_ATOMIC_ACKNOWLEDGE = 0x52, AtomicAck, Only, RDETH.with(AETH).with(AACK);
    RD_COMPARE_SWAP = 0x53, CompareSwap, Only, RD_REQ.with(ATOM);
    RD_FETCH_ADD = 0x54, FetchAdd, Only, RD_REQ.with(ATOM);
    RD_RESYNC = 0x55, Resync, Only, RD_REQ;
    RD_FLUSH = 0x5C, Flush, Only, RD_REQ.with(FETH).with(RETH);
    // §4.4 UD
    UD_SEND_ONLY = 0x64, Send, Only, DETH;
    UD_SEND_ONLY_WITH_IMMEDIATE = 0x65, SendWithImm, Only, DETH.with(IMM);
    // §4.6 CNP: BTH + 16 reserved bytes.
    CNP = 0x81, Cnp, Only, CNPR;
    // §4.5 XRC: XRCETH right after the BTH on requests.
    XRC_SEND_FIRST = 0xA0, Send, First, XRC;
    XRC_SEND_MIDDLE = 0xA1, Send, Middle, XRC;
    XRC_SEND_LAST = 0xA2, Send, Last, XRC;
    XRC_SEND_LAST_WITH_IMMEDIATE = 0xA3, SendWithImm, Last, XRC.with(IMM);
    XRC_SEND_ONLY = 0xA4, Send, Only, XRC;
    XRC_SEND_ONLY_WITH_IMMEDIATE = 0xA5, SendWithImm, Only, XRC.with(IMM);
    XRC_RDMA_WRITE_FIRST = 0xA6, Write, First, XRC.with(RETH);
    XRC_RDMA_WRITE_MIDDLE = 0xA7, Write, Middle, XRC;
    XRC_RDMA_WRITE_LAST = 0xA8, Write, Last, XRC;
    XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0xA9, WriteWithImm, Last, XRC.with(IMM);
    XRC_RDMA_WRITE_ONLY = 0xAA, Write, Only, XRC.with(RETH);
    XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0xAB, WriteWithImm, Only, XRC.with(RETH).with(IMM);
    XRC_RDMA_READ_REQUEST = 0xAC, ReadRequest, Only, XRC.with(RETH);
    XRC_RDMA_READ_RESPONSE_FIRST = 0xAD, ReadResponse, First, AETH;
    XRC_RDMA_READ_RESPONSE_MIDDLE = 0xAE, ReadResponse, Middle, N;
    XRC_RDMA_READ_RESPONSE_LAST = 0xAF, ReadResponse, Last, AETH;
    XRC_RDMA_READ_RESPONSE_ONLY = 0xB0, ReadResponse, Only, AETH;
    XRC_ACKNOWLEDGE = 0xB1, Ack, Only, AETH;
    XRC_ATOMIC_ACKNOWLEDGE = 0xB2, AtomicAck, Only, AETH.with(AACK);
    XRC_COMPARE_SWAP = 0xB3, CompareSwap, Only, XRC.with(ATOM);
    XRC_FETCH_ADD = 0xB4, FetchAdd, Only, XRC.with(ATOM);
    XRC_SEND_LAST_WITH_INVALIDATE = 0xB6, SendWithInv, Last, XRC.with(IETH);
    XRC_SEND_ONLY_WITH_INVALIDATE = 0xB7, SendWithInv, Only, XRC.with(IETH);
}

/// `INDEX[byte]` = 1 + the row of `byte` in [`TABLE`], or 0 if undefined.
const INDEX: [u8; 256] = build_index();

const fn build_index() -> [u8; 256] {
    let mut index = [0u8; 256];
    let mut row = 0;
    while row < TABLE.len() {
        let code = TABLE[row].code as usize;
        assert!(index[code] == 0, "duplicate opcode in TABLE");
        index[code] = (row + 1) as u8;
        row += 1;
    }
    index
}

/// `HEADER_LEN[byte]` = [`Opcode::header_len`] of a defined opcode (BTH +
/// extension headers), built from [`TABLE`]: one load per packet instead of
/// a walk over the header order on every parse, emit and payload lookup.
const HEADER_LEN: [u8; 256] = build_header_len();

const fn build_header_len() -> [u8; 256] {
    let mut len = [0u8; 256];
    let mut row = 0;
    while row < TABLE.len() {
        let bytes = crate::bth::LEN + TABLE[row].headers.byte_len();
        assert!(bytes <= u8::MAX as usize, "header length fits a byte");
        len[TABLE[row].code as usize] = bytes as u8;
        row += 1;
    }
    len
}

const TRANSPORTS: usize = 6;
const OPERATIONS: usize = 15;
/// `SEGMENT[transport][operation][position]` = opcode byte + 1, or 0 if none.
const SEGMENT: [[[u16; 4]; OPERATIONS]; TRANSPORTS] = build_segment();

const fn build_segment() -> [[[u16; 4]; OPERATIONS]; TRANSPORTS] {
    let mut seg = [[[0u16; 4]; OPERATIONS]; TRANSPORTS];
    let mut row = 0;
    while row < TABLE.len() {
        let info = &TABLE[row];
        let t = Opcode(info.code).transport() as usize;
        seg[t][info.operation as usize][info.position as usize] = info.code as u16 + 1;
        row += 1;
    }
    seg
}

impl Opcode {
    /// `UnknownOpcode` unless `byte` is in the table.
    #[inline]
    pub const fn new(byte: u8) -> Result<Opcode, Error> {
        if INDEX[byte as usize] == 0 {
            return Err(Error::UnknownOpcode(byte));
        }
        Ok(Opcode(byte))
    }

    /// The opcode byte.
    #[inline]
    pub const fn get(self) -> u8 {
        self.0
    }

    /// This opcode's table row.
    #[inline]
    pub const fn info(self) -> &'static OpcodeInfo {
        // The invariant guarantees a row; row 0 is a harmless fallback that
        // cannot be reached.
        let row = INDEX[self.0 as usize].saturating_sub(1) as usize;
        &TABLE[row]
    }

    /// Transport bits 7..5 (§3). Every table row has one of the six defined values.
    #[inline]
    pub const fn transport(self) -> Transport {
        match self.0 >> 5 {
            0 => Transport::Rc,
            1 => Transport::Uc,
            2 => Transport::Rd,
            3 => Transport::Ud,
            4 => Transport::Cnp,
            _ => Transport::Xrc,
        }
    }

    #[inline]
    pub const fn name(self) -> &'static str {
        self.info().name
    }
    #[inline]
    pub const fn operation(self) -> Operation {
        self.info().operation
    }
    #[inline]
    pub const fn position(self) -> Position {
        self.info().position
    }
    /// Extension headers after the BTH.
    #[inline]
    pub const fn headers(self) -> HeaderSet {
        self.info().headers
    }
    /// Bytes from the start of the BTH to the start of the payload (§4 "hdr len").
    #[inline]
    pub const fn header_len(self) -> usize {
        HEADER_LEN[self.0 as usize] as usize
    }
    #[inline]
    pub const fn payload_rule(self) -> PayloadRule {
        self.info().payload
    }
    #[inline]
    pub const fn is_first(self) -> bool {
        matches!(self.position(), Position::First)
    }
    #[inline]
    pub const fn is_middle(self) -> bool {
        matches!(self.position(), Position::Middle)
    }
    #[inline]
    pub const fn is_last(self) -> bool {
        matches!(self.position(), Position::Last)
    }
    #[inline]
    pub const fn is_only(self) -> bool {
        matches!(self.position(), Position::Only)
    }
    /// Last or only packet of its message.
    #[inline]
    pub const fn ends_message(self) -> bool {
        matches!(self.position(), Position::Last | Position::Only)
    }
    /// Starts a new message (FIRST or ONLY).
    #[inline]
    pub const fn starts_message(self) -> bool {
        matches!(self.position(), Position::First | Position::Only)
    }
    #[inline]
    pub const fn has_payload(self) -> bool {
        !matches!(self.payload_rule(), PayloadRule::None)
    }
    #[inline]
    pub const fn has_immediate(self) -> bool {
        self.headers().contains(HeaderSet::IMMDT)
    }
    #[inline]
    pub const fn has_invalidate(self) -> bool {
        self.headers().contains(HeaderSet::IETH)
    }
    /// Sent by a requester (everything but ACKs, read responses and CNPs).
    #[inline]
    pub const fn is_request(self) -> bool {
        !self.is_response() && !matches!(self.operation(), Operation::Cnp)
    }
    /// Sent by a responder: ACKNOWLEDGE, ATOMIC_ACKNOWLEDGE, RDMA READ responses.
    #[inline]
    pub const fn is_response(self) -> bool {
        matches!(
            self.operation(),
            Operation::Ack | Operation::AtomicAck | Operation::ReadResponse
        )
    }

    /// The opcode for the packet at `position` of a `kind` message on
    /// `transport`, or `None` where the transport has no such packet (e.g. UD
    /// multi-packet sends, UC read responses). FIRST/MIDDLE packets of a message
    /// with immediate or invalidate use the plain SEND/WRITE opcodes (§4.1).
    pub const fn segment(
        transport: Transport,
        kind: MessageKind,
        position: Position,
    ) -> Option<Opcode> {
        let plain = matches!(position, Position::First | Position::Middle);
        let op = match kind {
            MessageKind::Send => Operation::Send,
            MessageKind::SendWithImm if plain => Operation::Send,
            MessageKind::SendWithImm => Operation::SendWithImm,
            MessageKind::SendWithInv if plain => Operation::Send,
            MessageKind::SendWithInv => Operation::SendWithInv,
            MessageKind::Write => Operation::Write,
            MessageKind::WriteWithImm if plain => Operation::Write,
            MessageKind::WriteWithImm => Operation::WriteWithImm,
            MessageKind::ReadResponse => Operation::ReadResponse,
        };
        match SEGMENT[transport as usize][op as usize][position as usize] {
            0 => None,
            code => Some(Opcode((code - 1) as u8)),
        }
    }

    /// The opcode of the packet after `self` in the same message: `is_last`
    /// says whether that next packet ends the message. `None` if `self` already
    /// ended its message or is not part of a segmented message.
    pub const fn next_in_message(self, kind: MessageKind, is_last: bool) -> Option<Opcode> {
        if self.ends_message() {
            return None;
        }
        let position = if is_last {
            Position::Last
        } else {
            Position::Middle
        };
        Opcode::segment(self.transport(), kind, position)
    }
}

/// Pad bytes after a payload of `payload_len` bytes (§6: `(4 − len mod 4) mod 4`).
pub const fn pad_len(payload_len: usize) -> u8 {
    (payload_len.wrapping_neg() & 3) as u8
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}(0x{:02x})", self.name(), self.0)
    }
}

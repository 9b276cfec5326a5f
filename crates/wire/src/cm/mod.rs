//! IBTA Communication Management messages (spec/cm.md §2): one module per
//! message — [`req`], [`mra`], [`rej`], [`rep`], [`rtu`] (RTU and DREP share a
//! layout), [`dreq`], [`sidr_req`], [`sidr_rep`] — each a zero-copy view
//! `Packet<T>` over the 232 bytes after the MAD header plus a validated
//! `Repr`; [`cma`], the rdma_cm private-data header and service IDs (§3); and
//! [`Repr`], a whole 256-byte CM MAD (header + message).
//!
//! Promises: after a view's `check_len` succeeds no accessor panics (every
//! field lies inside [`DATA_LEN`], checked by a test over the field tables);
//! `parse` never panics on any input and refuses reserved codes and
//! over-long length fields with a [`MadError`]; `emit` writes every reserved
//! bit as zero, masks each value to its field's width, and never panics on a
//! buffer of the right size.

pub(crate) mod bits;
pub mod cma;
pub mod dreq;
pub mod mra;
pub mod rej;
pub mod rep;
pub mod req;
pub mod rtu;
pub mod sidr_rep;
pub mod sidr_req;
pub mod steer;

use core::fmt;

pub use crate::mad::{MadError, DATA_LEN, MAD_LEN};
use crate::{mad, Error};

/// Attribute IDs of the CM messages (`CM_*_ATTR_ID`, spec/cm.md §1.4).
pub mod attr {
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    pub const REQ: u16 = 0x0010;
    pub const MRA: u16 = 0x0011;
    pub const REJ: u16 = 0x0012;
    pub const REP: u16 = 0x0013;
    pub const RTU: u16 = 0x0014;
    pub const DREQ: u16 = 0x0015;
    pub const DREP: u16 = 0x0016;
    pub const SIDR_REQ: u16 = 0x0017;
    pub const SIDR_REP: u16 = 0x0018;
    pub const LAP: u16 = 0x0019;
    pub const APR: u16 = 0x001A;
}

/// Which message an MRA acknowledges or a REJ refuses (`enum
/// cm_msg_response`, spec/cm.md §2.3); 3 is reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MsgKind {
    Req = 0,
    Rep = 1,
    Other = 2,
}

impl MsgKind {
    pub(crate) fn from_bits(field: &'static str, v: u32) -> Result<MsgKind, MadError> {
        match v {
            0 => Ok(MsgKind::Req),
            1 => Ok(MsgKind::Rep),
            2 => Ok(MsgKind::Other),
            value => Err(MadError::Reserved { field, value }),
        }
    }
}

/// REQ Transport Service Type (spec/cm.md §2.1): 2 is reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransportType {
    Rc = 0,
    Uc = 1,
    /// Extended (XRC when the Extended Transport Type is 1).
    Extended = 3,
}

/// A REJ's reason (`enum ib_cm_rej_reason`, spec/cm.md §2.11). Codes the
/// table does not name are kept as `Other` so they survive a round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejReason {
    NoQp,
    NoEec,
    NoResources,
    Timeout,
    Unsupported,
    InvalidCommId,
    InvalidCommInstance,
    InvalidServiceId,
    InvalidTransportType,
    StaleConnection,
    RdcNotExist,
    InvalidGid,
    InvalidLid,
    InvalidSl,
    InvalidTrafficClass,
    InvalidHopLimit,
    InvalidPacketRate,
    InvalidAltGid,
    InvalidAltLid,
    InvalidAltSl,
    InvalidAltTrafficClass,
    InvalidAltHopLimit,
    InvalidAltPacketRate,
    PortCmRedirect,
    PortRedirect,
    InvalidMtu,
    InsufficientRespResources,
    ConsumerDefined,
    InvalidRnrRetry,
    DuplicateLocalCommId,
    InvalidClassVersion,
    InvalidFlowLabel,
    InvalidAltFlowLabel,
    VendorOptionNotSupported,
    Other(u16),
}

/// (reason, code) as data, cross-checked against spec/cm.md §2.11 by a test.
pub const REJ_REASONS: [(RejReason, u16); 34] = {
    use RejReason::*;
    [
        (NoQp, 1),
        (NoEec, 2),
        (NoResources, 3),
        (Timeout, 4),
        (Unsupported, 5),
        (InvalidCommId, 6),
        (InvalidCommInstance, 7),
        (InvalidServiceId, 8),
        (InvalidTransportType, 9),
        (StaleConnection, 10),
        (RdcNotExist, 11),
        (InvalidGid, 12),
        (InvalidLid, 13),
        (InvalidSl, 14),
        (InvalidTrafficClass, 15),
        (InvalidHopLimit, 16),
        (InvalidPacketRate, 17),
        (InvalidAltGid, 18),
        (InvalidAltLid, 19),
        (InvalidAltSl, 20),
        (InvalidAltTrafficClass, 21),
        (InvalidAltHopLimit, 22),
        (InvalidAltPacketRate, 23),
        (PortCmRedirect, 24),
        (PortRedirect, 25),
        (InvalidMtu, 26),
        (InsufficientRespResources, 27),
        (ConsumerDefined, 28),
        (InvalidRnrRetry, 29),
        (DuplicateLocalCommId, 30),
        (InvalidClassVersion, 31),
        (InvalidFlowLabel, 32),
        (InvalidAltFlowLabel, 33),
        (VendorOptionNotSupported, 35),
    ]
};

impl RejReason {
    pub fn from_code(code: u16) -> RejReason {
        REJ_REASONS
            .iter()
            .find(|(_, c)| *c == code)
            .map_or(RejReason::Other(code), |(r, _)| *r)
    }

    pub fn code(self) -> u16 {
        match self {
            RejReason::Other(code) => code,
            named => REJ_REASONS
                .iter()
                .find(|(r, _)| *r == named)
                .map_or(0, |(_, c)| *c),
        }
    }
}

impl fmt::Display for RejReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RejReason::Other(code) => write!(f, "reject reason {code}"),
            named => write!(f, "{named:?} ({})", named.code()),
        }
    }
}

/// A SIDR_REP's status (`enum ib_cm_sidr_status`, spec/cm.md §2.9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SidrStatus {
    Success,
    Unsupported,
    Reject,
    NoQp,
    Redirect,
    UnsupportedVersion,
    Other(u8),
}

impl SidrStatus {
    pub fn from_code(code: u8) -> SidrStatus {
        match code {
            0 => SidrStatus::Success,
            1 => SidrStatus::Unsupported,
            2 => SidrStatus::Reject,
            3 => SidrStatus::NoQp,
            4 => SidrStatus::Redirect,
            5 => SidrStatus::UnsupportedVersion,
            other => SidrStatus::Other(other),
        }
    }

    pub fn code(self) -> u8 {
        match self {
            SidrStatus::Success => 0,
            SidrStatus::Unsupported => 1,
            SidrStatus::Reject => 2,
            SidrStatus::NoQp => 3,
            SidrStatus::Redirect => 4,
            SidrStatus::UnsupportedVersion => 5,
            SidrStatus::Other(code) => code,
        }
    }
}

/// One CM message of any kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Req(req::Repr),
    Mra(mra::Repr),
    Rej(rej::Repr),
    Rep(rep::Repr),
    Rtu(rtu::Repr),
    Dreq(dreq::Repr),
    Drep(rtu::Repr),
    SidrReq(sidr_req::Repr),
    SidrRep(sidr_rep::Repr),
}

impl Message {
    /// The attribute ID this message is sent with (§1.4).
    pub fn attr_id(&self) -> u16 {
        match self {
            Message::Req(_) => attr::REQ,
            Message::Mra(_) => attr::MRA,
            Message::Rej(_) => attr::REJ,
            Message::Rep(_) => attr::REP,
            Message::Rtu(_) => attr::RTU,
            Message::Dreq(_) => attr::DREQ,
            Message::Drep(_) => attr::DREP,
            Message::SidrReq(_) => attr::SIDR_REQ,
            Message::SidrRep(_) => attr::SIDR_REP,
        }
    }

    /// A short name for logs and counters.
    pub fn name(&self) -> &'static str {
        attr_name(self.attr_id())
    }

    fn parse(attr_id: u16, data: &[u8]) -> Result<Message, MadError> {
        Ok(match attr_id {
            attr::REQ => Message::Req(req::Repr::parse(&req::Packet::new_checked(data)?)?),
            attr::MRA => Message::Mra(mra::Repr::parse(&mra::Packet::new_checked(data)?)?),
            attr::REJ => Message::Rej(rej::Repr::parse(&rej::Packet::new_checked(data)?)?),
            attr::REP => Message::Rep(rep::Repr::parse(&rep::Packet::new_checked(data)?)?),
            attr::RTU => Message::Rtu(rtu::Repr::parse(&rtu::Packet::new_checked(data)?)?),
            attr::DREQ => Message::Dreq(dreq::Repr::parse(&dreq::Packet::new_checked(data)?)?),
            attr::DREP => Message::Drep(rtu::Repr::parse(&rtu::Packet::new_checked(data)?)?),
            attr::SIDR_REQ => Message::SidrReq(sidr_req::Repr::parse(
                &sidr_req::Packet::new_checked(data)?,
            )?),
            attr::SIDR_REP => Message::SidrRep(sidr_rep::Repr::parse(
                &sidr_rep::Packet::new_checked(data)?,
            )?),
            other => return Err(MadError::Attribute(other)),
        })
    }

    fn emit(&self, data: &mut [u8]) {
        match self {
            Message::Req(r) => r.emit(&mut req::Packet::new_unchecked(data)),
            Message::Mra(r) => r.emit(&mut mra::Packet::new_unchecked(data)),
            Message::Rej(r) => r.emit(&mut rej::Packet::new_unchecked(data)),
            Message::Rep(r) => r.emit(&mut rep::Packet::new_unchecked(data)),
            Message::Rtu(r) | Message::Drep(r) => r.emit(&mut rtu::Packet::new_unchecked(data)),
            Message::Dreq(r) => r.emit(&mut dreq::Packet::new_unchecked(data)),
            Message::SidrReq(r) => r.emit(&mut sidr_req::Packet::new_unchecked(data)),
            Message::SidrRep(r) => r.emit(&mut sidr_rep::Packet::new_unchecked(data)),
        }
    }
}

/// The name of a CM attribute ("REQ", ...), "unknown" for others.
pub fn attr_name(attr_id: u16) -> &'static str {
    match attr_id {
        attr::CLASS_PORT_INFO => "ClassPortInfo",
        attr::REQ => "REQ",
        attr::MRA => "MRA",
        attr::REJ => "REJ",
        attr::REP => "REP",
        attr::RTU => "RTU",
        attr::DREQ => "DREQ",
        attr::DREP => "DREP",
        attr::SIDR_REQ => "SIDR_REQ",
        attr::SIDR_REP => "SIDR_REP",
        attr::LAP => "LAP",
        attr::APR => "APR",
        _ => "unknown",
    }
}

/// A whole CM MAD: the transaction ID, the attribute modifier and the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr {
    pub tid: u64,
    /// Carried by newer kernels for ECE; kept, never interpreted.
    pub attr_mod: u32,
    pub message: Message,
}

impl Repr {
    /// Parses a MAD of exactly [`MAD_LEN`] bytes (spec/cm.md §1.1, §1.3).
    pub fn parse(mad_bytes: &[u8]) -> Result<Repr, MadError> {
        if mad_bytes.len() != MAD_LEN {
            return Err(MadError::Length(mad_bytes.len()));
        }
        let header = mad::Repr::parse(&mad::Packet::new_checked(mad_bytes)?)?;
        header.check_cm()?;
        let message = Message::parse(header.attr_id, &mad_bytes[mad::LEN..])?;
        Ok(Repr {
            tid: header.tid,
            attr_mod: header.attr_mod,
            message,
        })
    }

    pub const fn buffer_len(&self) -> usize {
        MAD_LEN
    }

    /// Writes the whole MAD into the first [`MAD_LEN`] bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), Error> {
        if buf.len() < MAD_LEN {
            return Err(Error::BufferTooSmall {
                need: MAD_LEN,
                have: buf.len(),
            });
        }
        let (head, data) = buf[..MAD_LEN].split_at_mut(mad::LEN);
        let mut header = mad::Repr::cm(self.message.attr_id(), self.tid);
        header.attr_mod = self.attr_mod;
        header.emit(&mut mad::Packet::new_unchecked(head));
        data.fill(0);
        self.message.emit(data);
        Ok(())
    }

    /// The MAD as an array.
    pub fn to_bytes(&self) -> [u8; MAD_LEN] {
        let mut out = [0u8; MAD_LEN];
        // A MAD_LEN buffer always fits.
        let _ = self.emit(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_lies_inside_the_message() {
        type Table = &'static [(&'static str, usize, u32, u32)];
        let tables: [(&str, Table); 8] = [
            ("REQ", req::FIELDS),
            ("MRA", mra::FIELDS),
            ("REJ", rej::FIELDS),
            ("REP", rep::FIELDS),
            ("RTU", rtu::FIELDS),
            ("DREQ", dreq::FIELDS),
            ("SIDR_REQ", sidr_req::FIELDS),
            ("SIDR_REP", sidr_rep::FIELDS),
        ];
        for (msg, fields) in tables {
            for &(name, byte, bit, width) in fields {
                assert!(byte + 4 <= DATA_LEN, "{msg}.{name} window past the end");
                assert!(bit + width <= 32 && width > 0, "{msg}.{name} bits");
            }
        }
    }

    #[test]
    fn reject_reason_codes_round_trip() {
        for code in 0..=u16::MAX {
            assert_eq!(RejReason::from_code(code).code(), code);
        }
        assert_eq!(RejReason::from_code(28), RejReason::ConsumerDefined);
        assert_eq!(RejReason::from_code(34), RejReason::Other(34));
    }

    /// The reason table equals the table in spec/cm.md §2.11, code for code.
    #[test]
    fn reject_reasons_match_the_spec() {
        let spec = include_str!("../../../../spec/cm.md");
        let section = spec
            .split("2.11 Reject reasons")
            .nth(1)
            .and_then(|s| s.split("## 3.").next())
            .unwrap();
        let spec_codes: Vec<u16> = section
            .lines()
            .filter_map(|l| l.strip_prefix("| "))
            .filter_map(|l| l.split(" |").next()?.trim().parse().ok())
            .collect();
        let ours: Vec<u16> = REJ_REASONS.iter().map(|(_, c)| *c).collect();
        assert_eq!(spec_codes, ours);
        assert!(section.contains("| 4 | timeout"));
        assert!(section.contains("| 8 | invalid service ID"));
        assert!(section.contains("| 10 | stale connection"));
        assert!(section.contains("| 28 | consumer defined"));
    }

    #[test]
    fn wrong_length_and_header_are_refused() {
        let good = Repr {
            tid: 7,
            attr_mod: 0,
            message: Message::Rtu(rtu::Repr {
                local_comm_id: 1,
                remote_comm_id: 2,
                private_data: [0; rtu::PRIVATE_DATA_LEN],
            }),
        };
        let bytes = good.to_bytes();
        assert_eq!(Repr::parse(&bytes), Ok(good));
        assert_eq!(Repr::parse(&bytes[..255]), Err(MadError::Length(255)));
        let mut lap = bytes;
        lap[17] = 0x19;
        assert_eq!(Repr::parse(&lap), Err(MadError::Attribute(attr::LAP)));
        let mut v1 = bytes;
        v1[2] = 1;
        assert_eq!(Repr::parse(&v1), Err(MadError::ClassVersion(1)));
    }
}

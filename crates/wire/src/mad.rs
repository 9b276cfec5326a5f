//! The common Management Datagram header, 24 bytes, and what a CM MAD must
//! carry in it (spec/cm.md §1).
//!
//! Owns: the MAD constants (size, GSI QP, Q_Key, class numbers), the header
//! view [`Packet`] and [`Repr`], [`MadError`], the reasons a MAD is refused,
//! and how a MAD travels on RoCEv2: [`gsi_transport`] and [`check_gsi`]
//! (spec/cm.md §1.2). Promise: after `check_len` no accessor panics; `Repr::emit` writes
//! the reserved word as 0 and never panics on a [`LEN`]-byte buffer.

use crate::field::{self, fixed_header_view};
use crate::{bth, deth, Error, Opcode, PKey, Psn, Qkey, Qpn, TransportRepr};

/// Header size (`IB_MGMT_MAD_HDR`, spec/cm.md §1.1).
pub const LEN: usize = 24;
/// A whole MAD: header + 232 bytes of class data (§1.1).
pub const MAD_LEN: usize = 256;
/// The class data after the header (`IB_MGMT_MAD_DATA`).
pub const DATA_LEN: usize = MAD_LEN - LEN;
/// The General Services QP that receives CM MADs (§1.2).
pub const GSI_QPN: u32 = 1;
/// The GSI QP's Q_Key, `IB_QP1_QKEY` (§1.2).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// The default full-member P_Key CM MADs are sent with on RoCE (§1.2).
pub const DEFAULT_PKEY: u16 = 0xFFFF;
/// `IB_MGMT_BASE_VERSION` (§1.3).
pub const BASE_VERSION: u8 = 1;
/// `IB_MGMT_CLASS_CM` (§1.3).
pub const CLASS_CM: u8 = 0x07;
/// `IB_CM_CLASS_VERSION` (§1.3).
pub const CM_CLASS_VERSION: u8 = 2;
/// `IB_MGMT_METHOD_SEND`, the only method the CM uses (§1.3).
pub const METHOD_SEND: u8 = 0x03;

fixed_header_view!("MAD header", LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn base_version(&self) -> u8 {
        self.bytes()[0]
    }
    pub fn mgmt_class(&self) -> u8 {
        self.bytes()[1]
    }
    pub fn class_version(&self) -> u8 {
        self.bytes()[2]
    }
    pub fn method(&self) -> u8 {
        self.bytes()[3]
    }
    pub fn status(&self) -> u16 {
        field::read_u16(self.bytes(), 4)
    }
    pub fn class_specific(&self) -> u16 {
        field::read_u16(self.bytes(), 6)
    }
    pub fn tid(&self) -> u64 {
        field::read_u64(self.bytes(), 8)
    }
    pub fn attr_id(&self) -> u16 {
        field::read_u16(self.bytes(), 16)
    }
    pub fn attr_mod(&self) -> u32 {
        field::read_u32(self.bytes(), 20)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes bytes 0–3.
    pub fn set_class(&mut self, base_version: u8, mgmt_class: u8, class_version: u8, method: u8) {
        self.bytes_mut()[..4].copy_from_slice(&[base_version, mgmt_class, class_version, method]);
    }
    pub fn set_status(&mut self, status: u16) {
        field::write_u16(self.bytes_mut(), 4, status);
    }
    pub fn set_class_specific(&mut self, value: u16) {
        field::write_u16(self.bytes_mut(), 6, value);
    }
    pub fn set_tid(&mut self, tid: u64) {
        field::write_u64(self.bytes_mut(), 8, tid);
    }
    /// Writes bytes 16–19: the attribute ID and the reserved word 0.
    pub fn set_attr_id(&mut self, attr_id: u16) {
        field::write_u32(self.bytes_mut(), 16, u32::from(attr_id) << 16);
    }
    pub fn set_attr_mod(&mut self, attr_mod: u32) {
        field::write_u32(self.bytes_mut(), 20, attr_mod);
    }
}

/// A parsed MAD header (any class; [`crate::cm`] checks the CM values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub base_version: u8,
    pub mgmt_class: u8,
    pub class_version: u8,
    pub method: u8,
    pub status: u16,
    pub class_specific: u16,
    pub tid: u64,
    pub attr_id: u16,
    pub attr_mod: u32,
}

impl Repr {
    /// A CM Send header (§1.3) for `attr_id` and `tid`.
    pub const fn cm(attr_id: u16, tid: u64) -> Repr {
        Repr {
            base_version: BASE_VERSION,
            mgmt_class: CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            tid,
            attr_id,
            attr_mod: 0,
        }
    }

    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            base_version: packet.base_version(),
            mgmt_class: packet.mgmt_class(),
            class_version: packet.class_version(),
            method: packet.method(),
            status: packet.status(),
            class_specific: packet.class_specific(),
            tid: packet.tid(),
            attr_id: packet.attr_id(),
            attr_mod: packet.attr_mod(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_class(
            self.base_version,
            self.mgmt_class,
            self.class_version,
            self.method,
        );
        packet.set_status(self.status);
        packet.set_class_specific(self.class_specific);
        packet.set_tid(self.tid);
        packet.set_attr_id(self.attr_id);
        packet.set_attr_mod(self.attr_mod);
    }

    /// `Ok` when this header is a CM Send (§1.3); the attribute is checked by
    /// the message parser.
    pub fn check_cm(&self) -> Result<(), MadError> {
        if self.base_version != BASE_VERSION {
            return Err(MadError::BaseVersion(self.base_version));
        }
        if self.mgmt_class != CLASS_CM {
            return Err(MadError::NotCm(self.mgmt_class));
        }
        if self.class_version != CM_CLASS_VERSION {
            return Err(MadError::ClassVersion(self.class_version));
        }
        if self.method != METHOD_SEND {
            return Err(MadError::Method(self.method));
        }
        Ok(())
    }
}

/// The transport headers of a MAD sent to the GSI QP of a peer (spec/cm.md
/// §1.2): UD SEND_ONLY, P_Key 0xFFFF, BTH dest QP 1, DETH Q_Key 0x80010000
/// and source QP 1, a 256-byte payload. Emit it with the MAD as payload.
pub fn gsi_transport(psn: Psn) -> TransportRepr {
    let mut t = TransportRepr::new(bth::Repr::new(
        Opcode::UD_SEND_ONLY,
        Qpn::from_masked(GSI_QPN),
        psn,
    ));
    t.deth = Some(deth::Repr {
        qkey: Qkey(GSI_QKEY),
        src_qp: Qpn::from_masked(GSI_QPN),
    });
    t.payload_len = MAD_LEN;
    t
}

/// `Ok` when a parsed packet is a MAD for the GSI QP as rxe accepts it
/// (spec/cm.md §1.2, rxe_recv.c `check_keys`): UD SEND_ONLY to QP 1, the
/// default P_Key, Q_Key 0x80010000, exactly one MAD of payload.
pub fn check_gsi(t: &TransportRepr) -> Result<(), MadError> {
    if t.bth.dest_qp.get() != GSI_QPN {
        return Err(MadError::NotGsi("BTH destination QP is not 1"));
    }
    if t.bth.opcode != Opcode::UD_SEND_ONLY {
        return Err(MadError::NotGsi("opcode is not UD SEND_ONLY"));
    }
    // pkey_match: the low 15 bits must equal the default's (full or limited).
    if t.bth.pkey.0 & 0x7FFF != PKey(DEFAULT_PKEY).0 & 0x7FFF {
        return Err(MadError::NotGsi("P_Key is not the default partition"));
    }
    if t.deth.map(|d| d.qkey.0) != Some(GSI_QKEY) {
        return Err(MadError::NotGsi("DETH Q_Key is not 0x80010000"));
    }
    if t.payload_len != MAD_LEN {
        return Err(MadError::Length(t.payload_len));
    }
    Ok(())
}

/// Why bytes are not a CM MAD we accept. Each variant is a drop reason the
/// connection manager counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MadError {
    /// Shorter than a MAD, or a header cut short.
    #[error(transparent)]
    Wire(#[from] Error),
    /// A RoCE packet that is not a datagram for the GSI QP (spec/cm.md §1.2).
    #[error("not a GSI datagram: {0}")]
    NotGsi(&'static str),
    /// A MAD has exactly 256 bytes (spec/cm.md §1.1).
    #[error("a MAD is {MAD_LEN} bytes, got {0}")]
    Length(usize),
    #[error("MAD base version {0} (must be {BASE_VERSION})")]
    BaseVersion(u8),
    #[error("management class 0x{0:02x} is not CM (0x07)")]
    NotCm(u8),
    #[error("CM class version {0} (must be {CM_CLASS_VERSION})")]
    ClassVersion(u8),
    #[error("MAD method 0x{0:02x} (the CM uses Send, 0x03)")]
    Method(u8),
    /// An attribute the CM does not handle (LAP/APR, ClassPortInfo, unknown).
    #[error("CM attribute 0x{0:04x} not handled")]
    Attribute(u16),
    /// A field holds a value its table marks reserved.
    #[error("{field} holds reserved value {value}")]
    Reserved { field: &'static str, value: u32 },
    /// A length field exceeds the bytes it describes.
    #[error("{field} is {len}, at most {max}")]
    TooLong {
        field: &'static str,
        len: u32,
        max: u32,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    // A REQ's header as cm_format_mad_hdr writes it: tid 0x12345678_9abcdef0.
    const BYTES: [u8; LEN] = [
        1, 7, 2, 3, 0, 0, 0, 0, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x00, 0x10, 0, 0,
        0, 0, 0, 0,
    ];
    const REPR: Repr = Repr::cm(0x0010, 0x1234_5678_9abc_def0);

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(
            (
                p.base_version(),
                p.mgmt_class(),
                p.class_version(),
                p.method()
            ),
            (1, 7, 2, 3)
        );
        assert_eq!((p.tid(), p.attr_id(), p.attr_mod()), (REPR.tid, 0x10, 0));
    }

    #[test]
    fn construct() {
        let mut buf = [0xAA; LEN];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_class(1, 7, 2, 3);
        p.set_status(0);
        p.set_class_specific(0);
        p.set_tid(REPR.tid);
        p.set_attr_id(0x10);
        p.set_attr_mod(0);
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse() {
        let r = Repr::parse(&Packet::new_unchecked(&BYTES[..])).unwrap();
        assert_eq!(r, REPR);
        assert_eq!(r.check_cm(), Ok(()));
        assert!(matches!(
            Repr::parse(&Packet::new_unchecked(&BYTES[..23])),
            Err(Error::Truncated {
                need: 24,
                have: 23,
                ..
            })
        ));
        let mut sa = BYTES;
        sa[1] = 0x03; // subnet administration
        let r = Repr::parse(&Packet::new_unchecked(&sa[..])).unwrap();
        assert_eq!(r.check_cm(), Err(MadError::NotCm(3)));
        let mut resp = BYTES;
        resp[3] = 0x81;
        let r = Repr::parse(&Packet::new_unchecked(&resp[..])).unwrap();
        assert_eq!(r.check_cm(), Err(MadError::Method(0x81)));
    }

    #[test]
    fn emit() {
        let mut buf = [0xAA; LEN];
        REPR.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn gsi_datagrams_round_trip_and_are_checked() {
        use std::net::Ipv4Addr;
        let encap = crate::Encap::ipv4(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            0xC000,
        );
        let t = gsi_transport(Psn::from_masked(7));
        let mad = [0x5Au8; MAD_LEN];
        let mut buf = vec![0u8; t.buffer_len()];
        t.emit(&mut buf, &mad, &encap).unwrap();
        // BTH 12 + DETH 8 + MAD 256 + ICRC 4.
        assert_eq!(buf.len(), 12 + 8 + MAD_LEN + 4);
        let back = TransportRepr::parse(&buf).unwrap();
        assert_eq!(check_gsi(&back), Ok(()));
        assert_eq!(back.payload(&buf), &mad[..]);
        let mut other = back;
        other.deth = Some(deth::Repr {
            qkey: Qkey(0x1234),
            src_qp: Qpn::from_masked(1),
        });
        assert!(matches!(check_gsi(&other), Err(MadError::NotGsi(_))));
        let mut other = back;
        other.bth.dest_qp = Qpn::from_masked(2);
        assert!(matches!(check_gsi(&other), Err(MadError::NotGsi(_))));
        let mut other = back;
        other.bth.pkey = PKey(0x8001);
        assert!(matches!(check_gsi(&other), Err(MadError::NotGsi(_))));
        let mut other = back;
        other.bth.pkey = PKey(0x7FFF); // limited member of the default partition
        assert_eq!(check_gsi(&other), Ok(()));
        let mut short = back;
        short.payload_len = 200;
        assert_eq!(check_gsi(&short), Err(MadError::Length(200)));
    }
}

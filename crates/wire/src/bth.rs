//! Base Transport Header, 12 bytes (roce-wire.md §3).
//!
//! Owns: the BTH view [`Packet`] and its validated [`Repr`]. Promise: after
//! `check_len` no accessor panics; `Repr::parse` accepts only known opcodes and
//! TVer 0; `Repr::emit` writes every reserved bit as 0 and never panics on a
//! buffer of [`LEN`] bytes.

use crate::field::{self, fixed_header_view};
use crate::{Error, Opcode, PKey, Psn, Qpn};

/// BTH size in bytes.
pub const LEN: usize = 12;

fixed_header_view!("BTH", LEN);

const SE: u8 = 0x80;
const MIG: u8 = 0x40;
const FECN: u8 = 0x80;
const BECN: u8 = 0x40;
const ACK_REQ: u8 = 0x80;

impl<T: AsRef<[u8]>> Packet<T> {
    /// Byte 0: the opcode as sent (not checked against the table).
    pub fn opcode_raw(&self) -> u8 {
        self.bytes()[0]
    }
    /// Byte 1 bit 7: solicited event.
    pub fn solicited(&self) -> bool {
        self.bytes()[1] & SE != 0
    }
    /// Byte 1 bit 6: MigReq.
    pub fn mig_req(&self) -> bool {
        self.bytes()[1] & MIG != 0
    }
    /// Byte 1 bits 5..4: PadCnt.
    pub fn pad_count(&self) -> u8 {
        (self.bytes()[1] >> 4) & 3
    }
    /// Byte 1 bits 3..0: transport header version.
    pub fn tver(&self) -> u8 {
        self.bytes()[1] & 0x0F
    }
    pub fn pkey(&self) -> PKey {
        PKey(field::read_u16(self.bytes(), 2))
    }
    /// Byte 4 bit 7.
    pub fn fecn(&self) -> bool {
        self.bytes()[4] & FECN != 0
    }
    /// Byte 4 bit 6.
    pub fn becn(&self) -> bool {
        self.bytes()[4] & BECN != 0
    }
    /// Byte 4 bits 5..0 (Resv6a; ignored on receive, §3).
    pub fn resv6(&self) -> u8 {
        self.bytes()[4] & 0x3F
    }
    pub fn dest_qp(&self) -> Qpn {
        Qpn::from_masked(field::read_u24(self.bytes(), 5))
    }
    /// Byte 8 bit 7: AckReq.
    pub fn ack_req(&self) -> bool {
        self.bytes()[8] & ACK_REQ != 0
    }
    /// Byte 8 bits 6..0 (Resv7; covered by the ICRC).
    pub fn resv7(&self) -> u8 {
        self.bytes()[8] & 0x7F
    }
    pub fn psn(&self) -> Psn {
        Psn::from_masked(field::read_u24(self.bytes(), 9))
    }
}

fn flag(set: bool, bit: u8) -> u8 {
    if set {
        bit
    } else {
        0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_opcode(&mut self, opcode: Opcode) {
        self.bytes_mut()[0] = opcode.get();
    }
    /// Writes byte 1 whole: SE, M, PadCnt (low 2 bits used), TVer 0.
    pub fn set_flags(&mut self, solicited: bool, mig_req: bool, pad_count: u8) {
        self.bytes_mut()[1] = flag(solicited, SE) | flag(mig_req, MIG) | ((pad_count & 3) << 4);
    }
    pub fn set_pad_count(&mut self, pad_count: u8) {
        let b = &mut self.bytes_mut()[1];
        *b = (*b & !0x30) | ((pad_count & 3) << 4);
    }
    pub fn set_pkey(&mut self, pkey: PKey) {
        field::write_u16(self.bytes_mut(), 2, pkey.0);
    }
    /// Writes byte 4 whole: F, B, Resv6a = 0.
    pub fn set_congestion(&mut self, fecn: bool, becn: bool) {
        self.bytes_mut()[4] = flag(fecn, FECN) | flag(becn, BECN);
    }
    pub fn set_dest_qp(&mut self, qpn: Qpn) {
        field::write_u24(self.bytes_mut(), 5, qpn.get());
    }
    /// Writes byte 8 whole: AckReq, Resv7 = 0.
    pub fn set_ack_req(&mut self, ack_req: bool) {
        self.bytes_mut()[8] = flag(ack_req, ACK_REQ);
    }
    pub fn set_psn(&mut self, psn: Psn) {
        field::write_u24(self.bytes_mut(), 9, psn.get());
    }
}

/// A validated BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub opcode: Opcode,
    pub solicited: bool,
    pub mig_req: bool,
    /// 0..=3. When a whole packet is emitted it is derived from the payload length.
    pub pad_count: u8,
    pub pkey: PKey,
    pub fecn: bool,
    pub becn: bool,
    pub dest_qp: Qpn,
    pub ack_req: bool,
    pub psn: Psn,
}

impl Repr {
    /// A BTH with the RoCE defaults: P_Key 0xFFFF, every flag clear, pad 0.
    pub const fn new(opcode: Opcode, dest_qp: Qpn, psn: Psn) -> Repr {
        Repr {
            opcode,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: PKey::DEFAULT,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: false,
            psn,
        }
    }

    /// Checks the length, the opcode (§4) and TVer == 0 (§3, rxe drops TVer ≠ 0).
    /// Reserved bits are ignored (§3: "ignore on receive").
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        let opcode = Opcode::new(packet.opcode_raw())?;
        if packet.tver() != 0 {
            return Err(Error::BadTver(packet.tver()));
        }
        Ok(Repr {
            opcode,
            solicited: packet.solicited(),
            mig_req: packet.mig_req(),
            pad_count: packet.pad_count(),
            pkey: packet.pkey(),
            fecn: packet.fecn(),
            becn: packet.becn(),
            dest_qp: packet.dest_qp(),
            ack_req: packet.ack_req(),
            psn: packet.psn(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    /// Writes all 12 bytes; reserved bits 0 (§3: "send 0").
    /// The 12 bytes are made in registers and stored at once (the same bytes
    /// as the setters, which the tests compare).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        let [_, p0, p1, p2] = self.psn.get().to_be_bytes();
        let [_, q0, q1, q2] = self.dest_qp.get().to_be_bytes();
        let [k0, k1] = self.pkey.0.to_be_bytes();
        let bytes: [u8; LEN] = [
            self.opcode.get(),
            flag(self.solicited, SE) | flag(self.mig_req, MIG) | ((self.pad_count & 3) << 4),
            k0,
            k1,
            flag(self.fecn, FECN) | flag(self.becn, BECN),
            q0,
            q1,
            q2,
            flag(self.ack_req, ACK_REQ),
            p0,
            p1,
            p2,
        ];
        packet.bytes_mut()[..LEN].copy_from_slice(&bytes);
    }

    /// [`Repr::emit`] field by field through the setters (the tests' oracle).
    #[cfg(test)]
    fn emit_by_setters<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_opcode(self.opcode);
        packet.set_flags(self.solicited, self.mig_req, self.pad_count);
        packet.set_pkey(self.pkey);
        packet.set_congestion(self.fecn, self.becn);
        packet.set_dest_qp(self.dest_qp);
        packet.set_ack_req(self.ack_req);
        packet.set_psn(self.psn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // rc_send.pcap frame 1 (roce-wire testdata README): RC_SEND_ONLY,
    // DestQP 0x12, PSN 0x54e31e, A=1, PadCnt 3.
    const BYTES: [u8; 12] = [
        0x04, 0x30, 0xff, 0xff, 0x00, 0x00, 0x00, 0x12, 0x80, 0x54, 0xe3, 0x1e,
    ];

    fn repr() -> Repr {
        Repr {
            pad_count: 3,
            ack_req: true,
            ..Repr::new(
                Opcode::RC_SEND_ONLY,
                Qpn::from_masked(0x12),
                Psn::from_masked(0x54e31e),
            )
        }
    }

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.opcode_raw(), 0x04);
        assert!(!p.solicited() && !p.mig_req());
        assert_eq!((p.pad_count(), p.tver()), (3, 0));
        assert_eq!(p.pkey(), PKey(0xffff));
        assert!(!p.fecn() && !p.becn());
        assert_eq!(p.dest_qp().get(), 0x12);
        assert!(p.ack_req());
        assert_eq!(p.psn().get(), 0x54e31e);
    }

    #[test]
    fn construct() {
        let mut buf = [0xAAu8; LEN];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_opcode(Opcode::RC_SEND_ONLY);
        p.set_flags(false, false, 3);
        p.set_pkey(PKey::DEFAULT);
        p.set_congestion(false, false);
        p.set_dest_qp(Qpn::from_masked(0x12));
        p.set_ack_req(true);
        p.set_psn(Psn::from_masked(0x54e31e));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse() {
        assert_eq!(Repr::parse(&Packet::new_unchecked(&BYTES[..])), Ok(repr()));
    }

    #[test]
    fn emit() {
        let mut buf = [0xAAu8; LEN];
        repr().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    proptest::proptest! {
        /// The one-store emit writes the setters' bytes for any field values
        /// (over a buffer of any old contents).
        #[test]
        fn emit_is_the_setters(
            row in 0..crate::opcode::TABLE.len(),
            flags: [bool; 6],
            pad in 0u8..=255,
            pkey: u16,
            qpn: u32,
            psn: u32,
            old: [u8; LEN],
        ) {
            let r = Repr {
                opcode: Opcode::new(crate::opcode::TABLE[row].code).unwrap(),
                solicited: flags[0],
                mig_req: flags[1],
                pad_count: pad,
                pkey: PKey(pkey),
                fecn: flags[2],
                becn: flags[3],
                dest_qp: Qpn::from_masked(qpn),
                ack_req: flags[4],
                psn: Psn::from_masked(psn),
            };
            let (mut a, mut b) = (old, old);
            r.emit(&mut Packet::new_unchecked(&mut a[..]));
            r.emit_by_setters(&mut Packet::new_unchecked(&mut b[..]));
            proptest::prop_assert_eq!(a, b);
        }
    }

    #[test]
    fn cnp_becn_and_reserved_bits() {
        // §8.2 vector 1 BTH: CNP with B = 1.
        let cnp = [0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x01, 0x18, 0, 0, 0, 0];
        let r = Repr::parse(&Packet::new_unchecked(&cnp[..])).unwrap();
        assert_eq!(
            (r.opcode, r.becn, r.fecn, r.dest_qp.get()),
            (Opcode::CNP, true, false, 0x118)
        );
        // Reserved bits are ignored on receive and written as 0.
        let mut noisy = BYTES;
        noisy[4] |= 0x3F;
        noisy[8] |= 0x7F;
        let r = Repr::parse(&Packet::new_unchecked(&noisy[..])).unwrap();
        assert_eq!(r, repr());
    }

    #[test]
    fn rejects_short_unknown_and_tver() {
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&BYTES[..11])),
            Err(Error::Truncated {
                header: "BTH",
                need: 12,
                have: 11
            })
        );
        let mut b = BYTES;
        b[0] = 0x15;
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&b[..])),
            Err(Error::UnknownOpcode(0x15))
        );
        let mut b = BYTES;
        b[1] |= 1;
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&b[..])),
            Err(Error::BadTver(1))
        );
    }
}

//! A whole transport packet: the UDP payload `BTH … payload … pad … ICRC`.
//!
//! Owns: [`TransportRepr`] (parse, `buffer_len`, emit, one-line `Display`).
//! Promises: `parse` never allocates and never panics on any input; it checks
//! the opcode (§4), every header length, the pad count (§6) and the opcode's
//! payload rule, but not the ICRC (that needs the IP header: see [`crate::icrc`]).
//! `emit` writes exactly `buffer_len()` bytes and returns an error instead of
//! panicking when the buffer, payload or headers do not fit the representation.

use core::fmt;

use crate::opcode::{pad_len, PayloadRule};
use crate::{
    aeth, atomic_ack_eth, atomic_eth, bth, deth, feth, icrc, ieth, immdt, rdeth, reth, xrceth,
    Encap, Error, HeaderSet, Opcode, WIRE_ORDER,
};

/// Every field of a transport packet except the payload bytes themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportRepr {
    pub bth: bth::Repr,
    pub rdeth: Option<rdeth::Repr>,
    pub deth: Option<deth::Repr>,
    pub xrceth: Option<xrceth::Repr>,
    pub feth: Option<feth::Repr>,
    pub reth: Option<reth::Repr>,
    pub atomic_eth: Option<atomic_eth::Repr>,
    pub immdt: Option<immdt::Repr>,
    pub ieth: Option<ieth::Repr>,
    pub aeth: Option<aeth::Repr>,
    pub atomic_ack_eth: Option<atomic_ack_eth::Repr>,
    /// Payload bytes, without pad.
    pub payload_len: usize,
}

impl TransportRepr {
    /// A packet with only a BTH and no payload; set the extension headers the
    /// opcode needs (see [`Opcode::headers`]) before emitting.
    pub const fn new(bth: bth::Repr) -> TransportRepr {
        TransportRepr {
            bth,
            rdeth: None,
            deth: None,
            xrceth: None,
            feth: None,
            reth: None,
            atomic_eth: None,
            immdt: None,
            ieth: None,
            aeth: None,
            atomic_ack_eth: None,
            payload_len: 0,
        }
    }

    #[inline]
    pub const fn opcode(&self) -> Opcode {
        self.bth.opcode
    }

    /// Parses a UDP payload. Does not check the ICRC.
    pub fn parse(bytes: &[u8]) -> Result<TransportRepr, Error> {
        let bth = bth::Repr::parse(&bth::Packet::new_unchecked(bytes))?;
        let opcode = bth.opcode;
        check_header_room(opcode, bytes.len())?;
        let payload_len = check_payload(opcode, bth.pad_count, bytes.len())?;
        let mut repr = TransportRepr {
            payload_len,
            ..TransportRepr::new(bth)
        };
        // The opcode's headers in wire order, each parsed straight into its
        // field (one test per header kind, no loop over a table).
        let (set, mut at) = (opcode.headers(), bth::LEN);
        macro_rules! take {
            ($flag:ident, $field:ident, $module:ident) => {
                if set.contains(HeaderSet::$flag) {
                    let b = header_bytes(bytes, &mut at, HeaderSet::$flag)?;
                    repr.$field = Some($module::Repr::parse(&$module::Packet::new_unchecked(b))?);
                }
            };
        }
        take!(RDETH, rdeth, rdeth);
        take!(DETH, deth, deth);
        take!(XRCETH, xrceth, xrceth);
        take!(FETH, feth, feth);
        take!(RETH, reth, reth);
        take!(ATOMIC_ETH, atomic_eth, atomic_eth);
        take!(IMMDT, immdt, immdt);
        take!(IETH, ieth, ieth);
        take!(AETH, aeth, aeth);
        take!(ATOMIC_ACK_ETH, atomic_ack_eth, atomic_ack_eth);
        if set.contains(HeaderSet::CNP_RESERVED) {
            // §4.6: the CNP's 16 reserved bytes carry nothing.
            header_bytes(bytes, &mut at, HeaderSet::CNP_RESERVED)?;
        }
        Ok(repr)
    }

    /// [`TransportRepr::parse`] as first written: a walk over the opcode's
    /// headers with a match per header (the oracle of the property tests).
    #[cfg(test)]
    fn parse_by_walk(bytes: &[u8]) -> Result<TransportRepr, Error> {
        let bth = bth::Repr::parse(&bth::Packet::new_unchecked(bytes))?;
        let opcode = bth.opcode;
        check_header_room(opcode, bytes.len())?;
        let payload_len = check_payload(opcode, bth.pad_count, bytes.len())?;
        let mut repr = TransportRepr {
            payload_len,
            ..TransportRepr::new(bth)
        };
        let mut at = bth::LEN;
        for (header, name, size) in opcode.headers().iter() {
            let b = bytes.get(at..at + size).ok_or(Error::Truncated {
                header: name,
                need: at + size,
                have: bytes.len(),
            })?;
            repr.parse_header(header, b)?;
            at += size;
        }
        Ok(repr)
    }

    #[cfg(test)]
    fn parse_header(&mut self, header: HeaderSet, b: &[u8]) -> Result<(), Error> {
        match header {
            HeaderSet::RDETH => {
                self.rdeth = Some(rdeth::Repr::parse(&rdeth::Packet::new_unchecked(b))?)
            }
            HeaderSet::DETH => {
                self.deth = Some(deth::Repr::parse(&deth::Packet::new_unchecked(b))?)
            }
            HeaderSet::XRCETH => {
                self.xrceth = Some(xrceth::Repr::parse(&xrceth::Packet::new_unchecked(b))?)
            }
            HeaderSet::FETH => {
                self.feth = Some(feth::Repr::parse(&feth::Packet::new_unchecked(b))?)
            }
            HeaderSet::RETH => {
                self.reth = Some(reth::Repr::parse(&reth::Packet::new_unchecked(b))?)
            }
            HeaderSet::ATOMIC_ETH => {
                self.atomic_eth = Some(atomic_eth::Repr::parse(
                    &atomic_eth::Packet::new_unchecked(b),
                )?)
            }
            HeaderSet::IMMDT => {
                self.immdt = Some(immdt::Repr::parse(&immdt::Packet::new_unchecked(b))?)
            }
            HeaderSet::IETH => {
                self.ieth = Some(ieth::Repr::parse(&ieth::Packet::new_unchecked(b))?)
            }
            HeaderSet::AETH => {
                self.aeth = Some(aeth::Repr::parse(&aeth::Packet::new_unchecked(b))?)
            }
            HeaderSet::ATOMIC_ACK_ETH => {
                self.atomic_ack_eth = Some(atomic_ack_eth::Repr::parse(
                    &atomic_ack_eth::Packet::new_unchecked(b),
                )?)
            }
            // §4.6: the CNP's 16 reserved bytes carry nothing.
            _ => {}
        }
        Ok(())
    }

    /// The extension headers this representation holds.
    pub fn header_set(&self) -> HeaderSet {
        // One bit per header held (checked on every emit: plain ORs).
        let bit = |present: bool, h: HeaderSet| if present { h.bits() } else { 0 };
        let bits = bit(self.rdeth.is_some(), HeaderSet::RDETH)
            | bit(self.deth.is_some(), HeaderSet::DETH)
            | bit(self.xrceth.is_some(), HeaderSet::XRCETH)
            | bit(self.feth.is_some(), HeaderSet::FETH)
            | bit(self.reth.is_some(), HeaderSet::RETH)
            | bit(self.atomic_eth.is_some(), HeaderSet::ATOMIC_ETH)
            | bit(self.immdt.is_some(), HeaderSet::IMMDT)
            | bit(self.ieth.is_some(), HeaderSet::IETH)
            | bit(self.aeth.is_some(), HeaderSet::AETH)
            | bit(self.atomic_ack_eth.is_some(), HeaderSet::ATOMIC_ACK_ETH)
            | (self.opcode().headers().bits() & HeaderSet::CNP_RESERVED.bits());
        HeaderSet::from_bits(bits)
    }

    /// Bytes from the BTH to the payload.
    #[inline]
    pub const fn header_len(&self) -> usize {
        self.opcode().header_len()
    }

    /// Pad bytes after the payload (§6).
    #[inline]
    pub const fn pad_len(&self) -> usize {
        pad_len(self.payload_len) as usize
    }

    /// Where the payload lies in the parsed or emitted packet.
    #[inline]
    pub const fn payload_range(&self) -> core::ops::Range<usize> {
        self.header_len()..self.header_len() + self.payload_len
    }

    /// The payload inside `packet` (the bytes this was parsed from); empty if
    /// `packet` is too short.
    #[inline]
    pub fn payload<'a>(&self, packet: &'a [u8]) -> &'a [u8] {
        packet.get(self.payload_range()).unwrap_or(&[])
    }

    /// Total UDP payload length: headers + payload + pad + ICRC.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        self.header_len() + self.payload_len + self.pad_len() + icrc::LEN
    }

    /// Emits into `buf[..buffer_len()]` and fills in the ICRC for `encap`.
    pub fn emit(&self, buf: &mut [u8], payload: &[u8], encap: &Encap) -> Result<usize, Error> {
        let len = self.emit_unsealed(buf, payload)?;
        icrc::seal(encap, &mut buf[..len])?;
        Ok(len)
    }

    /// Emits into `buf[..buffer_len()]` with a zero ICRC (seal later with
    /// [`icrc::seal`]). PadCnt is derived from the payload length (§6).
    pub fn emit_unsealed(&self, buf: &mut [u8], payload: &[u8]) -> Result<usize, Error> {
        self.check_emit(buf.len(), payload.len())?;
        let at = self.header_len();
        buf[at..at + payload.len()].copy_from_slice(payload);
        self.emit_around_payload(buf)
    }

    /// Emits around a payload already in place — `payload_len` bytes at
    /// `buf[header_len()..]`, written there by the caller (the sender gathers
    /// straight from registered memory into the datagram, no staging copy) —
    /// and fills in the ICRC for `encap`: the headers before it, pad and ICRC
    /// after it. Gives the same bytes as [`TransportRepr::emit`] with that payload.
    pub fn emit_in_place(&self, buf: &mut [u8], encap: &Encap) -> Result<usize, Error> {
        let len = self.emit_in_place_unsealed(buf)?;
        icrc::seal(encap, &mut buf[..len])?;
        Ok(len)
    }

    /// [`TransportRepr::emit_in_place`] with a zero ICRC, for a receiver
    /// that does not check it (seal later with [`icrc::seal`]).
    pub fn emit_in_place_unsealed(&self, buf: &mut [u8]) -> Result<usize, Error> {
        self.check_emit(buf.len(), self.payload_len)?;
        self.emit_around_payload(buf)
    }

    /// Headers, then zero pad and ICRC slot after `payload_len` bytes left as
    /// they are; the caller checked the lengths.
    fn emit_around_payload(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let len = self.buffer_len();
        let buf = &mut buf[..len];
        let bth = bth::Repr {
            pad_count: pad_len(self.payload_len),
            ..self.bth
        };
        bth.emit(&mut bth::Packet::new_unchecked(&mut buf[..bth::LEN]));
        // The opcode's headers in wire order, each from its field (one test
        // per header kind, no loop over a table).
        let (set, mut at) = (self.opcode().headers(), bth::LEN);
        macro_rules! put {
            ($flag:ident, $field:ident, $module:ident) => {
                if set.contains(HeaderSet::$flag) {
                    let size = header_size(HeaderSet::$flag);
                    if let Some(r) = self.$field {
                        r.emit(&mut $module::Packet::new_unchecked(&mut buf[at..at + size]));
                    }
                    at += size;
                }
            };
        }
        put!(RDETH, rdeth, rdeth);
        put!(DETH, deth, deth);
        put!(XRCETH, xrceth, xrceth);
        put!(FETH, feth, feth);
        put!(RETH, reth, reth);
        put!(ATOMIC_ETH, atomic_eth, atomic_eth);
        put!(IMMDT, immdt, immdt);
        put!(IETH, ieth, ieth);
        put!(AETH, aeth, aeth);
        put!(ATOMIC_ACK_ETH, atomic_ack_eth, atomic_ack_eth);
        if set.contains(HeaderSet::CNP_RESERVED) {
            let size = header_size(HeaderSet::CNP_RESERVED);
            buf[at..at + size].fill(0); // §4.6: CNP reserved bytes are zero
            at += size;
        }
        buf[at + self.payload_len..].fill(0); // §6: zero pad; ICRC slot zero until sealed
        Ok(len)
    }

    /// [`TransportRepr::emit_around_payload`] as first written: a walk over
    /// the opcode's headers with a match per header (the tests' oracle).
    #[cfg(test)]
    fn emit_around_payload_by_walk(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let len = self.buffer_len();
        let buf = &mut buf[..len];
        let bth = bth::Repr {
            pad_count: pad_len(self.payload_len),
            ..self.bth
        };
        bth.emit(&mut bth::Packet::new_unchecked(&mut buf[..bth::LEN]));
        let mut at = bth::LEN;
        for (header, _, size) in self.opcode().headers().iter() {
            self.emit_header(header, &mut buf[at..at + size]);
            at += size;
        }
        buf[at + self.payload_len..].fill(0);
        Ok(len)
    }

    fn check_emit(&self, buf_len: usize, payload_len: usize) -> Result<(), Error> {
        let (opcode, got) = (self.opcode(), self.header_set());
        if got != opcode.headers() {
            return Err(Error::HeaderMismatch {
                opcode,
                expected: opcode.headers(),
                got,
            });
        }
        if payload_len != self.payload_len {
            return Err(Error::PayloadLenMismatch {
                expected: self.payload_len,
                got: payload_len,
            });
        }
        check_payload_rule(opcode, payload_len)?;
        if buf_len < self.buffer_len() {
            return Err(Error::BufferTooSmall {
                need: self.buffer_len(),
                have: buf_len,
            });
        }
        Ok(())
    }

    #[cfg(test)]
    fn emit_header(&self, header: HeaderSet, b: &mut [u8]) {
        match header {
            HeaderSet::RDETH => {
                emit_opt(self.rdeth, |r| r.emit(&mut rdeth::Packet::new_unchecked(b)))
            }
            HeaderSet::DETH => emit_opt(self.deth, |r| r.emit(&mut deth::Packet::new_unchecked(b))),
            HeaderSet::XRCETH => emit_opt(self.xrceth, |r| {
                r.emit(&mut xrceth::Packet::new_unchecked(b))
            }),
            HeaderSet::FETH => emit_opt(self.feth, |r| r.emit(&mut feth::Packet::new_unchecked(b))),
            HeaderSet::RETH => emit_opt(self.reth, |r| r.emit(&mut reth::Packet::new_unchecked(b))),
            HeaderSet::ATOMIC_ETH => emit_opt(self.atomic_eth, |r| {
                r.emit(&mut atomic_eth::Packet::new_unchecked(b))
            }),
            HeaderSet::IMMDT => {
                emit_opt(self.immdt, |r| r.emit(&mut immdt::Packet::new_unchecked(b)))
            }
            HeaderSet::IETH => emit_opt(self.ieth, |r| r.emit(&mut ieth::Packet::new_unchecked(b))),
            HeaderSet::AETH => emit_opt(self.aeth, |r| r.emit(&mut aeth::Packet::new_unchecked(b))),
            HeaderSet::ATOMIC_ACK_ETH => emit_opt(self.atomic_ack_eth, |r| {
                r.emit(&mut atomic_ack_eth::Packet::new_unchecked(b))
            }),
            _ => b.fill(0), // §4.6: CNP reserved bytes are zero
        }
    }
}

#[cfg(test)]
fn emit_opt<R>(repr: Option<R>, emit: impl FnOnce(R)) {
    if let Some(r) = repr {
        emit(r);
    }
}

/// The size in bytes of the one header `h` names (its row of [`WIRE_ORDER`]).
const fn header_size(h: HeaderSet) -> usize {
    WIRE_ORDER[h.bits().trailing_zeros() as usize].2
}

/// The bytes of header `h` at `*at` (then past them), or `Truncated` naming it.
fn header_bytes<'a>(bytes: &'a [u8], at: &mut usize, h: HeaderSet) -> Result<&'a [u8], Error> {
    let (_, name, size) = WIRE_ORDER[h.bits().trailing_zeros() as usize];
    let b = bytes.get(*at..*at + size).ok_or(Error::Truncated {
        header: name,
        need: *at + size,
        have: bytes.len(),
    })?;
    *at += size;
    Ok(b)
}

/// `Truncated` naming the first header (or the ICRC) that does not fit in `len` bytes.
fn check_header_room(opcode: Opcode, len: usize) -> Result<(), Error> {
    // Every header ends at or before the last one: if it fits, all do.
    if opcode.header_len() + icrc::LEN <= len {
        return Ok(());
    }
    let mut end = bth::LEN;
    for (_, name, size) in opcode.headers().iter() {
        end += size;
        if end + icrc::LEN > len {
            return Err(Error::Truncated {
                header: name,
                need: end + icrc::LEN,
                have: len,
            });
        }
    }
    if end + icrc::LEN > len {
        return Err(Error::Truncated {
            header: "ICRC",
            need: end + icrc::LEN,
            have: len,
        });
    }
    Ok(())
}

/// Payload length from the packet length (§6: `len − hdr_len − PadCnt − 4`),
/// after checking the pad and the opcode's payload rule.
fn check_payload(opcode: Opcode, pad: u8, len: usize) -> Result<usize, Error> {
    let data_len = len - opcode.header_len() - icrc::LEN; // check_header_room ran first
                                                          // §6: payload + pad is a multiple of 4 and the pad fits.
    if usize::from(pad) > data_len || data_len & 3 != 0 {
        return Err(Error::BadPad { pad, data_len });
    }
    let payload_len = data_len - usize::from(pad);
    if opcode.payload_rule() == PayloadRule::None && pad != 0 {
        return Err(Error::BadPad { pad, data_len });
    }
    check_payload_rule(opcode, payload_len)?;
    Ok(payload_len)
}

fn check_payload_rule(opcode: Opcode, len: usize) -> Result<(), Error> {
    match opcode.payload_rule() {
        PayloadRule::None if len != 0 => Err(Error::UnexpectedPayload { opcode, len }),
        PayloadRule::Exactly(expected) if len != expected => Err(Error::BadPayloadLen {
            opcode,
            expected,
            len,
        }),
        _ => Ok(()),
    }
}

impl fmt::Display for TransportRepr {
    /// One line for logs, e.g.
    /// `RC_RDMA_WRITE_FIRST qpn=0x000011 psn=0x00007b A=0 SE=0 pad=0 RETH{va=0x1000, rkey=0x00001043, len=3000} payload=1024`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.bth;
        write!(
            f,
            "{} qpn={} psn={} A={} SE={} pad={}",
            b.opcode,
            b.dest_qp,
            b.psn,
            u8::from(b.ack_req),
            u8::from(b.solicited),
            self.pad_len()
        )?;
        if b.mig_req {
            f.write_str(" M=1")?;
        }
        if b.fecn || b.becn {
            write!(f, " FECN={} BECN={}", u8::from(b.fecn), u8::from(b.becn))?;
        }
        if b.pkey != crate::PKey::DEFAULT {
            write!(f, " pkey={}", b.pkey)?;
        }
        self.fmt_headers(f)?;
        write!(f, " payload={}", self.payload_len)
    }
}

impl TransportRepr {
    fn fmt_headers(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(h) = self.rdeth {
            write!(f, " RDETH{{eecn={}}}", h.eecn)?;
        }
        if let Some(h) = self.deth {
            write!(f, " DETH{{qkey={}, src_qp={}}}", h.qkey, h.src_qp)?;
        }
        if let Some(h) = self.xrceth {
            write!(f, " XRCETH{{srqn={}}}", h.xrc_srqn)?;
        }
        if let Some(h) = self.feth {
            write!(
                f,
                " FETH{{sel={}, placement={}}}",
                h.selectivity, h.placement
            )?;
        }
        if let Some(h) = self.reth {
            write!(
                f,
                " RETH{{va=0x{:x}, rkey={}, len={}}}",
                h.va, h.rkey, h.dma_len
            )?;
        }
        if let Some(h) = self.atomic_eth {
            write!(
                f,
                " AtomicETH{{va=0x{:x}, rkey={}, swap_add=0x{:x}, compare=0x{:x}}}",
                h.va, h.rkey, h.swap_add, h.compare
            )?;
        }
        if let Some(h) = self.immdt {
            write!(f, " ImmDt{{0x{:08x}}}", h.imm)?;
        }
        if let Some(h) = self.ieth {
            write!(f, " IETH{{rkey={}}}", h.rkey)?;
        }
        if let Some(h) = self.aeth {
            write!(f, " AETH{{{}, msn={}}}", h.syndrome, h.msn.get())?;
        }
        if let Some(h) = self.atomic_ack_eth {
            write!(f, " AtomicAckETH{{orig=0x{:x}}}", h.orig)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Bytes that start with a defined opcode (or any byte) and TVer 0 (or
    /// any), of any length: well-formed packets of every opcode, and
    /// truncated, padded-wrong and malformed ones.
    fn datagram() -> impl Strategy<Value = Vec<u8>> {
        let first = prop_oneof![
            (0..crate::opcode::TABLE.len()).prop_map(|row| crate::opcode::TABLE[row].code),
            any::<u8>(),
        ];
        (
            first,
            prop_oneof![Just(None), any::<u8>().prop_map(Some)],
            proptest::collection::vec(any::<u8>(), 0..120),
        )
            .prop_map(|(op, byte1, rest)| {
                let mut v = rest;
                if !v.is_empty() {
                    v[0] = op;
                }
                if let (Some(b), true) = (byte1, v.len() > 1) {
                    v[1] = b & 0x3F; // TVer 0, any pad and M
                }
                v
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        /// The header-by-header parse and the walk over the header table
        /// agree on every input: the same representation or the same error.
        #[test]
        fn parse_is_the_walk(bytes in datagram()) {
            prop_assert_eq!(TransportRepr::parse(&bytes), TransportRepr::parse_by_walk(&bytes));
        }

        /// An unsealed emit in place, sealed afterwards, is the sealed emit
        /// (same buffer contents before, same bytes after).
        #[test]
        fn unsealed_then_sealed_is_sealed(bytes in datagram(), fill: u8) {
            let Ok(mut r) = TransportRepr::parse(&bytes) else { return Ok(()) };
            r.payload_len = r.payload_len.min(64);
            let encap = Encap::from_addrs(
                "10.0.0.1".parse().unwrap(),
                "10.0.0.2".parse().unwrap(),
                49152,
            ).unwrap();
            let (mut a, mut b) = (vec![fill; 300], vec![fill; 300]);
            let la = r.emit_in_place(&mut a, &encap);
            let lb = r.emit_in_place_unsealed(&mut b);
            prop_assert_eq!(&la, &lb);
            if let Ok(n) = lb {
                prop_assert_eq!(&b[n - 4..n], &[0u8; 4][..], "the ICRC slot is zero");
                icrc::seal(&encap, &mut b[..n]).unwrap();
                prop_assert_eq!(&a[..n], &b[..n]);
            }
        }

        /// Emitting around a payload writes the walk's bytes, for every
        /// parsed representation, with any header fields dropped or added
        /// (the private function is reached without the caller's check) and
        /// over any old buffer contents.
        #[test]
        fn emit_around_payload_is_the_walk(
            bytes in datagram(),
            drop_mask: u16,
            fill: u8,
        ) {
            let Ok(mut r) = TransportRepr::parse(&bytes) else { return Ok(()) };
            if drop_mask & 1 != 0 { r.reth = None; }
            if drop_mask & 2 != 0 { r.aeth = None; }
            if drop_mask & 4 != 0 { r.immdt = Some(immdt::Repr { imm: 7 }); }
            if drop_mask & 8 != 0 { r.deth = None; }
            let (mut a, mut b) = (vec![fill; 200], vec![fill; 200]);
            let ea = r.emit_around_payload(&mut a);
            let eb = r.emit_around_payload_by_walk(&mut b);
            prop_assert_eq!(ea, eb);
            prop_assert_eq!(a, b);
        }
    }
}

//! Runs: several packets of one message as one datagram, to a peer that
//! takes them (spec/same-host.md §1 "Runs", §4 lever 1).
//!
//! A same-host ring carries a datagram of any length from this engine's
//! buffer to the peer's engine. When the driver asks for it
//! (`Engine::poll_transmit_run`), a QP sending a plain RDMA WRITE or SEND,
//! or a READ response (RC), to a peer reached intact (crate::intact) builds
//! the message's next packets into one datagram, and the peer's engine
//! takes them apart again (`Engine::handle_local_run`): one engine turn on
//! each side for up to a ring record's worth of packets instead of one per
//! packet. Every packet keeps its standard PSN, opcode, headers and
//! payload; the requester and the responder handle each exactly as if it
//! had come alone, so the protocol (ACKs, NAKs, retransmission,
//! completions, key checks) is the same.
//!
//! **The run datagram.** The first packet's headers (BTH, RETH on a
//! WRITE_FIRST, XRCETH for XRC, AETH on a READ response FIRST); the AckReq
//! and SE bits of its BTH are the last packet's (no packet before the last
//! carries either); then every packet's payload, one after the other; the
//! pad of the total; and a zero ICRC (the datagram is never sealed: only a
//! peer reached intact gets it). Beside it, out of band, [`Segments`]: the
//! payload size of every packet but the last (the path MTU) and the last
//! packet's opcode. Packet `i` of `k` is the first one's headers with
//! - the opcode: the first's for `i = 0`, [`Segments::last`] for `i = k − 1`,
//!   the message kind's MIDDLE between;
//! - the PSN plus `i`; the RETH on packet 0 only; a READ response's AETH
//!   on packet 0 if it is the FIRST and on the LAST (the same: the
//!   responder builds the run in one turn, its MSN cannot change between);
//! - AckReq and SE only on packet `k − 1`;
//! - `mss` bytes of payload (the last: what is left, 1 ..= `mss`).
//!
//! **What may run.** The requester starts a run only with a packet that is
//! not a retransmission, not its message's last and asks for no ACK, of a
//! WQE that is a plain RDMA WRITE or SEND (no immediate, no invalidation:
//! its LAST carries no ImmDt or IETH), and goes on while the next packet
//! may go (the window), fits the buffer, and the one before it neither
//! ended the message nor asked for an ACK. The responder runs the packets
//! of one READ response (new or repeated for a duplicate request), from
//! any packet but the last, while they fit; one that began at a MIDDLE
//! stops before the LAST (whose AETH it could not name). A receiver checks
//! all of it again ([`Run::new`]): a run that breaks a rule is dropped
//! whole, as a malformed datagram.
//!
//! Promise: no function here panics on any input.

use wire::opcode::{Operation, Position, Transport};
use wire::{HeaderSet, Opcode, TransportRepr};

/// What a run datagram says beyond its first packet's headers. Carried
/// beside the datagram (a same-host ring's record), never on a wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segments {
    /// Payload bytes of every packet but the last: the path MTU.
    pub mss: u16,
    /// The last packet's opcode.
    pub last: Opcode,
}

impl Segments {
    /// As three bytes (the path MTU little-endian, then the opcode), for a
    /// driver that carries them as they are.
    pub fn to_tag(self) -> [u8; 3] {
        let m = self.mss.to_le_bytes();
        [m[0], m[1], self.last.get()]
    }

    /// Back from [`Segments::to_tag`]; `None` when the opcode byte is none.
    pub fn from_tag(tag: [u8; 3]) -> Option<Segments> {
        Some(Segments {
            mss: u16::from_le_bytes([tag[0], tag[1]]),
            last: Opcode::new(tag[2]).ok()?,
        })
    }
}

/// Why a run datagram is not taken (a silent drop, counted as malformed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// The first packet's opcode cannot begin a run.
    #[error("{0} cannot begin a run (a plain RC, UC or XRC SEND or WRITE, or an RC or XRC READ response, FIRST or MIDDLE)")]
    First(Opcode),
    /// The last packet's opcode does not continue the first's message.
    #[error("{last} cannot end a run that begins with {first}")]
    Last {
        /// The first packet's opcode.
        first: Opcode,
        /// The last packet's opcode.
        last: Opcode,
    },
    /// The packet size is not a path MTU.
    #[error("a run's packet size {0} is not a path MTU (256, 512, 1024, 2048 or 4096)")]
    Mss(u16),
    /// The payload does not make two or more packets with a last one that
    /// fits its opcode.
    #[error("{len} payload bytes are not a run of {mss}-byte packets ending with {last}")]
    Length {
        /// Payload bytes.
        len: usize,
        /// The packet size.
        mss: u16,
        /// The last packet's opcode.
        last: Opcode,
    },
}

/// A run datagram taken apart: its packets, one by one.
#[derive(Debug, Clone, Copy)]
pub struct Run<'a> {
    first: &'a TransportRepr,
    body: &'a [u8],
    mss: usize,
    last: Opcode,
    middle: Opcode,
    count: usize,
}

impl<'a> Run<'a> {
    /// The run whose first packet's headers are `first` and whose payload
    /// is `body` (all packets'), as [`Segments`] describe it; checked
    /// against every rule of the module doc.
    pub fn new(
        first: &'a TransportRepr,
        body: &'a [u8],
        segs: Segments,
    ) -> Result<Run<'a>, RunError> {
        let op = first.opcode();
        let kind = match op.operation() {
            Operation::Send => wire::opcode::MessageKind::Send,
            Operation::Write => wire::opcode::MessageKind::Write,
            Operation::ReadResponse => wire::opcode::MessageKind::ReadResponse,
            _ => return Err(RunError::First(op)),
        };
        let transport = op.transport();
        let extra = first.deth.is_some()
            || first.immdt.is_some()
            || first.ieth.is_some()
            || first.aeth.is_some() != op.headers().contains(HeaderSet::AETH)
            || first.atomic_eth.is_some()
            || first.atomic_ack_eth.is_some()
            || first.feth.is_some()
            || first.rdeth.is_some()
            || first.reth.is_some() != op.headers().contains(HeaderSet::RETH)
            || first.xrceth.is_some() != op.headers().contains(HeaderSet::XRCETH);
        if !matches!(transport, Transport::Rc | Transport::Uc | Transport::Xrc)
            || !matches!(op.position(), Position::First | Position::Middle)
            || extra
        {
            return Err(RunError::First(op));
        }
        let (Some(middle), last) = (
            Opcode::segment(transport, kind, Position::Middle),
            segs.last,
        ) else {
            return Err(RunError::First(op));
        };
        let ends = Opcode::segment(transport, kind, Position::Last);
        // A READ response's LAST carries the AETH of its FIRST: a run
        // that ends the response begins it too.
        let aeth_known = kind != wire::opcode::MessageKind::ReadResponse || op.is_first();
        if last != middle && (Some(last) != ends || !aeth_known) {
            return Err(RunError::Last { first: op, last });
        }
        if !matches!(segs.mss, 256 | 512 | 1024 | 2048 | 4096) {
            return Err(RunError::Mss(segs.mss));
        }
        let mss = usize::from(segs.mss);
        let count = body.len().div_ceil(mss);
        let tail = body.len().saturating_sub((count.max(1) - 1) * mss);
        // A MIDDLE is a whole packet; a LAST carries 1 ..= mss bytes.
        let tail_ok = if last == middle {
            tail == mss
        } else {
            tail >= 1
        };
        if count < 2 || !tail_ok {
            return Err(RunError::Length {
                len: body.len(),
                mss: segs.mss,
                last,
            });
        }
        Ok(Run {
            first,
            body,
            mss,
            last,
            middle,
            count,
        })
    }

    /// How many packets the run holds (2 or more).
    pub fn len(&self) -> usize {
        self.count
    }

    /// Always false: a run holds two packets or more.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Packet `i` (`< len()`): its headers written into `out`, its payload
    /// returned.
    pub fn packet(&self, i: usize, out: &mut TransportRepr) -> &'a [u8] {
        let end = self.count - 1;
        let i = i.min(end);
        *out = *self.first;
        let b = &mut out.bth;
        b.opcode = match i {
            0 => self.first.opcode(),
            _ if i == end => self.last,
            _ => self.middle,
        };
        b.psn = self.first.bth.psn.wrapping_add(i as u32);
        b.ack_req &= i == end;
        b.solicited &= i == end;
        if i > 0 {
            out.reth = None;
            // A READ response's AETH: on its FIRST and, the same, its LAST.
            if !out.opcode().headers().contains(HeaderSet::AETH) {
                out.aeth = None;
            }
        }
        let from = i * self.mss;
        let payload = &self.body[from..(from + self.mss).min(self.body.len())];
        out.payload_len = payload.len();
        out.bth.pad_count = wire::opcode::pad_len(payload.len());
        payload
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::{bth, reth, Psn, Qpn, Rkey};

    fn op(code: u8) -> Opcode {
        Opcode::new(code).unwrap()
    }

    fn first(code: u8, ack_req: bool) -> TransportRepr {
        let mut b = bth::Repr::new(
            op(code),
            Qpn::from_masked(0x11),
            Psn::from_masked(0xff_fffe),
        );
        b.ack_req = ack_req;
        let mut r = TransportRepr::new(b);
        if code == 0x06 {
            r.reth = Some(reth::Repr {
                va: 0x1000,
                rkey: Rkey(7),
                dma_len: 10_000,
            });
        }
        r
    }

    #[test]
    fn a_write_run_comes_apart_packet_by_packet() {
        // WRITE_FIRST + 2 packets, ending the message with WRITE_LAST
        // (0x08): the PSN wraps, the RETH and AckReq are where they belong.
        let r = first(0x06, true);
        let body: Vec<u8> = (0..2 * 1024 + 5).map(|i| i as u8).collect();
        let segs = Segments {
            mss: 1024,
            last: op(0x08),
        };
        assert_eq!(Segments::from_tag(segs.to_tag()), Some(segs));
        let run = Run::new(&r, &body, segs).unwrap();
        assert_eq!(run.len(), 3);
        let mut p = TransportRepr::new(r.bth);
        let mut got = Vec::new();
        for i in 0..run.len() {
            let pay = run.packet(i, &mut p);
            got.extend_from_slice(pay);
            assert_eq!(
                p.bth.psn,
                Psn::from_masked(0xff_fffe).wrapping_add(i as u32)
            );
            assert_eq!(p.reth.is_some(), i == 0);
            assert_eq!(p.bth.ack_req, i == 2);
            assert_eq!(p.opcode().get(), [0x06, 0x07, 0x08][i]);
            assert_eq!(p.payload_len, [1024, 1024, 5][i]);
            assert_eq!(p.bth.pad_count, [0, 0, 3][i]);
        }
        assert_eq!(got, body);
    }

    #[test]
    fn runs_that_break_a_rule_are_refused() {
        let body = vec![0u8; 2048];
        let segs = |mss, last| Segments {
            mss,
            last: op(last),
        };
        // A SEND_ONLY, a READ request, a WRITE_LAST and a UD SEND_ONLY
        // cannot begin one.
        for code in [0x04, 0x0C, 0x08, 0x64] {
            let r = first(code, false);
            assert!(matches!(
                Run::new(&r, &body, segs(1024, 0x02)),
                Err(RunError::First(_))
            ));
        }
        let r = first(0x00, false);
        assert!(
            Run::new(&r, &body, segs(1024, 0x01)).is_ok(),
            "SEND_FIRST, SEND_MIDDLE"
        );
        assert!(
            matches!(
                Run::new(&r, &body, segs(1024, 0x08)),
                Err(RunError::Last { .. })
            ),
            "a SEND does not end with WRITE_LAST"
        );
        assert!(
            matches!(
                Run::new(&r, &body, segs(1024, 0x03)),
                Err(RunError::Last { .. })
            ),
            "nor with SEND_LAST_WITH_IMM"
        );
        assert!(matches!(
            Run::new(&r, &body, segs(1000, 0x02)),
            Err(RunError::Mss(1000))
        ));
        assert!(
            matches!(
                Run::new(&r, &body[..1024], segs(1024, 0x02)),
                Err(RunError::Length { .. })
            ),
            "one packet is no run"
        );
        assert!(
            matches!(
                Run::new(&r, &body[..1500], segs(1024, 0x01)),
                Err(RunError::Length { .. })
            ),
            "a MIDDLE is whole"
        );
        assert!(Run::new(&r, &body[..1500], segs(1024, 0x02)).is_ok());
        assert!(matches!(
            Run::new(&r, &[], segs(1024, 0x02)),
            Err(RunError::Length { .. })
        ));
        let mut imm = first(0x00, false);
        imm.immdt = Some(wire::immdt::Repr { imm: 1 });
        assert!(matches!(
            Run::new(&imm, &body, segs(1024, 0x02)),
            Err(RunError::First(_))
        ));
    }

    #[test]
    fn a_read_response_run_carries_its_aeth_to_the_last_only_from_the_first() {
        let mut r = first(0x0D, false);
        r.aeth = Some(wire::aeth::Repr {
            syndrome: wire::aeth::Syndrome::ack_unlimited(),
            msn: wire::Msn::from_masked(4),
        });
        let body = vec![5u8; 3 * 1024];
        let segs = Segments {
            mss: 1024,
            last: op(0x0F),
        };
        let run = Run::new(&r, &body, segs).unwrap();
        let mut p = r;
        let aeth: Vec<_> = (0..3)
            .map(|i| {
                run.packet(i, &mut p);
                p.aeth
            })
            .collect();
        assert_eq!(aeth, [r.aeth, None, r.aeth]);
        // From a MIDDLE (no AETH) a run may not reach the LAST.
        let middle = first(0x0E, false);
        assert!(matches!(
            Run::new(&middle, &body, segs),
            Err(RunError::Last { .. })
        ));
        let segs = Segments {
            last: op(0x0E),
            ..segs
        };
        assert!(Run::new(&middle, &body, segs).is_ok());
        // A FIRST without its AETH is no READ response.
        assert!(matches!(
            Run::new(&first(0x0D, false), &body, segs),
            Err(RunError::First(_))
        ));
    }

    proptest::proptest! {
        /// Any input is taken or refused without a panic, and a taken run's
        /// packets give back its payload, in order, each within the MTU,
        /// with consecutive PSNs and the AckReq on the last only.
        #[test]
        fn any_run_comes_apart_or_is_refused(
            code in proptest::sample::select(vec![0x00u8, 0x01, 0x06, 0x07, 0x20, 0x21, 0x26, 0x27, 0xA0, 0xA1, 0xA6, 0xA7, 0x0D, 0x0E, 0x04, 0x08, 0x0C, 0x10, 0x64]),
            last in proptest::sample::select(vec![0x01u8, 0x02, 0x03, 0x07, 0x08, 0x09, 0x21, 0x22, 0x27, 0x28, 0xA1, 0xA2, 0xA7, 0xA8, 0x0E, 0x0F, 0x0C, 0x11]),
            mss_at in 0usize..6,
            any_mss in proptest::prelude::any::<u16>(),
            len in 0usize..20_000,
            ack_req in proptest::prelude::any::<bool>(),
        ) {
            let mss = [256, 512, 1024, 2048, 4096].get(mss_at).copied().unwrap_or(any_mss);
            let o = op(code);
            let mut b = bth::Repr::new(o, Qpn::from_masked(1), Psn::from_masked(0xff_fff0));
            b.ack_req = ack_req;
            let mut r = TransportRepr::new(b);
            if o.headers().contains(HeaderSet::RETH) {
                r.reth = Some(reth::Repr { va: 0, rkey: Rkey(1), dma_len: len as u32 });
            }
            if o.headers().contains(HeaderSet::AETH) {
                r.aeth = Some(wire::aeth::Repr {
                    syndrome: wire::aeth::Syndrome::ack_unlimited(),
                    msn: wire::Msn::from_masked(9),
                });
            }
            if o.headers().contains(HeaderSet::XRCETH) {
                r.xrceth = Some(wire::xrceth::Repr { xrc_srqn: wire::XrcSrqn::from_masked(3) });
            }
            let body: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            if let Ok(run) = Run::new(&r, &body, Segments { mss, last: op(last) }) {
                let mut p = r;
                let mut got = Vec::new();
                for i in 0..run.len() {
                    let pay = run.packet(i, &mut p);
                    proptest::prop_assert!(!pay.is_empty() && pay.len() <= usize::from(mss));
                    proptest::prop_assert_eq!(p.bth.psn, b.psn.wrapping_add(i as u32));
                    proptest::prop_assert_eq!(p.bth.ack_req, ack_req && i + 1 == run.len());
                    proptest::prop_assert_eq!(p.opcode().transport(), o.transport());
                    proptest::prop_assert_eq!(p.aeth.is_some(), p.opcode().headers().contains(HeaderSet::AETH));
                    proptest::prop_assert_eq!(p.aeth, p.aeth.and(r.aeth), "a run's AETH is its first's");
                    got.extend_from_slice(pay);
                }
                proptest::prop_assert_eq!(p.opcode().get(), last);
                proptest::prop_assert_eq!(got, body);
            }
        }
    }
}

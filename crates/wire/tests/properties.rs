//! Property tests: `parse(emit(x)) == x` for every opcode with random field
//! values, no panics on arbitrary or mutated bytes, ICRC ID recovery for random
//! IDs, and `Psn` against an i64 model across the 2^24 wrap.

use proptest::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr};

use wire::aeth::{NakCode, Syndrome};
use wire::opcode::TABLE;
use wire::*;

fn any_opcode() -> impl Strategy<Value = Opcode> {
    (0..TABLE.len()).prop_map(|i| Opcode::new(TABLE[i].code).unwrap())
}

fn syndrome() -> impl Strategy<Value = Syndrome> {
    prop_oneof![
        (0u8..32).prop_map(|c| Syndrome::Ack { credit_code: c }),
        (0u8..32).prop_map(|t| Syndrome::RnrNak { timer_code: t }),
        (0u8..5).prop_map(|c| Syndrome::Nak(match c {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            _ => NakCode::InvalidRdRequest,
        })),
    ]
}

fn bth_for(op: Opcode) -> impl Strategy<Value = bth::Repr> {
    (
        any::<[bool; 5]>(),
        any::<u16>(),
        0u32..1 << 24,
        0u32..1 << 24,
    )
        .prop_map(move |(f, pkey, qpn, psn)| bth::Repr {
            opcode: op,
            solicited: f[0],
            mig_req: f[1],
            pad_count: 0,
            pkey: PKey(pkey),
            fecn: f[2],
            becn: f[3],
            dest_qp: Qpn::new(qpn).unwrap(),
            ack_req: f[4],
            psn: Psn::new(psn).unwrap(),
        })
}

/// Random values for every header, of which the opcode keeps the ones it carries.
#[derive(Debug, Clone)]
struct Fields {
    u64s: [u64; 4],
    u32s: [u32; 6],
    syndrome: Syndrome,
    small: (u8, u8),
}

fn fields() -> impl Strategy<Value = Fields> {
    (
        any::<[u64; 4]>(),
        any::<[u32; 6]>(),
        syndrome(),
        (0u8..4, 0u8..16),
    )
        .prop_map(|(u64s, u32s, syndrome, small)| Fields {
            u64s,
            u32s,
            syndrome,
            small,
        })
}

fn payload_for(op: Opcode) -> BoxedStrategy<Vec<u8>> {
    match op.payload_rule() {
        PayloadRule::None => Just(Vec::new()).boxed(),
        PayloadRule::Exactly(n) => proptest::collection::vec(any::<u8>(), n).boxed(),
        PayloadRule::Any => proptest::collection::vec(any::<u8>(), 0..300).boxed(),
    }
}

fn build(bth: bth::Repr, f: &Fields, payload_len: usize) -> TransportRepr {
    let h = bth.opcode.headers();
    let pick = |set: HeaderSet| h.contains(set);
    let m24 = |v: u32| v & 0xFF_FFFF;
    let mut r = TransportRepr::new(bth::Repr {
        pad_count: pad_len(payload_len),
        ..bth
    });
    r.payload_len = payload_len;
    r.rdeth = pick(HeaderSet::RDETH).then(|| rdeth::Repr {
        eecn: Eecn::from_masked(f.u32s[0]),
    });
    r.deth = pick(HeaderSet::DETH).then(|| deth::Repr {
        qkey: Qkey(f.u32s[1]),
        src_qp: Qpn::from_masked(f.u32s[2]),
    });
    r.xrceth = pick(HeaderSet::XRCETH).then(|| xrceth::Repr {
        xrc_srqn: XrcSrqn::new(m24(f.u32s[3])).unwrap(),
    });
    r.feth = pick(HeaderSet::FETH).then_some(feth::Repr {
        selectivity: f.small.0,
        placement: f.small.1,
    });
    r.reth = pick(HeaderSet::RETH).then(|| reth::Repr {
        va: f.u64s[0],
        rkey: Rkey(f.u32s[4]),
        dma_len: f.u32s[5],
    });
    r.atomic_eth = pick(HeaderSet::ATOMIC_ETH).then(|| atomic_eth::Repr {
        va: f.u64s[1],
        rkey: Rkey(f.u32s[4]),
        swap_add: f.u64s[2],
        compare: f.u64s[3],
    });
    r.immdt = pick(HeaderSet::IMMDT).then(|| immdt::Repr { imm: f.u32s[5] });
    r.ieth = pick(HeaderSet::IETH).then(|| ieth::Repr {
        rkey: Rkey(f.u32s[0]),
    });
    r.aeth = pick(HeaderSet::AETH).then(|| aeth::Repr {
        syndrome: f.syndrome,
        msn: Msn::from_masked(f.u32s[1]),
    });
    r.atomic_ack_eth =
        pick(HeaderSet::ATOMIC_ACK_ETH).then(|| atomic_ack_eth::Repr { orig: f.u64s[0] });
    r
}

fn packet() -> impl Strategy<Value = (TransportRepr, Vec<u8>)> {
    any_opcode()
        .prop_flat_map(|op| (bth_for(op), fields(), payload_for(op)))
        .prop_map(|(bth, f, payload)| (build(bth, &f, payload.len()), payload))
}

fn encap() -> impl Strategy<Value = Encap> {
    prop_oneof![
        (
            any::<[u8; 4]>(),
            any::<[u8; 4]>(),
            any::<u16>(),
            any::<u16>(),
            any::<u8>(),
            any::<u8>()
        )
            .prop_map(|(s, d, sport, id, tos, ttl)| {
                let mut e = Encap::ipv4(Ipv4Addr::from(s), Ipv4Addr::from(d), sport);
                if let IpInfo::V4(v4) = &mut e.ip {
                    (v4.id, v4.tos, v4.ttl) = (id, tos, ttl);
                }
                e
            }),
        (
            any::<[u8; 16]>(),
            any::<[u8; 16]>(),
            any::<u16>(),
            any::<u8>(),
            0u32..1 << 20
        )
            .prop_map(|(s, d, sport, tc, fl)| {
                let mut e = Encap::ipv6(Ipv6Addr::from(s), Ipv6Addr::from(d), sport);
                if let IpInfo::V6(v6) = &mut e.ip {
                    (v6.traffic_class, v6.flow_label) = (tc, fl);
                }
                e
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn parse_emit_round_trip((repr, payload) in packet(), encap in encap()) {
        let mut buf = vec![0xA5u8; repr.buffer_len() + 7];
        let n = repr.emit(&mut buf, &payload, &encap).unwrap();
        prop_assert_eq!(n, repr.buffer_len());
        let wire = &buf[..n];
        let parsed = TransportRepr::parse(wire).unwrap();
        prop_assert_eq!(parsed, repr);
        prop_assert_eq!(parsed.payload(wire), &payload[..]);
        prop_assert!(icrc::verify(&encap, wire).is_ok());
        // Through a frame and back.
        let mut frame = vec![0u8; encap.frame_len(n)];
        encap.emit_frame(wire, &mut frame).unwrap();
        let (e2, t2) = encap::parse_frame(&frame).unwrap();
        prop_assert_eq!(e2, encap);
        prop_assert_eq!(t2, wire);
    }

    /// Emitting around a payload the caller wrote in place (over a buffer
    /// full of junk) gives the same bytes as emitting with a payload slice.
    #[test]
    fn emit_in_place_equals_emit((repr, payload) in packet(), encap in encap(), junk in any::<u8>()) {
        let mut want = vec![0u8; repr.buffer_len()];
        repr.emit(&mut want, &payload, &encap).unwrap();
        let mut buf = vec![junk; repr.buffer_len() + 9];
        let at = repr.header_len();
        buf[at..at + payload.len()].copy_from_slice(&payload);
        let n = repr.emit_in_place(&mut buf, &encap).unwrap();
        prop_assert_eq!(&buf[..n], &want[..]);
        let mut short = vec![junk; repr.buffer_len() - 1];
        let is_small = matches!(repr.emit_in_place(&mut short, &encap), Err(Error::BufferTooSmall { .. }));
        prop_assert!(is_small);
    }

    #[test]
    fn ipv4_id_recovered_for_random_ids((repr, payload) in packet(), encap in encap()) {
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut buf, &payload, &encap).unwrap();
        let (src, dst, id) = match encap.ip {
            IpInfo::V4(v4) => (v4.src.into(), v4.dst.into(), Some(v4.id)),
            IpInfo::V6(v6) => (v6.src.into(), v6.dst.into(), None),
        };
        let ep = icrc::Endpoints { src, dst, src_port: encap.src_port, dst_port: encap.dst_port };
        prop_assert_eq!(icrc::verify_received(&ep, &buf).unwrap(), id);
    }

    #[test]
    fn emit_rejects_wrong_headers_without_panicking((repr, payload) in packet(), extra in any::<u32>()) {
        let mut wrong = repr;
        if wrong.immdt.is_some() { wrong.immdt = None } else { wrong.immdt = Some(immdt::Repr { imm: extra }) }
        let mut buf = vec![0u8; 512];
        let is_mismatch = matches!(wrong.emit_unsealed(&mut buf, &payload), Err(Error::HeaderMismatch { .. }));
        prop_assert!(is_mismatch);
        let mut short = vec![0u8; repr.buffer_len() - 1];
        let is_small = matches!(repr.emit_unsealed(&mut short, &payload), Err(Error::BufferTooSmall { .. }));
        prop_assert!(is_small);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = TransportRepr::parse(&bytes);
        let _ = encap::parse_frame(&bytes);
        let _ = encap::parse_ip(&bytes);
        let _ = pcap::PcapReader::new(&bytes).map(std::iter::Iterator::count);
        let _ = bth::Repr::parse(&bth::Packet::new_unchecked(&bytes));
        let _ = aeth::Repr::parse(&aeth::Packet::new_unchecked(&bytes));
        let _ = atomic_eth::Repr::parse(&atomic_eth::Packet::new_unchecked(&bytes));
        let _ = reth::Repr::parse(&reth::Packet::new_unchecked(&bytes));
        let e = Encap::ipv4(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, 1);
        let _ = icrc::verify(&e, &bytes);
    }

    #[test]
    fn valid_opcode_with_random_tail_never_panics(op in any_opcode(), tail in proptest::collection::vec(any::<u8>(), 0..120)) {
        let mut bytes = vec![op.get(), 0, 0xff, 0xff];
        bytes.extend_from_slice(&tail);
        if let Ok(r) = TransportRepr::parse(&bytes) {
            // Whatever parses re-emits to the same length and the same fields.
            let mut out = vec![0u8; r.buffer_len()];
            r.emit_unsealed(&mut out, r.payload(&bytes)).unwrap();
            prop_assert_eq!(TransportRepr::parse(&out).unwrap(), r);
        }
    }

    #[test]
    fn mutated_packets_never_panic((repr, payload) in packet(), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6), cut in any::<usize>()) {
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit_unsealed(&mut buf, &payload).unwrap();
        for (at, x) in flips {
            let n = buf.len();
            buf[at % n] ^= x;
        }
        let cut = cut % (buf.len() + 1);
        let _ = TransportRepr::parse(&buf[..cut]);
        let _ = TransportRepr::parse(&buf);
    }
}

// ---- Psn against an i64 model across the 2^24 wrap (§9) ----

const M: i64 = 1 << 24;

fn model_distance(a: i64, b: i64) -> i64 {
    let r = (a - b).rem_euclid(M);
    if r >= M / 2 {
        r - M
    } else {
        r
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5000))]

    #[test]
    fn psn_add_sub(a in 0i64..M, n in 0i64..(1 << 32)) {
        let p = Psn::new(a as u32).unwrap();
        prop_assert_eq!(i64::from((p + n as u32).get()), (a + n).rem_euclid(M));
        prop_assert_eq!(i64::from((p - n as u32).get()), (a - n).rem_euclid(M));
        prop_assert_eq!(i64::from(p.next().get()), (a + 1) % M);
    }

    #[test]
    fn psn_serial_comparison(a in 0i64..M, b in 0i64..M) {
        let (pa, pb) = (Psn::new(a as u32).unwrap(), Psn::new(b as u32).unwrap());
        let d = model_distance(a, b);
        prop_assert_eq!(i64::from(pa.distance(pb)), d);
        prop_assert_eq!(pa.is_after(pb), d > 0);
        prop_assert_eq!(pa.is_before(pb), d < 0);
        let region = match d { 0 => PsnRegion::InSequence, d if d < 0 => PsnRegion::Duplicate, _ => PsnRegion::OutOfSequence };
        prop_assert_eq!(pa.region(pb), region);
        prop_assert_eq!(i64::from(pa.offset_from(pb)), (a - b).rem_euclid(M));
    }

    #[test]
    fn psn_near_the_wrap(a in (M - 300)..M, k in 0i64..600) {
        // a + k crosses 2^24 for large k; serial order must still say "after".
        let pa = Psn::new(a as u32).unwrap();
        let pk = pa + k as u32;
        prop_assert_eq!(i64::from(pk.distance(pa)), k);
        prop_assert_eq!(pk.is_after(pa), k > 0);
        prop_assert!(pk.in_window(pa, k as u32 + 1));
        prop_assert!(!pk.in_window(pa, k as u32));
    }

    #[test]
    fn psn_window(x in 0i64..M, start in 0i64..M, len in 0i64..(M + 5)) {
        let (px, ps) = (Psn::new(x as u32).unwrap(), Psn::new(start as u32).unwrap());
        let model = len >= M || (x - start).rem_euclid(M) < len;
        prop_assert_eq!(px.in_window(ps, len as u32), model);
    }
}

#[test]
fn psn_exhaustive_distance_from_zero_and_max() {
    // Every PSN against both ends of the space: the whole 2^24 range.
    for v in 0..M {
        let p = Psn::new(v as u32).unwrap();
        assert_eq!(i64::from(p.distance(Psn::ZERO)), model_distance(v, 0));
        assert_eq!(i64::from(p.distance(Psn::MAX)), model_distance(v, M - 1));
    }
}

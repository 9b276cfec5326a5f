//! ICRC known-answer tests: the three worked vectors of roce-wire.md §8.2.

mod common;

use common::hex;
use wire::icrc::{self, Endpoints};
use wire::{Encap, IpInfo, Opcode, TransportRepr};

/// Builds the Encap and UDP payload from the hex of an IP header, a UDP header
/// and the transport bytes, by parsing them as an IP packet.
fn packet(ip_udp_and_transport: &str) -> (Encap, Vec<u8>) {
    let bytes = hex(ip_udp_and_transport);
    let (encap, transport) = wire::encap::parse_ip(&bytes).expect("vector parses");
    (encap, transport.to_vec())
}

#[test]
fn vector1_connectx4_cnp() {
    // §8.2 vector 1: real ConnectX-4 Lx CNP capture, published in scapy's
    // test/contrib/roce.uts. ICRC on the wire 82 fd 00 2a = 0x2A00FD82.
    let (encap, t) = packet(
        "45 c2 00 3c 71 8c 40 00 40 11 91 61 0a 00 11 01 0a 00 12 01
         00 00 12 b7 00 28 00 00
         81 00 ff ff 40 00 01 18 00 00 00 00
         00000000000000000000000000000000
         82 fd 00 2a",
    );
    assert_eq!(icrc::compute(&encap, &t).unwrap(), 0x2A00_FD82);
    icrc::verify(&encap, &t).unwrap();
    let repr = TransportRepr::parse(&t).unwrap();
    assert_eq!(
        (repr.opcode(), repr.bth.becn, repr.payload_len),
        (Opcode::CNP, true, 0)
    );
}

#[test]
fn vector2_uc_send_only_ipv4() {
    // §8.2 vector 2: scapy unit test (roce.uts), UC SEND_ONLY, M=1, PadCnt 2,
    // non-zero UDP checksum. ICRC on the wire 78 f3 53 f3 = 0xF353F378.
    let (encap, t) = packet(
        "45 01 00 40 04 78 40 00 40 11 b4 d5 c0 a8 00 07 c0 a8 00 07
         c0 00 12 b7 00 2c ac a2
         24 60 ff ff 00 00 00 d3 00 cf 17 10
         46 30 81 8b e2 89 35 d9 0e 9a 95 50 54 01 be 88 5e 50
         00 00
         78 f3 53 f3",
    );
    assert_eq!(icrc::compute(&encap, &t).unwrap(), 0xF353_F378);
    let repr = TransportRepr::parse(&t).unwrap();
    assert_eq!(
        (
            repr.opcode(),
            repr.bth.mig_req,
            repr.bth.pad_count,
            repr.payload_len
        ),
        (Opcode::UC_SEND_ONLY, true, 2, 18)
    );
    // Receiving without the IP header recovers ID 0x0478 (DF set in this vector).
    let ep = Endpoints {
        src: [192, 168, 0, 7].into(),
        dst: [192, 168, 0, 7].into(),
        src_port: 0xc000,
        dst_port: 4791,
    };
    assert_eq!(icrc::verify_received(&ep, &t).unwrap(), Some(0x0478));
}

#[test]
fn vector3_rc_send_only_ipv6() {
    // §8.2 vector 3: computed by the spec's author from §8.1 and cross-checked
    // against scapy (not a hardware capture). ICRC on the wire fe 4c 28 91.
    let (encap, t) = packet(
        "66 81 23 45 00 20 11 40
         fd00 0000 0000 0000 0000 0000 0000 0001 fd00 0000 0000 0000 0000 0000 0000 0002
         c1 23 12 b7 00 20 00 00
         04 30 ff ff 00 00 00 12 80 00 01 00
         68 65 6c 6c 6f 00 00 00
         fe 4c 28 91",
    );
    let IpInfo::V6(v6) = encap.ip else {
        panic!("IPv6 expected")
    };
    assert_eq!(
        (v6.traffic_class, v6.flow_label, v6.hop_limit),
        (0x68, 0x12345, 64)
    );
    assert_eq!(icrc::compute(&encap, &t).unwrap(), 0x9128_4CFE);
    let repr = TransportRepr::parse(&t).unwrap();
    assert_eq!(repr.payload(&t), b"hello");
    // Masked fields do not matter: a different TC/flow label/hop limit gives the same ICRC.
    let ep = Endpoints {
        src: v6.src.into(),
        dst: v6.dst.into(),
        src_port: 0xc123,
        dst_port: 4791,
    };
    assert_eq!(icrc::verify_received(&ep, &t).unwrap(), None);
}

#[test]
fn every_masked_field_is_masked_and_every_covered_field_is_covered() {
    let (encap, t) = packet(
        "45 01 00 40 04 78 40 00 40 11 b4 d5 c0 a8 00 07 c0 a8 00 07
         c0 00 12 b7 00 2c ac a2
         24 60 ff ff 00 00 00 d3 00 cf 17 10
         46 30 81 8b e2 89 35 d9 0e 9a 95 50 54 01 be 88 5e 50 00 00 78 f3 53 f3",
    );
    let IpInfo::V4(v4) = encap.ip else { panic!() };
    // Masked (§8.1 step 2): TOS, TTL, UDP checksum, BTH byte 4.
    let masked = [
        Encap {
            ip: IpInfo::V4(wire::Ipv4Info { tos: 0xfe, ..v4 }),
            ..encap
        },
        Encap {
            ip: IpInfo::V4(wire::Ipv4Info { ttl: 1, ..v4 }),
            ..encap
        },
        Encap {
            udp_checksum: 0,
            ..encap
        },
    ];
    for e in masked {
        icrc::verify(&e, &t).unwrap();
    }
    let mut becn = t.clone();
    becn[4] = 0x40;
    icrc::verify(&encap, &becn).unwrap();
    // Covered: ID, flags, source port, BTH Resv7.
    let covered = [
        Encap {
            ip: IpInfo::V4(wire::Ipv4Info { id: 0x0479, ..v4 }),
            ..encap
        },
        Encap {
            ip: IpInfo::V4(wire::Ipv4Info {
                flags_frag: 0,
                ..v4
            }),
            ..encap
        },
        Encap {
            src_port: 0xc001,
            ..encap
        },
    ];
    for e in covered {
        assert!(icrc::verify(&e, &t).is_err());
    }
    let mut resv7 = t.clone();
    resv7[8] |= 1;
    assert!(icrc::verify(&encap, &resv7).is_err());
}

//! Every packet of the Linux rxe captures (tests/data, from shared/testdata/rxe)
//! as a test vector for the frame parser, the transport parser, the emitter and
//! the ICRC (roce-wire.md §8.5: all 180 packets match the §8.1 algorithm).

mod common;

use common::{load, load_all, CAPTURES};
use wire::aeth::{NakCode, Syndrome};
use wire::icrc::{self, Endpoints};
use wire::{IpInfo, Opcode, TransportRepr, ROCE_UDP_PORT};

#[test]
fn every_capture_has_the_documented_frame_count() {
    for (file, frames) in CAPTURES {
        assert_eq!(load(file).len(), frames, "{file}");
    }
    assert_eq!(load_all().len(), 180);
}

#[test]
fn every_packet_parses_and_re_emits_byte_for_byte() {
    for p in load_all() {
        let repr = TransportRepr::parse(&p.transport)
            .unwrap_or_else(|e| panic!("{} #{}: {e}", p.file, p.frame));
        assert_eq!(repr.buffer_len(), p.transport.len());
        let mut out = vec![0u8; repr.buffer_len()];
        let payload = repr.payload(&p.transport);
        repr.emit(&mut out, payload, &p.encap).unwrap();
        assert_eq!(out, p.transport, "{} #{} {repr}", p.file, p.frame);
    }
}

#[test]
fn every_packet_icrc_matches() {
    for p in load_all() {
        icrc::verify(&p.encap, &p.transport)
            .unwrap_or_else(|e| panic!("{} #{}: {e}", p.file, p.frame));
        assert_eq!(p.encap.dst_port, ROCE_UDP_PORT);
    }
}

#[test]
fn ipv4_id_is_recovered_from_the_icrc_alone() {
    // §8.5: solving for the 16 ID bits recovers the true ID of every rxe packet.
    let mut v4 = 0;
    for p in load_all() {
        let (src, dst, id) = match p.encap.ip {
            IpInfo::V4(ip) => (ip.src.into(), ip.dst.into(), Some(ip.id)),
            IpInfo::V6(ip) => (ip.src.into(), ip.dst.into(), None),
        };
        let ep = Endpoints {
            src,
            dst,
            src_port: p.encap.src_port,
            dst_port: p.encap.dst_port,
        };
        let got = icrc::verify_received(&ep, &p.transport).unwrap();
        assert_eq!(got, id, "{} #{}", p.file, p.frame);
        v4 += usize::from(id.is_some());
        // A corrupted payload byte is caught (with probability 1 − 2^-16; these are fixed bytes).
        let mut bad = p.transport.clone();
        bad[12] ^= 0x01;
        assert_ne!(
            icrc::verify_received(&ep, &bad).ok(),
            Some(id),
            "{} #{}",
            p.file,
            p.frame
        );
    }
    assert_eq!(v4, 166);
}

fn repr_of(file: &'static str, frame: usize) -> (TransportRepr, Vec<u8>) {
    let p = load(file).into_iter().nth(frame - 1).unwrap();
    (TransportRepr::parse(&p.transport).unwrap(), p.transport)
}

#[test]
fn decoded_fields_match_the_readme_tables() {
    // rc_send.pcap #11: RC_SEND_LAST 0x000013 0x14b377 A=1 pad 3 payload 953.
    let (r, _) = repr_of("rc_send.pcap", 11);
    assert_eq!(
        (r.opcode(), r.bth.dest_qp.get(), r.bth.psn.get()),
        (Opcode::RC_SEND_LAST, 0x13, 0x14b377)
    );
    assert_eq!(
        (r.bth.ack_req, r.bth.pad_count, r.payload_len),
        (true, 3, 953)
    );
    // rc_imm.pcap #1: SEND_ONLY_WITH_IMMEDIATE, SE=1, PSN 0xfffffd, ImmDt 0x11223344.
    let (r, _) = repr_of("rc_imm.pcap", 1);
    assert_eq!(
        (r.opcode(), r.bth.solicited, r.bth.psn.get()),
        (Opcode::RC_SEND_ONLY_WITH_IMMEDIATE, true, 0xfffffd)
    );
    assert_eq!(r.immdt.unwrap().imm, 0x1122_3344);
    // uc_write.pcap #1: RETH va=0x55be60c39000 rkey=0x1043 len=3000.
    let (r, _) = repr_of("uc_write.pcap", 1);
    let reth = r.reth.unwrap();
    assert_eq!(
        (reth.va, reth.rkey.get(), reth.dma_len),
        (0x55be_60c3_9000, 0x1043, 3000)
    );
    // rc_atomic.pcap #2: ATOMIC_ACKNOWLEDGE MSN=1 orig=0x20f77e249172e6e0.
    let (r, _) = repr_of("rc_atomic.pcap", 2);
    assert_eq!(r.aeth.unwrap().msn.get(), 1);
    assert_eq!(r.atomic_ack_eth.unwrap().orig, 0x20f7_7e24_9172_e6e0);
    // rc_atomic.pcap #1: COMPARE_SWAP va=0x561a415ac000 rkey=0xaa0.
    let (r, _) = repr_of("rc_atomic.pcap", 1);
    let a = r.atomic_eth.unwrap();
    assert_eq!(
        (r.opcode(), a.va, a.rkey.get()),
        (Opcode::RC_COMPARE_SWAP, 0x561a_415a_c000, 0xaa0)
    );
    // rc_rnr_nak.pcap #2: RNR NAK 0x3c; rc_nak_access.pcap #2: NAK remote access.
    let (r, _) = repr_of("rc_rnr_nak.pcap", 2);
    assert_eq!(
        r.aeth.unwrap().syndrome,
        Syndrome::RnrNak { timer_code: 28 }
    );
    let (r, _) = repr_of("rc_nak_access.pcap", 2);
    assert_eq!(
        r.aeth.unwrap().syndrome,
        Syndrome::Nak(NakCode::RemoteAccessError)
    );
    // ud.pcap #6: UD_SEND_ONLY_WITH_IMMEDIATE qkey 0x11111111 srcQP 0x23 imm 0x01020304.
    let (r, _) = repr_of("ud.pcap", 6);
    let d = r.deth.unwrap();
    assert_eq!(
        (d.qkey.get(), d.src_qp.get(), r.immdt.unwrap().imm),
        (0x1111_1111, 0x23, 0x0102_0304)
    );
    // rc_read.pcap #22: zero-or-more-byte READ_RESPONSE_ONLY with AETH.
    let (r, _) = repr_of("rc_read.pcap", 22);
    assert_eq!(r.opcode(), Opcode::RC_RDMA_READ_RESPONSE_ONLY);
    assert!(r.aeth.is_some());
}

#[test]
fn display_is_one_line() {
    let (r, _) = repr_of("uc_write.pcap", 1);
    let line = r.to_string();
    assert_eq!(
        line,
        "UC_RDMA_WRITE_FIRST qpn=0x000023 psn=0xb8bd16 A=0 SE=0 pad=0 \
         RETH{va=0x55be60c39000, rkey=0x00001043, len=3000} payload=1024"
    );
    let (r, _) = repr_of("rc_send.pcap", 2);
    assert_eq!(r.to_string(), "RC_ACKNOWLEDGE qpn=0x000012 psn=0x54e31e A=0 SE=0 pad=0 AETH{ACK(credits=31), msn=1} payload=0");
    for p in load_all() {
        let line = TransportRepr::parse(&p.transport).unwrap().to_string();
        assert!(!line.contains('\n'));
    }
}

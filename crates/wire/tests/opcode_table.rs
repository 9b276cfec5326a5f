//! Cross-checks the const opcode table against roce-wire.md §4 (tables
//! transcribed by hand from the spec text) and tests next-opcode selection.

use wire::opcode::TABLE;
use wire::{HeaderSet, MessageKind, Opcode, PayloadRule, Position, Transport};

/// (opcode, name, hdr len, carries payload) — §4.1 RC table, §4.4 UD table.
const SPEC_RC_UD: &[(u8, &str, usize, bool)] = &[
    (0x00, "SEND_FIRST", 12, true),
    (0x01, "SEND_MIDDLE", 12, true),
    (0x02, "SEND_LAST", 12, true),
    (0x03, "SEND_LAST_WITH_IMMEDIATE", 16, true),
    (0x04, "SEND_ONLY", 12, true),
    (0x05, "SEND_ONLY_WITH_IMMEDIATE", 16, true),
    (0x06, "RDMA_WRITE_FIRST", 28, true),
    (0x07, "RDMA_WRITE_MIDDLE", 12, true),
    (0x08, "RDMA_WRITE_LAST", 12, true),
    (0x09, "RDMA_WRITE_LAST_WITH_IMMEDIATE", 16, true),
    (0x0A, "RDMA_WRITE_ONLY", 28, true),
    (0x0B, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", 32, true),
    (0x0C, "RDMA_READ_REQUEST", 28, false),
    (0x0D, "RDMA_READ_RESPONSE_FIRST", 16, true),
    (0x0E, "RDMA_READ_RESPONSE_MIDDLE", 12, true),
    (0x0F, "RDMA_READ_RESPONSE_LAST", 16, true),
    (0x10, "RDMA_READ_RESPONSE_ONLY", 16, true),
    (0x11, "ACKNOWLEDGE", 16, false),
    (0x12, "ATOMIC_ACKNOWLEDGE", 24, false),
    (0x13, "COMPARE_SWAP", 40, false),
    (0x14, "FETCH_ADD", 40, false),
    (0x16, "SEND_LAST_WITH_INVALIDATE", 16, true),
    (0x17, "SEND_ONLY_WITH_INVALIDATE", 16, true),
    (0x1C, "FLUSH", 32, false),
    (0x1D, "ATOMIC_WRITE", 28, true),
];

#[test]
fn rc_matches_spec_4_1() {
    for &(code, name, hdr_len, payload) in SPEC_RC_UD {
        let op = Opcode::new(code).unwrap();
        assert_eq!(op.name(), format!("RC_{name}"));
        assert_eq!(op.header_len(), hdr_len, "{op:?}");
        assert_eq!(op.has_payload(), payload, "{op:?}");
        assert_eq!(op.transport(), Transport::Rc);
    }
}

#[test]
fn uc_is_rc_0x00_to_0x0b_only() {
    // §4.2: UC 0x20-0x2B, same header sets and lengths as RC 0x00-0x0B; nothing else.
    for code in 0x20..=0x3Fu8 {
        match Opcode::new(code) {
            Ok(op) => {
                let rc = Opcode::new(code - 0x20).unwrap();
                assert!(code <= 0x2B, "{op:?}");
                assert_eq!(
                    (op.headers(), op.header_len(), op.has_payload()),
                    (rc.headers(), rc.header_len(), rc.has_payload())
                );
                assert_eq!(op.name().strip_prefix("UC_"), rc.name().strip_prefix("RC_"));
            }
            Err(_) => assert!(code > 0x2B),
        }
    }
}

#[test]
fn ud_matches_spec_4_4() {
    assert_eq!(Opcode::UD_SEND_ONLY.header_len(), 20);
    assert_eq!(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE.header_len(), 24);
    let ud: Vec<u8> = TABLE
        .iter()
        .map(|r| r.code)
        .filter(|c| c >> 5 == 3)
        .collect();
    assert_eq!(ud, [0x64, 0x65]);
}

#[test]
fn xrc_rd_cnp_follow_4_3_to_4_6() {
    for row in TABLE {
        let op = Opcode::new(row.code).unwrap();
        match op.transport() {
            // §4.5: XRCETH right after the BTH on requests, none on responses;
            // otherwise the RC equivalent's headers.
            Transport::Xrc => {
                let rc = Opcode::new(row.code - 0xA0).unwrap();
                let xrc = if op.is_request() {
                    HeaderSet::XRCETH
                } else {
                    HeaderSet::EMPTY
                };
                assert_eq!(op.headers(), rc.headers().with(xrc), "{op:?}");
            }
            // §4.3: RDETH everywhere, DETH on requests.
            Transport::Rd => {
                assert!(op.headers().contains(HeaderSet::RDETH), "{op:?}");
                assert_eq!(
                    op.headers().contains(HeaderSet::DETH),
                    op.is_request(),
                    "{op:?}"
                );
            }
            Transport::Cnp => assert_eq!((row.code, op.header_len()), (0x81, 28)),
            Transport::Rc | Transport::Uc | Transport::Ud => {}
        }
    }
    assert_eq!(TABLE.len(), 25 + 12 + 23 + 2 + 1 + 23);
}

#[test]
fn derived_properties() {
    assert!(Opcode::RC_SEND_FIRST.is_first() && Opcode::RC_SEND_MIDDLE.is_middle());
    assert!(Opcode::RC_SEND_LAST.is_last() && Opcode::RC_SEND_ONLY.is_only());
    assert!(Opcode::RC_ACKNOWLEDGE.is_response() && !Opcode::RC_ACKNOWLEDGE.is_request());
    assert!(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE.is_response());
    assert!(Opcode::RC_RDMA_READ_REQUEST.is_request());
    assert!(!Opcode::CNP.is_request() && !Opcode::CNP.is_response());
    assert!(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE.has_immediate());
    assert!(Opcode::RC_SEND_ONLY_WITH_INVALIDATE.has_invalidate());
    assert_eq!(
        Opcode::RC_ATOMIC_WRITE.payload_rule(),
        PayloadRule::Exactly(8)
    );
    assert_eq!(
        Opcode::RC_FLUSH.headers(),
        HeaderSet::FETH.with(HeaderSet::RETH)
    );
    // Unknown: reserved RC 0x15, UC READ, manufacturer-specific.
    for code in [0x15u8, 0x18, 0x2C, 0x60, 0x66, 0x80, 0xB5, 0xE0, 0xFF] {
        assert!(Opcode::new(code).is_err(), "0x{code:02x}");
    }
    assert_eq!(
        TABLE.iter().filter(|r| Opcode::new(r.code).is_ok()).count(),
        TABLE.len()
    );
}

#[test]
fn segment_selection() {
    use MessageKind::*;
    use Position::*;
    let seg = Opcode::segment;
    assert_eq!(seg(Transport::Rc, Send, First), Some(Opcode::RC_SEND_FIRST));
    assert_eq!(
        seg(Transport::Rc, SendWithImm, Middle),
        Some(Opcode::RC_SEND_MIDDLE)
    );
    assert_eq!(
        seg(Transport::Rc, SendWithImm, Last),
        Some(Opcode::RC_SEND_LAST_WITH_IMMEDIATE)
    );
    assert_eq!(
        seg(Transport::Rc, SendWithInv, Only),
        Some(Opcode::RC_SEND_ONLY_WITH_INVALIDATE)
    );
    assert_eq!(
        seg(Transport::Rc, WriteWithImm, First),
        Some(Opcode::RC_RDMA_WRITE_FIRST)
    );
    assert_eq!(
        seg(Transport::Rc, WriteWithImm, Only),
        Some(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE)
    );
    assert_eq!(
        seg(Transport::Rc, ReadResponse, Middle),
        Some(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE)
    );
    assert_eq!(
        seg(Transport::Uc, Write, Last),
        Some(Opcode::UC_RDMA_WRITE_LAST)
    );
    assert_eq!(seg(Transport::Uc, SendWithInv, Only), None); // §4.2: no UC SEND_WITH_INV
    assert_eq!(seg(Transport::Uc, ReadResponse, Only), None);
    assert_eq!(seg(Transport::Ud, Send, Only), Some(Opcode::UD_SEND_ONLY));
    assert_eq!(
        seg(Transport::Ud, SendWithImm, Only),
        Some(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE)
    );
    assert_eq!(seg(Transport::Ud, Send, First), None);
    assert_eq!(
        seg(Transport::Xrc, Send, First),
        Some(Opcode::XRC_SEND_FIRST)
    );
    // A 3-packet RC SEND with immediate, packet by packet.
    let ops: Vec<_> = (0..3)
        .map(|i| seg(Transport::Rc, SendWithImm, Position::of(i, 3)).unwrap())
        .collect();
    assert_eq!(
        ops,
        [
            Opcode::RC_SEND_FIRST,
            Opcode::RC_SEND_MIDDLE,
            Opcode::RC_SEND_LAST_WITH_IMMEDIATE
        ]
    );
    assert_eq!(
        Opcode::RC_SEND_FIRST.next_in_message(SendWithImm, false),
        Some(Opcode::RC_SEND_MIDDLE)
    );
    assert_eq!(
        Opcode::RC_SEND_MIDDLE.next_in_message(SendWithImm, true),
        Some(Opcode::RC_SEND_LAST_WITH_IMMEDIATE)
    );
    assert_eq!(Opcode::RC_SEND_LAST.next_in_message(Send, true), None);
    assert_eq!(Position::of(0, 1), Only);
}

#[test]
fn pad_rule() {
    // §6: PadCnt = (4 − len mod 4) mod 4.
    for (len, pad) in [
        (0, 0),
        (1, 3),
        (2, 2),
        (3, 1),
        (4, 0),
        (61, 3),
        (953, 3),
        (1024, 0),
    ] {
        assert_eq!(wire::pad_len(len), pad, "{len}");
    }
}

#[test]
fn header_len_table_is_the_sum_of_the_header_sizes() {
    // Opcode::header_len reads a table built from TABLE: for every row it is
    // the BTH plus the sizes of the row's headers, counted here directly.
    for row in TABLE {
        let op = Opcode::new(row.code).unwrap();
        let sizes: usize = wire::WIRE_ORDER
            .iter()
            .filter(|(h, _, _)| row.headers.contains(*h))
            .map(|(_, _, size)| size)
            .sum();
        assert_eq!(op.header_len(), 12 + sizes, "{op:?}");
        assert_eq!(op.header_len(), 12 + op.headers().byte_len(), "{op:?}");
    }
}

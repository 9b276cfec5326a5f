//! Agreement with Wireshark: one packet of every RC, UC and UD opcode, with
//! distinctive field values, written to a pcap and decoded by `tshark`; every
//! field tshark shows must equal what we encoded.
//!
//! Without tshark the test prints "skipped: tshark not found", unless
//! `SOFTVERBS_REQUIRE_TOOLS=1` (CI), where it fails.

use std::net::Ipv4Addr;
use std::process::Command;

use wire::aeth::{NakCode, Syndrome};
use wire::opcode::TABLE;
use wire::pcap::PcapWriter;
use wire::*;

/// Fields asked of tshark, in this order (`-T fields -e ...`).
const FIELDS: [&str; 19] = [
    "infiniband.bth.opcode",
    "infiniband.bth.destqp",
    "infiniband.bth.psn",
    "infiniband.bth.a",
    "infiniband.bth.se",
    "infiniband.bth.padcnt",
    "infiniband.reth.va", // also the AtomicETH address in Wireshark
    "infiniband.reth.r_key",
    "infiniband.reth.dmalen",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "infiniband.atomiceth.swapdt",
    "infiniband.atomiceth.cmpdt",
    "infiniband.atomicacketh.origremdt",
    "infiniband.immdt",
    "infiniband.ieth",
    "infiniband.deth.q_key",
    "infiniband.deth.srcqp",
    "udp.dstport",
];

/// IBA 1.5 opcodes that Wireshark 4.0 (Debian 12) shows as "Unknown (28/29)"
/// with the rest as vendor data: for these only the BTH fields are compared.
const UNKNOWN_TO_WIRESHARK_4_0: [Opcode; 2] = [Opcode::RC_FLUSH, Opcode::RC_ATOMIC_WRITE];

fn tshark_available() -> bool {
    Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A packet of opcode number `i` with field values derived from `i`.
fn packet(i: usize, op: Opcode) -> (TransportRepr, Vec<u8>) {
    let i32_ = i as u32;
    let i64_ = i as u64;
    let mut bth = bth::Repr::new(
        op,
        Qpn::from_masked(0x10_0000 + i32_ * 0x111),
        Psn::from_masked(0xFF_FFF0 + i32_ * 3),
    );
    bth.ack_req = op.is_request() && i & 1 == 0;
    let se_allowed = matches!(
        op.operation(),
        Operation::Send | Operation::SendWithImm | Operation::SendWithInv | Operation::WriteWithImm
    );
    bth.solicited = se_allowed && op.ends_message() && !matches!(i % 3, 0); // §3: SE only on last/only SEND, WRITE_WITH_IMM
    let payload_len = match op.payload_rule() {
        PayloadRule::None => 0,
        PayloadRule::Exactly(n) => n,
        PayloadRule::Any => 20 + i % 4 * 5 + i, // exercises every pad count
    };
    let mut r = TransportRepr::new(bth::Repr {
        pad_count: pad_len(payload_len),
        ..bth
    });
    r.payload_len = payload_len;
    let h = op.headers();
    if h.contains(HeaderSet::RETH) {
        r.reth = Some(reth::Repr {
            va: 0x7f00_1234_5000 + i64_ * 0x40,
            rkey: Rkey(0x1000 + i32_),
            dma_len: 70_000 + i32_,
        });
    }
    if h.contains(HeaderSet::ATOMIC_ETH) {
        r.atomic_eth = Some(atomic_eth::Repr {
            va: 0x5600_0000_1000 + i64_ * 8,
            rkey: Rkey(0xabc0 + i32_),
            swap_add: 0x0102_0304_0506_0708 + i64_,
            compare: 0x1112_1314_1516_1718 + i64_,
        });
    }
    if h.contains(HeaderSet::AETH) {
        let syndrome = match i % 4 {
            0 => Syndrome::Ack {
                credit_code: (i % 32) as u8,
            },
            1 => Syndrome::RnrNak {
                timer_code: (i % 32) as u8,
            },
            2 => Syndrome::Nak(NakCode::RemoteAccessError),
            _ => Syndrome::ack_unlimited(),
        };
        r.aeth = Some(aeth::Repr {
            syndrome,
            msn: Msn::from_masked(0x00AB_0000 + i32_),
        });
    }
    if h.contains(HeaderSet::ATOMIC_ACK_ETH) {
        r.atomic_ack_eth = Some(atomic_ack_eth::Repr {
            orig: 0xdead_beef_0000_0000 + i64_,
        });
    }
    if h.contains(HeaderSet::IMMDT) {
        r.immdt = Some(immdt::Repr {
            imm: 0x1122_3300 + i32_,
        });
    }
    if h.contains(HeaderSet::IETH) {
        r.ieth = Some(ieth::Repr {
            rkey: Rkey(0x00c0_ffee + i32_),
        });
    }
    if h.contains(HeaderSet::DETH) {
        r.deth = Some(deth::Repr {
            qkey: Qkey(0x1111_0000 + i32_),
            src_qp: Qpn::from_masked(0x00_0200 + i32_),
        });
    }
    if h.contains(HeaderSet::FETH) {
        r.feth = Some(feth::Repr {
            selectivity: 1,
            placement: 1,
        });
    }
    let payload = (0..payload_len).map(|b| b as u8).collect();
    (r, payload)
}

fn number(s: &str) -> u64 {
    match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    }
    .unwrap_or_else(|_| panic!("not a number: {s:?}"))
}

/// FT_BYTES fields come as hex, with or without colons.
fn bytes_value(s: &str) -> u64 {
    u64::from_str_radix(&s.replace(':', ""), 16).unwrap_or_else(|_| panic!("not hex bytes: {s:?}"))
}

fn boolean(s: &str) -> bool {
    matches!(s, "1" | "True" | "true")
}

/// Expected (field, value) pairs for one packet; `None` = field must be absent.
fn expected(r: &TransportRepr) -> Vec<(&'static str, Option<u64>)> {
    let b = &r.bth;
    let reth_va = r.reth.map(|h| h.va).or(r.atomic_eth.map(|h| h.va));
    let reth_rkey = r.reth.map(|h| h.rkey).or(r.atomic_eth.map(|h| h.rkey));
    vec![
        ("infiniband.bth.opcode", Some(b.opcode.get().into())),
        ("infiniband.bth.destqp", Some(b.dest_qp.get().into())),
        ("infiniband.bth.psn", Some(b.psn.get().into())),
        ("infiniband.bth.a", Some(b.ack_req.into())),
        ("infiniband.bth.se", Some(b.solicited.into())),
        ("infiniband.bth.padcnt", Some(r.pad_len() as u64)),
        ("infiniband.reth.va", reth_va),
        ("infiniband.reth.r_key", reth_rkey.map(|k| k.get().into())),
        ("infiniband.reth.dmalen", r.reth.map(|h| h.dma_len.into())),
        (
            "infiniband.aeth.syndrome",
            r.aeth.map(|h| h.syndrome.to_byte().into()),
        ),
        ("infiniband.aeth.msn", r.aeth.map(|h| h.msn.get().into())),
        (
            "infiniband.atomiceth.swapdt",
            r.atomic_eth.map(|h| h.swap_add),
        ),
        (
            "infiniband.atomiceth.cmpdt",
            r.atomic_eth.map(|h| h.compare),
        ),
        (
            "infiniband.atomicacketh.origremdt",
            r.atomic_ack_eth.map(|h| h.orig),
        ),
        ("infiniband.immdt", r.immdt.map(|h| h.imm.into())),
        ("infiniband.ieth", r.ieth.map(|h| h.rkey.get().into())),
        ("infiniband.deth.q_key", r.deth.map(|h| h.qkey.get().into())),
        (
            "infiniband.deth.srcqp",
            r.deth.map(|h| h.src_qp.get().into()),
        ),
        ("udp.dstport", Some(ROCE_UDP_PORT.into())),
    ]
}

fn decode(field: &str, raw: &str) -> u64 {
    match field {
        "infiniband.bth.a" | "infiniband.bth.se" => boolean(raw).into(),
        "infiniband.immdt" | "infiniband.ieth" => bytes_value(raw),
        _ => number(raw),
    }
}

#[test]
fn tshark_agrees_on_every_rc_uc_ud_opcode() {
    if !tshark_available() {
        assert!(
            std::env::var("SOFTVERBS_REQUIRE_TOOLS").as_deref() != Ok("1"),
            "tshark not found and SOFTVERBS_REQUIRE_TOOLS=1"
        );
        eprintln!("skipped: tshark not found");
        return;
    }
    let ops: Vec<Opcode> = TABLE
        .iter()
        .map(|row| Opcode::new(row.code).unwrap())
        .filter(|op| {
            matches!(
                op.transport(),
                Transport::Rc | Transport::Uc | Transport::Ud
            )
        })
        .collect();
    let packets: Vec<_> = ops
        .iter()
        .enumerate()
        .map(|(i, &op)| packet(i, op))
        .collect();
    let encap = Encap::ipv4(
        Ipv4Addr::new(198, 18, 0, 1),
        Ipv4Addr::new(198, 18, 0, 2),
        0xc123,
    );

    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("wire_every_opcode.pcap");
    let mut writer = PcapWriter::new(std::fs::File::create(&path).unwrap()).unwrap();
    for (i, (repr, payload)) in packets.iter().enumerate() {
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut buf, payload, &encap).unwrap();
        writer
            .write_transport(i as u64 * 1000, &encap, &buf)
            .unwrap();
    }
    writer.flush().unwrap();
    drop(writer);

    let mut cmd = Command::new("tshark");
    cmd.arg("-r").arg(&path).args([
        "-d",
        "udp.port==4791,infiniband",
        "-T",
        "fields",
        "-E",
        "separator=/t",
        "-E",
        "occurrence=f",
    ]);
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), packets.len(), "one line per packet:\n{text}");

    for (line, (repr, _)) in lines.iter().zip(&packets) {
        let got: Vec<&str> = line.split('\t').collect();
        assert_eq!(got.len(), FIELDS.len(), "{line:?}");
        let unknown_to_tshark = UNKNOWN_TO_WIRESHARK_4_0.contains(&repr.opcode());
        for ((field, want), raw) in expected(repr).into_iter().zip(got) {
            let have = (!raw.is_empty()).then(|| decode(field, raw));
            if unknown_to_tshark && have.is_none() && !field.starts_with("infiniband.bth") {
                continue; // decoded as "Unknown/Vendor Specific Data": only the BTH can be compared
            }
            assert_eq!(
                have,
                want,
                "{} field {field}: tshark {raw:?}, we encoded {want:?}\n{repr}",
                repr.opcode()
            );
        }
    }
    eprintln!(
        "tshark agreed on {} packets ({} opcodes)",
        packets.len(),
        ops.len()
    );
}

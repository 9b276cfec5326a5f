//! Helpers shared by the integration tests: loading the rxe captures.
#![allow(dead_code)]

use std::path::PathBuf;

use wire::encap::parse_frame;
use wire::pcap::PcapReader;
use wire::Encap;

/// The rxe captures copied from shared/testdata/rxe (see its README).
pub const CAPTURES: [(&str, usize); 11] = [
    ("rc_send.pcap", 24),
    ("rc_imm.pcap", 12),
    ("rc_write.pcap", 30),
    ("rc_read.pcap", 30),
    ("rc_atomic.pcap", 20),
    ("rc_rnr_nak.pcap", 4),
    ("rc_nak_access.pcap", 4),
    ("uc_send.pcap", 16),
    ("uc_write.pcap", 20),
    ("ud.pcap", 6),
    ("ipv6.pcap", 14),
];

pub fn data_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// One captured packet: its encapsulation and UDP payload.
pub struct Captured {
    pub file: &'static str,
    pub frame: usize,
    pub encap: Encap,
    pub transport: Vec<u8>,
}

pub fn load(file: &'static str) -> Vec<Captured> {
    let bytes = std::fs::read(data_path(file)).expect("read capture");
    let reader = PcapReader::new(&bytes).expect("pcap header");
    assert_eq!(reader.linktype, wire::pcap::LINKTYPE_ETHERNET);
    reader
        .enumerate()
        .map(|(i, rec)| {
            let rec = rec.expect("pcap record");
            let (encap, transport) = parse_frame(rec.data).expect("frame");
            Captured {
                file,
                frame: i + 1,
                encap,
                transport: transport.to_vec(),
            }
        })
        .collect()
}

pub fn load_all() -> Vec<Captured> {
    CAPTURES.iter().flat_map(|(f, _)| load(f)).collect()
}

pub fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

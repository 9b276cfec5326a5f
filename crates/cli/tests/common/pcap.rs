//! Reading the captures (`SOFTVERBS_PCAP`) of the processes a test ran: how
//! many records, and each IPv4 RoCEv2 record's addresses and BTH.

use std::path::Path;

/// Records in a pcap file (24-byte file header, then 16-byte record headers
/// each followed by `incl_len` bytes).
pub fn pcap_records(path: &Path) -> usize {
    let bytes = std::fs::read(path).unwrap_or_default();
    let (mut at, mut n) = (24, 0);
    while at + 16 <= bytes.len() {
        let incl = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        at += 16 + incl;
        n += 1;
    }
    n
}

/// The BTH opcode of each IPv4 RoCEv2 record of a capture.
pub fn pcap_bth_opcodes(path: &Path) -> Vec<u8> {
    pcap_bths(path)
        .iter()
        .filter_map(|b| b.first().copied())
        .collect()
}

/// The BTH (12 bytes, or fewer if cut) of each IPv4 RoCEv2 record of a capture.
pub fn pcap_bths(path: &Path) -> Vec<Vec<u8>> {
    pcap_roce(path).into_iter().map(|r| r.bth).collect()
}

/// One IPv4 RoCEv2 record of a capture: its IP addresses and BTH.
pub struct RoceRecord {
    pub src: [u8; 4],
    pub dst: [u8; 4],
    /// The BTH, 12 bytes (fewer if cut).
    pub bth: Vec<u8>,
}

impl RoceRecord {
    /// Reliable-connection opcodes (0x00..=0x1f): the ones softverbs retransmits.
    pub fn is_rc(&self) -> bool {
        self.bth.len() == 12 && self.bth[0] < 0x20
    }

    /// The BTH's destination QP (0 if the BTH is cut).
    pub fn dest_qp(&self) -> u32 {
        match self.bth.get(5..8) {
            Some(&[a, b, c]) => u32::from_be_bytes([0, a, b, c]),
            _ => 0,
        }
    }

    /// What identifies one transmission of an RC packet: addresses, opcode,
    /// destination QP and PSN.
    pub fn rc_key(&self) -> ([u8; 4], [u8; 4], u8, [u8; 3], [u8; 3]) {
        let b = &self.bth;
        (
            self.src,
            self.dst,
            b[0],
            [b[5], b[6], b[7]],
            [b[9], b[10], b[11]],
        )
    }
}

/// The IPv4 RoCEv2 records of a capture (Ethernet, IPv4, UDP, then the BTH).
pub fn pcap_roce(path: &Path) -> Vec<RoceRecord> {
    let bytes = std::fs::read(path).unwrap_or_default();
    let (mut at, mut out) = (24, Vec::new());
    while at + 16 <= bytes.len() {
        let incl = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        let frame = &bytes[(at + 16).min(bytes.len())..(at + 16 + incl).min(bytes.len())];
        if frame.len() > 34 && frame[12..14] == [0x08, 0x00] {
            let ihl = usize::from(frame[14] & 0xf) * 4;
            let bth = 14 + ihl + 8;
            if bth < frame.len() {
                out.push(RoceRecord {
                    src: frame[26..30].try_into().unwrap(),
                    dst: frame[30..34].try_into().unwrap(),
                    bth: frame[bth..frame.len().min(bth + 12)].to_vec(),
                });
            }
        }
        at += 16 + incl;
    }
    out
}

/// RC packets of a capture seen more than once (same addresses, opcode,
/// destination QP and PSN): retransmissions.
pub fn rc_repeats(capture: &[RoceRecord]) -> usize {
    let mut seen = std::collections::HashSet::new();
    capture
        .iter()
        .filter(|r| r.is_rc() && !seen.insert(r.rc_key()))
        .count()
}

/// Records of the captures that went from one of `addrs` to the other.
pub fn inter_host_records(captures: &[Vec<RoceRecord>], addrs: [&str; 2]) -> usize {
    let ip = |s: &str| s.parse::<std::net::Ipv4Addr>().unwrap().octets();
    let (a, b) = (ip(addrs[0]), ip(addrs[1]));
    captures
        .iter()
        .flatten()
        .filter(|r| (r.src, r.dst) == (a, b) || (r.src, r.dst) == (b, a))
        .count()
}

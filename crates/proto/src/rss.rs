//! Receive-side scaling for RAW_PACKET QPs (spec/raw-packet.md §6): which
//! receive work queue of an indirection table a frame goes to. The Toeplitz
//! hash of the fields the QP's `rx_hash_fields_mask` selects, in the order
//! source address, destination address, source port, destination port; the
//! hash's low `log_ind_tbl_size` bits index the table. Pure functions.

/// `IBV_RX_HASH_FUNC_TOEPLITZ`: the one hash function offered.
pub const FUNC_TOEPLITZ: u8 = 1;

/// `enum ibv_rx_hash_fields`.
pub mod fields {
    /// Source IPv4 address.
    pub const SRC_IPV4: u64 = 1 << 0;
    /// Destination IPv4 address.
    pub const DST_IPV4: u64 = 1 << 1;
    /// Source IPv6 address.
    pub const SRC_IPV6: u64 = 1 << 2;
    /// Destination IPv6 address.
    pub const DST_IPV6: u64 = 1 << 3;
    /// TCP source port.
    pub const SRC_PORT_TCP: u64 = 1 << 4;
    /// TCP destination port.
    pub const DST_PORT_TCP: u64 = 1 << 5;
    /// UDP source port.
    pub const SRC_PORT_UDP: u64 = 1 << 6;
    /// UDP destination port.
    pub const DST_PORT_UDP: u64 = 1 << 7;
    /// What softverbs hashes (IPsec SPI and inner headers are not offered).
    pub const SUPPORTED: u64 = 0xff;
}

/// The Toeplitz hash of `input` under `key` (Microsoft's RSS definition):
/// for every set bit of the input, most significant first, the 32 key bits
/// starting at that bit's position are XORed into the result. Key bits past
/// the key's end count as zero.
pub fn toeplitz(key: &[u8], input: &[u8]) -> u32 {
    let key_bit = |i: usize| -> u32 {
        key.get(i / 8)
            .map_or(0, |b| u32::from((b >> (7 - i % 8)) & 1))
    };
    let mut window = (0..32).fold(0u32, |w, i| (w << 1) | key_bit(i));
    let mut result = 0u32;
    for (n, byte) in input.iter().enumerate() {
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                result ^= window;
            }
            window = (window << 1) | key_bit(n * 8 + bit + 32);
        }
    }
    result
}

/// The bytes hashed for `frame` (an Ethernet frame, no VLAN tag): the
/// selected fields the frame has, source address, destination address,
/// source port, destination port; IPv4 ports after the header's IHL. A
/// field the frame lacks (another IP version, another protocol, cut short)
/// adds nothing.
pub fn hash_input(frame: &[u8], sel: u64, out: &mut Vec<u8>) {
    out.clear();
    let ethertype = frame.get(12..14).map(|b| u16::from_be_bytes([b[0], b[1]]));
    let (src, dst, proto, l4) = match ethertype {
        Some(0x0800) => {
            let ihl = frame.get(14).map_or(0, |b| usize::from(b & 0xf) * 4);
            (
                frame.get(26..30).filter(|_| sel & fields::SRC_IPV4 != 0),
                frame.get(30..34).filter(|_| sel & fields::DST_IPV4 != 0),
                frame.get(23).copied(),
                14 + ihl,
            )
        }
        Some(0x86dd) => (
            frame.get(22..38).filter(|_| sel & fields::SRC_IPV6 != 0),
            frame.get(38..54).filter(|_| sel & fields::DST_IPV6 != 0),
            frame.get(20).copied(),
            54,
        ),
        _ => return,
    };
    out.extend(src.into_iter().flatten());
    out.extend(dst.into_iter().flatten());
    let (want_src, want_dst) = match proto {
        Some(6) => (fields::SRC_PORT_TCP, fields::DST_PORT_TCP),
        Some(17) => (fields::SRC_PORT_UDP, fields::DST_PORT_UDP),
        _ => return,
    };
    if sel & want_src != 0 {
        out.extend(frame.get(l4..l4 + 2).into_iter().flatten());
    }
    if sel & want_dst != 0 {
        out.extend(frame.get(l4 + 2..l4 + 4).into_iter().flatten());
    }
}

/// The indirection-table entry (of `2^log_size`) `frame` goes to.
pub fn pick(key: &[u8], sel: u64, log_size: u32, frame: &[u8], scratch: &mut Vec<u8>) -> usize {
    hash_input(frame, sel, scratch);
    let h = toeplitz(key, scratch);
    (h & ((1u32 << log_size.min(31)) - 1)) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key and vectors of Microsoft's "Verifying the RSS Hash
    /// Calculation" (IPv4 without and with TCP ports).
    const KEY: [u8; 40] = [
        0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f,
        0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30,
        0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
    ];

    fn v4_tcp(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[9] = 6;
        ip[12..16].copy_from_slice(&src);
        ip[16..20].copy_from_slice(&dst);
        f.extend(ip);
        f.extend(sport.to_be_bytes());
        f.extend(dport.to_be_bytes());
        f.extend([0u8; 16]);
        f
    }

    #[test]
    fn toeplitz_matches_the_published_vectors() {
        let cases = [
            (
                [66, 9, 149, 187],
                2794,
                [161, 142, 100, 80],
                1766,
                0x323e_8fc2,
                0x51cc_c178,
            ),
            (
                [199, 92, 111, 2],
                14230,
                [65, 69, 140, 83],
                4739,
                0xd718_262a,
                0xc626_b0ea,
            ),
        ];
        let mut input = Vec::new();
        for (src, sport, dst, dport, ip_only, with_tcp) in cases {
            let f = v4_tcp(src, sport, dst, dport);
            hash_input(&f, fields::SRC_IPV4 | fields::DST_IPV4, &mut input);
            assert_eq!(toeplitz(&KEY, &input), ip_only);
            let all =
                fields::SRC_IPV4 | fields::DST_IPV4 | fields::SRC_PORT_TCP | fields::DST_PORT_TCP;
            hash_input(&f, all, &mut input);
            assert_eq!(input.len(), 12);
            assert_eq!(toeplitz(&KEY, &input), with_tcp);
            // UDP port selections take nothing from a TCP frame.
            hash_input(&f, fields::SRC_PORT_UDP, &mut input);
            assert!(input.is_empty());
        }
    }

    #[test]
    fn the_low_bits_pick_the_entry_and_other_families_hash_nothing() {
        let f = v4_tcp([66, 9, 149, 187], 2794, [161, 142, 100, 80], 1766);
        let mut s = Vec::new();
        let sel = fields::SRC_IPV4 | fields::DST_IPV4;
        assert_eq!(pick(&KEY, sel, 3, &f, &mut s), 0x323e_8fc2 & 7);
        // IPv6 fields on an IPv4 frame: no input, hash 0, entry 0.
        assert_eq!(pick(&KEY, fields::SRC_IPV6, 3, &f, &mut s), 0);
        assert_eq!(pick(&KEY, sel, 3, &f[..20], &mut s), 0);
    }
}

//! TCP segmentation offload of RAW_PACKET QPs (`IBV_WR_TSO`,
//! spec/raw-packet.md §4): the header checks made at post time and the
//! per-segment fix-ups, as pure functions over bytes.
//!
//! A TSO work request carries a header — Ethernet (optionally one 802.1Q
//! tag), IPv4 or IPv6 (no extension headers), TCP with its options; it must
//! end where the TCP header ends (`ibv_wr_post(3)`: "the hdr includes the
//! entire network headers up to and including the TCP header") — and a
//! payload (the gather list) cut into `mss`-byte pieces. Each frame is the
//! header followed by one piece, fixed up as Linux's software segmentation
//! fixes its segments (`net/ipv4/tcp_offload.c` `tcp_gso_segment`,
//! `net/ipv4/af_inet.c` `inet_gso_segment`, `net/ipv6/ip6_offload.c`):
//! IPv4 total length, identification (+1 per segment) and header checksum;
//! IPv6 payload length; TCP sequence number (+ the bytes before the piece),
//! FIN and PSH on the last segment only, CWR on the first only, and the TCP
//! checksum over the pseudo-header, header and piece.
//!
//! Promise: no function here panics on any input; [`parse`] accepts only
//! headers [`fix_segment`] can fix.

/// The shortest TSO header: an Ethernet header (mlx5's
/// `MLX5_ETH_L2_MIN_HEADER_SIZE`, the lower bound of `set_tso_eth_seg`).
pub const MIN_HEADER: usize = 14;
/// The largest `max_tso_header` a RAW_PACKET QP may ask for: room for
/// Ethernet + VLAN, IPv6 and a TCP header with every option, and more.
pub const MAX_TSO_HEADER: u16 = 512;
/// `tso_caps.max_tso`: the most payload bytes one TSO work request carries
/// (mlx5 reports 256 KiB).
pub const MAX_TSO: u32 = 256 * 1024;

const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const IPPROTO_TCP: u8 = 6;
const IPV6_HEADER: usize = 40;
const TCP_MIN_HEADER: usize = 20;
/// TCP flag bits (byte 13 of the header).
const FIN: u8 = 0x01;
const PSH: u8 = 0x08;
const CWR: u8 = 0x80;

/// Why a TSO work request is refused at post time (`EINVAL`, as mlx5's
/// `set_tso_eth_seg` and `_mlx5_post_send` answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TsoError {
    /// `hdr_sz` outside 14 ..= the QP's `max_tso_header`.
    #[error("hdr_sz {hdr_sz} is outside {min}..={max} (max is the QP's max_tso_header)")]
    HeaderSize {
        /// The header's size.
        hdr_sz: usize,
        /// [`MIN_HEADER`].
        min: usize,
        /// The QP's `max_tso_header`.
        max: u16,
    },
    /// The header is not Ethernet + IPv4/IPv6.
    #[error("the header's EtherType {ethertype:#06x} is neither IPv4 (0x0800) nor IPv6 (0x86dd)")]
    EtherType {
        /// The EtherType found (after one VLAN tag, if any).
        ethertype: u16,
    },
    /// The IP header does not carry TCP directly.
    #[error("the IP header's protocol (next header) is {proto}, not TCP (6); IPv6 extension headers are not segmented")]
    NotTcp {
        /// The protocol number found.
        proto: u8,
    },
    /// An IPv4 header shorter than 20 bytes, or not version 4.
    #[error("the IPv4 header is malformed (version/IHL byte {byte:#04x})")]
    Ipv4Header {
        /// Byte 0 of the IP header.
        byte: u8,
    },
    /// The header does not end where the TCP header does.
    #[error("the TCP header ends at byte {tcp_end} but hdr_sz is {hdr_sz}: the header must end with the TCP header")]
    HeaderEnd {
        /// Where the TCP header ends (its data offset), or the shortest it can.
        tcp_end: usize,
        /// The header's size.
        hdr_sz: usize,
    },
    /// `mss` 0.
    #[error("mss is 0")]
    ZeroMss,
    /// A segment (header + `mss`) longer than a frame may be.
    #[error("hdr_sz {hdr_sz} + mss {mss} exceeds the frame limit {max} bytes")]
    SegmentTooLong {
        /// The header's size.
        hdr_sz: usize,
        /// The segment size asked for.
        mss: u16,
        /// The device's frame limit.
        max: u32,
    },
    /// More payload than `tso_caps.max_tso`.
    #[error("the payload is {len} bytes, more than tso_caps.max_tso ({max})")]
    PayloadTooLong {
        /// The gather list's total length.
        len: u64,
        /// [`MAX_TSO`].
        max: u32,
    },
}

/// Where the layers of a checked TSO header start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The IP header's offset.
    pub l3: usize,
    /// The TCP header's offset.
    pub l4: usize,
    /// IPv6 (else IPv4).
    pub v6: bool,
    /// The whole header's length (the end of the TCP header).
    pub len: usize,
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Checks a TSO header (and its size against the QP's `max_tso_header`).
pub fn parse(hdr: &[u8], max_tso_header: u16) -> Result<Layout, TsoError> {
    let hdr_sz = hdr.len();
    if hdr_sz < MIN_HEADER || hdr_sz > usize::from(max_tso_header) {
        return Err(TsoError::HeaderSize {
            hdr_sz,
            min: MIN_HEADER,
            max: max_tso_header,
        });
    }
    let mut l3 = 14;
    let mut ethertype = be16(hdr, 12).unwrap_or(0);
    if ethertype == ETHERTYPE_VLAN {
        ethertype = be16(hdr, 16).unwrap_or(0);
        l3 = 18;
    }
    let short = |tcp_end| TsoError::HeaderEnd { tcp_end, hdr_sz };
    let (l4, proto, v6) = match ethertype {
        ETHERTYPE_IPV4 => {
            let byte = *hdr.get(l3).ok_or(short(l3 + 20 + TCP_MIN_HEADER))?;
            let ihl = usize::from(byte & 0x0f) * 4;
            if byte >> 4 != 4 || ihl < 20 {
                return Err(TsoError::Ipv4Header { byte });
            }
            let proto = *hdr.get(l3 + 9).ok_or(short(l3 + ihl + TCP_MIN_HEADER))?;
            (l3 + ihl, proto, false)
        }
        ETHERTYPE_IPV6 => {
            let proto = *hdr
                .get(l3 + 6)
                .ok_or(short(l3 + IPV6_HEADER + TCP_MIN_HEADER))?;
            (l3 + IPV6_HEADER, proto, true)
        }
        _ => return Err(TsoError::EtherType { ethertype }),
    };
    if proto != IPPROTO_TCP {
        return Err(TsoError::NotTcp { proto });
    }
    let doff = hdr
        .get(l4 + 12)
        .map(|b| usize::from(b >> 4) * 4)
        .ok_or(short(l4 + TCP_MIN_HEADER))?;
    let tcp_end = l4 + doff.max(TCP_MIN_HEADER);
    if doff < TCP_MIN_HEADER || tcp_end != hdr_sz {
        return Err(short(tcp_end));
    }
    Ok(Layout {
        l3,
        l4,
        v6,
        len: hdr_sz,
    })
}

/// The whole post-time check: the header, `mss`, the segment size against
/// the frame limit `frame_max`, and the payload against [`MAX_TSO`].
pub fn check(
    hdr: &[u8],
    max_tso_header: u16,
    mss: u16,
    payload: u64,
    frame_max: u32,
) -> Result<Layout, TsoError> {
    let layout = parse(hdr, max_tso_header)?;
    if mss == 0 {
        return Err(TsoError::ZeroMss);
    }
    if hdr.len() as u64 + u64::from(mss) > u64::from(frame_max) {
        return Err(TsoError::SegmentTooLong {
            hdr_sz: hdr.len(),
            mss,
            max: frame_max,
        });
    }
    if payload > u64::from(MAX_TSO) {
        return Err(TsoError::PayloadTooLong {
            len: payload,
            max: MAX_TSO,
        });
    }
    Ok(layout)
}

/// Frames a payload of `len` bytes becomes: one per `mss` bytes begun, and
/// one (the header alone) for an empty payload.
pub fn segments(len: u64, mss: u16) -> u64 {
    len.div_ceil(u64::from(mss.max(1))).max(1)
}

/// Adds `bytes` to a ones'-complement sum (RFC 1071), big-endian words.
fn sum(mut acc: u32, bytes: &[u8]) -> u32 {
    let mut words = bytes.chunks_exact(2);
    for w in &mut words {
        acc += u32::from(u16::from_be_bytes([w[0], w[1]]));
        acc = (acc & 0xffff) + (acc >> 16);
    }
    if let [last] = words.remainder() {
        acc += u32::from(*last) << 8;
    }
    acc
}

/// Folds a sum to the 16-bit checksum field's value.
fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    if let Some(s) = b.get_mut(at..at + 2) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}

/// Fixes up segment `index` (from 0) of a TSO work request in place:
/// `frame` is the header (`layout`, as [`parse`] accepted it) followed by
/// the piece of payload starting `offset` bytes into the payload; `last`
/// says it is the final segment. See the module doc for what changes.
pub fn fix_segment(frame: &mut [u8], layout: &Layout, index: u64, offset: u64, last: bool) {
    let Layout { l3, l4, v6, len } = *layout;
    if frame.len() < len {
        return;
    }
    let ip_len = frame.len() - l3;
    if v6 {
        put16(frame, l3 + 4, (ip_len - IPV6_HEADER) as u16);
    } else {
        let ihl = l4 - l3;
        put16(frame, l3 + 2, ip_len as u16);
        let id = be16(frame, l3 + 4).unwrap_or(0).wrapping_add(index as u16);
        put16(frame, l3 + 4, id);
        put16(frame, l3 + 10, 0);
        let c = fold(sum(0, &frame[l3..l3 + ihl]));
        put16(frame, l3 + 10, c);
    }
    let seq = u32::from_be_bytes([frame[l4 + 4], frame[l4 + 5], frame[l4 + 6], frame[l4 + 7]]);
    frame[l4 + 4..l4 + 8].copy_from_slice(&seq.wrapping_add(offset as u32).to_be_bytes());
    if !last {
        frame[l4 + 13] &= !(FIN | PSH);
    }
    if index > 0 {
        frame[l4 + 13] &= !CWR;
    }
    put16(frame, l4 + 16, 0);
    let tcp_len = frame.len() - l4;
    // The pseudo-header: addresses, protocol, TCP length (RFC 793, RFC 8200 §8.1).
    let pseudo = if v6 {
        let a = sum(0, &frame[l3 + 8..l3 + 40]);
        sum(a, &(tcp_len as u32).to_be_bytes()) + u32::from(IPPROTO_TCP)
    } else {
        let a = sum(0, &frame[l3 + 12..l3 + 20]);
        a + u32::from(IPPROTO_TCP) + tcp_len as u32
    };
    let c = fold(sum(pseudo, &frame[l4..]));
    put16(frame, l4 + 16, c);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ethernet + IPv4 (id 0x1234) + TCP (seq 1000, PSH|FIN|CWR|ACK) = 54 bytes.
    fn v4_header() -> Vec<u8> {
        let mut h = vec![0u8; 54];
        h[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        h[14] = 0x45;
        h[18..20].copy_from_slice(&0x1234u16.to_be_bytes());
        h[22] = 64;
        h[23] = IPPROTO_TCP;
        h[26..30].copy_from_slice(&[10, 0, 0, 1]);
        h[30..34].copy_from_slice(&[10, 0, 0, 2]);
        h[34..36].copy_from_slice(&1234u16.to_be_bytes());
        h[36..38].copy_from_slice(&80u16.to_be_bytes());
        h[38..42].copy_from_slice(&1000u32.to_be_bytes());
        h[46] = 5 << 4;
        h[47] = FIN | PSH | CWR | 0x10;
        h
    }

    /// The ones'-complement sum over a correct header or segment is 0xffff.
    fn verifies(bytes: &[u8], pseudo: u32) -> bool {
        fold(sum(pseudo, bytes)) == 0
    }

    #[test]
    fn checksum_matches_rfc1071_example() {
        // RFC 1071 §3: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
        let s = sum(0, &[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]);
        assert_eq!(fold(s), !0xddf2);
        // An odd byte is padded with zero.
        assert_eq!(fold(sum(0, &[0x01])), !0x0100);
    }

    #[test]
    fn headers_are_checked() {
        let h = v4_header();
        assert_eq!(
            parse(&h, 64).unwrap(),
            Layout {
                l3: 14,
                l4: 34,
                v6: false,
                len: 54
            }
        );
        let e = parse(&h, 40).unwrap_err();
        assert_eq!(
            e,
            TsoError::HeaderSize {
                hdr_sz: 54,
                min: 14,
                max: 40
            }
        );
        assert!(matches!(
            parse(&h[..10], 64),
            Err(TsoError::HeaderSize { .. })
        ));
        // Not ending with the TCP header.
        assert_eq!(
            parse(&h[..50], 64),
            Err(TsoError::HeaderEnd {
                tcp_end: 54,
                hdr_sz: 50
            })
        );
        let mut longer = h.clone();
        longer.extend([0; 4]);
        assert!(matches!(
            parse(&longer, 64),
            Err(TsoError::HeaderEnd { .. })
        ));
        let mut udp = h.clone();
        udp[23] = 17;
        assert_eq!(parse(&udp, 64), Err(TsoError::NotTcp { proto: 17 }));
        let mut arp = h.clone();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(
            parse(&arp, 64),
            Err(TsoError::EtherType { ethertype: 0x0806 })
        );
        let mut ihl = h.clone();
        ihl[14] = 0x44;
        assert_eq!(parse(&ihl, 64), Err(TsoError::Ipv4Header { byte: 0x44 }));
        assert_eq!(check(&h, 64, 0, 10, 1518), Err(TsoError::ZeroMss));
        assert!(matches!(
            check(&h, 64, 1500, 10, 1518),
            Err(TsoError::SegmentTooLong { .. })
        ));
        let big = u64::from(MAX_TSO) + 1;
        assert!(matches!(
            check(&h, 64, 1000, big, 1518),
            Err(TsoError::PayloadTooLong { .. })
        ));
        // Any prefix of any bytes: never a panic.
        for n in 0..h.len() {
            let _ = parse(&h[..n], 512);
        }
    }

    #[test]
    fn ipv4_segments_are_fixed_up() {
        let h = v4_header();
        let layout = parse(&h, 64).unwrap();
        let payload: Vec<u8> = (0..25u8).collect();
        let mss = 10u16;
        let n = segments(payload.len() as u64, mss);
        assert_eq!(n, 3);
        for i in 0..n {
            let off = (i * u64::from(mss)) as usize;
            let piece = &payload[off..(off + usize::from(mss)).min(payload.len())];
            let mut f = h.clone();
            f.extend_from_slice(piece);
            let last = i + 1 == n;
            fix_segment(&mut f, &layout, i, off as u64, last);
            assert_eq!(
                be16(&f, 16).unwrap() as usize,
                20 + 20 + piece.len(),
                "total length"
            );
            assert_eq!(be16(&f, 18).unwrap(), 0x1234 + i as u16, "IP ID");
            assert!(verifies(&f[14..34], 0), "IPv4 header checksum");
            let seq = u32::from_be_bytes([f[38], f[39], f[40], f[41]]);
            assert_eq!(seq, 1000 + off as u32);
            let flags = f[47];
            assert_eq!(flags & (FIN | PSH) != 0, last, "FIN/PSH on the last only");
            assert_eq!(flags & CWR != 0, i == 0, "CWR on the first only");
            assert_eq!(flags & 0x10, 0x10, "ACK kept");
            let tcp_len = (f.len() - 34) as u32;
            let pseudo = sum(0, &f[26..34]) + 6 + tcp_len;
            assert!(verifies(&f[34..], pseudo), "TCP checksum");
            assert_eq!(&f[54..], piece);
        }
    }

    #[test]
    fn ipv6_with_a_vlan_tag_is_fixed_up() {
        let mut h = vec![0u8; 18 + 40 + 32];
        h[12..14].copy_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
        h[14..16].copy_from_slice(&7u16.to_be_bytes());
        h[16..18].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        h[18] = 0x60;
        h[18 + 6] = IPPROTO_TCP;
        h[18 + 7] = 64;
        h[18 + 8..18 + 24].copy_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        h[18 + 24..18 + 40]
            .copy_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        let l4 = 58;
        h[l4 + 4..l4 + 8].copy_from_slice(&u32::MAX.to_be_bytes());
        h[l4 + 12] = 8 << 4; // 32 bytes: 12 of options
        h[l4 + 13] = PSH | 0x10;
        let layout = parse(&h, 128).unwrap();
        assert_eq!(
            layout,
            Layout {
                l3: 18,
                l4,
                v6: true,
                len: 90
            }
        );
        let mut f = h.clone();
        f.extend_from_slice(&[9; 7]);
        fix_segment(&mut f, &layout, 1, 8, false);
        assert_eq!(be16(&f, 18 + 4).unwrap(), 32 + 7, "payload length");
        let seq = u32::from_be_bytes([f[l4 + 4], f[l4 + 5], f[l4 + 6], f[l4 + 7]]);
        assert_eq!(seq, 7, "the sequence number wraps");
        assert_eq!(f[l4 + 13] & PSH, 0);
        let tcp_len = (f.len() - l4) as u32;
        let pseudo = sum(sum(0, &f[26..58]), &tcp_len.to_be_bytes()) + 6;
        assert!(verifies(&f[l4..], pseudo));
    }

    #[test]
    fn an_empty_payload_is_one_frame() {
        assert_eq!(segments(0, 100), 1);
        assert_eq!(segments(100, 100), 1);
        assert_eq!(segments(101, 100), 2);
    }
}

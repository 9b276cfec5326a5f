//! IPv4/IPv6 + UDP (+ Ethernet) encapsulation of transport packets (roce-wire.md §1).
//!
//! Owns: [`Encap`] (the IP/UDP fields that surround a transport packet and that
//! the ICRC covers), header emission for frames and for the ICRC pseudo-header,
//! and [`parse_frame`] / [`parse_ip`] for reading captures. Promise: parsing
//! never panics and returns the UDP payload trimmed to the UDP length; frames
//! are built with a valid IPv4 header checksum, fixed fake MACs, UDP checksum
//! as given (0 by default, like rxe).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::field::{read_u16, read_u32, write_u16, write_u32};
use crate::Error;

/// IANA RoCEv2 destination port (§1).
pub const ROCE_UDP_PORT: u16 = 4791;
/// Ethernet header length (no VLAN tag).
pub const ETH_LEN: usize = 14;
pub const IPV4_LEN: usize = 20;
pub const IPV6_LEN: usize = 40;
pub const UDP_LEN: usize = 8;
/// Source and destination MAC written into frames (locally administered).
pub const FAKE_SRC_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x01];
pub const FAKE_DST_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x02];
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86DD;
const ETHERTYPE_VLAN: u16 = 0x8100;
const PROTO_UDP: u8 = 17;

/// IPv4 header fields (IHL is always 5, §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Info {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    /// DSCP + ECN (masked out of the ICRC).
    pub tos: u8,
    /// Identification — covered by the ICRC (§8.4).
    pub id: u16,
    /// Flags (bits 15..13) and fragment offset — covered by the ICRC.
    pub flags_frag: u16,
    /// Masked out of the ICRC.
    pub ttl: u8,
}

impl Ipv4Info {
    /// Don't-fragment flag in `flags_frag`.
    pub const DF: u16 = 0x4000;

    /// What a DF UDP socket sends (§8.5): TOS 0, ID 0, DF, TTL 64.
    pub const fn new(src: Ipv4Addr, dst: Ipv4Addr) -> Ipv4Info {
        Ipv4Info {
            src,
            dst,
            tos: 0,
            id: 0,
            flags_frag: Self::DF,
            ttl: 64,
        }
    }
}

/// IPv6 header fields (no extension headers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Info {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    /// Masked out of the ICRC.
    pub traffic_class: u8,
    /// 20 bits; masked out of the ICRC.
    pub flow_label: u32,
    /// Masked out of the ICRC.
    pub hop_limit: u8,
}

/// The IP layer of a RoCEv2 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpInfo {
    V4(Ipv4Info),
    V6(Ipv6Info),
}

/// Everything around a transport packet: IP header fields and UDP ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Encap {
    pub ip: IpInfo,
    pub src_port: u16,
    pub dst_port: u16,
    /// Sent as is (rxe: 0, §1); masked out of the ICRC.
    pub udp_checksum: u16,
}

impl Encap {
    /// IPv4 with [`Ipv4Info::new`] defaults, destination port 4791, UDP checksum 0.
    pub const fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, src_port: u16) -> Encap {
        Encap {
            ip: IpInfo::V4(Ipv4Info::new(src, dst)),
            src_port,
            dst_port: ROCE_UDP_PORT,
            udp_checksum: 0,
        }
    }

    /// IPv6 with traffic class 0, flow label 0, hop limit 64, port 4791.
    pub const fn ipv6(src: Ipv6Addr, dst: Ipv6Addr, src_port: u16) -> Encap {
        let ip = Ipv6Info {
            src,
            dst,
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 64,
        };
        Encap {
            ip: IpInfo::V6(ip),
            src_port,
            dst_port: ROCE_UDP_PORT,
            udp_checksum: 0,
        }
    }

    /// IPv4 or IPv6 from two addresses of the same family (`None` if mixed).
    pub fn from_addrs(src: IpAddr, dst: IpAddr, src_port: u16) -> Option<Encap> {
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => Some(Encap::ipv4(s, d, src_port)),
            (IpAddr::V6(s), IpAddr::V6(d)) => Some(Encap::ipv6(s, d, src_port)),
            _ => None,
        }
    }

    /// 20 or 40.
    pub const fn ip_header_len(&self) -> usize {
        match self.ip {
            IpInfo::V4(_) => IPV4_LEN,
            IpInfo::V6(_) => IPV6_LEN,
        }
    }

    /// IP + UDP header bytes.
    pub const fn headers_len(&self) -> usize {
        self.ip_header_len() + UDP_LEN
    }

    /// Ethernet frame length for a transport packet of `transport_len` bytes.
    pub const fn frame_len(&self, transport_len: usize) -> usize {
        ETH_LEN + self.headers_len() + transport_len
    }

    /// Writes the IP and UDP headers for a UDP payload of `transport_len`
    /// bytes into `out[..headers_len()]`; returns the header length.
    pub fn emit_ip_udp(&self, out: &mut [u8], transport_len: usize) -> Result<usize, Error> {
        let need = self.headers_len();
        if out.len() < need {
            return Err(Error::BufferTooSmall {
                need,
                have: out.len(),
            });
        }
        let udp_len = u16::try_from(UDP_LEN + transport_len).map_err(|_| Error::OutOfRange {
            field: "UDP length",
            value: transport_len as u64,
        })?;
        let ip_len = self.ip_header_len();
        match self.ip {
            IpInfo::V4(v4) => emit_ipv4(&v4, &mut out[..IPV4_LEN], udp_len)?,
            IpInfo::V6(v6) => emit_ipv6(&v6, &mut out[..IPV6_LEN], udp_len),
        }
        let udp = &mut out[ip_len..need];
        write_u16(udp, 0, self.src_port);
        write_u16(udp, 2, self.dst_port);
        write_u16(udp, 4, udp_len);
        write_u16(udp, 6, self.udp_checksum);
        Ok(need)
    }

    /// Writes an Ethernet + IP + UDP frame holding `transport` into `out`;
    /// returns the frame length.
    pub fn emit_frame(&self, transport: &[u8], out: &mut [u8]) -> Result<usize, Error> {
        let need = self.frame_len(transport.len());
        if out.len() < need {
            return Err(Error::BufferTooSmall {
                need,
                have: out.len(),
            });
        }
        out[0..6].copy_from_slice(&FAKE_DST_MAC);
        out[6..12].copy_from_slice(&FAKE_SRC_MAC);
        let ethertype = match self.ip {
            IpInfo::V4(_) => ETHERTYPE_IPV4,
            IpInfo::V6(_) => ETHERTYPE_IPV6,
        };
        write_u16(out, 12, ethertype);
        let hdrs = self.emit_ip_udp(&mut out[ETH_LEN..], transport.len())?;
        out[ETH_LEN + hdrs..need].copy_from_slice(transport);
        Ok(need)
    }
}

fn emit_ipv4(v4: &Ipv4Info, out: &mut [u8], udp_len: u16) -> Result<(), Error> {
    let total = udp_len
        .checked_add(IPV4_LEN as u16)
        .ok_or(Error::OutOfRange {
            field: "IPv4 total length",
            value: u64::from(udp_len) + 20,
        })?;
    out[0] = 0x45; // version 4, IHL 5 (§1)
    out[1] = v4.tos;
    write_u16(out, 2, total);
    write_u16(out, 4, v4.id);
    write_u16(out, 6, v4.flags_frag);
    out[8] = v4.ttl;
    out[9] = PROTO_UDP;
    write_u16(out, 10, 0);
    out[12..16].copy_from_slice(&v4.src.octets());
    out[16..20].copy_from_slice(&v4.dst.octets());
    let csum = ipv4_checksum(out);
    write_u16(out, 10, csum);
    Ok(())
}

fn emit_ipv6(v6: &Ipv6Info, out: &mut [u8], udp_len: u16) {
    let word0 = (6u32 << 28) | (u32::from(v6.traffic_class) << 20) | (v6.flow_label & 0xF_FFFF);
    write_u32(out, 0, word0);
    write_u16(out, 4, udp_len);
    out[6] = PROTO_UDP;
    out[7] = v6.hop_limit;
    out[8..24].copy_from_slice(&v6.src.octets());
    out[24..40].copy_from_slice(&v6.dst.octets());
}

/// RFC 791 header checksum over a 20-byte header whose checksum field is 0.
pub fn ipv4_checksum(header: &[u8]) -> u16 {
    let sum: u32 = header
        .chunks(2)
        .map(|c| u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0)))
        .sum();
    let folded = (sum & 0xFFFF) + (sum >> 16);
    !((folded & 0xFFFF) + (folded >> 16)) as u16
}

fn malformed(layer: &'static str, what: &'static str) -> Error {
    Error::Malformed { layer, what }
}

/// Parses an Ethernet frame (optionally one 802.1Q tag) holding IPv4/IPv6 +
/// UDP; returns the encapsulation and the UDP payload.
pub fn parse_frame(frame: &[u8]) -> Result<(Encap, &[u8]), Error> {
    crate::field::check_len("Ethernet", frame, ETH_LEN)?;
    let mut at = 12;
    let mut ethertype = read_u16(frame, at);
    if ethertype == ETHERTYPE_VLAN {
        crate::field::check_len("802.1Q", frame, ETH_LEN + 4)?;
        at += 4;
        ethertype = read_u16(frame, at);
    }
    match ethertype {
        ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => parse_ip(&frame[at + 2..]),
        _ => Err(malformed("Ethernet", "EtherType is neither IPv4 nor IPv6")),
    }
}

/// Parses an IPv4 or IPv6 packet holding UDP; returns the encapsulation and
/// the UDP payload (trimmed to the UDP length, so Ethernet padding is ignored, §6).
pub fn parse_ip(packet: &[u8]) -> Result<(Encap, &[u8]), Error> {
    match packet.first().map(|b| b >> 4) {
        Some(4) => parse_ipv4(packet),
        Some(6) => parse_ipv6(packet),
        Some(_) => Err(malformed("IP", "version is neither 4 nor 6")),
        None => Err(Error::Truncated {
            header: "IP",
            need: 1,
            have: 0,
        }),
    }
}

fn parse_ipv4(p: &[u8]) -> Result<(Encap, &[u8]), Error> {
    crate::field::check_len("IPv4", p, IPV4_LEN)?;
    if p[0] & 0x0F != 5 {
        return Err(malformed(
            "IPv4",
            "IHL is not 5 (options are not supported, §1)",
        ));
    }
    if p[9] != PROTO_UDP {
        return Err(malformed("IPv4", "protocol is not UDP"));
    }
    let total = usize::from(read_u16(p, 2));
    if total < IPV4_LEN || total > p.len() {
        return Err(malformed("IPv4", "total length outside the packet"));
    }
    let v4 = Ipv4Info {
        src: Ipv4Addr::from(read_u32(p, 12)),
        dst: Ipv4Addr::from(read_u32(p, 16)),
        tos: p[1],
        id: read_u16(p, 4),
        flags_frag: read_u16(p, 6),
        ttl: p[8],
    };
    parse_udp(IpInfo::V4(v4), &p[IPV4_LEN..total])
}

fn parse_ipv6(p: &[u8]) -> Result<(Encap, &[u8]), Error> {
    crate::field::check_len("IPv6", p, IPV6_LEN)?;
    if p[6] != PROTO_UDP {
        return Err(malformed(
            "IPv6",
            "next header is not UDP (extension headers are not supported)",
        ));
    }
    let end = IPV6_LEN + usize::from(read_u16(p, 4));
    if end > p.len() {
        return Err(malformed("IPv6", "payload length outside the packet"));
    }
    let word0 = read_u32(p, 0);
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    src.copy_from_slice(&p[8..24]);
    dst.copy_from_slice(&p[24..40]);
    let v6 = Ipv6Info {
        src: Ipv6Addr::from(src),
        dst: Ipv6Addr::from(dst),
        traffic_class: (word0 >> 20) as u8,
        flow_label: word0 & 0xF_FFFF,
        hop_limit: p[7],
    };
    parse_udp(IpInfo::V6(v6), &p[IPV6_LEN..end])
}

fn parse_udp(ip: IpInfo, p: &[u8]) -> Result<(Encap, &[u8]), Error> {
    crate::field::check_len("UDP", p, UDP_LEN)?;
    let len = usize::from(read_u16(p, 4));
    if len < UDP_LEN || len > p.len() {
        return Err(malformed("UDP", "length outside the IP payload"));
    }
    let encap = Encap {
        ip,
        src_port: read_u16(p, 0),
        dst_port: read_u16(p, 2),
        udp_checksum: read_u16(p, 6),
    };
    Ok((encap, &p[UDP_LEN..len]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_frame_round_trip_and_checksum() {
        // §8.2 vector 1 IPv4 header: checksum 0x9161.
        let v4 = Ipv4Info {
            src: Ipv4Addr::new(10, 0, 17, 1),
            dst: Ipv4Addr::new(10, 0, 18, 1),
            tos: 0xc2,
            id: 0x718c,
            flags_frag: Ipv4Info::DF,
            ttl: 64,
        };
        let encap = Encap {
            ip: IpInfo::V4(v4),
            src_port: 0,
            dst_port: ROCE_UDP_PORT,
            udp_checksum: 0,
        };
        let transport = [0u8; 32];
        let mut frame = [0u8; 128];
        let n = encap.emit_frame(&transport, &mut frame).unwrap();
        assert_eq!(n, 14 + 20 + 8 + 32);
        assert_eq!(
            frame[14..34],
            [
                0x45, 0xc2, 0x00, 0x3c, 0x71, 0x8c, 0x40, 0x00, 0x40, 0x11, 0x91, 0x61, 10, 0, 17,
                1, 10, 0, 18, 1
            ]
        );
        assert_eq!(
            frame[34..42],
            [0x00, 0x00, 0x12, 0xb7, 0x00, 0x28, 0x00, 0x00]
        );
        let (parsed, payload) = parse_frame(&frame[..n]).unwrap();
        assert_eq!(parsed, encap);
        assert_eq!(payload, &transport[..]);
    }

    #[test]
    fn ipv6_round_trip_and_vlan() {
        let mut encap = Encap::ipv6(
            "fd00::1".parse().unwrap(),
            "fd00::2".parse().unwrap(),
            0xc123,
        );
        if let IpInfo::V6(v6) = &mut encap.ip {
            v6.traffic_class = 0x68;
            v6.flow_label = 0x12345;
        }
        let mut frame = [0u8; 128];
        let n = encap.emit_frame(&[1, 2, 3, 4], &mut frame).unwrap();
        assert_eq!(frame[14..18], [0x66, 0x81, 0x23, 0x45]); // §8.2 vector 3
        let (parsed, payload) = parse_frame(&frame[..n]).unwrap();
        assert_eq!((parsed, payload), (encap, &[1u8, 2, 3, 4][..]));
        // The same frame with an 802.1Q tag.
        let mut tagged = Vec::from(&frame[..12]);
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        tagged.extend_from_slice(&frame[12..n]);
        assert_eq!(parse_frame(&tagged).unwrap().0, encap);
    }

    #[test]
    fn rejects_bad_frames_without_panicking() {
        assert!(parse_frame(&[]).is_err());
        let encap = Encap::ipv4(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, 1);
        let mut frame = [0u8; 64];
        let n = encap.emit_frame(&[0; 8], &mut frame).unwrap();
        for cut in 0..n {
            let _ = parse_frame(&frame[..cut]);
        }
        frame[14] = 0x46; // IHL 6
        assert!(matches!(
            parse_frame(&frame[..n]),
            Err(Error::Malformed { layer: "IPv4", .. })
        ));
    }
}

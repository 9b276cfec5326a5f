//! Invariant CRC (roce-wire.md §8).
//!
//! Owns: ICRC computation over the masked pseudo-header, sealing and
//! verification, and IPv4-ID recovery for receivers that cannot see the IP
//! header (§8.5). Promise: the CRC is crc32fast's (zlib CRC-32, SIMD/PCLMULQDQ
//! where available); nothing here allocates or panics on any input.

use std::net::IpAddr;

use crate::encap::{Encap, IpInfo, Ipv4Info, IPV4_LEN, UDP_LEN};
use crate::{bth, Error};

/// ICRC size in bytes.
pub const LEN: usize = 4;
/// The 8 bytes of 0xFF standing for the masked IB LRH (§8.1 step 1).
const LRH_MASK: [u8; 8] = [0xFF; 8];
/// Offset in the transport bytes (the UDP payload) of BTH byte 4 (FECN, BECN,
/// Resv6a), masked to 0xFF (§8.1 step 2): the one byte before the ICRC that it
/// does not cover, so a bit flipped there is not a corruption a receiver can or
/// must detect. Fault injection and the simulator keep to this fact.
pub const BTH_MASKED_BYTE: usize = 4;
/// Longest pseudo-header: 8 + IPv6 40 + UDP 8.
const PSEUDO_MAX: usize = 8 + 40 + 8;

/// Writes `0xFF×8 ‖ IP ‖ UDP` with the variant fields set to all ones (§8.1
/// step 2) into `out`; returns its length.
fn pseudo_header(
    encap: &Encap,
    transport_len: usize,
    out: &mut [u8; PSEUDO_MAX],
) -> Result<usize, Error> {
    out[..8].copy_from_slice(&LRH_MASK);
    let hdr = encap.emit_ip_udp(&mut out[8..], transport_len)?;
    let ip = &mut out[8..8 + hdr];
    match encap.ip {
        IpInfo::V4(_) => {
            ip[1] = 0xFF; // TOS (DSCP and ECN)
            ip[8] = 0xFF; // TTL
            ip[10..12].fill(0xFF); // header checksum
        }
        IpInfo::V6(_) => {
            ip[0] |= 0x0F; // traffic class + flow label: bits 27..0 of word 0
            ip[1..4].fill(0xFF);
            ip[7] = 0xFF; // hop limit
        }
    }
    let udp_csum = encap.ip_header_len() + 6;
    ip[udp_csum..udp_csum + 2].fill(0xFF); // UDP checksum
    Ok(8 + hdr)
}

/// The ICRC value of `transport` (a whole UDP payload, BTH … ICRC; the last 4
/// bytes are not covered) sent inside `encap` (§8.1 steps 1–3).
pub fn compute(encap: &Encap, transport: &[u8]) -> Result<u32, Error> {
    crate::field::check_len("BTH+ICRC", transport, bth::LEN + LEN)?;
    let mut pseudo = [0u8; PSEUDO_MAX];
    let n = pseudo_header(encap, transport.len(), &mut pseudo)?;
    let covered = &transport[..transport.len() - LEN];
    let mut h = crc32fast::Hasher::new();
    h.update(&pseudo[..n]);
    h.update(&covered[..BTH_MASKED_BYTE]);
    h.update(&[0xFF]); // BTH byte 4 → all ones
    h.update(&covered[BTH_MASKED_BYTE + 1..]);
    Ok(h.finalize())
}

/// The ICRC carried by `transport`: its last 4 bytes, least significant byte
/// first (§8.1 step 4).
pub fn stored(transport: &[u8]) -> Result<u32, Error> {
    crate::field::check_len("BTH+ICRC", transport, bth::LEN + LEN)?;
    let t = &transport[transport.len() - LEN..];
    Ok(u32::from_le_bytes([t[0], t[1], t[2], t[3]]))
}

/// Computes the ICRC and writes it into the last 4 bytes, LSB first (§8.1 step 4).
pub fn seal(encap: &Encap, transport: &mut [u8]) -> Result<u32, Error> {
    let crc = compute(encap, transport)?;
    let at = transport.len() - LEN;
    transport[at..].copy_from_slice(&crc.to_le_bytes());
    Ok(crc)
}

/// `BadIcrc` unless the stored ICRC matches (§8.3).
pub fn verify(encap: &Encap, transport: &[u8]) -> Result<(), Error> {
    let (found, computed) = (stored(transport)?, compute(encap, transport)?);
    if found != computed {
        return Err(Error::BadIcrc { found, computed });
    }
    Ok(())
}

/// What a UDP socket tells a receiver about a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoints {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
}

/// Verifies a received packet when the IP header is unknown (§8.5 "Receiving").
///
/// IPv6: every unknown field (traffic class, flow label, hop limit) is masked,
/// so this is a plain check; returns `Ok(None)`. IPv4: TOS/TTL/checksum are
/// masked and the lengths follow from the UDP payload; DF = 1 and fragment
/// offset 0 are assumed (§1: RoCEv2 never fragments, rxe and we set DF), and the
/// 16 ID bits are solved for from the received ICRC (CRC-32 is affine over
/// GF(2)); returns `Ok(Some(id))`, or `BadIcrc` if no ID fits. The check then
/// rejects a corrupted packet with probability 1 − 2^-16.
pub fn verify_received(ep: &Endpoints, transport: &[u8]) -> Result<Option<u16>, Error> {
    let mut encap = Encap::from_addrs(ep.src, ep.dst, ep.src_port).ok_or(Error::Malformed {
        layer: "IP",
        what: "source and destination families differ",
    })?;
    encap.dst_port = ep.dst_port;
    if let IpInfo::V6(_) = encap.ip {
        return verify(&encap, transport).map(|()| None);
    }
    let found = stored(transport)?;
    let computed = compute(&encap, transport)?; // with ID 0
                                                // Bytes covered after the ID field: rest of the IPv4 header (from byte 6), UDP, BTH … pad.
    let after_id = (IPV4_LEN - 6) + UDP_LEN + (transport.len() - LEN);
    match gf2::solve_id(found ^ computed, after_id) {
        Some(id) => Ok(Some(id)),
        None => Err(Error::BadIcrc { found, computed }),
    }
}

/// [`Encap`] for a received IPv4 packet with a recovered ID (DF set, §8.5).
pub fn ipv4_with_id(ep: &Endpoints, id: u16) -> Option<Encap> {
    let mut encap = Encap::from_addrs(ep.src, ep.dst, ep.src_port)?;
    encap.dst_port = ep.dst_port;
    if let IpInfo::V4(v4) = &mut encap.ip {
        *v4 = Ipv4Info { id, ..*v4 };
    }
    Some(encap)
}

/// GF(2) arithmetic on CRC-32 register values in zlib's reflected bit order
/// (bit 31 = coefficient of x^0), all tables built at compile time.
mod gf2 {
    /// The reflected IEEE 802.3 polynomial (§8.1 step 3).
    const POLY: u32 = 0xEDB8_8320;
    /// x^0 in the reflected representation.
    const ONE: u32 = 0x8000_0000;
    /// x^-1 mod P = (P + 1) / x: every term of P shifted down one degree.
    const X_INV: u32 = (POLY << 1) | 1;

    /// `a · b mod P`.
    pub(super) const fn mul_mod(a: u32, mut b: u32) -> u32 {
        let mut product = 0;
        let mut i = 0;
        while i < 32 {
            if a & (ONE >> i) != 0 {
                product ^= b;
            }
            b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
            i += 1;
        }
        product
    }

    const fn pow(mut base: u32, mut e: u64) -> u32 {
        let mut result = ONE;
        while e != 0 {
            if e & 1 != 0 {
                result = mul_mod(result, base);
            }
            base = mul_mod(base, base);
            e >>= 1;
        }
        result
    }

    /// `x^(8·bytes) mod P`: what feeding `bytes` zero bytes does to a register
    /// difference.
    #[cfg(test)]
    pub(super) const fn x_pow_8n(bytes: usize) -> u32 {
        pow(ONE >> 1, bytes as u64 * 8)
    }

    /// `NEG_POW[k] = x^-(8·2^k) mod P`.
    const NEG_POW: [u32; 48] = {
        let mut t = [0u32; 48];
        t[0] = pow(X_INV, 8);
        let mut k = 1;
        while k < t.len() {
            t[k] = mul_mod(t[k - 1], t[k - 1]);
            k += 1;
        }
        t
    };

    /// `x^-(8·bytes) mod P`: undoes feeding `bytes` zero bytes.
    pub(super) fn x_pow_neg_8n(bytes: usize) -> u32 {
        let mut result = ONE;
        for (k, &t) in NEG_POW.iter().enumerate() {
            if (bytes as u64 >> k) & 1 != 0 {
                result = mul_mod(result, t);
            }
        }
        result
    }

    /// CRC register after feeding `bytes` to a zero register (the linear part).
    const fn crc_linear(bytes: [u8; 2]) -> u32 {
        let mut c = 0u32;
        let mut i = 0;
        while i < bytes.len() {
            c ^= bytes[i] as u32;
            let mut bit = 0;
            while bit < 8 {
                c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
                bit += 1;
            }
            i += 1;
        }
        c
    }

    /// Register change caused by each IPv4 ID bit, measured right after the ID field.
    pub(super) const ID_COLUMNS: [u32; 16] = {
        let mut cols = [0u32; 16];
        let mut bit = 0;
        while bit < 16 {
            cols[bit] = crc_linear((1u16 << bit).to_be_bytes());
            bit += 1;
        }
        cols
    };

    /// Echelon basis of [`ID_COLUMNS`]: per pivot bit, (vector, which columns).
    const ID_BASIS: [(u32, u16); 32] = {
        let mut basis = [(0u32, 0u16); 32];
        let mut i = 0;
        while i < 16 {
            let (mut v, mut combo) = (ID_COLUMNS[i], 1u16 << i);
            while v != 0 {
                let pivot = 31 - v.leading_zeros() as usize;
                if basis[pivot].0 == 0 {
                    basis[pivot] = (v, combo);
                    break;
                }
                v ^= basis[pivot].0;
                combo ^= basis[pivot].1;
            }
            i += 1;
        }
        basis
    };

    /// The ID whose bits, fed `after_id` bytes before the end, change the CRC
    /// by `delta`; `None` if no ID does. Undo the shift (multiply by
    /// x^-(8·after_id)), then express the result in the ID columns' basis.
    pub(super) fn solve_id(delta: u32, after_id: usize) -> Option<u16> {
        let mut t = mul_mod(delta, x_pow_neg_8n(after_id));
        let mut id = 0u16;
        while t != 0 {
            let pivot = 31 - t.leading_zeros() as usize;
            let (v, combo) = ID_BASIS[pivot];
            if v == 0 {
                return None;
            }
            t ^= v;
            id ^= combo;
        }
        Some(id)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn shift_matches_crc32fast_combine() {
            for (a, n) in [
                (0x1234_5678u32, 1usize),
                (0xdead_beef, 13),
                (0xffff_ffff, 1500),
            ] {
                let mut h = crc32fast::Hasher::new_with_initial_len(a, 0);
                h.combine(&crc32fast::Hasher::new_with_initial_len(0, n as u64));
                assert_eq!(mul_mod(a, x_pow_8n(n)), h.finalize(), "a={a:x} n={n}");
            }
        }

        #[test]
        fn x_inverse_is_an_inverse() {
            assert_eq!(mul_mod(X_INV, ONE >> 1), ONE);
            for n in [0usize, 1, 22, 1080, 65535] {
                assert_eq!(mul_mod(x_pow_8n(n), x_pow_neg_8n(n)), ONE, "n={n}");
            }
        }

        #[test]
        fn solve_finds_every_id() {
            for after_id in [22usize, 100, 4118] {
                for id in [0u16, 1, 0x8000, 0xc6cb, 0xffff] {
                    let delta = (0..16)
                        .filter(|b| id & (1 << b) != 0)
                        .fold(0, |acc, b| acc ^ ID_COLUMNS[b]);
                    let shifted = mul_mod(delta, x_pow_8n(after_id));
                    assert_eq!(solve_id(shifted, after_id), Some(id));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv6Addr;

    fn vector3() -> (Encap, Vec<u8>) {
        // §8.2 vector 3 (author-computed, cross-checked against scapy).
        let mut encap = Encap::ipv6(
            "fd00::1".parse::<Ipv6Addr>().unwrap(),
            "fd00::2".parse::<Ipv6Addr>().unwrap(),
            0xc123,
        );
        if let IpInfo::V6(v6) = &mut encap.ip {
            (v6.traffic_class, v6.flow_label, v6.hop_limit) = (0x68, 0x12345, 64);
        }
        let mut t = vec![
            0x04, 0x30, 0xff, 0xff, 0x00, 0x00, 0x00, 0x12, 0x80, 0x00, 0x01, 0x00,
        ];
        t.extend_from_slice(b"hello\0\0\0");
        t.extend_from_slice(&[0xfe, 0x4c, 0x28, 0x91]);
        (encap, t)
    }

    #[test]
    fn seal_writes_lsb_first() {
        let (encap, mut t) = vector3();
        let wire = t[t.len() - 4..].to_vec();
        let n = t.len();
        t[n - 4..].fill(0);
        seal(&encap, &mut t).unwrap();
        assert_eq!(&t[n - 4..], &wire[..]);
        verify(&encap, &t).unwrap();
    }

    #[test]
    fn short_input_is_an_error_not_a_panic() {
        let encap = Encap::ipv4([1, 1, 1, 1].into(), [2, 2, 2, 2].into(), 1);
        for len in 0..16 {
            assert!(compute(&encap, &vec![0; len]).is_err());
        }
        assert!(compute(&encap, &[0; 16]).is_ok());
    }
}

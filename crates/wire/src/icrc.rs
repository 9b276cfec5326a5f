//! Invariant CRC (roce-wire.md §8).
//!
//! Owns: ICRC computation over the masked pseudo-header, sealing and
//! verification, and IPv4-ID recovery for receivers that cannot see the IP
//! header (§8.5). Promise: the CRC is crc32fast's (zlib CRC-32, SIMD/PCLMULQDQ
//! where available); the ID recovery costs a few table lookups and one
//! multiplication (tables built at compile time, the bit-serial solver kept as
//! the tests' oracle); nothing here allocates or panics on any input.

use std::net::IpAddr;
use std::sync::OnceLock;

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
/// step 2) into `out`; returns its length. IPv4 is written field by field
/// (its header checksum is masked, so it is never computed); IPv6 through
/// [`Encap::emit_ip_udp`]. [`pseudo_header_by_emit`] is the tests' oracle.
fn pseudo_header(encap: &Encap, transport_len: usize, out: &mut [u8]) -> Result<usize, Error> {
    let IpInfo::V4(v4) = encap.ip else {
        return pseudo_header_by_emit(encap, transport_len, out);
    };
    let udp_len = u16::try_from(UDP_LEN + transport_len).map_err(|_| Error::OutOfRange {
        field: "UDP length",
        value: transport_len as u64,
    })?;
    let total = udp_len
        .checked_add(IPV4_LEN as u16)
        .ok_or(Error::OutOfRange {
            field: "IPv4 total length",
            value: u64::from(udp_len) + IPV4_LEN as u64,
        })?;
    let [t0, t1] = total.to_be_bytes();
    let [i0, i1] = v4.id.to_be_bytes();
    let [f0, f1] = v4.flags_frag.to_be_bytes();
    let [s0, s1, s2, s3] = v4.src.octets();
    let [d0, d1, d2, d3] = v4.dst.octets();
    let [sp0, sp1] = encap.src_port.to_be_bytes();
    let [dp0, dp1] = encap.dst_port.to_be_bytes();
    let [u0, u1] = udp_len.to_be_bytes();
    // LRH mask; version/IHL, TOS masked, total length, ID, flags/fragment,
    // TTL masked, UDP, checksum masked, addresses; ports, length, UDP
    // checksum masked.
    let head: [u8; 8 + IPV4_LEN + UDP_LEN] = [
        0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, //
        0x45, 0xFF, t0, t1, i0, i1, f0, f1, 0xFF, 17, 0xFF, 0xFF, //
        s0, s1, s2, s3, d0, d1, d2, d3, //
        sp0, sp1, dp0, dp1, u0, u1, 0xFF, 0xFF,
    ];
    out[..head.len()].copy_from_slice(&head);
    Ok(head.len())
}

/// [`pseudo_header`] through [`Encap::emit_ip_udp`], then the masks.
fn pseudo_header_by_emit(
    encap: &Encap,
    transport_len: usize,
    out: &mut [u8],
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

/// A CRC-32 state at zero with crc32fast's kernel already chosen:
/// `Hasher::new` reads the CPU's features on every call (four cached
/// reads, ≈ 37 instructions), a clone of this copies 16 bytes.
fn hasher() -> crc32fast::Hasher {
    static ZERO: OnceLock<crc32fast::Hasher> = OnceLock::new();
    ZERO.get_or_init(crc32fast::Hasher::new).clone()
}

/// The ICRC value of `transport` (a whole UDP payload, BTH … ICRC; the last 4
/// bytes are not covered) sent inside `encap` (§8.1 steps 1–3).
///
/// Two CRC updates: the pseudo-header and the BTH (its byte 4 set to all
/// ones) from one small stack buffer, then the rest of the covered bytes
/// where they lie (no copy of the payload, no buffer to clear).
pub fn compute(encap: &Encap, transport: &[u8]) -> Result<u32, Error> {
    crate::field::check_len("BTH+ICRC", transport, bth::LEN + LEN)?;
    let mut head = [0u8; PSEUDO_MAX + bth::LEN];
    let n = pseudo_header(encap, transport.len(), &mut head)?;
    let (bth_bytes, rest) = transport.split_at(bth::LEN);
    head[n..n + bth::LEN].copy_from_slice(bth_bytes);
    head[n + BTH_MASKED_BYTE] = 0xFF; // BTH byte 4 → all ones
    let mut h = hasher();
    h.update(&head[..n + bth::LEN]);
    h.update(&rest[..rest.len() - LEN]);
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
    if found == computed {
        // The ID is 0 (what a DF datagram from an unconnected socket carries):
        // the solve below is linear, so a zero difference gives ID 0 at every
        // length (`gf2::solve_id(0, n) == Some(0)`, tested); skip it.
        return Ok(Some(0));
    }
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

    /// `x^-(8·bytes) mod P`: undoes feeding `bytes` zero bytes, one
    /// bit-serial multiplication per set bit of `bytes` (the reference the
    /// tables are tested against, and the way for lengths past them).
    pub(super) fn x_pow_neg_8n(bytes: usize) -> u32 {
        let mut result = ONE;
        for (k, &t) in NEG_POW.iter().enumerate() {
            if (bytes as u64 >> k) & 1 != 0 {
                result = mul_mod(result, t);
            }
        }
        result
    }

    /// `SHIFT4[v] = v · x^4 mod P` for `v < 16`: the reduction of the four
    /// coefficients a shift by `x^4` pushes past `x^31`, so that
    /// `r · x^4 = (r >> 4) ^ SHIFT4[r & 0xF]`.
    const SHIFT4: [u32; 16] = {
        let mut t = [0u32; 16];
        let mut v = 0;
        while v < 16 {
            t[v] = mul_mod(v as u32, ONE >> 4);
            v += 1;
        }
        t
    };

    /// `a · b mod P`, four bits of `a` per step (Horner from `a`'s highest
    /// powers down) with the 16 multiples of `b` by a 4-bit polynomial made
    /// first: equal to [`mul_mod`], ≈ 60 instructions instead of ≈ 200.
    pub(super) fn mul_mod_fast(a: u32, b: u32) -> u32 {
        // m[v] = v(x) · b where v's bit 3 is x^0 and bit 0 is x^3 (reflected,
        // as the 4 bits of `a` at one shift).
        let mut m = [0u32; 16];
        let times_x = |c: u32| (c >> 1) ^ (POLY & (c & 1).wrapping_neg());
        m[8] = b;
        m[4] = times_x(m[8]);
        m[2] = times_x(m[4]);
        m[1] = times_x(m[2]);
        for v in [3usize, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15] {
            let low = v & v.wrapping_neg();
            m[v] = m[low] ^ m[v ^ low];
        }
        // Bits 0..3 of `a` hold x^28..x^31: the highest powers come first.
        let mut r = m[(a & 0xF) as usize];
        let mut shift = 4;
        while shift < 32 {
            r = (r >> 4) ^ SHIFT4[(r & 0xF) as usize] ^ m[((a >> shift) & 0xF) as usize];
            shift += 4;
        }
        r
    }

    /// Datagram lengths (bytes after the ID field) with a direct entry in
    /// [`NEG_LO`]: every packet up to a 4096-byte path MTU and its headers.
    const NEG_LO_LEN: usize = 8192;
    /// `NEG_LO[n] = x^-(8·n) mod P` for `n < NEG_LO_LEN` (32 KiB).
    static NEG_LO: [u32; NEG_LO_LEN] = {
        let mut t = [0u32; NEG_LO_LEN];
        t[0] = ONE;
        let step = pow(X_INV, 8);
        let mut n = 1;
        while n < NEG_LO_LEN {
            t[n] = mul_mod(t[n - 1], step);
            n += 1;
        }
        t
    };
    /// `NEG_HI[k] = x^-(8·NEG_LO_LEN·k) mod P`: with [`NEG_LO`], every length
    /// below 9 · 8192 = 73 728 bytes (any UDP datagram).
    const NEG_HI: [u32; 9] = {
        let mut t = [0u32; 9];
        t[0] = ONE;
        let step = pow(X_INV, 8 * NEG_LO_LEN as u64);
        let mut k = 1;
        while k < t.len() {
            t[k] = mul_mod(t[k - 1], step);
            k += 1;
        }
        t
    };

    /// `x^-(8·bytes) mod P` by table: one lookup below 8192 bytes, two and a
    /// multiplication below 73 728, [`x_pow_neg_8n`] beyond (no UDP datagram).
    pub(super) fn x_pow_neg_8n_fast(bytes: usize) -> u32 {
        if bytes < NEG_LO_LEN {
            return NEG_LO[bytes];
        }
        match NEG_HI.get(bytes / NEG_LO_LEN) {
            Some(&hi) => mul_mod_fast(hi, NEG_LO[bytes % NEG_LO_LEN]),
            None => x_pow_neg_8n(bytes),
        }
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

    /// The number of pivots of [`ID_BASIS`]: the 16 ID columns are
    /// independent, so every ID gives a distinct difference.
    const ID_RANK: u32 = {
        let mut rank = 0;
        let mut i = 0;
        while i < 32 {
            if ID_BASIS[i].0 != 0 {
                rank += 1;
            }
            i += 1;
        }
        rank
    };
    const _: () = assert!(ID_RANK == 16);

    /// The bit positions no basis vector leads at: where a difference outside
    /// the ID columns' span leaves something after the reduction.
    const FREE_MASK: u32 = {
        let mut mask = 0u32;
        let mut i = 0;
        while i < 32 {
            if ID_BASIS[i].0 == 0 {
                mask |= 1 << i;
            }
            i += 1;
        }
        mask
    };

    /// Reduces `t` by [`ID_BASIS`] at every pivot from the top: (the ID of the
    /// part in the span, the rest). Both are linear in `t` (the rest is the
    /// one vector of `t`'s coset with zeros at the pivots), so they can be
    /// tabulated per byte and combined by XOR.
    const fn reduce(mut t: u32) -> (u16, u32) {
        let mut id = 0u16;
        let mut pivot = 32;
        while pivot > 0 {
            pivot -= 1;
            let (v, combo) = ID_BASIS[pivot];
            if t & (1 << pivot) != 0 && v != 0 {
                t ^= v;
                id ^= combo;
            }
        }
        (id, t)
    }

    /// The rest of [`reduce`] (bits at [`FREE_MASK`] only) packed into 16 bits.
    const fn pack_free(rest: u32) -> u32 {
        let (mut out, mut at, mut i) = (0u32, 0, 0);
        while i < 32 {
            if FREE_MASK & (1 << i) != 0 {
                out |= ((rest >> i) & 1) << at;
                at += 1;
            }
            i += 1;
        }
        out
    }

    /// `SOLVE[k][v]`: [`reduce`] of byte `v` at byte `k` of a register value,
    /// as `id | packed rest << 16` (4 KiB).
    static SOLVE: [[u32; 256]; 4] = {
        let mut t = [[0u32; 256]; 4];
        let mut k = 0;
        while k < 4 {
            let mut v = 0;
            while v < 256 {
                let (id, rest) = reduce((v as u32) << (8 * k));
                t[k][v] = id as u32 | pack_free(rest) << 16;
                v += 1;
            }
            k += 1;
        }
        t
    };

    /// The ID whose bits, fed `after_id` bytes before the end, change the CRC
    /// by `delta`; `None` if no ID does. Undo the shift (multiply by
    /// x^-(8·after_id), a table entry), then express the result in the ID
    /// columns' basis (four table entries): equal to [`solve_id_slow`].
    pub(super) fn solve_id(delta: u32, after_id: usize) -> Option<u16> {
        let t = mul_mod_fast(delta, x_pow_neg_8n_fast(after_id));
        let e = SOLVE[0][(t & 0xFF) as usize]
            ^ SOLVE[1][((t >> 8) & 0xFF) as usize]
            ^ SOLVE[2][((t >> 16) & 0xFF) as usize]
            ^ SOLVE[3][(t >> 24) as usize];
        (e >> 16 == 0).then_some(e as u16)
    }

    /// [`solve_id`] bit by bit (the reference): bit-serial shift, then
    /// elimination one pivot at a time.
    #[cfg(test)]
    pub(super) fn solve_id_slow(delta: u32, after_id: usize) -> Option<u16> {
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

        #[test]
        fn tables_match_the_bit_serial_powers_at_their_edges() {
            for n in [
                0usize, 1, 2, 8191, 8192, 8193, 16383, 16384, 65535, 65549, 73727, 73728, 100_000,
            ] {
                assert_eq!(x_pow_neg_8n_fast(n), x_pow_neg_8n(n), "n={n}");
            }
        }

        #[test]
        fn a_zero_difference_is_id_zero_at_every_length() {
            // verify_received skips the solve when the difference is zero.
            let edges = [8191usize, 8192, 8193, 73_727, 73_728, 100_000];
            for after_id in (0..74_000).step_by(13).chain(edges) {
                assert_eq!(solve_id(0, after_id), Some(0), "after_id={after_id}");
                assert_eq!(solve_id_slow(0, after_id), Some(0), "after_id={after_id}");
            }
        }

        #[test]
        fn every_id_is_recovered_at_one_length() {
            // All 2^16 IDs at a 64-byte WRITE's length (22 + 12 + 16 + 64).
            let after_id = 114;
            let shift = x_pow_8n(after_id);
            for id in 0..=u16::MAX {
                let delta = (0..16)
                    .filter(|b| id & (1 << b) != 0)
                    .fold(0, |acc, b| acc ^ ID_COLUMNS[b]);
                assert_eq!(solve_id(mul_mod(delta, shift), after_id), Some(id));
            }
        }

        proptest::proptest! {
            #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4000))]

            #[test]
            fn fast_multiply_is_the_bit_serial_one(a: u32, b: u32) {
                proptest::prop_assert_eq!(mul_mod_fast(a, b), mul_mod(a, b));
            }

            #[test]
            fn table_power_is_the_bit_serial_one(n in 0usize..100_000) {
                proptest::prop_assert_eq!(x_pow_neg_8n_fast(n), x_pow_neg_8n(n));
            }

            #[test]
            fn solve_agrees_with_the_reference_on_any_difference(
                delta: u32,
                after_id in 0usize..100_000,
            ) {
                // Most random differences fit no ID (None on both sides).
                proptest::prop_assert_eq!(solve_id(delta, after_id), solve_id_slow(delta, after_id));
            }

            #[test]
            fn solve_agrees_with_the_reference_on_id_differences(
                id: u16,
                after_id in 0usize..100_000,
            ) {
                let delta = (0..16)
                    .filter(|b| id & (1 << b) != 0)
                    .fold(0, |acc, b| acc ^ ID_COLUMNS[b]);
                let shifted = mul_mod(delta, x_pow_8n(after_id));
                proptest::prop_assert_eq!(solve_id(shifted, after_id), Some(id));
                proptest::prop_assert_eq!(solve_id_slow(shifted, after_id), Some(id));
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

    /// [`verify_received`] with the bit-serial solver: the oracle.
    fn verify_received_slow(ep: &Endpoints, transport: &[u8]) -> Result<Option<u16>, Error> {
        let mut encap = Encap::from_addrs(ep.src, ep.dst, ep.src_port).unwrap();
        encap.dst_port = ep.dst_port;
        let found = stored(transport)?;
        let computed = compute(&encap, transport)?;
        let after_id = (IPV4_LEN - 6) + UDP_LEN + (transport.len() - LEN);
        match gf2::solve_id_slow(found ^ computed, after_id) {
            Some(id) => Ok(Some(id)),
            None => Err(Error::BadIcrc { found, computed }),
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1000))]

        /// Random IPv4 packets of random lengths (up to a jumbo MTU), sealed with a
        /// random ID: both solvers recover it; with one bit flipped anywhere the
        /// ICRC covers, both give the same answer (almost always `BadIcrc`).
        #[test]
        fn received_ids_match_the_reference(
            src: [u8; 4],
            dst: [u8; 4],
            sport: u16,
            id: u16,
            seed: u64,
            len in 16usize..9200,
            flip in proptest::prelude::any::<proptest::sample::Index>(),
        ) {
            let mut encap = Encap::ipv4(src.into(), dst.into(), sport);
            if let IpInfo::V4(v4) = &mut encap.ip {
                v4.id = id;
            }
            let mut x = seed | 1;
            let mut t: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            seal(&encap, &mut t).unwrap();
            let ep = Endpoints {
                src: src.into(),
                dst: dst.into(),
                src_port: sport,
                dst_port: encap.dst_port,
            };
            proptest::prop_assert_eq!(verify_received(&ep, &t).unwrap(), Some(id));
            proptest::prop_assert_eq!(verify_received_slow(&ep, &t).unwrap(), Some(id));
            // A flipped bit outside the masked BTH byte.
            let mut bit = flip.index((len - 1) * 8);
            if bit / 8 >= BTH_MASKED_BYTE {
                bit += 8;
            }
            t[bit / 8] ^= 1 << (bit % 8);
            let fast = verify_received(&ep, &t);
            proptest::prop_assert_eq!(&fast, &verify_received_slow(&ep, &t));
            proptest::prop_assert_ne!(fast.ok(), Some(Some(id)));
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1000))]

        /// Packets sent with ID 0 (the zero-difference shortcut of
        /// [`verify_received`]): the answer is the bit-serial oracle's, intact
        /// or with one bit flipped anywhere, masked byte and ICRC included.
        #[test]
        fn id_zero_packets_match_the_reference(
            src: [u8; 4],
            dst: [u8; 4],
            sport: u16,
            len in 16usize..5000,
            seed: u8,
            flip in proptest::prelude::any::<proptest::sample::Index>(),
        ) {
            let encap = Encap::ipv4(src.into(), dst.into(), sport);
            let mut t: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(seed | 1) ^ seed).collect();
            seal(&encap, &mut t).unwrap();
            let ep = Endpoints {
                src: src.into(),
                dst: dst.into(),
                src_port: sport,
                dst_port: encap.dst_port,
            };
            proptest::prop_assert_eq!(verify_received(&ep, &t), Ok(Some(0)));
            proptest::prop_assert_eq!(verify_received_slow(&ep, &t), Ok(Some(0)));
            let bit = flip.index(len * 8);
            t[bit / 8] ^= 1 << (bit % 8);
            proptest::prop_assert_eq!(verify_received(&ep, &t), verify_received_slow(&ep, &t));
        }
    }

    /// [`compute`] as it was first written: the pseudo-header through
    /// `emit_ip_udp`, then four CRC updates over the pieces.
    fn compute_by_pieces(encap: &Encap, transport: &[u8]) -> Result<u32, Error> {
        crate::field::check_len("BTH+ICRC", transport, bth::LEN + LEN)?;
        let mut pseudo = [0u8; PSEUDO_MAX];
        let n = pseudo_header_by_emit(encap, transport.len(), &mut pseudo)?;
        let covered = &transport[..transport.len() - LEN];
        let mut h = crc32fast::Hasher::new();
        h.update(&pseudo[..n]);
        h.update(&covered[..BTH_MASKED_BYTE]);
        h.update(&[0xFF]);
        h.update(&covered[BTH_MASKED_BYTE + 1..]);
        Ok(h.finalize())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// The field-by-field IPv4 pseudo-header and the two-update CRC
        /// (pseudo-header and BTH from one buffer, the rest in place) give
        /// the oracle's ICRC, for any header values (masked ones included)
        /// and lengths from the shortest packet up; IPv6 too.
        #[test]
        fn compute_agrees_with_the_pieces(
            src: [u8; 16],
            dst: [u8; 16],
            v6: bool,
            ports: (u16, u16, u16),
            fields: (u8, u16, u16, u8, u32),
            len in 16usize..300,
            seed: u8,
        ) {
            let (tos, id, flags_frag, ttl, flow) = fields;
            let mut encap = if v6 {
                Encap::ipv6(src.into(), dst.into(), ports.0)
            } else {
                let s: [u8; 4] = src[..4].try_into().unwrap();
                let d: [u8; 4] = dst[..4].try_into().unwrap();
                Encap::ipv4(s.into(), d.into(), ports.0)
            };
            (encap.dst_port, encap.udp_checksum) = (ports.1, ports.2);
            match &mut encap.ip {
                IpInfo::V4(v4) => (v4.tos, v4.id, v4.flags_frag, v4.ttl) = (tos, id, flags_frag, ttl),
                IpInfo::V6(v6) => {
                    (v6.traffic_class, v6.flow_label, v6.hop_limit) = (tos, flow & 0xF_FFFF, ttl)
                }
            }
            let t: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(seed | 1) ^ seed).collect();
            proptest::prop_assert_eq!(compute(&encap, &t), compute_by_pieces(&encap, &t));
        }
    }

    #[test]
    fn compute_refuses_what_the_pieces_refuse() {
        let v4 = Encap::ipv4([1, 2, 3, 4].into(), [5, 6, 7, 8].into(), 9);
        for len in [65_507, 65_508, 65_515, 65_516, 70_000] {
            let t = vec![0u8; len];
            assert_eq!(compute(&v4, &t), compute_by_pieces(&v4, &t), "{len}");
        }
    }

    #[test]
    fn a_corrupted_packet_fails() {
        let encap = Encap::ipv4([10, 0, 0, 1].into(), [10, 0, 0, 2].into(), 0xc000);
        let ep = Endpoints {
            src: [10, 0, 0, 1].into(),
            dst: [10, 0, 0, 2].into(),
            src_port: 0xc000,
            dst_port: encap.dst_port,
        };
        let mut t = vec![0x5au8; 12 + 16 + 64 + 4];
        seal(&encap, &mut t).unwrap();
        assert_eq!(verify_received(&ep, &t).unwrap(), Some(0));
        for byte in [0usize, 12, 40, 91, 92, 95] {
            let mut bad = t.clone();
            bad[byte] ^= 0x10;
            assert!(
                matches!(verify_received(&ep, &bad), Err(Error::BadIcrc { .. })),
                "byte {byte}"
            );
        }
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

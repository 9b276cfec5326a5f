//! Which extension headers a packet carries, as a small bitset.
//!
//! Owns: [`HeaderSet`] and [`WIRE_ORDER`], the order and size of every
//! extension header after the BTH (roce-wire.md §4 "Header order", §5 sizes).

use core::fmt;

/// A set of extension headers (bitset over [`WIRE_ORDER`]).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HeaderSet(u16);

impl HeaderSet {
    pub const EMPTY: HeaderSet = HeaderSet(0);
    pub const RDETH: HeaderSet = HeaderSet(1 << 0);
    pub const DETH: HeaderSet = HeaderSet(1 << 1);
    pub const XRCETH: HeaderSet = HeaderSet(1 << 2);
    pub const FETH: HeaderSet = HeaderSet(1 << 3);
    pub const RETH: HeaderSet = HeaderSet(1 << 4);
    pub const ATOMIC_ETH: HeaderSet = HeaderSet(1 << 5);
    pub const IMMDT: HeaderSet = HeaderSet(1 << 6);
    pub const IETH: HeaderSet = HeaderSet(1 << 7);
    pub const AETH: HeaderSet = HeaderSet(1 << 8);
    pub const ATOMIC_ACK_ETH: HeaderSet = HeaderSet(1 << 9);
    /// The 16 reserved zero bytes after the BTH of a CNP (§4.6).
    pub const CNP_RESERVED: HeaderSet = HeaderSet(1 << 10);

    /// Both sets.
    pub const fn with(self, other: HeaderSet) -> HeaderSet {
        HeaderSet(self.0 | other.0)
    }

    /// Every header of `other` is in `self`.
    pub const fn contains(self, other: HeaderSet) -> bool {
        self.0 & other.0 == other.0
    }

    /// No header.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The raw bits.
    pub const fn bits(self) -> u16 {
        self.0
    }

    /// The set with these raw bits (the inverse of [`HeaderSet::bits`];
    /// bits past [`WIRE_ORDER`] stand for no header and are dropped).
    pub const fn from_bits(bits: u16) -> HeaderSet {
        HeaderSet(bits & ((1 << WIRE_ORDER.len()) - 1))
    }

    /// Total bytes of these headers (not counting the 12-byte BTH).
    pub const fn byte_len(self) -> usize {
        let mut len = 0;
        let mut i = 0;
        while i < WIRE_ORDER.len() {
            if self.contains(WIRE_ORDER[i].0) {
                len += WIRE_ORDER[i].2;
            }
            i += 1;
        }
        len
    }

    /// The headers present, in wire order, with their names and sizes: one
    /// step per header present (bit `i` is `WIRE_ORDER[i]`), not per row.
    pub fn iter(self) -> impl Iterator<Item = (HeaderSet, &'static str, usize)> {
        let mut bits = self.0;
        core::iter::from_fn(move || {
            let row = WIRE_ORDER.get(bits.trailing_zeros() as usize)?;
            bits &= bits - 1;
            Some(*row)
        })
    }
}

/// Every extension header in the order it appears after the BTH (§4:
/// `BTH, [RDETH], [DETH], [XRCETH], [RETH | AtomicETH | FETH+RETH], [ImmDt | IETH],
/// [AETH], [AtomicAckETH]`), with its name and size in bytes (§5).
pub const WIRE_ORDER: [(HeaderSet, &str, usize); 11] = [
    (HeaderSet::RDETH, "RDETH", 4),
    (HeaderSet::DETH, "DETH", 8),
    (HeaderSet::XRCETH, "XRCETH", 4),
    (HeaderSet::FETH, "FETH", 4),
    (HeaderSet::RETH, "RETH", 16),
    (HeaderSet::ATOMIC_ETH, "AtomicETH", 28),
    (HeaderSet::IMMDT, "ImmDt", 4),
    (HeaderSet::IETH, "IETH", 4),
    (HeaderSet::AETH, "AETH", 4),
    (HeaderSet::ATOMIC_ACK_ETH, "AtomicAckETH", 8),
    (HeaderSet::CNP_RESERVED, "CNP reserved", 16),
];

/// [`HeaderSet::iter`] relies on it: row `i` of [`WIRE_ORDER`] is bit `i`.
const _: () = {
    let mut i = 0;
    while i < WIRE_ORDER.len() {
        assert!(WIRE_ORDER[i].0 .0 == 1 << i, "WIRE_ORDER row i is bit i");
        i += 1;
    }
};

impl fmt::Display for HeaderSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("{}");
        }
        f.write_str("{")?;
        for (i, (_, name, _)) in self.iter().enumerate() {
            if i > 0 {
                f.write_str("+")?;
            }
            f.write_str(name)?;
        }
        f.write_str("}")
    }
}

impl fmt::Debug for HeaderSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_display() {
        let set = HeaderSet::RETH.with(HeaderSet::IMMDT);
        assert_eq!(set.byte_len(), 20);
        assert_eq!(set.to_string(), "{RETH+ImmDt}");
        assert_eq!(HeaderSet::EMPTY.to_string(), "{}");
        assert!(set.contains(HeaderSet::RETH) && !set.contains(HeaderSet::AETH));
    }
}

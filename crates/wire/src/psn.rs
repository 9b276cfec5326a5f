//! 24-bit packet sequence numbers with serial arithmetic (roce-wire.md §9).
//!
//! Owns: [`Psn`] and [`PsnRegion`]. Promise: a `Psn` always holds a value below
//! 2^24; every operation wraps modulo 2^24. `Psn` deliberately has no `Ord`:
//! serial order is not transitive across the wrap, so comparisons go through
//! [`Psn::distance`] / [`Psn::is_after`] / [`Psn::in_window`].

use core::fmt;
use core::ops::{Add, Sub};

use crate::ids::U24_MASK;
use crate::Error;

/// A 24-bit packet sequence number. Invariant: value < 2^24.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

/// Where a received PSN falls relative to the expected one (§9, responder side).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PsnRegion {
    /// Equal to the expected PSN.
    InSequence,
    /// One of the 2^23 PSNs before the expected one.
    Duplicate,
    /// One of the 2^23 − 1 PSNs after the expected one.
    OutOfSequence,
}

impl Psn {
    /// PSN 0x000000.
    pub const ZERO: Psn = Psn(0);
    /// PSN 0xFFFFFF.
    pub const MAX: Psn = Psn(U24_MASK);
    /// Half the PSN space: the largest forward distance that still reads as "after".
    pub const HALF: u32 = 1 << 23;

    /// `OutOfRange` if `value` ≥ 2^24.
    pub const fn new(value: u32) -> Result<Self, Error> {
        if value > U24_MASK {
            return Err(Error::OutOfRange {
                field: "PSN",
                value: value as u64,
            });
        }
        Ok(Psn(value))
    }

    /// Keeps the low 24 bits (§9: initial PSNs are `sq_psn & 0xFFFFFF`).
    pub const fn from_masked(value: u32) -> Self {
        Psn(value & U24_MASK)
    }

    /// The 24-bit value.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// `self + 1` modulo 2^24 (§9).
    pub const fn next(self) -> Self {
        self.wrapping_add(1)
    }

    /// `self + n` modulo 2^24.
    pub const fn wrapping_add(self, n: u32) -> Self {
        Psn(self.0.wrapping_add(n) & U24_MASK)
    }

    /// `self − n` modulo 2^24.
    pub const fn wrapping_sub(self, n: u32) -> Self {
        Psn(self.0.wrapping_sub(n) & U24_MASK)
    }

    /// Forward offset from `base` to `self` in 0..2^24 (how many `next()` steps).
    pub const fn offset_from(self, base: Psn) -> u32 {
        self.0.wrapping_sub(base.0) & U24_MASK
    }

    /// Signed serial distance `self − other` in −2^23..2^23 (§9: the 24-bit
    /// difference sign-extended, i.e. `((a − b) << 8) as i32 >> 8`).
    pub const fn distance(self, other: Psn) -> i32 {
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// `self` comes after `other` in serial order (`distance > 0`).
    pub const fn is_after(self, other: Psn) -> bool {
        self.distance(other) > 0
    }

    /// `self` comes before `other` in serial order (`distance < 0`).
    pub const fn is_before(self, other: Psn) -> bool {
        self.distance(other) < 0
    }

    /// `self` lies in the `len` PSNs starting at `start` (`start ..= start+len−1`,
    /// modulo 2^24). A window longer than 2^24 contains every PSN.
    pub const fn in_window(self, start: Psn, len: u32) -> bool {
        len > U24_MASK || self.offset_from(start) < len
    }

    /// Classifies a received PSN against the expected one (§9, responder).
    pub const fn region(self, expected: Psn) -> PsnRegion {
        match self.distance(expected) {
            0 => PsnRegion::InSequence,
            d if d < 0 => PsnRegion::Duplicate,
            _ => PsnRegion::OutOfSequence,
        }
    }
}

impl Add<u32> for Psn {
    type Output = Psn;
    fn add(self, n: u32) -> Psn {
        self.wrapping_add(n)
    }
}

impl Sub<u32> for Psn {
    type Output = Psn;
    fn sub(self, n: u32) -> Psn {
        self.wrapping_sub(n)
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:06x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_at_2_pow_24() {
        assert_eq!(Psn::MAX.next(), Psn::ZERO);
        assert_eq!(Psn::ZERO - 1, Psn::MAX);
        assert_eq!(Psn::from_masked(0x1FF_FFFE) + 3, Psn::from_masked(1));
        assert!(Psn::new(1 << 24).is_err());
    }

    #[test]
    fn serial_comparison_across_the_wrap() {
        let (a, b) = (Psn::from_masked(2), Psn::MAX);
        assert_eq!(a.distance(b), 3);
        assert_eq!(b.distance(a), -3);
        assert!(a.is_after(b) && b.is_before(a));
        // Exactly half-way reads as "before" (§9: 2^23 duplicates, 2^23 − 1 ahead).
        let half = Psn::ZERO + Psn::HALF;
        assert_eq!(half.distance(Psn::ZERO), -(1 << 23));
        assert_eq!(half.region(Psn::ZERO), PsnRegion::Duplicate);
        assert_eq!((half - 1).region(Psn::ZERO), PsnRegion::OutOfSequence);
    }

    #[test]
    fn window_across_the_wrap() {
        let start = Psn::MAX - 1;
        assert!(start.in_window(start, 1));
        assert!(Psn::from_masked(1).in_window(start, 4));
        assert!(!Psn::from_masked(2).in_window(start, 4));
        assert!(!(start - 1).in_window(start, 4));
        assert!(!start.in_window(start, 0));
    }
}

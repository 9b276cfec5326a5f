//! Newtypes for the protocol numbers carried in headers.
//!
//! Owns: [`Qpn`], [`Msn`], [`XrcSrqn`], [`Eecn`] (24-bit), [`Rkey`], [`Lkey`],
//! [`Qkey`] (32-bit), [`PKey`] (16-bit). ([`crate::Psn`] lives in `psn.rs`.)
//! Promise: a 24-bit newtype always holds a value below 2^24; constructors either
//! reject (`new`) or mask (`from_masked`) wider values, so emitting one never
//! loses bits silently.

use core::fmt;

use crate::Error;

/// Mask of a 24-bit field.
pub const U24_MASK: u32 = 0x00FF_FFFF;

macro_rules! u24_newtype {
    ($(#[$doc:meta])* $name:ident, $field:literal) => {
        $(#[$doc])*
        ///
        /// Invariant: the value is < 2^24.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        pub struct $name(u32);

        impl $name {
            /// The largest value, 2^24 − 1.
            pub const MAX: Self = $name(U24_MASK);

            /// `OutOfRange` if `value` ≥ 2^24.
            pub const fn new(value: u32) -> Result<Self, Error> {
                if value > U24_MASK {
                    return Err(Error::OutOfRange { field: $field, value: value as u64 });
                }
                Ok($name(value))
            }

            /// Keeps the low 24 bits of `value`.
            pub const fn from_masked(value: u32) -> Self {
                $name(value & U24_MASK)
            }

            /// The 24-bit value.
            pub const fn get(self) -> u32 {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "0x{:06x}", self.0)
            }
        }
    };
}

macro_rules! u32_newtype {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        pub struct $name(pub u32);

        impl $name {
            /// The 32-bit value.
            pub const fn get(self) -> u32 {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "0x{:08x}", self.0)
            }
        }
    };
}

u24_newtype!(
    /// Queue pair number (BTH DestQP, DETH source QP).
    Qpn,
    "QPN"
);
u24_newtype!(
    /// Message sequence number carried in the AETH (§5); counts completed messages, wraps.
    Msn,
    "MSN"
);
u24_newtype!(
    /// XRC SRQ number carried in the XRCETH (§5).
    XrcSrqn,
    "XRC SRQN"
);
u24_newtype!(
    /// End-to-end context number carried in the RDETH (RD only, §5).
    Eecn,
    "EECN"
);

u32_newtype!(
    /// Remote key (RETH, AtomicETH, IETH). rxe's keys are `index << 8 | key`.
    Rkey
);
u32_newtype!(
    /// Local key of a memory region (never on the wire; here for symmetry with [`Rkey`]).
    Lkey
);
u32_newtype!(
    /// Queue key checked by UD receivers (DETH, §7 step 6).
    Qkey
);

impl Qpn {
    /// DestQP of multicast packets (§2).
    pub const MULTICAST: Qpn = Qpn(U24_MASK);
    /// The general services interface QP.
    pub const GSI: Qpn = Qpn(1);
}

impl Msn {
    /// The next MSN, wrapping at 2^24.
    pub const fn next(self) -> Self {
        Msn((self.0 + 1) & U24_MASK)
    }
}

impl Qkey {
    /// The GSI QP's Q_Key (§7 step 6).
    pub const GSI: Qkey = Qkey(0x8001_0000);
}

/// Partition key (BTH bytes 2–3). Bit 15 = full membership.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PKey(pub u16);

impl PKey {
    /// The RoCE default partition key (§3: rxe always sends 0xFFFF).
    pub const DEFAULT: PKey = PKey(0xFFFF);

    /// Bit 15: full member of the partition.
    pub const fn is_full_member(self) -> bool {
        self.0 & 0x8000 != 0
    }

    /// The receiver's P_Key check (§3, rxe `pkey_match`): low 15 bits equal and
    /// non-zero, and at least one of the two keys a full member.
    pub const fn matches(self, other: PKey) -> bool {
        let (a, b) = (self.0 & 0x7FFF, other.0 & 0x7FFF);
        a == b && a != 0 && (self.is_full_member() || other.is_full_member())
    }
}

impl Default for PKey {
    fn default() -> Self {
        PKey::DEFAULT
    }
}

impl fmt::Display for PKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:04x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn u24_rejects_or_masks_wide_values() {
        assert_eq!(Qpn::new(0xFF_FFFF).map(Qpn::get), Ok(0xFF_FFFF));
        assert_eq!(
            Qpn::new(0x100_0000),
            Err(Error::OutOfRange {
                field: "QPN",
                value: 0x100_0000
            })
        );
        assert_eq!(Qpn::from_masked(0x1234_5678).get(), 0x34_5678);
        assert_eq!(Msn::MAX.next(), Msn::default());
        assert_eq!(Qpn::from_masked(0x11).to_string(), "0x000011");
    }

    #[test]
    fn pkey_match_accepts_only_default_partition_pairs() {
        // §3: against 0xFFFF accept 0xFFFF and 0x7FFF, drop everything else.
        let ours = PKey::DEFAULT;
        assert!(ours.matches(PKey(0xFFFF)));
        assert!(ours.matches(PKey(0x7FFF)));
        assert!(!ours.matches(PKey(0x8000)));
        assert!(!ours.matches(PKey(0xFFFE)));
        assert!(!PKey(0x7FFF).matches(PKey(0x7FFF)));
        assert!(!PKey(0x8000).matches(PKey(0x8000)));
    }
}

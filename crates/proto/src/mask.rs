//! `enum ibv_qp_attr_mask` as a newtype bit set (values identical to the kernel's
//! `IB_QP_*`; `shared/spec/qp-state-machine.md` §2).

use std::fmt;
use std::ops::{BitAnd, BitOr, BitOrAssign, Not, Sub};

/// A set of `IBV_QP_*` attribute-mask bits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AttrMask(pub u32);

macro_rules! mask_bits {
    ($($name:ident = $bit:expr),* $(,)?) => {
        impl AttrMask {
            $(
                #[doc = concat!("`IBV_QP_", stringify!($name), "` (bit ", stringify!($bit), ").")]
                pub const $name: AttrMask = AttrMask(1 << $bit);
            )*
            /// Every named bit with its name, in bit order.
            pub const NAMED: &'static [(AttrMask, &'static str)] = &[
                $((AttrMask::$name, stringify!($name)),)*
            ];
        }
    };
}

mask_bits! {
    STATE = 0, CUR_STATE = 1, EN_SQD_ASYNC_NOTIFY = 2, ACCESS_FLAGS = 3, PKEY_INDEX = 4,
    PORT = 5, QKEY = 6, AV = 7, PATH_MTU = 8, TIMEOUT = 9, RETRY_CNT = 10, RNR_RETRY = 11,
    RQ_PSN = 12, MAX_QP_RD_ATOMIC = 13, ALT_PATH = 14, MIN_RNR_TIMER = 15, SQ_PSN = 16,
    MAX_DEST_RD_ATOMIC = 17, PATH_MIG_STATE = 18, CAP = 19, DEST_QPN = 20, RATE_LIMIT = 25,
}

impl AttrMask {
    /// The empty set.
    pub const EMPTY: AttrMask = AttrMask(0);
    /// `IB_QP_ATTR_STANDARD_BITS`: bits 0..=20.
    pub const STANDARD: AttrMask = AttrMask((1 << 21) - 1);
    /// Every bit a modify call may carry (standard bits plus RATE_LIMIT).
    pub const KNOWN: AttrMask = AttrMask(AttrMask::STANDARD.0 | AttrMask::RATE_LIMIT.0);

    /// True if every bit of `other` is in `self`.
    pub const fn contains(self, other: AttrMask) -> bool {
        self.0 & other.0 == other.0
    }

    /// True if no bit is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Builds a mask from several (const-friendly).
    pub const fn of(bits: &[AttrMask]) -> AttrMask {
        let mut m = 0;
        let mut i = 0;
        while i < bits.len() {
            m |= bits[i].0;
            i += 1;
        }
        AttrMask(m)
    }

    /// Iterates over the single-bit masks set in `self`, in bit order.
    pub fn iter(self) -> impl Iterator<Item = AttrMask> {
        (0..32)
            .map(|b| AttrMask(1 << b))
            .filter(move |m| self.contains(*m))
    }

    /// The verbs name of a single bit, e.g. `"DEST_QPN"`.
    pub fn name(self) -> Option<&'static str> {
        AttrMask::NAMED
            .iter()
            .find(|(m, _)| *m == self)
            .map(|(_, n)| *n)
    }

    /// Looks a bit up by its name, with or without the `IBV_QP_` prefix.
    pub fn from_name(name: &str) -> Option<AttrMask> {
        let name = name.trim().trim_start_matches("IBV_QP_");
        AttrMask::NAMED
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(m, _)| *m)
    }
}

impl fmt::Display for AttrMask {
    /// Comma-separated verbs names (`AV, PATH_MTU`), `—` for the empty set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("—");
        }
        let mut first = true;
        for bit in self.iter() {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            match bit.name() {
                Some(n) => f.write_str(n)?,
                None => write!(f, "bit{}", bit.0.trailing_zeros())?,
            }
        }
        Ok(())
    }
}

impl fmt::Debug for AttrMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AttrMask({self})")
    }
}

impl BitOr for AttrMask {
    type Output = AttrMask;
    fn bitor(self, rhs: AttrMask) -> AttrMask {
        AttrMask(self.0 | rhs.0)
    }
}

impl BitOrAssign for AttrMask {
    fn bitor_assign(&mut self, rhs: AttrMask) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for AttrMask {
    type Output = AttrMask;
    fn bitand(self, rhs: AttrMask) -> AttrMask {
        AttrMask(self.0 & rhs.0)
    }
}

impl Sub for AttrMask {
    type Output = AttrMask;
    /// Set difference.
    fn sub(self, rhs: AttrMask) -> AttrMask {
        AttrMask(self.0 & !rhs.0)
    }
}

impl Not for AttrMask {
    type Output = AttrMask;
    fn not(self) -> AttrMask {
        AttrMask(!self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_lists_names_in_bit_order() {
        let m = AttrMask::DEST_QPN | AttrMask::AV | AttrMask::PATH_MTU;
        assert_eq!(m.to_string(), "AV, PATH_MTU, DEST_QPN");
        assert_eq!(AttrMask::EMPTY.to_string(), "—");
        assert_eq!(AttrMask(1 << 22).to_string(), "bit22");
    }

    #[test]
    fn values_match_verbs_h() {
        assert_eq!(AttrMask::STATE.0, 1);
        assert_eq!(AttrMask::AV.0, 128);
        assert_eq!(AttrMask::DEST_QPN.0, 1 << 20);
        assert_eq!(AttrMask::RATE_LIMIT.0, 1 << 25);
        assert_eq!(AttrMask::from_name("IBV_QP_SQ_PSN"), Some(AttrMask::SQ_PSN));
    }
}

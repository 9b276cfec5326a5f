//! In-run A/B: which of two variants of the code runs now.
//!
//! Owns: the variant flag. Promise: without the `ab` feature
//! [`variant`] is `false`, a constant the compiler folds away, so code
//! under test (`if lanes::ab::variant() { new } else { old }`) costs
//! nothing in a normal build. With it, the driver (`sv_io::ab`) flips the
//! flag by the wall clock, the same in every process of the host, so the
//! two ends of a benchmark switch together and every phase of a noisy
//! machine falls on both variants (spec/performance.md §26).
//!
//! Why in this crate: the protocol core and the driver both depend on
//! it, so a variant may live in either.

#[cfg(feature = "ab")]
static VARIANT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether the variant under test (B) runs now; always `false` without
/// the `ab` feature.
#[inline]
pub fn variant() -> bool {
    #[cfg(feature = "ab")]
    {
        VARIANT.load(std::sync::atomic::Ordering::Relaxed)
    }
    #[cfg(not(feature = "ab"))]
    {
        false
    }
}

/// Sets the variant (the driver, at each post and progress pass); a
/// no-op without the `ab` feature.
#[inline]
pub fn set(_b: bool) {
    #[cfg(feature = "ab")]
    VARIANT.store(_b, std::sync::atomic::Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A normal build never runs variant B, whatever the driver sets.
    #[cfg(not(feature = "ab"))]
    #[test]
    fn without_the_feature_the_variant_is_always_a() {
        set(true);
        assert!(!variant());
    }

    /// With the feature, the variant is what the driver set last.
    #[cfg(feature = "ab")]
    #[test]
    fn with_the_feature_the_variant_is_the_last_set() {
        set(true);
        assert!(variant());
        set(false);
        assert!(!variant());
    }
}

//! Big-endian field access shared by the header views.
//!
//! Owns: the byte-level read/write helpers and the `Packet<T>` boilerplate macro.
//! Promise: every helper indexes `buf[at..at + N]`; callers only use offsets that
//! their `check_len` has proven to be in bounds, so after a successful length
//! check no accessor panics (DESIGN.md §3.3).

use crate::Error;

/// Returns `Truncated` unless `buf` holds at least `need` bytes of `header`.
pub(crate) fn check_len(header: &'static str, buf: &[u8], need: usize) -> Result<(), Error> {
    if buf.len() < need {
        return Err(Error::Truncated {
            header,
            need,
            have: buf.len(),
        });
    }
    Ok(())
}

fn array<const N: usize>(buf: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&buf[at..at + N]);
    out
}

pub(crate) fn read_u16(buf: &[u8], at: usize) -> u16 {
    u16::from_be_bytes(array(buf, at))
}

/// A 24-bit big-endian field (QPN, PSN, MSN, ...).
pub(crate) fn read_u24(buf: &[u8], at: usize) -> u32 {
    let [a, b, c] = array::<3>(buf, at);
    u32::from_be_bytes([0, a, b, c])
}

pub(crate) fn read_u32(buf: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(array(buf, at))
}

pub(crate) fn read_u64(buf: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(array(buf, at))
}

pub(crate) fn write_u16(buf: &mut [u8], at: usize, v: u16) {
    buf[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// Writes the low 24 bits of `v`.
pub(crate) fn write_u24(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
}

pub(crate) fn write_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

pub(crate) fn write_u64(buf: &mut [u8], at: usize, v: u64) {
    buf[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

/// Defines `Packet<T>` with `new_unchecked`, `new_checked`, `check_len`,
/// `into_inner` and `as_bytes` for a fixed-size header called `$name` of `$len` bytes.
macro_rules! fixed_header_view {
    ($name:literal, $len:expr) => {
        /// Zero-copy view of this header at the start of `buffer`.
        ///
        /// After [`Packet::check_len`] (or [`Packet::new_checked`]) succeeds no
        /// accessor panics; on an unchecked short buffer accessors may panic.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct Packet<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> Packet<T> {
            /// Wraps `buffer` without checking its length.
            pub const fn new_unchecked(buffer: T) -> Self {
                Packet { buffer }
            }

            /// Wraps `buffer` after checking that it holds the whole header.
            pub fn new_checked(buffer: T) -> Result<Self, $crate::Error> {
                let packet = Self::new_unchecked(buffer);
                packet.check_len()?;
                Ok(packet)
            }

            /// `Truncated` unless the buffer holds at least the header's bytes.
            pub fn check_len(&self) -> Result<(), $crate::Error> {
                $crate::field::check_len($name, self.buffer.as_ref(), $len)
            }

            /// Gives the buffer back.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            fn bytes(&self) -> &[u8] {
                self.buffer.as_ref()
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
            #[allow(dead_code)]
            fn bytes_mut(&mut self) -> &mut [u8] {
                self.buffer.as_mut()
            }
        }
    };
}
pub(crate) use fixed_header_view;

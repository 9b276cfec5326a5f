//! Bit fields in IBTA `Byte[Bit]:Width` notation (spec/cm.md §2).
//!
//! Owns: reading and writing a field of up to 32 bits that starts at bit
//! `bit` (0 = most significant) of byte `byte` and lies in the big-endian word
//! at `byte..byte + 4` — what `IBA_FIELD_BLOC` / `IBA_FIELD*_LOC` describe
//! (include/rdma/iba.h). Promise: indexes only `byte..byte + 4`; callers pass
//! offsets their `check_len` proved in bounds.

use crate::field;

const fn mask(width: u32) -> u32 {
    if width >= 32 {
        u32::MAX
    } else {
        (1u32 << width) - 1
    }
}

/// The `width`-bit field at `byte[bit]`.
pub(crate) fn get(buf: &[u8], byte: usize, bit: u32, width: u32) -> u32 {
    let shift = 32 - bit - width;
    (field::read_u32(buf, byte) >> shift) & mask(width)
}

/// Writes the low `width` bits of `value` at `byte[bit]`, leaving the other
/// bits of the word as they are.
pub(crate) fn set(buf: &mut [u8], byte: usize, bit: u32, width: u32, value: u32) {
    let shift = 32 - bit - width;
    let m = mask(width) << shift;
    let word = field::read_u32(buf, byte);
    field::write_u32(buf, byte, (word & !m) | ((value << shift) & m));
}

/// Defines getters/setters on `Packet<T>` and a `FIELDS` table from a list of
/// `(getter, setter) = (byte, bit, width)` entries.
macro_rules! cm_fields {
    ($( $(#[$doc:meta])* ($get:ident, $set:ident) = ($byte:expr, $bit:expr, $width:expr); )*) => {
        impl<T: AsRef<[u8]>> Packet<T> {
            $( $(#[$doc])* pub fn $get(&self) -> u32 {
                $crate::cm::bits::get(self.bytes(), $byte, $bit, $width)
            } )*
        }
        impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
            $( pub fn $set(&mut self, value: u32) {
                $crate::cm::bits::set(self.bytes_mut(), $byte, $bit, $width, value)
            } )*
        }
        /// `(getter, byte, bit, width)` of every bit field of this message.
        pub const FIELDS: &[(&str, usize, u32, u32)] =
            &[ $( (stringify!($get), $byte, $bit, $width) ),* ];
    };
}
pub(crate) use cm_fields;

/// Defines `private_data`/`private_data_mut` on `Packet<T>`: the
/// `PRIVATE_DATA_LEN` bytes at `PRIVATE_DATA_OFFSET` of the message's module.
macro_rules! cm_private_data {
    () => {
        impl<T: AsRef<[u8]>> Packet<T> {
            pub fn private_data(&self) -> &[u8] {
                &self.bytes()[PRIVATE_DATA_OFFSET..PRIVATE_DATA_OFFSET + PRIVATE_DATA_LEN]
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
            pub fn private_data_mut(&mut self) -> &mut [u8] {
                &mut self.bytes_mut()[PRIVATE_DATA_OFFSET..PRIVATE_DATA_OFFSET + PRIVATE_DATA_LEN]
            }
        }
    };
}
pub(crate) use cm_private_data;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_follow_ibta_bit_numbering() {
        // REQ byte 43: Remote CM Response Timeout 43[0]:5, Transport 43[5]:2, E2E 43[7]:1.
        let mut buf = [0u8; 8];
        set(&mut buf, 0, 24, 5, 20); // 43[0] as the low byte of the word at 40
        set(&mut buf, 0, 29, 2, 1);
        set(&mut buf, 0, 31, 1, 1);
        assert_eq!(buf[3], (20 << 3) | (1 << 1) | 1);
        assert_eq!(get(&buf, 0, 24, 5), 20);
        // A 24-bit field at bit 0 is the top three bytes.
        set(&mut buf, 4, 0, 24, 0xABCDEF);
        assert_eq!(&buf[4..7], &[0xAB, 0xCD, 0xEF]);
        assert_eq!(buf[7], 0);
        set(&mut buf, 4, 0, 32, 0x0102_0304);
        assert_eq!(get(&buf, 4, 0, 32), 0x0102_0304);
        // Values wider than the field are masked.
        set(&mut buf, 0, 31, 1, 0xFF);
        assert_eq!(get(&buf, 0, 31, 1), 1);
    }
}

//! Device memory (`ibv_alloc_dm`): the rules of allocation and of
//! `ibv_memcpy_to_dm` / `ibv_memcpy_from_dm`. softverbs emulates device
//! memory in host memory (spec/device-memory.md); regions over it are
//! zero-based ([`crate::mr::check_reg_dm`]).

use crate::Errno;

/// `max_dm_size`: the device memory a device offers, in bytes (shared by
/// every context of the device).
pub const MAX_DM_SIZE: u64 = 256 * 1024;
/// The largest `log_align_req`: device memory is page-aligned.
pub const MAX_LOG_ALIGN: u32 = 12;
/// Device memory is accessed in 4-byte words (mlx5's rule).
pub const ACCESS_GRANULE: u64 = 4;

/// Why an allocation or a copy was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DmError {
    /// `comp_mask` has bits this device does not know (`EINVAL`).
    #[error("alloc_dm: comp_mask {comp_mask:#x} must be 0")]
    CompMask {
        /// The mask given.
        comp_mask: u32,
    },
    /// A length of 0 or above `max_dm_size` (`EINVAL`).
    #[error("alloc_dm: length {length} is not within 1..={MAX_DM_SIZE} (max_dm_size)")]
    Length {
        /// The length asked for.
        length: u64,
    },
    /// An alignment above a page (`EINVAL`).
    #[error("alloc_dm: log_align_req {log_align} exceeds {MAX_LOG_ALIGN} (device memory is page-aligned)")]
    Align {
        /// The alignment asked for.
        log_align: u32,
    },
    /// The device's memory is used up (`ENOMEM`).
    #[error("alloc_dm: {length} bytes asked, {free} of {MAX_DM_SIZE} free on the device")]
    Exhausted {
        /// The length asked for.
        length: u64,
        /// What is left.
        free: u64,
    },
    /// A copy beyond the allocation (`EFAULT`).
    #[error(
        "memcpy {dir} dm: [{offset:#x}, +{length}) is beyond the {dm_len} bytes of device memory"
    )]
    OutOfBounds {
        /// "to" or "from".
        dir: &'static str,
        /// Offset in the device memory.
        offset: u64,
        /// Bytes to copy.
        length: u64,
        /// The allocation's length.
        dm_len: u64,
    },
    /// A copy whose offset or length is not a multiple of 4 (`EINVAL`).
    #[error("memcpy {dir} dm: offset {offset} and length {length} must be multiples of 4 (device memory is accessed in 4-byte words)")]
    Unaligned {
        /// "to" or "from".
        dir: &'static str,
        /// Offset in the device memory.
        offset: u64,
        /// Bytes to copy.
        length: u64,
    },
    /// Freeing device memory that memory regions still use (`EBUSY`).
    #[error(
        "free_dm: {users} memory region(s) still use this device memory; deregister them first"
    )]
    Busy {
        /// How many.
        users: usize,
    },
}

impl DmError {
    /// The errno Linux (mlx5) returns.
    pub fn errno(&self) -> Errno {
        match self {
            DmError::CompMask { .. }
            | DmError::Length { .. }
            | DmError::Align { .. }
            | DmError::Unaligned { .. } => Errno::EINVAL,
            DmError::Exhausted { .. } => Errno::ENOMEM,
            DmError::OutOfBounds { .. } => Errno::EFAULT,
            DmError::Busy { .. } => Errno::EBUSY,
        }
    }
}

/// Checks `ibv_alloc_dm` (mlx5_alloc_dm, kernel `UVERBS_METHOD_DM_ALLOC`)
/// against what is already allocated on the device (`in_use` bytes).
pub fn check_alloc(
    length: u64,
    log_align: u32,
    comp_mask: u32,
    in_use: u64,
) -> Result<(), DmError> {
    if comp_mask != 0 {
        return Err(DmError::CompMask { comp_mask });
    }
    if length == 0 || length > MAX_DM_SIZE {
        return Err(DmError::Length { length });
    }
    if log_align > MAX_LOG_ALIGN {
        return Err(DmError::Align { log_align });
    }
    let free = MAX_DM_SIZE.saturating_sub(in_use);
    if length > free {
        return Err(DmError::Exhausted { length, free });
    }
    Ok(())
}

/// Checks a copy of `length` bytes at `offset` of device memory of `dm_len`
/// bytes (mlx5_access_dm: bounds first, `EFAULT`; then 4-byte alignment).
pub fn check_copy(dir: &'static str, dm_len: u64, offset: u64, length: u64) -> Result<(), DmError> {
    if offset.checked_add(length).is_none_or(|end| end > dm_len) {
        return Err(DmError::OutOfBounds {
            dir,
            offset,
            length,
            dm_len,
        });
    }
    if !offset.is_multiple_of(ACCESS_GRANULE) || !length.is_multiple_of(ACCESS_GRANULE) {
        return Err(DmError::Unaligned {
            dir,
            offset,
            length,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_rules_and_their_errno() {
        assert_eq!(check_alloc(4, 0, 0, 0), Ok(()));
        assert_eq!(check_alloc(MAX_DM_SIZE, 6, 0, 0), Ok(()));
        let errno = |r: Result<(), DmError>| r.unwrap_err().errno();
        assert_eq!(errno(check_alloc(4, 0, 1, 0)), Errno::EINVAL);
        assert_eq!(errno(check_alloc(0, 0, 0, 0)), Errno::EINVAL);
        assert_eq!(errno(check_alloc(MAX_DM_SIZE + 1, 0, 0, 0)), Errno::EINVAL);
        assert_eq!(errno(check_alloc(4, 13, 0, 0)), Errno::EINVAL);
        let e = check_alloc(8, 0, 0, MAX_DM_SIZE - 4).unwrap_err();
        assert_eq!(e.errno(), Errno::ENOMEM);
        assert!(e.to_string().contains("4 of 262144 free"), "{e}");
    }

    #[test]
    fn copies_are_bounded_then_word_aligned() {
        assert_eq!(check_copy("to", 100, 96, 4), Ok(()));
        assert_eq!(check_copy("to", 100, 0, 0), Ok(()));
        for (off, len, errno) in [
            (3, 4, Errno::EINVAL),
            (4, 3, Errno::EINVAL),
            (104, 4, Errno::EFAULT),
            (0, 104, Errno::EFAULT),
            (97, 4, Errno::EFAULT),
            (u64::MAX, 4, Errno::EFAULT),
        ] {
            let e = check_copy("from", 100, off, len).unwrap_err();
            assert_eq!(e.errno(), errno, "{off}+{len}: {e}");
        }
    }
}

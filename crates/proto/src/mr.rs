//! Memory regions: registration rules, keys, and the bounds/access check that is
//! the security boundary of every local and remote access.

use crate::engine::PdHandle;
use crate::error::Error;
use crate::types::AccessFlags;

/// A registered memory region.
#[derive(Debug, Clone)]
pub struct Mr {
    /// Owning protection domain.
    pub pd: PdHandle,
    /// First byte's address.
    pub addr: u64,
    /// Length in bytes.
    pub length: u64,
    /// Access rights.
    pub access: AccessFlags,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

impl Mr {
    /// True if `[addr, addr + len)` lies inside the region (no overflow).
    pub fn contains(&self, addr: u64, len: u64) -> bool {
        let Some(end) = addr.checked_add(len) else { return false };
        addr >= self.addr && end <= self.addr + self.length
    }
}

/// Flags softverbs accepts and honours; the optional range (bits 20..=29) is
/// accepted and ignored as the man page allows.
const ACCEPTED: u32 = AccessFlags::LOCAL_WRITE.0
    | AccessFlags::REMOTE_WRITE.0
    | AccessFlags::REMOTE_READ.0
    | AccessFlags::REMOTE_ATOMIC.0
    | AccessFlags::MW_BIND.0
    | AccessFlags::HUGETLB.0;
/// Known flags that need device features softverbs does not have.
const UNSUPPORTED: u32 = AccessFlags::ZERO_BASED.0
    | AccessFlags::ON_DEMAND.0
    | AccessFlags::FLUSH_GLOBAL.0
    | AccessFlags::FLUSH_PERSISTENT.0;

/// Checks `ibv_reg_mr` arguments; returns the access flags in force.
pub fn check_reg(addr: u64, length: u64, access: u32) -> Result<AccessFlags, Error> {
    if addr.checked_add(length).is_none() {
        return Err(Error::invalid(format!(
            "reg_mr: addr {addr:#x} + length {length:#x} wraps around the address space"
        )));
    }
    let flags = AccessFlags(access & !AccessFlags::OPTIONAL_RANGE.0);
    let unsupported = flags.0 & UNSUPPORTED;
    if unsupported != 0 {
        return Err(Error::unsupported(format!(
            "reg_mr access flags {} (no on-demand paging, zero-based MRs or flush on this device)",
            AccessFlags(unsupported)
        )));
    }
    let unknown = flags.0 & !(ACCEPTED | UNSUPPORTED);
    if unknown != 0 {
        return Err(Error::invalid(format!("reg_mr: unknown access flag bits {unknown:#x}")));
    }
    // ibv_reg_mr(3): remote write or remote atomic access needs local write access.
    let needs_local = AccessFlags(AccessFlags::REMOTE_WRITE.0 | AccessFlags::REMOTE_ATOMIC.0);
    if flags.0 & needs_local.0 != 0 && !flags.contains(AccessFlags::LOCAL_WRITE) {
        return Err(Error::invalid(format!(
            "reg_mr access {flags}: REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE too (ibv_reg_mr(3))"
        )));
    }
    Ok(flags)
}

/// The (lkey, rkey) pair for the MR in table slot `index`, registration number
/// `serial`. The slot index sits above an 8-bit tag, so a key finds its slot in
/// O(1); the tag changes with every registration, so a stale key does not match
/// the slot's next MR (until 128 re-registrations later, as on hardware).
/// lkey and rkey always differ (bit 7).
pub fn keys(index: u32, serial: u32) -> (u32, u32) {
    let base = ((index + 1) << 8) | (serial & 0x7f);
    (base, base | 0x80)
}

/// The table slot a key points at, if any.
pub fn key_index(key: u32) -> Option<u32> {
    (key >> 8).checked_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_write_and_atomic_need_local_write() {
        for bad in [2u32, 8, 2 | 4, 8 | 4] {
            let e = check_reg(0x1000, 64, bad).unwrap_err();
            assert_eq!(e.errno(), crate::Errno::EINVAL, "{bad:#x}");
            assert!(e.to_string().contains("require LOCAL_WRITE"));
        }
        assert!(check_reg(0x1000, 64, 1 | 2 | 4 | 8).is_ok());
        assert!(check_reg(0x1000, 64, 4).is_ok());
        assert!(check_reg(0x1000, 64, 0).is_ok());
        assert!(check_reg(0x1000, 64, 1 | (1 << 20)).is_ok(), "optional range is ignored");
        assert_eq!(check_reg(0x1000, 64, 1 << 6).unwrap_err().errno(), crate::Errno::EOPNOTSUPP);
        assert_eq!(check_reg(0x1000, 64, 1 << 12).unwrap_err().errno(), crate::Errno::EINVAL);
        assert_eq!(check_reg(u64::MAX, 2, 0).unwrap_err().errno(), crate::Errno::EINVAL);
    }

    #[test]
    fn keys_differ_and_find_their_slot() {
        let (l, r) = keys(41, 3);
        assert_ne!(l, r);
        assert_eq!(key_index(l), Some(41));
        assert_eq!(key_index(r), Some(41));
        assert_eq!(key_index(0x7f), None);
        assert_ne!(keys(41, 4).0, l);
    }
}

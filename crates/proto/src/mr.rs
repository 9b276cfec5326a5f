//! Memory regions: registration rules, keys, and the bounds/access check that is
//! the security boundary of every local and remote access.

use crate::error::Error;
use crate::handle::{kind, PdHandle};
use crate::table::Table;
use crate::types::AccessFlags;

/// The memory-region table every remote and local access is checked against.
pub type MrTable = Table<Mr, kind::Mr>;

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
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        addr >= self.addr && end <= self.addr + self.length
    }
}

/// What an access wants to do with memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The device reads local memory (send/write source, via lkey).
    LocalRead,
    /// The device writes local memory (receive buffer, READ response, atomic result).
    LocalWrite,
    /// A peer reads (RDMA READ, via rkey).
    RemoteRead,
    /// A peer writes (RDMA WRITE, via rkey).
    RemoteWrite,
    /// A peer performs an atomic (via rkey; 8 bytes, 8-byte aligned).
    RemoteAtomic,
}

impl Access {
    /// The flag the MR must carry; `None` for local reads, always allowed.
    pub fn needs(self) -> Option<AccessFlags> {
        match self {
            Access::LocalRead => None,
            Access::LocalWrite => Some(AccessFlags::LOCAL_WRITE),
            Access::RemoteRead => Some(AccessFlags::REMOTE_READ),
            Access::RemoteWrite => Some(AccessFlags::REMOTE_WRITE),
            Access::RemoteAtomic => Some(AccessFlags::REMOTE_ATOMIC),
        }
    }

    /// Whether the key is an rkey (remote) or an lkey (local).
    pub fn is_remote(self) -> bool {
        matches!(
            self,
            Access::RemoteRead | Access::RemoteWrite | Access::RemoteAtomic
        )
    }
}

/// Why a memory access was refused. The data path maps local refusals to
/// `IBV_WC_LOC_PROT_ERR` and remote ones to a remote-access-error NAK.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    /// No MR has this key.
    #[error("{} {key:#x} names no memory region", if *.remote { "rkey" } else { "lkey" })]
    NoSuchKey {
        /// The key.
        key: u32,
        /// rkey (true) or lkey.
        remote: bool,
    },
    /// The MR belongs to another protection domain than the QP.
    #[error("key {key:#x} belongs to a different protection domain than the QP")]
    WrongPd {
        /// The key.
        key: u32,
    },
    /// The range is not inside the MR.
    #[error(
        "[{addr:#x}, +{len}) is outside memory region [{mr_addr:#x}, +{mr_len}) of key {key:#x}"
    )]
    OutOfBounds {
        /// The key.
        key: u32,
        /// Start of the access.
        addr: u64,
        /// Length of the access.
        len: u64,
        /// Start of the MR.
        mr_addr: u64,
        /// Length of the MR.
        mr_len: u64,
    },
    /// The MR lacks the access flag the operation needs.
    #[error("memory region of key {key:#x} does not allow {needed} (it has {has})")]
    NotPermitted {
        /// The key.
        key: u32,
        /// The flag needed.
        needed: AccessFlags,
        /// The flags the MR has.
        has: AccessFlags,
    },
    /// An atomic whose address is not 8-byte aligned or whose length is not 8.
    #[error("atomic access at {addr:#x} length {len}: atomics need 8 bytes at an 8-byte-aligned address")]
    Misaligned {
        /// Address.
        addr: u64,
        /// Length.
        len: u64,
    },
}

impl Mr {
    /// The security boundary: may `pd` do `access` on `[addr, addr + len)` through
    /// `key` in this MR? Checks, in order: the key matches (lkey or rkey by
    /// `access`), the PD matches, the range lies inside, the flag is present.
    pub fn check(
        &self,
        pd: PdHandle,
        key: u32,
        addr: u64,
        len: u64,
        access: Access,
    ) -> Result<(), AccessError> {
        let remote = access.is_remote();
        let own_key = if remote { self.rkey } else { self.lkey };
        if own_key != key {
            return Err(AccessError::NoSuchKey { key, remote });
        }
        if self.pd != pd {
            return Err(AccessError::WrongPd { key });
        }
        if access == Access::RemoteAtomic && (len != 8 || !addr.is_multiple_of(8)) {
            return Err(AccessError::Misaligned { addr, len });
        }
        if !self.contains(addr, len) {
            let (mr_addr, mr_len) = (self.addr, self.length);
            return Err(AccessError::OutOfBounds {
                key,
                addr,
                len,
                mr_addr,
                mr_len,
            });
        }
        match access.needs() {
            Some(needed) if !self.access.contains(needed) => Err(AccessError::NotPermitted {
                key,
                needed,
                has: self.access,
            }),
            _ => Ok(()),
        }
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
        return Err(Error::invalid(format!(
            "reg_mr: unknown access flag bits {unknown:#x}"
        )));
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
        assert!(
            check_reg(0x1000, 64, 1 | (1 << 20)).is_ok(),
            "optional range is ignored"
        );
        assert_eq!(
            check_reg(0x1000, 64, 1 << 6).unwrap_err().errno(),
            crate::Errno::EOPNOTSUPP
        );
        assert_eq!(
            check_reg(0x1000, 64, 1 << 12).unwrap_err().errno(),
            crate::Errno::EINVAL
        );
        assert_eq!(
            check_reg(u64::MAX, 2, 0).unwrap_err().errno(),
            crate::Errno::EINVAL
        );
    }

    fn mr(access: u32) -> Mr {
        let pd = crate::handle::Handle::from_raw(1);
        let (lkey, rkey) = keys(3, 1);
        Mr {
            pd,
            addr: 0x1000,
            length: 0x100,
            access: AccessFlags(access),
            lkey,
            rkey,
        }
    }

    #[test]
    fn access_check_refuses_everything_outside_key_pd_bounds_and_flags() {
        let m = mr(1 | 2 | 4 | 8);
        let pd = m.pd;
        let other_pd = crate::handle::Handle::from_raw(2);
        assert_eq!(
            m.check(pd, m.rkey, 0x1000, 0x100, Access::RemoteWrite),
            Ok(())
        );
        assert_eq!(m.check(pd, m.lkey, 0x10ff, 1, Access::LocalWrite), Ok(()));
        assert_eq!(m.check(pd, m.rkey, 0x1008, 8, Access::RemoteAtomic), Ok(()));
        // An lkey is not an rkey, and the reverse.
        assert!(matches!(
            m.check(pd, m.lkey, 0x1000, 1, Access::RemoteRead),
            Err(AccessError::NoSuchKey { remote: true, .. })
        ));
        assert!(matches!(
            m.check(pd, m.rkey, 0x1000, 1, Access::LocalRead),
            Err(AccessError::NoSuchKey { remote: false, .. })
        ));
        assert!(matches!(
            m.check(other_pd, m.rkey, 0x1000, 1, Access::RemoteRead),
            Err(AccessError::WrongPd { .. })
        ));
        for (addr, len) in [(0xfff, 1), (0x10ff, 2), (0x1100, 1), (u64::MAX, 2)] {
            let r = m.check(pd, m.rkey, addr, len, Access::RemoteRead);
            assert!(
                matches!(r, Err(AccessError::OutOfBounds { .. })),
                "{addr:#x}+{len}: {r:?}"
            );
        }
        assert!(matches!(
            m.check(pd, m.rkey, 0x1004, 8, Access::RemoteAtomic),
            Err(AccessError::Misaligned { .. })
        ));
        assert!(matches!(
            m.check(pd, m.rkey, 0x1000, 4, Access::RemoteAtomic),
            Err(AccessError::Misaligned { .. })
        ));
        let ro = mr(4);
        let e = ro
            .check(pd, ro.rkey, 0x1000, 1, Access::RemoteWrite)
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("does not allow REMOTE_WRITE (it has REMOTE_READ)"),
            "{e}"
        );
        assert!(ro
            .check(pd, ro.lkey, 0x1000, 1, Access::LocalWrite)
            .is_err());
        assert!(ro.check(pd, ro.lkey, 0x1000, 1, Access::LocalRead).is_ok());
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

//! Memory regions: registration rules, keys, and the bounds/access check that is
//! the security boundary of every local and remote access.

use crate::handle::{kind, PdHandle};
use crate::refusal::{InvalidArg, Refusal, Unsupported};
use crate::table::Table;
use crate::types::AccessFlags;

/// The memory-region table every remote and local access is checked against.
pub type MrTable = Table<Mr, kind::Mr>;

/// A registered memory region.
#[derive(Debug, Clone)]
pub struct Mr {
    /// Owning protection domain.
    pub pd: PdHandle,
    /// First byte's address (what SGEs and RETHs name).
    pub addr: u64,
    /// Length in bytes.
    pub length: u64,
    /// Access rights.
    pub access: AccessFlags,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
    /// Where byte `addr` lives in the host's memory: `addr` itself, except for
    /// a zero-based region (device memory), whose `addr` is 0.
    pub host: u64,
}

impl Mr {
    /// The host address of `va`, a byte of the region (checked by the caller).
    pub fn host_of(&self, va: u64) -> u64 {
        self.host.wrapping_add(va.wrapping_sub(self.addr))
    }

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
    /// A peer flushes to global visibility (IBA 1.5 FLUSH, via rkey).
    RemoteFlush,
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
            Access::RemoteFlush => Some(AccessFlags::FLUSH_GLOBAL),
        }
    }

    /// Whether the key is an rkey (remote) or an lkey (local).
    pub fn is_remote(self) -> bool {
        matches!(
            self,
            Access::RemoteRead | Access::RemoteWrite | Access::RemoteAtomic | Access::RemoteFlush
        )
    }
}

/// Why a gather or scatter failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SglError {
    /// An element failed the memory-region check → `IBV_WC_LOC_PROT_ERR`.
    #[error(transparent)]
    Access(AccessError),
    /// The data does not fit the list → `IBV_WC_LOC_LEN_ERR`.
    #[error("{need} bytes do not fit the scatter/gather list's {have}")]
    Length {
        /// Bytes that had to fit (offset + data).
        need: u64,
        /// Bytes the list holds.
        have: u64,
    },
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
    /// A type 2 window's rkey used on another QP than the one that bound it.
    #[error("rkey {key:#x} is a type 2 memory window bound to another QP")]
    WrongQp {
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
    /// An on-demand-paging region whose pages could not be made present: the
    /// range is not mapped in the process (or not writable, for a write).
    #[error("on-demand region of key {key:#x}: [{addr:#x}, +{len}) is not mapped{} in the process (page fault failed)", if *.write { " writable" } else { "" })]
    NotPresent {
        /// The key.
        key: u32,
        /// Start of the access.
        addr: u64,
        /// Length of the access.
        len: u64,
        /// The access writes.
        write: bool,
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
    /// True for an on-demand-paging region (`IBV_ACCESS_ON_DEMAND`).
    pub fn on_demand(&self) -> bool {
        self.access.contains(AccessFlags::ON_DEMAND)
    }

    /// [`Mr::check`], then, for an on-demand region, the page fault: the
    /// range is made present through `mem` or the access is refused
    /// ([`AccessError::NotPresent`]) without a byte moving. Returns the host
    /// address of `addr`, where the bytes are ([`Mr::host_of`]).
    pub fn check_present(
        &self,
        pd: PdHandle,
        key: u32,
        addr: u64,
        len: u64,
        access: Access,
        mem: &dyn crate::memory::Memory,
    ) -> Result<u64, AccessError> {
        self.check(pd, key, addr, len, access)?;
        let host = self.host_of(addr);
        // An atomic is done in place with a 64-bit atomic, which needs an
        // aligned host address: a zero-based region (device memory at an odd
        // offset) can map an aligned `addr` to an unaligned byte.
        if access == Access::RemoteAtomic && !host.is_multiple_of(8) {
            return Err(AccessError::Misaligned { addr, len });
        }
        let write = matches!(
            access,
            Access::LocalWrite | Access::RemoteWrite | Access::RemoteAtomic
        );
        if self.on_demand() && len > 0 && !mem.fault_in(host, len, write) {
            return Err(AccessError::NotPresent {
                key,
                addr,
                len,
                write,
            });
        }
        Ok(host)
    }

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
    | AccessFlags::ON_DEMAND.0
    | AccessFlags::HUGETLB.0
    | AccessFlags::FLUSH_GLOBAL.0;
/// Known flags that need device features softverbs does not have (zero-based
/// user regions; persistent memory for FLUSH to persistence).
const UNSUPPORTED: u32 = AccessFlags::ZERO_BASED.0 | AccessFlags::FLUSH_PERSISTENT.0;

/// The length of an implicit on-demand region (`ibv_reg_mr(pd, NULL,
/// SIZE_MAX, IBV_ACCESS_ON_DEMAND)`): the whole address space (spec/odp.md).
pub const IMPLICIT_LEN: u64 = u64::MAX;

/// `struct ibv_odp_caps` as this device reports it (spec/odp.md): every
/// region may be on-demand, implicit ones too, for every operation of RC, UC
/// and UD (SRQ receives included), and XRC as RC (spec/xrc.md §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OdpCaps {
    /// `general_caps`: `IBV_ODP_SUPPORT` | `IBV_ODP_SUPPORT_IMPLICIT`.
    pub general: u64,
    /// `rc_odp_caps`.
    pub rc: u32,
    /// `uc_odp_caps`.
    pub uc: u32,
    /// `ud_odp_caps`.
    pub ud: u32,
    /// `xrc_odp_caps`.
    pub xrc: u32,
}

/// `IBV_ODP_SUPPORT_SEND`, `_RECV`, `_WRITE`, `_READ`, `_ATOMIC`, `_SRQ_RECV`.
const ODP_SEND: u32 = 1;
const ODP_RECV: u32 = 2;
const ODP_WRITE: u32 = 4;
const ODP_READ: u32 = 8;
const ODP_ATOMIC: u32 = 16;
const ODP_SRQ_RECV: u32 = 32;

/// What softverbs supports on demand: each operation of each transport it has.
pub const ODP_CAPS: OdpCaps = OdpCaps {
    general: 1 | 2,
    rc: ODP_SEND | ODP_RECV | ODP_WRITE | ODP_READ | ODP_ATOMIC | ODP_SRQ_RECV,
    uc: ODP_SEND | ODP_RECV | ODP_WRITE | ODP_SRQ_RECV,
    ud: ODP_SEND | ODP_RECV | ODP_SRQ_RECV,
    // XRC requests reach memory through the same checks as RC (spec/xrc.md §4).
    xrc: ODP_SEND | ODP_RECV | ODP_WRITE | ODP_READ | ODP_ATOMIC | ODP_SRQ_RECV,
};

/// Checks `ibv_reg_mr` arguments; returns the access flags in force.
pub fn check_reg(addr: u64, length: u64, access: u32) -> Result<AccessFlags, Refusal> {
    // An implicit region spans the whole address space: on demand only
    // (mlx5_ib_reg_user_mr: start 0, length U64_MAX, IB_ACCESS_ON_DEMAND).
    if length == IMPLICIT_LEN && (addr != 0 || access & AccessFlags::ON_DEMAND.0 == 0) {
        return Err(InvalidArg::ImplicitMr {
            addr,
            access: AccessFlags(access),
        }
        .into());
    }
    if addr.checked_add(length).is_none() {
        return Err(InvalidArg::MrWraps { addr, length }.into());
    }
    let flags = AccessFlags(access & !AccessFlags::OPTIONAL_RANGE.0);
    let unsupported = flags.0 & UNSUPPORTED;
    if unsupported != 0 {
        return Err(Unsupported::MrAccess {
            flags: AccessFlags(unsupported),
        }
        .into());
    }
    let unknown = flags.0 & !(ACCEPTED | UNSUPPORTED);
    if unknown != 0 {
        return Err(InvalidArg::MrUnknownAccess { bits: unknown }.into());
    }
    // ibv_reg_mr(3): remote write or remote atomic access needs local write access.
    let needs_local = AccessFlags(AccessFlags::REMOTE_WRITE.0 | AccessFlags::REMOTE_ATOMIC.0);
    if flags.0 & needs_local.0 != 0 && !flags.contains(AccessFlags::LOCAL_WRITE) {
        return Err(InvalidArg::MrRemoteWithoutLocalWrite { access: flags }.into());
    }
    Ok(flags)
}

/// What `ibv_rereg_mr` changes; `None` keeps the region's current value
/// (`IBV_REREG_MR_CHANGE_PD`, `_TRANSLATION`, `_ACCESS`; spec/mr-rereg.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rereg {
    /// `IBV_REREG_MR_CHANGE_PD`: the new protection domain.
    pub pd: Option<PdHandle>,
    /// `IBV_REREG_MR_CHANGE_TRANSLATION`: the new `(addr, length)`.
    pub translation: Option<(u64, u64)>,
    /// `IBV_REREG_MR_CHANGE_ACCESS`: the new access flags (raw `ibv_access_flags`).
    pub access: Option<u32>,
}

/// Checks a re-registration of `old`; returns the region it becomes (same
/// keys: the kernel's in-place path and rxe keep them). The PD's existence is
/// the engine's to check.
pub fn check_rereg(old: &Mr, r: &Rereg) -> Result<Mr, Refusal> {
    // Kernel ib_uverbs_rereg_mr: no flag at all is EINVAL.
    if r.pd.is_none() && r.translation.is_none() && r.access.is_none() {
        return Err(InvalidArg::ReregNoChange.into());
    }
    // A device-memory region is not a user region: the kernel's rereg takes
    // user MRs only (ib_uverbs_rereg_mr).
    if old.access.contains(AccessFlags::ZERO_BASED) {
        return Err(InvalidArg::ReregDeviceMemory.into());
    }
    // Paging is how the device reaches the memory: an on-demand region faults
    // per access, a pinned one was checked at registration. Switching in place
    // would leave one kind with the other's promise (mlx5 cannot either).
    if let Some(new) = r.access {
        if (new ^ old.access.0) & AccessFlags::ON_DEMAND.0 != 0 {
            return Err(Unsupported::ReregOnDemandSwitch {
                from: old.access,
                to: AccessFlags(new),
            }
            .into());
        }
    }
    let (addr, length) = r.translation.unwrap_or((old.addr, old.length));
    // ibv_rereg_mr (libibverbs) and ib_uverbs_rereg_mr: a new translation needs
    // a non-NULL address and a non-zero length.
    if r.translation.is_some() && (addr == 0 || length == 0) {
        return Err(InvalidArg::ReregTranslation { addr, length }.into());
    }
    let access = check_reg(addr, length, r.access.unwrap_or(old.access.0))?;
    Ok(Mr {
        pd: r.pd.unwrap_or(old.pd),
        addr,
        length,
        access,
        lkey: old.lkey,
        rkey: old.rkey,
        host: if r.translation.is_some() {
            addr
        } else {
            old.host
        },
    })
}

/// `enum ibv_advise_mr_advice`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// `IBV_ADVISE_MR_ADVICE_PREFETCH` (0): make pages present for reading.
    Prefetch,
    /// `IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE` (1): present and writable.
    PrefetchWrite,
    /// `IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT` (2): map what is present, fault nothing.
    PrefetchNoFault,
}

impl Advice {
    /// From the raw value.
    pub fn from_raw(v: u32) -> Option<Advice> {
        match v {
            0 => Some(Advice::Prefetch),
            1 => Some(Advice::PrefetchWrite),
            2 => Some(Advice::PrefetchNoFault),
            _ => None,
        }
    }
}

/// `IBV_ADVISE_MR_FLAG_FLUSH`: return once done (softverbs always does).
pub const ADVISE_MR_FLAG_FLUSH: u32 = 1;

/// Why `ibv_advise_mr` was refused, with the kernel's errno (mlx5_ib_advise_mr,
/// get_prefetchable_mr, pagefault_mr; spec/odp.md).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdviseError {
    /// An advice value this device does not know (`EOPNOTSUPP`).
    #[error("advise_mr: advice {advice} is not PREFETCH (0), PREFETCH_WRITE (1) or PREFETCH_NO_FAULT (2)")]
    Advice {
        /// The value given.
        advice: u32,
    },
    /// Flag bits beyond `IBV_ADVISE_MR_FLAG_FLUSH` (`EINVAL`).
    #[error("advise_mr: flags {flags:#x} has bits beyond IBV_ADVISE_MR_FLAG_FLUSH (0x1)")]
    Flags {
        /// The flags given.
        flags: u32,
    },
    /// The lkey names no on-demand region (`ENOENT`).
    #[error("advise_mr: lkey {lkey:#x} names no on-demand (IBV_ACCESS_ON_DEMAND) memory region")]
    NotOnDemand {
        /// The lkey.
        lkey: u32,
    },
    /// The region belongs to another PD (`EPERM`).
    #[error("advise_mr: lkey {lkey:#x} belongs to another protection domain")]
    WrongPd {
        /// The lkey.
        lkey: u32,
    },
    /// PREFETCH_WRITE on a region without local write (`EPERM`).
    #[error(
        "advise_mr: PREFETCH_WRITE on lkey {lkey:#x}, whose region lacks IBV_ACCESS_LOCAL_WRITE"
    )]
    NotWritable {
        /// The lkey.
        lkey: u32,
    },
    /// The range is outside the region (`EFAULT`).
    #[error("advise_mr: [{addr:#x}, +{len}) is outside the region of lkey {lkey:#x}")]
    OutOfBounds {
        /// The lkey.
        lkey: u32,
        /// Start.
        addr: u64,
        /// Length.
        len: u64,
    },
    /// The range could not be faulted in: not mapped (`EFAULT`).
    #[error("advise_mr: [{addr:#x}, +{len}) of lkey {lkey:#x} is not mapped{} in the process", if *.write { " writable" } else { "" })]
    NotMapped {
        /// The lkey.
        lkey: u32,
        /// Start.
        addr: u64,
        /// Length.
        len: u64,
        /// Faulted for writing.
        write: bool,
    },
}

impl AdviseError {
    /// The errno Linux (mlx5) returns.
    pub fn errno(&self) -> crate::Errno {
        use crate::Errno;
        match self {
            AdviseError::Advice { .. } => Errno::EOPNOTSUPP,
            AdviseError::Flags { .. } => Errno::EINVAL,
            AdviseError::NotOnDemand { .. } => Errno::ENOENT,
            AdviseError::WrongPd { .. } | AdviseError::NotWritable { .. } => Errno::EPERM,
            AdviseError::OutOfBounds { .. } | AdviseError::NotMapped { .. } => Errno::EFAULT,
        }
    }
}

/// `ibv_advise_mr`: checks every element (an on-demand region of `pd`,
/// writable for PREFETCH_WRITE, the range inside it), then faults each range
/// in through `mem` (not for PREFETCH_NO_FAULT, which only checks). Done
/// before returning, with or without `IBV_ADVISE_MR_FLAG_FLUSH`.
pub fn advise(
    mrs: &MrTable,
    pd: PdHandle,
    advice: u32,
    flags: u32,
    sges: &[crate::types::Sge],
    mem: &dyn crate::memory::Memory,
) -> Result<(), AdviseError> {
    let advice = Advice::from_raw(advice).ok_or(AdviseError::Advice { advice })?;
    if flags & !ADVISE_MR_FLAG_FLUSH != 0 {
        return Err(AdviseError::Flags { flags });
    }
    let write = advice == Advice::PrefetchWrite;
    for sge in sges {
        let (lkey, addr, len) = (sge.lkey, sge.addr, u64::from(sge.length));
        let mr = mr_by_key(mrs, lkey)
            .filter(|m| m.lkey == lkey && m.on_demand())
            .ok_or(AdviseError::NotOnDemand { lkey })?;
        if mr.pd != pd {
            return Err(AdviseError::WrongPd { lkey });
        }
        if write && !mr.access.contains(AccessFlags::LOCAL_WRITE) {
            return Err(AdviseError::NotWritable { lkey });
        }
        if !mr.contains(addr, len) {
            return Err(AdviseError::OutOfBounds { lkey, addr, len });
        }
    }
    if advice == Advice::PrefetchNoFault {
        return Ok(());
    }
    for sge in sges {
        let (addr, len) = (sge.addr, u64::from(sge.length));
        let host = mr_by_key(mrs, sge.lkey).map_or(addr, |m| m.host_of(addr));
        if len > 0 && !mem.fault_in(host, len, write) {
            let lkey = sge.lkey;
            return Err(AdviseError::NotMapped {
                lkey,
                addr,
                len,
                write,
            });
        }
    }
    Ok(())
}

/// The MR an lkey or rkey names (the slot index sits in the key's high bits).
pub fn mr_by_key(mrs: &MrTable, key: u32) -> Option<&Mr> {
    mrs.by_key(key)
}

/// A set of memory regions that can be looked up by key: the engine's table,
/// or the read-only copy posts use ([`view::MrView`]). The key names a slot;
/// [`Mr::check`] still compares the whole key.
pub trait MrKeys {
    /// The MR whose slot `key` names, if any (never for a window's key).
    fn by_key(&self, key: u32) -> Option<&Mr>;
}

impl MrKeys for MrTable {
    fn by_key(&self, key: u32) -> Option<&Mr> {
        if is_window_key(key) {
            return None;
        }
        self.get_by_index(key_index(key)?).map(|(_, m)| m)
    }
}

/// Checks `ibv_reg_dm_mr` arguments: a zero-based region (IBV_ACCESS_ZERO_BASED
/// mandatory) of `length` bytes at `offset` in device memory of `dm_len`
/// bytes (kernel `UVERBS_METHOD_DM_MR_REG`, spec/device-memory.md); returns
/// the access flags in force.
pub fn check_reg_dm(
    dm_len: u64,
    offset: u64,
    length: u64,
    access: u32,
) -> Result<AccessFlags, Refusal> {
    if access & AccessFlags::ZERO_BASED.0 == 0 {
        return Err(InvalidArg::DmMrNotZeroBased.into());
    }
    if offset > dm_len || length > dm_len - offset {
        return Err(InvalidArg::DmMrOutside {
            offset,
            length,
            dm_len,
        }
        .into());
    }
    if access & AccessFlags::ON_DEMAND.0 != 0 {
        return Err(InvalidArg::DmMrOnDemand.into());
    }
    let rest = access & !AccessFlags::ZERO_BASED.0;
    let flags = check_reg(0, length, rest)?;
    Ok(flags | AccessFlags::ZERO_BASED)
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

/// Window rkeys have bit 31 set; MR keys never do (their slot index is below 2^23).
const WINDOW_BIT: u32 = 1 << 31;

/// The rkey of window slot `index` with key part `key`.
pub fn window_key(index: u32, key: u8) -> u32 {
    WINDOW_BIT | ((index + 1) << 8) | u32::from(key)
}

/// True if `key` names a window rather than an MR.
pub fn is_window_key(key: u32) -> bool {
    key & WINDOW_BIT != 0
}

/// The table slot of a window rkey.
pub fn window_index(key: u32) -> Option<u32> {
    if !is_window_key(key) {
        return None;
    }
    ((key & !WINDOW_BIT) >> 8).checked_sub(1)
}

/// The table slot a key points at, if any.
pub fn key_index(key: u32) -> Option<u32> {
    (key >> 8).checked_sub(1)
}

pub mod mw;
pub mod view;

#[cfg(test)]
mod tests;

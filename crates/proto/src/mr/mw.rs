//! Memory windows (types 1 and 2B): their rkeys, the bind and invalidate
//! rules, and the remote-access check through a window
//! (`spec/memory-windows.md`).
//!
//! A window is a remote view of part of a memory region with its own rkey and
//! access rights. Promises:
//! - a window rkey never names an MR and an MR rkey never names a window
//!   (bit 31 tells them apart, [`super::is_window_key`]);
//! - remote access through a window is checked like an MR access: key (all 32
//!   bits), state, PD, the binding QP for type 2, the window's bounds, the
//!   window's access flags, then the region's bounds — before a byte moves;
//! - every refusal is a [`MwError`] that says which rule in words.

use super::{is_window_key, window_index, Access, AccessError, Mr, MrTable};
use crate::handle::{kind, MrHandle, PdHandle, QpHandle};
use crate::table::Table;
use crate::types::AccessFlags;

/// The memory-window table.
pub type MwTable = Table<Mw, kind::Mw>;

/// `enum ibv_mw_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MwType {
    /// `IBV_MW_TYPE_1`: bound by `ibv_bind_mw`, valid from allocation.
    One,
    /// `IBV_MW_TYPE_2` (2B): bound by a BIND_MW work request, to one QP.
    Two,
}

impl MwType {
    /// From the raw `ibv_mw_type`.
    pub fn from_raw(v: u32) -> Option<MwType> {
        match v {
            1 => Some(MwType::One),
            2 => Some(MwType::Two),
            _ => None,
        }
    }

    /// The raw value.
    pub fn raw(self) -> u32 {
        match self {
            MwType::One => 1,
            MwType::Two => 2,
        }
    }
}

/// What a bound window gives access to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binding {
    /// The region it lies in.
    pub mr: MrHandle,
    /// Start of the window as an address of the region.
    pub addr: u64,
    /// Length in bytes (0: a type 1 window bound to nothing).
    pub length: u64,
    /// Its access rights (remote bits and ZERO_BASED).
    pub access: AccessFlags,
    /// Type 2: the QP that bound it, the only one remote access may come through.
    pub qp: Option<QpHandle>,
}

impl Binding {
    /// True for a zero-based window: remote addresses are offsets from 0.
    pub fn zero_based(&self) -> bool {
        self.access.contains(AccessFlags::ZERO_BASED)
    }

    /// The first address remote accesses name.
    pub fn base(&self) -> u64 {
        if self.zero_based() {
            0
        } else {
            self.addr
        }
    }
}

/// A memory window.
#[derive(Debug, Clone)]
pub struct Mw {
    /// Owning protection domain.
    pub pd: PdHandle,
    /// Its type.
    pub mw_type: MwType,
    /// Its rkey now (the low 8 bits change with each bind).
    pub rkey: u32,
    /// What it is bound to (`None`: unbound; a type 2 window is then "free").
    pub binding: Option<Binding>,
}

/// The window a key names (whatever its key part: callers compare the rkey).
pub fn window_by_key(mws: &MwTable, key: u32) -> Option<(crate::handle::MwHandle, &Mw)> {
    mws.get_by_index(window_index(key)?)
}

/// A bind request: `ibv_bind_mw` (type 1) or an `IBV_WR_BIND_MW` work
/// request (type 2), as the send queue executes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BindRequest {
    /// The window.
    pub mw: crate::handle::MwHandle,
    /// The rkey the window has after the bind (its key part is the consumer's).
    pub rkey: u32,
    /// The region's lkey (`bind_info.mr`; `None` for a NULL MR).
    pub mr_lkey: Option<u32>,
    /// `bind_info.addr`.
    pub addr: u64,
    /// `bind_info.length`.
    pub length: u64,
    /// `bind_info.mw_access_flags`.
    pub access: u32,
}

/// Access flags a window may carry: the remote bits, ZERO_BASED, and
/// LOCAL_WRITE, which programs pass along with their MR's flags and which
/// means nothing for a window (rxe `RXE_ACCESS_SUPPORTED_MW`).
const WINDOW_ACCESS: u32 = AccessFlags::LOCAL_WRITE.0
    | AccessFlags::REMOTE_WRITE.0
    | AccessFlags::REMOTE_READ.0
    | AccessFlags::REMOTE_ATOMIC.0
    | AccessFlags::ZERO_BASED.0;

/// Why a bind, an invalidation or a deallocation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MwError {
    /// `ibv_alloc_mw` with a type that is neither 1 nor 2.
    #[error("alloc_mw: type {raw} is not IBV_MW_TYPE_1 (1) or IBV_MW_TYPE_2 (2)")]
    BadType {
        /// The value given.
        raw: u32,
    },
    /// The window handle names no window (deallocated).
    #[error("the memory window no longer exists (deallocated)")]
    NoSuchWindow,
    /// Window, QP and region must share one protection domain (IBA C10-72).
    #[error("bind_mw: the {what} belongs to another protection domain than the window")]
    WrongPd {
        /// "QP" or "memory region".
        what: &'static str,
    },
    /// The new rkey changes the window's index part (only the low 8 bits are the consumer's).
    #[error("bind_mw: rkey {rkey:#x} does not keep the window's index part (window rkey {current:#x}; only the low 8 bits may change)")]
    KeyIndex {
        /// The rkey asked for.
        rkey: u32,
        /// The window's rkey now.
        current: u32,
    },
    /// A type 2 window must be invalidated before it is bound again (IBA o10-37.2.30).
    #[error("bind_mw: type 2 window {rkey:#x} is bound; invalidate it (IBV_WR_LOCAL_INV or a SEND_WITH_INV) before binding it again")]
    Type2Bound {
        /// Its rkey.
        rkey: u32,
    },
    /// A type 2 window binds to a region with a non-zero length (IBA o10-37.2.40).
    #[error("bind_mw: a type 2 window needs a memory region and a non-zero length (it is invalidated, not bound to nothing)")]
    Type2Empty,
    /// `ibv_bind_mw` is for type 1 windows, BIND_MW work requests for type 2.
    #[error("bind_mw: a type {has} window is bound {how}")]
    WrongBindVerb {
        /// The window's type.
        has: u32,
        /// How it must be bound.
        how: &'static str,
    },
    /// Access flags outside what a window may carry.
    #[error("bind_mw: mw_access_flags {flags:#x} has bits a window cannot carry ({bad:#x}; allowed: LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC, ZERO_BASED)")]
    Access {
        /// The flags given.
        flags: u32,
        /// The bits not allowed.
        bad: u32,
    },
    /// A type 1 window cannot be zero-based (IBA o10-36.2.2).
    #[error("bind_mw: a type 1 window cannot be zero-based (IBV_ACCESS_ZERO_BASED)")]
    Type1ZeroBased,
    /// The lkey names no region.
    #[error("bind_mw: lkey {lkey:#x} names no memory region")]
    NoSuchMr {
        /// The lkey.
        lkey: u32,
    },
    /// The region was not registered with `IBV_ACCESS_MW_BIND` (IBA C10-73).
    #[error("bind_mw: the memory region of lkey {lkey:#x} was registered without IBV_ACCESS_MW_BIND (it has {has})")]
    NoBindAccess {
        /// The lkey.
        lkey: u32,
        /// Its flags.
        has: AccessFlags,
    },
    /// A zero-based region (device memory) cannot hold a window.
    #[error("bind_mw: the memory region of lkey {lkey:#x} is zero-based (device memory)")]
    ZeroBasedMr {
        /// The lkey.
        lkey: u32,
    },
    /// Remote write or atomic through a window needs local write on the region (IBA C10-74).
    #[error("bind_mw: a window with remote write or atomic access needs IBV_ACCESS_LOCAL_WRITE on its memory region (it has {has})")]
    NoLocalWrite {
        /// The region's flags.
        has: AccessFlags,
    },
    /// The window does not lie inside the region (IBA C10-75).
    #[error(
        "bind_mw: [{addr:#x}, +{length}) is outside memory region [{mr_addr:#x}, +{mr_length})"
    )]
    OutOfBounds {
        /// Window start.
        addr: u64,
        /// Window length.
        length: u64,
        /// Region start.
        mr_addr: u64,
        /// Region length.
        mr_length: u64,
    },
    /// The rkey to invalidate names no window (and regions here are never invalidated).
    #[error("invalidate: rkey {rkey:#x} names no memory window (memory regions registered with ibv_reg_mr cannot be invalidated)")]
    InvalidateNoWindow {
        /// The rkey.
        rkey: u32,
    },
    /// Type 1 windows are not invalidated by work requests (IBA o10-37.2.26).
    #[error("invalidate: rkey {rkey:#x} is a type 1 window; unbind it with a zero-length ibv_bind_mw instead")]
    InvalidateType1 {
        /// The rkey.
        rkey: u32,
    },
    /// The window is not bound (already invalidated, or never bound).
    #[error("invalidate: window rkey {rkey:#x} is not bound")]
    InvalidateUnbound {
        /// The rkey.
        rkey: u32,
    },
    /// Invalidation from a QP of another PD, or (remote) another QP than the binding one.
    #[error("invalidate: window rkey {rkey:#x} belongs to {what}")]
    InvalidateForeign {
        /// The rkey.
        rkey: u32,
        /// "another protection domain" / "another QP (type 2 windows are bound to one QP)".
        what: &'static str,
    },
    /// A region with windows bound to it is not deregistered.
    #[error("dereg_mr: {count} memory window(s) are bound to this region; invalidate or deallocate them first")]
    MrHasWindows {
        /// How many.
        count: usize,
    },
    /// A PD with windows is not deallocated.
    #[error("dealloc_pd: {count} memory window(s) were allocated on this protection domain; deallocate them first")]
    PdHasWindows {
        /// How many.
        count: usize,
    },
}

impl MwError {
    /// The errno: `EBUSY` for objects in use, else `EINVAL` (an unknown
    /// window type included: the type is invalid, not a feature left out).
    pub fn errno(&self) -> crate::Errno {
        use crate::Errno;
        match self {
            MwError::MrHasWindows { .. } | MwError::PdHasWindows { .. } => Errno::EBUSY,
            _ => Errno::EINVAL,
        }
    }
}

/// Checks and performs a bind executed by QP `qp` of PD `qp_pd`
/// (`spec/memory-windows.md` §3). Nothing changes on a refusal.
pub fn bind(
    mws: &mut MwTable,
    mrs: &MrTable,
    qp: QpHandle,
    qp_pd: PdHandle,
    req: &BindRequest,
) -> Result<u32, MwError> {
    let mw = mws.get(req.mw).ok_or(MwError::NoSuchWindow)?;
    if mw.pd != qp_pd {
        return Err(MwError::WrongPd { what: "QP" });
    }
    if window_index(req.rkey) != window_index(mw.rkey) {
        return Err(MwError::KeyIndex {
            rkey: req.rkey,
            current: mw.rkey,
        });
    }
    let access = AccessFlags(req.access);
    let bad = req.access & !WINDOW_ACCESS;
    if bad != 0 {
        return Err(MwError::Access {
            flags: req.access,
            bad,
        });
    }
    match mw.mw_type {
        MwType::One if access.contains(AccessFlags::ZERO_BASED) => {
            return Err(MwError::Type1ZeroBased)
        }
        MwType::Two if mw.binding.is_some() => return Err(MwError::Type2Bound { rkey: mw.rkey }),
        MwType::Two if req.mr_lkey.is_none() || req.length == 0 => return Err(MwError::Type2Empty),
        _ => {}
    }
    let binding = match req.mr_lkey {
        Some(lkey) if req.length > 0 => Some(check_region(mrs, mw.pd, lkey, req, access)?),
        _ => None,
    };
    let binding = binding.map(|mr| Binding {
        mr,
        addr: req.addr,
        length: req.length,
        access,
        qp: (mw.mw_type == MwType::Two).then_some(qp),
    });
    let mw = mws.get_mut(req.mw).ok_or(MwError::NoSuchWindow)?;
    // Only the key part is the consumer's (rxe rxe_do_bind_mw).
    mw.rkey = (mw.rkey & !0xff) | (req.rkey & 0xff);
    mw.binding = binding;
    Ok(mw.rkey)
}

/// The region rules of a bind (IBA C10-72..75).
fn check_region(
    mrs: &MrTable,
    pd: PdHandle,
    lkey: u32,
    req: &BindRequest,
    access: AccessFlags,
) -> Result<MrHandle, MwError> {
    let (h, mr) = mrs
        .get_by_index(super::key_index(lkey).ok_or(MwError::NoSuchMr { lkey })?)
        .filter(|(_, m)| m.lkey == lkey)
        .ok_or(MwError::NoSuchMr { lkey })?;
    if mr.pd != pd {
        return Err(MwError::WrongPd {
            what: "memory region",
        });
    }
    if mr.access.contains(AccessFlags::ZERO_BASED) {
        return Err(MwError::ZeroBasedMr { lkey });
    }
    if !mr.access.contains(AccessFlags::MW_BIND) {
        return Err(MwError::NoBindAccess {
            lkey,
            has: mr.access,
        });
    }
    let writes = AccessFlags::REMOTE_WRITE.0 | AccessFlags::REMOTE_ATOMIC.0;
    if access.0 & writes != 0 && !mr.access.contains(AccessFlags::LOCAL_WRITE) {
        return Err(MwError::NoLocalWrite { has: mr.access });
    }
    if !mr.contains(req.addr, req.length) {
        return Err(MwError::OutOfBounds {
            addr: req.addr,
            length: req.length,
            mr_addr: mr.addr,
            mr_length: mr.length,
        });
    }
    Ok(h)
}

/// Invalidates the type 2 window `rkey` names: `IBV_WR_LOCAL_INV` on a QP of
/// `pd` (`remote_qp: None`), or a SEND_WITH_INV received on QP `remote_qp`,
/// which must be the one the window is bound to.
pub fn invalidate(
    mws: &mut MwTable,
    pd: PdHandle,
    remote_qp: Option<QpHandle>,
    rkey: u32,
) -> Result<(), MwError> {
    let (h, mw) = window_by_key(mws, rkey)
        .filter(|(_, m)| m.rkey == rkey)
        .ok_or(MwError::InvalidateNoWindow { rkey })?;
    if mw.pd != pd {
        return Err(MwError::InvalidateForeign {
            rkey,
            what: "another protection domain",
        });
    }
    if mw.mw_type == MwType::One {
        return Err(MwError::InvalidateType1 { rkey });
    }
    let Some(b) = mw.binding else {
        return Err(MwError::InvalidateUnbound { rkey });
    };
    if remote_qp.is_some() && b.qp != remote_qp {
        return Err(MwError::InvalidateForeign {
            rkey,
            what: "another QP (type 2 windows are bound to one QP)",
        });
    }
    if let Some(m) = mws.get_mut(h) {
        m.binding = None;
    }
    Ok(())
}

/// The remote-access check through window `rkey` for QP `qp` of PD `pd`:
/// window key, PD, binding QP (type 2), window bounds and rights, then the
/// region's bounds and on-demand paging. Returns the host address of `va`.
#[allow(clippy::too_many_arguments)]
pub fn check_remote(
    mws: &MwTable,
    mrs: &MrTable,
    pd: PdHandle,
    qp: QpHandle,
    rkey: u32,
    va: u64,
    len: u64,
    access: Access,
    mem: &dyn crate::memory::Memory,
) -> Result<u64, AccessError> {
    let no_key = AccessError::NoSuchKey {
        key: rkey,
        remote: true,
    };
    let (_, mw) = window_by_key(mws, rkey)
        .filter(|(_, m)| m.rkey == rkey)
        .ok_or(no_key.clone())?;
    let b = mw.binding.ok_or(no_key.clone())?;
    if mw.pd != pd {
        return Err(AccessError::WrongPd { key: rkey });
    }
    if b.qp.is_some_and(|q| q != qp) {
        return Err(AccessError::WrongQp { key: rkey });
    }
    if access == Access::RemoteAtomic && (len != 8 || !va.is_multiple_of(8)) {
        return Err(AccessError::Misaligned { addr: va, len });
    }
    let base = b.base();
    let inside = va
        .checked_sub(base)
        .and_then(|off| off.checked_add(len))
        .is_some_and(|end| end <= b.length);
    if !inside {
        return Err(AccessError::OutOfBounds {
            key: rkey,
            addr: va,
            len,
            mr_addr: base,
            mr_len: b.length,
        });
    }
    if let Some(needed) = access.needs() {
        if !b.access.contains(needed) {
            return Err(AccessError::NotPermitted {
                key: rkey,
                needed,
                has: b.access,
            });
        }
    }
    let mr = mrs.get(b.mr).ok_or(no_key)?;
    let mr_va = b.addr + (va - base);
    mr.window_present(rkey, mr_va, len, access, mem)
}

impl Mr {
    /// The region half of a window access: `[addr, addr + len)` still inside
    /// the region (it may have been re-registered since the bind), then the
    /// page fault of an on-demand region. Returns the host address.
    pub fn window_present(
        &self,
        key: u32,
        addr: u64,
        len: u64,
        access: Access,
        mem: &dyn crate::memory::Memory,
    ) -> Result<u64, AccessError> {
        if !self.contains(addr, len) {
            return Err(AccessError::OutOfBounds {
                key,
                addr,
                len,
                mr_addr: self.addr,
                mr_len: self.length,
            });
        }
        let host = self.host_of(addr);
        if access == Access::RemoteAtomic && !host.is_multiple_of(8) {
            return Err(AccessError::Misaligned { addr, len });
        }
        let write = matches!(access, Access::RemoteWrite | Access::RemoteAtomic);
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
}

/// How many windows are bound to region `mr`.
pub fn windows_on(mws: &MwTable, mr: MrHandle) -> usize {
    mws.iter()
        .filter(|(_, w)| w.binding.is_some_and(|b| b.mr == mr))
        .count()
}

/// A remote access that passed its key check: the host address of its
/// first byte and, for a window's key, the windows' read lock, held until
/// the access is done (the caller drops this after touching the memory).
/// An invalidation or a bind on another thread waits for it, so once one
/// completes no access through the old key is still under way
/// (spec/concurrency.md §2, spec/memory-windows.md §4).
pub struct Checked<'a> {
    /// The host address of the access's first byte.
    pub host: u64,
    _window: Option<std::sync::RwLockReadGuard<'a, MwTable>>,
}

impl std::fmt::Debug for Checked<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checked")
            .field("host", &self.host)
            .field("window", &self._window.is_some())
            .finish()
    }
}

impl Checked<'_> {
    /// An access that needs no check (zero bytes): `va` as it is.
    pub fn unchecked(va: u64) -> Self {
        Checked {
            host: va,
            _window: None,
        }
    }
}

/// The remote-access check for any rkey: a window's ([`check_remote`], under
/// the windows' read lock, taken only for a window's key and kept in the
/// answer) or a region's ([`Mr::check_present`]).
#[allow(clippy::too_many_arguments)]
pub fn check_rkey<'a>(
    mws: &'a crate::lock::ReadMostly<MwTable>,
    mrs: &MrTable,
    pd: PdHandle,
    qp: QpHandle,
    rkey: u32,
    va: u64,
    len: u64,
    access: Access,
    mem: &dyn crate::memory::Memory,
) -> Result<Checked<'a>, AccessError> {
    if is_window_key(rkey) {
        let windows = mws.read();
        let host = check_remote(&windows, mrs, pd, qp, rkey, va, len, access, mem)?;
        return Ok(Checked {
            host,
            _window: Some(windows),
        });
    }
    let mr = super::mr_by_key(mrs, rkey).ok_or(AccessError::NoSuchKey {
        key: rkey,
        remote: true,
    })?;
    let host = mr.check_present(pd, rkey, va, len, access, mem)?;
    Ok(Checked {
        host,
        _window: None,
    })
}

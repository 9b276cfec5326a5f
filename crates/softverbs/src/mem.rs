//! Memory that the device reads and writes behind the program's back.
//!
//! Memory behind a memory region is shared, mutable and raced by the program,
//! exactly as with a NIC doing DMA. It is therefore never touched through Rust
//! references: only through raw-pointer copies, in this module, after a bounds
//! check. This module and the C-ABI crate are the only places with `unsafe`.
#![allow(unsafe_code)]

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

/// Page alignment for registered buffers.
const ALIGN: usize = 4096;

/// A zeroed, page-aligned heap buffer owned by a memory region.
pub(crate) struct Buffer {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer is plain bytes; all access goes through raw copies below
// whose bounds are checked, and concurrent access is the documented contract of
// registered memory (as with DMA).
unsafe impl Send for Buffer {}
// SAFETY: as above: `&Buffer` only offers bounds-checked raw copies.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// Allocates `len` zeroed bytes; `None` if the allocation fails.
    pub(crate) fn zeroed(len: usize) -> Option<Buffer> {
        if len == 0 {
            return Some(Buffer {
                ptr: NonNull::dangling(),
                len: 0,
            });
        }
        let layout = Layout::from_size_align(len, ALIGN).ok()?;
        // SAFETY: `layout` has non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        NonNull::new(ptr).map(|ptr| Buffer { ptr, len })
    }

    /// The address of the first byte, as the device sees it.
    pub(crate) fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn range(&self, offset: usize, n: usize) -> Option<usize> {
        let end = offset.checked_add(n)?;
        (end <= self.len).then_some(offset)
    }

    /// Copies `dst.len()` bytes from `offset`; `false` if out of bounds.
    pub(crate) fn read(&self, offset: usize, dst: &mut [u8]) -> bool {
        let Some(off) = self.range(offset, dst.len()) else {
            return false;
        };
        // SAFETY: `off + dst.len() <= self.len`, so the source lies inside our
        // allocation; `dst` is a distinct Rust slice, so the ranges do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), dst.as_mut_ptr(), dst.len())
        };
        true
    }

    /// Copies `src` to `offset`; `false` if out of bounds.
    pub(crate) fn write(&self, offset: usize, src: &[u8]) -> bool {
        let Some(off) = self.range(offset, src.len()) else {
            return false;
        };
        // SAFETY: `off + src.len() <= self.len`, so the destination lies inside
        // our allocation; `src` is a distinct Rust slice, so no overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(off), src.len())
        };
        true
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        if let Ok(layout) = Layout::from_size_align(self.len, ALIGN) {
            // SAFETY: allocated in `zeroed` with exactly this layout, freed once.
            unsafe { dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_checked() {
        let b = Buffer::zeroed(100).unwrap();
        assert_eq!(b.addr() % ALIGN as u64, 0);
        assert!(b.write(90, &[7; 10]));
        assert!(!b.write(91, &[7; 10]));
        assert!(!b.write(usize::MAX, &[1]));
        let mut out = [0u8; 11];
        assert!(!b.read(90, &mut out));
        assert!(b.read(89, &mut out));
        assert_eq!(out, [0, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7]);
        let empty = Buffer::zeroed(0).unwrap();
        assert!(empty.read(0, &mut []));
        assert!(!empty.read(0, &mut [0]));
    }
}

/// The device's view of the program's memory: raw copies and atomics at any
/// address. Sound only because `proto` calls it exclusively for ranges that
/// passed the memory-region check (key, PD, bounds, access) while holding the
/// engine lock or the read lock of the device's region copy
/// (`proto::mr::view::MrView`, an inline post's gather), and an MR's memory
/// outlives its registration: `MemoryRegion` deregisters (under the engine
/// lock, which takes the copy's write lock, so no gather is still reading)
/// before it frees its buffer, and the C ABI's callers promise the same for
/// the memory they register (`ibv_reg_mr(3)`).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct RawMemory;

impl proto::memory::Memory for RawMemory {
    fn read(&self, addr: u64, dst: &mut [u8]) {
        // SAFETY: see the type's doc: `[addr, addr + dst.len())` lies inside a
        // live registered region; `dst` is engine-owned, so no overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(addr as usize as *const u8, dst.as_mut_ptr(), dst.len())
        };
    }

    fn write(&self, addr: u64, src: &[u8]) {
        // SAFETY: as for `read`, and the region allowed this write.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), addr as usize as *mut u8, src.len()) };
    }

    /// The page fault of an on-demand region: `madvise(MADV_POPULATE_READ /
    /// _WRITE)` (Linux 5.14+) faults the pages in exactly as touching them
    /// would, and fails (instead of raising SIGSEGV) where the range is not
    /// mapped, or not writable for a write. Unmapping memory while an access
    /// to it is in flight stays the program's race, as with any region.
    fn fault_in(&self, addr: u64, len: u64, write: bool) -> bool {
        populate(addr, len, write).is_ok()
    }

    fn atomic(&self, addr: u64, op: proto::memory::AtomicOp) -> u64 {
        use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
        // SAFETY: the engine checked that these 8 bytes are 8-byte aligned and
        // inside a live region allowing remote atomics; the program may race on
        // them only through atomics or its own risk, as with a NIC.
        let word = unsafe { AtomicU64::from_ptr(addr as usize as *mut u64) };
        match op {
            proto::memory::AtomicOp::FetchAdd { add } => word.fetch_add(add, SeqCst),
            proto::memory::AtomicOp::Store { value } => word.swap(value, SeqCst),
            proto::memory::AtomicOp::CompareSwap { compare, swap } => word
                .compare_exchange(compare, swap, SeqCst, SeqCst)
                .unwrap_or_else(|v| v),
        }
    }
}

/// The system page size.
fn page_size() -> u64 {
    static PAGE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    // SAFETY: sysconf reads a constant of the system.
    *PAGE.get_or_init(|| match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as u64,
        _ => 4096,
    })
}

impl crate::pd::ProtectionDomain {
    /// `ibv_advise_mr`: prefetch (fault in) the ranges of on-demand regions
    /// of this PD (`advice`: 0 PREFETCH, 1 PREFETCH_WRITE, 2 PREFETCH_NO_FAULT;
    /// `flags`: `IBV_ADVISE_MR_FLAG_FLUSH` or 0; done before returning either
    /// way). Errors as the kernel's: `ENOENT` (no on-demand region), `EPERM`
    /// (another PD, or PREFETCH_WRITE without local write), `EFAULT` (outside
    /// the region, or not mapped), `EINVAL` (flags), `EOPNOTSUPP` (advice).
    pub fn advise_mr(
        &self,
        advice: u32,
        flags: u32,
        sges: &[proto::wr::Sge],
    ) -> Result<(), crate::Error> {
        let pd = self.inner.h;
        crate::error::logged(
            "advise_mr",
            self.inner
                .with(|e| e.advise_mr(pd, advice, flags, sges, &RawMemory)),
        )
    }
}

/// `ibv_reg_mr(pd, NULL, SIZE_MAX, access | IBV_ACCESS_ON_DEMAND)`: an
/// implicit on-demand region over the whole address space (the C ABI's;
/// re-exported as [`crate::raw::reg_implicit_odp_mr`]). Every access through
/// its keys faults the range in first and fails (never crashes) where nothing
/// is mapped.
///
/// # Safety
/// The device may then read (and, as `access` allows, write) any mapped
/// memory of the process, as a NIC with an implicit ODP region does: the
/// caller answers for every address it (or a peer holding the rkey) names, as
/// for [`reg_external_mr`].
pub unsafe fn reg_implicit_odp_mr(
    pd: &crate::pd::ProtectionDomain,
    access: proto::AccessFlags,
) -> Result<crate::raw::ExternalMemoryRegion, crate::Error> {
    let access = access | proto::AccessFlags::ON_DEMAND;
    crate::raw::ExternalMemoryRegion::register(pd.inner.clone(), 0, proto::mr::IMPLICIT_LEN, access)
}

/// `ibv_reg_mr` over `len` bytes at `addr` in this process, in `pd` (the C
/// ABI's; re-exported as [`crate::raw::reg_external_mr`]).
///
/// # Safety
/// `[addr, addr + len)` must stay mapped (readable, and writable if the
/// access flags allow any write) until the returned region is dropped: the
/// device reads and writes it at any time (through `RawMemory`), as a NIC
/// does by DMA. This is exactly the promise `ibv_reg_mr(3)` asks of C
/// callers, and what makes the device's raw accesses to this range sound.
pub unsafe fn reg_external_mr(
    pd: &crate::pd::ProtectionDomain,
    addr: u64,
    len: u64,
    access: proto::AccessFlags,
) -> Result<crate::raw::ExternalMemoryRegion, crate::Error> {
    // SAFETY: nothing unsafe happens here; the caller's promise above is
    // what RawMemory relies on once the engine knows the range.
    crate::raw::ExternalMemoryRegion::register(pd.inner.clone(), addr, len, access)
}

/// `ibv_rereg_mr` with `IBV_REREG_MR_CHANGE_TRANSLATION` (the C ABI's;
/// re-exported as [`crate::raw::rereg_external_mr_translation`]): `mr` now
/// covers `[addr, addr + len)` (and, if given, another PD and access flags),
/// all or nothing; the keys stay. Once this returns the device no longer
/// reaches the old range.
///
/// # Safety
/// The promise of [`reg_external_mr`], for the new range: it stays mapped
/// until the region is dropped or moved again.
pub unsafe fn rereg_external_mr_translation(
    mr: &mut crate::raw::ExternalMemoryRegion,
    addr: u64,
    len: u64,
    pd: Option<&crate::ProtectionDomain>,
    access: Option<proto::AccessFlags>,
) -> Result<(), crate::Error> {
    // SAFETY: nothing unsafe happens here; the caller's promise is what
    // RawMemory relies on once the engine knows the new range.
    mr.rereg_parts(pd, Some((addr, len)), access)
}

/// Faults `[addr, addr + len)` in as an access would (`madvise(MADV_POPULATE_READ
/// / _WRITE)`, Linux 5.14+), or fails, without raising SIGSEGV, where the range
/// is not mapped, or not writable for a write.
fn populate(addr: u64, len: u64, write: bool) -> std::io::Result<()> {
    let page = page_size();
    let start = addr & !(page - 1);
    let Some(end) = addr
        .checked_add(len)
        .and_then(|e| e.checked_add(page - 1))
        .map(|e| e & !(page - 1))
    else {
        return Err(std::io::Error::from_raw_os_error(libc::EFAULT));
    };
    let advice = if write {
        libc::MADV_POPULATE_WRITE
    } else {
        libc::MADV_POPULATE_READ
    };
    // SAFETY: populating only faults pages in, as an access would; it reads
    // and changes no byte and fails for ranges that are not mapped so.
    let rc = unsafe {
        libc::madvise(
            start as usize as *mut libc::c_void,
            (end - start) as usize,
            advice,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The kernel pins a region's pages when it is registered (`ib_umem_get`,
/// writable when the access flags allow any write) and refuses with `EFAULT`
/// what is not mapped so. softverbs pins nothing, but makes the same check,
/// so a remote WRITE can never meet read-only or unmapped memory of a region
/// registered in good faith. On-demand regions fault per access instead.
/// A kernel without MADV_POPULATE_* (before 5.14) cannot tell: ranges pass.
pub(crate) fn check_mapped(
    op: &'static str,
    addr: u64,
    len: u64,
    access: proto::AccessFlags,
) -> Result<(), crate::Error> {
    use proto::AccessFlags as A;
    if access.contains(A::ON_DEMAND) || len == 0 {
        return Ok(());
    }
    let write = [A::LOCAL_WRITE, A::REMOTE_WRITE, A::REMOTE_ATOMIC]
        .iter()
        .any(|f| access.contains(*f));
    match populate(addr, len, write) {
        Err(_) if populate_supported() => {
            let e = crate::Error::Unmapped {
                op,
                addr,
                len,
                write,
            };
            tracing::warn!(target: "softverbs", "{op} refused (EFAULT): {e}");
            Err(e)
        }
        _ => Ok(()),
    }
}

/// Whether this kernel knows MADV_POPULATE_READ: asked once, on a page that
/// is surely mapped and readable (this function's code). An unknown advice and
/// a refused range both answer EINVAL, so only a good page can tell them apart.
fn populate_supported() -> bool {
    static KNOWN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *KNOWN.get_or_init(|| {
        populate(populate_supported as fn() -> bool as usize as u64, 1, false).is_ok()
    })
}

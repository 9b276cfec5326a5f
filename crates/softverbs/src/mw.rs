//! Memory windows (`struct ibv_mw`): remote views of part of a memory region
//! with their own rkey and rights (spec/memory-windows.md).

use crate::error::{logged, Error};
use crate::pd::PdInner;
use proto::engine::MwHandle;
pub use proto::mr::mw::{BindRequest, MwError, MwType};
use proto::wr::WrTarget;
use proto::AccessFlags;
use std::sync::Arc;

/// A memory window. Deallocated when dropped (allowed while bound: its rkey
/// stops working at once).
///
/// A window is bound by posting an `IBV_WR_BIND_MW` work request
/// ([`crate::WrOpcode::BindMw`]) with [`MemoryWindow::bind_target`]: both
/// types go through the send queue, in order with the other work requests;
/// the completion says whether the bind took (`IBV_WC_MW_BIND_ERR` if not,
/// and the QP goes to ERR). A type 2 window is unbound by
/// [`crate::WrOpcode::LocalInv`] or a peer's SEND_WITH_INV, a type 1 window
/// by binding it with length 0.
pub struct MemoryWindow {
    pd: Arc<PdInner>,
    h: MwHandle,
    mw_type: MwType,
}

impl MemoryWindow {
    pub(crate) fn alloc(pd: Arc<PdInner>, mw_type: MwType) -> Result<Self, Error> {
        let (h, _) = logged("alloc_mw", pd.with(|e| e.alloc_mw(pd.h, mw_type.raw())))?;
        Ok(MemoryWindow { pd, h, mw_type })
    }

    /// Its type.
    pub fn mw_type(&self) -> MwType {
        self.mw_type
    }

    /// Its rkey now: the key part changes with each bind as it executes.
    pub fn rkey(&self) -> u32 {
        self.pd.with(|e| e.mw(self.h).map_or(0, |w| w.rkey))
    }

    /// True while it is bound to a region.
    pub fn is_bound(&self) -> bool {
        self.pd
            .with(|e| e.mw(self.h).is_ok_and(|w| w.binding.is_some()))
    }

    /// The rkey the next bind gives it: the key part (low 8 bits) advanced
    /// by one, as `ibv_inc_rkey` does.
    pub fn next_rkey(&self) -> u32 {
        let k = self.rkey();
        (k & !0xff) | (k.wrapping_add(1) & 0xff)
    }

    /// The target of a BIND_MW work request: this window over
    /// `[addr, addr + len)` of the region with lkey `mr_lkey` (`None`, or a
    /// zero length: bound to nothing, type 1 only), with `access` (remote
    /// bits, `ZERO_BASED` for type 2), getting the rkey `rkey` (only its low 8
    /// bits are taken; see [`MemoryWindow::next_rkey`]).
    pub fn bind_target(
        &self,
        mr_lkey: Option<u32>,
        addr: u64,
        len: u64,
        access: AccessFlags,
        rkey: u32,
    ) -> WrTarget {
        WrTarget::Bind(BindRequest {
            mw: self.h,
            rkey,
            mr_lkey,
            addr,
            length: len,
            access: access.0,
        })
    }

    /// `ibv_dealloc_mw`.
    pub fn dealloc(self) {
        // Drop does the work.
    }
}

impl Drop for MemoryWindow {
    fn drop(&mut self) {
        let _ = self.pd.with(|e| e.dealloc_mw(self.h));
    }
}

impl std::fmt::Debug for MemoryWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryWindow")
            .field("type", &self.mw_type)
            .field("rkey", &self.rkey())
            .finish()
    }
}

impl crate::pd::ProtectionDomain {
    /// `ibv_alloc_mw`: a window of `mw_type`. A type 1 window is usable at
    /// once (bind it), a type 2 window starts free.
    pub fn alloc_mw(&self, mw_type: MwType) -> Result<MemoryWindow, Error> {
        MemoryWindow::alloc(self.inner.clone(), mw_type)
    }
}

//! Device memory (`ibv_alloc_dm`), emulated in host memory: a page-aligned
//! buffer the device owns, reached by the program only through copies
//! (`ibv_memcpy_to_dm` / `ibv_memcpy_from_dm`, in 4-byte words) and by the
//! device through zero-based memory regions over it (`ibv_reg_dm_mr`).
//! A device offers `proto::dm::MAX_DM_SIZE` bytes, shared by its contexts.

use crate::context::{Context, CtxInner};
use crate::error::{logged, DestroyError, Error};
use crate::mem::Buffer;
use crate::pd::{PdInner, ProtectionDomain};
use proto::dm::DmError;
use proto::engine::MrHandle;
use proto::AccessFlags;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Allocated device memory (`struct ibv_dm`). Freed when dropped (or by
/// [`DeviceMemory::free`], which refuses while regions use it).
pub struct DeviceMemory {
    inner: Arc<DmInner>,
}

pub(crate) struct DmInner {
    ctx: Arc<CtxInner>,
    buf: Buffer,
    /// Memory regions over it.
    users: AtomicUsize,
}

impl Drop for DmInner {
    fn drop(&mut self) {
        self.ctx
            .dev
            .dm_in_use
            .fetch_sub(self.buf.len() as u64, Ordering::AcqRel);
    }
}

fn dm_err(verb: &'static str, e: DmError) -> Error {
    logged::<()>(verb, Err(proto::Error::Dm(e))).unwrap_err()
}

/// Takes `length` bytes of the device's budget, or says why not.
fn reserve(in_use: &AtomicU64, length: u64, log_align: u32, comp_mask: u32) -> Result<(), DmError> {
    let mut cur = in_use.load(Ordering::Acquire);
    loop {
        proto::dm::check_alloc(length, log_align, comp_mask, cur)?;
        match in_use.compare_exchange(cur, cur + length, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Ok(()),
            Err(now) => cur = now,
        }
    }
}

impl Context {
    /// `ibv_alloc_dm`: `length` bytes of device memory, zeroed, aligned to
    /// `2^log_align_req` (≤ a page). `EINVAL`: a `comp_mask`, a length of 0 or
    /// above `max_dm_size`, an alignment above a page; `ENOMEM`: the device's
    /// memory is used up.
    pub fn alloc_dm(
        &self,
        length: u64,
        log_align_req: u32,
        comp_mask: u32,
    ) -> Result<DeviceMemory, Error> {
        let dev = &self.inner.dev;
        reserve(&dev.dm_in_use, length, log_align_req, comp_mask)
            .map_err(|e| dm_err("alloc_dm", e))?;
        let Some(buf) = Buffer::zeroed(length as usize) else {
            dev.dm_in_use.fetch_sub(length, Ordering::AcqRel);
            return Err(dm_err("alloc_dm", DmError::Exhausted { length, free: 0 }));
        };
        Ok(DeviceMemory {
            inner: Arc::new(DmInner {
                ctx: self.inner.clone(),
                buf,
                users: AtomicUsize::new(0),
            }),
        })
    }
}

impl DeviceMemory {
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.inner.buf.len() as u64
    }

    /// True for no bytes (never: allocations are at least 1 byte).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `ibv_memcpy_to_dm`: `EFAULT` beyond the allocation, `EINVAL` for an
    /// offset or length that is not a multiple of 4.
    pub fn copy_to(&self, offset: u64, src: &[u8]) -> Result<(), Error> {
        proto::dm::check_copy("to", self.len(), offset, src.len() as u64)
            .map_err(|e| dm_err("memcpy_to_dm", e))?;
        self.inner.buf.write(offset as usize, src);
        Ok(())
    }

    /// `ibv_memcpy_from_dm`: the same rules as [`Self::copy_to`].
    pub fn copy_from(&self, offset: u64, dst: &mut [u8]) -> Result<(), Error> {
        proto::dm::check_copy("from", self.len(), offset, dst.len() as u64)
            .map_err(|e| dm_err("memcpy_from_dm", e))?;
        self.inner.buf.read(offset as usize, dst);
        Ok(())
    }

    /// `ibv_free_dm`: `EBUSY` while memory regions use it (the object is
    /// handed back).
    pub fn free(self) -> Result<(), DestroyError<Self>> {
        match self.inner.users.load(Ordering::Acquire) {
            0 => Ok(()),
            users => Err(DestroyError {
                error: dm_err("free_dm", DmError::Busy { users }),
                object: self,
            }),
        }
    }
}

impl std::fmt::Debug for DeviceMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceMemory")
            .field("len", &self.len())
            .finish()
    }
}

/// A zero-based memory region over device memory (`ibv_reg_dm_mr`): byte 0
/// of the region is byte `offset` of the device memory; SGEs and peers
/// address it from 0. Deregistered when dropped.
pub struct DmMemoryRegion {
    pd: Arc<PdInner>,
    h: MrHandle,
    lkey: u32,
    rkey: u32,
    access: AccessFlags,
    len: u64,
    dm: Arc<DmInner>,
}

impl ProtectionDomain {
    /// `ibv_reg_dm_mr`: `length` bytes of `dm` from `offset`, zero-based.
    /// `access` must include `ZERO_BASED` (`EINVAL`), the range must lie in
    /// the device memory (`EINVAL`), and the `reg_mr` flag rules apply.
    pub fn reg_dm_mr(
        &self,
        dm: &DeviceMemory,
        offset: u64,
        length: u64,
        access: AccessFlags,
    ) -> Result<DmMemoryRegion, Error> {
        let pd = &self.inner;
        if !Arc::ptr_eq(&dm.inner.ctx.dev, &pd.ctx.dev) {
            return logged(
                "reg_dm_mr",
                Err(proto::Error::Mismatch {
                    what: "reg_dm_mr: the device memory belongs to another device",
                }),
            );
        }
        let (host, dm_len) = (dm.inner.buf.addr(), dm.len());
        let (h, lkey, rkey, access) = logged(
            "reg_dm_mr",
            pd.with(|e| {
                e.reg_dm_mr(pd.h, host, dm_len, offset, length, access.0)
                    .map(|(h, m)| (h, m.lkey, m.rkey, m.access))
            }),
        )?;
        dm.inner.users.fetch_add(1, Ordering::AcqRel);
        Ok(DmMemoryRegion {
            pd: pd.clone(),
            h,
            lkey,
            rkey,
            access,
            len: length,
            dm: dm.inner.clone(),
        })
    }
}

impl DmMemoryRegion {
    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The access flags in force (`ZERO_BASED` among them).
    pub fn access(&self) -> AccessFlags {
        self.access
    }

    /// Length in bytes; the region's addresses are `0..len`.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for DmMemoryRegion {
    fn drop(&mut self) {
        // Under the engine lock: once this returns no packet reaches the memory.
        let _ = self.pd.with(|e| e.dereg_mr(self.h));
        self.dm.users.fetch_sub(1, Ordering::AcqRel);
    }
}

impl std::fmt::Debug for DmMemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmMemoryRegion")
            .field("len", &self.len)
            .field("lkey", &self.lkey)
            .field("rkey", &self.rkey)
            .finish()
    }
}

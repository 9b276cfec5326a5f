//! Memory regions.

use crate::error::{logged, Error};
use crate::mem::Buffer;
use crate::pd::PdInner;
use proto::engine::MrHandle;
use proto::AccessFlags;
use std::sync::Arc;

/// A registered memory region (`struct ibv_mr`) over a buffer it owns.
///
/// The device may read or write the buffer at any time (remote peers do, with a
/// valid rkey and access flags), so the bytes are reached through
/// [`MemoryRegion::read`] and [`MemoryRegion::write`], never through a Rust
/// reference.
pub struct MemoryRegion {
    pd: Arc<PdInner>,
    h: MrHandle,
    lkey: u32,
    rkey: u32,
    access: AccessFlags,
    buf: Buffer,
}

impl MemoryRegion {
    pub(crate) fn register(
        pd: Arc<PdInner>,
        len: usize,
        access: AccessFlags,
    ) -> Result<Self, Error> {
        let buf = Buffer::zeroed(len).ok_or(Error::Verbs(proto::Error::TooMany {
            kind: proto::error::ObjectKind::Mr,
            limit: 0,
        }))?;
        let (addr, length) = (buf.addr(), len as u64);
        let (h, lkey, rkey, access) = logged(
            "reg_mr",
            pd.with(|e| {
                e.reg_mr(pd.h, addr, length, access.0)
                    .map(|(h, m)| (h, m.lkey, m.rkey, m.access))
            }),
        )?;
        Ok(MemoryRegion {
            pd,
            h,
            lkey,
            rkey,
            access,
            buf,
        })
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// Address of the first byte (what a peer puts in an RDMA request).
    pub fn addr(&self) -> u64 {
        self.buf.addr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.buf.len() == 0
    }

    /// The access flags in force.
    pub fn access(&self) -> AccessFlags {
        self.access
    }

    /// Copies bytes out of the region; `false` if `offset..offset+dst.len()` is
    /// outside it.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> bool {
        self.buf.read(offset, dst)
    }

    /// Copies bytes into the region; `false` if out of bounds.
    pub fn write(&self, offset: usize, src: &[u8]) -> bool {
        self.buf.write(offset, src)
    }

    /// `ibv_dereg_mr`.
    pub fn dereg(self) {
        // Drop does the work.
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // The engine forgets the keys before the buffer is freed (field order:
        // `buf` is dropped after this body runs).
        let _ = self.pd.with(|e| e.dereg_mr(self.h));
    }
}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len())
            .field("lkey", &format_args!("{:#x}", self.lkey))
            .field("rkey", &format_args!("{:#x}", self.rkey))
            .finish()
    }
}

//! Memory regions.

use crate::error::{logged, Error};
use crate::mem::Buffer;
use crate::pd::{PdInner, ProtectionDomain};
use proto::engine::MrHandle;
use proto::AccessFlags;
use std::sync::Arc;

/// What a re-registration (`ibv_rereg_mr`) changes; `None` keeps the current
/// value. At least one must be set (`EINVAL` otherwise).
#[derive(Debug, Clone, Copy, Default)]
pub struct Rereg<'a> {
    /// `IBV_REREG_MR_CHANGE_PD`: move the region to this PD (of the same context).
    pub pd: Option<&'a ProtectionDomain>,
    /// `IBV_REREG_MR_CHANGE_TRANSLATION`: for [`MemoryRegion`], a new zeroed
    /// buffer of this many bytes replaces the old one (freed once unreachable).
    pub len: Option<usize>,
    /// `IBV_REREG_MR_CHANGE_ACCESS`: the new access flags (the `reg_mr` rules).
    pub access: Option<AccessFlags>,
}

/// Re-registers `h` (owned by `pd`) in the engine: the same-device check the
/// engine cannot make (handles are per device), then the engine's rules.
/// Returns the new PD's inner and the access in force.
pub(crate) fn rereg_in_engine(
    pd: &Arc<PdInner>,
    h: MrHandle,
    new_pd: Option<&ProtectionDomain>,
    translation: Option<(u64, u64)>,
    access: Option<AccessFlags>,
) -> Result<(Arc<PdInner>, AccessFlags), Error> {
    let target = new_pd.map_or_else(|| pd.clone(), |p| p.inner.clone());
    if !Arc::ptr_eq(&target.ctx.dev, &pd.ctx.dev) {
        return logged(
            "rereg_mr",
            Err(proto::Error::Mismatch {
                what: "rereg_mr: the new protection domain belongs to another device",
            }),
        );
    }
    let r = proto::mr::Rereg {
        pd: new_pd.map(|_| target.h),
        translation,
        access: access.map(|a| a.0),
    };
    let access = logged("rereg_mr", pd.with(|e| e.rereg_mr(h, &r).map(|m| m.access)))?;
    Ok((target, access))
}

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

    /// `ibv_rereg_mr`: moves the region to another PD, onto a new buffer
    /// (`len`), and/or to new access flags, all or nothing. The keys stay; every
    /// access from then on is checked against the new PD, range and flags, so a
    /// peer holding the rkey reaches the new buffer only, and only as the new
    /// flags allow. On error nothing changed (`EINVAL`: no change named, a bad
    /// length or flag combination, a PD of another context; `EOPNOTSUPP`: a
    /// flag this device lacks).
    pub fn rereg(&mut self, r: Rereg<'_>) -> Result<(), Error> {
        let new_buf = match r.len {
            Some(len) => Some(
                Buffer::zeroed(len).ok_or(Error::Verbs(proto::Error::TooMany {
                    kind: proto::error::ObjectKind::Mr,
                    limit: 0,
                }))?,
            ),
            None => None,
        };
        let translation = new_buf.as_ref().map(|b| (b.addr(), b.len() as u64));
        let (pd, access) = rereg_in_engine(&self.pd, self.h, r.pd, translation, r.access)?;
        self.pd = pd;
        self.access = access;
        if let Some(b) = new_buf {
            // The engine no longer reaches the old buffer: it may go.
            self.buf = b;
        }
        Ok(())
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
        // Windows bound to it lose their binding first: none may reach the
        // buffer once it is freed.
        let _ = self.pd.with(|e| e.dereg_mr_unbinding(self.h));
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

impl ProtectionDomain {
    /// `ibv_reg_mr` over a new zeroed, page-aligned buffer of `len` bytes that the
    /// region owns. REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE (`EINVAL`).
    pub fn reg_mr(&self, len: usize, access: AccessFlags) -> Result<MemoryRegion, Error> {
        MemoryRegion::register(self.inner.clone(), len, access)
    }
}

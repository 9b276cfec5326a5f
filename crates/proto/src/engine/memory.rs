//! The memory verbs of the engine: memory regions (`reg_mr`, `reg_dm_mr`,
//! `rereg_mr`, `dereg_mr`, lookups by key, `advise_mr`) and memory windows
//! (spec/memory-windows.md). The rules live in [`crate::mr`]; this file
//! keeps the tables' side: PD checks, users counts, handles.

use super::{missing, Engine};
use crate::error::{Error, ObjectKind};
use crate::handle::{MrHandle, MwHandle, PdHandle};
use crate::mr::{self, Mr};

impl Engine {
    // ---- memory regions ----

    /// `ibv_reg_mr` over `[addr, addr + length)`.
    pub fn reg_mr(
        &mut self,
        pd: PdHandle,
        addr: u64,
        length: u64,
        access: u32,
    ) -> Result<(MrHandle, &Mr), Error> {
        let flags = mr::check_reg(addr, length, access)?;
        self.insert_mr(pd, addr, addr, length, flags)
    }

    /// `ibv_reg_dm_mr`: a zero-based region of `length` bytes whose byte 0
    /// lives at host address `host` (`offset` bytes into device memory of
    /// `dm_len` bytes; [`mr::check_reg_dm`]).
    pub fn reg_dm_mr(
        &mut self,
        pd: PdHandle,
        host: u64,
        dm_len: u64,
        offset: u64,
        length: u64,
        access: u32,
    ) -> Result<(MrHandle, &Mr), Error> {
        let flags = mr::check_reg_dm(dm_len, offset, length, access)?;
        self.insert_mr(pd, 0, host.wrapping_add(offset), length, flags)
    }

    fn insert_mr(
        &mut self,
        pd: PdHandle,
        addr: u64,
        host: u64,
        length: u64,
        flags: crate::types::AccessFlags,
    ) -> Result<(MrHandle, &Mr), Error> {
        self.pd_ctx(pd)?;
        let limit = u64::from(self.info.attr.max_mr);
        let h = self
            .mrs
            .insert(Mr {
                pd,
                addr,
                length,
                access: flags,
                lkey: 0,
                rkey: 0,
                host,
            })
            .ok_or(Error::TooMany {
                kind: ObjectKind::Mr,
                limit,
            })?;
        self.mr_serial = self.mr_serial.wrapping_add(1);
        let (lkey, rkey) = mr::keys(h.index(), self.mr_serial);
        let m = self.mrs.get_mut(h).expect("just inserted");
        m.lkey = lkey;
        m.rkey = rkey;
        self.rings.mrs.insert(m);
        self.pd_use(pd, ObjectKind::Mr, true)?;
        Ok((h, self.mrs.get(h).expect("just inserted")))
    }

    /// `ibv_dereg_mr`.
    pub fn dereg_mr(&mut self, h: MrHandle) -> Result<Mr, Error> {
        // A bound window holds its region (rxe `num_mw`; spec/memory-windows.md §5).
        let count = mr::mw::windows_on(self.mws.get_mut(), h);
        if count > 0 {
            return Err(mr::mw::MwError::MrHasWindows { count }.into());
        }
        let m = self
            .mrs
            .remove(h)
            .ok_or_else(|| missing(ObjectKind::Mr, h))?;
        self.rings.mrs.remove(m.lkey);
        self.pd_use(m.pd, ObjectKind::Mr, false)?;
        Ok(m)
    }

    /// Deregisters `h` whatever is bound to it: the windows on it lose their
    /// binding first (type 2 ones become free), so none can reach the memory
    /// afterwards. For owners that are going away and free the memory next
    /// (a dropped region), where `EBUSY` would leave the keys alive.
    pub fn dereg_mr_unbinding(&mut self, h: MrHandle) -> Result<Mr, Error> {
        for (_, w) in self.mws.get_mut().iter_mut() {
            if w.binding.is_some_and(|b| b.mr == h) {
                w.binding = None;
            }
        }
        self.dereg_mr(h)
    }

    /// `ibv_rereg_mr`: changes the PD, the translation and/or the access of a
    /// region, all or nothing; the keys stay (spec/mr-rereg.md). Every access
    /// after this returns is checked against the new values.
    pub fn rereg_mr(&mut self, h: MrHandle, r: &mr::Rereg) -> Result<&Mr, Error> {
        let old = self.mrs.get(h).ok_or_else(|| missing(ObjectKind::Mr, h))?;
        let new = mr::check_rereg(old, r)?;
        let old_pd = old.pd;
        if new.pd != old_pd && self.pd_ctx(new.pd)? != self.pd_ctx(old_pd)? {
            return Err(Error::Mismatch {
                what: "rereg_mr: the new protection domain belongs to another context",
            });
        }
        if new.pd != old_pd {
            self.pd_use(new.pd, ObjectKind::Mr, true)?;
            self.pd_use(old_pd, ObjectKind::Mr, false)?;
        }
        let m = self.mrs.get_mut(h).expect("checked above");
        *m = new;
        self.rings.mrs.insert(m);
        Ok(m)
    }

    /// The MR an lkey names.
    pub fn mr_by_lkey(&self, lkey: u32) -> Option<&Mr> {
        let (_, m) = self.mrs.get_by_index(mr::key_index(lkey)?)?;
        (m.lkey == lkey).then_some(m)
    }

    /// The MR an rkey names.
    pub fn mr_by_rkey(&self, rkey: u32) -> Option<&Mr> {
        let (_, m) = self.mrs.get_by_index(mr::key_index(rkey)?)?;
        (m.rkey == rkey).then_some(m)
    }

    // ---- memory windows ----

    /// `ibv_alloc_mw`: a window of `mw_type` (raw `ibv_mw_type`) on `pd`;
    /// returns its handle and rkey. Type 1 is usable (bindable) at once, type 2
    /// starts free (spec/memory-windows.md §2).
    pub fn alloc_mw(&mut self, pd: PdHandle, mw_type: u32) -> Result<(MwHandle, u32), Error> {
        let t =
            mr::mw::MwType::from_raw(mw_type).ok_or(mr::mw::MwError::BadType { raw: mw_type })?;
        self.pd_ctx(pd)?;
        let limit = u64::from(self.info.attr.max_mw);
        self.mr_serial = self.mr_serial.wrapping_add(1);
        let key = self.mr_serial as u8;
        let mws = self.mws.get_mut();
        let h = mws
            .insert(mr::mw::Mw {
                pd,
                mw_type: t,
                rkey: 0,
                binding: None,
            })
            .ok_or(Error::TooMany {
                kind: ObjectKind::Mr,
                limit,
            })?;
        let rkey = mr::window_key(h.index(), key);
        if let Some(w) = mws.get_mut(h) {
            w.rkey = rkey;
        }
        Ok((h, rkey))
    }

    /// `ibv_dealloc_mw`: allowed bound or not; the window's rkey stops
    /// working at once (spec/memory-windows.md §5).
    pub fn dealloc_mw(&mut self, h: MwHandle) -> Result<(), Error> {
        self.mws
            .get_mut()
            .remove(h)
            .map(|_| ())
            .ok_or(mr::mw::MwError::NoSuchWindow.into())
    }

    /// A window as it is now (its rkey, its binding).
    pub fn mw(&self, h: MwHandle) -> Result<mr::mw::Mw, Error> {
        self.mws
            .read()
            .get(h)
            .cloned()
            .ok_or(mr::mw::MwError::NoSuchWindow.into())
    }

    /// `ibv_advise_mr` on `pd` ([`advise`]); `EINVAL` for a PD that does not exist.
    pub fn advise_mr(
        &self,
        pd: PdHandle,
        advice: u32,
        flags: u32,
        sges: &[crate::wr::Sge],
        mem: &dyn crate::memory::Memory,
    ) -> Result<(), Error> {
        self.pd_ctx(pd)?;
        Ok(mr::advise(&self.mrs, pd, advice, flags, sges, mem)?)
    }
}

//! The device's memory regions as posts see them: a read-only copy of the
//! engine's region table, so an `IBV_SEND_INLINE` post can gather its bytes
//! through the memory-region check without the engine lock.
//!
//! Owns: the copy (one entry per live region, by the slot its keys name) and
//! the gather through it. Promises:
//! - the engine writes it, under its own lock, in the same call that
//!   registers, re-registers or deregisters a region, so a post sees either
//!   the region as it was or as it is, never a mix;
//! - a gather holds the read lock while it copies, and deregistration takes
//!   the write lock: once `dereg_mr` has returned, no gather reads the
//!   region's memory any more (the owner may free it);
//! - the check is [`crate::qp::sgl::gather`]'s, unchanged: key, PD, bounds,
//!   LOCAL access, and the page fault of an on-demand region.

use std::collections::HashMap;
use std::sync::{PoisonError, RwLock};

use super::{is_window_key, key_index, Mr, MrKeys, SglError};
use crate::handle::PdHandle;
use crate::memory::Memory;
use crate::types::{sg_total_len, Sge};

/// The live regions by slot (the engine writes; posters read).
#[derive(Debug, Default)]
pub struct MrView {
    map: RwLock<Slots>,
}

/// Regions by the table slot their keys name.
#[derive(Debug, Default)]
struct Slots(HashMap<u32, Mr>);

impl MrKeys for Slots {
    fn by_key(&self, key: u32) -> Option<&Mr> {
        if is_window_key(key) {
            return None;
        }
        self.0.get(&key_index(key)?)
    }
}

impl MrView {
    /// Engine: region `mr` is registered (or re-registered) as it is now.
    pub fn insert(&self, mr: &Mr) {
        if let Some(i) = key_index(mr.lkey) {
            self.write().0.insert(i, mr.clone());
        }
    }

    /// Engine: the region with local key `lkey` is deregistered. Returns once
    /// no gather reads it.
    pub fn remove(&self, lkey: u32) {
        if let Some(i) = key_index(lkey) {
            self.write().0.remove(&i);
        }
    }

    /// Copies the bytes of `sges` into `out` (resized to their total) through
    /// the memory-region check for `pd`, as the engine's gather does.
    pub fn gather(
        &self,
        pd: PdHandle,
        mem: &dyn Memory,
        sges: &[Sge],
        out: &mut Vec<u8>,
    ) -> Result<(), SglError> {
        out.clear();
        out.resize(sg_total_len(sges) as usize, 0);
        let slots = self.map.read().unwrap_or_else(PoisonError::into_inner);
        crate::qp::sgl::gather(&*slots, pd, mem, sges, 0, out)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Slots> {
        self.map.write().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::VecMemory;
    use crate::mr::{AccessError, MrTable};
    use crate::types::AccessFlags;

    fn sge(lkey: u32, addr: u64, length: u32) -> Sge {
        Sge { addr, length, lkey }
    }

    /// The view answers every gather as the engine's table does: same bytes,
    /// same refusal (wrong key, wrong PD, out of bounds, no such region).
    #[test]
    fn gathers_as_the_table_does() {
        let mem = VecMemory::new(0x1000, 0x1000);
        mem.write(
            0x1000,
            &(0..=255u8).cycle().take(0x1000).collect::<Vec<_>>(),
        );
        let pd = PdHandle::from_raw(1);
        let mut table = MrTable::new(8);
        let view = MrView::default();
        let mut keys = Vec::new();
        for (i, (addr, len)) in [(0x1000u64, 0x800u64), (0x1800, 0x800)]
            .into_iter()
            .enumerate()
        {
            let h = table
                .insert(Mr {
                    pd,
                    addr,
                    length: len,
                    access: AccessFlags::LOCAL_WRITE,
                    lkey: 0,
                    rkey: 0,
                    host: addr,
                })
                .unwrap();
            let (lkey, rkey) = crate::mr::keys(h.index(), i as u32 + 5);
            let m = table.get_mut(h).unwrap();
            (m.lkey, m.rkey) = (lkey, rkey);
            view.insert(m);
            keys.push((lkey, rkey));
        }
        let (a, b) = (keys[0].0, keys[1].0);
        let cases: Vec<(PdHandle, Vec<Sge>)> = vec![
            (pd, vec![sge(a, 0x1000, 16)]),
            (pd, vec![sge(a, 0x17f0, 16), sge(b, 0x1800, 3)]),
            (pd, vec![sge(a, 0x17f8, 16)]),        // out of bounds
            (pd, vec![sge(keys[0].1, 0x1000, 4)]), // an rkey
            (pd, vec![sge(a ^ 0x40, 0x1000, 4)]),  // stale tag
            (pd, vec![sge(0x9900, 0x1000, 4)]),    // no such slot
            (PdHandle::from_raw(2), vec![sge(a, 0x1000, 4)]), // wrong PD
            (pd, vec![]),
        ];
        for (pd, sges) in cases {
            let mut want = vec![0; sg_total_len(&sges) as usize];
            let w = crate::qp::sgl::gather(&table, pd, &mem, &sges, 0, &mut want);
            let mut got = vec![0xee; 3];
            let g = view.gather(pd, &mem, &sges, &mut got);
            assert_eq!(format!("{g:?}"), format!("{w:?}"), "{sges:?}");
            if g.is_ok() {
                assert_eq!(got, want, "{sges:?}");
            }
        }
    }

    /// A deregistered region is gone for posts at once; a re-registered one
    /// answers with its new bounds.
    #[test]
    fn follows_dereg_and_rereg() {
        let mem = VecMemory::new(0x1000, 0x100);
        let pd = PdHandle::from_raw(1);
        let (lkey, _) = crate::mr::keys(0, 1);
        let mut mr = Mr {
            pd,
            addr: 0x1000,
            length: 0x100,
            access: AccessFlags::LOCAL_WRITE,
            lkey,
            rkey: lkey | 0x80,
            host: 0x1000,
        };
        let view = MrView::default();
        view.insert(&mr);
        let mut out = Vec::new();
        view.gather(pd, &mem, &[sge(lkey, 0x1080, 0x80)], &mut out)
            .unwrap();
        mr.length = 0x80;
        view.insert(&mr);
        let e = view.gather(pd, &mem, &[sge(lkey, 0x1080, 0x80)], &mut out);
        assert!(
            matches!(e, Err(SglError::Access(AccessError::OutOfBounds { .. }))),
            "{e:?}"
        );
        view.remove(lkey);
        let e = view.gather(pd, &mem, &[sge(lkey, 0x1000, 4)], &mut out);
        assert!(
            matches!(e, Err(SglError::Access(AccessError::NoSuchKey { .. }))),
            "{e:?}"
        );
    }
}

//! Gather and scatter through a scatter/gather list, every element checked
//! against the memory-region table (lkey, PD, bounds, LOCAL_WRITE for writes)
//! before a byte moves.

use crate::handle::PdHandle;
use crate::memory::Memory;
use crate::mr::{Access, AccessError, MrKeys};
use crate::wr::Sge;

// Why a gather or scatter failed: defined beside the access checks it
// reports, so `wr`'s post errors can carry it without importing this file.
pub use crate::mr::SglError;

pub use crate::mr::mr_by_key;

fn check_sge(
    mrs: &(impl MrKeys + ?Sized),
    pd: PdHandle,
    mem: &dyn Memory,
    sge: &Sge,
    addr: u64,
    len: u64,
    access: Access,
) -> Result<u64, SglError> {
    let mr = mrs
        .by_key(sge.lkey)
        .ok_or(SglError::Access(AccessError::NoSuchKey {
            key: sge.lkey,
            remote: false,
        }))?;
    mr.check_present(pd, sge.lkey, addr, len, access, mem)
        .map_err(SglError::Access)
}

/// Visits the pieces of `[offset, offset + len)` of the list as (sge, address, length).
fn walk(
    sges: &[Sge],
    offset: u64,
    len: u64,
    mut f: impl FnMut(&Sge, u64, u64, usize) -> Result<(), SglError>,
) -> Result<(), SglError> {
    let have: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
    if offset + len > have {
        return Err(SglError::Length {
            need: offset + len,
            have,
        });
    }
    let (mut skip, mut left, mut done) = (offset, len, 0usize);
    for sge in sges {
        let sl = u64::from(sge.length);
        if skip >= sl {
            skip -= sl;
            continue;
        }
        let n = (sl - skip).min(left);
        if n > 0 {
            f(sge, sge.addr + skip, n, done)?;
        }
        done += n as usize;
        left -= n;
        skip = 0;
        if left == 0 {
            break;
        }
    }
    Ok(())
}

/// Copies `out.len()` bytes from the list, starting `offset` bytes in.
pub fn gather(
    mrs: &(impl MrKeys + ?Sized),
    pd: PdHandle,
    mem: &dyn Memory,
    sges: &[Sge],
    offset: u64,
    out: &mut [u8],
) -> Result<(), SglError> {
    walk(sges, offset, out.len() as u64, |sge, addr, n, at| {
        let host = check_sge(mrs, pd, mem, sge, addr, n, Access::LocalRead)?;
        mem.read(host, &mut out[at..at + n as usize]);
        Ok(())
    })
}

/// Copies `data` into the list, starting `offset` bytes in. Everything is
/// checked before anything is written, so a failed scatter changes no memory.
pub fn scatter(
    mrs: &(impl MrKeys + ?Sized),
    pd: PdHandle,
    mem: &dyn Memory,
    sges: &[Sge],
    offset: u64,
    data: &[u8],
) -> Result<(), SglError> {
    let len = data.len() as u64;
    walk(sges, offset, len, |sge, addr, n, _| {
        check_sge(mrs, pd, mem, sge, addr, n, Access::LocalWrite).map(|_| ())
    })?;
    walk(sges, offset, len, |sge, addr, n, at| {
        // Checked above: the key names its region (zero-based ones translate).
        let host = mrs.by_key(sge.lkey).map_or(addr, |m| m.host_of(addr));
        mem.write(host, &data[at..at + n as usize]);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handle::Handle;
    use crate::memory::VecMemory;
    use crate::mr::{Mr, MrTable};
    use crate::types::AccessFlags;

    fn setup() -> (MrTable, PdHandle, u32, u32) {
        let mut mrs = MrTable::new(8);
        let pd: PdHandle = Handle::from_raw(7);
        let h = mrs
            .insert(Mr {
                pd,
                addr: 0x1000,
                length: 64,
                access: AccessFlags(1),
                lkey: 0,
                rkey: 0,
                host: 0x1000,
            })
            .unwrap();
        let (lkey, _) = crate::mr::keys(h.index(), 1);
        mrs.get_mut(h).unwrap().lkey = lkey;
        let ro = mrs
            .insert(Mr {
                pd,
                addr: 0x1040,
                length: 64,
                access: AccessFlags(0),
                lkey: 0,
                rkey: 0,
                host: 0x1040,
            })
            .unwrap();
        let (ro_key, _) = crate::mr::keys(ro.index(), 2);
        mrs.get_mut(ro).unwrap().lkey = ro_key;
        (mrs, pd, lkey, ro_key)
    }

    #[test]
    fn scatter_and_gather_across_elements() {
        let (mrs, pd, lkey, _) = setup();
        let mem = VecMemory::new(0x1000, 128);
        let sges = [
            Sge {
                addr: 0x1000,
                length: 3,
                lkey,
            },
            Sge {
                addr: 0x1010,
                length: 10,
                lkey,
            },
        ];
        scatter(&mrs, pd, &mem, &sges, 1, &[1, 2, 3, 4, 5]).unwrap();
        assert_eq!(mem.snapshot(0x1000, 3), [0, 1, 2]);
        assert_eq!(mem.snapshot(0x1010, 4), [3, 4, 5, 0]);
        let mut out = [0; 5];
        gather(&mrs, pd, &mem, &sges, 1, &mut out).unwrap();
        assert_eq!(out, [1, 2, 3, 4, 5]);
        let e = scatter(&mrs, pd, &mem, &sges, 10, &[0; 4]).unwrap_err();
        assert_eq!(e, SglError::Length { need: 14, have: 13 });
    }

    #[test]
    fn a_failed_scatter_writes_nothing() {
        let (mrs, pd, lkey, ro_key) = setup();
        let mem = VecMemory::new(0x1000, 128);
        let sges = [
            Sge {
                addr: 0x1000,
                length: 4,
                lkey,
            },
            Sge {
                addr: 0x1040,
                length: 4,
                lkey: ro_key,
            },
        ];
        let e = scatter(&mrs, pd, &mem, &sges, 0, &[9; 8]).unwrap_err();
        assert!(
            matches!(e, SglError::Access(AccessError::NotPermitted { .. })),
            "{e:?}"
        );
        assert_eq!(mem.snapshot(0x1000, 4), [0; 4], "nothing written");
        // Reading needs no flag.
        let mut out = [0; 8];
        gather(&mrs, pd, &mem, &sges, 0, &mut out).unwrap();
        let bad = [Sge {
            addr: 0x1000,
            length: 4,
            lkey: lkey ^ 0x80,
        }];
        assert!(matches!(
            gather(&mrs, pd, &mem, &bad, 0, &mut out[..4]),
            Err(SglError::Access(_))
        ));
    }
}

//! The access check, registration and rereg rules, and ODP/DM details.
use super::*;

#[test]
fn remote_write_and_atomic_need_local_write() {
    for bad in [2u32, 8, 2 | 4, 8 | 4] {
        let e = check_reg(0x1000, 64, bad).unwrap_err();
        assert_eq!(e.errno(), crate::Errno::EINVAL, "{bad:#x}");
        assert!(e.to_string().contains("require LOCAL_WRITE"));
    }
    assert!(check_reg(0x1000, 64, 1 | 2 | 4 | 8).is_ok());
    assert!(check_reg(0x1000, 64, 4).is_ok());
    assert!(check_reg(0x1000, 64, 0).is_ok());
    assert!(
        check_reg(0x1000, 64, 1 | (1 << 20)).is_ok(),
        "optional range is ignored"
    );
    assert_eq!(
        check_reg(0x1000, 64, 1 << 5).unwrap_err().errno(),
        crate::Errno::EOPNOTSUPP
    );
    assert_eq!(
        check_reg(0x1000, 64, 1 << 12).unwrap_err().errno(),
        crate::Errno::EINVAL
    );
    assert_eq!(
        check_reg(u64::MAX, 2, 0).unwrap_err().errno(),
        crate::Errno::EINVAL
    );
}

fn mr(access: u32) -> Mr {
    let pd = crate::handle::Handle::from_raw(1);
    let (lkey, rkey) = keys(3, 1);
    Mr {
        pd,
        addr: 0x1000,
        length: 0x100,
        access: AccessFlags(access),
        lkey,
        rkey,
        host: 0x1000,
    }
}

/// Memory that is always present (the check never needs a fault).
struct Present;
impl crate::memory::Memory for Present {
    fn read(&self, _: u64, _: &mut [u8]) {}
    fn write(&self, _: u64, _: &[u8]) {}
    fn atomic(&self, _: u64, _: crate::memory::AtomicOp) -> u64 {
        0
    }
}

#[test]
fn rereg_keeps_paging_and_refuses_device_memory() {
    let odp = mr(1 | AccessFlags::ON_DEMAND.0);
    let access = |a: u32| Rereg {
        pd: None,
        translation: None,
        access: Some(a),
    };
    let e = check_rereg(&odp, &access(1 | 2)).unwrap_err();
    assert_eq!(e.errno(), crate::Errno::EOPNOTSUPP, "{e}");
    assert!(e.to_string().contains("ON_DEMAND"), "{e}");
    let pinned = mr(1);
    let e = check_rereg(&pinned, &access(1 | AccessFlags::ON_DEMAND.0)).unwrap_err();
    assert_eq!(e.errno(), crate::Errno::EOPNOTSUPP, "{e}");
    assert_eq!(
        e,
        Refusal::Unsupported(Unsupported::ReregOnDemandSwitch {
            from: AccessFlags(1),
            to: AccessFlags(1 | AccessFlags::ON_DEMAND.0),
        })
    );
    assert!(check_rereg(&odp, &access(1 | 4 | AccessFlags::ON_DEMAND.0)).is_ok());
    let dm = mr(1 | AccessFlags::ZERO_BASED.0);
    let e = check_rereg(&dm, &access(1)).unwrap_err();
    assert_eq!(e.errno(), crate::Errno::EINVAL, "{e}");
    assert_eq!(e, Refusal::Invalid(InvalidArg::ReregDeviceMemory));
    assert_eq!(
        crate::Error::from(e),
        crate::Error::Invalid(InvalidArg::ReregDeviceMemory),
        "the engine reports it as the same Error variant"
    );
}

#[test]
fn an_atomic_through_a_zero_based_region_needs_an_aligned_host_byte() {
    // Device memory registered at offset 4: va 0 is host byte base + 4.
    let mut m = mr(1 | 8 | AccessFlags::ZERO_BASED.0);
    m.addr = 0;
    m.host = 0x10_0004;
    let pd = m.pd;
    assert_eq!(
        m.check_present(pd, m.rkey, 0, 8, Access::RemoteAtomic, &Present),
        Err(AccessError::Misaligned { addr: 0, len: 8 })
    );
    m.host = 0x10_0008;
    assert_eq!(
        m.check_present(pd, m.rkey, 8, 8, Access::RemoteAtomic, &Present),
        Ok(0x10_0010)
    );
}

#[test]
fn access_check_refuses_everything_outside_key_pd_bounds_and_flags() {
    let m = mr(1 | 2 | 4 | 8);
    let pd = m.pd;
    let other_pd = crate::handle::Handle::from_raw(2);
    assert_eq!(
        m.check(pd, m.rkey, 0x1000, 0x100, Access::RemoteWrite),
        Ok(())
    );
    assert_eq!(m.check(pd, m.lkey, 0x10ff, 1, Access::LocalWrite), Ok(()));
    assert_eq!(m.check(pd, m.rkey, 0x1008, 8, Access::RemoteAtomic), Ok(()));
    // An lkey is not an rkey, and the reverse.
    assert!(matches!(
        m.check(pd, m.lkey, 0x1000, 1, Access::RemoteRead),
        Err(AccessError::NoSuchKey { remote: true, .. })
    ));
    assert!(matches!(
        m.check(pd, m.rkey, 0x1000, 1, Access::LocalRead),
        Err(AccessError::NoSuchKey { remote: false, .. })
    ));
    assert!(matches!(
        m.check(other_pd, m.rkey, 0x1000, 1, Access::RemoteRead),
        Err(AccessError::WrongPd { .. })
    ));
    for (addr, len) in [(0xfff, 1), (0x10ff, 2), (0x1100, 1), (u64::MAX, 2)] {
        let r = m.check(pd, m.rkey, addr, len, Access::RemoteRead);
        assert!(
            matches!(r, Err(AccessError::OutOfBounds { .. })),
            "{addr:#x}+{len}: {r:?}"
        );
    }
    assert!(matches!(
        m.check(pd, m.rkey, 0x1004, 8, Access::RemoteAtomic),
        Err(AccessError::Misaligned { .. })
    ));
    assert!(matches!(
        m.check(pd, m.rkey, 0x1000, 4, Access::RemoteAtomic),
        Err(AccessError::Misaligned { .. })
    ));
    let ro = mr(4);
    let e = ro
        .check(pd, ro.rkey, 0x1000, 1, Access::RemoteWrite)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("does not allow REMOTE_WRITE (it has REMOTE_READ)"),
        "{e}"
    );
    assert!(ro
        .check(pd, ro.lkey, 0x1000, 1, Access::LocalWrite)
        .is_err());
    assert!(ro.check(pd, ro.lkey, 0x1000, 1, Access::LocalRead).is_ok());
}

#[test]
fn rereg_changes_only_what_it_names_and_keeps_the_keys() {
    let old = mr(1 | 2);
    let other_pd = crate::table::Handle::from_raw(2);
    let e = check_rereg(&old, &Rereg::default()).unwrap_err();
    assert_eq!(e.errno(), crate::Errno::EINVAL);
    assert!(e.to_string().contains("name no change"), "{e}");

    let m = check_rereg(
        &old,
        &Rereg {
            access: Some(1 | 4),
            ..Rereg::default()
        },
    )
    .unwrap();
    assert_eq!(
        (m.access, m.pd, m.addr, m.length),
        (AccessFlags(1 | 4), old.pd, old.addr, old.length)
    );
    assert_eq!((m.lkey, m.rkey), (old.lkey, old.rkey));
    // The access rules of reg_mr apply to the new flags.
    let e = check_rereg(
        &old,
        &Rereg {
            access: Some(2),
            ..Rereg::default()
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("require LOCAL_WRITE"), "{e}");
    assert_eq!(
        check_rereg(
            &old,
            &Rereg {
                access: Some(1 << 5),
                ..Rereg::default()
            }
        )
        .unwrap_err()
        .errno(),
        crate::Errno::EOPNOTSUPP
    );

    let m = check_rereg(
        &old,
        &Rereg {
            pd: Some(other_pd),
            ..Rereg::default()
        },
    )
    .unwrap();
    assert_eq!((m.pd, m.access, m.addr), (other_pd, old.access, old.addr));

    let m = check_rereg(
        &old,
        &Rereg {
            translation: Some((0x9000, 0x40)),
            ..Rereg::default()
        },
    )
    .unwrap();
    assert_eq!((m.addr, m.length, m.access), (0x9000, 0x40, old.access));
    assert!(m
        .check(old.pd, m.rkey, 0x9000, 0x40, Access::RemoteWrite)
        .is_ok());
    assert!(
        matches!(
            m.check(old.pd, m.rkey, old.addr, 1, Access::RemoteWrite),
            Err(AccessError::OutOfBounds { .. })
        ),
        "the old range is out of reach"
    );
    for bad in [(0, 0x40), (0x9000, 0), (u64::MAX, 2)] {
        let e = check_rereg(
            &old,
            &Rereg {
                translation: Some(bad),
                ..Rereg::default()
            },
        )
        .unwrap_err();
        assert_eq!(e.errno(), crate::Errno::EINVAL, "{bad:?}");
    }
}

/// Memory with a hole (unmapped) and a read-only page, as a process has.
struct Holes;
impl crate::memory::Memory for Holes {
    fn read(&self, _: u64, _: &mut [u8]) {}
    fn write(&self, _: u64, _: &[u8]) {}
    fn atomic(&self, _: u64, _: crate::memory::AtomicOp) -> u64 {
        0
    }
    fn fault_in(&self, addr: u64, len: u64, write: bool) -> bool {
        let end = addr + len;
        let hole = end > 0x2000 && addr < 0x3000;
        let read_only = end > 0x3000 && addr < 0x4000;
        !(hole || write && read_only)
    }
}

#[test]
fn on_demand_regions_fault_in_or_refuse_the_access() {
    let pd = crate::table::Handle::from_raw(1);
    let (lkey, rkey) = keys(3, 1);
    let odp = Mr {
        pd,
        addr: 0x1000,
        length: 0x4000,
        access: AccessFlags(1 | 2 | 4 | 8 | AccessFlags::ON_DEMAND.0),
        lkey,
        rkey,
        host: 0x1000,
    };
    assert!(odp
        .check_present(pd, rkey, 0x1000, 0x100, Access::RemoteWrite, &Holes)
        .is_ok());
    let e = odp
        .check_present(pd, rkey, 0x2ff0, 0x20, Access::RemoteRead, &Holes)
        .unwrap_err();
    assert!(
        matches!(e, AccessError::NotPresent { write: false, .. }),
        "{e}"
    );
    assert!(
        e.to_string().contains("is not mapped in the process"),
        "{e}"
    );
    // Read-only pages: reads fault in, writes do not.
    assert!(odp
        .check_present(pd, lkey, 0x3000, 8, Access::LocalRead, &Holes)
        .is_ok());
    let e = odp
        .check_present(pd, lkey, 0x3000, 8, Access::LocalWrite, &Holes)
        .unwrap_err();
    assert!(e.to_string().contains("not mapped writable"), "{e}");
    // The ordinary checks come first; a region not on demand is never faulted.
    assert!(matches!(
        odp.check_present(pd, rkey, 0x5000, 1, Access::RemoteRead, &Holes),
        Err(AccessError::OutOfBounds { .. })
    ));
    let pinned = Mr {
        access: AccessFlags(1 | 4),
        ..odp.clone()
    };
    assert!(pinned
        .check_present(pd, rkey, 0x2ff0, 0x20, Access::RemoteRead, &Holes)
        .is_ok());
    // Implicit regions: addr 0, length SIZE_MAX, on demand only.
    assert!(check_reg(0, IMPLICIT_LEN, 1 | AccessFlags::ON_DEMAND.0).is_ok());
    for (addr, access) in [(0, 1), (0x1000, 1 | AccessFlags::ON_DEMAND.0)] {
        let e = check_reg(addr, IMPLICIT_LEN, access).unwrap_err();
        assert_eq!(e.errno(), crate::Errno::EINVAL);
        assert!(e.to_string().contains("implicit region"), "{e}");
    }
}

#[test]
fn advise_checks_every_element_then_faults_in() {
    use crate::wr::Sge;
    let pd = crate::table::Handle::from_raw(1);
    let mut mrs = MrTable::new(8);
    let mut reg = |addr, length, access| {
        let h = mrs
            .insert(Mr {
                pd,
                addr,
                length,
                access: AccessFlags(access),
                lkey: 0,
                rkey: 0,
                host: addr,
            })
            .unwrap();
        let (l, r) = keys(h.index(), 1);
        let m = mrs.get_mut(h).unwrap();
        m.lkey = l;
        m.rkey = r;
        l
    };
    let odp = reg(0x1000, 0x4000, 1 | AccessFlags::ON_DEMAND.0);
    let odp_ro = reg(0x1000, 0x4000, 4 | AccessFlags::ON_DEMAND.0);
    let pinned = reg(0x1000, 0x4000, 1);
    let sge = |lkey, addr, length| Sge { addr, length, lkey };
    let run = |advice, flags, list: &[Sge]| advise(&mrs, pd, advice, flags, list, &Holes);
    assert_eq!(run(0, 1, &[sge(odp, 0x1000, 0x1000)]), Ok(()));
    assert_eq!(run(1, 0, &[sge(odp, 0x1000, 0x1000)]), Ok(()));
    assert_eq!(
        run(0, 0, &[]),
        Ok(()),
        "no element: nothing to do (the kernel's answer)"
    );
    let errno = |r: Result<(), AdviseError>| r.unwrap_err().errno();
    use crate::Errno::*;
    assert_eq!(errno(run(3, 0, &[sge(odp, 0x1000, 8)])), EOPNOTSUPP);
    assert_eq!(errno(run(0, 2, &[sge(odp, 0x1000, 8)])), EINVAL);
    assert_eq!(errno(run(0, 0, &[sge(pinned, 0x1000, 8)])), ENOENT);
    assert_eq!(errno(run(0, 0, &[sge(0x7777_7700, 0x1000, 8)])), ENOENT);
    assert_eq!(errno(run(1, 0, &[sge(odp_ro, 0x1000, 8)])), EPERM);
    assert_eq!(errno(run(0, 0, &[sge(odp, 0x4ff8, 16)])), EFAULT);
    let e = run(0, 0, &[sge(odp, 0x1000, 8), sge(odp, 0x2800, 8)]).unwrap_err();
    assert_eq!(e.errno(), EFAULT);
    assert!(
        e.to_string().contains("is not mapped in the process"),
        "{e}"
    );
    assert_eq!(
        errno(run(1, 0, &[sge(odp, 0x3000, 8)])),
        EFAULT,
        "read-only page"
    );
    assert_eq!(
        run(0, 0, &[sge(odp, 0x3000, 8)]),
        Ok(()),
        "read-only page, for reading"
    );
    // NO_FAULT checks the elements and faults nothing in.
    assert_eq!(run(2, 0, &[sge(odp, 0x2800, 8)]), Ok(()));
    let other_pd = crate::table::Handle::from_raw(2);
    let e = advise(&mrs, other_pd, 0, 0, &[sge(odp, 0x1000, 8)], &Holes).unwrap_err();
    assert_eq!(e.errno(), EPERM);
}

#[test]
fn device_memory_regions_are_zero_based_and_translate() {
    let zb = AccessFlags::ZERO_BASED.0;
    let f = check_reg_dm(100, 0, 100, zb | 1).unwrap();
    assert_eq!(f, AccessFlags(zb | 1));
    let e = check_reg_dm(100, 0, 100, 1).unwrap_err();
    assert!(
        e.to_string().contains("must include IBV_ACCESS_ZERO_BASED"),
        "{e}"
    );
    for (off, len) in [(0, 104), (96, 8), (101, 0), (u64::MAX, 2)] {
        let e = check_reg_dm(100, off, len, zb | 1).unwrap_err();
        assert_eq!(e.errno(), crate::Errno::EINVAL, "{off}+{len}");
    }
    assert_eq!(
        check_reg_dm(100, 0, 4, zb | 2).unwrap_err().errno(),
        crate::Errno::EINVAL
    );
    assert_eq!(
        check_reg_dm(100, 0, 4, zb | 1 | AccessFlags::ON_DEMAND.0)
            .unwrap_err()
            .errno(),
        crate::Errno::EINVAL
    );
    // A zero-based region at host 0x9000: va 0x10 is host 0x9010.
    let pd = crate::table::Handle::from_raw(1);
    let (lkey, rkey) = keys(0, 1);
    let m = Mr {
        pd,
        addr: 0,
        length: 64,
        access: AccessFlags(zb | 1 | 2),
        lkey,
        rkey,
        host: 0x9000,
    };
    assert_eq!(
        m.check_present(pd, rkey, 0x10, 8, Access::RemoteWrite, &Holes),
        Ok(0x9010)
    );
    assert!(
        matches!(
            m.check_present(pd, rkey, 0x9010, 8, Access::RemoteWrite, &Holes),
            Err(AccessError::OutOfBounds { .. })
        ),
        "host addresses are not region addresses"
    );
}

#[test]
fn keys_differ_and_find_their_slot() {
    let (l, r) = keys(41, 3);
    assert_ne!(l, r);
    assert_eq!(key_index(l), Some(41));
    assert_eq!(key_index(r), Some(41));
    assert_eq!(key_index(0x7f), None);
    assert_ne!(keys(41, 4).0, l);
}

//! Memory regions over the program's own memory and memory windows (in a
//! protection domain, domain.rs; a window is bound by a post, post.rs).

use crate::domain::PdBlock;
use crate::ffi::*;
use crate::util::*;
use softverbs::raw;
use softverbs::AccessFlags;
use std::ffi::{c_int, c_uint, c_void};

#[repr(C)]
pub(crate) struct MrBlock {
    pub c: ibv_mr,
    magic: u64,
    inner: MrInner,
    /// Set when made through a parent domain (its dealloc waits for it).
    domain: Option<crate::domain::DomainHold>,
}
impl_block!(MrBlock, ibv_mr, "memory region", 0x736f_6674_6d72_3031);

/// What an `ibv_mr` registers: the program's memory, or device memory
/// (`ibv_reg_dm_mr`, rdma-core's `IBV_MR_TYPE_DM_MR`).
pub(crate) enum MrInner {
    Host(raw::ExternalMemoryRegion),
    /// Held for its drop, which deregisters it.
    Dm(#[allow(dead_code)] softverbs::DmMemoryRegion),
}

impl MrBlock {
    /// A block for a new region (of `c.pd`, a live PD or parent domain).
    pub(crate) fn new(c: ibv_mr, inner: MrInner) -> MrBlock {
        // SAFETY: `c.pd` is the live PD the region was registered in.
        let domain = unsafe { crate::domain::DomainHold::of(c.pd) };
        MrBlock {
            c,
            magic: MrBlock::MAGIC,
            inner,
            domain,
        }
    }
}

/// `IBV_ACCESS_OPTIONAL_RANGE`: hints a provider may ignore.
pub(crate) const ACCESS_OPTIONAL_RANGE: c_uint = 0x3ff0_0000;
/// `IBV_ACCESS_ON_DEMAND`.
const ACCESS_ON_DEMAND: c_uint = 0x40;

fn reg_mr(
    verb: &str,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    // SAFETY: `block` checks the pointer.
    let made = unsafe { block::<PdBlock>(verb, pd) }.and_then(|b| {
        let implicit = addr.is_null() && length == usize::MAX && access & ACCESS_ON_DEMAND != 0;
        if addr.is_null() && length > 0 && !implicit {
            return Err(refuse(
                verb,
                EINVAL,
                "addr is NULL (only an implicit on-demand region, length SIZE_MAX with IBV_ACCESS_ON_DEMAND, has no address)",
            ));
        }
        if iova != addr as u64 {
            return Err(refuse(
                verb,
                EOPNOTSUPP,
                format_args!("iova {iova:#x} differs from addr {addr:?}: softverbs regions are addressed by their virtual address"),
            ));
        }
        let access = AccessFlags(access & !ACCESS_OPTIONAL_RANGE);
        let mr = if implicit {
            // SAFETY: the program asked for an implicit ODP region: the device
            // may reach any mapped address, each access faulted in first.
            unsafe { raw::reg_implicit_odp_mr(b.pd(), access) }
        } else {
            // SAFETY: ibv_reg_mr(3): the caller keeps the memory mapped until
            // ibv_dereg_mr, which drops the region (deregistering it) first;
            // an on-demand region's accesses fault the range in first.
            unsafe { raw::reg_external_mr(b.pd(), addr as u64, length as u64, access) }
        }
        .map_err(|e| errno_of(&e))?;
        let c = ibv_mr {
            context: b.c.context,
            pd,
            addr,
            length,
            handle: 0,
            lkey: mr.lkey(),
            rkey: mr.rkey(),
        };
        Ok(into_c(MrBlock::new(c, MrInner::Host(mr))))
    });
    made.unwrap_or_else(|e| {
        set_errno(e);
        std::ptr::null_mut()
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    reg_mr(
        "ibv_reg_mr",
        pd,
        addr,
        length,
        addr as u64,
        access as c_uint,
    )
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    reg_mr("ibv_reg_mr_iova", pd, addr, length, iova, access as c_uint)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    reg_mr("ibv_reg_mr_iova2", pd, addr, length, iova, access)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    let b = match block::<MrBlock>("ibv_dereg_mr", mr) {
        Ok(b) => b,
        Err(e) => return e,
    };
    // A region with memory windows bound to it stays (EBUSY, spec/memory-windows.md §5).
    if let MrInner::Host(m) = &b.inner {
        if let Err(e) = raw::dereg_external_mr(m) {
            return errno_of(&e);
        }
    }
    free::<MrBlock>(mr);
    0
}

// ---- memory windows (spec/memory-windows.md) ----

#[repr(C)]
pub(crate) struct MwBlock {
    pub c: ibv_mw,
    magic: u64,
    pub inner: softverbs::MemoryWindow,
    /// Set when made through a parent domain (its dealloc waits for it).
    _domain: Option<crate::domain::DomainHold>,
}
impl_block!(MwBlock, ibv_mw, "memory window", 0x736f_6674_6d77_3031);

/// `ibv_alloc_mw` (the ops slot): `EINVAL` for a type other than 1 or 2.
pub(crate) unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, mw_type: c_uint) -> *mut ibv_mw {
    const VERB: &str = "ibv_alloc_mw";
    let made = block::<PdBlock>(VERB, pd).and_then(|b| {
        let t = softverbs::MwType::from_raw(mw_type).ok_or_else(|| {
            refuse(
                VERB,
                EINVAL,
                format_args!("type {mw_type} is not IBV_MW_TYPE_1 (1) or IBV_MW_TYPE_2 (2)"),
            )
        })?;
        let mw = b.pd().alloc_mw(t).map_err(|e| errno_of(&e))?;
        let c = ibv_mw {
            context: b.c.context,
            pd,
            rkey: mw.rkey(),
            handle: 0,
            type_: mw_type,
        };
        Ok(into_c(MwBlock {
            c,
            magic: MwBlock::MAGIC,
            inner: mw,
            // SAFETY: the live PD checked above.
            _domain: unsafe { crate::domain::DomainHold::of(pd) },
        }))
    });
    made.unwrap_or_else(|e| {
        set_errno(e);
        std::ptr::null_mut()
    })
}

/// `ibv_dealloc_mw` (the ops slot): allowed while bound; the rkey stops
/// working at once.
pub(crate) unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    if let Err(e) = block::<MwBlock>("ibv_dealloc_mw", mw) {
        return e;
    }
    free::<MwBlock>(mw);
    0
}

/// The bind target of window block `w` from a C `ibv_mw_bind_info`.
pub(crate) fn bind_target(
    verb: &str,
    w: &MwBlock,
    rkey: u32,
    info: &ibv_mw_bind_info,
) -> Result<softverbs::WrTarget, c_int> {
    let mr_lkey = if info.mr.is_null() {
        None
    } else {
        // SAFETY: `block` checks the pointer.
        Some(unsafe { block::<MrBlock>(verb, info.mr) }?.c.lkey)
    };
    Ok(w.inner.bind_target(
        mr_lkey,
        info.addr,
        info.length,
        AccessFlags(info.mw_access_flags),
        rkey,
    ))
}

/// `IBV_REREG_MR_CHANGE_TRANSLATION`, `_PD`, `_ACCESS`.
const REREG_CHANGE_TRANSLATION: c_int = 1;
const REREG_CHANGE_PD: c_int = 2;
const REREG_CHANGE_ACCESS: c_int = 4;
/// `IBV_REREG_MR_ERR_INPUT`: the old MR is valid, libibverbs refused the input.
const REREG_MR_ERR_INPUT: c_int = -1;
/// `IBV_REREG_MR_ERR_CMD`: the device refused (errno says why).
const REREG_MR_ERR_CMD: c_int = -4;

/// `ibv_rereg_mr`: a new PD, translation and/or access for `mr`, all or
/// nothing, with libibverbs' input checks (`IBV_REREG_MR_ERR_INPUT`, errno
/// `EINVAL`) and the device's (`IBV_REREG_MR_ERR_CMD`, errno from the engine:
/// `EINVAL`, `EOPNOTSUPP`). The keys stay (spec/mr-rereg.md). Fork needs no
/// `madvise` here (`ibv_is_fork_initialized` is `IBV_FORK_UNNEEDED`), so
/// `ibv_dontfork_range`/`ibv_dofork_range` cannot fail and the fork error
/// codes (`ERR_DONT_FORK_NEW`, `ERR_DO_FORK_OLD`, `ERR_CMD_AND_DO_FORK_NEW`)
/// never occur, as with rdma-core on a kernel with copy-on-fork. A refused
/// command changes nothing: the MR stays valid.
#[no_mangle]
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    const VERB: &str = "ibv_rereg_mr";
    let input = |why: &str| {
        set_errno(refuse(VERB, EINVAL, why));
        REREG_MR_ERR_INPUT
    };
    let b = match block::<MrBlock>(VERB, mr) {
        Ok(b) => std::ptr::from_ref::<MrBlock>(b).cast_mut(),
        Err(e) => {
            set_errno(e);
            return REREG_MR_ERR_INPUT;
        }
    };
    // libibverbs checks first that this is an IBV_MR_TYPE_MR.
    // SAFETY: a live block (checked above).
    if matches!(unsafe { &(*b).inner }, MrInner::Dm(_)) {
        return input("a device-memory region (ibv_reg_dm_mr) cannot be re-registered");
    }
    let all = REREG_CHANGE_TRANSLATION | REREG_CHANGE_PD | REREG_CHANGE_ACCESS;
    if flags & !all != 0 {
        return input(&format!(
            "flags {flags:#x} has bits beyond IBV_REREG_MR_FLAGS_SUPPORTED (0x7)"
        ));
    }
    let translation = flags & REREG_CHANGE_TRANSLATION != 0;
    if translation && (length == 0 || addr.is_null()) {
        return input(
            "IBV_REREG_MR_CHANGE_TRANSLATION needs a non-NULL addr and a non-zero length",
        );
    }
    if access != 0 && flags & REREG_CHANGE_ACCESS == 0 {
        return input("access is non-zero but flags lack IBV_REREG_MR_CHANGE_ACCESS");
    }
    let new_pd = if flags & REREG_CHANGE_PD != 0 {
        match block::<PdBlock>(VERB, pd) {
            Ok(p) => Some(p),
            Err(e) => {
                set_errno(e);
                return REREG_MR_ERR_CMD;
            }
        }
    } else {
        None
    };
    let access = (flags & REREG_CHANGE_ACCESS != 0)
        .then_some(AccessFlags(access as c_uint & !ACCESS_OPTIONAL_RANGE));
    // SAFETY: a live block (checked); the caller does not use `mr` concurrently
    // with its re-registration (as with rdma-core, which writes it too).
    let b = unsafe { &mut *b };
    let MrInner::Host(inner) = &mut b.inner else {
        return input("a device-memory region (ibv_reg_dm_mr) cannot be re-registered");
    };
    let done = if translation {
        // SAFETY: ibv_rereg_mr(3), as ibv_reg_mr(3): the caller keeps the new
        // range mapped until the MR is deregistered or moved again.
        unsafe {
            raw::rereg_external_mr_translation(
                inner,
                addr as u64,
                length as u64,
                new_pd.map(PdBlock::pd),
                access,
            )
        }
    } else {
        raw::rereg_external_mr(inner, new_pd.map(PdBlock::pd), access)
    };
    if let Err(e) = done {
        set_errno(errno_of(&e));
        return REREG_MR_ERR_CMD;
    }
    if new_pd.is_some() {
        b.c.pd = pd;
        // SAFETY: `pd` is the live PD checked above.
        b.domain = unsafe { crate::domain::DomainHold::of(pd) };
    }
    if translation {
        b.c.addr = addr;
        b.c.length = length;
    }
    b.c.lkey = inner.lkey();
    b.c.rkey = inner.rkey();
    0
}

/// `verbs_context.advise_mr` (`ibv_advise_mr` is inline in verbs.h): prefetch
/// ranges of on-demand regions; returns 0 or the errno (spec/odp.md).
pub(crate) unsafe extern "C" fn advise_mr(
    pd: *mut ibv_pd,
    advice: c_uint,
    flags: u32,
    sg_list: *mut ibv_sge,
    num_sge: u32,
) -> c_int {
    const VERB: &str = "ibv_advise_mr";
    let b = match block::<PdBlock>(VERB, pd) {
        Ok(b) => b,
        Err(e) => return e,
    };
    if sg_list.is_null() && num_sge > 0 {
        return refuse(VERB, EINVAL, "sg_list is NULL");
    }
    let sges: Vec<softverbs::Sge> = (0..num_sge as usize)
        .map(|i| {
            // SAFETY: the caller's array of num_sge elements (checked non-NULL).
            let s = unsafe { &*sg_list.add(i) };
            softverbs::Sge {
                addr: s.addr,
                length: s.length,
                lkey: s.lkey,
            }
        })
        .collect();
    match b.pd().advise_mr(advice, flags, &sges) {
        Ok(()) => 0,
        Err(e) => errno_of(&e),
    }
}

/// `ibv_reg_dmabuf_mr`: no dma-buf support.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_dmabuf_mr(
    _pd: *mut ibv_pd,
    _offset: u64,
    _length: usize,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut ibv_mr {
    set_errno(refuse(
        "ibv_reg_dmabuf_mr",
        EOPNOTSUPP,
        "dma-buf memory regions are not offered",
    ));
    std::ptr::null_mut()
}

crate::symver!("memory");

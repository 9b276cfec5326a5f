//! Protection domains (`ibv_alloc_pd`), thread domains (`ibv_alloc_td`) and
//! parent domains (`ibv_alloc_parent_domain`, the `verbs_context` ops behind
//! verbs.h's inline functions, spec/parent-domain.md). Every object made in a
//! PD (MRs, windows, AHs, CQs of a parent domain, SRQs, QPs, WQs) sits above
//! this file and holds its parent domain through [`DomainHold`].
//!
//! A parent domain stands on a protection domain: it is accepted wherever a
//! PD is, and what is created through it is in that PD (mlx5 gives it its
//! PD's number). A thread domain is the program's promise that one thread
//! uses the objects; softverbs keeps its locks, so the promise changes
//! nothing but is honoured as an object (it cannot go while parent domains
//! use it). The custom allocators are kept with the parent domain and never
//! called: softverbs allocates no queue buffers in the program's memory (its
//! queues live inside the library), which is what a provider answering
//! `IBV_ALLOCATOR_USE_DEFAULT` to itself amounts to.

use crate::context::ctx_block;
use crate::ffi::*;
use crate::util::*;
use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};

#[repr(C)]
pub(crate) struct PdBlock {
    pub c: ibv_pd,
    magic: u64,
    pub inner: Option<softverbs::ProtectionDomain>,
    /// Set for a parent domain (`ibv_alloc_parent_domain`): what it stands on.
    pub parent: Option<ParentDomain>,
    /// Parent domains standing on this PD (`EBUSY` for its dealloc).
    pub parents: std::sync::atomic::AtomicUsize,
    /// For a parent domain: objects created through it
    /// ([`DomainHold`]; `EBUSY` for its dealloc).
    pub users: std::sync::atomic::AtomicUsize,
}
impl_block!(PdBlock, ibv_pd, "protection domain", 0x736f_6674_7064_3031);

impl PdBlock {
    pub(crate) fn pd(&self) -> &softverbs::ProtectionDomain {
        self.inner.as_ref().expect("a live PD block holds its PD")
    }

    /// A block for `pd` (a parent domain when `parent` is set).
    pub(crate) fn new(
        context: *mut ibv_context,
        pd: softverbs::ProtectionDomain,
        parent: Option<ParentDomain>,
    ) -> PdBlock {
        PdBlock {
            c: ibv_pd { context, handle: 0 },
            magic: PdBlock::MAGIC,
            inner: Some(pd),
            parent,
            parents: std::sync::atomic::AtomicUsize::new(0),
            users: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// True while the block is live (the magic word checked without a log).
    pub(crate) fn magic_ok(&self) -> bool {
        self.magic == PdBlock::MAGIC
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    let made = ctx_block("ibv_alloc_pd", context).and_then(|b| {
        let pd = b.ctx.alloc_pd().map_err(|e| errno_of(&e))?;
        Ok(into_c(PdBlock::new(context, pd, None)))
    });
    made.unwrap_or_else(|e| {
        set_errno(e);
        std::ptr::null_mut()
    })
}

/// `ibv_dealloc_pd`: `EBUSY` while MRs, QPs, SRQs, AHs or parent domains
/// use it; a parent domain, while objects created through it live
/// (spec/parent-domain.md).
#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    let b = match block::<PdBlock>("ibv_dealloc_pd", pd) {
        Ok(b) => std::ptr::from_ref::<PdBlock>(b).cast_mut(),
        Err(e) => return e,
    };
    // SAFETY: a live block (checked).
    let blk = unsafe { &*b };
    if blk.parent.is_some() {
        // SAFETY: `pd` is this live parent domain.
        return unsafe { dealloc(pd, blk) };
    }
    let parents = blk.parents.load(std::sync::atomic::Ordering::Acquire);
    if parents > 0 {
        return refuse(
            "ibv_dealloc_pd",
            EBUSY,
            format_args!(
                "{parents} parent domain(s) stand on this protection domain; deallocate them first"
            ),
        );
    }
    // SAFETY: a live block; only the destroy path takes the PD out.
    let inner = unsafe { (*b).inner.take() }.expect("live PD");
    match inner.destroy() {
        Ok(()) => {
            free::<PdBlock>(pd);
            0
        }
        Err(refused) => {
            // SAFETY: as above: put it back unchanged.
            unsafe { (*b).inner = Some(refused.object) };
            errno_of(&refused.error)
        }
    }
}

#[repr(C)]
pub(crate) struct TdBlock {
    pub c: ibv_td,
    magic: u64,
    /// Parent domains using it.
    users: AtomicUsize,
}
impl_block!(TdBlock, ibv_td, "thread domain", 0x736f_6674_7464_3031);

/// What a parent domain stands on, and what the program gave it.
pub(crate) struct ParentDomain {
    base: *const PdBlock,
    td: *const TdBlock,
    /// `alloc`, `free` and `pd_context` (kept, never called: see the module doc).
    _allocators: (Op, Op, *mut std::ffi::c_void),
}

// SAFETY: the pointers name blocks kept alive by the use counts below (the
// base PD and TD refuse their dealloc while this parent domain exists).
unsafe impl Send for ParentDomain {}
// SAFETY: as above; they are only read.
unsafe impl Sync for ParentDomain {}

/// `IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS`, `_PD_CONTEXT`.
const PD_ATTR_ALLOCATORS: u32 = 1;
const PD_ATTR_PD_CONTEXT: u32 = 2;

/// `verbs_context.alloc_td`: `comp_mask` must be 0 (`EINVAL`).
pub(crate) unsafe extern "C" fn alloc_td(
    context: *mut ibv_context,
    attr: *const ibv_td_init_attr,
) -> *mut ibv_td {
    const VERB: &str = "ibv_alloc_td";
    let made = ctx_block(VERB, context).and_then(|_| {
        if attr.is_null() {
            return Err(refuse(VERB, EINVAL, "init_attr is NULL"));
        }
        // SAFETY: the caller's attributes (checked non-NULL).
        let mask = unsafe { (*attr).comp_mask };
        if mask != 0 {
            return Err(refuse(
                VERB,
                EINVAL,
                format_args!("comp_mask {mask:#x} must be 0"),
            ));
        }
        Ok(into_c(TdBlock {
            c: ibv_td { context },
            magic: TdBlock::MAGIC,
            users: AtomicUsize::new(0),
        }))
    });
    made.unwrap_or_else(|e| {
        set_errno(e);
        std::ptr::null_mut()
    })
}

/// `verbs_context.dealloc_td`: `EBUSY` while parent domains use it.
pub(crate) unsafe extern "C" fn dealloc_td(td: *mut ibv_td) -> c_int {
    let b = match block::<TdBlock>("ibv_dealloc_td", td) {
        Ok(b) => b,
        Err(e) => return e,
    };
    let users = b.users.load(Ordering::Acquire);
    if users > 0 {
        return refuse(
            "ibv_dealloc_td",
            EBUSY,
            format_args!("{users} parent domain(s) use this thread domain; deallocate them first"),
        );
    }
    free::<TdBlock>(td);
    0
}

/// `verbs_context.alloc_parent_domain`: `EINVAL` for a NULL or non-PD `pd`
/// (a parent domain cannot stand on another), a bad `td`, unknown
/// `comp_mask` bits, or `ALLOCATORS` without both functions.
pub(crate) unsafe extern "C" fn alloc_parent_domain(
    context: *mut ibv_context,
    attr: *const ibv_parent_domain_init_attr,
) -> *mut ibv_pd {
    const VERB: &str = "ibv_alloc_parent_domain";
    let made = ctx_block(VERB, context).and_then(|_| {
        if attr.is_null() {
            return Err(refuse(VERB, EINVAL, "attr is NULL"));
        }
        // SAFETY: the caller's attributes (checked non-NULL).
        let a = unsafe { *attr };
        let known = PD_ATTR_ALLOCATORS | PD_ATTR_PD_CONTEXT;
        if a.comp_mask & !known != 0 {
            return Err(refuse(
                VERB,
                EINVAL,
                format_args!(
                    "comp_mask {:#x} has bits beyond ALLOCATORS | PD_CONTEXT",
                    a.comp_mask
                ),
            ));
        }
        if a.comp_mask & PD_ATTR_ALLOCATORS != 0 && (a.alloc.is_null() || a.free.is_null()) {
            return Err(refuse(
                VERB,
                EINVAL,
                "IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS needs both alloc and free",
            ));
        }
        let base = block::<PdBlock>(VERB, a.pd)?;
        if base.parent.is_some() {
            return Err(refuse(
                VERB,
                EINVAL,
                "attr->pd is a parent domain; a parent domain stands on a protection domain",
            ));
        }
        if base.c.context != context {
            return Err(refuse(VERB, EINVAL, "attr->pd belongs to another context"));
        }
        let td = if a.td.is_null() {
            std::ptr::null()
        } else {
            let t = block::<TdBlock>(VERB, a.td)?;
            if t.c.context != context {
                return Err(refuse(VERB, EINVAL, "attr->td belongs to another context"));
            }
            std::ptr::from_ref::<TdBlock>(t)
        };
        let allocators = if a.comp_mask & PD_ATTR_ALLOCATORS != 0 {
            (a.alloc, a.free)
        } else {
            (std::ptr::null(), std::ptr::null())
        };
        let pd_context = if a.comp_mask & PD_ATTR_PD_CONTEXT != 0 {
            a.pd_context
        } else {
            std::ptr::null_mut()
        };
        base.parents.fetch_add(1, Ordering::AcqRel);
        // SAFETY: NULL or a live TD block (checked just above).
        if let Some(t) = unsafe { td.as_ref() } {
            t.users.fetch_add(1, Ordering::AcqRel);
        }
        let parent = ParentDomain {
            base: std::ptr::from_ref::<PdBlock>(base),
            td,
            _allocators: (allocators.0, allocators.1, pd_context),
        };
        let shared = softverbs::raw::share_pd(base.pd());
        Ok(into_c(PdBlock::new(context, shared, Some(parent))))
    });
    made.unwrap_or_else(|e| {
        set_errno(e);
        std::ptr::null_mut()
    })
}

/// A parent domain goes: its PD and TD are free of it.
fn release(b: &PdBlock) {
    let Some(p) = &b.parent else { return };
    // SAFETY: the base PD and the TD outlive their parent domains (their
    // deallocs refuse while the counts are non-zero).
    unsafe {
        (*p.base).parents.fetch_sub(1, Ordering::AcqRel);
        if let Some(t) = p.td.as_ref() {
            t.users.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// One object created through a parent domain (a QP, a CQ of
/// `IBV_CQ_INIT_ATTR_MASK_PD`, an SRQ, a WQ, an MR, a memory window, an AH):
/// while it lives, `ibv_dealloc_pd` of the parent domain answers `EBUSY`
/// (spec/parent-domain.md: mlx5's `mpd.refcount`). Kept in the object's
/// block; dropping the block drops the hold.
pub(crate) struct DomainHold(*const PdBlock);

// SAFETY: the pointer names a parent-domain block that cannot be freed while
// this hold exists (its dealloc refuses); only its atomic count is touched.
unsafe impl Send for DomainHold {}
// SAFETY: as above.
unsafe impl Sync for DomainHold {}

impl DomainHold {
    /// A hold on `pd` if it is a live parent domain; `None` for a plain PD,
    /// NULL or anything else (the objects of a plain PD are the engine's to
    /// count).
    ///
    /// # Safety
    /// `pd` is NULL or a pointer this library handed out (see [`block`]).
    pub(crate) unsafe fn of(pd: *const ibv_pd) -> Option<DomainHold> {
        if pd.is_null() {
            return None;
        }
        // SAFETY: per the contract; a silent check (the verb checked it).
        let b = unsafe { &*pd.cast::<PdBlock>() };
        if b.magic_ok() && b.parent.is_some() {
            b.users.fetch_add(1, Ordering::AcqRel);
            Some(DomainHold(std::ptr::from_ref(b)))
        } else {
            None
        }
    }
}

impl Drop for DomainHold {
    fn drop(&mut self) {
        // SAFETY: the parent domain outlives its holds (see the type doc).
        unsafe { (*self.0).users.fetch_sub(1, Ordering::AcqRel) };
    }
}

/// `ibv_dealloc_pd` of a parent domain: `EBUSY` while objects created
/// through it live (mlx5_dealloc_parent_domain), else its PD and TD are
/// free of it and its block goes.
///
/// # Safety
/// `pd` is the live parent domain `b` (checked by the caller).
pub(crate) unsafe fn dealloc(pd: *mut ibv_pd, b: &PdBlock) -> c_int {
    let users = b.users.load(Ordering::Acquire);
    if users > 0 {
        return refuse(
            "ibv_dealloc_pd",
            EBUSY,
            format_args!(
                "{users} object(s) (QPs, CQs, SRQs, WQs, MRs, MWs, AHs) were created through this parent domain and still exist; destroy them first"
            ),
        );
    }
    release(b);
    // SAFETY: per the contract; nothing holds it any more.
    unsafe { free::<PdBlock>(pd) };
    0
}

/// True if `pd` is a live parent domain (for `IBV_CQ_INIT_ATTR_MASK_PD`).
pub(crate) unsafe fn is_parent_domain(verb: &str, pd: *mut ibv_pd) -> Result<(), c_int> {
    let b = block::<PdBlock>(verb, pd)?;
    if b.parent.is_none() {
        return Err(refuse(
            verb,
            EINVAL,
            "parent_domain is a protection domain, not a parent domain",
        ));
    }
    Ok(())
}

crate::symver!("domain");

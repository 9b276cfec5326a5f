//! Device memory through the C ABI: the `alloc_dm`, `free_dm` and
//! `reg_dm_mr` ops of the `verbs_context` (`ibv_alloc_dm`, `ibv_free_dm`,
//! `ibv_reg_dm_mr` are inline in verbs.h) and the copy functions the
//! program reaches through `struct ibv_dm` (spec/device-memory.md).

use crate::context::ctx_block;
use crate::domain::PdBlock;
use crate::ffi::*;
use crate::memory::{MrBlock, MrInner};
use crate::util::*;
use softverbs::AccessFlags;
use std::ffi::{c_int, c_uint, c_void};

#[repr(C)]
pub(crate) struct DmBlock {
    pub c: ibv_dm,
    magic: u64,
    inner: Option<softverbs::DeviceMemory>,
}
impl_block!(DmBlock, ibv_dm, "device memory", 0x736f_6674_646d_3031);

impl DmBlock {
    fn dm(&self) -> &softverbs::DeviceMemory {
        self.inner
            .as_ref()
            .expect("a live DM block holds its memory")
    }
}

/// `verbs_context.alloc_dm`.
pub(crate) unsafe extern "C" fn alloc_dm(
    context: *mut ibv_context,
    attr: *const ibv_alloc_dm_attr,
) -> *mut ibv_dm {
    const VERB: &str = "ibv_alloc_dm";
    let made = ctx_block(VERB, context).and_then(|b| {
        if attr.is_null() {
            return Err(refuse(VERB, EINVAL, "attr is NULL"));
        }
        // SAFETY: the caller's attributes (checked non-NULL).
        let a = unsafe { *attr };
        let dm = b
            .ctx
            .alloc_dm(a.length as u64, a.log_align_req, a.comp_mask)
            .map_err(|e| errno_of(&e))?;
        let c = ibv_dm {
            context,
            memcpy_to_dm: memcpy_to_dm as Op,
            memcpy_from_dm: memcpy_from_dm as Op,
            comp_mask: 0,
            handle: 0,
        };
        Ok(into_c(DmBlock {
            c,
            magic: DmBlock::MAGIC,
            inner: Some(dm),
        }))
    });
    made.unwrap_or_else(|e| {
        set_errno(e);
        std::ptr::null_mut()
    })
}

/// `verbs_context.free_dm`: `EBUSY` while memory regions use it.
pub(crate) unsafe extern "C" fn free_dm(dm: *mut ibv_dm) -> c_int {
    let b = match block::<DmBlock>("ibv_free_dm", dm) {
        Ok(b) => std::ptr::from_ref::<DmBlock>(b).cast_mut(),
        Err(e) => return e,
    };
    // SAFETY: a live block; only this path takes the memory out.
    let inner = unsafe { (*b).inner.take() }.expect("live DM");
    match inner.free() {
        Ok(()) => {
            free::<DmBlock>(dm);
            0
        }
        Err(refused) => {
            // SAFETY: as above: put it back unchanged.
            unsafe { (*b).inner = Some(refused.object) };
            errno_of(&refused.error)
        }
    }
}

/// `dm->memcpy_to_dm`: 0, `EFAULT` beyond the allocation, `EINVAL` for an
/// offset or length that is not a multiple of 4.
unsafe extern "C" fn memcpy_to_dm(
    dm: *mut ibv_dm,
    dm_offset: u64,
    host_addr: *const c_void,
    length: usize,
) -> c_int {
    let b = match block::<DmBlock>("ibv_memcpy_to_dm", dm) {
        Ok(b) => b,
        Err(e) => return e,
    };
    if host_addr.is_null() && length > 0 {
        return refuse("ibv_memcpy_to_dm", EINVAL, "host_addr is NULL");
    }
    let src: &[u8] = if length == 0 {
        &[]
    } else {
        // SAFETY: ibv_memcpy_to_dm(3): `host_addr` holds `length` readable bytes.
        unsafe { std::slice::from_raw_parts(host_addr.cast::<u8>(), length) }
    };
    match b.dm().copy_to(dm_offset, src) {
        Ok(()) => 0,
        Err(e) => errno_of(&e),
    }
}

/// `dm->memcpy_from_dm`: as [`memcpy_to_dm`], the other way.
unsafe extern "C" fn memcpy_from_dm(
    host_addr: *mut c_void,
    dm: *mut ibv_dm,
    dm_offset: u64,
    length: usize,
) -> c_int {
    let b = match block::<DmBlock>("ibv_memcpy_from_dm", dm) {
        Ok(b) => b,
        Err(e) => return e,
    };
    if host_addr.is_null() && length > 0 {
        return refuse("ibv_memcpy_from_dm", EINVAL, "host_addr is NULL");
    }
    let dst: &mut [u8] = if length == 0 {
        &mut []
    } else {
        // SAFETY: ibv_memcpy_from_dm(3): `host_addr` holds `length` writable
        // bytes, not otherwise borrowed during the call.
        unsafe { std::slice::from_raw_parts_mut(host_addr.cast::<u8>(), length) }
    };
    match b.dm().copy_from(dm_offset, dst) {
        Ok(()) => 0,
        Err(e) => errno_of(&e),
    }
}

/// `verbs_context.reg_dm_mr`: a zero-based region (`mr->addr` is 0) over
/// `length` bytes of `dm` from `dm_offset`.
pub(crate) unsafe extern "C" fn reg_dm_mr(
    pd: *mut ibv_pd,
    dm: *mut ibv_dm,
    dm_offset: u64,
    length: usize,
    access: c_uint,
) -> *mut ibv_mr {
    const VERB: &str = "ibv_reg_dm_mr";
    let made = block::<PdBlock>(VERB, pd).and_then(|p| {
        let d = block::<DmBlock>(VERB, dm)?;
        let access = AccessFlags(access & !crate::memory::ACCESS_OPTIONAL_RANGE);
        let mr = p
            .pd()
            .reg_dm_mr(d.dm(), dm_offset, length as u64, access)
            .map_err(|e| errno_of(&e))?;
        let c = ibv_mr {
            context: p.c.context,
            pd,
            addr: std::ptr::null_mut(),
            length,
            handle: 0,
            lkey: mr.lkey(),
            rkey: mr.rkey(),
        };
        Ok(into_c(MrBlock::new(c, MrInner::Dm(mr))))
    });
    made.unwrap_or_else(|e| {
        set_errno(e);
        std::ptr::null_mut()
    })
}

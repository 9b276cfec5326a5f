//! XRC domains: the `verbs_context` ops behind verbs.h's inline
//! `ibv_open_xrcd` and `ibv_close_xrcd` (spec/xrc.md). XRC SRQs are in
//! srq.rs, XRC target QPs (`ibv_open_qp`, `ibv_create_qp_ex` of an XRC_RECV
//! QP) in qp/create.rs, XRC sends in post.rs.
//!
//! The file an XRC domain is tied to is named by its descriptor's `st_dev`
//! and `st_ino` (as the kernel keys its table by inode): opens of one file
//! share one domain among this process's contexts on the device.

use crate::ffi::*;
use crate::util::*;
use std::ffi::c_int;

#[repr(C)]
pub(crate) struct XrcdBlock {
    pub c: ibv_xrcd,
    magic: u64,
    inner: Option<softverbs::XrcDomain>,
}
impl_block!(XrcdBlock, ibv_xrcd, "XRC domain", 0x736f_6674_7872_6331);

impl XrcdBlock {
    pub(crate) fn xrcd(&self) -> &softverbs::XrcDomain {
        self.inner
            .as_ref()
            .expect("a live XRCD block holds its domain")
    }
}

/// The block behind an `ibv_xrcd` pointer.
pub(crate) fn xrcd_block<'a>(verb: &str, x: *mut ibv_xrcd) -> Result<&'a XrcdBlock, c_int> {
    // SAFETY: `block` checks NULL and the magic word before reading the block.
    unsafe { block::<XrcdBlock>(verb, x) }
}

/// `enum ibv_xrcd_init_attr_mask`: `FD`, `OFLAGS`, and the first reserved bit.
const XRCD_INIT_ATTR_FD: u32 = 1;
const XRCD_INIT_ATTR_OFLAGS: u32 = 1 << 1;
const XRCD_INIT_ATTR_RESERVED: u32 = 1 << 2;

/// `st_dev` and `st_ino` of `fd`; `EBADF` if it is no open descriptor.
fn file_key(verb: &str, fd: c_int) -> Result<softverbs::XrcdKey, c_int> {
    // SAFETY: a zeroed `stat` is a valid out-buffer for fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat reads `fd` and writes `st`, which we own.
    if unsafe { libc::fstat(fd, &raw mut st) } != 0 {
        let why = format_args!("fd {fd} is not an open file descriptor");
        return Err(refuse(verb, libc::EBADF, why));
    }
    Ok(softverbs::XrcdKey {
        dev: st.st_dev,
        ino: st.st_ino,
    })
}

/// `verbs_context.open_xrcd`: `comp_mask` must name `FD` and `OFLAGS`
/// (rdma-core `ibv_cmd_open_xrcd`: `EINVAL`; unknown bits `EOPNOTSUPP`).
pub(crate) unsafe extern "C" fn open_xrcd(
    context: *mut ibv_context,
    attr: *mut ibv_xrcd_init_attr,
) -> *mut ibv_xrcd {
    const VERB: &str = "ibv_open_xrcd";
    let r = crate::context::ctx_block(VERB, context).and_then(|ctx| {
        if attr.is_null() {
            return Err(refuse(VERB, EINVAL, "xrcd_init_attr is NULL"));
        }
        // SAFETY: non-NULL attributes from the caller.
        let a = unsafe { &*attr };
        if a.comp_mask >= XRCD_INIT_ATTR_RESERVED {
            let why = format_args!("comp_mask {:#x} has unknown bits", a.comp_mask);
            return Err(refuse(VERB, EOPNOTSUPP, why));
        }
        let both = XRCD_INIT_ATTR_FD | XRCD_INIT_ATTR_OFLAGS;
        if a.comp_mask & both != both {
            let why = "comp_mask must include IBV_XRCD_INIT_ATTR_FD and IBV_XRCD_INIT_ATTR_OFLAGS";
            return Err(refuse(VERB, EINVAL, why));
        }
        let key = match a.fd {
            -1 => None,
            fd => Some(file_key(VERB, fd)?),
        };
        let x = ctx
            .ctx
            .open_xrcd(key, a.oflags as u32)
            .map_err(|e| errno_of(&e))?;
        Ok(into_c(XrcdBlock {
            c: ibv_xrcd { context },
            magic: XrcdBlock::MAGIC,
            inner: Some(x),
        }))
    });
    r.unwrap_or_else(|e| {
        set_errno(e);
        std::ptr::null_mut()
    })
}

/// `verbs_context.close_xrcd`: `EBUSY` while XRC SRQs or XRC_RECV QPs made
/// through it exist.
pub(crate) unsafe extern "C" fn close_xrcd(xrcd: *mut ibv_xrcd) -> c_int {
    let b = match xrcd_block("ibv_close_xrcd", xrcd) {
        Ok(b) => std::ptr::from_ref::<XrcdBlock>(b).cast_mut(),
        Err(e) => return e,
    };
    // SAFETY: a live block; only the close path takes the domain out.
    let inner = unsafe { (*b).inner.take() }.expect("live XRCD");
    if let Err(refused) = inner.close() {
        // SAFETY: as above: put it back unchanged.
        unsafe { (*b).inner = Some(refused.object) };
        return errno_of(&refused.error);
    }
    // SAFETY: the live block, now empty.
    unsafe { free::<XrcdBlock>(xrcd) };
    0
}

//! `ibv_create_flow` / `ibv_destroy_flow` (the `verbs_context` ops verbs.h's
//! inline functions call): the rule, `struct ibv_flow_attr` and its specs,
//! is copied as bytes and handed to softverbs, which parses it and makes it
//! the RAW_PACKET QP's socket filter (spec/raw-packet.md §3).

use crate::ffi::{ibv_flow, ibv_qp};
use crate::qp::QpBlock;
use crate::util::*;
use std::ffi::{c_int, c_void};

#[repr(C)]
pub(crate) struct FlowBlock {
    pub c: ibv_flow,
    magic: u64,
    inner: softverbs::Flow,
}
impl_block!(FlowBlock, ibv_flow, "flow", 0x736f_6674_666c_3031);

/// `struct ibv_flow_attr`'s size, and the most specs' bytes read after it.
const ATTR_LEN: usize = 20;
const MAX_SPECS_LEN: usize = 255 * 88;

/// Copies the attribute and its `num_of_specs` specs, each as long as its
/// header's `size` says (bounded), into one buffer.
///
/// # Safety
/// `attr` points to a readable `ibv_flow_attr` followed by its specs.
unsafe fn rule_bytes(attr: *const u8) -> Vec<u8> {
    let mut out = vec![0u8; ATTR_LEN];
    // SAFETY: the caller's attribute, ATTR_LEN bytes.
    unsafe { std::ptr::copy_nonoverlapping(attr, out.as_mut_ptr(), ATTR_LEN) };
    let n = out[12];
    for _ in 0..n {
        let at = out.len();
        let mut hdr = [0u8; 6];
        // SAFETY: a spec header follows each spec the caller declared.
        unsafe { std::ptr::copy_nonoverlapping(attr.add(at), hdr.as_mut_ptr(), 6) };
        let size = usize::from(u16::from_ne_bytes([hdr[4], hdr[5]]));
        if size < 6 || at + size > ATTR_LEN + MAX_SPECS_LEN {
            // The parser refuses it by its header alone.
            out.extend(hdr);
            break;
        }
        out.resize(at + size, 0);
        // SAFETY: the spec of `size` bytes its header declares.
        unsafe { std::ptr::copy_nonoverlapping(attr.add(at), out[at..].as_mut_ptr(), size) };
    }
    out
}

pub(crate) unsafe extern "C" fn create_flow(qp: *mut ibv_qp, attr: *mut c_void) -> *mut ibv_flow {
    let verb = "ibv_create_flow";
    let r = block::<QpBlock>(verb, qp).and_then(|q| {
        if attr.is_null() {
            return Err(refuse(verb, EINVAL, "flow_attr is NULL"));
        }
        // SAFETY: the caller's rule, read as its headers declare.
        let bytes = unsafe { rule_bytes(attr.cast()) };
        let flow = q.inner.create_flow(&bytes).map_err(|e| errno_of(&e))?;
        Ok(into_c(FlowBlock {
            c: ibv_flow {
                comp_mask: 0,
                context: q.c.qp_base.context,
                handle: 0,
            },
            magic: FlowBlock::MAGIC,
            inner: flow,
        }))
    });
    match r {
        Ok(p) => p,
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

pub(crate) unsafe extern "C" fn destroy_flow(flow: *mut ibv_flow) -> c_int {
    if let Err(e) = block::<FlowBlock>("ibv_destroy_flow", flow) {
        return e;
    }
    free::<FlowBlock>(flow);
    0
}

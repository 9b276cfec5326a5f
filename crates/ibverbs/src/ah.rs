//! Address handles, including the ones built from a received completion
//! (`ibv_init_ah_from_wc`, `ibv_create_ah_from_wc`).

use crate::context::ctx_block;
use crate::convert::ah_attr;
use crate::domain::PdBlock;
use crate::ffi::*;
use crate::util::*;
use std::ffi::c_int;

#[repr(C)]
pub(crate) struct AhBlock {
    pub c: ibv_ah,
    magic: u64,
    inner: softverbs::AddressHandle,
    /// Set when made through a parent domain (its dealloc waits for it).
    _domain: Option<crate::domain::DomainHold>,
}
impl_block!(AhBlock, ibv_ah, "address handle", 0x736f_6674_6168_3031);

impl AhBlock {
    pub(crate) fn ah(&self) -> &softverbs::AddressHandle {
        &self.inner
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    let r = block::<PdBlock>("ibv_create_ah", pd).and_then(|pdb| {
        if attr.is_null() {
            return Err(refuse("ibv_create_ah", EINVAL, "ah_attr is NULL"));
        }
        // SAFETY: non-NULL attributes from the caller.
        let ah = pdb
            .pd()
            .create_ah(&ah_attr(unsafe { &*attr }))
            .map_err(|e| errno_of(&e))?;
        Ok(into_c(AhBlock {
            c: ibv_ah {
                context: pdb.c.context,
                pd,
                handle: 0,
            },
            magic: AhBlock::MAGIC,
            inner: ah,
            // SAFETY: the live PD checked above.
            _domain: unsafe { crate::domain::DomainHold::of(pd) },
        }))
    });
    r.unwrap_or_else(|e| {
        set_errno(e);
        std::ptr::null_mut()
    })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    if let Err(e) = block::<AhBlock>("ibv_destroy_ah", ah) {
        return e;
    }
    free::<AhBlock>(ah);
    0
}

/// `IBV_WC_GRH`.
const WC_GRH: u32 = 1;

/// The address vector back to the sender of a UD receive. On RoCE v2 over IPv4
/// the 40-byte GRH area holds the IPv4 header in its last 20 bytes; over IPv6
/// it holds the IPv6 header. `-1` with errno on error (rdma-core's convention).
#[no_mangle]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    context: *mut ibv_context,
    port_num: u8,
    wc: *mut ibv_wc,
    grh: *mut u8,
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    const VERB: &str = "ibv_init_ah_from_wc";
    let r = (|| {
        let b = ctx_block(VERB, context)?;
        if wc.is_null() || grh.is_null() || ah_attr.is_null() {
            return Err(refuse(VERB, EINVAL, "wc, grh or ah_attr is NULL"));
        }
        // SAFETY: non-NULL caller structs; the GRH area is 40 bytes.
        let (w, area) = unsafe { (&*wc, std::slice::from_raw_parts(grh, 40)) };
        if w.wc_flags & WC_GRH == 0 {
            return Err(refuse(
                VERB,
                EINVAL,
                "the completion carries no GRH, and RoCE needs one",
            ));
        }
        let (sgid, dgid, tclass, flow) = if area[20] >> 4 == 4 {
            let v4 = |o: usize| {
                let mut g = [0u8; 16];
                g[10] = 0xff;
                g[11] = 0xff;
                g[12..].copy_from_slice(&area[o..o + 4]);
                g
            };
            (v4(32), v4(36), area[21] >> 2 << 2, 0)
        } else {
            let word = u32::from_be_bytes([area[0], area[1], area[2], area[3]]);
            let mut s = [0u8; 16];
            let mut d = [0u8; 16];
            s.copy_from_slice(&area[8..24]);
            d.copy_from_slice(&area[24..40]);
            (s, d, (word >> 20) as u8, word & 0xf_ffff)
        };
        // Our GID the packet was sent to is the source GID of the reply.
        let len = b
            .ctx
            .query_port(port_num)
            .map_err(|e| errno_of(&e))?
            .gid_tbl_len;
        let sgid_index = (0..len)
            .find(|&i| b.ctx.query_gid(port_num, i).is_ok_and(|g| g.0 == dgid))
            .ok_or_else(|| {
                refuse(
                    VERB,
                    EINVAL,
                    "the packet's destination is none of this device's GIDs",
                )
            })?;
        let attr = ibv_ah_attr {
            grh: ibv_global_route {
                dgid: ibv_gid { raw: sgid },
                flow_label: flow,
                sgid_index: sgid_index as u8,
                hop_limit: 0xff,
                traffic_class: tclass,
            },
            dlid: w.slid,
            sl: w.sl,
            src_path_bits: w.dlid_path_bits,
            static_rate: 0,
            is_global: 1,
            port_num,
        };
        // SAFETY: non-NULL out-pointer.
        unsafe { ah_attr.write(attr) };
        Ok(())
    })();
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut u8,
    port_num: u8,
) -> *mut ibv_ah {
    let pdb = match block::<PdBlock>("ibv_create_ah_from_wc", pd) {
        Ok(b) => b,
        Err(e) => {
            set_errno(e);
            return std::ptr::null_mut();
        }
    };
    let mut attr = ibv_ah_attr::default();
    if ibv_init_ah_from_wc(pdb.c.context, port_num, wc, grh, &raw mut attr) != 0 {
        return std::ptr::null_mut();
    }
    ibv_create_ah(pd, &raw mut attr)
}

crate::symver!("ah");

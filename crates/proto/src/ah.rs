//! Address vectors: the checks shared by `ibv_create_ah` and modify-QP's
//! `IBV_QP_AV`, and the address-handle object.

use crate::device::DeviceInfo;
use crate::error::ModifyError;
use crate::types::AhAttr;

/// The largest IPv6 flow label (20 bits): the bits of `grh.flow_label` that count.
pub const MAX_FLOW_LABEL: u32 = 0xf_ffff;

/// Checks an address vector for a RoCE port. `which` names it in messages
/// (`"ah_attr"`, `"alt_ah_attr"`).
///
/// Linux: `rdma_is_port_valid` (uverbs), `rdma_check_ah_attr` (GRH required on
/// RoCE), GID-table lookup (`EINVAL` beyond the table, `ENODATA` for an empty
/// entry). Our addition, which Linux only discovers later as a routing
/// failure: an all-zero destination GID. A flow label wider than 20 bits is
/// accepted as Linux accepts it (uverbs copies the 32-bit field unchecked and
/// `rdma_flow_label_to_udp_sport` uses the low 20 bits): UCX passes
/// `~0` (`uct_ib_iface_fill_ah_attr_from_gid_lid`, path index 0).
pub fn check_av(which: &'static str, av: &AhAttr, dev: &DeviceInfo) -> Result<(), ModifyError> {
    dev.check_port(av.port_num)
        .map_err(|_| ModifyError::BadPort {
            owner: which,
            port: av.port_num,
        })?;
    if av.is_global == 0 {
        return Err(ModifyError::NoGrh { which });
    }
    dev.query_gid(av.port_num, u32::from(av.grh.sgid_index))?;
    if av.grh.dgid.is_zero() {
        return Err(ModifyError::ZeroDgid { which });
    }
    Ok(())
}

/// An address handle: a checked address vector in a protection domain.
#[derive(Debug, Clone)]
pub struct Ah {
    /// Owning PD.
    pub pd: crate::handle::PdHandle,
    /// The address vector.
    pub attr: AhAttr,
}

//! The CM's QP attributes as a verbs modify: [`CmQpAttrs`] (what
//! `ib_cm_init_qp_attr` hands out, spec/cm.md §6) to an `ibv_qp_attr` and its
//! mask, as `rdma_init_qp_attr` gives them to `ibv_modify_qp`.

use super::{CmQpAttrs, QpTarget};
use crate::mask::AttrMask;
use crate::types::{AccessFlags, AhAttr, Mtu, QpAttr, QpState};

impl CmQpAttrs {
    /// The attributes and mask that move a QP to `target`; the AV's source
    /// is local GID `sgid_index`. `None` when the CM's path MTU code is not
    /// an IB MTU (1..=5; the CM refuses such REQs, so only a hand-made value).
    pub fn to_verbs(&self, target: QpTarget, sgid_index: u8) -> Option<(QpAttr, AttrMask)> {
        let mut a = QpAttr {
            qp_state: match target {
                QpTarget::Init => QpState::Init,
                QpTarget::Rtr => QpState::Rtr,
                QpTarget::Rts => QpState::Rts,
            },
            ..QpAttr::default()
        };
        let mut m = AttrMask::STATE;
        if let Some(acc) = self.access {
            let mut f = AccessFlags::REMOTE_WRITE.0;
            if acc.remote_read {
                f |= AccessFlags::REMOTE_READ.0;
            }
            if acc.remote_atomic {
                f |= AccessFlags::REMOTE_ATOMIC.0;
            }
            a.qp_access_flags = AccessFlags(f);
            m |= AttrMask::ACCESS_FLAGS;
        }
        if let Some(p) = self.pkey_index {
            a.pkey_index = p;
            m |= AttrMask::PKEY_INDEX;
        }
        if let Some(p) = self.port_num {
            a.port_num = p;
            m |= AttrMask::PORT;
        }
        if let Some(ah) = self.ah {
            let mut av = AhAttr::roce(ah.dgid, sgid_index);
            av.grh.hop_limit = ah.hop_limit;
            av.grh.traffic_class = ah.traffic_class;
            av.grh.flow_label = ah.flow_label;
            av.sl = ah.sl;
            a.ah_attr = av;
            m |= AttrMask::AV;
        }
        if let Some(mtu) = self.path_mtu {
            a.path_mtu = Mtu::from_raw(u32::from(mtu))?;
            m |= AttrMask::PATH_MTU;
        }
        macro_rules! set {
            ($($src:ident => $dst:ident, $bit:ident, $conv:expr;)+) => {$(
                if let Some(v) = self.$src {
                    a.$dst = $conv(v);
                    m |= AttrMask::$bit;
                }
            )+};
        }
        set! {
            dest_qpn => dest_qp_num, DEST_QPN, |q: wire::Qpn| q.get();
            rq_psn => rq_psn, RQ_PSN, |p: wire::Psn| p.get();
            max_dest_rd_atomic => max_dest_rd_atomic, MAX_DEST_RD_ATOMIC, |v| v;
            min_rnr_timer => min_rnr_timer, MIN_RNR_TIMER, |v| v;
            sq_psn => sq_psn, SQ_PSN, |p: wire::Psn| p.get();
            timeout => timeout, TIMEOUT, |v| v;
            retry_cnt => retry_cnt, RETRY_CNT, |v| v;
            rnr_retry => rnr_retry, RNR_RETRY, |v| v;
            max_rd_atomic => max_rd_atomic, MAX_QP_RD_ATOMIC, |v| v;
        }
        Some((a, m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cm::{CmAccess, CmAh};
    use crate::types::Gid;
    use wire::{Psn, Qpn};

    #[test]
    fn init_rtr_rts_masks_are_the_verbs_required_ones() {
        let init = CmQpAttrs {
            access: Some(CmAccess {
                remote_write: true,
                remote_read: true,
                remote_atomic: true,
            }),
            pkey_index: Some(0),
            port_num: Some(1),
            ..Default::default()
        };
        let (a, m) = init.to_verbs(QpTarget::Init, 0).unwrap();
        assert_eq!(a.qp_state, QpState::Init);
        assert_eq!(
            m,
            AttrMask::STATE | AttrMask::ACCESS_FLAGS | AttrMask::PKEY_INDEX | AttrMask::PORT
        );
        assert_eq!(a.qp_access_flags.0, 0b1110);
        let gid = Gid::from(std::net::IpAddr::from([127, 0, 0, 9]));
        let rtr = CmQpAttrs {
            ah: Some(CmAh {
                dgid: gid,
                sgid: Gid::ZERO,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
                sl: 0,
            }),
            path_mtu: Some(3),
            dest_qpn: Some(Qpn::from_masked(0x1234)),
            rq_psn: Some(Psn::from_masked(77)),
            max_dest_rd_atomic: Some(4),
            min_rnr_timer: Some(0),
            ..Default::default()
        };
        let (a, m) = rtr.to_verbs(QpTarget::Rtr, 0).unwrap();
        assert_eq!(
            (a.dest_qp_num, a.rq_psn, a.path_mtu),
            (0x1234, 77, Mtu::Mtu1024)
        );
        assert_eq!(a.ah_attr.grh.dgid, gid);
        for bit in [
            AttrMask::AV,
            AttrMask::PATH_MTU,
            AttrMask::DEST_QPN,
            AttrMask::RQ_PSN,
            AttrMask::MAX_DEST_RD_ATOMIC,
            AttrMask::MIN_RNR_TIMER,
        ] {
            assert!(m.contains(bit), "{:?}", bit.name());
        }
        let bad = CmQpAttrs {
            path_mtu: Some(6),
            ..Default::default()
        };
        assert!(bad.to_verbs(QpTarget::Rtr, 0).is_none());
    }
}

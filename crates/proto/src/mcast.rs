//! The device's multicast groups: which UD QPs are attached to which group
//! (`ibv_attach_mcast` / `ibv_detach_mcast`), with the limits the device
//! advertises. Pure data; the engine fans a received multicast datagram out
//! to the members (`datapath/mcast.rs`), and the driver joins the group's IP
//! multicast group on its socket. Facts and sources: `spec/multicast.md`.

use crate::handle::QpHandle;
use crate::types::Gid;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// BTH destination QP of every multicast packet (IBA 9.2 DestQP; kernel
/// `IB_MULTICAST_QPN`).
pub const MULTICAST_QPN: u32 = 0xff_ffff;
/// Groups a device holds (`max_mcast_grp`); each costs the driver one socket.
pub const MAX_GROUPS: usize = 512;
/// QPs of one device attached to one group (`max_mcast_qp_attach`; rxe's value).
pub const MAX_QPS_PER_GROUP: usize = 56;
/// Attachments over all groups (`max_total_mcast_qp_attach`).
pub const MAX_ATTACHMENTS: usize = MAX_GROUPS * MAX_QPS_PER_GROUP;

/// Why an attach or detach was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McastError {
    /// Only UD QPs join multicast groups (kernel `ib_attach_mcast`: EINVAL).
    #[error("QP {qpn:#x} is {qp_type} QP; only UD QPs can attach to a multicast group")]
    NotUd {
        /// The QP.
        qpn: u32,
        /// Its type.
        qp_type: crate::types::QpType,
    },
    /// The GID is not a multicast GID (kernel `rdma_is_multicast_addr`: EINVAL).
    #[error("{gid} is not a multicast GID (ff00::/8, or IPv4-mapped 224.0.0.0/4)")]
    NotMulticast {
        /// The GID, as an address.
        gid: IpAddr,
    },
    /// The group's IP family is not the device's, so no socket of the device can join it.
    #[error("multicast group {group} is not of the family of the device's address {device}: RoCE v2 carries a group in the device's IP version (an IPv4 device takes IPv4-mapped groups ::ffff:224.0.0.0/4, as rdma_cm builds them for RoCE v2; ff0e::ffff:a.b.c.d is the RoCE v1 form)")]
    WrongFamily {
        /// The group.
        group: IpAddr,
        /// The device's address.
        device: IpAddr,
    },
    /// Detach of a group the QP is not attached to (rxe, uverbs: EINVAL).
    #[error("QP {qpn:#x} is not attached to multicast group {group}")]
    NotAttached {
        /// The QP.
        qpn: u32,
        /// The group.
        group: IpAddr,
    },
    /// `max_mcast_grp` groups are in use (rxe `rxe_get_mcg`: ENOMEM).
    #[error("the device already holds its {max} multicast groups (max_mcast_grp)")]
    TooManyGroups {
        /// The limit.
        max: usize,
    },
    /// The group has `max_mcast_qp_attach` QPs (rxe `rxe_attach_mcg`: EINVAL).
    #[error("multicast group {group} already has {max} QPs of this device attached (max_mcast_qp_attach)")]
    GroupFull {
        /// The group.
        group: IpAddr,
        /// The limit.
        max: usize,
    },
    /// `max_total_mcast_qp_attach` attachments exist (rxe `rxe_attach_mcg`: EINVAL).
    #[error("the device already has {max} multicast attachments (max_total_mcast_qp_attach)")]
    TooManyAttachments {
        /// The limit.
        max: usize,
    },
    /// `ibv_destroy_qp` on an attached QP (kernel `ib_destroy_qp_user`: EBUSY).
    #[error("QP {qpn:#x} is still attached to {groups} multicast group(s), {first} among them; detach it first")]
    Attached {
        /// The QP.
        qpn: u32,
        /// How many groups.
        groups: usize,
        /// One of them.
        first: IpAddr,
    },
}

impl McastError {
    /// The errno Linux returns in the same case.
    pub fn errno(&self) -> crate::Errno {
        match self {
            McastError::TooManyGroups { .. } => crate::Errno::ENOMEM,
            McastError::Attached { .. } => crate::Errno::EBUSY,
            _ => crate::Errno::EINVAL,
        }
    }
}

/// The IP multicast group a multicast GID names: IPv4-mapped
/// `::ffff:224.0.0.0/4` is an IPv4 group (rdma_cm `cma_iboe_set_mgid`), any
/// other `ff00::/8` GID an IPv6 one. `None` for a GID that is neither.
pub fn group_ip(gid: &Gid) -> Option<IpAddr> {
    match gid.ip() {
        IpAddr::V4(v4) if v4.is_multicast() => Some(IpAddr::V4(v4)),
        IpAddr::V6(v6) if v6.is_multicast() => Some(IpAddr::V6(v6)),
        _ => None,
    }
}

/// What an attach or detach changed for the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Membership {
    /// The group's IP address.
    pub group: IpAddr,
    /// Attach: the group is new on the device (join it). Detach: its last QP
    /// left (leave it). Otherwise nothing for the driver to do.
    pub changed: bool,
}

/// The attachments of one device.
#[derive(Debug, Default)]
pub struct Groups {
    members: BTreeMap<IpAddr, Vec<QpHandle>>,
    total: usize,
}

impl Groups {
    /// Attaches `qp`; attaching twice is a no-op that succeeds (rxe `rxe_attach_mcg`).
    pub fn attach(&mut self, group: IpAddr, qp: QpHandle) -> Result<Membership, McastError> {
        let new = !self.members.contains_key(&group);
        if new && self.members.len() >= MAX_GROUPS {
            return Err(McastError::TooManyGroups { max: MAX_GROUPS });
        }
        let qps = self.members.get(&group).map_or(&[][..], Vec::as_slice);
        if qps.contains(&qp) {
            return Ok(Membership {
                group,
                changed: false,
            });
        }
        if self.total >= MAX_ATTACHMENTS {
            return Err(McastError::TooManyAttachments {
                max: MAX_ATTACHMENTS,
            });
        }
        if qps.len() >= MAX_QPS_PER_GROUP {
            let max = MAX_QPS_PER_GROUP;
            return Err(McastError::GroupFull { group, max });
        }
        self.members.entry(group).or_default().push(qp);
        self.total += 1;
        Ok(Membership {
            group,
            changed: new,
        })
    }

    /// Detaches `qp` (`qpn` names it in the error).
    pub fn detach(
        &mut self,
        group: IpAddr,
        qp: QpHandle,
        qpn: u32,
    ) -> Result<Membership, McastError> {
        let not_attached = McastError::NotAttached { qpn, group };
        let qps = self.members.get_mut(&group).ok_or(not_attached.clone())?;
        let at = qps.iter().position(|h| *h == qp).ok_or(not_attached)?;
        qps.swap_remove(at);
        self.total -= 1;
        let changed = qps.is_empty();
        if changed {
            self.members.remove(&group);
        }
        Ok(Membership { group, changed })
    }

    /// The groups `qp` is attached to: how many, and one of them.
    pub fn of_qp(&self, qp: QpHandle) -> Option<(usize, IpAddr)> {
        let mut it = self
            .members
            .iter()
            .filter(|(_, qps)| qps.contains(&qp))
            .map(|(g, _)| *g);
        let first = it.next()?;
        Some((1 + it.count(), first))
    }

    /// Copies the members of `group` into `out` (cleared first).
    pub fn members_into(&self, group: IpAddr, out: &mut Vec<QpHandle>) {
        out.clear();
        if let Some(qps) = self.members.get(&group) {
            out.extend_from_slice(qps);
        }
    }

    /// Every group with at least one QP.
    pub fn groups(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.members.keys().copied()
    }

    /// Drops every attachment of `qp` (its context closed); the groups left empty.
    pub fn forget_qp(&mut self, qp: QpHandle) -> Vec<IpAddr> {
        let mut emptied = Vec::new();
        for (g, qps) in &mut self.members {
            if let Some(at) = qps.iter().position(|h| *h == qp) {
                qps.swap_remove(at);
                self.total -= 1;
                if qps.is_empty() {
                    emptied.push(*g);
                }
            }
        }
        for g in &emptied {
            self.members.remove(g);
        }
        emptied
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(n: u64) -> QpHandle {
        QpHandle::from_raw(n)
    }

    fn gid(s: &str) -> Gid {
        Gid::from(s.parse::<IpAddr>().unwrap())
    }

    #[test]
    fn multicast_gids_map_to_ip_groups() {
        assert_eq!(
            group_ip(&gid("239.1.2.3")),
            Some("239.1.2.3".parse().unwrap())
        );
        assert_eq!(
            group_ip(&gid("224.0.0.1")),
            Some("224.0.0.1".parse().unwrap())
        );
        assert_eq!(group_ip(&gid("ff0e::1")), Some("ff0e::1".parse().unwrap()));
        assert_eq!(group_ip(&gid("127.0.0.1")), None);
        assert_eq!(group_ip(&gid("240.0.0.1")), None);
        assert_eq!(group_ip(&gid("fe80::1")), None);
    }

    #[test]
    fn attach_detach_and_membership_changes() {
        let mut g = Groups::default();
        let a: IpAddr = "239.0.0.1".parse().unwrap();
        assert!(
            g.attach(a, h(1)).unwrap().changed,
            "first QP joins the group"
        );
        assert!(!g.attach(a, h(2)).unwrap().changed);
        assert!(!g.attach(a, h(2)).unwrap().changed, "twice is a no-op");
        assert_eq!(g.total, 2);
        assert_eq!(g.of_qp(h(2)), Some((1, a)));
        assert!(!g.detach(a, h(1), 1).unwrap().changed);
        assert_eq!(
            g.detach(a, h(1), 1),
            Err(McastError::NotAttached { qpn: 1, group: a })
        );
        assert!(g.detach(a, h(2), 2).unwrap().changed, "last QP leaves");
        assert_eq!(g.of_qp(h(2)), None);
        assert_eq!(g.groups().count(), 0);
    }

    #[test]
    fn limits_are_enforced() {
        let mut g = Groups::default();
        let a: IpAddr = "239.0.0.1".parse().unwrap();
        for n in 0..MAX_QPS_PER_GROUP as u64 {
            g.attach(a, h(n + 1)).unwrap();
        }
        let e = g.attach(a, h(1000)).unwrap_err();
        assert!(matches!(e, McastError::GroupFull { .. }));
        assert_eq!(e.errno(), crate::Errno::EINVAL);
        for n in 1..MAX_GROUPS as u32 {
            let ip = IpAddr::from(std::net::Ipv4Addr::from(0xef00_0000 + n + 1));
            g.attach(ip, h(1)).unwrap();
        }
        let e = g.attach("239.255.0.1".parse().unwrap(), h(1)).unwrap_err();
        assert_eq!(e, McastError::TooManyGroups { max: MAX_GROUPS });
        assert_eq!(e.errno(), crate::Errno::ENOMEM);
        assert_eq!(g.forget_qp(h(1)).len(), MAX_GROUPS - 1);
    }
}

//! `rdma_join_multicast(_ex)` and `rdma_leave_multicast` on RoCE v2
//! (spec/rdmacm-abi.md §3.12, spec/multicast.md).
//!
//! A RoCE port has no subnet administrator, so a join sends no MAD: as the
//! kernel's `cma_iboe_join_multicast` does, the group address becomes an MGID
//! (IPv4-mapped for an IPv4 group on a RoCE v2 port), the Q_Key is the port
//! space's (`RDMA_UDP_QKEY`), and MULTICAST_JOIN is queued at once with the
//! address vector to the group, QP number `0xFFFFFF` and that Q_Key. The id's
//! QP (if it has one) is attached with `ibv_attach_mcast`, which joins the IP
//! group (crates/io/src/mcast.rs), as rdma-core's `ucma_process_join` does when
//! the event is taken; a failed attach turns the event into MULTICAST_ERROR.
//! Leaving detaches the QP and forgets the group.

use crate::channel::Pending;
use crate::ffi::*;
use crate::id::{IdBlock, State};
use crate::util::*;
use std::ffi::{c_int, c_void};
use std::net::IpAddr;
use std::sync::Mutex;

/// `IB_MULTICAST_QPN`: the destination QP of a datagram to a group.
pub(crate) const IB_MULTICAST_QPN: u32 = 0x00ff_ffff;
/// The hop limit of an IPv4 group's address vector on RoCE v2 (kernel
/// `cma_iboe_join_multicast`: `IPV6_DEFAULT_HOPLIMIT`).
const IPV6_DEFAULT_HOPLIMIT: u8 = 64;

/// One joined group of one id.
struct Joined {
    id: usize,
    group: IpAddr,
    mgid: [u8; 16],
    /// The QP attached at the join (as a number, for the table's `Send`).
    qp: usize,
}

static JOINED: Mutex<Vec<Joined>> = Mutex::new(Vec::new());

/// Why a group address cannot be joined on a RoCE v2 port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupError {
    /// The wildcard (kernel `cma_zero_addr`: `EINVAL`).
    Wildcard,
    /// A unicast address.
    NotMulticast,
    /// An IPv6 group (kernel: `ENOTSUPP` on a RoCE v2 GID type).
    Ipv6OnRoceV2,
}

/// The MGID of `group` on a RoCE v2 port (kernel `cma_iboe_set_mgid` with
/// `IB_GID_TYPE_ROCE_UDP_ENCAP`): `::ffff:a.b.c.d` for an IPv4 group.
pub(crate) fn mgid_of(group: IpAddr) -> Result<[u8; 16], GroupError> {
    if group.is_unspecified() {
        return Err(GroupError::Wildcard);
    }
    if !group.is_multicast() {
        return Err(GroupError::NotMulticast);
    }
    match group {
        IpAddr::V4(v4) => Ok(v4.to_ipv6_mapped().octets()),
        IpAddr::V6(_) => Err(GroupError::Ipv6OnRoceV2),
    }
}

fn group_refusal(verb: &str, group: IpAddr, e: GroupError) -> c_int {
    match e {
        GroupError::Wildcard => refuse(verb, libc::EINVAL, "the group address is the wildcard"),
        GroupError::NotMulticast => refuse(
            verb,
            libc::EINVAL,
            format_args!("{group} is not a multicast address"),
        ),
        GroupError::Ipv6OnRoceV2 => refuse(
            verb,
            libc::EOPNOTSUPP,
            format_args!(
                "{group}: IPv6 groups are not joined on RoCE v2 ports (the kernel's rdma_cm refuses them too)"
            ),
        ),
    }
}

/// The address vector to a group (kernel `ib_init_ah_from_mcmember` of the
/// record `cma_iboe_join_multicast` makes): global, the MGID, our GID's
/// index, hop limit 64, port 1, rate "port current", LID 0, SL 0.
fn group_ah(mgid: [u8; 16], sgid_index: u8, port: u8) -> ibv_ah_attr {
    // SAFETY: all-zero is a valid ibv_ah_attr (numbers and a GID).
    let mut ah: ibv_ah_attr = unsafe { std::mem::zeroed() };
    ah.grh.dgid.raw = mgid;
    ah.grh.sgid_index = sgid_index;
    ah.grh.hop_limit = IPV6_DEFAULT_HOPLIMIT;
    ah.is_global = 1;
    ah.port_num = port;
    ah
}

/// The checks `rdma_join_multicast` makes before anything is done: the
/// id's state and device, its QP type and port space, and the group.
fn check_join(verb: &str, b: &IdBlock, group: IpAddr) -> Result<([u8; 16], u8), c_int> {
    let st = b.lock();
    // Kernel `rdma_join_multicast`: ADDR_BOUND or ADDR_RESOLVED, with a device.
    if !matches!(st.state, State::AddrBound | State::AddrResolved) {
        return Err(refuse(
            verb,
            libc::EINVAL,
            format_args!(
                "the id is in state {:?}, not bound or address-resolved",
                st.state
            ),
        ));
    }
    let Some(dev) = st.dev else {
        return Err(refuse(
            verb,
            libc::EINVAL,
            "the id has no device (bind it to a device's address or resolve an address first)",
        ));
    };
    drop(st);
    // Kernel commit "RDMA/cma: Limit join multicast to UD QP type only".
    if b.qp_type() != IBV_QPT_UD {
        return Err(refuse(
            verb,
            libc::EINVAL,
            "only UD ids (RDMA_PS_UDP, RDMA_PS_IB with IBV_QPT_UD) join multicast groups",
        ));
    }
    if b.ps() != RDMA_PS_UDP && b.ps() != RDMA_PS_IB {
        return Err(refuse(
            verb,
            libc::EINVAL,
            "an RDMA_PS_IPOIB group takes its Q_Key from a subnet administrator, which RoCE has not",
        ));
    }
    let mgid = mgid_of(group).map_err(|e| group_refusal(verb, group, e))?;
    let src = b.src().map(|(ip, _)| ip);
    if src.is_some_and(|s| !s.is_unspecified() && !s.is_ipv4()) {
        return Err(refuse(
            verb,
            libc::EINVAL,
            format_args!("{group} is an IPv4 group and the id's address is IPv6"),
        ));
    }
    let sgid_index = src
        .and_then(|s| dev.addrs.iter().position(|a| *a == s))
        .and_then(|i| u8::try_from(i).ok())
        .unwrap_or(0);
    Ok((mgid, sgid_index))
}

/// `rdma_join_multicast(_ex)`'s body: checks, attaches the id's QP, queues
/// MULTICAST_JOIN (or MULTICAST_ERROR if the attach failed).
pub(crate) fn join(
    verb: &str,
    b: &IdBlock,
    group: IpAddr,
    context: *mut c_void,
) -> Result<(), c_int> {
    let (mgid, sgid_index) = check_join(verb, b, group)?;
    // SAFETY: the id's own fields.
    let (qp, port) = unsafe { ((*b.c()).qp, (*b.c()).port_num) };
    let mut status = 0;
    if !qp.is_null() {
        let gid = ibv_gid { raw: mgid };
        // SAFETY: the id's QP and a GID that lives through the call.
        let r = unsafe { crate::verbs::ibv_attach_mcast(qp, &raw const gid, 0) };
        if r != 0 {
            tracing::warn!(target: "softverbs", "{verb}: ibv_attach_mcast to {group} failed ({}): MULTICAST_ERROR", errno_name(r));
            status = -r;
        }
    }
    lock(&JOINED).push(Joined {
        id: b.addr(),
        group,
        mgid,
        qp: if status == 0 { qp as usize } else { 0 },
    });
    let event = if status == 0 {
        RDMA_CM_EVENT_MULTICAST_JOIN
    } else {
        RDMA_CM_EVENT_MULTICAST_ERROR
    };
    let mut p = Pending::new(b.addr(), event, status);
    // Kernel `cma_make_mc_event`: private_data is the join's context.
    p.param.ud = rdma_ud_param {
        private_data: context.cast_const(),
        private_data_len: 0,
        ah_attr: group_ah(mgid, sgid_index, if port == 0 { 1 } else { port }),
        qp_num: IB_MULTICAST_QPN,
        qkey: RDMA_UDP_QKEY,
    };
    if status != 0 {
        // SAFETY: all-zero is a valid address vector.
        p.param.ud.ah_attr = unsafe { std::mem::zeroed() };
    }
    b.lock().channel.push(p);
    Ok(())
}

/// `rdma_leave_multicast`'s body (rdma-core): `EADDRNOTAVAIL` unless the id
/// joined `group`; the QP attached at the join is detached.
pub(crate) fn leave(verb: &str, b: &IdBlock, group: IpAddr) -> Result<(), c_int> {
    let j = {
        let mut t = lock(&JOINED);
        let i = t
            .iter()
            .position(|j| j.id == b.addr() && j.group == group)
            .ok_or_else(|| {
                refuse(
                    verb,
                    libc::EADDRNOTAVAIL,
                    format_args!("the id has not joined {group}"),
                )
            })?;
        t.remove(i)
    };
    // SAFETY: the id's own field.
    let qp = unsafe { (*b.c()).qp };
    if j.qp != 0 && j.qp == qp as usize {
        let gid = ibv_gid { raw: j.mgid };
        // SAFETY: the id's QP, still the one attached; a GID for the call.
        let r = unsafe { crate::verbs::ibv_detach_mcast(qp, &raw const gid, 0) };
        if r != 0 {
            // rdma-core ignores the detach's result too.
            tracing::debug!(target: "softverbs", "{verb}: ibv_detach_mcast from {group}: {}", errno_name(r));
        }
    }
    Ok(())
}

/// Forgets the groups of an id being destroyed (rdma-core frees its list;
/// a QP still attached stays attached until detached or closed).
pub(crate) fn forget(b: &IdBlock) {
    lock(&JOINED).retain(|j| j.id != b.addr());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv4_group_maps_to_its_ipv4_mapped_mgid() {
        let m = mgid_of(IpAddr::from([239, 1, 2, 3])).unwrap();
        let mut want = [0u8; 16];
        want[10] = 0xff;
        want[11] = 0xff;
        want[12..].copy_from_slice(&[239, 1, 2, 3]);
        assert_eq!(m, want);
        assert_eq!(
            mgid_of(IpAddr::from([224, 0, 0, 1])).unwrap()[12..],
            [224, 0, 0, 1]
        );
    }

    #[test]
    fn wildcard_unicast_and_ipv6_groups_are_refused() {
        assert_eq!(mgid_of(IpAddr::from([0u8; 4])), Err(GroupError::Wildcard));
        assert_eq!(
            mgid_of(IpAddr::from([127, 0, 0, 1])),
            Err(GroupError::NotMulticast)
        );
        let v6: IpAddr = "ff0e::1".parse().unwrap();
        assert_eq!(mgid_of(v6), Err(GroupError::Ipv6OnRoceV2));
    }

    #[test]
    fn the_group_address_vector_is_global_to_the_mgid() {
        let m = mgid_of(IpAddr::from([239, 9, 9, 9])).unwrap();
        let ah = group_ah(m, 2, 1);
        assert_eq!(ah.is_global, 1);
        assert_eq!(ah.grh.dgid.raw, m);
        assert_eq!(ah.grh.sgid_index, 2);
        assert_eq!(ah.grh.hop_limit, 64);
        assert_eq!((ah.dlid, ah.sl, ah.static_rate, ah.port_num), (0, 0, 0, 1));
    }
}

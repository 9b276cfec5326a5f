//! UD multicast: `ibv_attach_mcast` / `ibv_detach_mcast`, and the fan-out of
//! a received multicast datagram (BTH DestQP 0xFFFFFF) to every QP of the
//! device attached to the group named by its destination IP — rxe's
//! `rxe_rcv_mcast_pkt`: each member is checked (type, state, P_Key) and takes
//! its own copy; its responder checks the Q_Key. Facts: `spec/multicast.md`.

use crate::error::Error;
use crate::handle::QpHandle;
use crate::mcast::{group_ip, McastError, Membership};
use crate::memory::Memory;
use crate::qp::actor::Packet;
use crate::types::{Gid, QpType};
use crate::Engine;
use std::net::IpAddr;
use wire::opcode::Transport;
use wire::TransportRepr;

impl Engine {
    /// `ibv_attach_mcast`: attaches UD QP `h` to the group `gid` names. The
    /// driver joins the group's IP multicast group when `changed` (the
    /// device's first QP in it). Attaching twice succeeds and changes nothing.
    pub fn attach_mcast(&mut self, h: QpHandle, gid: &Gid) -> Result<Membership, Error> {
        let group = self.check_mcast(h, gid)?;
        Ok(self.groups.attach(group, h)?)
    }

    /// `ibv_detach_mcast`: the driver leaves the group when `changed` (the
    /// device's last QP left it).
    pub fn detach_mcast(&mut self, h: QpHandle, gid: &Gid) -> Result<Membership, Error> {
        let group = self.check_mcast(h, gid)?;
        let qpn = self.qp(h)?.ctl.qpn();
        Ok(self.groups.detach(group, h, qpn)?)
    }

    /// `Err(EBUSY)` while QP `h` is attached to some group (destroy_qp's rule).
    pub fn mcast_attached(&self, h: QpHandle) -> Result<(), Error> {
        let qpn = self.qp(h)?.ctl.qpn();
        match self.groups.of_qp(h) {
            Some((groups, first)) => Err(McastError::Attached { qpn, groups, first }.into()),
            None => Ok(()),
        }
    }

    /// Detaches QP `h` from every group (its last handle is gone); whether a
    /// group lost its last QP (the driver then leaves it).
    pub fn forget_mcast(&mut self, h: QpHandle) -> bool {
        !self.groups.forget_qp(h).is_empty()
    }

    /// The IP groups some QP of the device is attached to (the driver's joins).
    pub fn mcast_groups(&self) -> Vec<IpAddr> {
        self.groups.groups().collect()
    }

    /// Kernel `ib_attach_mcast`: a UD QP, a multicast GID; and the group in
    /// the device's address family (its socket joins it).
    fn check_mcast(&self, h: QpHandle, gid: &Gid) -> Result<IpAddr, Error> {
        let q = self.qp(h)?;
        let (qpn, qp_type) = (q.ctl.qpn(), q.ctl.qp_type());
        if qp_type != QpType::Ud {
            return Err(McastError::NotUd { qpn, qp_type }.into());
        }
        let group = group_ip(gid).ok_or(McastError::NotMulticast { gid: gid.ip() })?;
        let device = self.info.gids.first().map_or(group, Gid::ip);
        if device.is_ipv4() != group.is_ipv4() {
            return Err(McastError::WrongFamily { group, device }.into());
        }
        Ok(group)
    }

    /// A multicast datagram passed the ICRC check: one copy to each attached
    /// QP that takes it. Drops are counted as for unicast.
    pub(super) fn mcast_receive(
        &self,
        now: u64,
        group: IpAddr,
        repr: &TransportRepr,
        body: &[u8],
        grh: &[u8; 40],
        mem: &dyn Memory,
    ) {
        let mut members = Vec::new();
        self.groups.members_into(group, &mut members);
        if members.is_empty() {
            self.dev.counters.mine().drop_no_qp.bump();
        }
        // One member at a time: a QP never holds another's lock.
        for &h in &members {
            let Some(q) = self.qps.get(h).map(crate::lock::Lock::lock) else {
                continue;
            };
            if !self.mcast_accepts(&q, repr) {
                continue;
            }
            let pkt = Packet {
                repr,
                payload: body,
                grh,
            };
            let dropped =
                self.drive_locked(h, q, mem, |q, env, sink| q.on_packet(now, env, &pkt, sink));
            if dropped {
                self.dev.counters.mine().drop_by_qp.bump();
            }
        }
    }

    /// rxe `check_type_state` and `check_keys` (P_Key) for one member; the
    /// responder checks the Q_Key.
    fn mcast_accepts(&self, q: &crate::qp::actor::Qp, repr: &TransportRepr) -> bool {
        let c = self.dev.counters.mine();
        let reason = if repr.opcode().transport() != Transport::Ud {
            &c.drop_wrong_transport
        } else if !q.ctl.accepts_requests() {
            &c.drop_qp_state
        } else if !repr.bth.pkey.matches(wire::PKey::DEFAULT) {
            &c.drop_pkey
        } else {
            return true;
        };
        reason.bump();
        c.drop_not_accepted.bump();
        false
    }
}

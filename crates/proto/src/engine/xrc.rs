//! The XRC verbs on the engine's tables: `ibv_open_xrcd` / `ibv_close_xrcd`,
//! XRC SRQs (`ibv_create_srq_ex` with `IBV_SRQT_XRC`, `ibv_get_srq_num`),
//! XRC_RECV QPs (`ibv_create_qp_ex` with an XRCD, `ibv_open_qp`), and the use
//! counts that tie them together (spec/xrc.md). The rules live in
//! [`crate::xrcd`]; this file keeps the tables.
//!
//! An XRC_RECV QP has no PD, no CQs and no queues of its own: its `pd`,
//! `send_cq` and `recv_cq` are [`detached`] handles that name no object, and
//! every request it takes goes to the SRQ its XRCETH names (checked against
//! the QP's domain in the engine's sink).

use super::{missing, Engine, QpCreated};
use crate::error::{Error, ObjectKind};
use crate::handle::{CqHandle, CtxHandle, Handle, QpHandle, SrqHandle, XrcdHandle};
use crate::qp::create::{self, QpRequest};
use crate::qp::QpControl;
use crate::srq::SrqAttr;
use crate::types::QpType;
use crate::xrcd::{self, OpenFlags, XrcError, XrcLink, XrcSrq, XrcdKey, XrcdOpen, MAX_XRCD_OPENS};

/// A handle that names no object (the PD and CQs of an XRC_RECV QP).
pub(crate) fn detached<K>() -> Handle<K> {
    Handle::from_raw(u64::MAX)
}

fn no_xrcd(h: XrcdHandle) -> Error {
    XrcError::NoSuchXrcd { handle: h.raw() }.into()
}

impl Engine {
    /// `ibv_open_xrcd`: the domain of file `key` (created with `O_CREAT`), or
    /// with `key` `None` (fd -1) a new domain of its own.
    pub fn open_xrcd(
        &mut self,
        ctx: CtxHandle,
        key: Option<XrcdKey>,
        flags: OpenFlags,
    ) -> Result<XrcdHandle, Error> {
        self.ctxs
            .get(ctx)
            .ok_or_else(|| missing(ObjectKind::Context, ctx))?;
        let x = &mut self.xrc;
        let existing = key.and_then(|k| x.by_key.get(&k).copied());
        if let Some(k) = key {
            xrcd::check_open(k, existing.is_some(), flags)?;
        }
        let domain = existing.unwrap_or(x.next_domain);
        let h = x
            .opens
            .insert(XrcdOpen {
                ctx,
                domain,
                users: 0,
            })
            .ok_or(Error::TooMany {
                kind: ObjectKind::Context,
                limit: MAX_XRCD_OPENS as u64,
            })?;
        if existing.is_none() {
            x.next_domain = x.next_domain.wrapping_add(1).max(1);
            x.domains.insert(domain, xrcd::Domain { key, opens: 0 });
            if let Some(k) = key {
                x.by_key.insert(k, domain);
            }
        }
        if let Some(d) = x.domains.get_mut(&domain) {
            d.opens += 1;
        }
        Ok(h)
    }

    /// `ibv_close_xrcd`: `EBUSY` while SRQs or QPs created through this open
    /// exist; the domain goes with its last open.
    pub fn close_xrcd(&mut self, h: XrcdHandle) -> Result<(), Error> {
        let o = self.xrc.opens.get(h).ok_or_else(|| no_xrcd(h))?;
        if o.users > 0 {
            return Err(XrcError::Busy { users: o.users }.into());
        }
        self.drop_open(h);
        Ok(())
    }

    fn drop_open(&mut self, h: XrcdHandle) {
        let x = &mut self.xrc;
        let Some(o) = x.opens.remove(h) else { return };
        let Some(d) = x.domains.get_mut(&o.domain) else {
            return;
        };
        d.opens = d.opens.saturating_sub(1);
        if d.opens == 0 {
            if let Some(k) = d.key {
                x.by_key.remove(&k);
            }
            x.domains.remove(&o.domain);
        }
    }

    /// The domain an open names (opens of one file share it).
    pub fn xrcd_domain(&self, h: XrcdHandle) -> Result<u32, Error> {
        self.xrc
            .opens
            .get(h)
            .map(|o| o.domain)
            .ok_or_else(|| no_xrcd(h))
    }

    fn open_in_ctx(&self, h: XrcdHandle, ctx: CtxHandle, what: &'static str) -> Result<u32, Error> {
        let o = self.xrc.opens.get(h).ok_or_else(|| no_xrcd(h))?;
        if o.ctx != ctx {
            return Err(XrcError::OtherContext { what }.into());
        }
        Ok(o.domain)
    }

    fn xrcd_users(&mut self, h: XrcdHandle, add: bool) {
        if let Some(o) = self.xrc.opens.get_mut(h) {
            o.users = if add {
                o.users + 1
            } else {
                o.users.saturating_sub(1)
            };
        }
    }

    /// `ibv_create_srq_ex` with `IBV_SRQT_XRC`: an SRQ in `pd` and XRC domain
    /// `xrcd`, whose receives complete on `cq`.
    pub fn create_xrc_srq(
        &mut self,
        pd: crate::handle::PdHandle,
        xrcd: XrcdHandle,
        cq: CqHandle,
        attr: &SrqAttr,
    ) -> Result<(SrqHandle, SrqAttr), Error> {
        let ctx = self.pd_ctx(pd)?;
        let domain = self.open_in_ctx(xrcd, ctx, "create_srq_ex")?;
        if self.cq(cq)?.ctx != ctx {
            return Err(Error::Mismatch {
                what: "create_srq_ex: the CQ belongs to a different context than the PD",
            });
        }
        let (h, granted) = self.create_srq(pd, attr)?;
        if let Some(s) = self.srqs.get_mut(h) {
            s.srq.get_mut().xrc = Some(XrcSrq { xrcd, domain, cq });
        }
        if let Some(c) = self.cqs.get_mut(cq) {
            c.users.add(ObjectKind::Srq);
        }
        self.xrcd_users(xrcd, true);
        Ok((h, granted))
    }

    /// An XRC SRQ was destroyed: its CQ and its open lose a user.
    pub(super) fn xrc_srq_gone(&mut self, x: XrcSrq) {
        if let Some(c) = self.cqs.get_mut(x.cq) {
            c.users.remove(ObjectKind::Srq);
        }
        self.xrcd_users(x.xrcd, false);
    }

    /// `ibv_get_srq_num`: the number an XRCETH names this SRQ by.
    pub fn srq_num(&self, h: SrqHandle) -> Result<u32, Error> {
        self.srqs
            .get(h)
            .map(|_| self.srq_numbers().srq_num(h.index()))
            .ok_or_else(|| missing(ObjectKind::Srq, h))
    }

    /// `ibv_create_qp_ex` of an XRC_RECV QP in `xrcd` (`req.qp_type` must be
    /// XRC_RECV; capacities come back 0: it has no queues).
    pub fn create_xrc_recv_qp(
        &mut self,
        xrcd: XrcdHandle,
        req: &QpRequest,
    ) -> Result<QpCreated, Error> {
        let domain = self.xrcd_domain(xrcd)?;
        let req = QpRequest {
            has_srq: false,
            ..*req
        };
        let (qp_type, cap) = create::check(&req, &self.info.attr)?;
        if qp_type != QpType::XrcRecv {
            return Err(Error::Mismatch {
                what: "create_qp_ex: an XRC domain without a PD makes an XRC_RECV QP only",
            });
        }
        let qpn = self.alloc_qpn()?;
        let ctl = QpControl::new(qp_type, qpn, cap, false, true);
        // An XRC_RECV QP has no send queue: its ring refuses every post.
        let ring = self.new_send_ring(qp_type, detached(), cap);
        let mut qp = super::Qp::new(
            detached(),
            (detached(), detached()),
            None,
            ctl,
            ring.clone(),
        );
        qp.xrc = Some(XrcLink { xrcd, domain });
        let limit = u64::from(self.info.attr.max_qp);
        let handle = self
            .qps
            .insert(crate::lock::Lock::new(qp))
            .ok_or(Error::TooMany {
                kind: ObjectKind::Qp,
                limit,
            })?;
        ring.set_handle(handle);
        self.qpns.insert(qpn, handle);
        self.xrcd_users(xrcd, true);
        self.xrc.qp_holders.insert(handle, vec![xrcd]);
        Ok(QpCreated {
            handle,
            qpn,
            qp_type,
            cap,
        })
    }

    /// `ibv_open_qp`: another handle to XRC_RECV QP `qpn` of `xrcd`'s domain.
    pub fn open_qp(
        &mut self,
        xrcd: XrcdHandle,
        qpn: u32,
        qp_type: u32,
    ) -> Result<QpCreated, Error> {
        let domain = self.xrcd_domain(xrcd)?;
        if QpType::from_raw(qp_type) != Some(QpType::XrcRecv) {
            return Err(XrcError::OpenType { qp_type }.into());
        }
        let found = self
            .qp_by_qpn(qpn)
            .and_then(|h| Some((h, self.qps.get(h)?.lock())));
        let Some((handle, q)) = found.filter(|(_, q)| q.xrc.is_some_and(|l| l.domain == domain))
        else {
            let own = self.qpn_space;
            if !own.contains(qpn & 0x00ff_ffff) && own != crate::device::QpnSpace::ALL {
                // spec/xrc-processes.md: the QP is another process's.
                return Err(XrcError::TargetQpOfAnotherProcess {
                    qpn,
                    first: own.first,
                    last: own.last,
                }
                .into());
            }
            return Err(XrcError::NoTargetQp { qpn }.into());
        };
        let (qp_type, cap) = (q.ctl.qp_type(), q.ctl.cap());
        drop(q);
        self.xrc.qp_holders.entry(handle).or_default().push(xrcd);
        Ok(QpCreated {
            handle,
            qpn,
            qp_type,
            cap,
        })
    }

    /// Destroying one handle of XRC_RECV QP `h`, the one made through
    /// `via` (`None`: the latest): true if other handles hold the QP (it
    /// lives on). The open the QP counts as a user (its link) passes to
    /// the first handle left when its own goes.
    pub(super) fn xrc_qp_release(&mut self, h: QpHandle, via: Option<XrcdHandle>) -> bool {
        let Some(holders) = self.xrc.qp_holders.get_mut(&h) else {
            return false;
        };
        let at = match via {
            Some(x) => holders.iter().rposition(|&o| o == x),
            None => holders.len().checked_sub(1),
        };
        if let Some(i) = at {
            holders.remove(i);
        }
        let Some(&next) = holders.first() else {
            self.xrc.qp_holders.remove(&h);
            return false;
        };
        let Some(q) = self.qps.get_mut(h).map(crate::lock::Lock::get_mut) else {
            return true;
        };
        let moved = match q.xrc.as_mut() {
            Some(link) if !self.xrc.qp_holders[&h].contains(&link.xrcd) => {
                Some(std::mem::replace(&mut link.xrcd, next))
            }
            _ => None,
        };
        if let Some(old) = moved {
            self.xrcd_users(old, false);
            self.xrcd_users(next, true);
        }
        true
    }

    /// `ibv_destroy_qp` of a handle of an XRC_RECV QP made through `xrcd`
    /// (by `ibv_create_qp_ex` or `ibv_open_qp`): the handle goes; the QP
    /// with the last one (kernel `__ib_destroy_shared_qp`).
    pub fn destroy_xrc_qp_handle(&mut self, h: QpHandle, xrcd: XrcdHandle) -> Result<(), Error> {
        self.qp_mut(h)?;
        if self.xrc_qp_release(h, Some(xrcd)) {
            return Ok(());
        }
        self.destroy_qp_now(h)
    }

    /// The contexts of the handles that hold XRC_RECV QP `h` (each once).
    pub(super) fn xrc_qp_contexts(&self, h: QpHandle) -> Vec<CtxHandle> {
        let mut ctxs = Vec::new();
        let holders = self.xrc.qp_holders.get(&h).map_or(&[][..], Vec::as_slice);
        for ctx in holders
            .iter()
            .filter_map(|&x| self.xrc.opens.get(x))
            .map(|o| o.ctx)
        {
            if !ctxs.contains(&ctx) {
                ctxs.push(ctx);
            }
        }
        ctxs
    }

    /// An XRC_RECV QP was destroyed: the open it was created through loses a user.
    pub(super) fn xrc_qp_gone(&mut self, link: XrcLink) {
        self.xrcd_users(link.xrcd, false);
    }

    /// Closing a context: the handles it holds of XRC_RECV QPs (created or
    /// opened) go, and each QP with its last handle, before the SRQs and
    /// CQs go (kernel: the file's QP uobjects, `__ib_destroy_shared_qp`).
    pub(super) fn xrc_close_context_qps(&mut self, ctx: CtxHandle) -> Result<(), Error> {
        let opens: Vec<XrcdHandle> = self
            .xrc
            .opens
            .iter()
            .filter(|(_, o)| o.ctx == ctx)
            .map(|(h, _)| h)
            .collect();
        let held: Vec<(QpHandle, XrcdHandle)> = self
            .xrc
            .qp_holders
            .iter()
            .flat_map(|(&h, holders)| holders.iter().map(move |&x| (h, x)))
            .filter(|(_, x)| opens.contains(x))
            .collect();
        for (h, x) in held {
            if self.qps.get(h).is_some() {
                self.destroy_xrc_qp_handle(h, x)?;
            }
        }
        Ok(())
    }

    /// Closing a context: its XRC domain opens, after its SRQs are gone.
    pub(super) fn xrc_close_context(&mut self, ctx: CtxHandle) {
        let opens: Vec<XrcdHandle> = self
            .xrc
            .opens
            .iter()
            .filter(|(_, o)| o.ctx == ctx)
            .map(|(h, _)| h)
            .collect();
        for h in opens {
            self.drop_open(h);
        }
    }

    /// How many XRC domains and opens exist (for leak checks).
    pub fn xrc_counts(&self) -> (usize, usize) {
        (self.xrc.domains.len(), self.xrc.opens.len())
    }
}

//! The engine's completion queues, shared receive queues and address
//! handles: creation checks ([`crate::cq`], [`crate::srq`], [`crate::ah`]),
//! the tables, and the users counts that make destroying an object in use
//! `EBUSY`.

use super::{missing, CqEntry, Engine, SrqEntry, Users};
use crate::ah::{check_av, Ah};
use crate::cq::{self, Cq};
use crate::error::{Error, ObjectKind};
use crate::handle::{AhHandle, CqHandle, CtxHandle, PdHandle, SrqHandle};
use crate::lock::Lock;
use crate::srq::{self, Srq, SrqAttr};
use crate::types::AhAttr;

impl Engine {
    // ---- completion queues ----

    /// `ibv_create_cq`; returns the handle and the capacity granted.
    pub fn create_cq(
        &mut self,
        ctx: CtxHandle,
        cqe: i32,
        comp_vector: i32,
    ) -> Result<(CqHandle, u32), Error> {
        let cqe = cq::check_create(cqe, comp_vector, &self.info.attr)?;
        let c = self
            .ctxs
            .get_mut(ctx)
            .ok_or_else(|| missing(ObjectKind::Context, ctx))?;
        c.users.add(ObjectKind::Cq);
        let limit = u64::from(self.info.attr.max_cq);
        let cq = Cq {
            ctx,
            cqe,
            comp_vector: comp_vector as u32,
        };
        let entry = CqEntry {
            cq,
            ring: Lock::new(crate::cq::CqRing::new(cqe)),
            channel: None,
            users: Users::default(),
        };
        let h = self.cqs.insert(entry).ok_or(Error::TooMany {
            kind: ObjectKind::Cq,
            limit,
        })?;
        Ok((h, cqe))
    }

    /// `ibv_destroy_cq`: `EBUSY` while a QP uses it.
    pub fn destroy_cq(&mut self, h: CqHandle) -> Result<(), Error> {
        let c = self.cqs.get(h).ok_or_else(|| missing(ObjectKind::Cq, h))?;
        c.users.busy(ObjectKind::Cq)?;
        let ctx = c.cq.ctx;
        self.cqs.remove(h);
        if let Some(c) = self.ctxs.get_mut(ctx) {
            c.users.remove(ObjectKind::Cq);
        }
        Ok(())
    }

    /// `ibv_resize_cq`: a new capacity (≥ the request, within `max_cqe`), refused
    /// with `EINVAL` below the completions queued and owed. Returns the capacity.
    pub fn resize_cq(&mut self, h: CqHandle, cqe: i32) -> Result<u32, Error> {
        let granted = cq::check_create(cqe, 0, &self.info.attr)?;
        // WRs posted on send rings are owed completions too.
        self.take_posted();
        let owed = self.owed_completions(h);
        let c = self
            .cqs
            .get_mut(h)
            .ok_or_else(|| missing(ObjectKind::Cq, h))?;
        c.ring.get_mut().resize(granted, owed)?;
        c.cq.cqe = granted;
        Ok(granted)
    }

    /// The pollers' side of a CQ's ring: `ibv_poll_cq` and `ibv_req_notify_cq`
    /// through it take neither the engine nor its lock ([`crate::cq::SharedCq`]).
    pub fn cq_shared(&self, h: CqHandle) -> Result<std::sync::Arc<crate::cq::SharedCq>, Error> {
        self.cqs
            .get(h)
            .map(|c| c.ring.lock().shared().clone())
            .ok_or_else(|| missing(ObjectKind::Cq, h))
    }

    /// A CQ.
    pub fn cq(&self, h: CqHandle) -> Result<&Cq, Error> {
        self.cqs
            .get(h)
            .map(|c| &c.cq)
            .ok_or_else(|| missing(ObjectKind::Cq, h))
    }

    // ---- shared receive queues ----

    /// `ibv_create_srq`; returns the handle and the attributes granted.
    pub fn create_srq(
        &mut self,
        pd: PdHandle,
        attr: &SrqAttr,
    ) -> Result<(SrqHandle, SrqAttr), Error> {
        let granted = srq::check_create(attr, &self.info.attr)?;
        self.pd_ctx(pd)?;
        let limit = u64::from(self.info.attr.max_srq);
        let srq = Srq {
            pd,
            attr: granted,
            posted: 0,
            xrc: None,
        };
        let entry = SrqEntry {
            srq: Lock::new(srq),
            queue: Lock::new(crate::qp::wqe::RecvQueue::with_ring(
                granted.max_wr as usize,
                std::sync::Arc::new(crate::rq::RecvRing::srq(granted.max_wr, granted.max_sge)),
            )),
            users: Users::default(),
        };
        let h = self.srqs.insert(entry).ok_or(Error::TooMany {
            kind: ObjectKind::Srq,
            limit,
        })?;
        self.pd_use(pd, ObjectKind::Srq, true)?;
        Ok((h, granted))
    }

    /// `ibv_modify_srq`.
    pub fn modify_srq(&mut self, h: SrqHandle, attr: &SrqAttr, mask: u32) -> Result<(), Error> {
        let s = self
            .srqs
            .get_mut(h)
            .ok_or_else(|| missing(ObjectKind::Srq, h))?;
        let dev = &self.info.attr;
        let (srq, queue) = (s.srq.get_mut(), s.queue.get_mut());
        let Some(ring) = queue.ring().cloned() else {
            srq.posted = queue.len() as u32;
            return srq.modify(attr, mask, dev);
        };
        // Under the ring's posting lock: no post between the check against
        // the posted count and the new depth.
        ring.resize(|queued| {
            srq.posted = queued;
            srq.modify(attr, mask, dev)?;
            Ok(Some(srq.attr.max_wr))
        })
    }

    /// `ibv_query_srq`.
    pub fn query_srq(&self, h: SrqHandle) -> Result<SrqAttr, Error> {
        self.srqs
            .get(h)
            .map(|s| s.srq.lock().attr)
            .ok_or_else(|| missing(ObjectKind::Srq, h))
    }

    /// `ibv_destroy_srq`: `EBUSY` while a QP uses it.
    pub fn destroy_srq(&mut self, h: SrqHandle) -> Result<(), Error> {
        let s = self
            .srqs
            .get(h)
            .ok_or_else(|| missing(ObjectKind::Srq, h))?;
        s.users.busy(ObjectKind::Srq)?;
        let srq = s.srq.lock();
        let (pd, xrc) = (srq.pd, srq.xrc);
        drop(srq);
        self.srqs.remove(h);
        if let Some(x) = xrc {
            self.xrc_srq_gone(x);
        }
        self.pd_use(pd, ObjectKind::Srq, false)
    }

    // ---- address handles ----

    /// `ibv_create_ah`.
    pub fn create_ah(&mut self, pd: PdHandle, attr: &AhAttr) -> Result<AhHandle, Error> {
        check_av("ah_attr", attr, &self.info)?;
        self.pd_ctx(pd)?;
        let limit = u64::from(self.info.attr.max_ah);
        let h = self
            .ahs
            .insert(Ah { pd, attr: *attr })
            .ok_or(Error::TooMany {
                kind: ObjectKind::Ah,
                limit,
            })?;
        // What a send-ring post reads of it (proto::sq), beside the table.
        let g = attr.grh;
        let entry = crate::sq::AhEntry {
            pd,
            dgid: g.dgid,
            sgid_index: g.sgid_index,
            hop_limit: g.hop_limit,
            traffic_class: g.traffic_class,
        };
        self.rings.ahs.insert(h, entry);
        self.pd_use(pd, ObjectKind::Ah, true)?;
        Ok(h)
    }

    /// `ibv_destroy_ah`.
    pub fn destroy_ah(&mut self, h: AhHandle) -> Result<(), Error> {
        let a = self
            .ahs
            .remove(h)
            .ok_or_else(|| missing(ObjectKind::Ah, h))?;
        self.rings.ahs.remove(h);
        self.pd_use(a.pd, ObjectKind::Ah, false)
    }

    /// An AH.
    pub fn ah(&self, h: AhHandle) -> Result<&Ah, Error> {
        self.ahs.get(h).ok_or_else(|| missing(ObjectKind::Ah, h))
    }
}

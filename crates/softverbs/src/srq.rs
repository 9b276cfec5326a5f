//! Shared receive queues.

use crate::error::{finish_destroy, logged, DestroyError, Error};
use crate::pd::{PdInner, ProtectionDomain};
use proto::engine::SrqHandle;
use proto::srq::SrqAttr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A shared receive queue (`struct ibv_srq`).
pub struct SharedReceiveQueue {
    pub(crate) inner: Arc<SrqInner>,
}

pub(crate) struct SrqInner {
    pub(crate) pd: Arc<PdInner>,
    pub(crate) h: SrqHandle,
    /// The ring `post_recv` writes without the engine lock.
    pub(crate) ring: Option<Arc<proto::rq::RecvRing>>,
    destroyed: AtomicBool,
    /// What an XRC SRQ uses besides its PD (its XRC domain, its CQ): kept
    /// alive until the SRQ is gone.
    _uses: Vec<Arc<dyn std::any::Any + Send + Sync>>,
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        if !self.destroyed.load(Ordering::Acquire) {
            let _ = self.pd.with(|e| e.destroy_srq(self.h));
        }
    }
}

impl SharedReceiveQueue {
    pub(crate) fn create(pd: Arc<PdInner>, attr: SrqAttr) -> Result<Self, Error> {
        let (h, _) = logged("create_srq", pd.with(|e| e.create_srq(pd.h, &attr)))?;
        Ok(Self::from_parts(pd, h, Vec::new()))
    }

    pub(crate) fn from_parts(
        pd: Arc<PdInner>,
        h: SrqHandle,
        uses: Vec<Arc<dyn std::any::Any + Send + Sync>>,
    ) -> Self {
        let ring = pd.with(|e| e.srq_ring(h).ok());
        SharedReceiveQueue {
            inner: Arc::new(SrqInner {
                pd,
                h,
                ring,
                destroyed: AtomicBool::new(false),
                _uses: uses,
            }),
        }
    }

    /// `ibv_get_srq_num`: the number an XRC sender names this SRQ by
    /// (`ibv_wr_set_xrc_srqn`, `wr.qp_type.xrc.remote_srqn`).
    pub fn srq_num(&self) -> Result<u32, Error> {
        logged(
            "get_srq_num",
            self.inner.pd.with(|e| e.srq_num(self.inner.h)),
        )
    }

    /// An identifier that async events (`IBV_EVENT_SRQ_LIMIT_REACHED`) name
    /// this SRQ by.
    pub fn id(&self) -> u64 {
        self.inner.h.raw()
    }

    /// `ibv_query_srq`.
    pub fn query(&self) -> Result<SrqAttr, Error> {
        logged(
            "query_srq",
            self.inner.pd.with(|e| e.query_srq(self.inner.h)),
        )
    }

    /// `ibv_modify_srq` with `IBV_SRQ_MAX_WR` (resize) and/or `IBV_SRQ_LIMIT`
    /// (arm the limit event) in `mask`.
    pub fn modify(&self, attr: &SrqAttr, mask: u32) -> Result<(), Error> {
        logged(
            "modify_srq",
            self.inner
                .pd
                .with(|e| e.modify_srq(self.inner.h, attr, mask)),
        )
    }

    /// `ibv_destroy_srq`: refused with `EBUSY` while a QP uses it.
    pub fn destroy(self) -> Result<(), DestroyError<Self>> {
        let r = self.inner.pd.with(|e| e.destroy_srq(self.inner.h));
        let inner = self.inner.clone();
        finish_destroy("destroy_srq", r, &inner.destroyed, self)
    }
}

impl std::fmt::Debug for SharedReceiveQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedReceiveQueue")
            .field("handle", &self.inner.h)
            .finish()
    }
}

impl ProtectionDomain {
    /// `ibv_create_srq`.
    pub fn create_srq(&self, attr: SrqAttr) -> Result<SharedReceiveQueue, Error> {
        SharedReceiveQueue::create(self.inner.clone(), attr)
    }
}

//! Shared receive queues.

use crate::error::{finish_destroy, logged, DestroyError, Error};
use crate::pd::PdInner;
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
        let (h, ring) = logged(
            "create_srq",
            pd.with(|e| {
                e.create_srq(pd.h, &attr)
                    .map(|(h, _)| (h, e.srq_ring(h).ok()))
            }),
        )?;
        Ok(SharedReceiveQueue {
            inner: Arc::new(SrqInner {
                pd,
                h,
                ring,
                destroyed: AtomicBool::new(false),
            }),
        })
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

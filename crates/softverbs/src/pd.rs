//! Protection domains. What is made on a PD (MRs, SRQs, AHs, QPs, ...) owns
//! its constructor, beside it: a PD imports none of them.

use crate::context::{Context, CtxInner};
use crate::error::{finish_destroy, logged, DestroyError, Error};
use proto::engine::PdHandle;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A protection domain (`struct ibv_pd`).
pub struct ProtectionDomain {
    pub(crate) inner: Arc<PdInner>,
}

pub(crate) struct PdInner {
    pub(crate) ctx: Arc<CtxInner>,
    pub(crate) h: PdHandle,
    destroyed: AtomicBool,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        if !self.destroyed.load(Ordering::Acquire) {
            // Nothing can use the PD any more: every user holds this `Arc`.
            let _ = self.ctx.dev.with(|e| e.dealloc_pd(self.h));
        }
    }
}

impl PdInner {
    /// No PD, only the way to the engine: what an XRC_RECV QP holds, which
    /// lives in an XRC domain instead (spec/xrc.md §2). Its handle names no
    /// object and its drop deallocates nothing.
    pub(crate) fn detached(ctx: Arc<CtxInner>) -> Arc<PdInner> {
        Arc::new(PdInner {
            ctx,
            h: PdHandle::from_raw(u64::MAX),
            destroyed: AtomicBool::new(true),
        })
    }

    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut proto::Engine) -> R) -> R {
        self.ctx.dev.with(f)
    }
}

impl ProtectionDomain {
    pub(crate) fn new(ctx: Arc<CtxInner>, h: PdHandle) -> Self {
        ProtectionDomain {
            inner: Arc::new(PdInner {
                ctx,
                h,
                destroyed: AtomicBool::new(false),
            }),
        }
    }

    /// `ibv_dealloc_pd`: refused with `EBUSY` while MRs, SRQs, AHs or QPs use it
    /// (the PD is handed back in the error, unchanged).
    pub fn destroy(self) -> Result<(), DestroyError<Self>> {
        let r = self.inner.with(|e| e.dealloc_pd(self.inner.h));
        let inner = self.inner.clone();
        finish_destroy("dealloc_pd", r, &inner.destroyed, self)
    }
}

impl std::fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProtectionDomain")
            .field("handle", &self.inner.h)
            .finish()
    }
}

impl Context {
    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> Result<ProtectionDomain, Error> {
        let h = logged("alloc_pd", self.with(|e| e.alloc_pd(self.inner.h)))?;
        Ok(ProtectionDomain::new(self.inner.clone(), h))
    }
}

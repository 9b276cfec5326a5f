//! Completion queues.

use crate::context::CtxInner;
use crate::error::{finish_destroy, DestroyError};
use proto::engine::CqHandle;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A completion queue (`struct ibv_cq`).
pub struct CompletionQueue {
    pub(crate) inner: Arc<CqInner>,
}

pub(crate) struct CqInner {
    pub(crate) ctx: Arc<CtxInner>,
    pub(crate) h: CqHandle,
    cqe: u32,
    destroyed: AtomicBool,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        if !self.destroyed.load(Ordering::Acquire) {
            let _ = self.ctx.dev.with(|e| e.destroy_cq(self.h));
        }
    }
}

impl CompletionQueue {
    pub(crate) fn new(ctx: Arc<CtxInner>, h: CqHandle, cqe: u32) -> Self {
        CompletionQueue {
            inner: Arc::new(CqInner {
                ctx,
                h,
                cqe,
                destroyed: AtomicBool::new(false),
            }),
        }
    }

    /// The capacity granted (≥ the request).
    pub fn cqe(&self) -> u32 {
        self.inner.cqe
    }

    /// `ibv_destroy_cq`: refused with `EBUSY` while a QP uses it.
    pub fn destroy(self) -> Result<(), DestroyError<Self>> {
        let r = self.inner.ctx.dev.with(|e| e.destroy_cq(self.inner.h));
        let inner = self.inner.clone();
        finish_destroy("destroy_cq", r, &inner.destroyed, self)
    }
}

impl std::fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("cqe", &self.inner.cqe)
            .finish()
    }
}

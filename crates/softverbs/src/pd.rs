//! Protection domains: the factories for MRs, SRQs, AHs and QPs.

use crate::ah::AddressHandle;
use crate::context::CtxInner;
use crate::error::{finish_destroy, logged, DestroyError, Error};
use crate::mr::MemoryRegion;
use crate::qp::{AnyTransport, QpInit, QueuePair, Rc, Transport, Uc, Ud};
use crate::srq::SharedReceiveQueue;
use proto::engine::PdHandle;
use proto::srq::SrqAttr;
use proto::{AccessFlags, AhAttr, QpType};
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

    /// `ibv_reg_mr` over a new zeroed, page-aligned buffer of `len` bytes that the
    /// region owns. REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE (`EINVAL`).
    pub fn reg_mr(&self, len: usize, access: AccessFlags) -> Result<MemoryRegion, Error> {
        MemoryRegion::register(self.inner.clone(), len, access)
    }

    /// `ibv_create_srq`.
    pub fn create_srq(&self, attr: SrqAttr) -> Result<SharedReceiveQueue, Error> {
        SharedReceiveQueue::create(self.inner.clone(), attr)
    }

    /// `ibv_create_ah`: the address vector must carry a GRH (RoCE).
    pub fn create_ah(&self, attr: &AhAttr) -> Result<AddressHandle, Error> {
        let h = logged(
            "create_ah",
            self.inner.with(|e| e.create_ah(self.inner.h, attr)),
        )?;
        Ok(AddressHandle::new(self.inner.clone(), h, *attr))
    }

    /// `ibv_create_qp` / `ibv_create_qp_ex` with a raw `ibv_qp_type` value: types
    /// softverbs does not support (XRC, RAW_PACKET) are refused with `EOPNOTSUPP`.
    pub fn create_qp(
        &self,
        init: &QpInit<'_>,
        qp_type: u32,
    ) -> Result<QueuePair<AnyTransport>, Error> {
        QueuePair::create(self.inner.clone(), init, qp_type)
    }

    fn create_typed<T: Transport>(
        &self,
        init: &QpInit<'_>,
        t: QpType,
    ) -> Result<QueuePair<T>, Error> {
        QueuePair::create(self.inner.clone(), init, t.raw()).map(QueuePair::retype)
    }

    /// A reliable-connection QP.
    pub fn create_rc_qp(&self, init: &QpInit<'_>) -> Result<QueuePair<Rc>, Error> {
        self.create_typed(init, QpType::Rc)
    }

    /// An unreliable-connection QP.
    pub fn create_uc_qp(&self, init: &QpInit<'_>) -> Result<QueuePair<Uc>, Error> {
        self.create_typed(init, QpType::Uc)
    }

    /// An unreliable-datagram QP.
    pub fn create_ud_qp(&self, init: &QpInit<'_>) -> Result<QueuePair<Ud>, Error> {
        self.create_typed(init, QpType::Ud)
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

//! XRC: domains (`ibv_open_xrcd`), XRC SRQs, XRC_RECV QPs (created and
//! opened) and XRC sends (spec/xrc.md).
//!
//! An XRC_SEND QP is made like any other, through a PD
//! ([`ProtectionDomain::create_qp`] with `IBV_QPT_XRC_SEND`); every WR it
//! posts names the remote XRC SRQ ([`QueuePair::post_send_xrc`]). On the
//! receiving side an XRC_RECV QP lives in an [`XrcDomain`], and each message
//! lands on the XRC SRQ of that domain the sender named, completing on the
//! SRQ's CQ.

use crate::context::{Context, CtxInner};
use crate::cq::CompletionQueue;
use crate::error::{finish_destroy, logged, DestroyError, Error};
use crate::pd::{PdInner, ProtectionDomain};
use crate::qp::{AnyTransport, QueuePair, Transport};
use crate::srq::SharedReceiveQueue;
use proto::handle::XrcdHandle;
use proto::qp::create::{comp_mask, QpRequest};
use proto::srq::SrqAttr;
use proto::wr::SendWr;
use proto::xrcd::{OpenFlags, XrcdKey};
use proto::QpType;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// An open XRC domain (`struct ibv_xrcd`). Opens of the same file (device and
/// inode) in one process share the domain; closing the last open ends it.
pub struct XrcDomain {
    inner: Arc<XrcdInner>,
}

struct XrcdInner {
    ctx: Arc<CtxInner>,
    h: XrcdHandle,
    closed: AtomicBool,
}

impl Drop for XrcdInner {
    fn drop(&mut self) {
        if !self.closed.load(Ordering::Acquire) {
            // Nothing can use it any more: every user holds this `Arc`.
            let _ = self.ctx.dev.with(|e| e.close_xrcd(self.h));
        }
    }
}

impl Context {
    /// `ibv_open_xrcd`: the XRC domain of `file` (`st_dev`, `st_ino` of the
    /// descriptor), created if `oflags` has `O_CREAT`, refused with `EINVAL`
    /// if it exists and `oflags` has `O_EXCL`, `EAGAIN` if it does not and
    /// `O_CREAT` is missing. `file` `None` (fd -1): a domain of its own.
    pub fn open_xrcd(&self, file: Option<XrcdKey>, oflags: u32) -> Result<XrcDomain, Error> {
        let flags = OpenFlags::from_raw(oflags);
        let h = logged(
            "open_xrcd",
            self.with(|e| e.open_xrcd(self.inner.h, file, flags)),
        )?;
        Ok(XrcDomain {
            inner: Arc::new(XrcdInner {
                ctx: self.inner.clone(),
                h,
                closed: AtomicBool::new(false),
            }),
        })
    }
}

impl XrcDomain {
    /// The domain this open names: equal for opens of one file.
    pub fn domain(&self) -> Result<u32, Error> {
        let h = self.inner.h;
        logged("xrcd", self.inner.ctx.dev.with(|e| e.xrcd_domain(h)))
    }

    /// `ibv_create_qp_ex` of an XRC_RECV QP in this domain: no PD, no CQs,
    /// no queues (its capacities are 0); bring it to RTS like an RC QP, with
    /// the RTS attributes `TIMEOUT` and `SQ_PSN` only.
    pub fn create_recv_qp(&self) -> Result<QueuePair<AnyTransport>, Error> {
        let req = QpRequest {
            qp_type: QpType::XrcRecv.raw(),
            comp_mask: comp_mask::XRCD,
            ..QpRequest::default()
        };
        let h = self.inner.h;
        let created = logged(
            "create_qp_ex",
            self.inner.ctx.dev.with(|e| e.create_xrc_recv_qp(h, &req)),
        )?;
        Ok(self.target_qp(&created))
    }

    /// `ibv_open_qp`: another handle to XRC_RECV QP `qp_num` of this domain
    /// (`EINVAL` if it is none); the QP lives until its last handle goes.
    pub fn open_qp(&self, qp_num: u32) -> Result<QueuePair<AnyTransport>, Error> {
        let h = self.inner.h;
        let t = QpType::XrcRecv.raw();
        let created = logged(
            "open_qp",
            self.inner.ctx.dev.with(|e| e.open_qp(h, qp_num, t)),
        )?;
        Ok(self.target_qp(&created))
    }

    fn target_qp(&self, created: &proto::engine::QpCreated) -> QueuePair<AnyTransport> {
        let pd = PdInner::detached(self.inner.ctx.clone());
        QueuePair::xrc_target(pd, created, (self.inner.h, self.inner.clone()))
    }

    /// `ibv_close_xrcd`: refused with `EBUSY` while XRC SRQs or XRC_RECV QPs
    /// made through this open exist (the domain is handed back).
    pub fn close(self) -> Result<(), DestroyError<Self>> {
        let h = self.inner.h;
        let r = self.inner.ctx.dev.with(|e| e.close_xrcd(h));
        let inner = self.inner.clone();
        finish_destroy("close_xrcd", r, &inner.closed, self)
    }
}

impl std::fmt::Debug for XrcDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XrcDomain")
            .field("handle", &self.inner.h)
            .finish()
    }
}

impl ProtectionDomain {
    /// `ibv_create_srq_ex` with `IBV_SRQT_XRC`: an SRQ in this PD and in
    /// `xrcd`, whose receives complete on `cq`; XRC senders name it by
    /// [`SharedReceiveQueue::srq_num`]. RDMA and atomics through the XRC_RECV
    /// QP that delivers to it are checked against this PD.
    pub fn create_xrc_srq(
        &self,
        xrcd: &XrcDomain,
        cq: &CompletionQueue,
        attr: SrqAttr,
    ) -> Result<SharedReceiveQueue, Error> {
        let pd = self.inner.clone();
        let (x, c) = (xrcd.inner.h, cq.inner.h);
        let (h, _) = logged(
            "create_srq_ex",
            pd.with(|e| e.create_xrc_srq(pd.h, x, c, &attr)),
        )?;
        let uses: Vec<Arc<dyn std::any::Any + Send + Sync>> =
            vec![xrcd.inner.clone(), cq.inner.clone()];
        Ok(SharedReceiveQueue::from_parts(pd, h, uses))
    }
}

impl<T: Transport> QueuePair<T> {
    /// `ibv_post_send` on an XRC_SEND QP: `remote_srqn` is the XRC SRQ the
    /// message is for (`wr.qp_type.xrc.remote_srqn`); on other QP types it is
    /// ignored.
    pub fn post_send_xrc(&self, wr: &SendWr<'_>, remote_srqn: u32) -> Result<(), Error> {
        self.post_send_to(wr, remote_srqn)
    }
}

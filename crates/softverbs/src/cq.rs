//! Completion queues.

use crate::context::{Context, CtxInner};
use crate::error::{finish_destroy, logged, DestroyError, Error};
use proto::cq::SharedCq;
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
    /// The pollers' side of the CQ's ring: `poll` and `req_notify` go
    /// through it without the engine lock.
    pub(crate) ring: Arc<SharedCq>,
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
    pub(crate) fn new(ctx: Arc<CtxInner>, h: CqHandle, cqe: u32, ring: Arc<SharedCq>) -> Self {
        CompletionQueue {
            inner: Arc::new(CqInner {
                ctx,
                h,
                ring,
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

impl Context {
    /// `ibv_create_cq` with `cqe` entries on completion vector 0.
    pub fn create_cq(&self, cqe: i32) -> Result<CompletionQueue, Error> {
        self.create_cq_on(cqe, 0)
    }

    /// `ibv_create_cq` on a given completion vector.
    pub fn create_cq_on(&self, cqe: i32, comp_vector: i32) -> Result<CompletionQueue, Error> {
        let (h, granted, ring) = logged(
            "create_cq",
            self.with(|e| {
                let (h, granted) = e.create_cq(self.inner.h, cqe, comp_vector)?;
                Ok((h, granted, e.cq_shared(h)?))
            }),
        )?;
        Ok(CompletionQueue::new(self.inner.clone(), h, granted, ring))
    }
}

#[cfg(test)]
mod tests {
    use crate::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// `poll`, `req_notify` and `post_recv` (in INIT..RTS) never take the
    /// engine lock: they succeed while another thread holds it (bounded by
    /// timeouts, not timed).
    #[test]
    fn poll_arm_and_post_recv_do_not_take_the_engine_lock() {
        let ctx = devices().unwrap().remove(0).open().unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let mr = pd.reg_mr(64, AccessFlags(0)).unwrap();
        let cq = ctx.create_cq(8).unwrap();
        let qp = pd.create_rc_qp(&QpInit::new(&cq, &cq)).unwrap();
        qp.to_init(ConnectedInit {
            pkey_index: 0,
            port_num: 1,
            access: AccessFlags(0),
        })
        .unwrap();
        for id in [1, 2] {
            let sge = [mr.sge(0, 64)];
            qp.post_recv(&RecvWr {
                wr_id: id,
                sg_list: &sge,
            })
            .unwrap();
        }
        // Moving to ERR flushes both receives into the CQ.
        qp.apply(ToError).unwrap();
        let qp2 = pd.create_rc_qp(&QpInit::new(&cq, &cq)).unwrap();
        qp2.to_init(ConnectedInit {
            pkey_index: 0,
            port_num: 1,
            access: AccessFlags(0),
        })
        .unwrap();

        let (locked_tx, locked_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        std::thread::scope(|s| {
            let ctx = &ctx;
            let holder = s.spawn(move || {
                ctx.with(|_| {
                    locked_tx.send(()).unwrap();
                    // Bounded: released by the poller, or gives up.
                    let _ = release_rx.recv_timeout(Duration::from_secs(20));
                });
            });
            locked_rx.recv_timeout(Duration::from_secs(20)).unwrap();
            let (done_tx, done_rx) = mpsc::channel();
            let (cq, qp2, mr) = (&cq, &qp2, &mr);
            s.spawn(move || {
                let sge = [mr.sge(0, 64)];
                qp2.post_recv(&RecvWr {
                    wr_id: 3,
                    sg_list: &sge,
                })
                .unwrap();
                let mut out = Vec::new();
                cq.req_notify(false).unwrap();
                cq.poll(8, &mut out);
                done_tx.send(out).unwrap();
            });
            let got = done_rx.recv_timeout(Duration::from_secs(10));
            release_tx.send(()).unwrap();
            holder.join().unwrap();
            let got = got.expect("post_recv or poll_cq waited for the engine lock");
            let ids: Vec<_> = got.iter().map(|w| (w.wr_id, w.status)).collect();
            assert_eq!(ids, [(1, WcStatus::WrFlushErr), (2, WcStatus::WrFlushErr)]);
        });
        // The receive posted without the lock is on qp2's queue: ERR flushes it.
        qp2.apply(ToError).unwrap();
        let got = cq.wait(1, Duration::from_secs(10));
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].wr_id, got[0].status), (3, WcStatus::WrFlushErr));
    }
}

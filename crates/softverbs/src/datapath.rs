//! Moving data: posting work requests, polling completions, completion
//! channels and asynchronous events.

use crate::context::Context;
use crate::cq::CompletionQueue;
use crate::error::Error;
use crate::mr::MemoryRegion;
use crate::qp::{QueuePair, Transport};
use crate::srq::SharedReceiveQueue;
use crate::AddressHandle;
use proto::wc::WorkCompletion;
use proto::wr::{RecvWr, SendWr, Sge, UdTarget, WrTarget};
use std::sync::Arc;
use std::time::Duration;

fn post_err(verb: &'static str, e: proto::wr::PostError) -> Error {
    tracing::warn!(target: "softverbs", "{verb} refused ({}): {e}", e.errno());
    Error::Post(e)
}

impl<T: Transport> QueuePair<T> {
    /// `ibv_post_send` for one WR. With `IBV_SEND_INLINE` the bytes are copied
    /// now (through the MR check), so the buffer may be reused at once.
    pub fn post_send(&self, wr: &SendWr<'_>) -> Result<(), Error> {
        let shared = &self.pd().ctx.dev;
        let h = self.handle();
        shared
            .with_mem(|e, mem| e.post_send_checked(h, wr, mem))
            .map_err(|e| post_err("post_send", e))?;
        shared.doorbell();
        Ok(())
    }

    /// `ibv_post_recv` for one WR.
    pub fn post_recv(&self, wr: &RecvWr<'_>) -> Result<(), Error> {
        let h = self.handle();
        self.pd()
            .with(|e| e.post_recv(h, wr))
            .map_err(|e| post_err("post_recv", e))?;
        Ok(())
    }

    /// Counters of this QP (packets, retransmissions, NAKs, drops…).
    pub fn counters(&self) -> Option<proto::qp::data::QpCounters> {
        let h = self.handle();
        self.pd().with(|e| e.qp_counters(h))
    }
}

impl SharedReceiveQueue {
    /// `ibv_post_srq_recv` for one WR.
    pub fn post_recv(&self, wr: &RecvWr<'_>) -> Result<(), Error> {
        let h = self.inner.h;
        self.inner
            .pd
            .with(|e| e.post_srq_recv(h, wr))
            .map_err(|e| post_err("post_srq_recv", e))
    }
}

impl CompletionQueue {
    /// `ibv_poll_cq`: up to `max` completions, oldest first, appended to `out`;
    /// returns how many.
    pub fn poll(&self, max: usize, out: &mut Vec<WorkCompletion>) -> usize {
        let h = self.inner.h;
        self.inner
            .ctx
            .dev
            .with_no_clock(|e| e.poll_cq(h, max, out))
            .unwrap_or(0)
    }

    /// Polls until `n` completions arrived or `timeout` passed, yielding the
    /// CPU between empty polls (the progress thread that produces the
    /// completions may need this core). Returns what arrived.
    pub fn wait(&self, n: usize, timeout: Duration) -> Vec<WorkCompletion> {
        let deadline = std::time::Instant::now() + timeout;
        let mut out = Vec::with_capacity(n);
        while out.len() < n && std::time::Instant::now() < deadline {
            if self.poll(n - out.len(), &mut out) == 0 {
                std::thread::yield_now();
            }
        }
        out
    }

    /// `ibv_req_notify_cq`: the next (solicited-only: next solicited or
    /// unsuccessful) completion raises one event on the CQ's channel.
    pub fn req_notify(&self, solicited_only: bool) -> Result<(), Error> {
        let h = self.inner.h;
        self.inner
            .ctx
            .dev
            .with(|e| e.req_notify_cq(h, solicited_only))
            .map_err(Error::Verbs)
    }

    /// An identifier that [`CompletionChannel::get_event`] returns for this CQ.
    pub fn id(&self) -> u64 {
        self.inner.h.raw()
    }
}

/// A completion channel (`ibv_comp_channel`): a pollable file descriptor on
/// which armed CQs report completions.
#[derive(Clone)]
pub struct CompletionChannel {
    pub(crate) inner: Arc<sv_io::CompletionChannel>,
}

impl CompletionChannel {
    /// Waits for the next completion event; returns the CQ's [`CompletionQueue::id`].
    pub fn get_event(&self, timeout: Option<Duration>) -> Result<Option<u64>, Error> {
        self.inner.get_event(timeout).map_err(|e| Error::Os {
            op: "waiting for a completion event",
            source: e.into(),
        })
    }

    /// The file descriptor (readable while events wait).
    pub fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.inner.as_raw_fd()
    }
}

impl std::fmt::Debug for CompletionChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionChannel")
            .field("fd", &self.fd())
            .finish()
    }
}

/// An asynchronous event (`ibv_async_event`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncEvent {
    /// `enum ibv_event_type` value.
    pub kind: u32,
    /// The QP/CQ/SRQ it concerns (compare with `id()` of the object).
    pub element: u64,
}

impl Context {
    /// `ibv_create_comp_channel`.
    pub fn create_comp_channel(&self) -> Result<CompletionChannel, Error> {
        let ch = self
            .inner
            .dev
            .driver
            .create_completion_channel()
            .map_err(|e| Error::Os {
                op: "creating a completion channel",
                source: e.into(),
            })?;
        Ok(CompletionChannel { inner: ch })
    }

    /// `ibv_create_cq` whose events go to `channel`.
    pub fn create_cq_with_channel(
        &self,
        cqe: i32,
        channel: &CompletionChannel,
    ) -> Result<CompletionQueue, Error> {
        let cq = self.create_cq(cqe)?;
        let (h, id) = (cq.inner.h, channel.inner.id());
        self.with(|e| e.set_cq_channel(h, Some(id)))
            .map_err(Error::Verbs)?;
        Ok(cq)
    }

    /// `ibv_get_async_event`: waits up to `timeout` for the next event.
    pub fn get_async_event(&self, timeout: Option<Duration>) -> Result<Option<AsyncEvent>, Error> {
        let e = self
            .inner
            .dev
            .driver
            .async_events()
            .pop_wait(timeout)
            .map_err(|e| Error::Os {
                op: "waiting for an async event",
                source: e.into(),
            })?;
        Ok(e.map(|e| AsyncEvent {
            kind: e.kind,
            element: e.element,
        }))
    }
}

impl MemoryRegion {
    /// A scatter/gather element over `len` bytes at `offset` in this region.
    /// (Out-of-range elements are refused when used: `IBV_WC_LOC_PROT_ERR`.)
    pub fn sge(&self, offset: usize, len: u32) -> Sge {
        Sge {
            addr: self.addr() + offset as u64,
            length: len,
            lkey: self.lkey(),
        }
    }

    /// The remote side of an RDMA operation on `offset` of this region.
    pub fn remote(&self, offset: usize) -> proto::wr::RdmaTarget {
        proto::wr::RdmaTarget {
            remote_addr: self.addr() + offset as u64,
            rkey: self.rkey(),
        }
    }
}

impl AddressHandle {
    /// The `wr.ud` of a UD send through this handle.
    pub fn ud(&self, remote_qpn: u32, remote_qkey: u32) -> WrTarget {
        WrTarget::Ud(UdTarget {
            ah: self.handle(),
            remote_qpn,
            remote_qkey,
        })
    }
}

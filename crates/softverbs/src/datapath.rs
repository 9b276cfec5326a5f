//! Moving data: posting work requests, polling completions, completion
//! channels and asynchronous events.

use crate::context::Context;
use crate::cq::CompletionQueue;
use crate::error::Error;
use crate::mem::RawMemory;
use crate::mr::MemoryRegion;
use crate::qp::{QueuePair, Transport};
use crate::srq::SharedReceiveQueue;
use crate::AddressHandle;
use proto::rq::RingPost;
use proto::wc::WorkCompletion;
use proto::wr::{RecvWr, SendWr, Sge, UdTarget, WrTarget};
use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

thread_local! {
    /// The bytes of this thread's `IBV_SEND_INLINE` posts, gathered before
    /// they are copied into the send ring's slot: posting allocates nothing.
    static INLINE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

fn post_err(verb: &'static str, e: proto::wr::PostError) -> Error {
    tracing::warn!(target: "softverbs", "{verb} refused ({}): {e}", e.errno());
    Error::Post(e)
}

impl<T: Transport> QueuePair<T> {
    /// `ibv_post_send` for one WR: written into the QP's send ring without
    /// the engine lock (proto::sq), or, to an idle queue whose peer has a
    /// same-host ring, straight into the send queue under the QP's own lock
    /// (spec/performance.md §27); only a post in ERR or SQE (an immediate
    /// flush completion) or one that raced a move to ERR/SQE/RESET takes the
    /// lock. With `IBV_SEND_INLINE` the bytes are copied now, through the MR
    /// check (against the device's read-only copy of its regions, not under
    /// the engine lock), so the buffer may be reused at once.
    pub fn post_send(&self, wr: &SendWr<'_>) -> Result<(), Error> {
        self.post_send_to(wr, 0)
    }

    /// [`QueuePair::post_send`] with the XRC SRQ an XRC_SEND WR is for.
    pub(crate) fn post_send_to(&self, wr: &SendWr<'_>, xrc_srqn: u32) -> Result<(), Error> {
        let inline = wr.flags.contains(proto::wr::SendFlags::INLINE);
        let posted = match self.send_ring() {
            Some(ring) if inline => INLINE.with_borrow_mut(|buf| {
                let r = match ring.gather_inline(&RawMemory, wr.sg_list, buf) {
                    Ok(()) => self.post_send_ring(wr, Some(buf), xrc_srqn),
                    Err(e) => Some(Err(post_err("post_send", e))),
                };
                // A refused oversized WR must not pin its size.
                if buf.capacity() > proto::device::MAX_INLINE_DATA as usize {
                    *buf = Vec::new();
                }
                r
            }),
            Some(_) => self.post_send_ring(wr, None, xrc_srqn),
            None => None,
        };
        if let Some(r) = posted {
            return r;
        }
        // No send ring (RAW_PACKET, XRC_RECV): the engine's way.
        let shared = &self.pd().ctx.dev;
        let h = self.handle();
        shared
            .with_mem(|e, mem| e.post_send_checked_xrc(h, wr, mem, xrc_srqn))
            .map_err(|e| post_err("post_send", e))?;
        shared.doorbell();
        Ok(())
    }

    /// A send WR (with its inline bytes, gathered by the caller) posted on
    /// the QP's send ring, or straight into its send queue
    /// (`Shared::post_send`); `None` if the QP has no send ring
    /// (RAW_PACKET, XRC_RECV: the engine's way).
    pub(crate) fn post_send_ring(
        &self,
        wr: &SendWr<'_>,
        inline: Option<&[u8]>,
        xrc_srqn: u32,
    ) -> Option<Result<(), Error>> {
        let ring = self.send_ring()?;
        let h = self.handle();
        let r = self.pd().ctx.dev.post_send(h, ring, wr, inline, xrc_srqn);
        Some(r.map_err(|e| post_err("post_send", e)))
    }

    /// `ibv_post_recv` for one WR: written into the QP's receive ring without
    /// the engine lock (proto::rq); only a post in ERR (an immediate flush
    /// completion) or one that raced a move to ERR/RESET takes the lock.
    pub fn post_recv(&self, wr: &RecvWr<'_>) -> Result<(), Error> {
        let h = self.handle();
        let posted = match self.recv_ring() {
            Some(ring) => ring.post(wr),
            None => Ok(RingPost::Flush),
        };
        match posted.map_err(|e| post_err("post_recv", e))? {
            RingPost::Queued => Ok(()),
            RingPost::Flush | RingPost::Full => self
                .pd()
                .with(|e| e.post_recv(h, wr))
                .map(drop)
                .map_err(|e| post_err("post_recv", e)),
            RingPost::Settle => self
                .pd()
                .with(|e| e.settle_recv(h))
                .map_err(|e| post_err("post_recv", e)),
        }
    }

    /// Counters of this QP (packets, retransmissions, NAKs, drops…).
    pub fn counters(&self) -> Option<proto::qp::data::QpCounters> {
        let h = self.handle();
        self.pd().with(|e| e.qp_counters(h))
    }

    /// Why the last memory-window bind or invalidation on this QP was refused
    /// (`IBV_WC_MW_BIND_ERR`, `IBV_WC_LOC_QP_OP_ERR`, or a SEND_WITH_INV it
    /// received): the completion has the status, this has the rule.
    pub fn window_error(&self) -> Option<crate::MwError> {
        let h = self.handle();
        self.pd()
            .with(|e| e.qp(h).ok().and_then(|q| q.window_error().cloned()))
    }
}

impl SharedReceiveQueue {
    /// `ibv_post_srq_recv` for one WR: written into the SRQ's ring without
    /// the engine lock (proto::rq); only a full ring (an SRQ grown past
    /// `proto::rq::SRQ_RING_SLOTS`) takes the lock.
    pub fn post_recv(&self, wr: &RecvWr<'_>) -> Result<(), Error> {
        let h = self.inner.h;
        if let Some(ring) = &self.inner.ring {
            match ring.post(wr).map_err(|e| post_err("post_srq_recv", e))? {
                // Posted (an SRQ has no state to settle).
                RingPost::Queued | RingPost::Settle => return Ok(()),
                // Not posted: the engine's way.
                RingPost::Full | RingPost::Flush => {}
            }
        }
        self.inner
            .pd
            .with(|e| e.post_srq_recv(h, wr))
            .map_err(|e| post_err("post_srq_recv", e))
    }
}

/// A poll of an empty ring drives the receive path (`drive`) and looks again,
/// whatever the drive reports: a completion another thread made meanwhile
/// (the progress thread, while this one was off its core inside the drive)
/// is there too. An empty answer then says the ring was empty as the poll
/// returned, as a hardware CQ's does. Before, such a completion waited for
/// the next poll, and a program that reads its connection events after an
/// empty poll (ofi_rxm) could see a disconnect that came after it first
/// (spec/libfabric.md §6).
pub(crate) fn poll_or_drive(
    max: usize,
    mut poll: impl FnMut() -> usize,
    drive: impl FnOnce() -> usize,
) -> usize {
    let n = poll();
    if n > 0 || max == 0 {
        return n;
    }
    drive();
    poll()
}

impl CompletionQueue {
    /// `ibv_poll_cq`: up to `max` completions, oldest first, appended to `out`;
    /// returns how many. Reads the CQ's ring without the engine lock and
    /// without a system call (proto::cq::SharedCq). Unless `SOFTVERBS_POLL_RX=0`,
    /// an empty ring while the progress thread sleeps makes this thread read
    /// the socket once itself (`sv_io::Driver::drive_receive`) and look again.
    pub fn poll(&self, max: usize, out: &mut Vec<WorkCompletion>) -> usize {
        let driver = &self.inner.ctx.dev.driver;
        poll_or_drive(
            max,
            || self.inner.ring.poll(max, out),
            || driver.drive_receive(),
        )
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
    ///
    /// Sets the ring's arm state without the engine lock; a completion added
    /// while it arms either fires the event or is returned by the next poll
    /// (proto::cq::SharedCq::req_notify), so "arm, poll, then wait" never
    /// sleeps on a completion it missed.
    pub fn req_notify(&self, solicited_only: bool) -> Result<(), Error> {
        self.inner.ring.req_notify(solicited_only);
        // The thread is about to wait for the event, not poll: the socket
        // goes back to the progress thread (sv_io::Driver::end_poll_lease).
        self.inner.ctx.dev.driver.end_poll_lease();
        Ok(())
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
        let e = self.inner.events.pop_wait(timeout).map_err(|e| Error::Os {
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

#[cfg(test)]
mod tests {
    use super::poll_or_drive;
    use std::cell::Cell;

    /// The drive read nothing itself, but a completion came meanwhile (made
    /// by another thread): the poll hands it out instead of answering empty.
    #[test]
    fn an_empty_poll_looks_again_after_a_drive_that_read_nothing() {
        let queued = Cell::new(0);
        let polls = Cell::new(0);
        let poll = || {
            polls.set(polls.get() + 1);
            queued.replace(0)
        };
        let drive = || {
            queued.set(1);
            0
        };
        assert_eq!(poll_or_drive(4, poll, drive), 1);
        assert_eq!(polls.get(), 2);
    }

    /// A poll that found completions, or asked for none, does not drive.
    #[test]
    fn a_poll_that_found_something_does_not_drive() {
        let drove = Cell::new(false);
        let drive = || {
            drove.set(true);
            0
        };
        assert_eq!(poll_or_drive(4, || 2, drive), 2);
        assert_eq!(poll_or_drive(0, || 0, drive), 0);
        assert!(!drove.get());
    }
}

//! How the engine takes what a QP's actor hands its [`Sink`]: completions
//! (and their events), SRQ receives, async events.

use super::{Engine, EngineSink, SrqEntry};
use crate::cq::Pushed;
use crate::handle::kind;
use crate::handle::{CqHandle, CtxHandle, SrqHandle};
use crate::output::{AsyncEventKind, Event, EventElement};
use crate::qp::actor::Sink;
use crate::qp::wqe::RecvQueue;
use crate::table::Table;
use crate::wc::WorkCompletion;

impl<'a> EngineSink<'a> {
    /// The queue of SRQ `srq`, locked for the rest of this turn (the lock of
    /// another SRQ this turn held is let go first).
    fn hold(&mut self, srq: SrqHandle) -> Option<&mut RecvQueue> {
        if self.held.as_ref().is_none_or(|(h, _)| *h != srq) {
            self.held = None;
            let srqs: &'a Table<SrqEntry, kind::Srq> = self.srqs;
            let queue = srqs.get(srq)?.queue.lock();
            self.held = Some((srq, queue));
        }
        self.held.as_mut().map(|(_, q)| &mut **q)
    }
}

impl Engine {
    /// How many receive completions (`IBV_WC_RECV`, `_RECV_RDMA_WITH_IMM`)
    /// the engine has made: a driver that handed it datagrams learns whether
    /// they completed a receive (a program may post its reply at once).
    pub fn receives_completed(&self) -> u64 {
        let lanes = self.dev.receives.all();
        lanes
            .map(|r| r.load(std::sync::atomic::Ordering::Relaxed))
            .sum()
    }

    /// How many RDMA WRITEs without immediate QPs have taken whole (the
    /// message's last packet placed: data a program may be spinning on,
    /// with no completion and no receive WQE), and when (engine time,
    /// [`Engine::set_now`]'s clock) the latest came; (0, 0): none. A
    /// driver learns from it whether the peer answered a post with a WRITE
    /// (a program spinning on memory sees it only once some thread placed
    /// it). The count is read with acquire: the placed bytes are visible.
    pub fn writes_taken(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::{Acquire, Relaxed};
        // Each lane's count only grows: so does the sum read lane by lane.
        self.dev
            .writes
            .all()
            .fold((0, 0), |(n, latest), [count, at]| {
                (n + count.load(Acquire), latest.max(at.load(Relaxed)))
            })
    }

    /// QPs took `n` whole RDMA WRITEs at `now` ([`Engine::writes_taken`]),
    /// right after their turn placed them, before it builds their
    /// responses: a program spinning on that memory sees the bytes and
    /// posts its answer at once, and the linger (`sv_io`) must find the
    /// WRITE counted then. Counted after the ACK (0.5 µs later on the
    /// rings), 0.2–1 % of a same-host `ib_write_lat`'s posts found no new
    /// WRITE, broke the pattern and left the peer's answer to a woken
    /// progress thread (spec/performance.md §33).
    pub(crate) fn took_writes(&self, now: u64, n: u64) {
        use std::sync::atomic::Ordering::{Relaxed, Release};
        if n == 0 {
            return;
        }
        let [count, at] = self.dev.writes.mine();
        // Readers deliver at once (the progress thread, polling and waiting
        // threads): a later one may come with an older `now`.
        at.fetch_max(now, Relaxed);
        count.fetch_add(n, Release);
    }

    /// The contexts whose async-event queues get an event about `element`:
    /// the one that created the object, or for an XRC_RECV QP each context
    /// that holds a handle of it, created or opened (kernel
    /// `__ib_shared_qp_event_handler`: every handle on the QP's
    /// `open_list`). None once the object is gone: as the kernel drops a
    /// destroyed object's unread events, the driver drops it.
    pub fn event_owners(&self, element: EventElement) -> Vec<CtxHandle> {
        let pd = match element {
            EventElement::Cq(h) => return self.cqs.get(h).map(|c| c.cq.ctx).into_iter().collect(),
            EventElement::Srq(h) => match self.srqs.get(h) {
                Some(s) => s.srq.lock().pd,
                None => return Vec::new(),
            },
            EventElement::Qp(h) => {
                let Some(q) = self.qps.get(h).map(|q| q.lock()) else {
                    return Vec::new();
                };
                if q.xrc.is_some() {
                    drop(q);
                    return self.xrc_qp_contexts(h);
                }
                q.pd
            }
        };
        self.pds.get(pd).map(|p| p.ctx).into_iter().collect()
    }
}

impl Sink for EngineSink<'_> {
    /// Raises the completion event if the CQ is armed; on overrun raises
    /// `IBV_EVENT_CQ_ERR` (completions.md §7.2).
    fn complete(&mut self, cq: CqHandle, wc: WorkCompletion, solicited: bool) -> bool {
        let Some(c) = self.cqs.get(cq) else {
            return true;
        };
        if wc.opcode.is_recv() {
            self.receives
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let wc = WorkCompletion {
            timestamp_ns: self.now,
            ..wc
        };
        let pushed = c.ring.lock().push(wc, solicited);
        match pushed {
            Pushed::Stored { event } => {
                if let (true, Some(channel)) = (event, c.channel) {
                    let e = Event::Completion { cq, channel };
                    self.events.push(e);
                }
                true
            }
            Pushed::Overrun => {
                self.events.push(Event::Async {
                    kind: AsyncEventKind::CqErr,
                    element: EventElement::Cq(cq),
                });
                false
            }
        }
    }

    fn qp_event(&mut self, kind: AsyncEventKind) {
        let element = EventElement::Qp(self.qp);
        self.events.push(Event::Async { kind, element });
    }

    fn srq_queue(&mut self, srq: SrqHandle) -> Option<&mut RecvQueue> {
        self.hold(srq)
    }

    /// spec/xrc.md §4: the SRQ must exist, be an XRC SRQ, and be in `domain`.
    fn xrc_target(
        &mut self,
        srqn: u32,
        domain: u32,
    ) -> Result<crate::xrcd::XrcTarget, crate::xrcd::XrcMiss> {
        use crate::xrcd::{XrcMiss, XrcTarget};
        let found = self.srqs.get_by_index(self.srq_nums.srq_index(srqn)?);
        let Some((srq, s)) = found else {
            return Err(XrcMiss::NoSrq { srqn });
        };
        let s = s.srq.lock();
        match s.xrc {
            None => Err(XrcMiss::NotXrc { srqn }),
            Some(x) if x.domain != domain => Err(XrcMiss::OtherDomain {
                srqn,
                srq_domain: x.domain,
                qp_domain: domain,
            }),
            Some(x) => Ok(XrcTarget {
                srq,
                pd: s.pd,
                cq: x.cq,
            }),
        }
    }

    /// rc-reliability.md §8: below the armed limit → one event, then disarmed.
    fn srq_taken(&mut self, srq: SrqHandle) {
        let Some(len) = self.hold(srq).map(|q| q.len() as u32) else {
            return;
        };
        let Some(s) = self.srqs.get(srq) else {
            return;
        };
        let mut s = s.srq.lock();
        let limit = s.attr.srq_limit;
        if limit > 0 && len < limit {
            s.attr.srq_limit = 0;
            drop(s);
            self.events.push(Event::Async {
                kind: AsyncEventKind::SrqLimitReached,
                element: EventElement::Srq(srq),
            });
        }
    }
}

//! How the engine takes what a QP's actor hands its [`Sink`]: completions
//! (and their events), SRQ receives, async events.

use super::EngineSink;
use crate::cq::Pushed;
use crate::handle::{CqHandle, SrqHandle};
use crate::output::{AsyncEventKind, Event, EventElement};
use crate::qp::actor::Sink;
use crate::qp::wqe::RecvQueue;
use crate::wc::WorkCompletion;

impl Sink for EngineSink<'_> {
    /// Raises the completion event if the CQ is armed; on overrun raises
    /// `IBV_EVENT_CQ_ERR` (completions.md §7.2).
    fn complete(&mut self, cq: CqHandle, wc: WorkCompletion, solicited: bool) -> bool {
        let Some(c) = self.cqs.get_mut(cq) else {
            return true;
        };
        let wc = WorkCompletion {
            timestamp_ns: self.now,
            ..wc
        };
        match c.ring.push(wc, solicited) {
            Pushed::Stored { event } => {
                if let (true, Some(channel)) = (event, c.channel) {
                    self.events.push_back(Event::Completion { cq, channel });
                }
                true
            }
            Pushed::Overrun => {
                self.events.push_back(Event::Async {
                    kind: AsyncEventKind::CqErr,
                    element: EventElement::Cq(cq),
                });
                false
            }
        }
    }

    fn qp_event(&mut self, kind: AsyncEventKind) {
        let element = EventElement::Qp(self.qp);
        self.events.push_back(Event::Async { kind, element });
    }

    fn srq_queue(&mut self, srq: SrqHandle) -> Option<&mut RecvQueue> {
        self.srqs.get_mut(srq).map(|s| &mut s.queue)
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
        match s.srq.xrc {
            None => Err(XrcMiss::NotXrc { srqn }),
            Some(x) if x.domain != domain => Err(XrcMiss::OtherDomain {
                srqn,
                srq_domain: x.domain,
                qp_domain: domain,
            }),
            Some(x) => Ok(XrcTarget {
                srq,
                pd: s.srq.pd,
                cq: x.cq,
            }),
        }
    }

    /// rc-reliability.md §8: below the armed limit → one event, then disarmed.
    fn srq_taken(&mut self, srq: SrqHandle) {
        let Some(s) = self.srqs.get_mut(srq) else {
            return;
        };
        let limit = s.srq.attr.srq_limit;
        if limit > 0 && (s.queue.len() as u32) < limit {
            s.srq.attr.srq_limit = 0;
            self.events.push_back(Event::Async {
                kind: AsyncEventKind::SrqLimitReached,
                element: EventElement::Srq(srq),
            });
        }
    }
}

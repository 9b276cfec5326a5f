//! Completion queues: creation rules.

use crate::device::DeviceAttr;
use crate::error::{Error, InvalidArg, RangeError};
use crate::handle::CtxHandle;

/// Number of completion vectors (`num_comp_vectors`).
pub const NUM_COMP_VECTORS: u32 = 1;

/// A completion queue.
#[derive(Debug, Clone)]
pub struct Cq {
    /// Owning context.
    pub ctx: CtxHandle,
    /// Capacity in completions.
    pub cqe: u32,
    /// Completion vector.
    pub comp_vector: u32,
}

/// Checks `ibv_create_cq` arguments; returns the capacity granted (≥ the request).
pub fn check_create(cqe: i32, comp_vector: i32, dev: &DeviceAttr) -> Result<u32, Error> {
    if cqe < 1 || cqe as u64 > u64::from(dev.max_cqe) {
        return Err(RangeError {
            what: "cqe",
            value: i64::from(cqe) as u64,
            min: 1,
            max: dev.max_cqe.into(),
            note: "; device limit max_cqe",
        }
        .into());
    }
    if comp_vector < 0 || comp_vector as u32 >= NUM_COMP_VECTORS {
        return Err(InvalidArg::CompVector {
            comp_vector,
            count: NUM_COMP_VECTORS,
        }
        .into());
    }
    Ok(cqe as u32)
}

/// How a CQ is armed for the next completion event (`ibv_req_notify_cq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Notify {
    /// Not armed.
    #[default]
    Disarmed,
    /// Armed for the next solicited (or unsuccessful) completion.
    Solicited,
    /// Armed for the next completion of any kind.
    Next,
}

/// What adding a completion to a CQ caused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Stored; `event` says whether a completion event is due now.
    Stored {
        /// The CQ was armed and this completion fires it.
        event: bool,
    },
    /// The CQ was full (or already overrun): the completion is lost and the CQ
    /// is unusable; the caller raises `IBV_EVENT_CQ_ERR` and moves the QP to ERR.
    Overrun,
}

/// The completions a CQ holds, in order, bounded by its capacity.
///
/// Overrun follows the man page (and rdmavt): the first completion that does not
/// fit marks the CQ overrun for good; it and every later one is lost
/// (completions.md §7.2).
#[derive(Debug, Clone)]
pub struct CqRing {
    entries: std::collections::VecDeque<crate::wc::WorkCompletion>,
    capacity: usize,
    notify: Notify,
    overrun: bool,
}

impl CqRing {
    /// An empty ring for `capacity` completions.
    pub fn new(capacity: u32) -> CqRing {
        CqRing {
            entries: std::collections::VecDeque::new(),
            capacity: capacity as usize,
            notify: Notify::Disarmed,
            overrun: false,
        }
    }

    /// Adds a completion. `solicited` is true for a receive completion of a
    /// message whose last packet had SE set; unsuccessful completions count as
    /// solicited (man page; completions.md §7.3).
    pub fn push(&mut self, wc: crate::wc::WorkCompletion, solicited: bool) -> Pushed {
        if self.overrun || self.entries.len() >= self.capacity {
            self.overrun = true;
            return Pushed::Overrun;
        }
        let solicited = solicited || wc.status.is_error();
        self.entries.push_back(wc);
        debug_assert!(
            self.entries.len() <= self.capacity,
            "CQ beyond its capacity"
        );
        let event = match self.notify {
            Notify::Next => true,
            Notify::Solicited => solicited,
            Notify::Disarmed => false,
        };
        if event {
            self.notify = Notify::Disarmed;
        }
        Pushed::Stored { event }
    }

    /// `ibv_poll_cq`: moves up to `max` completions, oldest first, into `out`.
    pub fn poll(&mut self, max: usize, out: &mut Vec<crate::wc::WorkCompletion>) -> usize {
        let n = max.min(self.entries.len());
        out.extend(self.entries.drain(..n));
        n
    }

    /// `ibv_req_notify_cq`: arm once. "Next" upgrades an armed "solicited";
    /// "solicited" never downgrades "next" (IBA C11-31/32, completions.md §7.3).
    pub fn req_notify(&mut self, solicited_only: bool) {
        let want = if solicited_only {
            Notify::Solicited
        } else {
            Notify::Next
        };
        self.notify = self.notify.max(want);
    }

    /// Completions waiting to be polled.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if nothing waits.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// True once an overrun happened.
    pub fn is_overrun(&self) -> bool {
        self.overrun
    }

    /// `ibv_resize_cq`: refused (`EINVAL`, rxe `rxe_cq_chk_attr`) below the
    /// completions already queued plus `owed`, those that signaled send WRs
    /// still in flight will add (a CQ shrunk below them would overrun).
    pub fn resize(&mut self, capacity: u32, owed: usize) -> Result<(), Error> {
        let queued = self.entries.len();
        if (capacity as usize) < queued + owed {
            return Err(InvalidArg::CqResizeBelowQueued {
                cqe: capacity,
                queued,
                owed,
            }
            .into());
        }
        self.capacity = capacity as usize;
        Ok(())
    }

    /// Drops the completions of QP `qpn` (its move to RESET); returns how many.
    pub fn purge_qp(&mut self, qpn: u32) -> usize {
        let before = self.entries.len();
        self.entries.retain(|w| w.qp_num != qpn);
        before - self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wc::{WcOpcode, WcStatus, WorkCompletion};

    fn wc(id: u64) -> WorkCompletion {
        WorkCompletion::error(id, 1, WcOpcode::Send, WcStatus::Success)
    }

    #[test]
    fn completions_come_out_in_order_and_overrun_is_final() {
        let mut r = CqRing::new(2);
        assert_eq!(r.push(wc(1), false), Pushed::Stored { event: false });
        assert_eq!(r.push(wc(2), false), Pushed::Stored { event: false });
        assert_eq!(r.push(wc(3), false), Pushed::Overrun);
        let mut out = Vec::new();
        assert_eq!(r.poll(8, &mut out), 2);
        assert_eq!(out.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(
            r.push(wc(4), false),
            Pushed::Overrun,
            "an overrun CQ stays unusable"
        );
        assert!(r.is_overrun());
    }

    #[test]
    fn notification_arms_once_and_respects_solicited() {
        let mut r = CqRing::new(16);
        r.req_notify(true);
        assert_eq!(r.push(wc(1), false), Pushed::Stored { event: false });
        assert_eq!(r.push(wc(2), true), Pushed::Stored { event: true });
        assert_eq!(
            r.push(wc(3), true),
            Pushed::Stored { event: false },
            "disarmed after firing"
        );
        r.req_notify(false);
        r.req_notify(true);
        assert_eq!(
            r.push(wc(4), false),
            Pushed::Stored { event: true },
            "solicited never downgrades next"
        );
        r.req_notify(true);
        let err = WorkCompletion::error(5, 1, WcOpcode::Send, WcStatus::LocProtErr);
        assert_eq!(
            r.push(err, false),
            Pushed::Stored { event: true },
            "errors count as solicited"
        );
        assert!(r.resize(2, 0).is_err());
        assert!(r.resize(5, 1).is_err(), "5 queued + 1 owed do not fit in 5");
        assert!(r.resize(6, 1).is_ok());
    }

    #[test]
    fn purge_drops_one_qps_completions_only() {
        let mut r = CqRing::new(8);
        for (id, qpn) in [(1, 7), (2, 9), (3, 7), (4, 9)] {
            let w = WorkCompletion::error(id, qpn, WcOpcode::Send, WcStatus::WrFlushErr);
            r.push(w, false);
        }
        assert_eq!(r.purge_qp(7), 2);
        let mut out = Vec::new();
        r.poll(8, &mut out);
        assert_eq!(out.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [2, 4]);
    }
}

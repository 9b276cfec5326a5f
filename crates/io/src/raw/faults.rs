//! `SOFTVERBS_FAULTS` for RAW_PACKET frames (spec/raw-packet.md §5).
//!
//! Owns the fault models and the hold queue of a driver's raw frames: the
//! same configuration and the same decisions as for RoCE datagrams (loss,
//! corruption, duplication, reordering, delay; `dir` picks sent, received or
//! both), drawn from generators of their own — seeded as the datagrams' are,
//! so the *n*-th frame sent gets the decision the *n*-th datagram sent would —
//! and counted in the device's `fault_*` counters. A held frame is keyed by
//! the QP whose socket it leaves through (sent) or came in on (received).

use crate::clock::Nanos;
use crate::counters::Counters;
use crate::faults::{flip_bit, FaultModel};
use crate::hold::{Dir, Held, Hold, HoldQueue};
use crate::options::DriverOptions;

/// Longest a reordered frame waits for later ones (beyond the fixed delay),
/// as for datagrams.
const REORDER_MAX_HOLD_NS: u64 = 1_000_000;

/// What the faults made of one frame.
pub(crate) enum Fate {
    /// Dropped, or now held: nothing more to do.
    Gone,
    /// Goes on now (possibly corrupted in place).
    Pass,
}

/// The fault models of a driver's raw frames and the frames they hold.
#[derive(Debug)]
pub(crate) struct RawFaults {
    tx: Option<FaultModel>,
    rx: Option<FaultModel>,
    delay_ns: u64,
    hold: HoldQueue<u32>,
}

impl RawFaults {
    pub(crate) fn new(opts: &DriverOptions) -> RawFaults {
        let c = opts.faults;
        let on = c.is_active();
        RawFaults {
            tx: (on && c.dir.tx()).then(|| c.tx_model()),
            rx: (on && c.dir.rx()).then(|| c.rx_model()),
            delay_ns: c.delay.as_nanos() as u64,
            hold: HoldQueue::new(opts.max_held),
        }
    }

    /// Applies the faults of `dir` to `frame` of QP `qpn`, decided at `now`.
    pub(crate) fn inject(
        &mut self,
        dir: Dir,
        now: Nanos,
        qpn: u32,
        frame: &mut [u8],
        c: &Counters,
    ) -> Fate {
        let model = match dir {
            Dir::Tx => self.tx.as_mut(),
            Dir::Rx => self.rx.as_mut(),
        };
        let Some(d) = model.map(|m| m.decide(frame.len())) else {
            return Fate::Pass;
        };
        if d.drop {
            Counters::add(&c.fault_drops, 1);
            return Fate::Gone;
        }
        if let Some(bit) = d.corrupt_bit {
            Counters::add(&c.fault_corruptions, 1);
            flip_bit(frame, bit);
        }
        let not_before = now + self.delay_ns;
        if d.duplicate {
            // The copy follows the original (same delay, never reordered).
            let copy = Hold {
                not_before,
                after: 0,
                deadline: not_before,
            };
            let counter = if self.hold.push(dir, qpn, frame, copy) {
                &c.fault_duplicates
            } else {
                &c.fault_hold_overflows
            };
            Counters::add(counter, 1);
        }
        let hold = match d.reorder_after {
            Some(after) => Hold {
                not_before,
                after,
                deadline: not_before + REORDER_MAX_HOLD_NS,
            },
            None if self.delay_ns > 0 => Hold {
                not_before,
                after: 0,
                deadline: not_before,
            },
            None => return Fate::Pass,
        };
        if !self.hold.push(dir, qpn, frame, hold) {
            Counters::add(&c.fault_hold_overflows, 1);
            return Fate::Pass;
        }
        let kind = if d.reorder_after.is_some() {
            &c.fault_reorders
        } else {
            &c.fault_delays
        };
        Counters::add(kind, 1);
        Fate::Gone
    }

    /// A frame of `dir` went out (or in): reordered ones count down.
    pub(crate) fn passed(&mut self, dir: Dir) {
        self.hold.passed(dir);
    }

    /// True when no frame is held.
    pub(crate) fn holds_none(&self) -> bool {
        self.hold.is_empty()
    }

    /// The oldest held frame that may go at `now`.
    pub(crate) fn pop_due(&mut self, now: Nanos) -> Option<Held<u32>> {
        self.hold.pop_due(now)
    }

    /// Returns a released frame's buffer for reuse.
    pub(crate) fn recycle(&mut self, held: Held<u32>) {
        self.hold.recycle(held);
    }

    /// When the next held frame becomes due (if any is held).
    pub(crate) fn next_wake(&self) -> Option<Nanos> {
        self.hold.next_wake()
    }
}

//! `SOFTVERBS_FAULTS` on the progress thread's datagrams: the fault models,
//! the decision for each datagram (drop, corrupt, duplicate, delay, reorder)
//! and the release of the datagrams they hold (spec in `crate::faults`).

use std::net::SocketAddr;
use std::time::Duration;

use super::Progress;
use crate::clock::Nanos;
use crate::counters::Counters;
use crate::engine::Engine;
use crate::faults::{flip_bit, Decision, FaultModel};
use crate::hold::{Dir, Held, Hold, HoldQueue};
use crate::options::DriverOptions;
use crate::socket::SendOutcome;

/// Longest a reordered datagram waits for later ones (beyond the fixed delay).
const REORDER_MAX_HOLD: Duration = Duration::from_millis(1);

/// The fault models of a driver and the datagrams they hold.
pub(super) struct Faults {
    tx: Option<FaultModel>,
    rx: Option<FaultModel>,
    pub(super) delay_ns: u64,
    pub(super) hold: HoldQueue,
    /// A held datagram is waiting for room in the socket.
    pub(super) blocked: bool,
    /// Whether corruption is injected on transmit, on receive (shm: a
    /// datagram that may be corrupted is never handed on as intact).
    pub(super) corrupts: (bool, bool),
}

impl Faults {
    pub(super) fn new(opts: &DriverOptions) -> Self {
        let c = opts.faults;
        let on = c.is_active();
        Faults {
            tx: (on && c.dir.tx()).then(|| c.tx_model()),
            rx: (on && c.dir.rx()).then(|| c.rx_model()),
            delay_ns: c.delay.as_nanos() as u64,
            hold: HoldQueue::new(opts.max_held),
            blocked: false,
            corrupts: (
                on && c.dir.tx() && c.corrupt > 0.0,
                on && c.dir.rx() && c.corrupt > 0.0,
            ),
        }
    }

    /// Whether received datagrams meet any fault (then they are changed,
    /// held or dropped here, and need a buffer of their own).
    pub(super) fn on_receive(&self) -> bool {
        self.rx.is_some()
    }

    pub(super) fn decide(&mut self, dir: Dir, len: usize) -> Option<Decision> {
        let model = match dir {
            Dir::Tx => self.tx.as_mut(),
            Dir::Rx => self.rx.as_mut(),
        };
        model.map(|m| m.decide(len))
    }

    /// How long a datagram decided at `now` is held (`None`: not held).
    pub(super) fn hold_for(&self, now: Nanos, d: &Decision) -> Option<Hold> {
        let not_before = now + self.delay_ns;
        match d.reorder_after {
            Some(after) => Some(Hold {
                not_before,
                after,
                deadline: not_before + REORDER_MAX_HOLD.as_nanos() as u64,
            }),
            None if self.delay_ns > 0 => Some(Hold {
                not_before,
                after: 0,
                deadline: not_before,
            }),
            None => None,
        }
    }
}

/// What the faults made of one datagram.
pub(super) enum Fate {
    /// Dropped, or now held: nothing more to do.
    Gone,
    /// Goes on now (possibly corrupted in place).
    Pass,
}

impl<E: Engine> Progress<E> {
    /// Applies the faults of `dir` to `bytes` (to or from `peer`).
    pub(super) fn inject(
        &mut self,
        dir: Dir,
        now: Nanos,
        peer: SocketAddr,
        bytes: &mut [u8],
    ) -> Fate {
        let Some(d) = self.faults.decide(dir, bytes.len()) else {
            return Fate::Pass;
        };
        let c = &self.shared.counters;
        if d.drop {
            Counters::add(&c.fault_drops, 1);
            return Fate::Gone;
        }
        if let Some(bit) = d.corrupt_bit {
            Counters::add(&c.fault_corruptions, 1);
            flip_bit(bytes, bit);
        }
        let hold = self.faults.hold_for(now, &d);
        if d.duplicate {
            // The copy follows the original (same delay, never reordered).
            let at = now + self.faults.delay_ns;
            let copy = Hold {
                not_before: at,
                after: 0,
                deadline: at,
            };
            if self.faults.hold.push(dir, peer, bytes, copy) {
                Counters::add(&c.fault_duplicates, 1);
            } else {
                Counters::add(&c.fault_hold_overflows, 1);
            }
        }
        let Some(hold) = hold else {
            return Fate::Pass;
        };
        if !self.faults.hold.push(dir, peer, bytes, hold) {
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

    /// Sends or delivers the held datagrams that are due (at most `batch`).
    pub(super) fn release(&mut self) -> bool {
        let mut work = false;
        self.faults.blocked = false;
        if self.faults.hold.is_empty() {
            return false;
        }
        for _ in 0..self.batch {
            let now = self.shared.clock.now();
            let Some(mut held) = self.faults.hold.pop_due(now) else {
                break;
            };
            work = true;
            match held.dir {
                Dir::Rx => self.deliver_datagram(now, held.peer, &held.bytes),
                Dir::Tx => {
                    if !self.release_tx(now, &mut held) {
                        self.faults.hold.unpop(held);
                        self.faults.blocked = true;
                        break;
                    }
                }
            }
            self.faults.hold.recycle(held);
        }
        work
    }

    /// A held datagram leaves; `false` if the socket is full (keep it).
    fn release_tx(&mut self, now: Nanos, held: &mut Held) -> bool {
        let out = self.wire_out(now, held.peer, &mut held.bytes);
        !matches!(out, SendOutcome::Retry)
    }
}

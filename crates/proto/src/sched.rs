//! The engine's scheduler: which QP sends next and which QP's timer is due
//! next, without looking at the QPs that have nothing to do.
//!
//! - the ready queues: `crate::lock::Queue`s of QPs that may have a packet
//!   to send, one per lane (crate `lanes`); a QP is in one at most once
//!   (the engine keeps an "in a queue" flag beside it), the queue of its
//!   home lane ([`TxClaims::reach`] says why).
//! - [`TxClaims`]: the QPs one transmitting thread keeps until its batch
//!   left (their packets must not be overtaken by another thread's).
//! - [`TimerHeap`]: one deadline per QP (the earlier of its local ACK timer
//!   and RNR wait), in an indexed binary min-heap ordered by (deadline, slot):
//!   the next deadline is read in O(1); setting, moving or removing a QP's
//!   deadline costs O(log n); nothing is stale, so `poll_timeout` is exact.
//!
//! Neither allocates once it has grown to the number of QPs. Sits on
//! [`crate::handle`] only.

use crate::handle::QpHandle;

const NOT_IN_HEAP: usize = usize::MAX;

/// One deadline per QP, earliest first.
#[derive(Debug, Default)]
pub struct TimerHeap {
    /// (deadline, QP), a binary min-heap on (deadline, slot index).
    heap: Vec<(u64, QpHandle)>,
    /// Position in `heap` of each QP slot's entry, or `NOT_IN_HEAP`.
    pos: Vec<usize>,
}

impl TimerHeap {
    /// The earliest deadline and its QP.
    pub fn peek(&self) -> Option<(u64, QpHandle)> {
        self.heap.first().copied()
    }

    /// The earliest deadline; `u64::MAX` when no QP has one.
    pub fn first(&self) -> u64 {
        self.heap.first().map_or(u64::MAX, |&(d, _)| d)
    }

    /// Number of QPs with a deadline.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when no QP has a deadline.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Sets (`Some`) or clears (`None`) QP `h`'s deadline.
    pub fn set(&mut self, h: QpHandle, deadline: Option<u64>) {
        let slot = h.index() as usize;
        if slot >= self.pos.len() {
            if deadline.is_none() {
                return;
            }
            self.pos.resize(slot + 1, NOT_IN_HEAP);
        }
        let at = self.pos[slot];
        match (deadline, at) {
            (None, NOT_IN_HEAP) => {}
            (None, i) => self.remove_at(i),
            (Some(d), NOT_IN_HEAP) => {
                self.heap.push((d, h));
                let i = self.heap.len() - 1;
                self.pos[slot] = i;
                self.sift_up(i);
            }
            // Most calls leave a QP's deadline as it was.
            (Some(d), i) if self.heap[i].0 == d => return,
            (Some(d), i) => {
                self.heap[i] = (d, h);
                let i = self.sift_up(i);
                self.sift_down(i);
            }
        }
        self.check();
    }

    /// Removes every entry due at `now` (deadline `<= now`), appending its QP to `out`.
    pub fn pop_due(&mut self, now: u64, out: &mut Vec<QpHandle>) {
        while let Some(&(d, h)) = self.heap.first() {
            if d > now {
                break;
            }
            self.remove_at(0);
            out.push(h);
        }
        self.check();
    }

    fn key(&self, i: usize) -> (u64, u32) {
        let (d, h) = self.heap[i];
        (d, h.index())
    }

    fn remove_at(&mut self, i: usize) {
        let last = self.heap.len() - 1;
        self.swap(i, last);
        let (_, h) = self.heap.pop().expect("non-empty");
        self.pos[h.index() as usize] = NOT_IN_HEAP;
        if i < self.heap.len() {
            let i = self.sift_up(i);
            self.sift_down(i);
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.pos[self.heap[a].1.index() as usize] = a;
        self.pos[self.heap[b].1.index() as usize] = b;
    }

    fn sift_up(&mut self, mut i: usize) -> usize {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.key(parent) <= self.key(i) {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
        i
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut min = i;
            if l < self.heap.len() && self.key(l) < self.key(min) {
                min = l;
            }
            if r < self.heap.len() && self.key(r) < self.key(min) {
                min = r;
            }
            if min == i {
                return;
            }
            self.swap(i, min);
            i = min;
        }
    }

    /// Debug builds: the heap order holds and every position is right.
    fn check(&self) {
        if cfg!(debug_assertions) && self.heap.len() <= 64 {
            for (i, (_, h)) in self.heap.iter().enumerate() {
                debug_assert_eq!(self.pos[h.index() as usize], i, "timer heap position");
                if i > 0 {
                    debug_assert!(self.key((i - 1) / 2) <= self.key(i), "timer heap order");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(i: u32) -> QpHandle {
        QpHandle::from_raw(u64::from(i) | 1 << 32)
    }

    #[test]
    fn timer_heap_matches_a_model() {
        // A seeded walk of set/clear/pop against a plain map.
        let mut heap = TimerHeap::default();
        let mut model: std::collections::BTreeMap<u32, u64> = Default::default();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for step in 0..5000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let slot = (x % 37) as u32;
            let d = (x >> 8) % 1000;
            let op = (x >> 20) % 10;
            if op < 2 {
                heap.set(h(slot), None);
                model.remove(&slot);
            } else if op < 4 {
                let now = step % 1000;
                let mut out = Vec::new();
                heap.pop_due(now, &mut out);
                let mut want: Vec<u32> = model
                    .iter()
                    .filter(|(_, &t)| t <= now)
                    .map(|(&s, _)| s)
                    .collect();
                model.retain(|_, t| *t > now);
                let mut got: Vec<u32> = out.iter().map(|q| q.index()).collect();
                got.sort_unstable();
                want.sort_unstable();
                assert_eq!(got, want, "step {step}");
            } else {
                heap.set(h(slot), Some(d));
                model.insert(slot, d);
            }
            let min = model.iter().map(|(&s, &t)| (t, s)).min();
            assert_eq!(heap.peek().map(|(t, q)| (t, q.index())), min, "step {step}");
            assert_eq!(
                heap.first(),
                min.map_or(u64::MAX, |(t, _)| t),
                "step {step}"
            );
            assert_eq!(heap.len(), model.len());
        }
    }
}

/// The QPs one transmitting thread gave turns to since it last put its
/// datagrams on the wire. A QP's packets must leave in the order the QP made
/// them, so while one may sit in this thread's batch no other thread gives
/// the QP a turn: it stays with this thread (`Engine::poll_transmit_claimed`)
/// until the thread lets it go (`Engine::release_claims`), after the
/// batch left. Several threads may so transmit at once, each with its QPs.
#[derive(Debug, Default)]
pub struct TxClaims {
    /// The QPs, and whether their last turn sent (only those get another
    /// before the release: what wakes one meanwhile waits for it).
    pub(crate) qps: Vec<(QpHandle, bool)>,
    /// The CM's MADs (they too must leave in order).
    pub(crate) gsi: bool,
    /// Where the round robin among them goes on.
    pub(crate) next: usize,
    /// Which lanes' QPs the thread takes (set before each batch; every
    /// lane unless told). A QP's home is the lane of the thread that last
    /// posted to it (else of the thread whose call last made it ready):
    /// it waits in that lane's ready queue and posted list, so a thread
    /// that transmits its own lane's works the QPs it posted to, on its
    /// own core; the progress thread reaches every lane, and a driver lets
    /// an application thread reach a lane whose threads went quiet.
    pub reach: lanes::LaneSet,
}

impl TxClaims {
    /// Nothing claimed.
    pub fn is_empty(&self) -> bool {
        self.qps.is_empty() && !self.gsi
    }
}

//! The hold queue: datagrams that fault injection delays or reorders.
//!
//! Owns held copies of datagrams (sent or received), each with the earliest
//! time it may go (`not_before`) and, for a reordered one, how many later
//! datagrams of its direction must pass first (or its `deadline`, whichever
//! comes first). Promise: bounded — at most `capacity` datagrams; a full queue
//! refuses (the caller lets the datagram through unheld and counts it).
//! Buffers are recycled, so a steady state allocates nothing. The key that
//! says where a held item goes is a socket address for RoCE datagrams and a
//! QP number for RAW_PACKET frames (`crate::raw`).

use std::collections::VecDeque;
use std::net::SocketAddr;

use crate::clock::Nanos;

/// Direction of a held datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dir {
    /// Leaving the device: goes to the socket (or the loopback shortcut).
    Tx,
    /// Arrived: goes to the engine.
    Rx,
}

/// One held datagram.
#[derive(Debug)]
pub(crate) struct Held<K = SocketAddr> {
    pub(crate) dir: Dir,
    /// Tx: the destination. Rx: the sender. (Raw frames: the QP.)
    pub(crate) peer: K,
    pub(crate) bytes: Vec<u8>,
    not_before: Nanos,
    /// Later datagrams of `dir` that must pass before this one (0: none).
    after: u8,
    /// Released at this time even if fewer datagrams passed.
    deadline: Nanos,
}

impl<K> Held<K> {
    fn due(&self, now: Nanos) -> bool {
        now >= self.not_before && (self.after == 0 || now >= self.deadline)
    }

    fn wake_at(&self) -> Nanos {
        if self.after == 0 {
            self.not_before
        } else {
            self.deadline.max(self.not_before)
        }
    }
}

/// How long a datagram is held for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Hold {
    /// Earliest release.
    pub(crate) not_before: Nanos,
    /// Later datagrams of the direction to let pass first (0: none).
    pub(crate) after: u8,
    /// Latest release when `after > 0`.
    pub(crate) deadline: Nanos,
}

/// Datagrams held back by fault injection. See the module doc.
#[derive(Debug)]
pub(crate) struct HoldQueue<K = SocketAddr> {
    items: VecDeque<Held<K>>,
    free: Vec<Vec<u8>>,
    capacity: usize,
}

/// Spare buffers kept for reuse.
const MAX_FREE: usize = 256;

impl<K> HoldQueue<K> {
    pub(crate) fn new(capacity: usize) -> Self {
        HoldQueue {
            items: VecDeque::new(),
            free: Vec::new(),
            capacity,
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// True when nothing is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Holds a copy of `bytes`; `false` (nothing held) when full.
    pub(crate) fn push(&mut self, dir: Dir, peer: K, bytes: &[u8], hold: Hold) -> bool {
        if self.items.len() >= self.capacity {
            return false;
        }
        let mut buf = self.free.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(bytes);
        self.items.push_back(Held {
            dir,
            peer,
            bytes: buf,
            not_before: hold.not_before,
            after: hold.after,
            deadline: hold.deadline,
        });
        true
    }

    /// A datagram of `dir` went out (or in): reordered ones waiting on it count down.
    pub(crate) fn passed(&mut self, dir: Dir) {
        for h in self
            .items
            .iter_mut()
            .filter(|h| h.dir == dir && h.after > 0)
        {
            h.after -= 1;
        }
    }

    /// The oldest datagram that may go at `now`.
    pub(crate) fn pop_due(&mut self, now: Nanos) -> Option<Held<K>> {
        let i = self.items.iter().position(|h| h.due(now))?;
        self.items.remove(i)
    }

    /// Puts back a datagram that could not go yet (socket full); it stays first.
    pub(crate) fn unpop(&mut self, held: Held<K>) {
        self.items.push_front(held);
    }

    /// Returns a released datagram's buffer for reuse.
    pub(crate) fn recycle(&mut self, held: Held<K>) {
        if self.free.len() < MAX_FREE {
            self.free.push(held.bytes);
        }
    }

    /// When the next held datagram becomes due (if any is held).
    pub(crate) fn next_wake(&self) -> Option<Nanos> {
        self.items.iter().map(Held::wake_at).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr() -> SocketAddr {
        "127.0.0.1:4791".parse().unwrap()
    }

    fn delay(t: Nanos) -> Hold {
        Hold {
            not_before: t,
            after: 0,
            deadline: t,
        }
    }

    #[test]
    fn delayed_datagrams_leave_in_time_order() {
        let mut q = HoldQueue::new(8);
        assert!(q.push(Dir::Tx, addr(), b"a", delay(100)));
        assert!(q.push(Dir::Rx, addr(), b"b", delay(50)));
        assert_eq!(q.next_wake(), Some(50));
        assert!(q.pop_due(49).is_none());
        let b = q.pop_due(50).unwrap();
        assert_eq!((b.dir, &b.bytes[..]), (Dir::Rx, &b"b"[..]));
        q.recycle(b);
        assert!(q.pop_due(99).is_none());
        assert_eq!(&q.pop_due(100).unwrap().bytes[..], b"a");
        assert_eq!(q.next_wake(), None);
    }

    #[test]
    fn reordered_datagram_waits_for_later_ones_or_its_deadline() {
        let mut q = HoldQueue::new(8);
        let reorder = Hold {
            not_before: 0,
            after: 2,
            deadline: 1000,
        };
        assert!(q.push(Dir::Tx, addr(), b"r", reorder));
        assert!(q.pop_due(10).is_none());
        q.passed(Dir::Rx); // the other direction does not count
        q.passed(Dir::Tx);
        assert!(q.pop_due(10).is_none());
        q.passed(Dir::Tx);
        assert_eq!(&q.pop_due(10).unwrap().bytes[..], b"r");
        assert!(q.push(Dir::Tx, addr(), b"s", reorder));
        assert_eq!(q.next_wake(), Some(1000));
        assert!(q.pop_due(999).is_none());
        assert!(q.pop_due(1000).is_some());
    }

    #[test]
    fn bounded_and_unpop_keeps_first_place() {
        let mut q = HoldQueue::new(2);
        assert!(q.push(Dir::Tx, addr(), b"1", delay(0)));
        assert!(q.push(Dir::Tx, addr(), b"2", delay(0)));
        assert!(!q.push(Dir::Tx, addr(), b"3", delay(0)));
        assert_eq!(q.len(), 2);
        let first = q.pop_due(0).unwrap();
        q.unpop(first);
        assert_eq!(&q.pop_due(0).unwrap().bytes[..], b"1");
    }
}

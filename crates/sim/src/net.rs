//! The virtual network: every datagram between two devices travels a link with
//! seeded faults — loss, duplication, reordering, delay with jitter, bit
//! corruption — and partitions (time windows in which nothing gets through).
//!
//! Faults are decided when a datagram is sent, by the fault model the real
//! path uses too (crates/faults: loss, corruption, duplication, reordering);
//! the datagram (and any duplicate) is then queued for delivery at a virtual
//! time, with the link's delay and jitter and, when reordered, an extra delay.
//! Deliveries at the same time keep their sending order, so a seed replays
//! exactly.

use crate::rng::Rng;
use faults::{flip_bit, FaultModel, Odds};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Fault settings of the links (all links alike).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Faults {
    /// Probability that a datagram is lost.
    pub loss: f64,
    /// Probability that a datagram is delivered twice.
    pub dup: f64,
    /// Probability that a datagram is held back by up to `reorder_ns` extra.
    pub reorder: f64,
    /// Probability that one bit of a datagram is flipped.
    pub corrupt: f64,
    /// One-way delay in nanoseconds.
    pub delay_ns: u64,
    /// Extra delay, uniform in `0..=jitter_ns`.
    pub jitter_ns: u64,
    /// Maximum extra delay of a reordered datagram.
    pub reorder_ns: u64,
}

impl Faults {
    /// A perfect network with `delay_ns` latency.
    pub const fn clean(delay_ns: u64) -> Faults {
        Faults {
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            delay_ns,
            jitter_ns: 0,
            reorder_ns: 0,
        }
    }

    /// The per-datagram odds the fault model draws with.
    pub fn odds(&self) -> Odds {
        Odds::new(self.loss, self.dup, self.reorder, self.corrupt)
    }
}

/// What the network did, for checks and the summary line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Datagrams handed to the network.
    pub sent: u64,
    /// Datagrams delivered to a device (duplicates counted).
    pub delivered: u64,
    /// Lost to random loss.
    pub lost: u64,
    /// Lost to a partition.
    pub partitioned: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
    /// Held back (reordered).
    pub reordered: u64,
    /// Delivered with a flipped bit (never in the ICRC-masked byte: the ICRC
    /// covers every one, and a duplicate of a corrupted datagram counts again).
    pub corrupted: u64,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Queued {
    at_ns: u64,
    seq: u64,
    from: usize,
    to: usize,
    bytes: Vec<u8>,
}

/// A datagram arriving now.
#[derive(Debug)]
pub struct Arrival {
    /// Sending device.
    pub from: usize,
    /// Receiving device.
    pub to: usize,
    /// The UDP payload.
    pub bytes: Vec<u8>,
}

/// The links between all devices.
#[derive(Debug)]
pub struct Network {
    /// Current fault settings (the heal phase sets them clean).
    pub faults: Faults,
    /// Partitions: `[from_ns, until_ns)` windows in which every datagram sent is lost.
    pub partitions: Vec<(u64, u64)>,
    /// Timing draws (jitter, reorder delay).
    rng: Rng,
    /// The fault decisions.
    model: FaultModel,
    queue: BinaryHeap<Reverse<Queued>>,
    seq: u64,
    /// Per (from, to): the latest in-order arrival time, so jitter alone
    /// never reorders a link (only `reorder` does).
    fifo: std::collections::HashMap<(usize, usize), u64>,
    /// Statistics.
    pub stats: NetStats,
}

impl Network {
    /// A network with `faults`, drawing from `rng`.
    pub fn new(faults: Faults, mut rng: Rng) -> Network {
        let model = FaultModel::new(faults.odds(), rng.fork());
        Network {
            faults,
            partitions: Vec::new(),
            rng,
            model,
            queue: BinaryHeap::new(),
            seq: 0,
            fifo: Default::default(),
            stats: NetStats::default(),
        }
    }

    /// Is the network cut at `now`?
    pub fn partitioned(&self, now: u64) -> bool {
        self.partitions.iter().any(|&(a, b)| a <= now && now < b)
    }

    /// Sends a datagram at `now`; the faults decide what arrives when.
    pub fn send(&mut self, now: u64, from: usize, to: usize, bytes: &[u8]) {
        self.stats.sent += 1;
        if self.partitioned(now) {
            self.stats.partitioned += 1;
            return;
        }
        let f = self.faults;
        self.model.set_odds(f.odds());
        let d = self.model.decide(bytes.len());
        if d.drop {
            self.stats.lost += 1;
            return;
        }
        let mut b = bytes.to_vec();
        if let Some(bit) = d.corrupt_bit {
            flip_bit(&mut b, bit);
        }
        let copies = if d.duplicate { 2 } else { 1 };
        self.stats.duplicated += copies - 1;
        for copy in 0..copies {
            let mut at = now + f.delay_ns + self.rng.range(0, f.jitter_ns);
            // As on the real path, the copy follows the original and is never
            // itself reordered.
            if copy == 0 && d.reorder_after.is_some() {
                self.stats.reordered += 1;
                at += self.rng.range(1, f.reorder_ns.max(1));
            } else {
                let last = self.fifo.entry((from, to)).or_insert(0);
                at = at.max(*last);
                *last = at;
            }
            self.stats.corrupted += u64::from(d.corrupt_bit.is_some());
            self.seq += 1;
            self.queue.push(Reverse(Queued {
                at_ns: at,
                seq: self.seq,
                from,
                to,
                bytes: b.clone(),
            }));
        }
    }

    /// When the next datagram arrives.
    pub fn next_arrival(&self) -> Option<u64> {
        self.queue.peek().map(|r| r.0.at_ns)
    }

    /// The next datagram due at or before `now`.
    pub fn pop_due(&mut self, now: u64) -> Option<Arrival> {
        if self.next_arrival()? > now {
            return None;
        }
        let Reverse(q) = self.queue.pop()?;
        self.stats.delivered += 1;
        Some(Arrival {
            from: q.from,
            to: q.to,
            bytes: q.bytes,
        })
    }

    /// Datagrams still travelling.
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_are_applied_and_counted() {
        let f = Faults {
            loss: 0.1,
            dup: 0.1,
            reorder: 0.1,
            corrupt: 0.1,
            delay_ns: 1000,
            jitter_ns: 100,
            reorder_ns: 5000,
        };
        let mut n = Network::new(f, Rng::new(3));
        for i in 0..1000u64 {
            n.send(i, 0, 1, &[i as u8; 64]);
        }
        n.partitions.push((2000, 3000));
        n.send(2500, 0, 1, &[0; 8]);
        let s = n.stats;
        assert_eq!(s.partitioned, 1);
        assert!((50..150).contains(&s.lost), "{s:?}");
        assert!(
            s.duplicated > 50 && s.reordered > 50 && s.corrupted > 50,
            "{s:?}"
        );
        assert_eq!(n.in_flight() as u64, 1000 - s.lost + s.duplicated);
        assert!(n.pop_due(999).is_none(), "nothing before the link delay");
        let queued = n.in_flight() as u64;
        let mut last = 0;
        let mut got = 0;
        while let Some(t) = n.next_arrival() {
            assert!(t >= last);
            last = t;
            got += u64::from(n.pop_due(t).is_some());
        }
        assert_eq!((got, n.stats.delivered), (queued, queued));
    }
}

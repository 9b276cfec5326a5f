//! The transmit batch: datagrams collected from the engine, sent with few system calls.
//!
//! [`TxBatch`] owns `slots` buffers of `slot` bytes each (one allocation) and a
//! queue of datagrams written into them, in engine order, each already through
//! the transmit faults. [`flush`] sends the queue from its head: consecutive
//! datagrams for the socket go out in one `sendmmsg(2)` per run (the sink may
//! join equal-size ones into UDP GSO sends, [`gso_groups`]), a datagram to the
//! driver's own address takes the loopback shortcut at its place in the order.
//! Promises:
//! - every queued datagram is sent, delivered by loopback, or failed for good
//!   (counted), exactly once and in order; a partial send resends the rest;
//! - a send refused for lack of room (EAGAIN, ENOBUFS) stops the flush and keeps
//!   that datagram and all after it queued (back-pressure, never a silent drop);
//! - each run of a flush makes progress (at least one datagram leaves the queue)
//!   or stops, so a flush is bounded by the queue length.

use std::io;
use std::net::SocketAddr;

use crate::socket::is_retryable;
use crate::sys::MMSG_MAX;

/// One queued datagram: `len` bytes at the start of slot `slot`, to `to`;
/// a run's segments if it is one (`crate::Transmit::segments`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Item {
    pub(crate) slot: usize,
    pub(crate) to: SocketAddr,
    pub(crate) len: usize,
    pub(crate) segments: Option<[u8; 3]>,
}

impl Item {
    /// The engine's datagram `t`, written into slot `slot`.
    pub(crate) fn of(slot: usize, t: &crate::engine::Transmit) -> Item {
        Item {
            slot,
            to: t.to,
            len: t.len,
            segments: t.segments,
        }
    }
}

/// The most packets of one QP a transmit turn takes into a batch
/// ([`crate::Engine::poll_transmit_burst`]): a GSO send's worth, so that
/// the QPs of a busy batch still take turns.
pub(crate) const BURST: usize = 16;

/// A batch's free slots from `next` up to `end`, filled by the engine in
/// order ([`crate::Burst`]); each datagram built goes to `built` with its
/// slot (which queues it, or keeps it for the transmit faults first).
pub(crate) struct Fill<'a, F: FnMut(&mut TxBatch, usize, &crate::engine::Transmit)> {
    pub(crate) q: &'a mut TxBatch,
    pub(crate) next: usize,
    pub(crate) end: usize,
    pub(crate) built: F,
}

impl<F: FnMut(&mut TxBatch, usize, &crate::engine::Transmit)> crate::Burst for Fill<'_, F> {
    fn buffer(&mut self) -> Option<&mut [u8]> {
        (self.next < self.end).then(|| self.q.slot_mut(self.next))
    }

    fn built(&mut self, t: &crate::engine::Transmit) {
        (self.built)(self.q, self.next, t);
        self.next += 1;
    }
}

/// Where slot 0 starts in the batch's memory. A large allocation comes from
/// mmap, 16 bytes past a page start (glibc's chunk header), so slot 0 starts
/// at the middle of a page, and so does every slot when slots are a multiple
/// of 4 KiB (64 KiB by default): the payload the engine copies into a slot
/// from registered memory, a header (12–40 bytes) after its start, lands
/// about half a page away from a page-aligned source. With slots at page
/// start + 16, the destination was 28–56 bytes past the source modulo 4 KiB,
/// and every load of the copy waited on a 4 KiB-aliased store before it:
/// the sending thread's memmove took about 6× the samples of the two copies
/// it replaced (perftest `ib_write_bw` 64 KiB on this machine's EPYC).
const SLOT0: usize = 2048 - 16;

/// Slots and the queue of datagrams in them. See the module doc.
#[derive(Debug, Default)]
pub(crate) struct TxBatch {
    mem: Vec<u8>,
    slot: usize,
    slots: usize,
    items: Vec<Item>,
    /// `items[..head]` have left.
    head: usize,
}

impl TxBatch {
    /// `slots` buffers of `slot` bytes (both at least 1).
    pub(crate) fn new(slots: usize, slot: usize) -> Self {
        let (slots, slot) = (slots.max(1), slot.max(1));
        TxBatch {
            // One zeroed allocation: large ones come straight from mmap, so pages
            // a short datagram never touches cost no memory.
            mem: vec![0; SLOT0 + slots * slot],
            slot,
            slots,
            items: Vec::with_capacity(slots),
            head: 0,
        }
    }

    /// How many slots there are.
    pub(crate) fn slots(&self) -> usize {
        self.slots
    }

    /// Whether nothing is waiting to be sent.
    pub(crate) fn is_empty(&self) -> bool {
        self.head == self.items.len()
    }

    /// Forgets everything (all slots free again). Only when empty: a queued
    /// datagram is never dropped here.
    pub(crate) fn reset(&mut self) {
        debug_assert!(self.is_empty());
        self.items.clear();
        self.head = 0;
    }

    /// Slot `i`, to be written.
    pub(crate) fn slot_mut(&mut self, i: usize) -> &mut [u8] {
        let s = self.slot;
        &mut self.mem[SLOT0 + i * s..SLOT0 + (i + 1) * s]
    }

    /// Queues the datagram in slot `item.slot` (behind everything queued).
    pub(crate) fn push(&mut self, item: Item) {
        debug_assert!(item.slot < self.slots && item.len <= self.slot);
        self.items.push(item);
    }

    /// The datagrams still queued, in order.
    #[cfg(test)]
    pub(crate) fn queued(&self) -> &[Item] {
        &self.items[self.head..]
    }

    fn bytes(&self, item: &Item) -> &[u8] {
        &self.mem[SLOT0 + item.slot * self.slot..][..item.len]
    }
}

/// Where [`flush`] sends datagrams and reports what became of them.
pub(crate) trait TxSink {
    /// Whether the datagram `bytes` to `to` takes the loopback shortcut instead of the socket.
    fn is_local(&self, to: SocketAddr, bytes: &[u8]) -> bool;
    /// Sends a run of datagrams for the socket in one call: `Ok(n)`, the first `n` left
    /// (`n >= 1`); `Err`, the first did not. `segments[i]`: datagram `i`'s
    /// as a run of packets, if it is one (only a same-host ring carries
    /// those whole; on a socket the peer drops it, as a lost datagram).
    fn send(
        &mut self,
        run: &[(SocketAddr, &[u8])],
        segments: &[Option<[u8; 3]>],
    ) -> io::Result<usize>;
    /// A datagram left through the socket.
    fn sent(&mut self, to: SocketAddr, bytes: &[u8]);
    /// A datagram for our own address: deliver it.
    fn loopback(&mut self, to: SocketAddr, bytes: &mut [u8]);
    /// A datagram failed for good and is dropped.
    fn failed(&mut self, to: SocketAddr, len: usize, error: io::Error);
    /// The socket had no room; the queue waits.
    fn blocked(&mut self);
}

/// What a [`flush`] achieved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Flushed {
    /// Datagrams that left the queue (sent, looped back or failed).
    pub(crate) done: usize,
    /// The socket had no room: datagrams are still queued.
    pub(crate) blocked: bool,
}

/// Sends the queue of `batch` through `sink`. See the module doc.
pub(crate) fn flush(batch: &mut TxBatch, sink: &mut impl TxSink) -> Flushed {
    let mut done = 0;
    while batch.head < batch.items.len() {
        let first = batch.items[batch.head];
        if sink.is_local(first.to, batch.bytes(&first)) {
            let s = batch.slot;
            sink.loopback(
                first.to,
                &mut batch.mem[SLOT0 + first.slot * s..][..first.len],
            );
            batch.head += 1;
            done += 1;
            continue;
        }
        let run: Vec<(SocketAddr, &[u8])> = batch.items[batch.head..]
            .iter()
            .take_while(|it| !sink.is_local(it.to, batch.bytes(it)))
            .take(MMSG_MAX)
            .map(|it| (it.to, batch.bytes(it)))
            .collect();
        let segments: Vec<_> = batch.items[batch.head..][..run.len()]
            .iter()
            .map(|it| it.segments)
            .collect();
        let result = sink.send(&run, &segments);
        let run_len = run.len();
        drop(run);
        match result {
            Ok(n) if n > 0 => {
                let n = n.min(run_len);
                for it in &batch.items[batch.head..batch.head + n] {
                    sink.sent(it.to, batch.bytes(it));
                }
                batch.head += n;
                done += n;
            }
            Ok(_) => {
                sink.blocked();
                return Flushed {
                    done,
                    blocked: true,
                };
            }
            Err(e) if is_retryable(&e) => {
                sink.blocked();
                return Flushed {
                    done,
                    blocked: true,
                };
            }
            Err(e) => {
                sink.failed(first.to, first.len, e);
                batch.head += 1;
                done += 1;
            }
        }
    }
    Flushed {
        done,
        blocked: false,
    }
}

/// Most datagrams in one UDP GSO send (the kernel's `UDP_MAX_SEGMENTS`, 64 on
/// every kernel with GSO; 128 from 6.x).
pub(crate) const GSO_MAX_SEGMENTS: usize = 64;
/// Most payload bytes of one UDP GSO send: an IPv4/IPv6 datagram's 65,535-byte
/// length less the largest IP header and the UDP header, rounded down.
pub(crate) const GSO_MAX_BYTES: usize = 65_000;

/// Cuts a run of datagrams (destination, length) into UDP GSO groups, in order:
/// the length of each group. A group is consecutive datagrams to one destination
/// with the first one's length, except the last, which may be shorter (and so
/// ends it), at most [`GSO_MAX_SEGMENTS`] datagrams and [`GSO_MAX_BYTES`] bytes;
/// a datagram to a destination `eligible` refuses, or an empty one, is a group
/// of its own.
pub(crate) fn gso_groups(
    run: &[(SocketAddr, usize)],
    eligible: impl Fn(SocketAddr) -> bool,
    out: &mut Vec<usize>,
) {
    out.clear();
    let mut i = 0;
    while i < run.len() {
        let (to, size) = run[i];
        let mut n = 1;
        let mut bytes = size;
        if size > 0 && eligible(to) {
            while let Some(&(t, len)) = run.get(i + n) {
                if t != to
                    || len > size
                    || len == 0
                    || n == GSO_MAX_SEGMENTS
                    || bytes + len > GSO_MAX_BYTES
                {
                    break;
                }
                n += 1;
                bytes += len;
                if len < size {
                    break;
                }
            }
        }
        out.push(n);
        i += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    const LOCAL: &str = "127.0.0.1:4791";

    /// A sink with scripted send results; records what became of each datagram.
    #[derive(Default)]
    struct FakeSink {
        /// Results of the next send calls: `Ok(n)` takes `min(n, run)` datagrams.
        script: VecDeque<io::Result<usize>>,
        runs: Vec<usize>,
        sent: Vec<Vec<u8>>,
        looped: Vec<Vec<u8>>,
        failed: Vec<usize>,
        blocked: usize,
    }

    impl TxSink for FakeSink {
        fn is_local(&self, to: SocketAddr, _bytes: &[u8]) -> bool {
            to == LOCAL.parse().unwrap()
        }
        fn send(
            &mut self,
            run: &[(SocketAddr, &[u8])],
            _: &[Option<[u8; 3]>],
        ) -> io::Result<usize> {
            self.runs.push(run.len());
            self.script
                .pop_front()
                .unwrap_or(Ok(usize::MAX))
                .map(|n| n.min(run.len()))
        }
        fn sent(&mut self, _to: SocketAddr, bytes: &[u8]) {
            self.sent.push(bytes.to_vec());
        }
        fn loopback(&mut self, _to: SocketAddr, bytes: &mut [u8]) {
            self.looped.push(bytes.to_vec());
        }
        fn failed(&mut self, _to: SocketAddr, len: usize, _error: io::Error) {
            self.failed.push(len);
        }
        fn blocked(&mut self) {
            self.blocked += 1;
        }
    }

    /// A batch with datagram `i` = `[i; i + 1]` to `peer(i)`.
    fn batch_of(n: usize, peer: impl Fn(usize) -> &'static str) -> TxBatch {
        let mut b = TxBatch::new(n, 256);
        for i in 0..n {
            b.slot_mut(i)[..=i].fill(i as u8);
            b.push(Item {
                slot: i,
                to: peer(i).parse().unwrap(),
                len: i + 1,
                segments: None,
            });
        }
        b
    }

    fn datagram(i: usize) -> Vec<u8> {
        vec![i as u8; i + 1]
    }

    #[test]
    fn one_call_sends_a_whole_run_in_order() {
        let mut b = batch_of(10, |_| "127.0.0.2:4791");
        let mut sink = FakeSink::default();
        let f = flush(&mut b, &mut sink);
        assert_eq!(
            f,
            Flushed {
                done: 10,
                blocked: false
            }
        );
        assert_eq!(sink.runs, vec![10]);
        assert_eq!(sink.sent, (0..10).map(datagram).collect::<Vec<_>>());
        assert!(b.is_empty());
    }

    #[test]
    fn a_partial_send_resends_the_rest() {
        let mut b = batch_of(10, |_| "127.0.0.2:4791");
        let mut sink = FakeSink {
            script: [Ok(3), Ok(4)].into(),
            ..FakeSink::default()
        };
        let f = flush(&mut b, &mut sink);
        assert_eq!(
            f,
            Flushed {
                done: 10,
                blocked: false
            }
        );
        assert_eq!(sink.runs, vec![10, 7, 3]);
        assert_eq!(sink.sent, (0..10).map(datagram).collect::<Vec<_>>());
    }

    #[test]
    fn no_room_keeps_the_rest_queued_until_the_next_flush() {
        let mut b = batch_of(6, |_| "127.0.0.2:4791");
        let eagain = || Err(io::Error::from(io::ErrorKind::WouldBlock));
        let enobufs = || Err(io::Error::from_raw_os_error(libc::ENOBUFS));
        let mut sink = FakeSink {
            script: [Ok(2), eagain(), enobufs()].into(),
            ..FakeSink::default()
        };
        assert_eq!(
            flush(&mut b, &mut sink),
            Flushed {
                done: 2,
                blocked: true
            }
        );
        assert_eq!(b.queued().len(), 4);
        assert_eq!(b.queued()[0].len, 3, "the refused datagram heads the queue");
        // Still no room.
        assert_eq!(
            flush(&mut b, &mut sink),
            Flushed {
                done: 0,
                blocked: true
            }
        );
        assert_eq!(sink.blocked, 2);
        // Room again: the rest leaves, nothing lost or repeated.
        assert_eq!(
            flush(&mut b, &mut sink),
            Flushed {
                done: 4,
                blocked: false
            }
        );
        assert_eq!(sink.sent, (0..6).map(datagram).collect::<Vec<_>>());
        assert!(sink.failed.is_empty());
        b.reset();
        assert!(b.queued().is_empty());
    }

    #[test]
    fn a_hard_error_drops_only_the_datagram_it_names() {
        let mut b = batch_of(5, |_| "127.0.0.2:4791");
        let mut sink = FakeSink {
            script: [Ok(1), Err(io::Error::from_raw_os_error(libc::EMSGSIZE))].into(),
            ..FakeSink::default()
        };
        assert_eq!(
            flush(&mut b, &mut sink),
            Flushed {
                done: 5,
                blocked: false
            }
        );
        assert_eq!(sink.failed, vec![2], "datagram 1 (2 bytes) failed");
        let want: Vec<_> = [0, 2, 3, 4].into_iter().map(datagram).collect();
        assert_eq!(sink.sent, want);
    }

    #[test]
    fn loopback_datagrams_keep_their_place_in_the_order() {
        // 0, 1 remote; 2 local; 3, 4 remote; 5 local.
        let mut b = batch_of(6, |i| if i % 3 == 2 { LOCAL } else { "127.0.0.2:4791" });
        let mut sink = FakeSink::default();
        assert_eq!(
            flush(&mut b, &mut sink),
            Flushed {
                done: 6,
                blocked: false
            }
        );
        assert_eq!(
            sink.runs,
            vec![2, 2],
            "runs break at the loopback datagrams"
        );
        assert_eq!(sink.looped, vec![datagram(2), datagram(5)]);
        let want: Vec<_> = [0, 1, 3, 4].into_iter().map(datagram).collect();
        assert_eq!(sink.sent, want);
    }

    #[test]
    fn runs_are_cut_at_the_system_call_limit() {
        let n = MMSG_MAX + 5;
        let mut b = batch_of(n, |_| "127.0.0.2:4791");
        let mut sink = FakeSink::default();
        assert_eq!(
            flush(&mut b, &mut sink),
            Flushed {
                done: n,
                blocked: false
            }
        );
        assert_eq!(sink.runs, vec![MMSG_MAX, 5]);
        assert_eq!(sink.sent.len(), n);
    }

    #[test]
    fn a_send_that_reports_nothing_sent_is_a_wait_not_a_spin() {
        let mut b = batch_of(3, |_| "127.0.0.2:4791");
        let mut sink = FakeSink {
            script: [Ok(0)].into(),
            ..FakeSink::default()
        };
        assert_eq!(
            flush(&mut b, &mut sink),
            Flushed {
                done: 0,
                blocked: true
            }
        );
        assert_eq!(b.queued().len(), 3);
    }

    fn a(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 2], port))
    }

    fn groups(run: &[(SocketAddr, usize)]) -> Vec<usize> {
        let mut out = Vec::new();
        gso_groups(run, |_| true, &mut out);
        out
    }

    #[test]
    fn gso_groups_join_equal_sizes_to_one_destination() {
        let full = |n| vec![(a(1), 1000); n];
        assert_eq!(groups(&full(5)), vec![5]);
        // The last may be shorter, and ends the group.
        let mut run = full(3);
        run.extend([(a(1), 10), (a(1), 1000)]);
        assert_eq!(groups(&run), vec![4, 1]);
        // A longer one starts a new group.
        assert_eq!(
            groups(&[(a(1), 10), (a(1), 1000), (a(1), 1000)]),
            vec![1, 2]
        );
        // Another destination starts a new group.
        assert_eq!(groups(&[(a(1), 100), (a(2), 100), (a(2), 100)]), vec![1, 2]);
        // Refused destinations and empty datagrams go alone.
        let mut out = Vec::new();
        gso_groups(&full(3), |_| false, &mut out);
        assert_eq!(out, vec![1, 1, 1]);
        assert_eq!(groups(&[(a(1), 0), (a(1), 0)]), vec![1, 1]);
        assert!(groups(&[]).is_empty());
    }

    #[test]
    fn gso_groups_keep_to_the_kernel_limits() {
        assert_eq!(groups(&vec![(a(1), 100); 130]), vec![64, 64, 2]);
        // 4,000-byte packets: 16 fit in 65,000 bytes.
        assert_eq!(groups(&vec![(a(1), 4000); 20]), vec![16, 4]);
    }

    proptest::proptest! {
        /// Grouping then splitting each group back into its segments gives the same
        /// datagrams, in order, to the same destinations; every group obeys the rules.
        #[test]
        fn gso_groups_then_split_give_back_the_run(
            spec in proptest::collection::vec((0u16..3, 0usize..5, proptest::bool::ANY), 0..200)
        ) {
            let sizes = [0usize, 1, 700, 1500, 4200];
            let run: Vec<(SocketAddr, usize)> =
                spec.iter().map(|&(p, s, _)| (a(p), sizes[s])).collect();
            let refused = a(2);
            let mut out = Vec::new();
            gso_groups(&run, |to| to != refused, &mut out);
            proptest::prop_assert_eq!(out.iter().sum::<usize>(), run.len());
            let mut back = Vec::new();
            let mut at = 0;
            for &n in &out {
                let group = &run[at..at + n];
                let (to, size) = group[0];
                let total: usize = group.iter().map(|g| g.1).sum();
                proptest::prop_assert!((1..=GSO_MAX_SEGMENTS).contains(&n));
                if n > 1 {
                    proptest::prop_assert!(to != refused && size > 0 && total <= GSO_MAX_BYTES);
                    proptest::prop_assert!(group.iter().all(|g| g.0 == to));
                    proptest::prop_assert!(group[..n - 1].iter().all(|g| g.1 == size));
                    proptest::prop_assert!(group[n - 1].1 <= size && group[n - 1].1 > 0);
                }
                // What the receiver's GRO split makes of the group.
                for (_, len) in crate::sys::split(total, (n > 1).then_some(size)) {
                    back.push((to, len));
                }
                if total == 0 {
                    back.push((to, 0));
                }
                at += n;
            }
            proptest::prop_assert_eq!(back, run);
        }
    }
}

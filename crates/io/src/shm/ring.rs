//! One shared ring of datagrams: a single producer (the sending process) and a
//! single consumer (the receiving process), in a [`Mapping`] both have.
//!
//! Layout (offsets in bytes; each index on its own cache line so the two sides
//! do not share one they both write):
//!
//! | offset | what |
//! |---|---|
//! | 0 | magic `u64` ([`MAGIC`]) |
//! | 8 | capacity `u64` (data bytes, a power of two, a multiple of 8) |
//! | 64 | `tail`: bytes ever published (producer writes, Release) |
//! | 128 | `head`: bytes ever given back (consumer writes, Release) |
//! | 192 | `sleeping`: 1 while the consumer is (about to be) asleep |
//! | [`DATA`] | the data, `capacity` bytes |
//!
//! A record is a `u32` length, a flags byte ([`INTACT`], [`SEGMENTS`]), 3
//! bytes of the sending engine's tag for a [`SEGMENTS`] record ([`Meta`]),
//! then the datagram, padded to 8 bytes; a record never wraps: when it does
//! not fit before the end, the producer writes the length [`WRAP`] there and
//! starts again at 0. Indices only grow (`u64`, no wrap in practice), and
//! `tail - head` is the bytes in use. The consumer either copies a record out
//! and gives its room back at once ([`Consumer::pop`]), or takes records
//! where they lie and gives their room back when it is done with them
//! ([`Consumer::take`], [`Consumer::release`]: the engine reads the datagram
//! in the ring). The consumer treats every length as untrusted: a record that
//! does not fit the published bytes or the largest buffer breaks the ring
//! ([`PopError`]).
//!
//! **Wake-up without a system call while the consumer is awake** (the
//! Dekker pattern, both sides `SeqCst`): the consumer stores `sleeping = 1`,
//! then loads `tail`; if nothing is there it sleeps in poll(2) on the
//! connection's socket. The producer stores `tail`, then loads `sleeping`, and
//! only if it reads 1 (and swaps it to 0) writes one byte to the socket. Of
//! "consumer saw the new tail" and "producer saw sleeping = 1" at least one
//! holds, so a datagram never waits for a consumer that sleeps unwoken.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};

use crate::sys::shm::Mapping;

/// The first word of a ring ("svshmrg1").
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"svshmrg1");
/// Where the data starts (a page, so the header's lines are the ring's own).
pub(crate) const DATA: usize = 4096;
const TAIL: usize = 64;
const HEAD: usize = 128;
const SLEEPING: usize = 192;
/// The length that means "continue at offset 0".
const WRAP: u32 = u32::MAX;
const RECORD_HEADER: usize = 8;
/// Bytes past the tail a producer fetches for writing after a record.
const PREFETCH: usize = 256;
/// Record flag: the sending engine sealed this datagram (its ICRC) and nothing
/// changed its bytes since (the sender's fault injection cannot corrupt).
/// The receiver may then skip the ICRC check where the engine allows it
/// (`crate::Engine::handle_local_datagram`); a receiver whose own faults may
/// corrupt verifies anyway. A flag is a claim of a local peer of our own user
/// and namespace (the only ones whose rings we map), never of the network.
pub(crate) const INTACT: u8 = 1;
/// Record flag: the datagram is a run of several packets its engine built
/// for ours (`crate::Engine::poll_transmit_run`); [`Meta::tag`] is the
/// engine's description of it, handed back with it
/// (`crate::Engine::handle_local_run`).
pub(crate) const SEGMENTS: u8 = 2;

/// What a record says besides its length: its flags and, for a
/// [`SEGMENTS`] record, the engine's three-byte tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Meta {
    /// [`INTACT`], [`SEGMENTS`].
    pub(crate) flags: u8,
    /// The engine's tag of a [`SEGMENTS`] record (zero otherwise).
    pub(crate) tag: [u8; 3],
}

impl Meta {
    /// A record marked [`INTACT`] if `intact`, and a run's ([`SEGMENTS`])
    /// with its tag if `segments`.
    pub(crate) fn new(intact: bool, segments: Option<[u8; 3]>) -> Meta {
        let intact = if intact { INTACT } else { 0 };
        match segments {
            Some(tag) => Meta {
                flags: intact | SEGMENTS,
                tag,
            },
            None => Meta {
                flags: intact,
                tag: [0; 3],
            },
        }
    }

    /// Whether the record carries [`INTACT`].
    pub(crate) fn is_intact(self) -> bool {
        self.flags & INTACT != 0
    }

    /// The tag of a [`SEGMENTS`] record.
    pub(crate) fn segments(self) -> Option<[u8; 3]> {
        (self.flags & SEGMENTS != 0).then_some(self.tag)
    }
}

/// What [`Consumer::pop`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pop {
    /// Nothing published.
    Empty,
    /// A datagram of `len` bytes was copied to the buffer's start.
    Datagram {
        /// Its length.
        len: usize,
        /// What its record says besides its length.
        meta: Meta,
    },
    /// The next datagram fits the largest buffer (`max`) but not this one:
    /// left in the ring.
    NoRoom,
}

fn padded(len: usize) -> usize {
    RECORD_HEADER + len.div_ceil(8) * 8
}

/// Whether `capacity` is usable: a power of two, at least a page, at most 1 GiB.
pub(crate) fn valid_capacity(capacity: u64) -> bool {
    capacity.is_power_of_two() && (4096..=1 << 30).contains(&capacity)
}

/// The file length a ring of `capacity` data bytes needs.
pub(crate) fn file_len(capacity: usize) -> usize {
    DATA + capacity
}

/// Writes a fresh ring's header into `map` (the producer, before sharing it).
pub(crate) fn init(map: &Mapping, capacity: usize) {
    map.write(0, &MAGIC.to_le_bytes());
    map.write(8, &(capacity as u64).to_le_bytes());
    map.atomic_u64(TAIL).store(0, SeqCst);
    map.atomic_u64(HEAD).store(0, SeqCst);
    map.atomic_u32(SLEEPING).store(0, SeqCst);
}

/// Reads and checks a ring's header: its capacity, if the ring is usable in a
/// mapping of `map.len()` bytes and starts empty-or-consistent.
pub(crate) fn check(map: &Mapping) -> Option<usize> {
    let mut word = [0u8; 8];
    map.read(0, &mut word).then_some(())?;
    (u64::from_le_bytes(word) == MAGIC).then_some(())?;
    map.read(8, &mut word).then_some(())?;
    let cap = u64::from_le_bytes(word);
    (valid_capacity(cap) && file_len(cap as usize) <= map.len()).then_some(cap as usize)
}

/// The producer's side.
#[derive(Debug)]
pub(crate) struct Producer {
    map: Mapping,
    cap: usize,
    tail: u64,
    /// The consumer's head as last read (re-read only when the ring looks full).
    head: u64,
    /// Room [`Producer::reserve`] found for a record: (whether it starts
    /// after a wrap, its offset, its largest datagram).
    reserved: Option<(bool, usize, usize)>,
}

impl Producer {
    /// The producer of the ring initialised in `map` with `capacity`.
    pub(crate) fn new(map: Mapping, capacity: usize) -> Producer {
        let tail = map.atomic_u64(TAIL).load(Acquire);
        let head = map.atomic_u64(HEAD).load(Acquire);
        Producer {
            map,
            cap: capacity,
            tail,
            head,
            reserved: None,
        }
    }

    /// Where the next record of `need` bytes goes: (after a wrap, offset),
    /// or `None` if the ring has no room for it now.
    fn room(&mut self, need: usize) -> Option<(bool, usize)> {
        let off = (self.tail as usize) & (self.cap - 1);
        let to_end = self.cap - off;
        let total = if to_end < need { to_end + need } else { need };
        if self.cap - ((self.tail - self.head) as usize) < total {
            self.head = self.map.atomic_u64(HEAD).load(Acquire);
            if self.cap - ((self.tail - self.head) as usize) < total {
                return None;
            }
        }
        Some(if to_end < need {
            (true, 0)
        } else {
            (false, off)
        })
    }

    /// Publishes the record of `len` bytes with `meta` whose datagram is
    /// already at `off` (after the wrap marker, if `wrap`).
    fn publish(&mut self, wrap: bool, off: usize, len: usize, meta: Meta) {
        lanes::stamp::at(lanes::stamp::Point::RingPublish);
        let mut tail = self.tail;
        if wrap {
            // The rest of the ring to its end, >= 8: records and the
            // capacity are multiples of 8.
            let at = (tail as usize) & (self.cap - 1);
            self.map.write(DATA + at, &WRAP.to_le_bytes());
            tail += (self.cap - at) as u64;
        }
        let mut header = [0u8; RECORD_HEADER];
        header[..4].copy_from_slice(&(len as u32).to_le_bytes());
        header[4] = meta.flags;
        header[5..8].copy_from_slice(&meta.tag);
        self.map.write(DATA + off, &header);
        self.tail = tail + padded(len) as u64;
        // SeqCst: ordered before the load of `sleeping` in `should_wake`.
        self.map.atomic_u64(TAIL).store(self.tail, SeqCst);
        // The lines the next records go to, fetched for writing now, while
        // they are free (the consumer gave them back) and before the ring's
        // end; from the first line the record just published does not reach
        // into (the consumer is about to read that one).
        let next = (self.tail + 63) & !63;
        let off = (next as usize) & (self.cap - 1);
        let free = (self.cap as u64).saturating_sub(next - self.head) as usize;
        let ahead = PREFETCH.min(free).min(self.cap - off);
        self.map.prefetch_write(DATA + off, ahead);
    }

    /// Room for one record of up to `max` bytes, to build a datagram in
    /// before [`Producer::commit`] publishes it; `None` if the ring has no
    /// room now (or `max` is too long for it). Nothing is published until
    /// then; a reservation not committed is forgotten (the next one or a
    /// push reuses the room).
    pub(crate) fn reserve(&mut self, max: usize) -> Option<&mut [u8]> {
        self.reserved = None;
        if max > self.max_datagram() {
            return None;
        }
        let (wrap, off) = self.room(padded(max))?;
        self.reserved = Some((wrap, off, max));
        self.map.bytes_mut(DATA + off + RECORD_HEADER, max)
    }

    /// The first `len` bytes of the reserved room again (what the caller
    /// built there), or `None` without a reservation of `len` bytes.
    pub(crate) fn reserved(&mut self, len: usize) -> Option<&mut [u8]> {
        let (_, off, max) = self.reserved?;
        (len <= max).then_some(())?;
        self.map.bytes_mut(DATA + off + RECORD_HEADER, len)
    }

    /// Publishes the first `len` bytes of the reserved room as a record
    /// with `meta`; `false` (nothing published) without a reservation of
    /// at least `len` bytes.
    pub(crate) fn commit(&mut self, len: usize, meta: Meta) -> bool {
        match self.reserved.take() {
            Some((wrap, off, max)) if len <= max => {
                self.publish(wrap, off, len, meta);
                true
            }
            _ => false,
        }
    }

    /// The largest datagram a record can hold (half the ring: a record and a
    /// wrap always fit an empty ring).
    pub(crate) fn max_datagram(&self) -> usize {
        self.cap / 2 - RECORD_HEADER
    }

    /// Appends `bytes` as one record with `meta`; `false` when the ring has
    /// no room now (or the datagram is too long for it).
    pub(crate) fn push(&mut self, bytes: &[u8], meta: Meta) -> bool {
        if bytes.len() > self.max_datagram() {
            return false;
        }
        self.reserved = None;
        let Some((wrap, off)) = self.room(padded(bytes.len())) else {
            return false;
        };
        self.map.write(DATA + off + RECORD_HEADER, bytes);
        self.publish(wrap, off, bytes.len(), meta);
        true
    }

    /// After a push: whether the consumer sleeps and must be woken (it is
    /// then marked awake, so only one wake-up is sent per sleep).
    pub(crate) fn should_wake(&self) -> bool {
        let sleeping = self.map.atomic_u32(SLEEPING);
        sleeping.load(SeqCst) != 0 && sleeping.swap(0, SeqCst) != 0
    }

    /// Whether everything pushed has been consumed.
    #[cfg(test)]
    pub(crate) fn drained(&self) -> bool {
        self.map.atomic_u64(HEAD).load(Acquire) == self.tail
    }
}

/// Why a ring cannot be read any further.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PopError {
    /// A length does not fit the published bytes, the ring, or the buffer.
    #[error("a record of {len} bytes at ring offset {offset} does not fit ({available} bytes published, buffer {buffer})")]
    BadRecord {
        /// The record's length field.
        len: u32,
        /// Its offset in the data.
        offset: usize,
        /// Bytes published and not yet consumed.
        available: u64,
        /// The buffer's size.
        buffer: usize,
    },
    /// The producer's index went backwards or past the capacity.
    #[error("the producer's index {tail} is inconsistent with ours ({head}, capacity {capacity})")]
    BadIndex {
        /// The producer's index.
        tail: u64,
        /// Ours.
        head: u64,
        /// The ring's capacity.
        capacity: usize,
    },
}

/// A datagram left in the ring by [`Consumer::take`]: `len` bytes at `at`
/// of the mapping, until [`Consumer::release`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record {
    at: usize,
    /// Its length.
    pub(crate) len: usize,
    /// What its record says besides its length.
    pub(crate) meta: Meta,
}

/// The consumer's side.
#[derive(Debug)]
pub(crate) struct Consumer {
    map: Mapping,
    cap: usize,
    /// Bytes read so far (taken records included).
    head: u64,
    /// Bytes given back to the producer (`HEAD`): `head` minus the taken
    /// records not yet released.
    released: u64,
}

impl Consumer {
    /// The consumer of the ring in `map` (checked with [`check`]).
    pub(crate) fn new(map: Mapping, capacity: usize) -> Consumer {
        let head = map.atomic_u64(HEAD).load(Acquire);
        Consumer {
            map,
            cap: capacity,
            head,
            released: head,
        }
    }

    fn tail(&self) -> Result<u64, PopError> {
        let tail = self.map.atomic_u64(TAIL).load(Acquire);
        if tail < self.head || tail - self.released > self.cap as u64 {
            return Err(PopError::BadIndex {
                tail,
                head: self.head,
                capacity: self.cap,
            });
        }
        Ok(tail)
    }

    /// Copies the next datagram into `buf` if it fits there ([`Pop`]) and
    /// gives its room back; one longer than `max` (the largest buffer the
    /// caller has) breaks the ring.
    pub(crate) fn pop(&mut self, buf: &mut [u8], max: usize) -> Result<Pop, PopError> {
        match self.next(max)? {
            None => Ok(Pop::Empty),
            Some((_, r)) if r.len > buf.len() => Ok(Pop::NoRoom),
            Some((next, r)) => {
                self.map.read(r.at, &mut buf[..r.len]);
                self.head = next;
                self.release();
                Ok(Pop::Datagram {
                    len: r.len,
                    meta: r.meta,
                })
            }
        }
    }

    /// Takes the next datagram where it is, without copying it: it stays
    /// the consumer's (the producer does not reuse its room) until
    /// [`Consumer::release`]; read it with [`Consumer::bytes`]. `None` when
    /// the ring is empty; one longer than `max` breaks the ring.
    pub(crate) fn take(&mut self, max: usize) -> Result<Option<Record>, PopError> {
        Ok(self.next(max)?.map(|(next, r)| {
            self.head = next;
            r
        }))
    }

    /// The bytes of a record [`Consumer::take`] gave and that is not yet
    /// released (see `Mapping::bytes` for why a slice of shared memory).
    pub(crate) fn bytes(&self, r: &Record) -> &[u8] {
        self.map.bytes(r.at, r.len).unwrap_or(&[])
    }

    /// Gives the room of every record taken so far back to the producer.
    pub(crate) fn release(&mut self) {
        if self.released != self.head {
            self.released = self.head;
            self.map.atomic_u64(HEAD).store(self.head, Release);
        }
    }

    /// The next record after `head` (wraps skipped, which moves `head`
    /// over them): the index after it, and the record.
    fn next(&mut self, max: usize) -> Result<Option<(u64, Record)>, PopError> {
        let tail = self.tail()?;
        loop {
            if self.head == tail {
                return Ok(None);
            }
            let off = (self.head as usize) & (self.cap - 1);
            let available = tail - self.head;
            let mut word = [0u8; 8];
            self.map.read(DATA + off, &mut word);
            let len = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
            let bad = PopError::BadRecord {
                len,
                offset: off,
                available,
                buffer: max,
            };
            if len == WRAP {
                let skip = (self.cap - off) as u64;
                if skip > available {
                    return Err(bad);
                }
                self.head += skip;
                continue;
            }
            let n = len as usize;
            let need = padded(n);
            if n > max || need > self.cap - off || need as u64 > available {
                return Err(bad);
            }
            let r = Record {
                at: DATA + off + RECORD_HEADER,
                len: n,
                meta: Meta {
                    flags: word[4],
                    tag: [word[5], word[6], word[7]],
                },
            };
            return Ok(Some((self.head + need as u64, r)));
        }
    }

    /// Before sleeping: marks the consumer asleep; `true` if a datagram is
    /// already there (then do not sleep). See the module doc.
    pub(crate) fn arm(&self) -> bool {
        self.map.atomic_u32(SLEEPING).store(1, SeqCst);
        self.map.atomic_u64(TAIL).load(SeqCst) != self.head
    }

    /// Whether a datagram is waiting.
    pub(crate) fn has_data(&self) -> bool {
        self.map.atomic_u64(TAIL).load(Acquire) != self.head
    }

    /// Awake again: producers need not send wake-ups.
    pub(crate) fn disarm(&self) {
        self.map.atomic_u32(SLEEPING).store(0, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::shm::sealed_memfd;
    use proptest::prelude::*;
    use std::os::fd::AsFd;

    fn pair(cap: usize) -> (Producer, Consumer) {
        let fd = sealed_memfd("sv-ring", file_len(cap) as u64).unwrap();
        let a = Mapping::new(fd.as_fd(), file_len(cap)).unwrap();
        init(&a, cap);
        let b = Mapping::new(fd.as_fd(), file_len(cap)).unwrap();
        assert_eq!(check(&b), Some(cap));
        (Producer::new(a, cap), Consumer::new(b, cap))
    }

    /// The next datagram's length into a buffer that always has room.
    fn pop1(c: &mut Consumer, buf: &mut [u8]) -> Result<Option<usize>, PopError> {
        let max = buf.len();
        Ok(match c.pop(buf, max)? {
            Pop::Empty => None,
            Pop::Datagram { len, .. } => Some(len),
            Pop::NoRoom => unreachable!("the buffer is the largest"),
        })
    }

    proptest! {
        /// Any sequence of pushes and pops gives back exactly the pushed
        /// datagrams, in order, across wraps; a full ring refuses, never loses.
        #[test]
        fn datagrams_come_out_as_they_went_in(
            ops in proptest::collection::vec((0usize..1500, any::<bool>()), 1..300)
        ) {
            let (mut p, mut c) = pair(4096);
            let mut model = std::collections::VecDeque::new();
            let mut buf = vec![0u8; 4096];
            for (i, (len, push)) in ops.into_iter().enumerate() {
                if push {
                    let d: Vec<u8> = (0..len).map(|j| (i + j) as u8).collect();
                    if p.push(&d, Meta::default()) {
                        model.push_back(d);
                    } else {
                        prop_assert!(!model.is_empty(), "an empty ring refused {len} bytes");
                    }
                } else {
                    let got = pop1(&mut c, &mut buf).unwrap();
                    match model.pop_front() {
                        Some(d) => prop_assert_eq!(&buf[..got.unwrap()], &d[..]),
                        None => prop_assert_eq!(got, None),
                    }
                }
            }
            while let Some(d) = model.pop_front() {
                let n = pop1(&mut c, &mut buf).unwrap().unwrap();
                prop_assert_eq!(&buf[..n], &d[..]);
            }
            prop_assert_eq!(pop1(&mut c, &mut buf).unwrap(), None);
            prop_assert!(p.drained());
        }
    }

    proptest! {
        /// Datagrams built in reserved room and committed, pushes, and
        /// reservations given up, in any order: exactly the committed and
        /// pushed datagrams come out, in order, with their flags, across
        /// wraps (a reservation's room is where its record goes even when a
        /// shorter commit would have fit before the end).
        #[test]
        fn reserved_room_commits_like_a_push(
            ops in proptest::collection::vec((0usize..1500, 0usize..1500, 0u8..4), 1..300)
        ) {
            let (mut p, mut c) = pair(4096);
            let mut model = std::collections::VecDeque::new();
            let mut buf = vec![0u8; 4096];
            for (i, (a, b, kind)) in ops.into_iter().enumerate() {
                let d: Vec<u8> = (0..a.min(b)).map(|j| (i + j) as u8).collect();
                let flags = Meta { flags: (i % 4) as u8, tag: [i as u8, 1, 2] };
                match kind {
                    0 => {
                        if let Some(room) = p.reserve(a.max(b)) {
                            room[..d.len()].copy_from_slice(&d);
                            prop_assert!(p.commit(d.len(), flags));
                            model.push_back((d, flags));
                        }
                        prop_assert!(!p.commit(0, Meta::default()), "one commit per reservation");
                    }
                    1 => {
                        // Given up: nothing published.
                        if let Some(room) = p.reserve(a) {
                            room.fill(0xee);
                        }
                    }
                    2 => {
                        if p.push(&d, flags) {
                            model.push_back((d, flags));
                        }
                    }
                    _ => {
                        let got = c.pop(&mut buf, 4096).unwrap();
                        match model.pop_front() {
                            Some((d, f)) => {
                                prop_assert_eq!(got, Pop::Datagram { len: d.len(), meta: f });
                                prop_assert_eq!(&buf[..d.len()], &d[..]);
                            }
                            None => prop_assert_eq!(got, Pop::Empty),
                        }
                    }
                }
            }
            while let Some((d, f)) = model.pop_front() {
                prop_assert_eq!(c.pop(&mut buf, 4096).unwrap(), Pop::Datagram { len: d.len(), meta: f });
                prop_assert_eq!(&buf[..d.len()], &d[..]);
            }
            prop_assert_eq!(c.pop(&mut buf, 4096).unwrap(), Pop::Empty);
        }
    }

    #[test]
    fn a_producer_on_another_thread_delivers_in_order() {
        let (mut p, mut c) = pair(1 << 16);
        const N: u32 = 20_000;
        let t = std::thread::spawn(move || {
            for i in 0..N {
                let d = i.to_le_bytes().repeat(1 + (i as usize % 300));
                let mut tries = 0u64;
                while !p.push(&d, Meta::default()) {
                    tries += 1;
                    assert!(tries < 100_000_000, "consumer stalled");
                    std::thread::yield_now();
                }
            }
        });
        let mut buf = vec![0u8; 4096];
        let mut next = 0u32;
        let start = std::time::Instant::now();
        while next < N {
            assert!(start.elapsed() < std::time::Duration::from_secs(60));
            match pop1(&mut c, &mut buf).unwrap() {
                Some(n) => {
                    let want = next.to_le_bytes().repeat(1 + (next as usize % 300));
                    assert_eq!(&buf[..n], &want[..], "datagram {next}");
                    next += 1;
                }
                None => std::thread::yield_now(),
            }
        }
        t.join().unwrap();
    }

    #[test]
    fn wake_ups_only_while_the_consumer_sleeps() {
        let (mut p, mut c) = pair(4096);
        assert!(p.push(b"a", Meta::default()));
        assert!(!p.should_wake(), "an awake consumer needs no wake-up");
        assert!(c.arm(), "a datagram is waiting: do not sleep");
        let mut buf = [0u8; 16];
        assert_eq!(pop1(&mut c, &mut buf).unwrap(), Some(1));
        assert!(!c.arm(), "empty: sleep");
        assert!(p.push(b"b", Meta::default()));
        assert!(p.should_wake(), "asleep: wake it");
        assert!(!p.should_wake(), "one wake-up per sleep");
        c.disarm();
        assert!(p.push(b"c", Meta::default()));
        assert!(!p.should_wake());
    }

    #[test]
    fn flags_come_along_and_a_short_buffer_leaves_the_datagram() {
        let (mut p, mut c) = pair(4096);
        assert!(p.push(&[1u8; 300], Meta::new(true, Some([1, 2, 3]))));
        assert!(p.push(&[2u8; 10], Meta::default()));
        let mut buf = [0u8; 1000];
        assert_eq!(c.pop(&mut buf[..100], 1000).unwrap(), Pop::NoRoom);
        assert_eq!(
            c.pop(&mut buf, 1000).unwrap(),
            Pop::Datagram {
                len: 300,
                meta: Meta::new(true, Some([1, 2, 3]))
            }
        );
        assert_eq!(&buf[..300], &[1u8; 300][..]);
        assert_eq!(
            c.pop(&mut buf, 1000).unwrap(),
            Pop::Datagram {
                len: 10,
                meta: Meta::default()
            }
        );
        assert_eq!(c.pop(&mut buf, 1000).unwrap(), Pop::Empty);
        // Longer than the largest buffer: the ring is broken, not skipped.
        assert!(p.push(&[3u8; 600], Meta::default()));
        assert!(matches!(
            c.pop(&mut buf, 500),
            Err(PopError::BadRecord { len: 600, .. })
        ));
    }

    #[test]
    fn a_lying_producer_is_caught_not_followed() {
        let (mut p, mut c) = pair(4096);
        assert!(p.push(&[7u8; 100], Meta::default()));
        // Corrupt the record's length to beyond what was published.
        p.map.write(DATA, &5000u32.to_le_bytes());
        let mut buf = vec![0u8; 8192];
        assert!(matches!(
            pop1(&mut c, &mut buf),
            Err(PopError::BadRecord { len: 5000, .. })
        ));
        // An index beyond the capacity.
        p.map.atomic_u64(TAIL).store(1 << 40, SeqCst);
        assert!(matches!(
            pop1(&mut c, &mut buf),
            Err(PopError::BadIndex { .. })
        ));
    }
}

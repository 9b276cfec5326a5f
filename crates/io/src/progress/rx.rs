//! The progress thread's receive side: the socket's datagrams (as many per
//! recvmmsg(2) as are queued, a GRO buffer cut back into datagrams), the
//! shared address's forwarded ones and the multicast groups', each counted,
//! captured and through the receive faults before the engine takes it.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering::SeqCst;

use super::faults::Fate;
use super::{Progress, STREAM_BATCH};
use crate::clock::Nanos;
use crate::counters::Counters;
use crate::engine::Engine;
use crate::hold::Dir;
use crate::share::{self, Slot};
use crate::sys;

impl<E: Engine> Progress<E> {
    /// Reads up to `batch` datagrams, as many per recvmmsg(2) as are queued,
    /// if the socket is readable (see [`Readable`]).
    pub(super) fn receive(&mut self) -> bool {
        if !self.readable.socket {
            return false;
        }
        // One reader at a time (crate::pollrx): a polling application thread
        // may read while this thread sleeps.
        let shared = self.shared.clone();
        let _gate = shared.rx.hold();
        let mut mem = std::mem::take(&mut self.rx_mem);
        let mut meta = std::mem::take(&mut self.rx_meta);
        let slot = self.rx_slot;
        let mut budget = self.batch;
        let mut work = false;
        while budget > 0 {
            // Ask for about as many as came last time, doubling while calls come back
            // full: a call's set-up grows with its size, and a latency-bound exchange
            // reads one datagram at a time.
            let want = budget.min(self.rx_want);
            let got = match sys::recvmmsg(self.socket.as_fd(), &mut mem, slot, &mut meta[..want]) {
                Ok(got) => got,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    Counters::add(&self.shared.counters.recv_empty, 1);
                    self.rx_want = (self.rx_want / 2).max(1);
                    self.readable.socket = false;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => break,
                Err(e) => {
                    Counters::add(&self.shared.counters.recv_errors, 1);
                    tracing::warn!(local = %self.local, error = %e, "receive failed");
                    work = true;
                    break;
                }
            };
            Counters::add(&self.shared.counters.recv_calls, 1);
            // A full read of several may have left more; one datagram asked
            // for and read (a latency-bound exchange) most likely did not.
            self.readable.socket = got == want && want > 1;
            self.rx_want = if got == want {
                (want * 2).min(meta.len())
            } else {
                got.max(1)
            };
            work |= got > 0;
            // One reading for the call: its datagrams arrived together.
            let now = self.shared.clock.now();
            let mut passed = std::mem::take(&mut self.rx_passed);
            for (i, (r, chunk)) in meta[..got]
                .iter()
                .zip(mem.chunks_exact_mut(slot))
                .enumerate()
            {
                // A UDP GRO buffer holds several datagrams: each goes on alone.
                let coalesced = r.segment.is_some_and(|s| s < r.len);
                for (off, len) in sys::split(r.len, r.segment) {
                    if coalesced {
                        Counters::add(&self.shared.counters.gro_datagrams, 1);
                    }
                    let one = sys::Received {
                        len,
                        segment: None,
                        ..*r
                    };
                    let bytes = &mut chunk[off..off + len];
                    if self.forward(&one, bytes) {
                        continue;
                    }
                    if let Some((now, from)) = self.received(now, &one, self.local, bytes) {
                        passed.push((i * slot + off, len, now, from));
                    }
                }
            }
            self.stream_came |= passed.len() >= STREAM_BATCH;
            if !passed.is_empty() {
                // One call per sender's run, in arrival order.
                let engine = self.shared.engine();
                for run in passed.chunk_by(|a, b| (a.2, a.3) == (b.2, b.3)) {
                    let (now, from) = (run[0].2, run[0].3);
                    let mut each = run.iter().map(|&(at, len, ..)| &mem[at..at + len]);
                    engine.handle_batch(now, from, self.local, &mut each);
                }
            }
            passed.clear();
            self.rx_passed = passed;
            budget = budget.saturating_sub(got);
            if !self.readable.socket {
                break;
            }
        }
        self.rx_mem = mem;
        self.rx_meta = meta;
        work
    }

    /// One datagram read from the socket: counted, captured, then the receive
    /// faults. `Some((now, from))`: it goes on to the engine now (the caller
    /// delivers it, as [`Self::arrive`] would).
    pub(super) fn received(
        &mut self,
        now: Nanos,
        r: &sys::Received,
        to: SocketAddr,
        bytes: &mut [u8],
    ) -> Option<(Nanos, SocketAddr)> {
        let c = &self.shared.counters;
        let Some(from) = r.from.filter(|_| !r.truncated) else {
            Counters::add(&c.recv_errors, 1);
            tracing::warn!(local = %self.local, len = r.len, truncated = r.truncated,
                "unusable datagram (cut to the buffer, or an unknown sender address); dropped");
            return None;
        };
        Counters::add(&c.datagrams_received, 1);
        Counters::add(&c.bytes_received, bytes.len() as u64);
        if let Some(cap) = self.capture.as_mut() {
            cap.record(now, from, to, bytes, c);
        }
        match self.inject(Dir::Rx, now, from, bytes) {
            Fate::Pass => {
                // Counted as passed now, as `deliver_datagram` does right after the engine.
                self.faults.hold.passed(Dir::Rx);
                Some((now, from))
            }
            Fate::Gone => None,
        }
    }

    /// Shared address: a datagram for another process's slot goes to that
    /// process's inbox ([`forward`]). `true`: it was not ours.
    pub(super) fn forward(&mut self, r: &sys::Received, bytes: &[u8]) -> bool {
        match &self.share {
            Some((slot, _)) => forward(slot, &self.shared.counters, self.local, r, bytes),
            None => false,
        }
    }

    /// Shared address: datagrams other processes forwarded to this one, each
    /// then treated as read from the socket (counted, captured, faults, engine).
    pub(super) fn receive_forwarded(&mut self) -> bool {
        if !self.readable.inbox && !self.readable.services {
            return false;
        }
        let Some((slot, mut buf)) = self.share.take() else {
            return false;
        };
        let mut work = false;
        for _ in 0..self.batch {
            // The inbox first, then the CM listener registry's sockets, each
            // while poll(2) said it is readable and it gave something.
            let inbox = self.readable.inbox;
            let got = if inbox {
                slot.receive(&mut buf)
            } else if self.readable.services {
                slot.receive_service(&mut buf)
            } else {
                break;
            };
            let (from, len) = match got {
                Ok(got) => got,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    Counters::add(&self.shared.counters.recv_empty, 1);
                    if inbox {
                        self.readable.inbox = false;
                    } else {
                        self.readable.services = false;
                    }
                    continue;
                }
                Err(e) => {
                    Counters::add(&self.shared.counters.recv_errors, 1);
                    tracing::warn!(local = %self.local, error = %e, "forwarded datagram unreadable");
                    continue;
                }
            };
            work = true;
            Counters::add(&self.shared.counters.forwards_received, 1);
            let r = sys::Received {
                len,
                from: Some(from),
                truncated: false,
                segment: None,
            };
            let now = self.shared.clock.now();
            if let Some((now, from)) = self.received(now, &r, self.local, &mut buf[..len]) {
                self.shared
                    .engine()
                    .handle_datagram(now, from, self.local, &buf[..len]);
            }
        }
        self.share = Some((slot, buf));
        work
    }

    /// Multicast: datagrams read from the groups' sockets, each then treated
    /// as read from the device's socket, with the group as its destination.
    pub(super) fn receive_groups(&mut self) -> bool {
        let version = self.shared.groups_version.load(SeqCst);
        if version != self.groups_seen {
            let joined = self.shared.groups.lock();
            let joined = joined.unwrap_or_else(std::sync::PoisonError::into_inner);
            self.groups.clone_from(&joined);
            self.groups_seen = version;
        }
        if self.groups.is_empty() {
            return false;
        }
        let max = self.rx_slot;
        let mut buf = std::mem::take(&mut self.group_buf);
        buf.resize(max + 1, 0);
        let groups = std::mem::take(&mut self.groups);
        let mut work = false;
        for (group, socket) in &groups {
            for _ in 0..self.batch {
                let (len, from) = match socket.recv_from(&mut buf) {
                    Ok(got) => got,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        Counters::add(&self.shared.counters.recv_errors, 1);
                        tracing::warn!(%group, error = %e, "multicast receive failed");
                        break;
                    }
                };
                work = true;
                Counters::add(&self.shared.counters.recv_calls, 1);
                let r = sys::Received {
                    len: len.min(max),
                    from: Some(from),
                    truncated: len > max,
                    segment: None,
                };
                let now = self.shared.clock.now();
                if let Some((now, from)) = self.received(now, &r, *group, &mut buf[..r.len]) {
                    let bytes = &buf[..r.len];
                    self.shared
                        .engine()
                        .handle_datagram(now, from, *group, bytes);
                }
            }
        }
        self.groups = groups;
        self.group_buf = buf;
        work
    }
}

/// Shared address: a datagram for another process's slot goes to that
/// process's inbox (counted; dropped if nobody holds the slot). `true`: it
/// was not ours.
/// A CM MAD goes by the comm ID or service ID it names (spec/cm.md §8); one
/// nobody else takes is ours (our CM answers it: REJ, DREP).
pub(crate) fn forward(
    slot: &Slot,
    c: &Counters,
    local: SocketAddr,
    r: &sys::Received,
    bytes: &[u8],
) -> bool {
    let Some(from) = r.from else {
        return false;
    };
    if r.truncated {
        return false;
    }
    let gsi = bytes.get(5..8) == Some(&[0, 0, 1]);
    let (sent, dest) = match share::target(slot.index(), bytes) {
        share::Target::Ours => return false,
        share::Target::Service(sid) if slot.serves(sid) => return false,
        share::Target::Service(sid) => match slot.forward_to_service(sid, from, bytes) {
            Ok(()) => (Ok(()), None),
            // Nobody listens on it: our CM refuses (REJ invalid service ID).
            Err(_) => return false,
        },
        share::Target::Slot(dest) => (slot.forward(dest, from, bytes), Some(dest)),
    };
    match sent {
        Ok(()) => Counters::add(&c.forwarded, 1),
        // A MAD for a comm ID whose process is gone: ours answers as the
        // kernel does for an unknown ID (DREP to a DREQ, else a drop).
        Err(_) if gsi => return false,
        Err(e) => {
            Counters::add(&c.forward_drops, 1);
            tracing::debug!(%local, slot = ?dest, error = %e,
                "datagram for a slot no process holds (or a full inbox); dropped");
        }
    }
    true
}

//! The progress thread's hooks of the same-host path (`crate::shm`): the
//! rings' datagrams in, each treated as read from the socket, and runs of
//! datagrams out through a ring when the peer has one.

use std::io;
use std::net::SocketAddr;

use super::Progress;
use crate::counters::Counters;
use crate::engine::Engine;
use crate::sys;

impl<E: Engine> Progress<E> {
    /// shm: datagrams from the same-host path's rings, each then treated as
    /// read from the socket (counted, captured, faults), then handed to the
    /// engine together under one lock; those whose bytes nothing could have
    /// altered (the sender's engine sealed them, no corruption injected on
    /// either side) as local datagrams (`Engine::handle_local_datagram`).
    pub(super) fn receive_shm(&mut self) -> bool {
        let shared = self.shared.clone();
        if shared.shm().is_some_and(|s| s.fresh_data()) {
            // A sender just switched to its ring: what it sent by the socket
            // (or the shared address's inbox) before is read first, to the
            // end (crate::shm::ShmPath::fresh_data).
            self.readable.socket = true;
            self.readable.inbox = true;
            for _ in 0..64 {
                if !(self.receive() | self.receive_forwarded()) {
                    break;
                }
                self.peek();
            }
            if let Some(mut s) = shared.shm() {
                s.settle_fresh();
            }
        }
        let Some(mut shm) = shared.shm() else {
            return false;
        };
        // The peers reached intact, as the last checks found them (each
        // check, this thread's or a polling thread's, may change them).
        if let Some(peers) = shm.take_intact() {
            shared.engine().set_intact_peers(&peers);
        }
        // A polling thread works on what it took from the rings (and will
        // take the rest): working the same rings beside it would take the
        // core another process needs (crate::pollrx::RxGate::working).
        // One reading for both clocks.
        let now = shared.clock.now();
        let at = shared.clock.instant(now);
        if shared.rx.busy(now) {
            return shm.maybe_check(at, &shared.counters);
        }
        if !self.faults.on_receive() {
            // No receive faults: the engine reads each datagram where it
            // lies in the ring (no copy); counted and captured as read.
            let c = &shared.counters;
            let work = shm.receive_in_place(at, self.batch, c, true, |batch, replies| {
                let c = &shared.counters;
                let now = shared.clock.now();
                self.stream_came |= batch.is_stream();
                for (bytes, _) in batch.datagrams() {
                    Counters::add(&c.datagrams_received, 1);
                    Counters::add(&c.bytes_received, bytes.len() as u64);
                    if let Some(cap) = self.capture.as_mut() {
                        cap.record(now, batch.from, self.local, bytes, c);
                    }
                }
                crate::shm::deliver(&*shared.engine(), now, self.local, batch, replies);
                // (No receive faults: nothing received is held, so there
                // is no reordered datagram to count down.)
            });
            return work;
        }
        let rx_corrupts = self.faults.corrupts.1;
        let mut passed = std::mem::take(&mut self.shm_passed);
        let work = shm.receive(self.batch, &shared.counters, |stage, arrived| {
            // One reading for the batch: its datagrams were taken together.
            let now = shared.clock.now();
            for a in arrived {
                let r = sys::Received {
                    len: a.len,
                    from: Some(a.from),
                    truncated: false,
                    segment: None,
                };
                let bytes = &mut stage[a.at..a.at + a.len];
                if let Some((now, from)) = self.received(now, &r, self.local, bytes) {
                    // Our corruption faults may have changed it: not intact
                    // (and a run that is not is dropped).
                    let mut meta = a.meta;
                    if rx_corrupts {
                        meta.flags &= !crate::shm::ring::INTACT;
                    }
                    passed.push((a.at, a.len, now, from, meta));
                }
            }
            if !passed.is_empty() {
                let engine = shared.engine();
                for &(at, len, now, from, meta) in &passed {
                    let bytes = &stage[at..at + len];
                    crate::shm::hand_over(&*engine, now, from, self.local, bytes, meta, None);
                }
            }
            passed.clear();
        });
        self.shm_passed = passed;
        work
    }

    /// shm: sends one (held) datagram through the same-host path if it takes
    /// it (counted and captured as sent, like the socket's). Never marked
    /// intact: a held datagram may be a corrupted one's duplicate.
    pub(super) fn shm_out(&mut self, to: SocketAddr, bytes: &[u8]) -> bool {
        let shared = self.shared.clone();
        let Some(mut shm) = shared.shm() else {
            return false;
        };
        if shm.send(
            to,
            bytes,
            crate::shm::ring::Meta::default(),
            &shared.counters,
        ) != crate::shm::Push::Sent
        {
            return false;
        }
        drop(shm);
        self.sent(to, bytes);
        true
    }

    /// shm: the same-host path takes what it can from the head of a run:
    /// `Ok(Ok(n))`, the first `n` went; `Err(WouldBlock)`, its ring is full;
    /// `Ok(Err(k))`, the first `k` go by the socket.
    pub(super) fn shm_run(
        &mut self,
        run: &[(SocketAddr, &[u8])],
        segments: &[Option<[u8; 3]>],
    ) -> io::Result<Result<usize, usize>> {
        use crate::shm::Run;
        let shared = self.shared.clone();
        let Some(mut shm) = shared.shm() else {
            return Ok(Err(run.len()));
        };
        let intact = !self.faults.corrupts.0;
        self.shm_full = false;
        match shm.send_run(run, segments, intact, &shared.counters) {
            Run::Sent(n) => Ok(Ok(n)),
            Run::Full => {
                self.shm_full = true;
                Err(io::ErrorKind::WouldBlock.into())
            }
            Run::Socket(k) => Ok(Err(k)),
        }
    }
}

//! The engine's hooks into the device's GSI endpoint (QP1, [`crate::gsi`]):
//! receive, transmit, and the connection manager's accessors.

use crate::cm::{Cm, CmCounters};
use crate::gsi::{Gsi, GsiCounters};
use crate::output::{Transmit, ROCE_PORT};
use crate::types::Gid;
use crate::Engine;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use wire::{mad, Encap, Psn, TransportRepr};

impl Engine {
    /// The device's connection manager.
    pub fn cm(&mut self) -> &Cm {
        &self.gsi.get_mut().cm
    }

    /// The device's connection manager, to call (listen, connect, accept, …).
    /// A driver must poll transmit afterwards (ring its doorbell).
    pub fn cm_mut(&mut self) -> &mut Cm {
        *self.gsi_dirty.get_mut() = true;
        *self.cm_touched.get_mut() = true;
        *self.cm_stale.get_mut() = true;
        &mut self.gsi.get_mut().cm
    }

    /// Runs `f` on the connection manager through `&self` (its lock held):
    /// what the data path's threads use.
    pub fn with_cm<R>(&self, f: impl FnOnce(&mut Cm) -> R) -> R {
        let r = f(&mut self.gsi.lock().cm);
        self.gsi_dirty.store(true, Relaxed);
        self.cm_touched.store(true, Relaxed);
        self.cm_stale.store(true, Release);
        r
    }

    /// Runs `f` on the connection manager if a MAD, a timer or a call
    /// reached it since the last time (its events are then taken there);
    /// otherwise takes no lock. What a driver calls after each data-path step.
    pub fn after_cm(&self, f: impl FnOnce(&mut Cm)) {
        // Looked at first: a swap would write this device-wide word at
        // every step, from every thread.
        if self.cm_touched.load(Relaxed) && self.cm_touched.swap(false, Relaxed) {
            f(&mut self.gsi.lock().cm);
            // `f` may have queued a MAD (a REJ for a listener that is gone).
            self.gsi_dirty.store(true, Relaxed);
            self.cm_stale.store(true, Release);
        }
    }

    /// Replaces the connection manager by a fresh one seeded with `seed` (comm
    /// IDs and TIDs; a driver passes per-process entropy so that processes
    /// sharing an address do not pick the same IDs). Only before any CM use.
    pub fn reseed_cm(&mut self, seed: u64) {
        let gid = self.info.gids.first().copied().unwrap_or(Gid::ZERO);
        *self.gsi.get_mut() = Gsi::new(gid, self.info.attr.node_guid, seed);
        *self.cm_stale.get_mut() = true;
    }

    /// Puts this process's slot of a shared address into the CM's comm IDs
    /// (`Cm::set_slot`, spec/cm.md §8). Call after `reseed_cm`.
    pub fn set_cm_slot(&mut self, slot: u8) -> Result<(), crate::cm::CmError> {
        *self.cm_stale.get_mut() = true;
        self.gsi.get_mut().cm.set_slot(slot)
    }

    /// The CM's counters (MADs by kind, drops by reason).
    pub fn cm_counters(&self) -> CmCounters {
        *self.gsi.lock().cm.counters()
    }

    /// Counters of QP1 itself.
    pub fn gsi_counters(&self) -> GsiCounters {
        self.gsi.lock().counters
    }

    /// Receive hook: a packet (ICRC already verified) whose BTH dest QP is 1.
    pub(crate) fn gsi_receive(&self, now: u64, from: IpAddr, repr: &TransportRepr, pkt: &[u8]) {
        let mut gsi = self.gsi.lock();
        if mad::check_gsi(repr).is_err() {
            gsi.counters.drop_not_gsi += 1;
            return;
        }
        gsi.counters.mads_received += 1;
        gsi.cm.handle_mad(now, Gid::from(from), repr.payload(pkt));
        self.gsi_dirty.store(true, Relaxed);
        self.cm_touched.store(true, Relaxed);
        self.cm_stale.store(true, Release);
    }

    /// Transmit hook: the next MAD as a whole RoCEv2 datagram in `buf`.
    pub(crate) fn gsi_transmit(&self, buf: &mut [u8]) -> Option<Transmit> {
        // Cleared before the look, so a MAD queued meanwhile sets it again
        // (read first: most transmits find it clear and write nothing).
        if !self.gsi_dirty.load(Relaxed) || !self.gsi_dirty.swap(false, Relaxed) {
            return None;
        }
        let mut gsi = self.gsi.lock();
        let gsi = &mut *gsi;
        while let Some(t) = gsi.cm.poll_transmit() {
            let src = self.info.gids.first().copied().unwrap_or(Gid::ZERO).ip();
            let dst = t.to.ip();
            let Some(encap) = Encap::from_addrs(src, dst, self.dev.local_port) else {
                gsi.counters.drop_unroutable += 1;
                continue;
            };
            let repr = mad::gsi_transport(Psn::from_masked(gsi.psn));
            gsi.psn = gsi.psn.wrapping_add(1) & 0xFF_FFFF;
            let Ok(len) = repr.emit(buf, &t.mad, &encap) else {
                gsi.counters.drop_unroutable += 1;
                continue;
            };
            gsi.counters.mads_sent += 1;
            // Sending may have started the MAD's retry timer.
            self.cm_stale.store(true, Release);
            self.dev.counters.mine().packets_sent.bump();
            self.dev.counters.mine().bytes_sent.add(len as u64);
            // More may wait: the next turn looks again.
            self.gsi_dirty.store(true, Relaxed);
            return Some(Transmit {
                to: SocketAddr::new(dst, ROCE_PORT),
                len,
                segments: None,
            });
        }
        None
    }

    /// The CM's earliest deadline (`u64::MAX`: none): read under its lock
    /// only when the CM was reached since the last reading. Whoever
    /// reaches the CM marks it after its change (still under the lock or
    /// after it), so a reading that missed a change, one that looked just
    /// before it, is followed by one that sees it.
    pub(crate) fn cm_timeout(&self) -> u64 {
        if !self.cm_stale.load(Acquire) || !self.cm_stale.swap(false, AcqRel) {
            return self.cm_first.load(Acquire);
        }
        let first = self.gsi.lock().cm.poll_timeout().unwrap_or(u64::MAX);
        self.cm_first.store(first, Release);
        first
    }

    /// Whether the CM has MADs to send (its lock taken only when it may).
    pub(crate) fn gsi_pending(&self) -> bool {
        self.gsi_dirty.load(Relaxed) && self.gsi.lock().cm.transmits_pending() > 0
    }
}

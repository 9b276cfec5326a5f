//! The engine's hooks into the device's GSI endpoint (QP1, [`crate::gsi`]):
//! receive, transmit, and the connection manager's accessors.

use crate::cm::{Cm, CmCounters};
use crate::gsi::{Gsi, GsiCounters};
use crate::output::{Transmit, ROCE_PORT};
use crate::types::Gid;
use crate::Engine;
use std::net::{IpAddr, SocketAddr};
use wire::{mad, Encap, Psn, TransportRepr};

impl Engine {
    /// The device's connection manager.
    pub fn cm(&self) -> &Cm {
        &self.gsi.cm
    }

    /// The device's connection manager, to call (listen, connect, accept, …).
    /// A driver must poll transmit afterwards (ring its doorbell).
    pub fn cm_mut(&mut self) -> &mut Cm {
        &mut self.gsi.cm
    }

    /// Replaces the connection manager by a fresh one seeded with `seed` (comm
    /// IDs and TIDs; a driver passes per-process entropy so that processes
    /// sharing an address do not pick the same IDs). Only before any CM use.
    pub fn reseed_cm(&mut self, seed: u64) {
        let gid = self.info.gids.first().copied().unwrap_or(Gid::ZERO);
        self.gsi = Gsi::new(gid, self.info.attr.node_guid, seed);
    }

    /// Puts this process's slot of a shared address into the CM's comm IDs
    /// (`Cm::set_slot`, spec/cm.md §8). Call after `reseed_cm`.
    pub fn set_cm_slot(&mut self, slot: u8) -> Result<(), crate::cm::CmError> {
        self.gsi.cm.set_slot(slot)
    }

    /// The CM's counters (MADs by kind, drops by reason).
    pub fn cm_counters(&self) -> &CmCounters {
        self.gsi.cm.counters()
    }

    /// Counters of QP1 itself.
    pub fn gsi_counters(&self) -> GsiCounters {
        self.gsi.counters
    }

    /// Receive hook: a packet (ICRC already verified) whose BTH dest QP is 1.
    pub(crate) fn gsi_receive(&mut self, now: u64, from: IpAddr, repr: &TransportRepr, pkt: &[u8]) {
        if mad::check_gsi(repr).is_err() {
            self.gsi.counters.drop_not_gsi += 1;
            return;
        }
        self.gsi.counters.mads_received += 1;
        self.gsi
            .cm
            .handle_mad(now, Gid::from(from), repr.payload(pkt));
    }

    /// Transmit hook: the next MAD as a whole RoCEv2 datagram in `buf`.
    pub(crate) fn gsi_transmit(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        while let Some(t) = self.gsi.cm.poll_transmit() {
            let src = self.info.gids.first().copied().unwrap_or(Gid::ZERO).ip();
            let dst = t.to.ip();
            let Some(encap) = Encap::from_addrs(src, dst, self.dev.local_port) else {
                self.gsi.counters.drop_unroutable += 1;
                continue;
            };
            let repr = mad::gsi_transport(Psn::from_masked(self.gsi.psn));
            self.gsi.psn = self.gsi.psn.wrapping_add(1) & 0xFF_FFFF;
            let Ok(len) = repr.emit(buf, &t.mad, &encap) else {
                self.gsi.counters.drop_unroutable += 1;
                continue;
            };
            self.gsi.counters.mads_sent += 1;
            self.dev.counters.packets_sent += 1;
            self.dev.counters.bytes_sent += len as u64;
            return Some(Transmit {
                to: SocketAddr::new(dst, ROCE_PORT),
                len,
            });
        }
        None
    }
}

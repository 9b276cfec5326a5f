//! The device's GSI endpoint (QP1): how the engine carries the connection
//! manager (spec/cm.md §7).
//!
//! Owns: the device's [`Cm`], the PSN counter of the MADs it sends and the
//! counters of datagrams sent to QP1 that are not MADs for it. The engine
//! calls in from three small hooks (receive, transmit, timers); everything
//! else about QP1 is here. QP number 1 is never handed to users (QPNs start at
//! `device::FIRST_QPN`).
//!
//! Promises: a datagram to QP1 reaches the CM only after the ICRC check and
//! [`wire::mad::check_gsi`]; anything else to QP1 is dropped and counted
//! ([`GsiCounters`]); everything the CM itself refuses it counts by
//! [`crate::cm::DropReason`]. MADs leave through the engine's
//! `poll_transmit`, so the driver's faults and capture apply to them.

use crate::cm::{Cm, CmConfig, CmCounters};
use crate::output::{Transmit, ROCE_PORT};
use crate::types::Gid;
use crate::Engine;
use std::net::{IpAddr, SocketAddr};
use wire::{mad, Encap, Psn, TransportRepr};

/// Datagrams for QP1 that never reached the CM, and MADs carried.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GsiCounters {
    /// MADs handed to the CM.
    pub mads_received: u64,
    /// MADs sent.
    pub mads_sent: u64,
    /// Dropped: sent to QP1 but not a GSI MAD (`check_gsi`: opcode, P_Key,
    /// Q_Key or length wrong).
    pub drop_not_gsi: u64,
    /// MADs the CM could not send: no route between the address families.
    pub drop_unroutable: u64,
}

/// QP1 of a device.
#[derive(Debug, Clone)]
pub(crate) struct Gsi {
    pub(crate) cm: Cm,
    psn: u32,
    counters: GsiCounters,
}

impl Gsi {
    /// The rdma_cm defaults (spec/cm.md §3.4, §4.6) for a device with this GID and GUID.
    pub(crate) fn new(gid: Gid, guid: u64, seed: u64) -> Gsi {
        Gsi {
            cm: Cm::new(CmConfig::rdma_cm(gid, guid, seed)),
            psn: 0,
            counters: GsiCounters::default(),
        }
    }
}

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

//! The device's GSI endpoint (QP1): how the engine carries the connection
//! manager (spec/cm.md §7).
//!
//! Owns: the device's [`Cm`], the PSN counter of the MADs it sends and the
//! counters of datagrams sent to QP1 that are not MADs for it. The engine
//! calls in from three small hooks (receive, transmit, timers); everything
//! else about QP1 is here (the hooks: datapath/gsi.rs). QP number 1 is never handed to users (QPNs start at
//! `device::FIRST_QPN`).
//!
//! Promises: a datagram to QP1 reaches the CM only after the ICRC check and
//! [`wire::mad::check_gsi`]; anything else to QP1 is dropped and counted
//! ([`GsiCounters`]); everything the CM itself refuses it counts by
//! [`crate::cm::DropReason`]. MADs leave through the engine's
//! `poll_transmit`, so the driver's faults and capture apply to them.

use crate::cm::{Cm, CmConfig};
use crate::types::Gid;

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
    pub(crate) psn: u32,
    pub(crate) counters: GsiCounters,
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

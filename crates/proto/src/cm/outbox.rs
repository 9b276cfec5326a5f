//! Where the CM's MADs and events wait for the owner, with the counters:
//! what every connection and SIDR exchange writes to. Sits below them.

use super::types::{CmCounters, CmEvent, Transmit};
use crate::types::Gid;
use std::collections::{BTreeSet, VecDeque};
use wire::mad::MAD_LEN;

/// Where MADs and events wait for the owner, and the counters.
#[derive(Debug, Clone, Default)]
pub(crate) struct Outbox {
    pub(super) tx: VecDeque<Transmit>,
    pub(super) events: VecDeque<CmEvent>,
    /// Connections destroyed by the owner that wait out their TimeWait
    /// (spec/cm.md §5.8): they still answer the peer, but their events have
    /// nobody to go to.
    pub(super) muted: BTreeSet<u32>,
    pub counters: CmCounters,
}

impl Outbox {
    pub fn send(&mut self, to: Gid, mad: [u8; MAD_LEN], retransmit: bool) {
        let attr = u16::from_be_bytes([mad[16], mad[17]]);
        if let Some(i) = CmCounters::slot(attr) {
            self.counters.sent[i] += 1;
            if retransmit {
                self.counters.retransmitted[i] += 1;
            }
        }
        self.tx.push_back(Transmit { to, mad });
    }

    pub fn event(&mut self, e: CmEvent) {
        if !self.muted.contains(&e.id().0) {
            self.events.push_back(e);
        }
    }
}

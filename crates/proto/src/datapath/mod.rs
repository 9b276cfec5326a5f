//! The data path of a device, sans IO: posting, completions, packets in and
//! out, timers and events.
//!
//! Call order for a driver (the I/O layer or the simulator):
//! - after any `post_*`: the QP may have packets to send, so poll transmit;
//! - for every datagram received: [`Engine::handle_datagram`];
//! - repeatedly: [`Engine::poll_transmit`] until it returns `None`, sending each;
//! - when [`Engine::poll_timeout`] is due: [`Engine::handle_timeout`];
//! - [`Engine::poll_event`] for completion-channel and async events.
//!
//! Time is nanoseconds on the driver's clock, passed in; memory is reached
//! through the [`crate::memory::Memory`] the driver passes in, only for ranges the memory
//! region table allowed.

mod gsi;
mod mcast;
mod post;
mod raw;
mod rx;
mod tx;

use crate::handle::{CqHandle, QpHandle};

pub use crate::frame::{Frame, RawCounters, DEFAULT_FRAME_MAX, ETH_HEADER_LEN, VLAN_TAG_LEN};

pub use crate::sched::TxClaims;
pub use lanes::LaneSet;

pub use crate::output::{
    AsyncEventKind, DeviceCounters, Event, EventElement, PostOutcome, Transmit, ROCE_PORT,
};

impl crate::Engine {
    /// The driver's clock, now (nanoseconds): the completions the engine makes
    /// from here on carry it (`WorkCompletion::timestamp_ns`, what
    /// `ibv_wc_read_completion_ts` reads). Kept per lane (the calling
    /// thread's, crate `lanes`): each lane's never goes back, and a thread
    /// writes no line another thread writes. Every driver call tells it
    /// first, so a completion carries its own call's time.
    pub fn set_now(&self, now: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let mine = self.dev.now.mine();
        // Threads beyond the lanes share one: the latest wins.
        if now > mine.load(Relaxed) {
            mine.fetch_max(now, Relaxed);
        }
    }

    /// The UDP port the driver sends from (covered by the ICRC).
    pub fn set_local_port(&mut self, port: u16) {
        self.dev.local_port = port;
    }

    /// Device counters, with the sum of every QP's counters.
    pub fn counters(&self) -> DeviceCounters {
        let mut c = DeviceCounters::default();
        for lane in self.dev.counters.all() {
            c.add(&lane.snapshot());
        }
        c.qps = self.dev.retired;
        for (_, q) in self.qps.iter() {
            c.qps.add(q.lock().counters());
        }
        c
    }

    /// A QP's counters.
    pub fn qp_counters(&self, h: QpHandle) -> Option<crate::qp::data::QpCounters> {
        self.qps.get(h).map(|q| *q.lock().counters())
    }

    /// Whether QP `h` still has a turn to send coming (it is in the ready
    /// queue, or asked to be): false once what was posted to it has left.
    pub fn qp_tx_pending(&self, h: QpHandle) -> bool {
        self.qps.get(h).is_some_and(|q| {
            let q = q.lock();
            q.dp.scheduled || q.dp.claimed || q.dp.wants_tx || q.send_ring().pending() > 0
        })
    }

    /// Whether the driver has something to do now besides timers: a QP or
    /// RAW_PACKET QP with a turn to send, a CM MAD to send, or an event to
    /// deliver. No side effects (a poller that handed the engine a datagram
    /// asks it before waking the progress thread).
    pub fn has_driver_work(&self) -> bool {
        self.has_driver_work_in(LaneSet::ALL)
    }

    /// [`Engine::has_driver_work`] as a transmit that reaches `lanes` would
    /// find it: only those lanes' ready QPs count (with the device's
    /// RAW_PACKET QPs, MADs and events). Takes no lock.
    pub fn has_driver_work_in(&self, lanes: LaneSet) -> bool {
        lanes.from(0).any(|i| !self.dev.ready.get(i).is_empty())
            || !self.dev.raw_ready.is_empty()
            || !self.dev.events.is_empty()
            || self.gsi_pending()
    }

    /// The lanes whose QPs wait: ready to send, or posted to and not yet
    /// drained (a driver leaves each to its own threads first). Takes no
    /// lock.
    pub fn busy_lanes(&self) -> LaneSet {
        (0..lanes::LANES)
            .filter(|&i| !self.dev.ready.get(i).is_empty() || self.rings.posted.any_in(i))
            .collect()
    }

    /// Next event for the driver.
    pub fn poll_event(&self) -> Option<Event> {
        self.dev.events.pop()
    }

    /// Attaches a completion channel id to a CQ (`None` detaches).
    pub fn set_cq_channel(
        &mut self,
        cq: CqHandle,
        channel: Option<u32>,
    ) -> Result<(), crate::Error> {
        let c = self.cqs.get_mut(cq).ok_or(crate::Error::NoSuchObject {
            kind: crate::error::ObjectKind::Cq,
            handle: cq.raw(),
        })?;
        c.channel = channel;
        Ok(())
    }
}

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

mod post;
mod rx;
mod state;
mod tx;

use crate::handle::{CqHandle, QpHandle};

pub use post::PostOutcome;

pub use crate::output::{AsyncEventKind, DeviceCounters, Event, EventElement, Transmit, ROCE_PORT};

impl crate::Engine {
    /// The UDP port the driver sends from (covered by the ICRC).
    pub fn set_local_port(&mut self, port: u16) {
        self.dev.local_port = port;
    }

    /// Device counters, with the sum of every QP's counters.
    pub fn counters(&self) -> DeviceCounters {
        let mut c = self.dev.counters;
        c.qps = self.dev.retired;
        for (_, q) in self.qps.iter() {
            c.qps.add(&q.dp.counters);
        }
        c
    }

    /// A QP's counters.
    pub fn qp_counters(&self, h: QpHandle) -> Option<crate::qp::data::QpCounters> {
        self.qps.get(h).map(|q| q.dp.counters)
    }

    /// Next event for the driver.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.dev.events.pop_front()
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

    /// What QP `q`'s responder needs to know.
    pub(crate) fn resp_env<'a>(
        q: &crate::engine::Qp,
        mrs: &'a crate::mr::MrTable,
        mem: &'a dyn crate::memory::Memory,
    ) -> crate::qp::responder::RespEnv<'a> {
        let a = q.ctl.attr();
        crate::qp::responder::RespEnv {
            qp_type: q.ctl.qp_type(),
            qpn: q.ctl.qpn(),
            dest_qpn: a.dest_qp_num,
            pd: q.pd,
            access: crate::types::AccessFlags(a.qp_access_flags),
            mtu: tx::path_mtu(a.path_mtu),
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            min_rnr_timer: a.min_rnr_timer,
            qkey: q.ctl.qkey_or_zero(),
            mrs,
            mem,
        }
    }

    pub(crate) fn schedule(&mut self, h: QpHandle) {
        if let Some(q) = self.qps.get_mut(h) {
            if !q.dp.scheduled {
                q.dp.scheduled = true;
                self.dev.ready.push_back(h);
            }
        }
    }
}

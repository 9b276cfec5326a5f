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

use crate::engine::{CqHandle, QpHandle, SrqHandle};
use std::collections::VecDeque;
use std::net::SocketAddr;

pub use post::PostOutcome;

/// The RoCEv2 UDP port.
pub const ROCE_PORT: u16 = 4791;

/// `enum ibv_event_type` (completions.md §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AsyncEventKind {
    /// CQ overrun.
    CqErr = 0,
    /// Local work-queue error; QP in ERR.
    QpFatal = 1,
    /// The responder saw an invalid request; QP in ERR.
    QpReqErr = 2,
    /// The responder saw an access violation; QP in ERR.
    QpAccessErr = 3,
    /// First packet received in RTR.
    CommEst = 4,
    /// SQD drain finished.
    SqDrained = 5,
    /// SRQ below its armed limit.
    SrqLimitReached = 15,
    /// A QP with an SRQ entered ERR.
    QpLastWqeReached = 16,
}

/// What an async event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventElement {
    /// A queue pair.
    Qp(QpHandle),
    /// A completion queue.
    Cq(CqHandle),
    /// A shared receive queue.
    Srq(SrqHandle),
}

/// Something a driver delivers to the application.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A CQ armed with `req_notify_cq` got a completion: deliver to its channel.
    Completion {
        /// The CQ.
        cq: CqHandle,
        /// Its completion channel.
        channel: u32,
    },
    /// An affiliated asynchronous event.
    Async {
        /// What happened.
        kind: AsyncEventKind,
        /// To which object.
        element: EventElement,
    },
}

/// A datagram to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Destination (port 4791).
    pub to: SocketAddr,
    /// Bytes written to the caller's buffer.
    pub len: usize,
}

/// Device-wide counters. The `drop_*` fields count datagrams the device
/// dropped before any QP saw them (roce-wire.md §7, in the order the checks
/// run); `qps` sums the counters of every QP the device has had, destroyed
/// ones included.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    /// Datagrams handed to the driver.
    pub packets_sent: u64,
    /// Datagrams received.
    pub packets_received: u64,
    /// UDP payload bytes handed to the driver.
    pub bytes_sent: u64,
    /// UDP payload bytes received.
    pub bytes_received: u64,
    /// Dropped: not a valid transport packet (bad header, unknown or reserved
    /// opcode, lengths that do not add up).
    pub drop_malformed: u64,
    /// Dropped: ICRC mismatch (corrupted on the way).
    pub drop_icrc: u64,
    /// Dropped: no QP with that number.
    pub drop_no_qp: u64,
    /// Dropped: the QP does not accept this packet (the sum of the four
    /// reasons below).
    pub drop_not_accepted: u64,
    /// Dropped: the opcode's transport (RC/UC/UD) is not the QP's type.
    pub drop_wrong_transport: u64,
    /// Dropped: the QP's state does not take this packet (requests need
    /// RTR/RTS/SQD/SQE, responses RTS/SQD).
    pub drop_qp_state: u64,
    /// Dropped: a connected QP got a packet from an address that is not its peer's.
    pub drop_wrong_peer: u64,
    /// Dropped: P_Key mismatch.
    pub drop_pkey: u64,
    /// Dropped by a QP (see the `drop_*` counters of the QPs).
    pub drop_by_qp: u64,
    /// The sum of all QPs' counters (retransmissions, timeouts, NAKs,
    /// duplicates, per-QP drops).
    pub qps: crate::qp::data::QpCounters,
}

impl DeviceCounters {
    /// Field-wise sum (totals over several devices).
    pub fn add(&mut self, o: &DeviceCounters) {
        macro_rules! sum {
            ($($f:ident),+) => { $(self.$f += o.$f;)+ };
        }
        sum!(
            packets_sent,
            packets_received,
            bytes_sent,
            bytes_received,
            drop_malformed,
            drop_icrc,
            drop_no_qp,
            drop_not_accepted,
            drop_wrong_transport,
            drop_qp_state,
            drop_wrong_peer,
            drop_pkey,
            drop_by_qp
        );
        self.qps.add(&o.qps);
    }
}

/// Device-wide data-path state.
#[derive(Debug)]
pub struct DeviceData {
    /// QPs that may have something to send, round robin.
    pub(crate) ready: VecDeque<QpHandle>,
    /// Events for the driver.
    pub(crate) events: VecDeque<Event>,
    /// The UDP source port packets leave from (the driver's socket).
    pub(crate) local_port: u16,
    /// Gather buffer for payloads (one MTU).
    pub(crate) scratch: Vec<u8>,
    /// Counters.
    pub(crate) counters: DeviceCounters,
    /// Counters of destroyed QPs.
    pub(crate) retired: crate::qp::data::QpCounters,
}

impl Default for DeviceData {
    fn default() -> Self {
        DeviceData {
            ready: VecDeque::new(),
            events: VecDeque::new(),
            local_port: ROCE_PORT,
            scratch: vec![0; 4096],
            counters: DeviceCounters::default(),
            retired: Default::default(),
        }
    }
}

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
        mrs: &'a crate::table::Table<crate::mr::Mr>,
        mem: &'a dyn crate::memory::Memory,
    ) -> crate::qp::responder::RespEnv<'a> {
        let a = q.ctl.attr();
        crate::qp::responder::RespEnv {
            qp_type: q.ctl.qp_type(),
            qpn: q.ctl.qpn(),
            dest_qpn: a.dest_qp_num,
            pd: q.pd,
            access: a.qp_access_flags,
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

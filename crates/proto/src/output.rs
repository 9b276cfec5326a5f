//! What the engine hands to its driver besides bytes: events, transmit
//! descriptors, device counters and what became of a post. Plain data; sits on [`crate::handle`] and
//! [`crate::qp::data`] only.

use crate::handle::{CqHandle, QpHandle, SrqHandle};
use std::net::SocketAddr;

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
    /// A run of several packets (crate::run): only from
    /// `Engine::poll_transmit_run`, only to a peer reached intact.
    pub segments: Option<crate::run::Segments>,
}

/// Buffers of a driver's transmit batch, which one turn of a QP fills in
/// order ([`crate::Engine::poll_transmit_burst`]).
pub trait Burst {
    /// The next free buffer (a path MTU of payload and its headers at
    /// least), if the batch has one.
    fn buffer(&mut self) -> Option<&mut [u8]>;
    /// `t` was built at the start of the buffer last given.
    fn built(&mut self, t: &Transmit);
}

/// Room in the carrier of a datagram built in place: a driver's offer of
/// the same-host ring to a peer, where the engine builds a datagram while
/// it holds the QP's lock, so that it leaves with no transmit turn (and no
/// claim to keep its order) of its own (spec/performance.md §25). Offered
/// to a receive, for the responses it makes (an RC QP's ACK, READ
/// response, atomic ACK; `Engine::handle_local_datagram` with room), and
/// to a post, for its packets (`Engine::transmit_posted_through`); used
/// only while no transmitting thread claims the QP (none holds a packet of
/// it that has yet to leave).
pub trait Room {
    /// Room for one datagram to `to`, QP `qpn`, of up to a path MTU of
    /// payload and its headers, if the driver can publish one there now.
    fn room(&mut self, to: SocketAddr, qpn: u32) -> Option<&mut [u8]>;
    /// Publishes `t`, built at the start of the room last given.
    fn publish(&mut self, t: &Transmit);
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
    /// Same-host path datagrams of RC, UC or XRC accepted without an ICRC
    /// check ([`crate::Engine::handle_local_datagram`]; a run,
    /// [`crate::Engine::handle_local_run`], counts once).
    pub icrc_unchecked: u64,
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

/// The fields [`DeviceCounters`] and [`DeviceCounterCells`] share.
macro_rules! device_counter_fields {
    ($m:ident) => {
        $m! {
            packets_sent,
            packets_received,
            bytes_sent,
            bytes_received,
            drop_malformed,
            drop_icrc,
            icrc_unchecked,
            drop_no_qp,
            drop_not_accepted,
            drop_wrong_transport,
            drop_qp_state,
            drop_wrong_peer,
            drop_pkey,
            drop_by_qp
        }
    };
}

impl DeviceCounters {
    /// Field-wise sum (totals over several devices).
    pub fn add(&mut self, o: &DeviceCounters) {
        macro_rules! sum {
            ($($f:ident),+) => { $(self.$f += o.$f;)+ };
        }
        device_counter_fields!(sum);
        self.qps.add(&o.qps);
    }
}

/// The device-wide fields of [`DeviceCounters`] as the data path counts
/// them: each thread adds to its own slot's cells (`lanes::Tally`, `lanes::Count`).
macro_rules! cells {
    ($($f:ident),+) => {
        /// [`DeviceCounters`] (without `qps`) as counters threads add to:
        /// one set per counting slot (`lanes::Tally`).
        #[derive(Debug)]
        pub struct DeviceCounterCells {
            $(
                #[doc = concat!("[`DeviceCounters::", stringify!($f), "`]")]
                pub $f: lanes::Count,
            )+
        }

        impl DeviceCounterCells {
            /// Zero counts; `shared`: the shared slot's ([`lanes::Count::new`]).
            pub fn new(shared: bool) -> Self {
                DeviceCounterCells { $($f: lanes::Count::new(shared),)+ }
            }

            /// The counts now (`qps` zero).
            pub fn snapshot(&self) -> DeviceCounters {
                DeviceCounters {
                    $($f: self.$f.get(),)+
                    qps: Default::default(),
                }
            }
        }
    };
}
device_counter_fields!(cells);

/// What became of a posted WR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostOutcome {
    /// Queued (processed now or when the state allows).
    Queued,
    /// The QP is in ERR (or SQE for sends): completed at once with `WR_FLUSH_ERR`.
    Flushed,
}

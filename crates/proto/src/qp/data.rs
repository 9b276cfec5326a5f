//! The data-path state of one QP, beside its control state: queues, requester,
//! responder, timers and counters.

use super::requester::Requester;
use super::responder::Responder;
use super::wqe::{RecvQueue, SendQueue};

/// Per-QP counters, readable through the API.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpCounters {
    /// Packets sent (requests and responses).
    pub packets_sent: u64,
    /// Packets received and accepted for this QP.
    pub packets_received: u64,
    /// Payload bytes sent.
    pub bytes_sent: u64,
    /// Payload bytes received.
    pub bytes_received: u64,
    /// Go-back-N rounds (timeouts, sequence NAKs, RNR waits, implied NAKs).
    pub retransmit_rounds: u64,
    /// Local ACK timeouts that fired.
    pub timeouts: u64,
    /// RNR NAKs sent by the responder.
    pub rnr_naks_sent: u64,
    /// RNR NAKs received by the requester.
    pub rnr_naks_received: u64,
    /// PSN-sequence NAKs sent.
    pub seq_naks_sent: u64,
    /// PSN-sequence NAKs received.
    pub seq_naks_received: u64,
    /// Duplicate requests seen by the responder.
    pub duplicates: u64,
    /// Packets dropped by this QP (sequence, Q_Key, no WQE on UC/UD, errors).
    pub dropped: u64,
}

/// Queues, transport state and timers of one QP.
#[derive(Debug, Default)]
pub struct QpData {
    /// Send queue.
    pub sq: SendQueue,
    /// Own receive queue (unused with an SRQ).
    pub rq: RecvQueue,
    /// Send side.
    pub req: Requester,
    /// Receive side.
    pub resp: Responder,
    /// Local ACK timer (RC): absolute deadline in ns.
    pub ack_deadline: Option<u64>,
    /// RNR wait (RC): no request goes out before this.
    pub rnr_until: Option<u64>,
    /// In the engine's transmit schedule.
    pub scheduled: bool,
    /// COMM_EST was raised (first packet in RTR).
    pub comm_est: bool,
    /// Counters.
    pub counters: QpCounters,
}

//! The data-path state of one QP, beside its control state: queues, requester,
//! responder, timers and counters.

use super::requester::Requester;
use super::responder::Responder;
use super::wqe::{RecvQueue, SendQueue};

/// Per-QP counters, readable through the API. All count since the QP was
/// created (a move to RESET keeps them). Requester-side counters are about the
/// requests this QP sends and the responses it gets; responder-side ones about
/// the requests it receives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpCounters {
    /// Packets sent (requests and responses, retransmissions included).
    pub packets_sent: u64,
    /// Packets received and accepted for this QP (before the QP's own checks).
    pub packets_received: u64,
    /// Payload bytes sent.
    pub bytes_sent: u64,
    /// Payload bytes received.
    pub bytes_received: u64,
    /// Requester: request packets sent again by go-back-N (each resent packet).
    pub retransmitted_packets: u64,
    /// Requester: go-back-N rounds started (ACK timeouts with budget left,
    /// sequence NAKs, RNR NAKs, implied NAKs, READ response gaps).
    pub retransmit_rounds: u64,
    /// Requester: local ACK timeouts that fired with PSNs outstanding.
    pub timeouts: u64,
    /// Requester: ACKs beyond an unanswered READ/atomic (its response was lost)
    /// that started a retry round.
    pub implied_naks: u64,
    /// Requester: READ responses that arrived after a gap and started a
    /// resend of the READ from the missing packet (once per gap).
    pub read_gaps: u64,
    /// Responder: RNR NAKs sent (no receive WQE).
    pub rnr_naks_sent: u64,
    /// Requester: RNR NAKs received.
    pub rnr_naks_received: u64,
    /// Responder: PSN-sequence-error NAKs sent.
    pub seq_naks_sent: u64,
    /// Requester: PSN-sequence-error NAKs received.
    pub seq_naks_received: u64,
    /// Responder: fatal NAKs sent (invalid request, remote access, remote operational).
    pub error_naks_sent: u64,
    /// Requester: fatal NAKs received.
    pub error_naks_received: u64,
    /// Responder: duplicate requests received (the sum of the four kinds below).
    pub duplicates: u64,
    /// Responder: duplicate SEND/WRITE packets, re-ACKed, not executed again.
    pub dup_acked: u64,
    /// Responder: duplicate READ requests answered again from memory.
    pub dup_reads_answered: u64,
    /// Responder: duplicate atomics answered from the saved original value.
    pub dup_atomics_answered: u64,
    /// Responder: duplicate READ/atomic requests with no matching saved
    /// resource, dropped.
    pub dup_dropped: u64,
    /// Requester: responses ignored (stale or duplicate ACKs, responses for PSNs
    /// not outstanding, out-of-order READ response packets).
    pub stale_responses: u64,
    /// Packets this QP dropped (the sum of the `drop_*` reasons below).
    pub dropped: u64,
    /// Dropped: PSN out of sequence after the one NAK (RC), or a UC sequence break.
    pub drop_sequence: u64,
    /// Dropped: Q_Key mismatch (UD).
    pub drop_qkey: u64,
    /// Dropped: no receive WQE on UC/UD (RC answers with an RNR NAK instead).
    pub drop_no_recv_wqe: u64,
    /// Dropped: a UC/UD request IBA answers with a silent drop (bad opcode for
    /// the state, length, access, receive buffer too small).
    pub drop_invalid: u64,
    /// Packets sent without an ICRC: their peer is reached with intact
    /// datagrams and does not check it (crate::intact).
    pub packets_unsealed: u64,
    /// Datagrams that carried a run of packets (crate::run); their packets
    /// count in `packets_sent` one by one.
    pub runs_sent: u64,
    /// Runs received (crate::run); their packets count in
    /// `packets_received` one by one.
    pub runs_received: u64,
}

impl QpCounters {
    /// Field-wise sum (device totals).
    pub fn add(&mut self, o: &QpCounters) {
        macro_rules! sum {
            ($($f:ident),+) => { $(self.$f += o.$f;)+ };
        }
        sum!(
            packets_sent,
            packets_received,
            bytes_sent,
            bytes_received,
            retransmitted_packets,
            retransmit_rounds,
            timeouts,
            implied_naks,
            read_gaps,
            rnr_naks_sent,
            rnr_naks_received,
            seq_naks_sent,
            seq_naks_received,
            error_naks_sent,
            error_naks_received,
            duplicates,
            dup_acked,
            dup_reads_answered,
            dup_atomics_answered,
            dup_dropped,
            stale_responses,
            dropped,
            drop_sequence,
            drop_qkey,
            drop_no_recv_wqe,
            drop_invalid,
            packets_unsealed,
            runs_sent,
            runs_received
        );
    }
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
    /// The last packet sent was a request that went ahead of waiting
    /// responses: the next goes to a response ([`super::actor::Qp::next_packet`]).
    pub request_ahead: bool,
    /// In the engine's ready queue (the engine's flag, kept beside the QP).
    pub scheduled: bool,
    /// The lane (crate `lanes`) of the thread that last posted to it,
    /// whose ready queue it waits in (the engine's; `None`: never posted
    /// to, it waits in the lane of the thread whose call made it ready).
    pub home: Option<u8>,
    /// Its packets may sit in a transmitting thread's batch, not yet on the
    /// wire: only that thread gives it turns until it lets go
    /// ([`crate::sched::TxClaims`]); the engine's flag.
    pub claimed: bool,
    /// The deadline the engine's timer heap holds for this QP (the engine's):
    /// its own deadline or earlier, never later.
    pub in_heap: Option<u64>,
    /// Something happened that may let the QP send (set by the QP, taken by
    /// the engine's scheduler).
    pub wants_tx: bool,
    /// COMM_EST was raised (first packet in RTR).
    pub comm_est: bool,
    /// Counters.
    pub counters: QpCounters,
    /// The responder's completions buffer, reused from packet to packet.
    pub resp_wcs: Vec<(crate::wc::WorkCompletion, bool)>,
    /// The completer's completions buffer, reused from packet to packet.
    pub comp_wcs: Vec<crate::wc::WorkCompletion>,
    /// The request packet being sent, built here by the requester in place
    /// (a representation is ≈ 170 bytes: no copy out of the builder).
    pub pkt: super::requester::ReqPacket,
    /// Why the last bind or invalidation on this QP was refused (its
    /// completion carries only the status).
    pub window_error: Option<crate::mr::mw::MwError>,
    /// Whether its peer is reached with intact datagrams, as last asked
    /// (crate::intact).
    pub intact: crate::intact::IntactCache,
}

impl QpData {
    /// Fresh data-path state whose queues keep up to their depth of retired
    /// WQEs for reuse (see [`super::wqe`]).
    /// The receive queue is fed by `ring`, the send queue by `send_ring`
    /// (the QP's own, kept across RESET).
    pub fn with_capacity(
        cap: crate::types::QpCap,
        ring: std::sync::Arc<crate::rq::RecvRing>,
        send_ring: std::sync::Arc<crate::sq::SendRing>,
    ) -> QpData {
        QpData {
            sq: SendQueue::with_ring(cap.max_send_wr as usize, send_ring),
            rq: RecvQueue::with_ring(cap.max_recv_wr as usize, ring),
            ..QpData::default()
        }
    }
}

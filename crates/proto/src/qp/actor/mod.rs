//! One queue pair as a serialized actor, as quinn-proto's `Connection` is for
//! a QUIC connection.
//!
//! A [`Qp`] owns everything that changes when one QP works: its control state
//! ([`QpControl`]), its send and receive queues, its requester (with the
//! completer and the retry budgets), its responder, its two timers (local ACK
//! timeout, RNR wait) and its counters. It is driven through a small
//! input/effect interface, and only the engine calls it, one call at a time:
//!
//! | input                              | what it is                              |
//! |------------------------------------|-----------------------------------------|
//! | [`Qp::post_send`], [`Qp::post_recv`] | an accepted work request                |
//! | [`Qp::on_packet`]                  | a request or response addressed to it   |
//! | [`Qp::on_timeout`]                 | its deadline ([`Qp::deadline`]) passed  |
//! | [`Qp::on_modify`]                  | a successful `ibv_modify_qp`            |
//! | [`Qp::next_packet`]                | the engine's turn to let it send one    |
//!
//! Effects leave through a [`Sink`] the engine passes in: completions (the
//! sink reports a CQ overrun at once, so the QP goes to ERR at the same point
//! a NIC would), affiliated async events, SRQ queues and their limit checks.
//! What the engine's scheduler needs it reads after each call: whether the QP
//! has something to send ([`Qp::take_wants_tx`]) and its next deadline.
//!
//! Sits on: the QP's parts (`super::{requester, completer, responder, wqe,
//! sgl, data}`), [`crate::handle`], [`crate::output`], [`crate::mr`], wire.

mod local;
pub mod raw;
mod rx;
mod state;
mod tx;

use super::data::{QpCounters, QpData};
use super::wqe::{RecvQueue, RecvWqe, SendWqe, UdDest};
use super::QpControl;
use crate::handle::{CqHandle, PdHandle, SrqHandle};
use crate::memory::Memory;
use crate::mr::MrTable;
use crate::output::AsyncEventKind;
use crate::types::{Gid, Mtu, QpState};
use crate::wc::{wc_opcode_for, WcOpcode, WorkCompletion};
use crate::wr::{RecvWr, SendWr};
use wire::{Psn, TransportRepr};

/// Where a QP's effects go. The engine implements it over its CQ and SRQ
/// tables and its event queue.
pub trait Sink {
    /// Adds a completion to CQ `cq` (raising its channel event if armed).
    /// False when the CQ overran: the sink has raised `IBV_EVENT_CQ_ERR`.
    fn complete(&mut self, cq: CqHandle, wc: WorkCompletion, solicited: bool) -> bool;
    /// Raises an affiliated async event about this QP.
    fn qp_event(&mut self, kind: AsyncEventKind);
    /// The receive queue of SRQ `srq`.
    fn srq_queue(&mut self, srq: SrqHandle) -> Option<&mut RecvQueue>;
    /// A WQE was taken from SRQ `srq`: check its armed limit.
    fn srq_taken(&mut self, srq: SrqHandle);
    /// XRC: the SRQ number `srqn` names, if it is an XRC SRQ of `domain`.
    fn xrc_target(
        &mut self,
        srqn: u32,
        domain: u32,
    ) -> Result<crate::xrcd::XrcTarget, crate::xrcd::XrcMiss>;
}

/// What a QP reads from its device while it works.
pub struct QpEnv<'a> {
    /// The QP's own handle (type 2 windows are bound to one QP).
    pub qp: crate::handle::QpHandle,
    /// Memory windows: read by remote accesses, changed by binds and
    /// invalidations (in this QP's turn only).
    pub mws: &'a crate::lock::ReadMostly<crate::mr::mw::MwTable>,
    /// Memory regions (every local and remote access is checked against them).
    pub mrs: &'a MrTable,
    /// Memory, reached only for ranges the MR table allowed.
    pub mem: &'a dyn Memory,
    /// The port's GIDs (source addresses).
    pub gids: &'a [Gid],
    /// The port's active MTU in bytes (UD messages).
    pub port_mtu: u32,
    /// The UDP source port packets leave from (covered by the ICRC).
    pub local_port: u16,
    /// The peers reached with intact datagrams (crate::intact).
    pub intact: &'a crate::intact::IntactPeers,
}

/// A packet the engine accepted for this QP (roce-wire.md §7 steps 1–6 passed).
pub struct Packet<'a> {
    /// Headers.
    pub repr: &'a TransportRepr,
    /// Payload bytes.
    pub payload: &'a [u8],
    /// The 40-byte GRH area a UD receive buffer gets (requests only).
    pub grh: &'a [u8; 40],
}

/// What posting resolved for a send WR besides the WR itself.
#[derive(Debug, Clone, Copy)]
pub struct PostedSend<'a> {
    /// The QP is in ERR (or SQE): the WR completes at once with `WR_FLUSH_ERR`.
    pub flushed: bool,
    /// The bytes of an `IBV_SEND_INLINE` WR.
    pub inline: Option<&'a [u8]>,
    /// A UD WR's destination, resolved from its address handle.
    pub ud: Option<UdDest>,
    /// XRC_SEND: the remote XRC SRQ number (`qp_type.xrc.remote_srqn`).
    pub xrc_srqn: u32,
}

/// A queue pair: the objects it uses, its control state and its data path.
#[derive(Debug)]
pub struct Qp {
    /// Protection domain.
    pub pd: PdHandle,
    /// Send CQ.
    pub send_cq: CqHandle,
    /// Receive CQ.
    pub recv_cq: CqHandle,
    /// SRQ, if receives come from one.
    pub srq: Option<SrqHandle>,
    /// XRC_RECV: its XRC domain (receives go to the SRQ each request names).
    pub xrc: Option<crate::xrcd::XrcLink>,
    /// XRC_RECV: the CQ of the SRQ whose WQE the message in progress holds
    /// (its error or flush completion goes there).
    pub(crate) xrc_msg_cq: Option<CqHandle>,
    /// XRC_RECV: the SRQ number the FIRST of the message in progress named
    /// (its MIDDLE and LAST must name the same, spec/xrc.md §4).
    pub(crate) xrc_msg_srqn: Option<u32>,
    /// RAW_PACKET: the largest TSO header its WRs may carry
    /// (`max_tso_header`; 0: no TSO, spec/raw-packet.md §4).
    pub(crate) max_tso_header: u16,
    /// The control-path state.
    pub ctl: QpControl,
    /// The data-path state (queues, requester, responder, timers).
    pub(crate) dp: QpData,
}

impl Qp {
    /// A new QP in RESET.
    pub fn new(
        pd: PdHandle,
        cqs: (CqHandle, CqHandle),
        srq: Option<SrqHandle>,
        ctl: QpControl,
        send_ring: std::sync::Arc<crate::sq::SendRing>,
    ) -> Qp {
        let cap = ctl.cap();
        let ring = crate::rq::RecvRing::new(cap.max_recv_wr, cap.max_recv_sge, srq.is_some());
        let dp = QpData::with_capacity(cap, std::sync::Arc::new(ring), send_ring);
        Qp {
            pd,
            send_cq: cqs.0,
            recv_cq: cqs.1,
            srq,
            xrc: None,
            xrc_msg_cq: None,
            xrc_msg_srqn: None,
            max_tso_header: 0,
            ctl,
            dp,
        }
    }

    /// When [`Qp::on_timeout`] is next due (the earlier of its two timers).
    #[inline]
    pub fn deadline(&self) -> Option<u64> {
        match (self.dp.ack_deadline, self.dp.rnr_until) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, None) => x,
            (None, y) => y,
        }
    }

    /// True (once) if the QP may have a packet to send since the engine last asked.
    #[inline]
    pub fn take_wants_tx(&mut self) -> bool {
        std::mem::take(&mut self.dp.wants_tx)
    }

    /// Next PSN the requester starts a message at.
    pub fn sq_psn(&self) -> Psn {
        self.dp.req.next_psn()
    }

    /// Oldest PSN the requester waits an acknowledgement for.
    pub fn una(&self) -> Psn {
        self.dp.req.una()
    }

    /// Next PSN the responder expects.
    pub fn epsn(&self) -> Psn {
        self.dp.resp.epsn
    }

    /// The QP's counters.
    pub fn counters(&self) -> &QpCounters {
        &self.dp.counters
    }

    /// Why the last bind or invalidation executed on this QP (a local
    /// operation, or a received SEND_WITH_INV) was refused.
    pub fn window_error(&self) -> Option<&crate::mr::mw::MwError> {
        self.dp.window_error.as_ref()
    }

    /// Send WQEs posted and not yet retired.
    pub fn send_queue_len(&self) -> usize {
        self.dp.sq.len()
    }

    /// Signaled send WQEs not yet completed: each will add one completion
    /// (success, error or flush) to the send CQ.
    pub fn signaled_sends(&self) -> usize {
        self.dp.sq.wqes.iter().filter(|w| w.signaled).count()
    }

    /// The ring the application posts receives into (proto::rq).
    pub fn recv_ring(&self) -> &std::sync::Arc<crate::rq::RecvRing> {
        self.dp
            .rq
            .ring()
            .expect("a QP's own receive queue has its ring")
    }

    /// The ring the application posts sends into (proto::sq).
    pub fn send_ring(&self) -> &std::sync::Arc<crate::sq::SendRing> {
        self.dp.sq.ring().expect("a QP's send queue has its ring")
    }

    /// Moves what the send ring holds into the send queue, in posting order:
    /// queued as [`Qp::post_send`] queues an accepted WR, or, if the QP is in
    /// ERR or SQE by now, completed with `WR_FLUSH_ERR` (in RESET: discarded)
    /// — except behind older WQEs that a move to ERR is about to flush: those
    /// it joins, so the flush keeps the posting order.
    /// The engine calls it before every call on the QP.
    pub fn take_posted(&mut self, sink: &mut impl Sink) {
        let ring = self.send_ring();
        if ring.pending() == 0 {
            return;
        }
        let ring = ring.clone();
        let state = self.ctl.state();
        // A move to ERR takes the ring before it flushes the send queue (the
        // turn of `Engine::modify_qp` calls this before `on_modify`): while
        // older WQEs still wait in the queue, the ring's join them, and that
        // flush completes them all in posting order. Once the QP is in ERR
        // the queue is empty and a post is flushed at once.
        let flush = match state {
            QpState::Err => self.dp.sq.is_empty(),
            QpState::Sqe => true,
            _ => false,
        };
        ring.drain(|d| match state {
            _ if flush => {
                ring.taken(1);
                let posted = PostedSend {
                    flushed: true,
                    inline: None,
                    ud: None,
                    xrc_srqn: 0,
                };
                self.post_send(&d.wr, posted, sink);
            }
            QpState::Reset => ring.taken(1),
            _ => {
                let posted = PostedSend {
                    flushed: false,
                    inline: d.inline,
                    ud: d.ud,
                    xrc_srqn: d.xrc_srqn,
                };
                self.post_send(&d.wr, posted, sink);
            }
        });
    }

    /// After the QP's state changed (or a post raced a change): WQEs posted on
    /// the ring while the QP is in ERR are flushed, in RESET discarded.
    pub fn settle_recv(&mut self, sink: &mut impl Sink) {
        match self.ctl.state() {
            QpState::Err => {
                let (qpn, cq) = (self.ctl.qpn(), self.recv_cq);
                while let Some(w) = self.dp.rq.pop_front() {
                    sink.complete(cq, flush_wc_recv(&w, qpn), true);
                    self.dp.rq.recycle(w);
                }
            }
            QpState::Reset => self.dp.rq.clear(),
            _ => {}
        }
    }

    /// Receive WQEs waiting on the QP's own receive queue.
    pub fn recv_queue_len(&self) -> usize {
        self.dp.rq.len()
    }

    /// An accepted send WR (`ud`: its resolved UD destination, `inline`: its
    /// gathered inline bytes): queued in a recycled WQE, or (`flushed`: the QP
    /// is in ERR/SQE) completed at once with `WR_FLUSH_ERR`, which a CQ overrun
    /// does not turn into a QP error (the QP is in error already).
    pub fn post_send(&mut self, wr: &SendWr<'_>, posted: PostedSend<'_>, sink: &mut impl Sink) {
        if posted.flushed {
            let op = wc_opcode_for(wr.opcode).unwrap_or(WcOpcode::Send);
            let wc = WorkCompletion::flush(wr.wr_id, self.ctl.qpn(), op);
            sink.complete(self.send_cq, wc, false);
            return;
        }
        debug_assert!(
            self.dp.sq.len() < self.ctl.cap().max_send_wr as usize,
            "posting checked the send queue depth"
        );
        let sig_all = self.ctl.sq_sig_all();
        self.dp.sq.push(wr, sig_all, posted.inline, posted.ud);
        if let Some(w) = self.dp.sq.wqes.back_mut() {
            w.xrc_srqn = posted.xrc_srqn;
        }
        self.wake();
    }

    /// A send WR posted under the engine without the ring (RAW_PACKET QPs):
    /// counted on the ring as a ring post is, so the queue's count stays one.
    pub(crate) fn count_direct_post(&self) {
        self.send_ring().count_direct();
    }

    /// A receive WR posted while the QP is in ERR: it completes at once with
    /// `WR_FLUSH_ERR` (accepted WRs in other states go on the QP's receive
    /// ring, [`crate::rq::RecvRing::post`], without the engine).
    pub fn post_recv_flushed(&mut self, wr: &RecvWr<'_>, sink: &mut impl Sink) {
        let wc = WorkCompletion::flush(wr.wr_id, self.ctl.qpn(), WcOpcode::Recv);
        sink.complete(self.recv_cq, wc, true);
    }

    /// The engine should give this QP a turn to send.
    #[inline]
    fn wake(&mut self) {
        self.dp.wants_tx = true;
    }

    /// Adds a completion; an overrun of a completion the QP itself made moves
    /// the QP to ERR with `IBV_EVENT_QP_FATAL` (completions.md §7.2).
    fn complete(
        &mut self,
        sink: &mut impl Sink,
        cq: CqHandle,
        wc: WorkCompletion,
        solicited: bool,
    ) {
        if !sink.complete(cq, wc, solicited) {
            self.enter_error(AsyncEventKind::QpFatal, sink);
        }
    }
}

/// Path MTU in bytes (an unset attribute holds the default, 1024).
pub(crate) fn path_mtu(mtu: Mtu) -> u32 {
    mtu.bytes()
}

/// The IP address of local GID `index` (the first one if out of range).
pub(crate) fn gid_ip(gids: &[Gid], index: u8) -> std::net::IpAddr {
    gids.get(usize::from(index))
        .or(gids.first())
        .copied()
        .unwrap_or(Gid::ZERO)
        .ip()
}

/// The `WR_FLUSH_ERR` completion of a send WQE.
fn flush_wc_send(w: &SendWqe, qpn: u32) -> WorkCompletion {
    let op = wc_opcode_for(w.opcode).unwrap_or(WcOpcode::Send);
    WorkCompletion::flush(w.wr_id, qpn, op)
}

/// The `WR_FLUSH_ERR` completion of a receive WQE.
fn flush_wc_recv(w: &RecvWqe, qpn: u32) -> WorkCompletion {
    WorkCompletion::flush(w.wr_id, qpn, WcOpcode::Recv)
}

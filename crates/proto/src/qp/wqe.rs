//! Work-queue entries: what an accepted work request becomes inside a QP, and
//! the bounded queues that hold them in posting order.
//!
//! Allocation: a retired WQE goes back to its queue's free list (at most the
//! queue's depth of them) with its gather list and inline buffer, so once a
//! queue has held as many WQEs as it ever will at once, posting reuses them
//! and allocates nothing: the queue and the buffers only grow, amortized, to
//! the most WQEs outstanding and the largest gather list / inline payload
//! seen. Nothing is reserved up front, so an idle deep queue costs nothing.

use crate::rq::RecvRing;
use crate::sq::SendRing;
use crate::wr::{ImmData, RecvWr, SendFlags, SendWr, Sge, WrOpcode, WrTarget};
use std::collections::VecDeque;
use std::sync::Arc;
use wire::Psn;

pub use crate::sq::UdDest;

/// A send work request in the send queue.
#[derive(Debug, Clone)]
pub struct SendWqe {
    /// From the WR.
    pub wr_id: u64,
    /// From the WR.
    pub opcode: WrOpcode,
    /// From the WR.
    pub flags: SendFlags,
    /// Gather list (SEND/WRITE) or scatter list (READ, atomic result).
    pub sges: Vec<Sge>,
    /// Inline payload copied at post time (meaningful when `has_inline`).
    inline_buf: Vec<u8>,
    /// The WR was `IBV_SEND_INLINE`: the payload is `inline_buf`.
    has_inline: bool,
    /// Immediate data.
    pub imm: ImmData,
    /// Remote part.
    pub target: WrTarget,
    /// UD destination.
    pub ud: Option<UdDest>,
    /// Message length in bytes.
    pub len: u64,
    /// Generates a completion on success.
    pub signaled: bool,
    /// First PSN (valid once started).
    pub first_psn: Psn,
    /// PSNs the message occupies (READ: its response packets).
    pub npsn: u32,
    /// Packets of the request sent so far (READ/atomic: 0 or 1).
    pub sent_pkts: u32,
    /// READ: response bytes placed so far.
    pub read_done: u64,
    /// Completed (acknowledged, answered, or sent for UC/UD).
    pub done: bool,
    /// READ: the `read_done` at which responses were found missing and asked
    /// for again (once per gap, not once per stale packet behind it).
    pub read_reasked: Option<u64>,
    /// Failed locally (RC gather error) while older WQEs were still
    /// outstanding: it completes with this status once it reaches the front.
    pub failed: Option<crate::wc::WcStatus>,
    /// XRC_SEND: the remote XRC SRQ number the XRCETH names (spec/xrc.md §3).
    pub xrc_srqn: u32,
    /// RAW_PACKET `IBV_WR_TSO`: the header each segment starts with
    /// (crate::tso); its buffer is reused like the inline one.
    pub tso_hdr: Vec<u8>,
    /// RAW_PACKET `IBV_WR_TSO`: the segment size; 0 for any other WQE.
    pub tso_mss: u16,
}

impl SendWqe {
    /// A WQE for an accepted WR. `inline` holds the gathered inline bytes.
    pub fn new(
        wr: &SendWr<'_>,
        sq_sig_all: bool,
        inline: Option<&[u8]>,
        ud: Option<UdDest>,
    ) -> SendWqe {
        let mut w = SendWqe {
            wr_id: 0,
            opcode: wr.opcode,
            flags: wr.flags,
            sges: Vec::new(),
            inline_buf: Vec::new(),
            has_inline: false,
            imm: wr.imm_data,
            target: wr.target,
            ud,
            len: 0,
            signaled: false,
            first_psn: Psn::default(),
            npsn: 0,
            sent_pkts: 0,
            read_done: 0,
            done: false,
            read_reasked: None,
            failed: None,
            xrc_srqn: 0,
            tso_hdr: Vec::new(),
            tso_mss: 0,
        };
        w.fill(wr, sq_sig_all, inline, ud);
        w
    }

    /// Makes this (recycled) WQE the one for `wr`, reusing its buffers.
    pub fn fill(
        &mut self,
        wr: &SendWr<'_>,
        sq_sig_all: bool,
        inline: Option<&[u8]>,
        ud: Option<UdDest>,
    ) {
        self.sges.clear();
        self.sges.extend_from_slice(wr.sg_list);
        self.inline_buf.clear();
        self.has_inline = inline.is_some();
        if let Some(bytes) = inline {
            self.inline_buf.extend_from_slice(bytes);
        }
        self.len = match inline {
            Some(bytes) => bytes.len() as u64,
            None => crate::wr::sg_total_len(wr.sg_list),
        };
        self.wr_id = wr.wr_id;
        self.opcode = wr.opcode;
        self.flags = wr.flags;
        self.imm = wr.imm_data;
        self.target = wr.target;
        self.ud = ud;
        self.signaled = sq_sig_all || wr.flags.contains(SendFlags::SIGNALED);
        self.first_psn = Psn::default();
        self.npsn = 0;
        self.sent_pkts = 0;
        self.read_done = 0;
        self.done = false;
        self.read_reasked = None;
        self.failed = None;
        self.xrc_srqn = 0;
        self.tso_hdr.clear();
        self.tso_mss = 0;
    }

    /// The inline payload, if the WR was `IBV_SEND_INLINE`.
    pub fn inline(&self) -> Option<&[u8]> {
        self.has_inline.then_some(&self.inline_buf[..])
    }

    /// Last PSN of the message.
    pub fn last_psn(&self) -> Psn {
        self.first_psn.wrapping_add(self.npsn.saturating_sub(1))
    }

    /// READ or atomic: answered by a response, counted against `max_rd_atomic`.
    pub fn is_rd_atomic(&self) -> bool {
        self.opcode.answered_by_response()
    }

    /// Bytes the response carries: the READ's length; 0 for the zero-length
    /// READ response that answers ATOMIC_WRITE and FLUSH.
    pub fn response_len(&self) -> u64 {
        if self.opcode == WrOpcode::RdmaRead {
            self.len
        } else {
            0
        }
    }

    /// Request packets this message needs at path MTU `mtu`.
    pub fn request_packets(&self, mtu: u32) -> u32 {
        if self.is_rd_atomic() {
            1
        } else {
            packets_for(self.len, mtu)
        }
    }
}

/// Packets for a `len`-byte message at path MTU `mtu` (at least one).
pub fn packets_for(len: u64, mtu: u32) -> u32 {
    len.div_ceil(u64::from(mtu)).max(1) as u32
}

/// A receive work request waiting for a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWqe {
    /// From the WR.
    pub wr_id: u64,
    /// Scatter list.
    pub sges: Vec<Sge>,
}

impl RecvWqe {
    /// A WQE for an accepted WR.
    pub fn new(wr: &RecvWr<'_>) -> RecvWqe {
        RecvWqe {
            wr_id: wr.wr_id,
            sges: wr.sg_list.to_vec(),
        }
    }

    /// Makes this (recycled) WQE the one for `wr`, reusing its gather list.
    pub fn fill(&mut self, wr: &RecvWr<'_>) {
        self.wr_id = wr.wr_id;
        self.sges.clear();
        self.sges.extend_from_slice(wr.sg_list);
    }

    /// Total buffer length.
    pub fn capacity(&self) -> u64 {
        crate::wr::sg_total_len(&self.sges)
    }
}

/// The send queue: WQEs in posting order. The front ones are in flight or
/// awaiting acknowledgement; `next` indexes the first not yet fully sent.
///
/// A QP's queue is fed by its [`SendRing`] (posted without the engine): the
/// engine moves what the ring holds to the back of the queue before each
/// call on the QP, and every WQE that leaves the queue ([`SendQueue::retire`],
/// [`SendQueue::pop_front`], [`SendQueue::discard_all`]) is counted on the
/// ring, which checks the depth at post time.
#[derive(Debug, Default)]
pub struct SendQueue {
    /// WQEs, oldest first. Boxed: a WQE is a few hundred bytes and moves
    /// between this queue and the free list once per message; a box moves
    /// as a pointer (the boxes are recycled, so posting allocates nothing
    /// once the queue has held its most WQEs).
    pub wqes: VecDeque<Box<SendWqe>>,
    /// Index of the first WQE whose request packets are not all sent.
    pub next: usize,
    /// Retired WQEs kept for reuse, boxed as in `wqes` so that a WQE moves
    /// between the two as a pointer.
    #[allow(clippy::vec_box)]
    free: Vec<Box<SendWqe>>,
    /// At most this many are kept (the queue's depth).
    keep: usize,
    /// The ring the application posts into.
    ring: Option<Arc<SendRing>>,
}

impl SendQueue {
    /// An empty queue of depth `depth` (keeps up to that many retired WQEs).
    pub fn with_depth(depth: usize) -> SendQueue {
        SendQueue {
            keep: depth,
            ..SendQueue::default()
        }
    }

    /// An empty queue of depth `depth` fed by `ring`.
    pub fn with_ring(depth: usize, ring: Arc<SendRing>) -> SendQueue {
        SendQueue {
            keep: depth,
            ring: Some(ring),
            ..SendQueue::default()
        }
    }

    /// The ring that feeds this queue, if any.
    pub fn ring(&self) -> Option<&Arc<SendRing>> {
        self.ring.as_ref()
    }

    /// Queues a WQE for `wr` at the back: a recycled one when there is one
    /// (no allocation).
    pub fn push(
        &mut self,
        wr: &SendWr<'_>,
        sq_sig_all: bool,
        inline: Option<&[u8]>,
        ud: Option<UdDest>,
    ) {
        // Filled where it will stay (a WQE is a few hundred bytes: one move).
        match self.free.pop() {
            Some(w) => {
                self.wqes.push_back(w);
                if let Some(back) = self.wqes.back_mut() {
                    back.fill(wr, sq_sig_all, inline, ud);
                }
            }
            None => self
                .wqes
                .push_back(Box::new(SendWqe::new(wr, sq_sig_all, inline, ud))),
        }
    }

    /// Keeps a retired WQE's buffers for a later post.
    pub fn recycle(&mut self, w: Box<SendWqe>) {
        if self.free.len() < self.keep {
            self.free.push(w);
        }
    }

    /// WQEs posted and not yet retired.
    pub fn len(&self) -> usize {
        self.wqes.len()
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.wqes.is_empty()
    }

    /// Removes and returns the front WQE, keeping `next` pointing at the same WQE.
    pub fn retire(&mut self) -> Option<Box<SendWqe>> {
        let w = self.wqes.pop_front()?;
        self.next = self.next.saturating_sub(1);
        if let Some(ring) = &self.ring {
            ring.taken(1);
        }
        Some(w)
    }

    /// [`SendQueue::retire`] straight into the free list: for a caller that
    /// read what it needed from the front WQE first (no move out and back).
    pub fn retire_front(&mut self) {
        let Some(w) = self.wqes.pop_front() else {
            return;
        };
        self.next = self.next.saturating_sub(1);
        if let Some(ring) = &self.ring {
            ring.taken(1);
        }
        self.recycle(w);
    }

    /// Removes and returns the front WQE (flushes, RAW_PACKET frames),
    /// counted on the ring as [`SendQueue::retire`] does.
    pub fn pop_front(&mut self) -> Option<Box<SendWqe>> {
        let w = self.wqes.pop_front()?;
        if let Some(ring) = &self.ring {
            ring.taken(1);
        }
        Some(w)
    }

    /// Drops every WQE without completions (RESET), counted on the ring.
    pub fn discard_all(&mut self) {
        let n = self.wqes.len();
        self.next = 0;
        while let Some(w) = self.wqes.pop_front() {
            self.recycle(w);
        }
        if let Some(ring) = &self.ring {
            ring.taken(n as u32);
        }
    }

    /// True if every posted WQE has been fully sent.
    pub fn all_sent(&self) -> bool {
        self.next >= self.wqes.len()
    }
}

/// A receive queue (a QP's own, or an SRQ's).
///
/// A QP's own queue is fed by its [`RecvRing`] (posted without the engine):
/// every look at the queue first moves what the ring holds to its back, and
/// every WQE that leaves (or returns to) the queue is counted on the ring,
/// which checks the depth at post time. An SRQ's queue has no ring (posted
/// under the engine lock).
#[derive(Debug, Default)]
pub struct RecvQueue {
    /// WQEs, oldest first (after a [`RecvQueue::drain`]).
    wqes: VecDeque<RecvWqe>,
    /// Completed WQEs kept for reuse.
    free: Vec<RecvWqe>,
    /// At most this many are kept (the queue's depth).
    keep: usize,
    /// The ring the application posts into (a QP's own queue).
    ring: Option<Arc<RecvRing>>,
}

impl RecvQueue {
    /// An empty queue of depth `depth` (keeps up to that many completed WQEs).
    pub fn with_depth(depth: usize) -> RecvQueue {
        RecvQueue {
            keep: depth,
            ..RecvQueue::default()
        }
    }

    /// An empty queue fed by `ring` (a QP's own receive queue).
    pub fn with_ring(depth: usize, ring: Arc<RecvRing>) -> RecvQueue {
        RecvQueue {
            keep: depth,
            ring: Some(ring),
            ..RecvQueue::default()
        }
    }

    /// The ring that feeds this queue, if any.
    pub fn ring(&self) -> Option<&Arc<RecvRing>> {
        self.ring.as_ref()
    }

    /// Moves the WQEs posted on the ring to the back of the queue.
    pub fn drain(&mut self) {
        let Some(ring) = &self.ring else { return };
        let (wqes, free) = (&mut self.wqes, &mut self.free);
        ring.drain(|wr_id, sges| {
            let mut w = free.pop().unwrap_or_else(|| RecvWqe {
                wr_id,
                sges: Vec::new(),
            });
            w.wr_id = wr_id;
            w.sges.clear();
            w.sges.extend(sges);
            wqes.push_back(w);
        });
    }

    /// Queues a WQE for `wr` at the back, after what the ring holds: a
    /// recycled one when there is one (no allocation). With a ring, the
    /// count is the caller's ([`RecvRing::post_direct`]).
    pub fn push(&mut self, wr: &RecvWr<'_>) {
        self.drain();
        let w = match self.free.pop() {
            Some(mut w) => {
                w.fill(wr);
                w
            }
            None => RecvWqe::new(wr),
        };
        self.wqes.push_back(w);
    }

    /// Takes the oldest WQE.
    pub fn pop_front(&mut self) -> Option<RecvWqe> {
        self.drain();
        let w = self.wqes.pop_front()?;
        if let Some(ring) = &self.ring {
            ring.taken(1);
        }
        Some(w)
    }

    /// Puts a WQE back at the head (an abandoned UC message's).
    pub fn push_front(&mut self, w: RecvWqe) {
        if let Some(ring) = &self.ring {
            ring.returned();
        }
        self.wqes.push_front(w);
    }

    /// The oldest WQE.
    pub fn front(&mut self) -> Option<&RecvWqe> {
        self.drain();
        self.wqes.front()
    }

    /// Drops every WQE, posted or queued, without completions (RESET).
    pub fn clear(&mut self) {
        self.drain();
        let n = self.wqes.len();
        while let Some(w) = self.wqes.pop_front() {
            self.recycle(w);
        }
        if let Some(ring) = &self.ring {
            ring.taken(n as u32);
        }
    }

    /// Keeps a completed WQE's gather list for a later post.
    pub fn recycle(&mut self, w: RecvWqe) {
        if self.free.len() < self.keep {
            self.free.push(w);
        }
    }

    /// WQEs waiting (posted on the ring included).
    pub fn len(&self) -> usize {
        match &self.ring {
            Some(ring) => ring.queued() as usize,
            None => self.wqes.len(),
        }
    }

    /// True when none waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

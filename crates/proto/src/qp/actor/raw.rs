//! A RAW_PACKET QP's data path (spec/raw-packet.md): a send WQE is one
//! Ethernet frame, the gathered bytes as they are, or (`IBV_WR_TSO`) one
//! frame per segment, each the WQE's header fixed up and the next `mss`
//! bytes (crate::tso); a frame a flow steered to the QP fills one receive
//! WQE. No transport headers, no PSNs, no acknowledgements: a send completes
//! when its (last) frame is handed to the driver.

use super::{PostedSend, Qp, QpEnv, Sink};
use crate::output::AsyncEventKind;
use crate::qp::completer::success;
use crate::qp::sgl;
use crate::types::QpState;
use crate::wc::{WcOpcode, WcStatus, WorkCompletion};
use crate::wr::SendWr;

/// What became of a frame offered to a RAW_PACKET QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameFate {
    /// Written to a receive WQE and completed.
    Delivered,
    /// The QP's state does not receive (RESET, INIT, ERR).
    NotReady,
    /// No receive WQE was posted: dropped, as a NIC drops it.
    NoWqe,
    /// The receive WQE failed (too small: `LOC_LEN_ERR`; its buffer not
    /// covered by an MR: `LOC_PROT_ERR`); the QP went to ERR.
    Failed,
}

impl Qp {
    /// An accepted raw send WR; a TSO one (`tso`: its header and `mss`,
    /// checked) keeps both in its WQE.
    pub(crate) fn post_raw(
        &mut self,
        wr: &SendWr<'_>,
        posted: PostedSend<'_>,
        tso: Option<(&[u8], u16)>,
        sink: &mut impl Sink,
    ) {
        self.post_send(wr, posted, sink);
        if posted.flushed {
            return;
        }
        if let (Some((hdr, mss)), Some(w)) = (tso, self.dp.sq.wqes.back_mut()) {
            w.tso_hdr.extend_from_slice(hdr);
            w.tso_mss = mss;
        }
    }

    /// The QP's next frame, written to the start of `buf` (at least the
    /// device's frame limit long): its length, or `None` when it has nothing
    /// to send. The WQE completes at once (signaled: `IBV_WC_SEND`; a TSO
    /// WQE once its last segment is out, `IBV_WC_TSO`); a gather list that
    /// fails the MR check completes with `LOC_PROT_ERR` and moves the QP to
    /// SQE, as a UD send error does.
    pub fn next_frame(
        &mut self,
        env: &QpEnv<'_>,
        buf: &mut [u8],
        sink: &mut impl Sink,
    ) -> Option<usize> {
        if !matches!(self.ctl.state(), QpState::Rts) || self.dp.sq.all_sent() {
            return None;
        }
        // Every earlier WQE completed when its frame left: this one is the front.
        debug_assert_eq!(
            self.dp.sq.next, 0,
            "a RAW_PACKET send queue keeps no WQE in flight"
        );
        let w = self.dp.sq.wqes.front_mut()?;
        let (gathered, len, done) = if w.tso_mss > 0 {
            tso_segment(w, env, self.pd, buf)
        } else {
            let len = w.len as usize;
            (gather(w, env, self.pd, 0, buf.get_mut(..len)), len, true)
        };
        let (qpn, cq) = (self.ctl.qpn(), self.send_cq);
        if gathered.is_ok() && !done {
            // More segments of this TSO WR follow on later turns.
            self.dp.counters.packets_sent += 1;
            self.dp.counters.bytes_sent += len as u64;
            self.wake();
            return Some(len);
        }
        let w = self.dp.sq.pop_front()?;
        if let Err(status) = gathered {
            sink.complete(
                cq,
                WorkCompletion::error(
                    w.wr_id,
                    qpn,
                    crate::wc::wc_opcode_for(w.opcode).unwrap_or(WcOpcode::Send),
                    status,
                ),
                true,
            );
            self.dp.sq.recycle(w);
            self.enter_sqe(sink);
            return None;
        }
        self.dp.counters.packets_sent += 1;
        self.dp.counters.bytes_sent += len as u64;
        let wc = if w.signaled { success(&w, qpn) } else { None };
        self.dp.sq.recycle(w);
        if let Some(wc) = wc {
            self.complete(sink, cq, wc, false);
        }
        // More frames wait: the engine gives the QP another turn.
        if !self.dp.sq.all_sent() {
            self.wake();
        }
        Some(len)
    }

    /// A frame a flow steered to this QP: the next receive WQE (the QP's own
    /// or its SRQ's) gets the whole frame and completes with `IBV_WC_RECV`,
    /// `byte_len` = the frame's length.
    pub fn on_frame(&mut self, env: &QpEnv<'_>, frame: &[u8], sink: &mut impl Sink) -> FrameFate {
        if !self.ctl.accepts_requests() {
            return FrameFate::NotReady;
        }
        self.dp.counters.packets_received += 1;
        self.dp.counters.bytes_received += frame.len() as u64;
        let (qpn, cq, pd) = (self.ctl.qpn(), self.recv_cq, self.pd);
        let srq = self.srq;
        let rq = match srq {
            Some(s) => match sink.srq_queue(s) {
                Some(q) => q,
                None => return FrameFate::NoWqe,
            },
            None => &mut self.dp.rq,
        };
        let Some(w) = rq.pop_front() else {
            return FrameFate::NoWqe;
        };
        let status = if frame.len() as u64 > w.capacity() {
            Some(WcStatus::LocLenErr)
        } else {
            sgl::scatter(env.mrs, pd, env.mem, &w.sges, 0, frame)
                .err()
                .map(|_| WcStatus::LocProtErr)
        };
        let wr_id = w.wr_id;
        rq.recycle(w);
        if let Some(s) = srq {
            sink.srq_taken(s);
        }
        match status {
            None => {
                let mut wc = WorkCompletion::error(wr_id, qpn, WcOpcode::Recv, WcStatus::Success);
                wc.byte_len = frame.len() as u32;
                self.complete(sink, cq, wc, false);
                FrameFate::Delivered
            }
            Some(status) => {
                let wc = WorkCompletion::error(wr_id, qpn, WcOpcode::Recv, status);
                sink.complete(cq, wc, true);
                // A receive that completes in error ends the QP (IBA 10.8.3.1).
                self.enter_error(AsyncEventKind::QpFatal, sink);
                FrameFate::Failed
            }
        }
    }
}

/// `out` (a frame, or a TSO segment's bytes after its header) filled from
/// the WQE's payload starting `offset` bytes in: its inline bytes or its
/// gather list (MR-checked). `None` for `out`: the frame does not fit the
/// buffer.
fn gather(
    w: &crate::qp::wqe::SendWqe,
    env: &QpEnv<'_>,
    pd: crate::handle::PdHandle,
    offset: u64,
    out: Option<&mut [u8]>,
) -> Result<(), WcStatus> {
    let Some(out) = out else {
        return Err(WcStatus::LocLenErr);
    };
    match w.inline() {
        Some(bytes) => {
            let from = usize::try_from(offset).unwrap_or(usize::MAX);
            let src = bytes
                .get(from..from.saturating_add(out.len()))
                .ok_or(WcStatus::LocLenErr)?;
            out.copy_from_slice(src);
            Ok(())
        }
        None => sgl::gather(env.mrs, pd, env.mem, &w.sges, offset, out)
            .map_err(|_| WcStatus::LocProtErr),
    }
}

/// The next segment of a TSO WQE written to `buf` (spec/raw-packet.md §4):
/// its header, the next `mss` bytes of payload, fixed up. Returns the
/// gather's result, the frame's length, and whether it was the last
/// segment; `sent_pkts` counts the segments out.
fn tso_segment(
    w: &mut crate::qp::wqe::SendWqe,
    env: &QpEnv<'_>,
    pd: crate::handle::PdHandle,
    buf: &mut [u8],
) -> (Result<(), WcStatus>, usize, bool) {
    let mss = u64::from(w.tso_mss);
    let index = u64::from(w.sent_pkts);
    let offset = index * mss;
    let piece = w.len.saturating_sub(offset).min(mss) as usize;
    let last = index + 1 >= crate::tso::segments(w.len, w.tso_mss);
    let hlen = w.tso_hdr.len();
    let len = hlen + piece;
    let Some(frame) = buf.get_mut(..len) else {
        return (Err(WcStatus::LocLenErr), len, true);
    };
    frame[..hlen].copy_from_slice(&w.tso_hdr);
    if let Err(e) = gather(w, env, pd, offset, Some(&mut frame[hlen..])) {
        return (Err(e), len, true);
    }
    // The header was checked at post time (tso::check): parse succeeds.
    match crate::tso::parse(&w.tso_hdr, u16::MAX) {
        Ok(layout) => crate::tso::fix_segment(frame, &layout, index, offset, last),
        Err(_) => return (Err(WcStatus::LocQpOpErr), len, true),
    }
    w.sent_pkts += 1;
    (Ok(()), len, last)
}

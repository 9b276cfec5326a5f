//! RAW_PACKET queue pairs on the device (spec/raw-packet.md): frames out and
//! in, tagged with the QP they belong to. The driver owns one packet socket
//! per RAW_PACKET QP (its flows are that socket's filter), so a frame's tag
//! is all the routing there is: [`Engine::poll_frame`] says which QP's socket
//! a frame leaves through, [`Engine::handle_frame`] which QP a socket's frame
//! is for. RoCE datagrams never take this path, nor frames the other.

use crate::handle::QpHandle;
use crate::memory::Memory;
use crate::output::PostOutcome;
use crate::qp::actor::raw::FrameFate;
use crate::qp::actor::PostedSend;
use crate::types::QpType;
use crate::wr::{
    check_inline_len, check_post_send, Disposition, PostError, SendFlags, SendQueueCtx, SendWr,
    WrOpcode,
};
use crate::Engine;

use crate::frame::{Frame, RawCounters, ETH_HEADER_LEN};

impl Engine {
    /// The longest frame a RAW_PACKET send may build: the MTU of the
    /// interface the driver's packet sockets are on, plus the Ethernet header
    /// and one VLAN tag (the kernel's limit for a packet socket's send,
    /// `net/packet/af_packet.c` `packet_snd`). Set by the driver.
    pub fn set_raw_frame_max(&mut self, bytes: u32) {
        self.dev.raw_frame_max = bytes.max(ETH_HEADER_LEN);
    }

    /// See [`Engine::set_raw_frame_max`].
    pub fn raw_frame_max(&self) -> u32 {
        self.dev.raw_frame_max
    }

    /// The raw path's counters.
    pub fn raw_counters(&self) -> RawCounters {
        *self.dev.raw_counters.lock()
    }

    /// `ibv_post_send` on a RAW_PACKET QP: `IBV_WR_SEND`, one frame of
    /// [`ETH_HEADER_LEN`] to [`Engine::raw_frame_max`] bytes. `IBV_WR_TSO`
    /// needs its header and comes through [`Engine::post_send_tso`]; here
    /// (no header given) it is refused with `EINVAL`.
    pub(crate) fn post_raw_send(
        &mut self,
        h: QpHandle,
        ctx: &SendQueueCtx,
        wr: &SendWr<'_>,
        inline: Option<&[u8]>,
    ) -> Result<PostOutcome, PostError> {
        let tso = (wr.opcode == WrOpcode::Tso).then_some((&[][..], 0));
        self.post_raw(h, ctx, wr, inline, tso)
    }

    /// `IBV_WR_TSO` (`ibv_post_send`'s `wr.tso`, `ibv_wr_send_tso`): on a
    /// RAW_PACKET QP the payload (`wr`'s gather list or `inline` bytes) goes
    /// out as `mss`-byte segments, each behind a copy of `hdr` fixed up
    /// (crate::tso; spec/raw-packet.md §4); the WR completes once, with
    /// `IBV_WC_TSO`, when its last segment left. Refused with `EINVAL`: a
    /// header outside 14 ..= the QP's `max_tso_header` or not Ethernet +
    /// IPv4/IPv6 + TCP, `mss` 0 or a segment longer than a frame, more
    /// payload than `tso_caps.max_tso`. On another QP type the opcode table
    /// answers (`EOPNOTSUPP` on UD, which the verbs allow and softverbs does
    /// not offer; `EINVAL` on the others).
    pub fn post_send_tso(
        &mut self,
        h: QpHandle,
        wr: &SendWr<'_>,
        inline: Option<&[u8]>,
        hdr: &[u8],
        mss: u16,
    ) -> Result<PostOutcome, PostError> {
        let wr = &SendWr {
            opcode: WrOpcode::Tso,
            ..*wr
        };
        let q =
            self.qps
                .get_mut(h)
                .map(crate::lock::Lock::get_mut)
                .ok_or(PostError::NoSuchObject {
                    kind: crate::error::ObjectKind::Qp,
                    handle: h.raw(),
                })?;
        if q.ctl.qp_type() != QpType::RawPacket {
            // The WR-opcode × QP-type table refuses it with its errno.
            return self.post_send_xrc(h, wr, inline, 0);
        }
        let cap = q.ctl.cap();
        let ctx = SendQueueCtx {
            qp_type: QpType::RawPacket,
            state: q.ctl.state(),
            pd: q.pd,
            max_send_wr: cap.max_send_wr,
            max_send_sge: cap.max_send_sge,
            max_inline_data: cap.max_inline_data,
            max_rd_atomic: 0,
            ud_mtu: 0,
            outstanding: q.dp.sq.len() as u32,
        };
        self.post_raw(h, &ctx, wr, inline, Some((hdr, mss)))
    }

    /// A raw SEND (`tso` `None`) or TSO (the header and `mss`) checked and queued.
    fn post_raw(
        &mut self,
        h: QpHandle,
        ctx: &SendQueueCtx,
        wr: &SendWr<'_>,
        inline: Option<&[u8]>,
        tso: Option<(&[u8], u16)>,
    ) -> Result<PostOutcome, PostError> {
        match wr.opcode {
            WrOpcode::Send | WrOpcode::Tso => {}
            opcode => {
                return Err(PostError::OpcodeForQpType {
                    opcode,
                    qp_type: QpType::RawPacket,
                })
            }
        }
        // The common checks of a SEND (state, flags, SGEs, inline, room),
        // made as for a connected QP: a raw SEND reads no union member.
        let as_uc = SendQueueCtx {
            qp_type: QpType::Uc,
            ..*ctx
        };
        let as_send = SendWr {
            opcode: WrOpcode::Send,
            ..*wr
        };
        let disposition = check_post_send(&as_uc, &as_send, |_| None)?;
        let len = crate::wr::sg_total_len(wr.sg_list);
        let max = self.dev.raw_frame_max;
        if let Some((hdr, mss)) = tso {
            let max_hdr = self.qps.get(h).map_or(0, |q| q.lock().max_tso_header);
            crate::tso::check(hdr, max_hdr, mss, len, max)?;
        } else if disposition != Disposition::Flushed
            && !(u64::from(ETH_HEADER_LEN)..=u64::from(max)).contains(&len)
        {
            return Err(PostError::RawFrameLength {
                len,
                min: ETH_HEADER_LEN,
                max,
            });
        }
        let inline = if wr.flags.contains(SendFlags::INLINE) {
            check_inline_len(len, ctx.max_inline_data)?;
            Some(inline.unwrap_or(&[]))
        } else {
            None
        };
        let posted = PostedSend {
            flushed: disposition == Disposition::Flushed,
            inline,
            ud: None,
            xrc_srqn: 0,
        };
        self.drive_ctl(h, |q, sink| {
            if !posted.flushed {
                q.count_direct_post();
            }
            q.post_raw(wr, posted, tso, sink)
        });
        Ok(if posted.flushed {
            PostOutcome::Flushed
        } else {
            PostOutcome::Queued
        })
    }

    /// The next frame of a RAW_PACKET QP with sends waiting, written into
    /// `buf` (at least [`Engine::raw_frame_max`] bytes); `None` when none has.
    /// QPs take turns, one frame each.
    pub fn poll_frame(&self, mem: &dyn Memory, buf: &mut [u8]) -> Option<Frame> {
        while let Some(h) = self.next_raw_ready() {
            let turn = self.drive(h, mem, |q, env, sink| {
                q.dp.scheduled = false;
                let qpn = q.ctl.qpn();
                q.next_frame(env, buf, sink).map(|len| Frame { qpn, len })
            });
            if let Some(Some(f)) = turn {
                self.dev.raw_counters.lock().frames_sent += 1;
                return Some(f);
            }
        }
        None
    }

    /// A frame arrived on the packet socket of RAW_PACKET QP `qpn` (it passed
    /// that QP's flow filter): it fills the QP's next receive WQE. Frames for
    /// a QP that is gone, not RAW_PACKET, or not receiving are dropped and
    /// counted.
    pub fn handle_frame(&self, qpn: u32, frame: &[u8], mem: &dyn Memory) -> bool {
        let raw = self.qp_by_qpn(qpn).filter(|&h| {
            self.qps
                .get(h)
                .is_some_and(|q| q.lock().ctl.qp_type() == QpType::RawPacket)
        });
        let fate = match raw {
            Some(h) => self.drive(h, mem, |q, env, sink| q.on_frame(env, frame, sink)),
            None => None,
        };
        let mut c = self.dev.raw_counters.lock();
        match fate.unwrap_or(FrameFate::NotReady) {
            FrameFate::Delivered => {
                c.frames_received += 1;
                return true;
            }
            FrameFate::NotReady => c.drop_not_ready += 1,
            FrameFate::NoWqe => c.drop_no_wqe += 1,
            FrameFate::Failed => {}
        }
        false
    }

    /// The RAW_PACKET QP at the front of its ready queue (its lock let go
    /// before the QP's is taken).
    fn next_raw_ready(&self) -> Option<QpHandle> {
        self.dev.raw_ready.pop()
    }
}

//! The C ABI's support: what `libibverbs.so.1` (the `ibverbs` crate) needs
//! beyond the safe API — memory regions over memory the program owns, posting
//! with inline bytes the caller gathered, non-blocking event reads, the
//! async-event descriptor, CQ resize and the comp-vector choice, a device's
//! node GUID without opening it.
//!
//! Rust programs have no use for these: they are free functions here, out of
//! the methods and the re-exports that make the safe API, so that the C ABI
//! sits on the same objects without widening that face.

use crate::config::Device;
use crate::context::Context;
use crate::cq::CompletionQueue;
use crate::datapath::{AsyncEvent, CompletionChannel};
use crate::error::{logged, Error};
use crate::pd::PdInner;
use crate::qp::{QueuePair, Transport};
use proto::engine::MrHandle;
use proto::wr::SendWr;
use proto::AccessFlags;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

/// A memory region over memory the program owns (`ibv_reg_mr` on a C buffer).
/// Deregistered when dropped.
pub struct ExternalMemoryRegion {
    pd: Arc<PdInner>,
    h: MrHandle,
    lkey: u32,
    rkey: u32,
    access: AccessFlags,
    /// The range the region covers (its translation).
    range: (u64, u64),
}

impl ExternalMemoryRegion {
    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The access flags in force.
    pub fn access(&self) -> AccessFlags {
        self.access
    }
}

impl ExternalMemoryRegion {
    /// The body of [`rereg_external_mr`] and of the unsafe
    /// [`rereg_external_mr_translation`] (in `mem.rs`, whose contract covers
    /// the new range).
    pub(crate) fn rereg_parts(
        &mut self,
        pd: Option<&crate::ProtectionDomain>,
        translation: Option<(u64, u64)>,
        access: Option<AccessFlags>,
    ) -> Result<(), Error> {
        let range = translation.unwrap_or(self.range);
        let after = access.unwrap_or(self.access);
        if translation.is_some() || access.is_some() {
            crate::mem::check_mapped("rereg_mr", range.0, range.1, after)?;
        }
        let (pd, access) = crate::mr::rereg_in_engine(&self.pd, self.h, pd, translation, access)?;
        self.pd = pd;
        self.access = access;
        self.range = range;
        Ok(())
    }
}

/// `ibv_rereg_mr` of a region over the program's memory without a new
/// translation: another PD and/or new access flags, all or nothing, keys
/// kept (`MemoryRegion::rereg` has the rules).
pub fn rereg_external_mr(
    mr: &mut ExternalMemoryRegion,
    pd: Option<&crate::ProtectionDomain>,
    access: Option<AccessFlags>,
) -> Result<(), Error> {
    mr.rereg_parts(pd, None, access)
}

impl Drop for ExternalMemoryRegion {
    fn drop(&mut self) {
        // Under the engine lock: once this returns, no packet can reach the
        // memory, through its rkey or a window bound to it.
        let _ = self.pd.with(|e| e.dereg_mr_unbinding(self.h));
    }
}

/// `ibv_dereg_mr`: takes the region out of the engine, or refuses and
/// changes nothing (`EBUSY` while memory windows are bound to it). After
/// success the caller drops it (which then has nothing left to do).
pub fn dereg_external_mr(mr: &ExternalMemoryRegion) -> Result<(), Error> {
    logged("dereg_mr", mr.pd.with(|e| e.dereg_mr(mr.h).map(|_| ())))
}

impl std::fmt::Debug for ExternalMemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalMemoryRegion")
            .field("lkey", &self.lkey)
            .field("rkey", &self.rkey)
            .finish()
    }
}

impl ExternalMemoryRegion {
    /// Registers `[addr, addr + len)` in `pd`: the body of
    /// [`reg_external_mr`], whose contract (in `mem.rs`, with
    /// the crate's other memory promises) makes it sound.
    pub(crate) fn register(
        pd: Arc<PdInner>,
        addr: u64,
        len: u64,
        access: AccessFlags,
    ) -> Result<Self, Error> {
        crate::mem::check_mapped("reg_mr", addr, len, access)?;
        let (h, lkey, rkey, access) = logged(
            "reg_mr",
            pd.with(|e| {
                e.reg_mr(pd.h, addr, len, access.0)
                    .map(|(h, m)| (h, m.lkey, m.rkey, m.access))
            }),
        )?;
        Ok(ExternalMemoryRegion {
            pd,
            h,
            lkey,
            rkey,
            access,
            range: (addr, len),
        })
    }
}

/// `ibv_reg_mr` over memory the program owns, an implicit on-demand region,
/// and a new translation for a region; see their contracts.
pub use crate::mem::{reg_external_mr, reg_implicit_odp_mr, rereg_external_mr_translation};

/// `ibv_post_send` of one WR whose inline bytes (with `IBV_SEND_INLINE`) the
/// caller already gathered from its SGEs (inline data needs no lkey).
pub fn post_send_gathered<T: Transport>(
    qp: &QueuePair<T>,
    wr: &SendWr<'_>,
    inline: Option<&[u8]>,
) -> Result<(), Error> {
    post_send_gathered_xrc(qp, wr, inline, 0)
}

/// [`post_send_gathered`] with the WR's `qp_type.xrc.remote_srqn`, the XRC
/// SRQ an XRC_SEND QP's message is for (ignored on other QP types).
pub fn post_send_gathered_xrc<T: Transport>(
    qp: &QueuePair<T>,
    wr: &SendWr<'_>,
    inline: Option<&[u8]>,
    remote_srqn: u32,
) -> Result<(), Error> {
    // The QP's send ring, without the engine lock (proto::sq).
    if let Some(r) = qp.post_send_ring(wr, inline, remote_srqn) {
        return r;
    }
    let shared = &qp.pd().ctx.dev;
    let h = qp.handle();
    let posted = shared.with(|e| e.post_send_xrc(h, wr, inline, remote_srqn));
    posted.map_err(|e| {
        tracing::warn!(target: "softverbs", "post_send refused ({}): {e}", e.errno());
        Error::Post(e)
    })?;
    shared.doorbell();
    Ok(())
}

/// `IBV_WR_TSO` (`ibv_post_send`'s `wr.tso`, `ibv_wr_send_tso`) with the
/// payload's inline bytes already gathered when the WR is `IBV_SEND_INLINE`
/// (spec/raw-packet.md §4; proto `Engine::post_send_tso`).
pub fn post_send_tso_gathered<T: Transport>(
    qp: &QueuePair<T>,
    wr: &SendWr<'_>,
    inline: Option<&[u8]>,
    hdr: &[u8],
    mss: u16,
) -> Result<(), Error> {
    let shared = &qp.pd().ctx.dev;
    let h = qp.handle();
    let posted = shared.with(|e| e.post_send_tso(h, wr, inline, hdr, mss));
    posted.map_err(|e| {
        tracing::warn!(target: "softverbs", "post_send (TSO) refused ({}): {e}", e.errno());
        Error::Post(e)
    })?;
    shared.doorbell();
    Ok(())
}

/// `ibv_create_cq` with every argument: capacity, completion vector and an
/// optional channel for its events.
pub fn create_cq_ex(
    ctx: &Context,
    cqe: i32,
    comp_vector: i32,
    channel: Option<&CompletionChannel>,
) -> Result<CompletionQueue, Error> {
    let cq = ctx.create_cq_on(cqe, comp_vector)?;
    if let Some(ch) = channel {
        let (h, id) = (cq.inner.h, ch.inner.id());
        ctx.with(|e| e.set_cq_channel(h, Some(id)))
            .map_err(Error::Verbs)?;
    }
    Ok(cq)
}

/// The descriptor that is readable while async events wait (`ctx->async_fd`).
pub fn async_event_fd(ctx: &Context) -> RawFd {
    ctx.inner.events.as_raw_fd()
}

/// The next async event, if one waits (never blocks).
pub fn try_async_event(ctx: &Context) -> Option<AsyncEvent> {
    ctx.inner.events.try_pop().map(|e| AsyncEvent {
        kind: e.kind,
        element: e.element,
    })
}

/// The next completion event's CQ id, if one waits (never blocks).
pub fn try_get_event(channel: &CompletionChannel) -> Option<u64> {
    channel.inner.try_get_event()
}

/// `ibv_poll_cq` straight into the caller's array: up to `max` completions,
/// oldest first, each handed to `f` while the CQ's consumer lock is held (one
/// contiguous batch, as a hardware provider's per-CQ lock gives). `f` must not
/// call into the device (the engine may wait for this lock while it holds its
/// own); copying the completion out is what it is for.
pub fn poll_cq_into(
    cq: &CompletionQueue,
    max: usize,
    mut f: impl FnMut(proto::wc::WorkCompletion),
) -> usize {
    // Empty: drive the receive path here, look again (CompletionQueue::poll).
    let driver = &cq.inner.ctx.dev.driver;
    crate::datapath::poll_or_drive(
        max,
        || cq.inner.ring.poll_with(max, &mut f),
        || driver.drive_receive(),
    )
}

/// `ibv_resize_cq`: returns the capacity granted; `EINVAL` below the
/// completions queued plus those signaled send WRs in flight will add, or
/// above `max_cqe`.
pub fn resize_cq(cq: &CompletionQueue, cqe: i32) -> Result<u32, Error> {
    let h = cq.inner.h;
    logged("resize_cq", cq.inner.ctx.dev.with(|e| e.resize_cq(h, cqe)))
}

/// The node GUID `device` reports, without opening it.
pub fn node_guid(device: &Device) -> u64 {
    proto::device::DeviceInfo::new(device.config())
        .attr
        .node_guid
}

/// A second handle on `pd`: the C ABI's parent domains stand on their PD
/// (same protection; objects created through either are in the one PD, as
/// mlx5 gives a parent domain its PD's number). Dropping it releases only
/// this handle; the PD goes when its last handle and object are gone.
pub fn share_pd(pd: &crate::ProtectionDomain) -> crate::ProtectionDomain {
    crate::ProtectionDomain {
        inner: pd.inner.clone(),
    }
}

impl<T: Transport> QueuePair<T> {
    /// `IBV_WR_TSO` on a RAW_PACKET QP (spec/raw-packet.md §4): the payload
    /// (`wr.sg_list`) leaves as `mss`-byte TCP segments, each behind a fixed-up
    /// copy of `hdr` (Ethernet, IPv4/IPv6, TCP); one completion
    /// (`WcOpcode::Tso`) when the last is out. `wr.opcode` is taken as TSO;
    /// `IBV_SEND_INLINE` is not taken (the payload is read through the MR
    /// check as each segment is built). `EINVAL` for a header the QP's
    /// `max_tso_header` or the rules refuse; other QP types answer as the
    /// opcode table says.
    pub fn post_send_tso(&self, wr: &SendWr<'_>, hdr: &[u8], mss: u16) -> Result<(), Error> {
        let wr = SendWr {
            flags: proto::wr::SendFlags(wr.flags.0 & !proto::wr::SendFlags::INLINE.0),
            ..*wr
        };
        post_send_tso_gathered(self, &wr, None, hdr, mss)
    }
}

//! Entry points the C ABI (`libibverbs.so.1`, the `ibverbs` crate) needs beyond
//! the safe API: memory regions over memory the program owns, posting with
//! inline bytes gathered by the caller, non-blocking event reads, the
//! async-event descriptor, CQ resize and comp-vector choice. Rust programs
//! normally have no use for them.

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

impl Drop for ExternalMemoryRegion {
    fn drop(&mut self) {
        // Under the engine lock: once this returns, no packet can reach the memory.
        let _ = self.pd.with(|e| e.dereg_mr(self.h));
    }
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
    /// [`crate::ProtectionDomain::reg_external_mr`], whose contract (in `mem.rs`, with
    /// the crate's other memory promises) makes it sound.
    pub(crate) fn register(
        pd: Arc<PdInner>,
        addr: u64,
        len: u64,
        access: AccessFlags,
    ) -> Result<Self, Error> {
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
        })
    }
}

impl<T: Transport> QueuePair<T> {
    /// `ibv_post_send` of one WR whose inline bytes (with `IBV_SEND_INLINE`) the
    /// caller already gathered from its SGEs (inline data needs no lkey).
    pub fn post_send_gathered(&self, wr: &SendWr<'_>, inline: Option<&[u8]>) -> Result<(), Error> {
        let shared = &self.pd().ctx.dev;
        let h = self.handle();
        shared.with(|e| e.post_send(h, wr, inline)).map_err(|e| {
            tracing::warn!(target: "softverbs", "post_send refused ({}): {e}", e.errno());
            Error::Post(e)
        })?;
        shared.doorbell();
        Ok(())
    }
}

impl Context {
    /// `ibv_create_cq` with every argument: capacity, completion vector and an
    /// optional channel for its events.
    pub fn create_cq_ex(
        &self,
        cqe: i32,
        comp_vector: i32,
        channel: Option<&CompletionChannel>,
    ) -> Result<CompletionQueue, Error> {
        let cq = self.create_cq_on(cqe, comp_vector)?;
        if let Some(ch) = channel {
            let (h, id) = (cq.inner.h, ch.inner.id());
            self.with(|e| e.set_cq_channel(h, Some(id)))
                .map_err(Error::Verbs)?;
        }
        Ok(cq)
    }

    /// The descriptor that is readable while async events wait (`ctx->async_fd`).
    pub fn async_event_fd(&self) -> RawFd {
        self.inner.dev.driver.async_events().as_raw_fd()
    }

    /// The next async event, if one waits (never blocks).
    pub fn try_async_event(&self) -> Option<AsyncEvent> {
        self.inner
            .dev
            .driver
            .async_events()
            .try_pop()
            .map(|e| AsyncEvent {
                kind: e.kind,
                element: e.element,
            })
    }
}

impl CompletionChannel {
    /// The next completion event's CQ id, if one waits (never blocks).
    pub fn try_get_event(&self) -> Option<u64> {
        self.inner.try_get_event()
    }
}

impl CompletionQueue {
    /// `ibv_resize_cq`: returns the capacity granted; `EINVAL` below the
    /// completions already queued or above `max_cqe`.
    pub fn resize(&self, cqe: i32) -> Result<u32, Error> {
        let h = self.inner.h;
        logged(
            "resize_cq",
            self.inner.ctx.dev.with(|e| e.resize_cq(h, cqe)),
        )
    }
}

impl Device {
    /// The node GUID the device reports, without opening it.
    pub fn node_guid(&self) -> u64 {
        proto::device::DeviceInfo::new(self.config()).attr.node_guid
    }
}

//! Device contexts and the query verbs. The objects made from a context
//! (PDs, CQs, the CM port, ...) own their constructors, beside them (pd.rs,
//! cq.rs, ...): a context imports none of them.

use crate::device::Shared;
use crate::error::{logged, Error};
use proto::device::{DeviceAttr, PortAttr};
use proto::engine::CtxHandle;
use proto::Gid;
use std::sync::Arc;
use sv_io::AsyncEventQueue;

/// An open device (`struct ibv_context`). Cheap to clone; the context closes
/// (destroying whatever it still owns, as the kernel does when a program exits)
/// when the last clone and the last object created from it are gone.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<CtxInner>,
}

pub(crate) struct CtxInner {
    pub(crate) dev: Arc<Shared>,
    pub(crate) h: CtxHandle,
    /// Its async events (`ctx->async_fd`): those of the objects it created,
    /// as each `ibv_open_device` has its own in the kernel. Whether its fd
    /// blocks is this context's business alone.
    pub(crate) events: Arc<AsyncEventQueue>,
}

impl Drop for CtxInner {
    fn drop(&mut self) {
        let closed = self
            .dev
            .with(|e| e.close_context(self.h).map(|()| e.mcast_groups()));
        match closed {
            // Its QPs' multicast attachments went with them (spec/multicast.md).
            Ok(groups) => {
                if let Err(e) = self.dev.driver.set_groups(&groups) {
                    tracing::warn!(target: "softverbs", "leaving multicast groups: {e}");
                }
            }
            Err(e) => tracing::error!(target: "softverbs", "closing context: {e}"),
        }
    }
}

impl Context {
    pub(crate) fn new(dev: Arc<Shared>) -> Result<Context, Error> {
        let h = dev.with(proto::Engine::open_context);
        let events = match dev.driver.open_async_queue(h.raw()) {
            Ok(q) => q,
            Err(e) => {
                // Nothing was made from it yet.
                let _ = dev.with(|engine| engine.close_context(h));
                return Err(Error::Os {
                    op: "opening the context's async-event queue",
                    source: e.into(),
                });
            }
        };
        Ok(Context {
            inner: Arc::new(CtxInner { dev, h, events }),
        })
    }

    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut proto::Engine) -> R) -> R {
        self.inner.dev.with(f)
    }

    /// The device name.
    pub fn device_name(&self) -> String {
        self.with(|e| e.info().name.clone())
    }

    /// The rate of the device's clock in kHz (`hca_core_clock`): it ticks
    /// once a nanosecond.
    pub const CORE_CLOCK_KHZ: u64 = 1_000_000;

    /// The device's clock (`ibv_query_rt_values_ex`'s raw clock): nanoseconds
    /// since the device started, monotonic; what completion timestamps
    /// (`WorkCompletion::timestamp_ns`) count.
    pub fn clock_ns(&self) -> u64 {
        self.inner.dev.driver.now()
    }

    /// The wall-clock time (nanoseconds since the Unix epoch) of device time
    /// `ts` (`ibv_wc_read_completion_wallclock_ns`): read now from both
    /// clocks, then back by how long ago `ts` was on the device's.
    pub fn wallclock_ns(&self, ts: u64) -> u64 {
        let device_now = self.clock_ns();
        let wall_now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        wall_now.saturating_sub(device_now.saturating_sub(ts))
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> DeviceAttr {
        self.with(|e| e.info().attr.clone())
    }

    /// `ibv_query_port`: port 1 only (`EINVAL` otherwise).
    pub fn query_port(&self, port: u8) -> Result<PortAttr, Error> {
        logged("query_port", self.with(|e| e.info().query_port(port)))
    }

    /// `ibv_query_gid`: an IPv4-mapped (or IPv6) GID of type RoCE v2.
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Gid, Error> {
        logged("query_gid", self.with(|e| e.info().query_gid(port, index)))
    }

    /// `ibv_query_pkey`: index 0 is 0xffff.
    pub fn query_pkey(&self, port: u8, index: u32) -> Result<u16, Error> {
        logged(
            "query_pkey",
            self.with(|e| e.info().query_pkey(port, index)),
        )
    }

    /// How many contexts, PDs, MRs, CQs, SRQs, AHs and QPs the device holds now
    /// (all contexts of this process together): for leak checks.
    pub fn device_object_counts(&self) -> [usize; 7] {
        self.with(|e| e.object_counts())
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.device_name())
            .finish()
    }
}

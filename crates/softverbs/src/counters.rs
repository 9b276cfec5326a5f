//! Counters readable through the API: per device and per QP.
//!
//! The structs are the engine's and the driver's own, re-exported (not
//! copied), so every counter they gain appears here too:
//! - [`EngineCounters`] (`proto`): packets in and out, drops by reason;
//! - [`IoCounters`] (`sv_io`): datagrams and bytes on the socket, send
//!   errors, loopback traffic, injected faults by kind, capture records;
//! - [`crate::cm::CmCounters`] and [`GsiCounters`] (`proto`): CM MADs sent,
//!   resent and received by kind, MADs dropped by reason, and datagrams to
//!   QP1 that were not GSI MADs;
//! - [`RawCounters`] (`proto`): RAW_PACKET frames sent and received, and
//!   received frames dropped by reason;
//! - [`QpCounters`] (`proto`, from [`crate::QueuePair::counters`]):
//!   retransmissions, timeouts, RNR and sequence NAKs, duplicates, drops.

use crate::context::Context;

pub use proto::datapath::DeviceCounters as EngineCounters;
pub use proto::frame::RawCounters;
pub use proto::gsi::GsiCounters;
pub use proto::qp::data::QpCounters;
pub use sv_io::CounterSnapshot as IoCounters;

/// The counters of one device at one moment (each counter is exact; the two
/// parts are read one after the other, not as one consistent cut).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    /// The protocol engine's counters.
    pub engine: EngineCounters,
    /// The I/O driver's counters (socket, faults, capture).
    pub io: IoCounters,
    /// The connection manager's MADs and drops.
    pub cm: crate::cm::CmCounters,
    /// QP1: MADs carried, datagrams that were not GSI MADs.
    pub gsi: GsiCounters,
    /// RAW_PACKET QPs' frames.
    pub raw: RawCounters,
}

impl Context {
    /// The I/O driver's counters alone: a snapshot of atomics, without the
    /// engine's lock that [`Context::counters`] takes for the other parts
    /// (cheap enough to read on a program's data path).
    pub fn io_counters(&self) -> IoCounters {
        self.inner.dev.driver.counters()
    }

    /// The device's counters (all contexts of this process share them).
    pub fn counters(&self) -> DeviceCounters {
        DeviceCounters {
            engine: self.with(|e| e.counters()),
            io: self.io_counters(),
            cm: self.with(|e| e.cm_counters()),
            gsi: self.with(|e| e.gsi_counters()),
            raw: self.with(|e| e.raw_counters()),
        }
    }
}

//! The seeded randomness and the datagram fault model that the real UDP path
//! (`io`) and the simulator (`sim`) share: one place decides whether a
//! datagram is lost, corrupted (which bit), duplicated or reordered; each
//! driver applies the decision with its own clock (io holds datagrams back in
//! real time, the simulator schedules them on its virtual clock).
//!
//! Sans-IO: no clock, no threads, no globals; a seed means the same decisions
//! on every platform.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod model;
pub mod rng;

pub use model::{flip_bit, Decision, FaultModel, Odds};
pub use rng::Rng;

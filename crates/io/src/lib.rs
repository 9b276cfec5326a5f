//! The drivers around the sans-IO softverbs engine.
//!
//! This crate owns everything that touches the operating system on behalf of a
//! device: the RoCEv2 UDP socket (set up per `spec/roce-wire.md` §8.4–8.5:
//! unconnected, DF set, IP ID 0), the per-device progress thread ([`Driver`]), the only real clock ([`Clock`]), and the
//! pollable file descriptors C programs see ([`EventFd`], [`CompletionChannel`],
//! [`AsyncEventQueue`]), fault injection on the real path ([`faults`],
//! `SOFTVERBS_FAULTS`) and packet capture to pcap ([`capture`], `SOFTVERBS_PCAP`),
//! and the sharing of one address by several processes ([`share`]: every process
//! binds port 4791 with `SO_REUSEPORT`, a classic-BPF program steers by the slot in
//! the destination QPN, and a datagram that lands in the wrong process is forwarded
//! to its owner; the decision and its measurements are in `spec/shared-address.md`),
//! and the same-host path (`shm`, on by default, `SOFTVERBS_SHM=0` turns it off:
//! shared-memory rings between the processes of one host instead of UDP,
//! `spec/same-host.md`).
//! It does not depend on the engine: [`Engine`] is the contract the engine
//! implements, and its doc states the call order.
//!
//! Unsafe code lives only in the private `sys` module and in [`host`] (libc
//! calls, each with a `// SAFETY:` comment). [`host`] is what a launcher needs
//! from the host: a private user + mount namespace, mounts, interfaces.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, missing_debug_implementations)]

pub mod ab;
mod batch;
mod callertx;
pub mod capture;
mod clock;
mod counters;
mod driver;
mod engine;
mod eventfd;
mod events;
pub mod faults;
mod hold;
pub mod host;
mod linger;
mod mcast;
mod options;
mod pollrx;
mod progress;
pub mod raw;
pub mod share;
mod shm;
mod socket;
mod sys;

pub use clock::{Clock, Nanos};
pub use counters::{CounterCells, CounterSnapshot, Counters};
pub use driver::{Doorbell, Driver};
pub use engine::{AsyncEvent, Burst, Engine, Notification, Room, Transmit};
pub use eventfd::EventFd;
pub use events::{AsyncEventQueue, CompletionChannel, EventQueue, DEFAULT_EVENT_CAPACITY};
pub use faults::{FaultConfig, FaultConfigError, FaultDirection, FaultValueError};
/// Time stamps at named points (`lanes::stamp`; the `stamps` feature).
pub use lanes::stamp;
pub use lanes::LaneSet;
pub use options::{DriverOptions, OptionsError};
pub use progress::MAX_SLEEP;
pub use shm::cross_memory_copy;
pub use shm::ENV as SHM_ENV;
pub use shm::RING_BYTES as SHM_RING_BYTES;

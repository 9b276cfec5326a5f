//! RoCEv2 wire format: bytes ↔ typed InfiniBand transport headers.
//!
//! The facts come from `spec/roce-wire.md` (cited as §n). This crate owns
//! everything needed to turn RC, UC and UD traffic into standard RoCEv2 packets
//! and back; it does no I/O (except writing pcap to a caller's `Write`), never
//! allocates on the parse path and contains no unsafe code.
//!
//! - one module per header — [`bth`], [`rdeth`], [`deth`], [`xrceth`], [`feth`],
//!   [`reth`], [`atomic_eth`], [`immdt`], [`ieth`], [`aeth`], [`atomic_ack_eth`] —
//!   each a zero-copy view `Packet<T: AsRef<[u8]>>` plus a validated `Repr` with
//!   `parse`/`emit`. After a view's `check_len` succeeds no accessor panics;
//!   `Repr::emit` never panics on a buffer of `Repr::buffer_len()` bytes.
//! - [`opcode`]: the opcode table as data, [`Opcode`], segmentation helpers.
//! - [`packet`]: [`TransportRepr`], a whole UDP payload (BTH … ICRC).
//! - [`psn`], [`ids`]: 24-bit [`Psn`] with serial arithmetic; [`Qpn`], [`Rkey`], … newtypes.
//! - [`icrc`]: the ICRC, including IPv4-ID recovery on receive (§8.5).
//! - [`encap`]: IPv4/IPv6 + UDP + Ethernet framing; [`pcap`]: capture files.
#![forbid(unsafe_code)]
#![warn(missing_debug_implementations)]

mod error;
mod field;
mod headers;

pub mod aeth;
pub mod atomic_ack_eth;
pub mod atomic_eth;
pub mod bth;
pub mod cm;
pub mod deth;
pub mod encap;
pub mod feth;
pub mod icrc;
pub mod ids;
pub mod ieth;
pub mod immdt;
pub mod mad;
pub mod opcode;
pub mod packet;
pub mod pcap;
pub mod psn;
pub mod rdeth;
pub mod reth;
pub mod xrceth;

pub use encap::{Encap, IpInfo, Ipv4Info, Ipv6Info, ROCE_UDP_PORT};
pub use error::{Error, Result};
pub use headers::{HeaderSet, WIRE_ORDER};
pub use ids::{Eecn, Lkey, Msn, PKey, Qkey, Qpn, Rkey, XrcSrqn};
pub use opcode::{pad_len, MessageKind, Opcode, Operation, PayloadRule, Position, Transport};
pub use packet::TransportRepr;
pub use psn::{Psn, PsnRegion};

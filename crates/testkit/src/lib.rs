//! What the tests of the softverbs crates share (a dev-dependency only):
//!
//! - [`netns`]: network namespaces a test creates (root only), joined by a
//!   veth pair with addresses and routes, deleted (with anything left running
//!   in them) when dropped; commands run inside one, bounded by `timeout`.
//! - [`wait`]: waiting, bounded, until a device has bound UDP port 4791 at an
//!   address (or has closed), or until something listens on a TCP port.
//! - [`proc`]: bounded child processes: `timeout(1)` in front, killed by PID
//!   on drop, ended after a deadline with their output kept; and children of
//!   the test binary itself, run again under a prefix (`ip netns exec`).
//! - [`layering`]: a crate's import graph read from its sources, and the
//!   check that its files' imports form no circle.

pub mod layering;
pub mod netns;
pub mod proc;
pub mod wait;

pub use netns::Netns;
pub use proc::{
    assert_child, child, finish_within, have, is_root, run_child, text, timeout, KillOnDrop,
};
pub use wait::{
    listening, wait_device, wait_device_gone, wait_device_gone_in, wait_device_in, wait_tcp_listen,
    wait_tcp_listen_in,
};

//! Why the same-host path was not taken, in words (logged at debug level,
//! then the datagrams go by UDP).

use std::io;
use std::net::IpAddr;
use std::time::Duration;

/// Why a sender does not use a peer's path.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refusal {
    /// Nobody listens on the path's name in this network namespace.
    #[error(
        "no process of this network namespace has a same-host path open for {ip} slot {slot} \
         ({source}): not on this host, in another namespace, not running, or without {}=1",
        super::ENV
    )]
    NoPath {
        /// The destination address.
        ip: IpAddr,
        /// The destination QPN's slot.
        slot: u8,
        /// What connect(2) said.
        source: io::Error,
    },
    /// The name is held by a process of another user.
    #[error(
        "the path of {ip} slot {slot} is held by process {pid} of user {uid}, not ours ({ours})"
    )]
    OtherUser {
        /// The destination address.
        ip: IpAddr,
        /// The destination QPN's slot.
        slot: u8,
        /// The holder's process id and user id (`SO_PEERCRED`).
        pid: i32,
        /// The holder's user id.
        uid: u32,
        /// Ours.
        ours: u32,
    },
    /// The destination address cannot be bound here: not ours.
    #[error("{ip} is not an address of this host's namespace")]
    NotLocal {
        /// The destination address.
        ip: IpAddr,
    },
    /// A system call of the set-up failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The error.
        source: io::Error,
    },
    /// The receiver closed the connection instead of accepting the ring.
    #[error("the receiver refused the ring (its debug log says why)")]
    Refused,
    /// The receiver's end of the connection closed (it exited or crashed).
    #[error("the receiver is gone (its connection closed)")]
    Gone,
    /// The receiver did not answer in time.
    #[error("the receiver did not accept the ring in {0:?}")]
    NoAnswer(Duration),
}

/// Why a receiver refuses a sender's ring.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Rejection {
    /// A system call failed (reading the hello, credentials, seals, mmap).
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The error.
        source: io::Error,
    },
    /// The sender is another user.
    #[error("process {pid} is of user {uid}, not ours")]
    OtherUser {
        /// The sender's process id.
        pid: i32,
        /// Its user id.
        uid: u32,
    },
    /// The hello is not one.
    #[error("process {pid} sent a malformed hello ({len} bytes)")]
    Malformed {
        /// The sender's process id.
        pid: i32,
        /// Bytes read.
        len: usize,
    },
    /// The sender lives in another network namespace.
    #[error("process {pid} is in another network namespace")]
    OtherNamespace {
        /// The sender's process id.
        pid: i32,
    },
    /// The sender asked for another slot.
    #[error("process {pid} asked for slot {asked}, ours is {ours}")]
    WrongSlot {
        /// The sender's process id.
        pid: i32,
        /// The slot it named.
        asked: u8,
        /// Ours.
        ours: u8,
    },
    /// No descriptor came with the hello.
    #[error("process {pid} passed no ring")]
    NoRing {
        /// The sender's process id.
        pid: i32,
    },
    /// The ring's file is unusable: size, seals or header.
    #[error("process {pid}'s ring is unusable (capacity {capacity}, {len} bytes, seals {seals:#x}, header ok: {header})")]
    BadRing {
        /// The sender's process id.
        pid: i32,
        /// The capacity the hello named.
        capacity: u64,
        /// The file's length.
        len: u64,
        /// The file's seals.
        seals: i32,
        /// Whether the ring's header checked out.
        header: bool,
    },
}

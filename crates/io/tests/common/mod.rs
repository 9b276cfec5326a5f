//! Fake engines and helpers shared by the integration tests.
#![allow(dead_code)]
#![allow(unsafe_code)] // poll(2) on the driver's descriptors (test-only)

use std::collections::{BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use sv_io::{Driver, DriverOptions, Engine, Nanos, Notification, Transmit};

/// Generous bound for anything the tests wait for (never a timing assertion).
pub const DEADLINE: Duration = Duration::from_secs(20);

/// One datagram the engine was handed.
#[derive(Clone, Debug)]
pub struct Received {
    pub now: Nanos,
    pub from: SocketAddr,
    pub to: SocketAddr,
    pub payload: Vec<u8>,
}

/// A scriptable engine: sends what is queued in `outbox`, optionally echoes
/// (up to `echo_budget` replies), fires the timers in `timers`, emits `notes`.
#[derive(Debug, Default)]
pub struct Fake {
    pub outbox: VecDeque<(SocketAddr, Vec<u8>)>,
    pub inbox: Vec<Received>,
    pub echo_budget: u64,
    pub timers: BTreeSet<Nanos>,
    /// (deadline, now) of each fired timer.
    pub fired: Vec<(Nanos, Nanos)>,
    pub notes: VecDeque<Notification>,
    /// `now` of every poll_transmit that returned a datagram.
    pub sent_at: Vec<Nanos>,
}

impl Fake {
    pub fn echo() -> Self {
        Fake {
            echo_budget: u64::MAX,
            ..Fake::default()
        }
    }
}

impl Engine for Fake {
    fn handle_datagram(&mut self, now: Nanos, from: SocketAddr, to: SocketAddr, payload: &[u8]) {
        self.inbox.push(Received {
            now,
            from,
            to,
            payload: payload.to_vec(),
        });
        if self.echo_budget > 0 {
            self.echo_budget -= 1;
            self.outbox.push_back((from, payload.to_vec()));
        }
    }

    fn poll_transmit(&mut self, now: Nanos, buf: &mut [u8]) -> Option<Transmit> {
        let (to, bytes) = self.outbox.pop_front()?;
        buf[..bytes.len()].copy_from_slice(&bytes);
        self.sent_at.push(now);
        Some(Transmit {
            to,
            len: bytes.len(),
        })
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        self.timers.first().copied()
    }

    fn handle_timeout(&mut self, now: Nanos) {
        while let Some(&t) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.pop_first();
            self.fired.push((t, now));
        }
    }

    fn poll_notification(&mut self) -> Option<Notification> {
        self.notes.pop_front()
    }

    fn has_work(&self) -> bool {
        !self.outbox.is_empty() || !self.notes.is_empty()
    }
}

/// Polls `cond` every millisecond until it holds or [`DEADLINE`] passes.
pub fn wait_until(mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < DEADLINE {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    cond()
}

/// A driver for `engine` on `addr` with default options.
pub fn start(engine: Fake, addr: &str) -> Driver<Fake> {
    Driver::start(engine, addr.parse().unwrap(), DriverOptions::default()).unwrap()
}

/// Whether `fd` is readable right now (poll(2) from "C").
pub fn fd_readable(fd: std::os::fd::RawFd, timeout_ms: i32) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd on the stack for the call.
    let n = unsafe { libc::poll(&raw mut pfd, 1, timeout_ms) };
    n == 1 && pfd.revents & libc::POLLIN != 0
}

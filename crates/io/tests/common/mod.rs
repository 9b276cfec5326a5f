//! Fake engines and helpers shared by the integration tests.
#![allow(dead_code)]
#![allow(unsafe_code)] // poll(2) on the driver's descriptors (test-only)

use std::collections::{BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Mutex;
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

/// What a [`Fake`] holds: tests reach it through `Driver::with` (`e.s()`).
#[derive(Debug, Default)]
pub struct FakeState {
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

/// A scriptable engine: sends what is queued in `outbox`, optionally echoes
/// (up to `echo_budget` replies), fires the timers in `timers`, emits `notes`.
/// Its state sits under one lock (the driver calls the data path through
/// `&self`, from several threads).
#[derive(Debug, Default)]
pub struct Fake(Mutex<FakeState>);

impl Fake {
    pub fn echo() -> Self {
        Fake::from(FakeState {
            echo_budget: u64::MAX,
            ..FakeState::default()
        })
    }

    /// The state, through `&mut` (`Driver::with`).
    pub fn s(&mut self) -> &mut FakeState {
        self.0.get_mut().unwrap()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.0.lock().unwrap()
    }
}

impl From<FakeState> for Fake {
    fn from(s: FakeState) -> Self {
        Fake(Mutex::new(s))
    }
}

impl Engine for Fake {
    type Claims = ();
    fn handle_datagram(&self, now: Nanos, from: SocketAddr, to: SocketAddr, payload: &[u8]) {
        let mut s = self.lock();
        s.inbox.push(Received {
            now,
            from,
            to,
            payload: payload.to_vec(),
        });
        if s.echo_budget > 0 {
            s.echo_budget -= 1;
            s.outbox.push_back((from, payload.to_vec()));
        }
    }

    fn poll_transmit(&self, now: Nanos, buf: &mut [u8]) -> Option<Transmit> {
        let mut s = self.lock();
        let (to, bytes) = s.outbox.pop_front()?;
        buf[..bytes.len()].copy_from_slice(&bytes);
        s.sent_at.push(now);
        Some(Transmit {
            to,
            len: bytes.len(),
            segments: None,
        })
    }

    /// Several datagrams a call, as the real engine's turns give a QP's
    /// packets: the driver's batches take what each call builds, in order.
    fn poll_transmit_burst(
        &self,
        now: Nanos,
        (): &mut (),
        burst: &mut dyn sv_io::Burst,
        max: usize,
    ) -> usize {
        let mut n = 0;
        while n < max {
            let Some(buf) = burst.buffer() else { break };
            let Some(t) = self.poll_transmit(now, buf) else {
                break;
            };
            burst.built(&t);
            n += 1;
        }
        n
    }

    fn poll_timeout(&self) -> Option<Nanos> {
        self.lock().timers.first().copied()
    }

    fn handle_timeout(&self, now: Nanos) {
        let mut s = self.lock();
        while let Some(&t) = s.timers.first() {
            if t > now {
                break;
            }
            s.timers.pop_first();
            s.fired.push((t, now));
        }
    }

    fn poll_notification(&self) -> Option<Notification> {
        self.lock().notes.pop_front()
    }

    fn has_work(&self) -> bool {
        let s = self.lock();
        !s.outbox.is_empty() || !s.notes.is_empty()
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

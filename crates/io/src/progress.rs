//! The progress thread: the loop that moves datagrams between the socket and the engine.
//!
//! It owns the socket and two datagram buffers; it shares only the engine
//! (locked per step), the doorbell, counters and the notification targets. One
//! *pass* receives, fires due timers, transmits and delivers notifications, each
//! bounded by `batch` (the order is documented in [`crate::engine`]). After a
//! pass with no work it busy-polls for `busy_poll`, then sleeps in ppoll(2) on
//! the socket and the doorbell until the engine's next deadline (at most
//! [`MAX_SLEEP`]). It exits when the stop flag is set.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::counters::Counters;
use crate::driver::{DriverOptions, Shared};
use crate::engine::{Engine, Notification};
use crate::socket::{self, SendOutcome};
use crate::sys;

/// Longest sleep with no deadline (a safety net; wake-ups come from fds).
pub const MAX_SLEEP: Duration = Duration::from_secs(1);
/// Longest sleep while a datagram waits for room in the socket (ENOBUFS gives no POLLOUT).
const RETRY_SLEEP: Duration = Duration::from_millis(1);

pub(crate) struct Progress<E> {
    shared: Arc<Shared<E>>,
    socket: UdpSocket,
    local: SocketAddr,
    rx_buf: Vec<u8>,
    /// Holds the pending datagram (if any) until it is sent.
    tx_buf: Vec<u8>,
    pending: Option<(SocketAddr, usize)>,
    notes: Vec<Notification>,
    batch: usize,
    busy_poll: Duration,
}

impl<E: Engine> Progress<E> {
    pub(crate) fn new(
        shared: Arc<Shared<E>>,
        socket: UdpSocket,
        local: SocketAddr,
        opts: &DriverOptions,
    ) -> Self {
        let max = opts.max_datagram_bytes.max(1);
        Progress {
            shared,
            socket,
            local,
            rx_buf: vec![0; max],
            tx_buf: vec![0; max],
            pending: None,
            notes: Vec::with_capacity(opts.batch.max(1)),
            batch: opts.batch.max(1),
            busy_poll: opts.busy_poll,
        }
    }

    pub(crate) fn run(mut self) {
        let mut last_work = Instant::now();
        while !self.shared.stop.load(SeqCst) {
            if self.pass() {
                last_work = Instant::now();
            } else if last_work.elapsed() < self.busy_poll {
                std::hint::spin_loop();
            } else {
                self.sleep();
                last_work = Instant::now();
            }
        }
    }

    /// One pass; whether it did anything.
    fn pass(&mut self) -> bool {
        let received = self.receive();
        let fired = self.timers();
        let sent = self.transmit();
        let notified = self.notify();
        received || fired || sent || notified
    }

    fn receive(&mut self) -> bool {
        let c = &self.shared.counters;
        for i in 0..self.batch {
            match self.socket.recv_from(&mut self.rx_buf) {
                Ok((n, from)) => {
                    Counters::add(&c.datagrams_received, 1);
                    Counters::add(&c.bytes_received, n as u64);
                    let now = self.shared.clock.now();
                    let payload = &self.rx_buf[..n];
                    self.shared
                        .engine()
                        .handle_datagram(now, from, self.local, payload);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return i > 0,
                Err(e) => {
                    Counters::add(&c.recv_errors, 1);
                    tracing::warn!(local = %self.local, error = %e, "receive failed");
                    return true;
                }
            }
        }
        true
    }

    fn timers(&mut self) -> bool {
        let now = self.shared.clock.now();
        let mut engine = self.shared.engine();
        match engine.poll_timeout() {
            Some(deadline) if deadline <= now => {
                engine.handle_timeout(now);
                true
            }
            _ => false,
        }
    }

    fn transmit(&mut self) -> bool {
        let mut work = false;
        if let Some((to, len)) = self.pending {
            if !self.send(to, len) {
                return false;
            }
            work = true;
        }
        for _ in 0..self.batch {
            let now = self.shared.clock.now();
            let Some(t) = self.shared.engine().poll_transmit(now, &mut self.tx_buf) else {
                break;
            };
            work = true;
            if t.len > self.tx_buf.len() {
                Counters::add(&self.shared.counters.send_errors, 1);
                tracing::error!(
                    len = t.len,
                    "engine reported a datagram longer than its buffer"
                );
            } else if t.to == self.local {
                self.loopback(now, t.len);
            } else if !self.send(t.to, t.len) {
                break;
            }
        }
        work
    }

    /// Loopback shortcut: our own address, so no socket.
    fn loopback(&mut self, now: u64, len: usize) {
        let c = &self.shared.counters;
        Counters::add(&c.loopback_datagrams, 1);
        Counters::add(&c.loopback_bytes, len as u64);
        let payload = &self.tx_buf[..len];
        self.shared
            .engine()
            .handle_datagram(now, self.local, self.local, payload);
    }

    /// Sends `tx_buf[..len]`; `false` if it must wait (then it is pending).
    fn send(&mut self, to: SocketAddr, len: usize) -> bool {
        let c = &self.shared.counters;
        self.pending = None;
        match socket::send(&self.socket, to, &self.tx_buf[..len]) {
            SendOutcome::Sent => {
                Counters::add(&c.datagrams_sent, 1);
                Counters::add(&c.bytes_sent, len as u64);
            }
            SendOutcome::Retry => {
                Counters::add(&c.send_retries, 1);
                self.pending = Some((to, len));
                return false;
            }
            SendOutcome::Failed(e) => {
                Counters::add(&c.send_errors, 1);
                tracing::warn!(local = %self.local, %to, len, error = %e, "send failed; dropped");
            }
        }
        true
    }

    fn notify(&mut self) -> bool {
        {
            let mut engine = self.shared.engine();
            while self.notes.len() < self.batch {
                let Some(n) = engine.poll_notification() else {
                    break;
                };
                self.notes.push(n);
            }
        }
        let work = !self.notes.is_empty();
        let mut notes = std::mem::take(&mut self.notes);
        for n in notes.drain(..) {
            self.deliver(n);
        }
        self.notes = notes;
        work
    }

    fn deliver(&self, n: Notification) {
        let delivered = match n {
            Notification::Completion { channel, cq } => {
                self.shared.channel(channel).is_some_and(|ch| ch.notify(cq))
            }
            Notification::Async(ev) => self.shared.async_events.push(ev),
        };
        let c = &self.shared.counters;
        if delivered {
            Counters::add(&c.notifications, 1);
        } else {
            Counters::add(&c.notifications_dropped, 1);
            tracing::debug!(?n, "notification dropped (no such channel, or full)");
        }
    }

    /// Sleeps until the socket or doorbell is ready or the next deadline.
    fn sleep(&mut self) {
        let deadline = self.shared.engine().poll_timeout();
        let mut timeout = deadline
            .map_or(MAX_SLEEP, |d| self.shared.clock.until(d))
            .min(MAX_SLEEP);
        let mut sock_events = libc::POLLIN;
        if self.pending.is_some() {
            sock_events |= libc::POLLOUT;
            timeout = timeout.min(RETRY_SLEEP);
        }
        let bell = self.shared.doorbell.fd().as_raw_fd();
        let mut fds = [
            sys::pollfd(self.socket.as_raw_fd(), sock_events),
            sys::pollfd(bell, libc::POLLIN),
        ];
        Counters::add(&self.shared.counters.sleeps, 1);
        if let Err(e) = sys::poll(&mut fds, Some(timeout)) {
            tracing::warn!(error = %e, "poll failed");
        }
        if fds[1].revents != 0 {
            self.shared.doorbell.clear();
        }
    }
}

//! [`EventFd`]: an eventfd(2) counter with a pollable file descriptor.
//!
//! Counter mode (not semaphore): a write adds, a read returns the sum and resets
//! it to zero; the fd is readable (POLLIN) while the counter is non-zero, so C
//! code can `poll()` it like any other fd. The fd is nonblocking and
//! close-on-exec; it is closed when the `EventFd` drops.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use crate::sys;

/// An eventfd counter.
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    /// A new counter at zero.
    pub fn new() -> io::Result<Self> {
        Ok(EventFd {
            fd: sys::eventfd()?,
        })
    }

    /// Adds `n` (> 0) to the counter, making the fd readable. A counter already
    /// at its maximum (EAGAIN) is readable anyway, so that is not an error.
    pub fn add(&self, n: u64) -> io::Result<()> {
        match sys::eventfd_write(self.fd.as_fd(), n) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            other => other,
        }
    }

    /// Takes the whole count (0 if none), making the fd unreadable.
    pub fn take(&self) -> io::Result<u64> {
        match sys::eventfd_read(self.fd.as_fd()) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            other => other,
        }
    }

    /// Waits until the fd is readable or `timeout` passes (`None`: forever).
    /// Returns whether it is readable. Does not take the count.
    pub fn wait_readable(&self, timeout: Option<Duration>) -> io::Result<bool> {
        wait_readable(self.fd.as_raw_fd(), timeout)
    }
}

/// Waits for POLLIN on `fd` for at most `timeout`, retrying after signals.
pub(crate) fn wait_readable(fd: RawFd, timeout: Option<Duration>) -> io::Result<bool> {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let mut fds = [sys::pollfd(fd, libc::POLLIN)];
        if sys::poll(&mut fds, left)? > 0 {
            return Ok(fds[0].revents & libc::POLLIN != 0);
        }
        if left.is_some_and(|l| l.is_zero()) {
            return Ok(false);
        }
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_mode_sums_and_resets() {
        let e = EventFd::new().unwrap();
        assert_eq!(e.take().unwrap(), 0);
        assert!(!e.wait_readable(Some(Duration::ZERO)).unwrap());
        e.add(1).unwrap();
        e.add(2).unwrap();
        assert!(e.wait_readable(Some(Duration::ZERO)).unwrap());
        assert_eq!(e.take().unwrap(), 3);
        assert_eq!(e.take().unwrap(), 0);
    }

    #[test]
    fn wakes_a_waiting_thread() {
        let e = std::sync::Arc::new(EventFd::new().unwrap());
        let e2 = e.clone();
        let t = std::thread::spawn(move || e2.wait_readable(Some(Duration::from_secs(20))));
        e.add(1).unwrap();
        assert!(t.join().unwrap().unwrap());
    }
}

//! How the progress thread sleeps: until the socket (unless a polling
//! thread's lease holds it), the doorbell, a group socket or the next
//! deadline is ready, and for how long at most.

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use super::{Progress, Readable, CALLER_TX_MAX_SLEEP, MAX_SLEEP, RETRY_SLEEP};
use crate::clock::Nanos;
use crate::counters::Counters;
use crate::engine::Engine;
use crate::sys;

impl<E: Engine> Progress<E> {
    /// The engine's next deadline, and when this thread will wake at the
    /// latest published in `Shared::wake_at`: an application thread that
    /// transmits by itself (crate::callertx) sets timers and then reads it,
    /// and wakes this thread for an earlier deadline. The deadline is read
    /// again after the store until it stays: a timer set before the second
    /// read is seen by it, one set after it is checked by its setter against
    /// the value stored (other threads' data path runs beside this one).
    fn publish_wake_at(&self) -> Option<Nanos> {
        let latest = self.shared.clock.now() + self.longest_sleep().as_nanos() as u64;
        let wake = |d: Option<Nanos>| d.map_or(latest, |d| d.min(latest));
        let mut d = self.shared.engine().poll_timeout();
        // Bounded: each further round follows a deadline set meanwhile.
        for _ in 0..4 {
            self.shared.wake_at.store(wake(d), SeqCst);
            let again = self.shared.engine().poll_timeout();
            if wake(again) >= wake(d) {
                break;
            }
            d = again;
        }
        d
    }

    /// Sleeps until the socket or doorbell is ready or the next deadline.
    pub(super) fn sleep(&mut self) {
        self.flush_capture();
        let engine_deadline = self.publish_wake_at();
        let held = [self.faults.hold.next_wake(), self.raw.next_wake()];
        let deadline = match (engine_deadline, held.into_iter().flatten().min()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let longest = self.longest_sleep();
        let mut timeout = deadline
            .map_or(longest, |d| self.shared.clock.until(d))
            .min(longest);
        // A thread polls a CQ of the device (crate::pollrx): the socket is
        // its to read until the lease ends, when this thread looks again.
        let now = self.shared.clock.now();
        let lease = self.shared.rx.lease(now);
        if let Some(end) = lease {
            timeout = timeout.min(self.shared.clock.until(end));
        }
        let mut sock_events = libc::POLLIN;
        if self.tx_waiting() || self.faults.blocked {
            // shm: a full ring is not the socket's to report: just wait a little.
            if !self.shm_full {
                sock_events |= libc::POLLOUT;
            }
            timeout = timeout.min(RETRY_SLEEP);
        }
        let until = now + timeout.as_nanos() as u64;
        let aside = self.shared.rx.set_asleep(Some(until), lease.is_some(), now);
        // Left to a polling thread whose lease has ended: ours, not a sleep
        // (crate::callertx::Shared::leave_to_poller, the other half).
        let tx = self.shared.caller_tx.as_ref();
        let wanted = !aside && tx.is_some_and(crate::callertx::CallerTx::is_any_wanted);
        // shm: tell same-host senders we sleep, unless the rings are the
        // polling thread's (aside); do not sleep if a datagram came.
        let came = !aside
            && !wanted
            && self.shared.shm().is_some_and(|mut shm| {
                let came = shm.arm();
                if came {
                    shm.woke(&[]);
                }
                came
            });
        if wanted || came {
            self.shared.rx.set_asleep(None, false, now);
            self.shared.wake_at.store(0, SeqCst);
            return;
        }
        Counters::add(&self.shared.counters.sleeps, 1);
        if aside {
            // Not the socket's POLLIN (nor its POLLERR: a negative fd).
            Counters::add(&self.shared.counters.aside_sleeps, 1);
            sock_events &= !libc::POLLIN;
        }
        self.wait(sock_events, timeout);
        self.shared.rx.set_asleep(None, false, now);
        if let Some(end) = lease.filter(|_| aside) {
            self.lease_ended(end);
        }
    }

    /// After a sleep aside: if it lasted to the lease's end, the lease
    /// adapts (crate::pollrx::RxGate::lease_ended) to whether it was
    /// renewed meanwhile or ended with a datagram waiting for it (one
    /// zero-timeout poll(2) to know, which also lets this pass read it).
    pub(super) fn lease_ended(&mut self, end: Nanos) {
        let now = self.shared.clock.now();
        if now < end {
            return; // woken early (the doorbell): nothing learnt
        }
        let renewed = self.shared.rx.lease(now).is_some();
        let waited = (!renewed || self.shared.rx.quiet(now)) && {
            self.peek();
            self.readable.socket || self.shared.shm().is_some_and(|s| s.has_data())
        };
        let shared = self.shared.clone();
        shared.rx.lease_ended(renewed, waited, &shared.counters);
    }

    /// The longest sleep: shorter while posting threads transmit by
    /// themselves, so that a post that arms the usual ACK timeout (67 ms)
    /// needs no doorbell for it ([`CALLER_TX_MAX_SLEEP`]).
    pub(super) fn longest_sleep(&self) -> Duration {
        match self.shared.caller_tx {
            Some(_) => CALLER_TX_MAX_SLEEP,
            None => MAX_SLEEP,
        }
    }

    /// Learns what is readable now, without sleeping.
    pub(super) fn peek(&mut self) {
        self.wait(libc::POLLIN, Duration::ZERO);
    }

    /// One poll(2) on every source (the socket with `sock_events`; not the
    /// socket at all when they are none), at most `timeout`: clears the
    /// doorbell if it rang and notes what is readable.
    pub(super) fn wait(&mut self, sock_events: libc::c_short, timeout: Duration) {
        let bell = self.shared.doorbell.fd().as_raw_fd();
        // A negative fd is ignored by poll(2): no inbox when the address is ours alone.
        let inbox = self.share.as_ref().map_or(-1, |(s, _)| s.inbox_fd());
        let sock = match sock_events {
            0 => -1,
            _ => self.socket.as_raw_fd(),
        };
        let mut fds = std::mem::take(&mut self.pollfds);
        fds.clear();
        fds.extend([
            sys::pollfd(sock, sock_events),
            sys::pollfd(bell, libc::POLLIN),
            sys::pollfd(inbox, libc::POLLIN),
        ]);
        let groups = self.groups.iter();
        fds.extend(groups.map(|(_, s)| sys::pollfd(s.as_raw_fd(), libc::POLLIN)));
        let services = fds.len();
        if let Some((slot, _)) = &self.share {
            slot.service_fds(&mut fds);
        }
        let services = services..fds.len();
        self.raw.pollfds(&mut fds);
        let shared = self.shared.clone();
        if let Some(mut shm) = shared.shm() {
            shm.pollfds(&mut fds);
        }
        match sys::poll(&mut fds, Some(timeout)) {
            Ok(_) => {
                // Any event but POLLOUT (data, an error to collect, a hang-up) is for a read.
                let r = &mut self.readable;
                r.socket |= fds[0].revents & !libc::POLLOUT != 0;
                r.inbox |= fds[2].revents != 0;
                r.services |= fds[services].iter().any(|f| f.revents != 0);
            }
            Err(e) => {
                tracing::warn!(error = %e, "poll failed");
                self.readable = Readable {
                    socket: true,
                    inbox: true,
                    services: true,
                };
            }
        }
        self.shared.wake_at.store(0, SeqCst);
        if fds[1].revents != 0 {
            self.shared.doorbell.clear();
        }
        if let Some(mut shm) = shared.shm() {
            shm.woke(&fds);
        }
        self.pollfds = fds;
    }
}

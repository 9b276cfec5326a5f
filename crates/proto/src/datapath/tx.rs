//! Packets out and timers: the scheduler's side. Each call of
//! [`Engine::poll_transmit`] gives the QP at the front of the ready queue one
//! turn ([`crate::qp::actor::Qp::next_packet`]: one packet, responses before
//! requests) and puts it at the back if it sent; QPs with nothing to send
//! are never visited. Timers are one deadline per QP in a heap
//! ([`crate::sched::TimerHeap`]); expiry runs only the QPs that are due.

use crate::memory::Memory;
use crate::output::Transmit;
use crate::Engine;

impl Engine {
    /// Writes the next datagram into `buf` (at least one path MTU plus 64
    /// bytes of headers). `None` when nothing is ready now.
    pub fn poll_transmit(
        &mut self,
        now: u64,
        mem: &dyn Memory,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        // What was posted on send rings since the last turn joins the queues.
        self.take_posted();
        // CM hook: MADs go first (gsi.rs, spec/cm.md §7).
        if let Some(t) = self.gsi_transmit(buf) {
            return Some(t);
        }
        while let Some(h) = self.dev.ready.pop_front() {
            // A QP that sent its last packet comes round once more to find
            // nothing: decide that without the turn (the same outcome: off
            // the queue until something wakes it; nothing else changes).
            if let Some(q) = self.qps.get_mut(h) {
                if q.tx_idle() {
                    q.dp.scheduled = false;
                    q.dp.wants_tx = false;
                    continue;
                }
            }
            let turn = self.drive(h, mem, |q, env, sink| {
                q.dp.scheduled = false;
                let t = q.next_packet(now, env, buf, sink);
                // A QP that sent goes to the back of the queue for its next
                // packet; one that had nothing waits until something wakes it.
                q.dp.wants_tx = t.is_some();
                t
            });
            if let Some(Some(t)) = turn {
                self.dev.counters.packets_sent += 1;
                self.dev.counters.bytes_sent += t.len as u64;
                return Some(t);
            }
        }
        None
    }

    /// When [`Engine::handle_timeout`] is next due, if ever.
    pub fn poll_timeout(&self) -> Option<u64> {
        let qps = self.dev.timers.peek().map(|(deadline, _)| deadline);
        // CM hook (gsi.rs): the CM's MAD timers join the device's.
        [qps, self.gsi.cm.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Runs the timers that are due: RNR waits end; ACK timeouts resend from
    /// the oldest unacknowledged PSN or, with the retry budget spent, fail the
    /// oldest WQE with `RETRY_EXC_ERR` (rc-reliability.md §1.3). Afterwards
    /// [`Engine::poll_timeout`] is `None` or later than `now`.
    pub fn handle_timeout(&mut self, now: u64) {
        self.gsi.cm.handle_timeout(now); // CM hook (gsi.rs)
        let mut due = std::mem::take(&mut self.dev.due);
        due.clear();
        self.dev.timers.pop_due(now, &mut due);
        // In QP-slot order, so that the ready queue fills in the same order
        // whatever the deadlines were.
        due.sort_unstable_by_key(|h| h.index());
        for &h in &due {
            self.drive_ctl(h, |q, sink| q.on_timeout(now, sink));
        }
        self.dev.due = due;
        debug_assert!(
            self.poll_timeout().is_none_or(|t| t > now),
            "a timer still due after handle_timeout"
        );
    }
}

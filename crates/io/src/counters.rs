//! Per-driver traffic counters.
//!
//! Every thread that sends or receives (the progress thread, posting and
//! polling threads) increments [`Counters`]: one set of cells per counting
//! slot (crate `lanes`: `Tally`, `Count`), so that two threads counting at
//! once write lines of their own, and a thread that holds a slot alone adds
//! without a locked instruction. Each counter is exact; a snapshot sums the
//! slots and is not a consistent cut across counters. The API reads a plain
//! [`CounterSnapshot`].

use lanes::Count;

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        /// One counting slot's counters.
        #[derive(Debug)]
        pub struct CounterCells { $($(#[$doc])* pub $name: Count,)* }

        impl CounterCells {
            /// Zero counts; `shared`: the shared slot's ([`Count::new`]).
            fn new(shared: bool) -> Self {
                CounterCells { $($name: Count::new(shared),)* }
            }
        }

        /// A copy of [`Counters`] at one moment.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct CounterSnapshot { $($(#[$doc])* pub $name: u64,)* }

        impl Counters {
            /// Reads every counter (the sum of the slots).
            pub fn snapshot(&self) -> CounterSnapshot {
                let mut s = CounterSnapshot::default();
                for c in self.0.all() {
                    $(s.$name += c.$name.get();)*
                }
                s
            }
        }
    };
}

counters! {
    /// Datagrams handed to the kernel.
    datagrams_sent,
    /// Payload bytes of `datagrams_sent`.
    bytes_sent,
    /// Datagrams read from the socket.
    datagrams_received,
    /// Payload bytes of `datagrams_received`.
    bytes_received,
    /// Send system calls made (one sendmmsg carries many datagrams).
    send_calls,
    /// Receive system calls that returned datagrams (one recvmmsg reads many).
    recv_calls,
    /// Datagrams that left inside a UDP GSO send of several (one message, one segment each).
    gso_datagrams,
    /// Times the kernel refused UDP GSO (it is then off for the socket).
    gso_fallbacks,
    /// Datagrams read inside a UDP GRO buffer of several, split back apart.
    gro_datagrams,
    /// Sends that failed for good (the datagram was dropped; the protocol retransmits).
    send_errors,
    /// Sends refused with EAGAIN/ENOBUFS and kept for a retry.
    send_retries,
    /// Receive calls that failed (other than "nothing to read").
    recv_errors,
    /// Receive calls (socket, shared-address inbox) that found nothing to read
    /// (EAGAIN): the progress loop reads only what poll(2) reported readable.
    recv_empty,
    /// Reads of the socket by an application thread polling an empty CQ
    /// while the progress thread slept ([`crate::Driver::drive_receive`]).
    poll_receive_calls,
    /// Datagrams those reads handed to the engine.
    poll_receive_datagrams,
    /// Polls that left what their datagrams made (an ACK) to the program's
    /// next post or poll (crate::pollrx::defers).
    deferred_transmits,
    /// Posts that waited for the answer to them (crate::linger).
    post_waits,
    /// Of them, those whose wait ended at its bound with no answer.
    post_waits_missed,
    /// Polls that left an empty socket unread because the same-host rings
    /// carry the traffic (crate::pollrx, "The socket beside the rings").
    poll_socket_skips,
    /// Datagrams to our own address fed straight back to the engine.
    loopback_datagrams,
    /// Payload bytes of `loopback_datagrams`.
    loopback_bytes,
    /// Notifications delivered to a completion channel or the async-event queue.
    notifications,
    /// Notifications lost: unknown or closed channel, or a full queue.
    notifications_dropped,
    /// Shared address: datagrams for another process's slot, forwarded to it.
    forwarded,
    /// Shared address: datagrams another process forwarded to this one.
    forwards_received,
    /// Shared address: datagrams for a slot no process holds (or whose inbox
    /// was full), dropped.
    forward_drops,
    /// Times the progress thread went to sleep in poll(2).
    sleeps,
    /// Times the progress thread, after a pass that took a stream's batch
    /// (a ring's run or batch of several, or a socket read of several
    /// datagrams), watched for more before it slept (crate::progress).
    stream_watches,
    /// Of `sleeps`, those that left the socket to a thread polling a CQ
    /// (crate::pollrx's lease): an arrival did not wake the progress thread.
    aside_sleeps,
    /// Times the polling threads' lease was halved: a datagram waited for
    /// its end (crate::pollrx).
    lease_shrinks,
    /// Passes of the progress loop completed (each ends after its transmit
    /// flush: a datagram the engine gave before a pass began has left when it ends).
    passes,
    /// Fault injection: datagrams dropped.
    fault_drops,
    /// Fault injection: datagrams with one bit flipped.
    fault_corruptions,
    /// Fault injection: extra copies delivered.
    fault_duplicates,
    /// Fault injection: datagrams held back behind later ones.
    fault_reorders,
    /// Fault injection: datagrams delayed by the fixed delay.
    fault_delays,
    /// Fault injection: datagrams let through unheld (or copies not made) because the hold queue was full.
    fault_hold_overflows,
    /// Packet capture: records written.
    pcap_records,
    /// Packet capture: records that could not be written (the first write error stops the capture).
    pcap_errors,
    /// Datagrams a posting thread transmitted itself (`Driver::posted`), no
    /// progress thread involved (counted in `datagrams_sent` or
    /// `loopback_datagrams` too).
    caller_datagrams,
    /// Same-host path (crate::shm): datagrams put into a peer's shared ring.
    shm_datagrams_sent,
    /// Same-host path: datagrams read from the shared rings of local senders.
    shm_datagrams_received,
    /// Same-host path: peers that could not take it (not open there, another
    /// user or namespace, refused, no answer): their datagrams go by UDP.
    shm_fallbacks,
    /// Same-host path: pushes that found the peer's ring full for longer
    /// than the wait allows (the datagram stays queued, as for a full socket).
    shm_ring_full,
    /// Same-host path: wake-up bytes written to a sleeping receiver.
    shm_wakeups,
    /// accept(2) calls on the same-host path's listener (made only when
    /// poll(2) found it ready, or once each check period).
    shm_accept_calls,
    /// Same-host path: datagrams the engine built straight into a peer's
    /// ring (no batch, no copy; counted in `shm_datagrams_sent` too).
    shm_built_in_ring,
    /// Runs of packets (`Engine::poll_transmit_run`) published in a ring
    /// (counted in `shm_datagrams_sent` too).
    shm_runs_sent,
    /// Same-host path: responses (ACKs, READ responses, atomic ACKs) the
    /// engine built into the requester's ring while it took the request
    /// from a ring (`Engine::handle_local_datagram` with room; counted in
    /// `shm_built_in_ring` too).
    shm_responses,
    /// Frames the kernel queued to the RAW_PACKET QPs' packet sockets (past
    /// their filters), as it counts them (`PACKET_STATISTICS`, read when the
    /// counters are: `Driver::counters`).
    raw_kernel_queued,
    /// Of them, frames the kernel dropped for want of room in the socket.
    raw_kernel_drops,
}

/// Live counters of one driver: one [`CounterCells`] per counting slot. A
/// counter named through it (`counters.datagrams_sent`) is the calling
/// thread's slot's, which is where it adds; read the whole with
/// [`Counters::snapshot`].
#[derive(Debug)]
pub struct Counters(lanes::Tally<CounterCells>);

impl Default for Counters {
    fn default() -> Self {
        Counters(lanes::Tally::from_fn(CounterCells::new))
    }
}

impl std::ops::Deref for Counters {
    type Target = CounterCells;
    /// The calling thread's slot.
    #[inline]
    fn deref(&self) -> &CounterCells {
        self.0.mine()
    }
}

impl Counters {
    pub(crate) fn add(counter: &Count, n: u64) {
        counter.add(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_reads_each_counter() {
        let c = Counters::default();
        Counters::add(&c.datagrams_sent, 2);
        Counters::add(&c.bytes_sent, 100);
        Counters::add(&c.sleeps, 1);
        let s = c.snapshot();
        assert_eq!((s.datagrams_sent, s.bytes_sent, s.sleeps), (2, 100, 1));
        assert_eq!(s.recv_errors, 0);
    }

    #[test]
    fn a_snapshot_sums_what_every_thread_counted() {
        let c = Counters::default();
        std::thread::scope(|sc| {
            for _ in 0..3 {
                sc.spawn(|| {
                    for _ in 0..100 {
                        Counters::add(&c.datagrams_sent, 1);
                    }
                });
            }
        });
        Counters::add(&c.datagrams_sent, 1);
        assert_eq!(c.snapshot().datagrams_sent, 301);
    }
}

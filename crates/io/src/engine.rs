//! The contract between a driver and the sans-IO protocol engine.
//!
//! `proto` implements [`Engine`]; this crate never looks inside it. The trait is
//! the whole surface the progress thread uses, so the same engine can be driven
//! by [`crate::Driver`] (real sockets and clock) or by a simulator.
//!
//! # Call order (what a driver promises the engine)
//!
//! The progress thread repeats *passes*; each pass, in this order:
//! 1. [`Engine::handle_datagram`] for each datagram received since the last
//!    pass, in arrival order (at most `DriverOptions::batch` per pass);
//! 2. [`Engine::handle_timeout`] once if [`Engine::poll_timeout`] is `<= now`;
//! 3. [`Engine::poll_transmit`] until it returns `None`, the per-pass budget is
//!    spent, or the socket is full. A datagram addressed to the driver's own
//!    address goes straight back into `handle_datagram` (loopback shortcut);
//! 4. [`Engine::poll_notification`] until `None` (same budget).
//!
//! When a pass did nothing the thread busy-polls, then sleeps until a datagram,
//! the doorbell, or the deadline from `poll_timeout`. Every call takes the
//! engine lock separately, so API calls made through `Driver::with` may land
//! between any two of them; an API call that creates work must ring the doorbell.
//! `now` never decreases from one call to the next on one thread.
//!
//! # Several threads at once
//!
//! The data path's calls take `&self`: the driver holds the engine in a
//! reader-writer lock and makes them under its read side, from the progress
//! thread and from application threads (crate::pollrx, crate::callertx) at
//! once; `Driver::with` takes the write side. So an engine is `Sync` and
//! keeps its own locks for what two calls may share (proto: one per QP, per
//! CQ, per SRQ, the scheduler and the event queue, spec/concurrency.md §2).
//!
//! # What the engine promises
//! - `poll_transmit` writes at most `buf.len()` bytes and reports that length;
//! - after `handle_timeout(now)`, `poll_timeout()` is `None` or `> now`
//!   (otherwise the driver spins);
//! - no call blocks or panics on network input.

use std::net::SocketAddr;

use crate::clock::Nanos;
use lanes::LaneSet;

/// A datagram the engine wrote into the driver's buffer: `len` bytes to `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Destination (a RoCEv2 peer: its IP, UDP port 4791).
    pub to: SocketAddr,
    /// Bytes written at the start of the buffer.
    pub len: usize,
    /// A run of several packets ([`Engine::poll_transmit_run`]): the
    /// engine's description of it, to hand back with it to the receiving
    /// engine ([`Engine::handle_local_run`]). Only a same-host ring whose
    /// receiver takes runs may carry it.
    pub segments: Option<[u8; 3]>,
}

/// Room in a peer's same-host ring for a datagram the engine builds in
/// place while it holds what orders it (its QP): what a receive answers
/// at once (an ACK, a READ response) and a post's packets leave with no
/// transmit turn of their own (spec/performance.md §25).
pub trait Room {
    /// Room for one datagram (at least the driver's largest) to `to`, QP
    /// `qpn`, if a same-host ring takes it now.
    fn room(&mut self, to: SocketAddr, qpn: u32) -> Option<&mut [u8]>;
    /// Publishes `t`, built at the start of the room last given.
    fn publish(&mut self, t: &Transmit);
}

/// Buffers of a driver's transmit batch, which one turn of the engine fills
/// in order ([`Engine::poll_transmit_burst`]).
pub trait Burst {
    /// The next free buffer (at least the driver's largest datagram), if
    /// the batch has one.
    fn buffer(&mut self) -> Option<&mut [u8]>;
    /// `t` was built at the start of the buffer last given.
    fn built(&mut self, t: &Transmit);
}

/// An asynchronous event for the device's async-event queue (`ibv_get_async_event`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AsyncEvent {
    /// The event type (`enum ibv_event_type` value).
    pub kind: u32,
    /// The object it concerns (an opaque QP/CQ/SRQ id, or the port number).
    pub element: u64,
    /// The context whose queue gets it (the id given to
    /// [`crate::Driver::open_async_queue`]): the one that owns the object.
    pub ctx: u64,
}

/// Something the driver must deliver outside the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notification {
    /// A CQ armed for notification got a completion: wake its completion channel.
    Completion {
        /// The channel id ([`crate::CompletionChannel::id`]).
        channel: u32,
        /// The CQ, as an opaque id the API layer understands.
        cq: u64,
    },
    /// An asynchronous event for the device's async-event queue.
    Async(AsyncEvent),
}

/// The sans-IO protocol engine as a driver sees it. See the module doc for the call order.
pub trait Engine: Send + Sync + 'static {
    /// What one transmitting thread keeps of the engine between taking a
    /// batch of datagrams and putting it on the wire
    /// ([`Engine::poll_transmit_claimed`]); `()` for an engine whose
    /// datagrams may leave in any order.
    type Claims: Default + Send + 'static;
    /// Whether [`Engine::Claims`] keep what must leave in order with one
    /// thread, so that several threads may transmit at once; otherwise
    /// (the default) one thread transmits at a time, in the engine's order.
    const CLAIMS_ORDER: bool = false;
    /// A datagram arrived: `from` is the sender, `to` the local address it was sent to.
    /// (`to` is the driver's bound address: a wildcard bind reports the wildcard,
    /// as IP_PKTINFO is not read yet; for a datagram read from a multicast
    /// group's socket, the group's address and port — see `Driver::set_groups`.)
    fn handle_datagram(&self, now: Nanos, from: SocketAddr, to: SocketAddr, payload: &[u8]);
    /// Datagrams one socket read brought from `from`, in arrival order: as
    /// [`Engine::handle_datagram`] takes each (which the default calls).
    /// The engine may take consecutive ones for the same QP in one turn of
    /// it.
    fn handle_batch(
        &self,
        now: Nanos,
        from: SocketAddr,
        to: SocketAddr,
        datagrams: &mut dyn Iterator<Item = &[u8]>,
    ) {
        for payload in datagrams {
            self.handle_datagram(now, from, to, payload);
        }
    }
    /// A datagram from the same-host path (`crate::shm`) that went from the
    /// sending engine, which sealed it, to this one through shared memory
    /// only: no wire, and no fault injection that could alter it. The engine
    /// may skip the ICRC check where nothing else needs it (spec/same-host.md
    /// §1 "The ICRC on the path"); everything else is as for
    /// [`Engine::handle_datagram`], which the default calls. `reply`: room
    /// for what the engine answers at once ([`Room`]), if the driver has
    /// some; the default takes none.
    fn handle_local_datagram(
        &self,
        now: Nanos,
        from: SocketAddr,
        to: SocketAddr,
        payload: &[u8],
        reply: Option<&mut dyn Room>,
    ) {
        let _ = reply;
        self.handle_datagram(now, from, to, payload);
    }
    /// Datagrams of one same-host ring read together, in ring order, each
    /// marked intact and none a run: as [`Engine::handle_local_datagram`]
    /// takes each (which the default calls), `reply` for the last one's
    /// answers. The engine may take consecutive ones for the same QP in one
    /// turn of it.
    fn handle_local_batch(
        &self,
        now: Nanos,
        from: SocketAddr,
        to: SocketAddr,
        datagrams: &mut dyn Iterator<Item = &[u8]>,
        mut reply: Option<&mut dyn Room>,
    ) {
        let mut next = datagrams.next();
        while let Some(payload) = next.take() {
            next = datagrams.next();
            let last = next.is_none().then(|| reply.take()).flatten();
            self.handle_local_datagram(now, from, to, payload, last);
        }
    }
    /// A datagram this engine sent to the driver's own address `local`,
    /// handed straight back (the loopback shortcut): as
    /// [`Engine::handle_local_datagram`], or with `checked` (receive faults
    /// or a capture were on its way) as [`Engine::handle_datagram`], which
    /// the default calls. The engine may tell it apart from a peer's: a
    /// WRITE the device took from itself answers no post (crate::linger).
    fn handle_own_datagram(&self, now: Nanos, local: SocketAddr, payload: &[u8], checked: bool) {
        if checked {
            self.handle_datagram(now, local, local, payload);
        } else {
            self.handle_local_datagram(now, local, local, payload, None);
        }
    }
    /// A run of packets from the same-host path: a datagram the sending
    /// engine built with [`Engine::poll_transmit_run`], handed over with
    /// its [`Transmit::segments`]; otherwise as
    /// [`Engine::handle_local_datagram`]. The default drops it (an engine
    /// that makes no runs is never sent one). `reply` as for
    /// [`Engine::handle_local_datagram`].
    fn handle_local_run(
        &self,
        now: Nanos,
        from: SocketAddr,
        to: SocketAddr,
        payload: &[u8],
        segments: [u8; 3],
        reply: Option<&mut dyn Room>,
    ) {
        let _ = (now, from, to, payload, segments, reply);
    }
    /// The peers this driver reaches through a same-host ring whose receiver
    /// does not check the ICRC of intact RC, UC and XRC datagrams and takes
    /// runs ([`Engine::handle_local_run`]): (address, first QPN, last QPN).
    /// The engine may leave the ICRC of its datagrams to them uncomputed;
    /// the driver then puts them only in such a ring (one that goes down
    /// meanwhile loses them, as a link would). Replaces the set given
    /// before. The default ignores it (everything sealed).
    fn set_intact_peers(&self, peers: &[(std::net::IpAddr, u32, u32)]) {
        let _ = peers;
    }
    /// Writes the next datagram to send into `buf`; `None` when nothing is ready.
    fn poll_transmit(&self, now: Nanos, buf: &mut [u8]) -> Option<Transmit>;
    /// [`Engine::poll_transmit`] for a thread that gathers a batch before it
    /// sends while other threads may transmit too: what must leave in order
    /// with this datagram (a QP's later packets) is given to no other thread
    /// until this one calls [`Engine::release_claims`], once the batch left.
    fn poll_transmit_claimed(
        &self,
        now: Nanos,
        buf: &mut [u8],
        _claims: &mut Self::Claims,
    ) -> Option<Transmit> {
        self.poll_transmit(now, buf)
    }
    /// [`Engine::poll_transmit_claimed`] for a driver that publishes the
    /// datagram in the same-host ring of the peer it goes to, if that is a
    /// ring of a peer named in [`Engine::set_intact_peers`]: the datagram
    /// may then be a run ([`Transmit::segments`]) of up to `buf.len()`
    /// bytes. A run goes into such a ring, with its segments, or nowhere.
    /// The default makes no runs.
    fn poll_transmit_run(
        &self,
        now: Nanos,
        buf: &mut [u8],
        claims: &mut Self::Claims,
    ) -> Option<Transmit> {
        self.poll_transmit_claimed(now, buf, claims)
    }
    /// [`Engine::poll_transmit_claimed`] of several datagrams at once,
    /// into the buffers `burst` gives, in order: the engine may take up to
    /// `max` packets of one QP in one turn of it. How many were built; the
    /// driver calls again while it has buffers, until it gets 0. The
    /// default builds one.
    fn poll_transmit_burst(
        &self,
        now: Nanos,
        claims: &mut Self::Claims,
        burst: &mut dyn Burst,
        max: usize,
    ) -> usize {
        let _ = max;
        let Some(buf) = burst.buffer() else { return 0 };
        match self.poll_transmit_claimed(now, buf, claims) {
            Some(t) => {
                burst.built(&t);
                1
            }
            None => 0,
        }
    }
    /// [`Engine::poll_transmit_run`] for the thread that just posted to
    /// `qp` (the id the engine gave [`crate::Driver::posted`]): that QP's
    /// next datagram, its turn given at once. `None` when it has none now
    /// or the usual turns take it (the default: always).
    fn poll_transmit_posted(
        &self,
        qp: u64,
        now: Nanos,
        buf: &mut [u8],
        claims: &mut Self::Claims,
    ) -> Option<Transmit> {
        let _ = (qp, now, buf, claims);
        None
    }
    /// The packets of the QP the calling thread just posted to (`qp`, as
    /// for [`Engine::poll_transmit_posted`]), built in place through `room`
    /// at once: how many left; `None` when the engine does not (the
    /// default), or not for this QP now: the usual transmit then takes it.
    fn transmit_posted_through(&self, qp: u64, now: Nanos, room: &mut dyn Room) -> Option<usize> {
        let _ = (qp, now, room);
        None
    }
    /// The QPs ready to send whose peers `room` has room for, their
    /// packets built in place through it, `budget` datagrams at most (a
    /// stream's posts, left to a poll): how many left. What cannot go that
    /// way stays for [`Engine::poll_transmit_run`] with the same `claims`.
    /// None by default.
    fn transmit_ready_through(
        &self,
        now: Nanos,
        claims: &mut Self::Claims,
        room: &mut dyn Room,
        budget: usize,
    ) -> usize {
        let _ = (now, claims, room, budget);
        0
    }
    /// The batch taken with `claims` left: the engine may give what it
    /// claimed to any thread again. Whether it has datagrams ready since
    /// (the caller then transmits again or wakes someone).
    fn release_claims(&self, _claims: &mut Self::Claims) -> bool {
        false
    }
    /// The lanes (crate `lanes`) whose QPs the next batch taken with
    /// `claims` comes from. A QP waits in the lane of the thread that last
    /// posted to it (else of the thread whose call made it ready): an
    /// application thread transmits its own lane's, so that two threads
    /// transmitting at once work QPs of their own and do not pull each
    /// other's rings and QP state between their cores; the progress thread
    /// reaches every lane. The default ignores it (an engine without lanes
    /// gives every thread everything).
    fn set_reach(&self, claims: &mut Self::Claims, lanes: LaneSet) {
        let _ = (claims, lanes);
    }
    /// The lanes whose QPs wait to send (ready, or posted to and not yet
    /// taken). The default: every lane.
    fn busy_lanes(&self) -> LaneSet {
        LaneSet::ALL
    }
    /// When the engine next needs [`Engine::handle_timeout`] (absolute), if ever.
    fn poll_timeout(&self) -> Option<Nanos>;
    /// Timers due at or before `now` fire.
    fn handle_timeout(&self, now: Nanos);
    /// The next notification for the driver to deliver.
    fn poll_notification(&self) -> Option<Notification>;
    /// Whether [`Engine::poll_transmit`], [`Engine::poll_frame`] or
    /// [`Engine::poll_notification`] would give something now (`true` when
    /// unsure). A polling application thread that handed the engine datagrams
    /// wakes the progress thread only then (or for an earlier timer).
    fn has_work(&self) -> bool {
        true
    }
    /// [`Engine::has_work`] for a transmit that reaches `lanes` only. The
    /// default: [`Engine::has_work`].
    fn has_work_in(&self, lanes: LaneSet) -> bool {
        let _ = lanes;
        self.has_work()
    }
    /// How many receive completions the engine has made so far: a polling
    /// thread whose delivery made one may leave the ACK it made to the
    /// program's reply (`crate::pollrx::defers`). 0 (never) by default.
    fn receives_completed(&self) -> u64 {
        0
    }
    /// How many RDMA WRITEs without immediate QPs have taken whole, and
    /// when (engine time) the latest came; (0, 0), the default: none. A
    /// posting thread that answered one waits for the next
    /// (`crate::linger`); the count is read with acquire, so the placed
    /// bytes are visible once it moved.
    fn writes_taken(&self) -> (u64, Nanos) {
        (0, 0)
    }
    /// Writes the next Ethernet frame of a RAW_PACKET QP into `buf`: (the
    /// QP's number, whose packet socket sends it; its length). `crate::raw`.
    fn poll_frame(&self, _now: Nanos, _buf: &mut [u8]) -> Option<(u32, usize)> {
        None
    }
    /// A frame arrived on the packet socket of RAW_PACKET QP `qpn`.
    fn handle_frame(&self, _now: Nanos, _qpn: u32, _frame: &[u8]) {}
}

/// An engine with nothing to do, for tests of the driver's own parts (its
/// locks, its packet sockets).
#[cfg(test)]
pub(crate) struct Idle;

#[cfg(test)]
impl Engine for Idle {
    type Claims = ();
    fn handle_datagram(&self, _: Nanos, _: SocketAddr, _: SocketAddr, _: &[u8]) {}
    fn poll_transmit(&self, _: Nanos, _: &mut [u8]) -> Option<Transmit> {
        None
    }
    fn poll_timeout(&self) -> Option<Nanos> {
        None
    }
    fn has_work(&self) -> bool {
        false
    }
    fn handle_timeout(&self, _: Nanos) {}
    fn poll_notification(&self) -> Option<Notification> {
        None
    }
}

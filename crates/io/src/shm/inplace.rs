//! Reading a ring in place, and answering through the rings back.
//!
//! Owns: a batch of one sender's datagrams as they lie in its ring
//! ([`InPlace`]), whether it is a stream's, its hand-over to the engine
//! ([`deliver`], [`hand_over`]), and [`Rooms`]: room in the peers' rings
//! for what the engine builds straight into them (a reply to a request
//! taken from a ring, a posting thread's packets; spec/performance.md §25).

use std::net::SocketAddr;

use super::ring::{self, Consumer, Record};
use super::{send, Key, Peer, Peers};
use crate::counters::Counters;
use crate::engine::{Room, Transmit};

/// Datagrams of one sender's ring, read where they lie
/// ([`ShmPath::receive_in_place`]).
pub(crate) struct InPlace<'a> {
    /// The sender's address (from its hello).
    pub(crate) from: SocketAddr,
    pub(super) ring: &'a Consumer,
    pub(super) records: &'a [Record],
}

/// A ring batch of this many datagrams is a stream's (a window of 64-byte
/// WRITEs or of atomics; a ping-pong's read brings one or two).
pub(crate) const STREAM_BATCH: usize = 4;

impl<'a> InPlace<'a> {
    /// Whether the batch is a stream's, more of which comes within
    /// microseconds: a run (a long message's packets), or
    /// [`STREAM_BATCH`] datagrams or more. A progress thread watches a
    /// little after it before it sleeps (its wake-up byte and the wake-up
    /// cost more; spec/performance.md §26).
    pub(crate) fn is_stream(&self) -> bool {
        self.records.len() >= STREAM_BATCH
            || self.records.iter().any(|r| r.meta.segments().is_some())
    }

    /// Each datagram, in ring order, and what its record said.
    pub(crate) fn datagrams(&self) -> impl Iterator<Item = (&'a [u8], ring::Meta)> + 'a {
        let ring = self.ring;
        self.records.iter().map(move |r| (ring.bytes(r), r.meta))
    }
}

/// The rings back to the senders, for what an engine answers at once to
/// a datagram it took from a ring ([`Room`], spec/performance.md §25):
/// built straight into the requester's ring, published as
/// [`ShmPath::build_in_ring`] publishes, while the engine holds the QP
/// (so nothing of the QP can come between).
pub(crate) struct Rooms<'a> {
    local: SocketAddr,
    peers: &'a mut Peers,
    /// The room asked for each reply (the path's largest datagram).
    room: usize,
    c: &'a Counters,
    /// The peer whose ring holds the room last given.
    at: Option<Key>,
    /// Whose datagrams these are (what they count as).
    whose: Whose,
}

/// Whose datagrams a [`Rooms`] publishes, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Whose {
    /// An application thread's packets (`caller_datagrams`).
    Posts,
    /// Answers to what a ring brought (`shm_responses`).
    Replies,
    /// The progress thread's turns (counted as sent only).
    Progress,
}

impl<'a> Rooms<'a> {
    /// Room in `peers`' rings for datagrams of up to `room` bytes, of a
    /// path at `local`, for `whose` datagrams.
    pub(super) fn new(
        local: SocketAddr,
        peers: &'a mut Peers,
        room: usize,
        c: &'a Counters,
        whose: Whose,
    ) -> Rooms<'a> {
        Rooms {
            local,
            peers,
            room,
            c,
            at: None,
            whose,
        }
    }
}

impl Room for Rooms<'_> {
    fn room(&mut self, to: SocketAddr, qpn: u32) -> Option<&mut [u8]> {
        self.at = None;
        let qpn = qpn & 0xff_ffff;
        let eligible = to.port() == self.local.port()
            && !to.ip().is_multicast()
            && qpn != 1
            && qpn != 0xff_ffff;
        if !eligible {
            return None;
        }
        let key = (to.ip(), crate::share::slot_of_qpn(qpn));
        let Some(Peer::Open(out)) = self.peers.get_mut(&key) else {
            return None;
        };
        if !out.ready {
            return None;
        }
        let room = out.ring.reserve(self.room)?;
        self.at = Some(key);
        Some(room)
    }

    fn publish(&mut self, t: &Transmit) {
        let (c, local, key) = (self.c, self.local, self.at.take());
        let Some(Peer::Open(out)) = key.and_then(|k| self.peers.get_mut(&k)) else {
            Counters::add(&c.send_errors, 1);
            tracing::error!("engine published a reply without room; dropped");
            return;
        };
        let fits = out.ring.reserved(t.len);
        if fits.is_none_or(|b| send::destination(local, t.to, b) != key) {
            // Longer than the room, or not where the room was asked for:
            // dropped (RC answers the request's retransmission again).
            Counters::add(&c.send_errors, 1);
            tracing::error!(len = t.len, to = %t.to,
                "engine built a reply that does not belong in the ring it was given; dropped");
            return;
        }
        out.ring.commit(t.len, ring::Meta::new(true, t.segments));
        // The calling thread's lane's cells, looked up once.
        let c: &crate::counters::CounterCells = c;
        Counters::add(&c.datagrams_sent, 1);
        Counters::add(&c.bytes_sent, t.len as u64);
        Counters::add(&c.shm_datagrams_sent, 1);
        Counters::add(&c.shm_built_in_ring, 1);
        Counters::add(&c.shm_runs_sent, u64::from(t.segments.is_some()));
        match self.whose {
            Whose::Posts => Counters::add(&c.caller_datagrams, 1),
            Whose::Replies => Counters::add(&c.shm_responses, 1),
            Whose::Progress => {}
        }
        send::wake(out, self.c);
    }
}

/// Hands one ring's datagrams read in place to `engine`, as arrived at
/// `local` at `now`: see [`hand_over`]. `replies`: where what the engine
/// answers the batch's last datagram goes at once ([`Rooms`]), if
/// anywhere; the answers to the others wait for a transmit turn, so that
/// a stream's ACKs still coalesce into one per batch.
pub(crate) fn deliver<E: crate::engine::Engine>(
    engine: &E,
    now: crate::clock::Nanos,
    local: SocketAddr,
    batch: &InPlace<'_>,
    mut replies: Option<&mut Rooms<'_>>,
) {
    // A stream's batch of plain intact datagrams in one call: the engine
    // takes a QP's consecutive ones in one turn of it.
    let plain = |(_, m): (&[u8], ring::Meta)| m.is_intact() && m.segments().is_none();
    if batch.records.len() > 1 && batch.datagrams().all(plain) {
        let mut each = batch.datagrams().map(|(bytes, _)| bytes);
        let reply = replies.map(|r| r as &mut dyn Room);
        engine.handle_local_batch(now, batch.from, local, &mut each, reply);
        return;
    }
    let last = batch.records.len().saturating_sub(1);
    for (i, (bytes, meta)) in batch.datagrams().enumerate() {
        let reply = replies
            .as_deref_mut()
            .filter(|_| i == last)
            .map(|r| r as &mut dyn Room);
        hand_over(engine, now, batch.from, local, bytes, meta, reply);
    }
}

/// Hands one datagram of a ring to `engine`: a run
/// (`Engine::handle_local_run`) or one its sender marked intact
/// (`Engine::handle_local_datagram`) as the same-host entries take them,
/// anything else as from a socket.
pub(crate) fn hand_over<E: crate::engine::Engine>(
    engine: &E,
    now: crate::clock::Nanos,
    from: SocketAddr,
    local: SocketAddr,
    bytes: &[u8],
    meta: ring::Meta,
    reply: Option<&mut dyn Room>,
) {
    match (meta.segments(), meta.is_intact()) {
        (Some(tag), true) => engine.handle_local_run(now, from, local, bytes, tag, reply),
        (None, true) => engine.handle_local_datagram(now, from, local, bytes, reply),
        // A run that is not intact is not a run the engine may take.
        (Some(_), false) => {}
        (None, false) => engine.handle_datagram(now, from, local, bytes),
    }
}

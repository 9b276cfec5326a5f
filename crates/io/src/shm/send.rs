//! The sending side of the same-host path: where a datagram goes, the
//! rings it is pushed or built into, the connections to receivers, and the
//! peers named to the engine as reached intact. See the parent module.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::time::Instant;

use super::refusal::Refusal;
use super::ring::{self, Producer};
use super::{
    name, Built, Outbound, Peer, Push, Run, ShmPath, ACCEPT_WAIT, FULL_WAIT, HELLO_LEN,
    HELLO_MAGIC, REDISCOVER, RUNS, UNCHECKED,
};
use crate::counters::Counters;
use crate::engine::Transmit;
use crate::share;
use crate::sys::{self, shm as sysshm};

impl ShmPath {
    /// Where a datagram to `to` would go: the destination's (address, slot),
    /// if the path may carry it at all. Data to a QP of a process on an
    /// address of this host, port 4791; not CM MADs (QP1 goes by the
    /// shared address's own steering) nor multicast.
    fn destination(&self, to: SocketAddr, bytes: &[u8]) -> Option<(IpAddr, u8)> {
        destination(self.local, to, bytes)
    }

    /// Whether a datagram to `to` goes to [`ShmPath::send`] rather than the
    /// socket (a cheap look-up; the peer may still refuse, then `send` says so).
    pub(crate) fn may_take(&self, to: SocketAddr, bytes: &[u8]) -> bool {
        let Some(key) = self.destination(to, bytes) else {
            return false;
        };
        match self.peers.get(&key) {
            Some(Peer::Refused { until }) => Instant::now() >= *until,
            _ => true,
        }
    }

    /// Sends `bytes` to `to` through the peer's ring, as a record with
    /// `meta`. See [`Push`].
    pub(crate) fn send(
        &mut self,
        to: SocketAddr,
        bytes: &[u8],
        meta: ring::Meta,
        c: &Counters,
    ) -> Push {
        let Some(key) = self.destination(to, bytes) else {
            return Push::Declined;
        };
        // No clock read for an open peer: this runs per datagram.
        let open = match self.peers.get(&key) {
            Some(Peer::Open(_)) => true,
            Some(Peer::Refused { until }) => Instant::now() >= *until,
            None => true,
        };
        if !open {
            return Push::Declined;
        }
        if !matches!(self.peers.get(&key), Some(Peer::Open(_))) {
            let peer = match self.connect(key) {
                Ok(out) => Peer::Open(out),
                Err(why) => self.refuse(key, &why, c),
            };
            self.peers.insert(key, peer);
        }
        let Some(Peer::Open(out)) = self.peers.get_mut(&key) else {
            return Push::Declined;
        };
        if !out.ready {
            match accepted(out) {
                Ok(true) => {
                    tracing::debug!(local = %self.local, peer = %key.0, slot = key.1,
                        unchecked = out.unchecked, "same-host path to the peer accepted");
                    self.intact_changed = true;
                }
                Ok(false) => return Push::Declined,
                Err(why) => {
                    let p = self.refuse(key, &why, c);
                    self.peers.insert(key, p);
                    return Push::Declined;
                }
            }
        }
        let pushed = push(out, bytes, meta, c);
        if pushed == Push::Sent {
            self.last = Some(key);
            Counters::add(&c.shm_runs_sent, u64::from(meta.segments().is_some()));
        }
        pushed
    }

    /// Has `build` write the next datagram straight into the ring of the
    /// peer the last one went to, `fallback.len()` bytes of room at most,
    /// and publishes it there (marked intact) if it is that peer's: one
    /// copy fewer than building it in a batch and pushing it
    /// (spec/same-host.md §4, lever 3). `None` when there is no ring to
    /// build in (no last peer, not ready, or full): `build` was not called.
    pub(super) fn build_in_ring(
        &mut self,
        fallback: &mut [u8],
        c: &Counters,
        build: impl FnOnce(&mut [u8]) -> Option<Transmit>,
    ) -> Option<Built> {
        let local = self.local;
        let key = self.last?;
        let Some(Peer::Open(out)) = self
            .peers
            .get_mut(&key)
            .filter(|p| matches!(p, Peer::Open(o) if o.ready))
        else {
            self.last = None;
            return None;
        };
        let room = out.ring.reserve(fallback.len())?;
        let Some(t) = build(room) else {
            return Some(Built::Nothing);
        };
        let Some(bytes) = out.ring.reserved(t.len) else {
            Counters::add(&c.send_errors, 1);
            tracing::error!(
                len = t.len,
                "engine reported a datagram longer than its buffer"
            );
            return Some(Built::Nothing);
        };
        if destination(local, t.to, bytes) != Some(key) {
            fallback[..t.len].copy_from_slice(bytes);
            return Some(Built::InSlot(t));
        }
        out.ring.commit(t.len, ring::Meta::new(true, t.segments));
        Counters::add(&c.shm_datagrams_sent, 1);
        Counters::add(&c.shm_built_in_ring, 1);
        Counters::add(&c.shm_runs_sent, u64::from(t.segments.is_some()));
        wake(out, c);
        Some(Built::Sent(t))
    }

    /// Sends what it can from the head of `run` through the rings (see
    /// [`Run`]); `intact`: the engine sealed them, or left them unsealed
    /// for a peer reached intact, and nothing altered them since
    /// ([`ring::INTACT`]); `segments[i]`, datagram `i`'s as a run of
    /// packets ([`ring::SEGMENTS`]).
    pub(crate) fn send_run(
        &mut self,
        run: &[(SocketAddr, &[u8])],
        segments: &[Option<[u8; 3]>],
        intact: bool,
        c: &Counters,
    ) -> Run {
        let mut n = 0;
        for (i, &(to, bytes)) in run.iter().enumerate() {
            let meta = ring::Meta::new(intact, segments.get(i).copied().flatten());
            match self.send(to, bytes, meta, c) {
                Push::Sent => n += 1,
                Push::Full if n == 0 => return Run::Full,
                Push::Full | Push::Declined => break,
            }
        }
        if n > 0 {
            return Run::Sent(n);
        }
        let rest = run[1..].iter().take_while(|(to, b)| !self.may_take(*to, b));
        Run::Socket(1 + rest.count())
    }

    fn refuse(&self, key: (IpAddr, u8), why: &Refusal, c: &Counters) -> Peer {
        Counters::add(&c.shm_fallbacks, 1);
        tracing::debug!(local = %self.local, peer = %key.0, slot = key.1, %why,
            "same-host path not taken; datagrams go by UDP");
        Peer::Refused {
            until: Instant::now() + REDISCOVER,
        }
    }

    /// Connects to the peer's path and hands it a fresh ring. `Err`: why not.
    fn connect(&self, (ip, slot): (IpAddr, u8)) -> Result<Outbound, Refusal> {
        let io = |what| move |source| Refusal::Io { what, source };
        let conn = sysshm::connect_abstract(name(ip, slot).as_bytes())
            .map(UnixStream::from)
            .map_err(|source| Refusal::NoPath { ip, slot, source })?;
        let (pid, uid) = sysshm::peer_cred(conn.as_fd()).map_err(io("peer credentials"))?;
        let ours = sys::euid();
        if uid != ours {
            return Err(Refusal::OtherUser {
                ip,
                slot,
                pid,
                uid,
                ours,
            });
        }
        if std::net::UdpSocket::bind((ip, 0)).is_err() {
            return Err(Refusal::NotLocal { ip });
        }
        let len = ring::file_len(self.capacity);
        let fd = sysshm::sealed_memfd("softverbs-shm", len as u64).map_err(io("memfd"))?;
        let map = sysshm::Mapping::new(fd.as_fd(), len).map_err(io("mmap"))?;
        ring::init(&map, self.capacity);
        let hello = self.hello(slot);
        sysshm::send_with_fd(conn.as_fd(), &hello, fd.as_fd())
            .map_err(io("passing the ring to the receiver"))?;
        Ok(Outbound {
            conn,
            ring: Producer::new(map, self.capacity),
            ready: false,
            unchecked: false,
            since: Instant::now(),
        })
    }

    fn hello(&self, slot: u8) -> [u8; HELLO_LEN] {
        let mut h = [0u8; HELLO_LEN];
        let (dev, ino) = self.netns.unwrap_or((0, 0));
        h[0..8].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
        h[8..16].copy_from_slice(&dev.to_le_bytes());
        h[16..24].copy_from_slice(&ino.to_le_bytes());
        h[24..32].copy_from_slice(&(self.capacity as u64).to_le_bytes());
        let (family, v6) = match self.local.ip() {
            IpAddr::V4(v4) => (4u8, v4.to_ipv6_mapped()),
            IpAddr::V6(v6) => (6u8, v6),
        };
        h[32] = family;
        h[33..35].copy_from_slice(&self.local.port().to_be_bytes());
        h[35..51].copy_from_slice(&v6.octets());
        h[51] = slot;
        h
    }

    /// The peers to name to the engine as reached intact (proto::intact):
    /// (address, first QPN, last QPN) of each peer whose ring is up and
    /// whose receiver answered [`UNCHECKED`] and [`RUNS`]; none while this driver has
    /// faults or a capture. `None` if that did not change since last taken.
    pub(crate) fn take_intact(&mut self) -> Option<Vec<(IpAddr, u32, u32)>> {
        if !std::mem::take(&mut self.intact_changed) {
            return None;
        }
        let plain = self.plain;
        let peers = self.peers.0.iter().filter_map(|((ip, slot), p)| match p {
            Peer::Open(o) if plain && o.ready && o.unchecked => {
                let (first, last) = share::qpn_range(*slot);
                Some((*ip, first, last))
            }
            _ => None,
        });
        Some(peers.collect())
    }
}

/// The receiver's one-byte acceptance: `Ok(true)` once it came.
pub(super) fn accepted(out: &mut Outbound) -> Result<bool, Refusal> {
    let mut b = [0u8; 1];
    match out.conn.read(&mut b) {
        Ok(1) => {
            out.ready = true;
            out.unchecked = b[0] & (UNCHECKED | RUNS) == UNCHECKED | RUNS;
            Ok(true)
        }
        Ok(_) => Err(Refusal::Refused),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            if out.since.elapsed() > ACCEPT_WAIT {
                Err(Refusal::NoAnswer(ACCEPT_WAIT))
            } else {
                Ok(false)
            }
        }
        Err(source) => Err(Refusal::Io {
            what: "the receiver's connection",
            source,
        }),
    }
}

/// Pushes one datagram, waiting up to [`FULL_WAIT`] for room, and wakes the
/// receiver if it sleeps.
fn push(out: &mut Outbound, bytes: &[u8], meta: ring::Meta, c: &Counters) -> Push {
    if bytes.len() > out.ring.max_datagram() {
        return Push::Declined;
    }
    if !out.ring.push(bytes, meta) {
        // The clock is read only once the ring is found full.
        let start = Instant::now();
        while !out.ring.push(bytes, meta) {
            if start.elapsed() >= FULL_WAIT {
                Counters::add(&c.shm_ring_full, 1);
                return Push::Full;
            }
            std::thread::yield_now();
        }
    }
    Counters::add(&c.shm_datagrams_sent, 1);
    wake(out, c);
    Push::Sent
}

/// After a record was published: wakes the receiver if it sleeps.
pub(super) fn wake(out: &Outbound, c: &Counters) {
    if out.ring.should_wake() {
        // A full socket buffer means wake-ups are already pending: fine.
        let _ = (&out.conn).write(&[0]);
        Counters::add(&c.shm_wakeups, 1);
    }
}

/// [`ShmPath::destination`] for a path at `local`.
pub(super) fn destination(local: SocketAddr, to: SocketAddr, bytes: &[u8]) -> Option<(IpAddr, u8)> {
    let dqp = bytes.get(5..8)?;
    if to.port() != local.port() || to.ip().is_multicast() || bytes.len() < 12 {
        return None;
    }
    if dqp == [0, 0, 1] || dqp == [0xff, 0xff, 0xff] {
        return None;
    }
    Some((to.ip(), share::slot_of(bytes)?))
}

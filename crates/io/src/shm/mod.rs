//! The same-host path: datagrams between two processes of one host through
//! shared-memory rings instead of the UDP stack (on by default,
//! `SOFTVERBS_SHM=0` turns it off; `spec/same-host.md` has the design, the
//! decision and the measurements). The progress thread works the rings, and
//! so do the application's threads: one that polls an empty CQ reads them
//! in place (crate::pollrx), one that transmits writes into them
//! (crate::callertx), under the path's lock (`Shared::shm`).
//!
//! What it promises:
//! - **Same datagrams, same semantics.** The path carries the very RoCEv2 UDP
//!   payloads the socket would (BTH, ICRC and all); the engine still sees
//!   datagrams, and PSNs, ACKs, retransmission, key checks and completions
//!   stay its business. The progress thread counts, captures and injects
//!   faults at the same points as for the socket (`SOFTVERBS_FAULTS` and
//!   `SOFTVERBS_PCAP` work unchanged on it).
//! - **Discovery by name, as the shared address does** (`crate::share`): a
//!   process that opened the path on `address:4791`, slot `s`, listens on the
//!   abstract unix stream name `softverbs/4791/<address>/<s>/shm`. A datagram
//!   for `address`, destination QP in slot `s`, can take the path when that
//!   name answers; abstract names are per network namespace, so only a process
//!   of our namespace can answer. The sender also requires the answering
//!   process to be of its own user (`SO_PEERCRED`) and the address to be a
//!   local one (it can bind it); the receiver requires the sender to be of
//!   its user and namespace (`/proc/self/ns/net`) and checks the ring it is
//!   given (seals, size, header). Any refusal, a path not opened there, or
//!   `SOFTVERBS_SHM=0` → UDP as before, said at debug level in words,
//!   counted in `shm_fallbacks`, and asked again after [`REDISCOVER`].
//! - **One ring per (sender, receiver) pair**, single producer and single
//!   consumer ([`ring`]), in a sealed memfd the sender creates and passes over
//!   the connection (`SCM_RIGHTS`). The connection then only carries
//!   wake-ups: one byte, written only when the receiver said it sleeps (a
//!   word in the ring), so a receiver that is awake costs the sender no
//!   system call.
//! - **A dead peer never hangs the other.** Its end of the connection closes
//!   with it (the kernel closes the socket of a process that exits or
//!   crashes), which the survivor's poll(2) reports: the ring is dropped and
//!   traffic to that peer goes by UDP, which, to a process that is gone, is
//!   lost as on a cut link (RC retries, then `RETRY_EXC_ERR`). A full ring
//!   (a receiver behind) holds the datagram back ([`Push::Full`]), as a full
//!   socket buffer does, until the receiver drains it or is found gone.
//!
//! - **No more work per byte than a ring needs.** The receiving engine reads
//!   each datagram where it lies in the ring ([`ShmPath::receive_in_place`],
//!   one engine lock per ring per pass) unless receive faults need a copy of
//!   their own ([`ShmPath::receive`]); a datagram its sender marks intact
//!   ([`ring::INTACT`]: sealed by its engine, no corruption fault on either
//!   side) goes to `Engine::handle_local_datagram`, which skips the ICRC
//!   check for RC, UC and XRC. A receiver that does so answers [`UNCHECKED`],
//!   and its sender's engine then computes no ICRC for it
//!   ([`ShmPath::take_intact`]). An application thread's transmit has the
//!   engine build a datagram straight into the ring it is for
//!   ([`next_datagram`]).
//!
//! Files: this one (the path, receiving), `send.rs` (where a datagram goes,
//! pushing and building into rings, the connections to receivers),
//! `inplace.rs` (a batch read where it lies, its hand-over to the engine,
//! and the rooms for what the engine builds straight into the rings back),
//! `ring.rs`, `refusal.rs`, `tests.rs`.
//!
//! Not built: the single copy (`process_vm_readv` from the sender's
//! registered memory straight into the destination MR): measured, it costs
//! more than the copies it would save here; see `spec/same-host.md` §4.

mod inplace;
mod refusal;
mod send;
pub(crate) use inplace::{deliver, hand_over, InPlace, Rooms, Whose, STREAM_BATCH};
use send::accepted;
pub(crate) mod ring;

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixListener, UnixStream};
use std::time::{Duration, Instant};

use crate::counters::Counters;
use crate::engine::Transmit;
use crate::share::Slot;
use crate::sys::{self, shm as sysshm};
use refusal::{Refusal, Rejection};
use ring::{Consumer, Pop, Producer, Record};

/// Environment variable that keeps the path on (`1`, `on`, `yes`, `true`) or
/// turns it off (anything else).
pub const ENV: &str = "SOFTVERBS_SHM";
/// Data bytes of one ring (a power of two): 1024 datagrams of 4 KiB.
pub const RING_BYTES: usize = 4 << 20;
/// How long a refused or vanished peer goes by UDP before it is asked again.
pub const REDISCOVER: Duration = Duration::from_secs(1);
/// How long a sender waits for room in a full ring before it reports [`Push::Full`].
pub const FULL_WAIT: Duration = Duration::from_micros(50);
/// How long a new ring waits for the receiver's acceptance.
const ACCEPT_WAIT: Duration = Duration::from_secs(2);
/// Bytes of the buffer a pass's ring datagrams are copied into (at least one
/// datagram of the largest size), so a pass hands them to the engine together.
const STAGE_BYTES: usize = 256 << 10;
/// How often the connections are checked while the thread never sleeps.
const CHECK_EVERY: Duration = Duration::from_millis(10);
/// Connections accepted but not yet introduced, at most.
const MAX_AWAITING: usize = 64;
/// The hello's first word ("svshmhe1").
const HELLO_MAGIC: u64 = u64::from_le_bytes(*b"svshmhe1");
/// magic, netns (dev, ino), capacity, sender (family, port, 16 bytes), slot.
const HELLO_LEN: usize = 8 + 16 + 8 + 19 + 1;

/// This process's network namespace: the (device, inode) of `/proc/self/ns/net`.
pub(crate) fn netns() -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata("/proc/self/ns/net").ok()?;
    Some((m.dev(), m.ino()))
}

/// The abstract name (without its leading NUL) of the path of `ip`, `slot`.
fn name(ip: IpAddr, slot: u8) -> String {
    format!("softverbs/4791/{ip}/{slot}/shm")
}

/// Whether `on` (the value of [`ENV`]) turns the path on.
pub fn enabled_by(value: &str) -> bool {
    matches!(value.trim(), "1" | "on" | "yes" | "true")
}

/// What [`next_datagram`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Built {
    /// Built in a peer's ring and published there.
    Sent(Transmit),
    /// Built in the slot (or in a ring for another destination and copied
    /// to the slot's start, nothing published): send it as usual.
    InSlot(Transmit),
    /// The engine had nothing to send.
    Nothing,
}

/// The next datagram `poll` builds: straight into a peer's ring when
/// `path` is given (only while nothing of the sender's batch is queued
/// before it: it must not overtake one) and it can
/// ([`ShmPath::build_in_ring`]), else into `slot`.
pub(crate) fn next_datagram(
    path: Option<&mut ShmPath>,
    slot: &mut [u8],
    c: &Counters,
    mut poll: impl FnMut(&mut [u8]) -> Option<Transmit>,
) -> Built {
    if let Some(built) = path.and_then(|p| p.build_in_ring(slot, c, &mut poll)) {
        return built;
    }
    poll(slot).map_or(Built::Nothing, Built::InSlot)
}

/// What became of a datagram handed to [`ShmPath::send`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Push {
    /// It is in the peer's ring.
    Sent,
    /// The peer's ring stayed full for [`FULL_WAIT`]: keep the datagram and
    /// try again later (back-pressure, as a full socket buffer gives; sending
    /// it by UDP instead would overtake the datagrams in the ring, and RC
    /// would answer the gap with a NAK and a go-back-N retransmission).
    Full,
    /// The path does not take it (not eligible, no peer there, refused, not
    /// yet accepted): send it by UDP.
    Declined,
}

/// What [`ShmPath::send_run`] did with the head of a run of datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Run {
    /// The first `n` went through the rings.
    Sent(usize),
    /// The first one's ring is full ([`Push::Full`]): wait for room.
    Full,
    /// The first `k` go by the socket.
    Socket(usize),
}

/// A datagram [`ShmPath::receive`] staged: `len` bytes at `at` of the stage.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Arrived {
    /// The sender's address (from its hello).
    pub(crate) from: SocketAddr,
    pub(crate) at: usize,
    pub(crate) len: usize,
    /// What its record said besides its length.
    pub(crate) meta: ring::Meta,
}

/// A connection to a receiver and the ring we write.
#[derive(Debug)]
struct Outbound {
    conn: UnixStream,
    ring: Producer,
    /// Accepted by the receiver (its one-byte answer came).
    ready: bool,
    /// The receiver's answer said it does not check the ICRC of intact RC,
    /// UC and XRC datagrams and takes runs ([`UNCHECKED`] and [`RUNS`]).
    unchecked: bool,
    since: Instant,
}

/// The receiver's answer: accepted ...
const ACCEPTED: u8 = 1;
/// ... and it takes intact RC, UC and XRC datagrams without an ICRC check
/// (no faults or capture of its own): their sender may leave the ICRC
/// uncomputed (proto::intact, spec/same-host.md §4).
const UNCHECKED: u8 = 2;
/// ... and it takes runs of packets (`Engine::handle_local_run`,
/// [`ring::SEGMENTS`]): a sender names it to its engine (reached intact)
/// only with [`UNCHECKED`] and this.
const RUNS: u8 = 4;

#[derive(Debug)]
enum Peer {
    Open(Outbound),
    /// Goes by UDP until then.
    Refused {
        until: Instant,
    },
}

type Key = (IpAddr, u8);

/// The peers by (address, slot): a few per process, so a short list
/// searched in order (cheaper per datagram than hashing the key).
#[derive(Debug, Default)]
struct Peers(Vec<(Key, Peer)>);

impl Peers {
    fn get(&self, key: &Key) -> Option<&Peer> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, p)| p)
    }

    fn get_mut(&mut self, key: &Key) -> Option<&mut Peer> {
        self.0.iter_mut().find(|(k, _)| k == key).map(|(_, p)| p)
    }

    fn insert(&mut self, key: Key, peer: Peer) {
        match self.get_mut(&key) {
            Some(p) => *p = peer,
            None => self.0.push((key, peer)),
        }
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// A sender's connection and the ring we read.
#[derive(Debug)]
struct Inbound {
    conn: UnixStream,
    ring: Consumer,
    from: SocketAddr,
    /// The sender is gone: read what is left, then drop.
    closed: bool,
    /// The ring broke its protocol: dropped at once.
    broken: bool,
    /// Nothing taken from it yet ([`ShmPath::fresh_data`]).
    fresh: bool,
}

/// The kernel's cross-memory copy (process_vm_readv(2)) of `src` into `dst`
/// within this process: the primitive of a same-host single copy, which the
/// path does not use because it costs more than its two copies on every
/// size measured (spec/same-host.md §4); `softverbs perf` measures it as a
/// baseline. The bytes copied.
pub fn cross_memory_copy(dst: &mut [u8], src: &[u8]) -> io::Result<usize> {
    sysshm::cross_memory_read_self(dst, src)
}

/// One driver's same-host path. See the module doc.
#[derive(Debug)]
pub(crate) struct ShmPath {
    local: SocketAddr,
    own_slot: u8,
    netns: Option<(u64, u64)>,
    listener: UnixListener,
    /// Accepted connections whose hello has not come yet.
    awaiting: Vec<(UnixStream, Instant)>,
    inbound: Vec<Inbound>,
    peers: Peers,
    capacity: usize,
    /// Where popped datagrams wait for the engine (see [`STAGE_BYTES`]).
    stage: Vec<u8>,
    max_datagram: usize,
    arrived: Vec<Arrived>,
    /// The records of one ring taken in place (reused).
    records: Vec<Record>,
    /// Something polled was ready: check those connections in the next pass.
    woke: bool,
    /// The descriptors poll(2) said were ready (see [`ShmPath::woke`]).
    ready: Vec<RawFd>,
    /// When every connection was last checked ([`CHECK_EVERY`]).
    last_check: Instant,
    /// Where this path's descriptors start in the poll set of the last sleep.
    poll_at: usize,
    /// This driver neither alters nor records datagrams (no faults, no
    /// capture): as a receiver it answers [`UNCHECKED`], as a sender it
    /// names the peers that did ([`ShmPath::take_intact`]).
    plain: bool,
    /// The peers that answered [`UNCHECKED`] changed since last taken.
    intact_changed: bool,
    /// The peer the last datagram went to through its ring: where
    /// [`ShmPath::build_in_ring`] has the next one built.
    last: Option<Key>,
}

impl ShmPath {
    /// The path of a driver at `local` with `opts`, if it is on and can open
    /// (logged at debug level in words when not).
    pub(crate) fn for_driver(local: SocketAddr, opts: &crate::DriverOptions) -> Option<Self> {
        if !opts.shm {
            tracing::debug!(%local, "same-host path off ({ENV} not 1): datagrams go by UDP");
            return None;
        }
        let Some(slot) = &opts.share else {
            tracing::debug!(%local, "same-host path off: the driver holds no slot of a shared address");
            return None;
        };
        match ShmPath::open(local, slot, opts.max_datagram_bytes) {
            Ok(mut p) => {
                p.plain = !opts.faults.is_active() && opts.capture.is_none();
                Some(p)
            }
            Err(e) => {
                tracing::debug!(%local, error = %e, "same-host path not opened: datagrams go by UDP");
                None
            }
        }
    }

    /// Opens the path of the driver at `local` holding `slot`: listens on its
    /// name. `max_datagram` bounds what is read.
    pub(crate) fn open(local: SocketAddr, slot: &Slot, max_datagram: usize) -> io::Result<Self> {
        let addr = UnixAddr::from_abstract_name(name(local.ip(), slot.index()))?;
        let listener = UnixListener::bind_addr(&addr)?;
        listener.set_nonblocking(true)?;
        tracing::debug!(%local, slot = slot.index(), "same-host path open");
        Ok(ShmPath {
            local,
            own_slot: slot.index(),
            netns: netns(),
            listener,
            awaiting: Vec::new(),
            inbound: Vec::new(),
            peers: Peers::default(),
            capacity: RING_BYTES,
            stage: vec![0; STAGE_BYTES.max(max_datagram.max(1))],
            max_datagram: max_datagram.max(1),
            arrived: Vec::new(),
            records: Vec::new(),
            woke: true,
            ready: Vec::new(),
            last_check: Instant::now(),
            poll_at: 0,
            plain: true,
            intact_changed: false,
            last: None,
        })
    }

    /// Reads up to `budget` datagrams from the rings into the stage and hands
    /// them to `deliver` together (in ring order, each ring's in its order;
    /// more than one call when the stage fills); whether anything happened.
    /// Checks the connections first when poll(2) said so or [`CHECK_EVERY`]
    /// passed.
    pub(crate) fn receive(
        &mut self,
        budget: usize,
        c: &Counters,
        mut deliver: impl FnMut(&mut [u8], &[Arrived]),
    ) -> bool {
        let mut work = self.maybe_check(Instant::now(), c);
        let mut stage = std::mem::take(&mut self.stage);
        let mut arrived = std::mem::take(&mut self.arrived);
        let max = self.max_datagram;
        let mut used = 0;
        let mut left = budget;
        for inb in self.inbound.iter_mut().filter(|i| !i.fresh) {
            while left > 0 {
                match inb.ring.pop(&mut stage[used..], max) {
                    Ok(Pop::Datagram { len, meta }) => {
                        left -= 1;
                        work = true;
                        Counters::add(&c.shm_datagrams_received, 1);
                        arrived.push(Arrived {
                            from: inb.from,
                            at: used,
                            len,
                            meta,
                        });
                        // The next one starts 8-aligned, as in the ring.
                        used = (used + len).next_multiple_of(8).min(stage.len());
                    }
                    Ok(Pop::NoRoom) => {
                        deliver(&mut stage, &arrived);
                        arrived.clear();
                        used = 0;
                    }
                    Ok(Pop::Empty) => break,
                    Err(e) => {
                        Counters::add(&c.recv_errors, 1);
                        tracing::warn!(local = %self.local, from = %inb.from, error = %e,
                            "same-host ring broken; dropped (its sender goes by UDP)");
                        inb.broken = true;
                        let _ = inb.conn.shutdown(std::net::Shutdown::Both);
                        break;
                    }
                }
            }
        }
        if !arrived.is_empty() {
            deliver(&mut stage, &arrived);
            arrived.clear();
        }
        self.stage = stage;
        self.arrived = arrived;
        // A closed sender's ring goes once it is empty (what it sent before
        // dying still arrives, as datagrams in flight on a wire would).
        self.inbound
            .retain(|i| !(i.broken || (i.closed && !i.ring.has_data())));
        work
    }

    /// Like [`ShmPath::receive`], without the copy: up to `budget` datagrams
    /// are taken where they lie in their rings and handed to `deliver` one
    /// ring's at a time ([`InPlace`]); their room goes back to the sender when
    /// `deliver` returns. For a receiver that changes no byte (no receive
    /// faults, which may corrupt).
    /// `now` is the caller's reading of the clock (a polling thread has one).
    pub(crate) fn receive_in_place(
        &mut self,
        now: Instant,
        budget: usize,
        c: &Counters,
        respond: bool,
        mut deliver: impl FnMut(&InPlace<'_>, Option<&mut Rooms<'_>>),
    ) -> bool {
        let mut work = self.maybe_check(now, c);
        let mut records = std::mem::take(&mut self.records);
        let max = self.max_datagram;
        // Answers go straight back only where nothing records or alters
        // datagrams (a capture, faults: the progress thread's transmit).
        let plain = respond && self.plain;
        let mut rooms =
            plain.then(|| Rooms::new(self.local, &mut self.peers, max, c, Whose::Replies));
        let mut left = budget;
        for inb in self.inbound.iter_mut().filter(|i| !i.fresh) {
            records.clear();
            let mut broken = None;
            while left > 0 {
                match inb.ring.take(max) {
                    Ok(Some(r)) => {
                        left -= 1;
                        records.push(r);
                    }
                    Ok(None) => break,
                    Err(e) => {
                        broken = Some(e);
                        break;
                    }
                }
            }
            if !records.is_empty() {
                work = true;
                Counters::add(&c.shm_datagrams_received, records.len() as u64);
                let batch = InPlace {
                    from: inb.from,
                    ring: &inb.ring,
                    records: &records,
                };
                deliver(&batch, rooms.as_mut());
                inb.ring.release();
            }
            if let Some(e) = broken {
                Counters::add(&c.recv_errors, 1);
                tracing::warn!(local = %self.local, from = %inb.from, error = %e,
                    "same-host ring broken; dropped (its sender goes by UDP)");
                inb.broken = true;
                let _ = inb.conn.shutdown(std::net::Shutdown::Both);
            }
        }
        self.records = records;
        self.inbound
            .retain(|i| !(i.broken || (i.closed && !i.ring.has_data())));
        work
    }

    /// Room in the peers' rings for a thread's packets, an application
    /// thread's or the progress thread's (`whose`, [`Rooms`]); `None` where
    /// something records or alters datagrams.
    pub(crate) fn rooms_for<'a>(&'a mut self, c: &'a Counters, whose: Whose) -> Option<Rooms<'a>> {
        let (local, room) = (self.local, self.max_datagram);
        self.plain
            .then(|| Rooms::new(local, &mut self.peers, room, c, whose))
    }

    /// Checks the connections poll(2) found ready, and every connection
    /// each [`CHECK_EVERY`] (a thread that does not sleep polls nothing).
    /// The progress thread calls it even when a polling thread works the
    /// rings: a wake-up byte left unread would end each of its sleeps at
    /// once (poll(2) reports the connection ready until it is read).
    pub(crate) fn maybe_check(&mut self, now: Instant, c: &Counters) -> bool {
        let all = now.saturating_duration_since(self.last_check) >= CHECK_EVERY;
        if !(all || self.woke) {
            return false;
        }
        if all {
            self.last_check = now;
        }
        self.woke = false;
        let ready = std::mem::take(&mut self.ready);
        let work = self.check(|fd| all || ready.contains(&fd), c);
        self.ready = ready;
        self.ready.clear();
        work
    }

    /// Accepts new senders, reads hellos and wake-up bytes, notices ends:
    /// of the connections `ready` names (an accept or a read on one that
    /// has nothing is a wasted system call; the listener's allocates a
    /// socket first).
    fn check(&mut self, ready: impl Fn(RawFd) -> bool, c: &Counters) -> bool {
        let mut work = self.accept(ready(self.listener.as_raw_fd()), c);
        for inb in &mut self.inbound {
            if !inb.closed && ready(inb.conn.as_raw_fd()) && drain(&mut inb.conn) {
                inb.closed = true;
                work = true;
                tracing::debug!(local = %self.local, from = %inb.from,
                    "same-host sender gone; its ring is read to the end and dropped");
            }
        }
        let before = self.peers.len();
        let local = self.local;
        let mut answered = false;
        self.peers.0.retain_mut(|(key, p)| {
            let Peer::Open(out) = p else { return true };
            if !ready(out.conn.as_raw_fd()) {
                return true;
            }
            let gone = if out.ready {
                drain(&mut out.conn).then_some(Refusal::Gone)
            } else {
                accepted(out).map(|now| answered |= now).err()
            };
            match gone {
                Some(why) => {
                    tracing::debug!(%local, peer = %key.0, slot = key.1, %why,
                        "same-host path closed; datagrams go by UDP");
                    false
                }
                None => true,
            }
        });
        let changed = self.peers.len() != before;
        self.intact_changed |= answered || changed;
        work | changed
    }

    /// New connections (if the listener is `pending`), then the hellos of
    /// those that wait.
    fn accept(&mut self, pending: bool, c: &Counters) -> bool {
        let mut work = false;
        while pending && self.awaiting.len() < MAX_AWAITING {
            Counters::add(&c.shm_accept_calls, 1);
            match self.listener.accept() {
                Ok((conn, _)) => {
                    work = true;
                    if conn.set_nonblocking(true).is_ok() {
                        self.awaiting.push((conn, Instant::now()));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    tracing::debug!(local = %self.local, error = %e, "same-host accept failed");
                    break;
                }
            }
        }
        let awaiting = std::mem::take(&mut self.awaiting);
        for (conn, since) in awaiting {
            match self.introduce(&conn) {
                Ok(Some(inb)) => {
                    let answer = ACCEPTED | if self.plain { UNCHECKED | RUNS } else { 0 };
                    let _ = (&conn).write(&[answer]);
                    tracing::debug!(local = %self.local, from = %inb.from,
                        "same-host sender accepted");
                    self.inbound.push(Inbound { conn, ..inb });
                    work = true;
                }
                Ok(None) if since.elapsed() < ACCEPT_WAIT => self.awaiting.push((conn, since)),
                Ok(None) => {}
                Err(why) => {
                    tracing::debug!(local = %self.local, %why,
                        "same-host sender refused; it goes by UDP");
                }
            }
        }
        work
    }

    /// Reads and checks a sender's hello: its ring, or `None` if the hello
    /// has not come yet. `Err`: why the sender is refused.
    fn introduce(&self, conn: &UnixStream) -> Result<Option<Inbound>, Rejection> {
        let io = |what| move |source| Rejection::Io { what, source };
        let mut h = [0u8; HELLO_LEN];
        let (n, fd) = match sysshm::recv_with_fd(conn.as_fd(), &mut h) {
            Ok(got) => got,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) => return Err(io("reading the hello")(e)),
        };
        let (pid, uid) = sysshm::peer_cred(conn.as_fd()).map_err(io("peer credentials"))?;
        if uid != sys::euid() {
            return Err(Rejection::OtherUser { pid, uid });
        }
        let word = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().unwrap_or([0; 8]));
        if n != HELLO_LEN || word(0) != HELLO_MAGIC {
            return Err(Rejection::Malformed { pid, len: n });
        }
        if Some((word(8), word(16))) != self.netns {
            return Err(Rejection::OtherNamespace { pid });
        }
        if h[51] != self.own_slot {
            let (asked, ours) = (h[51], self.own_slot);
            return Err(Rejection::WrongSlot { pid, asked, ours });
        }
        let fd = fd.ok_or(Rejection::NoRing { pid })?;
        let capacity = word(24);
        let (seals, len) = sysshm::seals_and_len(fd.as_fd()).map_err(io("ring file"))?;
        let want = ring::file_len(capacity.min(1 << 30) as usize) as u64;
        let bad = |header| Rejection::BadRing {
            pid,
            capacity,
            len,
            seals,
            header,
        };
        let sealed = seals & sysshm::SEALS == sysshm::SEALS;
        if !ring::valid_capacity(capacity) || !sealed || len < want {
            return Err(bad(false));
        }
        let map = sysshm::Mapping::new(fd.as_fd(), want as usize).map_err(io("mmap"))?;
        let cap = ring::check(&map).ok_or(bad(false))?;
        let mut octets = [0u8; 16];
        octets.copy_from_slice(&h[35..51]);
        let v6 = Ipv6Addr::from(octets);
        let ip = match (h[32], v6.to_ipv4_mapped()) {
            (4, Some(v4)) => IpAddr::V4(v4),
            _ => IpAddr::V6(v6),
        };
        let from = SocketAddr::new(ip, u16::from_be_bytes([h[33], h[34]]));
        Ok(Some(Inbound {
            conn: conn.try_clone().map_err(io("duplicating the connection"))?,
            ring: Consumer::new(map, cap),
            from,
            closed: false,
            broken: false,
            fresh: true,
        }))
    }

    /// Before sleeping: tells every sender we sleep; `true` if a datagram is
    /// already waiting (then do not sleep).
    pub(crate) fn arm(&self) -> bool {
        let mut ready = false;
        for i in &self.inbound {
            ready |= i.ring.arm();
        }
        ready
    }

    /// Whether a ring goes either way: one we read, or one to a peer.
    pub(crate) fn has_rings(&self) -> bool {
        !self.inbound.is_empty() || self.peers.0.iter().any(|(_, p)| matches!(p, Peer::Open(_)))
    }

    /// Whether a datagram waits in a ring.
    pub(crate) fn has_data(&self) -> bool {
        self.inbound.iter().any(|i| i.ring.has_data())
    }

    /// Whether a ring nothing was taken from yet holds a datagram. Its
    /// sender switched from the socket to it, so whatever it sent before by
    /// the socket is already in this end's socket buffer (a local send is
    /// queued there before it returns) and must be read first: until
    /// [`ShmPath::settle_fresh`], the receive calls take nothing from such
    /// a ring (a datagram of the ring would overtake them; RC would
    /// retransmit, UC and UD would lose a message).
    pub(crate) fn fresh_data(&self) -> bool {
        self.inbound.iter().any(|i| i.fresh && i.ring.has_data())
    }

    /// The socket was read to its end after [`ShmPath::fresh_data`]: the
    /// rings with data are no longer fresh.
    pub(crate) fn settle_fresh(&mut self) {
        for i in &mut self.inbound {
            i.fresh &= !i.ring.has_data();
        }
    }

    /// Appends this path's descriptors to the poll set.
    pub(crate) fn pollfds(&mut self, out: &mut Vec<libc::pollfd>) {
        self.poll_at = out.len();
        let fd = |s: &UnixStream| sys::pollfd(s.as_raw_fd(), libc::POLLIN);
        out.push(sys::pollfd(self.listener.as_raw_fd(), libc::POLLIN));
        out.extend(self.awaiting.iter().map(|(s, _)| fd(s)));
        out.extend(self.inbound.iter().map(|i| fd(&i.conn)));
        out.extend(self.peers.0.iter().filter_map(|(_, p)| match p {
            Peer::Open(o) => Some(fd(&o.conn)),
            Peer::Refused { .. } => None,
        }));
    }

    /// After sleeping: what poll(2) reported in `fds` (the whole set).
    pub(crate) fn woke(&mut self, fds: &[libc::pollfd]) {
        for i in &self.inbound {
            i.ring.disarm();
        }
        let mine = fds.get(self.poll_at..).unwrap_or(&[]);
        self.ready
            .extend(mine.iter().filter(|p| p.revents != 0).map(|p| p.fd));
        self.woke |= !self.ready.is_empty();
    }
}

/// Reads everything queued on `conn`: `true` if its other end is gone.
fn drain(conn: &mut UnixStream) -> bool {
    let mut b = [0u8; 64];
    loop {
        match conn.read(&mut b) {
            Ok(0) => return true,
            // Less than asked: nothing more now (a later byte or the end
            // makes the connection ready again).
            Ok(n) if n < b.len() => return false,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
}

#[cfg(test)]
mod tests;

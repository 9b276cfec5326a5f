//! Several processes on one address, as on a RoCE NIC.
//!
//! Every process that opens the device on an address (one host, or one network
//! namespace) binds its own UDP socket to `address:4791` with `SO_REUSEPORT`, and
//! each datagram must reach the process that owns its destination QP. How:
//!
//! - **Slots.** A process claims a *slot* of the address, the lowest free one of
//!   [`SLOTS`], by binding the abstract unix datagram socket
//!   `softverbs/4791/<address>/<slot>` (its *inbox*). Binding is atomic, the name
//!   is scoped to the network namespace like the UDP port, and the kernel frees it
//!   when the process exits or crashes: no files, no stale state. Its QPNs carry
//!   the slot in their top [`SLOT_BITS`] bits ([`qpn_range`]), so QPNs are
//!   distinct across the processes of an address.
//! - **Steering.** The reuseport group runs a classic-BPF program (unprivileged
//!   `SO_ATTACH_REUSEPORT_CBPF`): the socket index is the slot read from the BTH
//!   destination QP (`ldb [5]; rsh #1; ret a`, three instructions). Slots are
//!   claimed and sockets bound under one per-address lock (another abstract name,
//!   a listening stream socket whose holder a waiter can identify),
//!   so processes that start together and live together have socket index = slot:
//!   each datagram goes straight to its owner, with no extra hop.
//! - **Forwarding keeps it correct.** When a member closes or crashes, the kernel
//!   moves the last socket of the group into the hole, and a later process may
//!   take a freed slot: socket index and slot part (an index beyond the group
//!   falls back to the kernel's hash). The steering is then only a hint: a
//!   process that receives a datagram for another slot forwards it, with its
//!   source address, to that slot's inbox (one `sendto` on a unix socket); the
//!   owner delivers it as if read from its UDP socket. A datagram for a slot
//!   nobody holds is dropped and counted, as a NIC drops a packet for a QP that
//!   does not exist. So no arrangement of the group, however members came and
//!   went, misroutes a datagram; the worst case costs one forward.
//!
//! Rejected: a program that maps slots to current indices (every member would
//! have to know the kernel's order after concurrent crashes, which it cannot
//! observe); an eBPF `REUSEPORT_SOCKARRAY` (needs `CAP_BPF`); a per-host switch
//! process with shared-memory queues (a daemon to start, supervise and trust,
//! and a hop on every datagram, where steering gives none). Measurements are in
//! `spec/shared-address.md`.
//!
//! All members of a reuseport group must have one effective user id: processes
//! of different users cannot share an address (the bind fails, in words).

use crate::sys;
use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram, UnixListener};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Bits of a QPN that name the slot (the top ones of the 24).
pub const SLOT_BITS: u32 = 7;
/// Processes that can share one address.
pub const SLOTS: u8 = 1 << SLOT_BITS;
const SLOT_SHIFT: u32 = 24 - SLOT_BITS;
/// How long a process waits for another's claim to finish.
const LOCK_WAIT: Duration = Duration::from_secs(5);
/// How often, and how long, a forward waits for room in a full inbox.
const FORWARD_TRIES: usize = 64;
const FORWARD_WAIT: Duration = Duration::from_micros(500);
/// Forward header: family (4 or 6), port (big-endian), 16 address bytes.
const HEADER: usize = 19;

/// The QPNs of `slot`, first and last: slot 0 keeps 0..16 free (SMI, GSI and
/// the numbers rxe reserves); the last slot stops before 0xffffff (multicast).
pub fn qpn_range(slot: u8) -> (u32, u32) {
    let base = u32::from(slot) << SLOT_SHIFT;
    let first = if slot == 0 { 16 } else { base };
    let last = (base | ((1 << SLOT_SHIFT) - 1)).min(0xff_fffe);
    (first, last)
}

/// The slot a QPN belongs to.
pub fn slot_of_qpn(qpn: u32) -> u8 {
    ((qpn & 0xff_ffff) >> SLOT_SHIFT) as u8
}

/// The slot of a datagram's BTH destination QP (bytes 5..8), if it has a BTH.
pub(crate) fn slot_of(datagram: &[u8]) -> Option<u8> {
    datagram.get(5).map(|b| b >> (8 - SLOT_BITS))
}

/// Where a datagram for the address goes (spec/shared-address.md §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// This process.
    Ours,
    /// The process holding this slot.
    Slot(u8),
    /// The process registered for this CM service ID, if any (else ours).
    Service(u64),
}

/// Whether a datagram to `to` stays in this process (the loopback shortcut):
/// it is for our own address `local` and, on a shared address (`slot`), for
/// a QP of our own slot or a CM service this process serves.
pub(crate) fn stays_here(
    slot: Option<&Slot>,
    local: SocketAddr,
    to: SocketAddr,
    datagram: &[u8],
) -> bool {
    to == local
        && match slot {
            None => true,
            Some(slot) => match target(slot.index(), datagram) {
                Target::Ours => true,
                Target::Service(sid) => slot.serves(sid),
                Target::Slot(_) => false,
            },
        }
}

/// BTH + DETH before the MAD of a datagram to QP1.
const GSI_MAD_OFFSET: usize = 12 + 8;

/// Where `datagram` (a UDP payload) must go, seen from `own` slot: data by
/// the slot of its destination QP; a CM MAD to QP1 (which every process
/// serves: QPN 1 is in no process's range) by the comm ID or service ID it
/// names (`wire::cm::steer`, spec/cm.md §8).
pub(crate) fn target(own: u8, datagram: &[u8]) -> Target {
    let by_slot = |s: u8| {
        if s == own {
            Target::Ours
        } else {
            Target::Slot(s)
        }
    };
    if datagram.get(5..8) != Some(&[0, 0, 1]) {
        return slot_of(datagram).map_or(Target::Ours, by_slot);
    }
    let Some(mad) = datagram.get(GSI_MAD_OFFSET..) else {
        return Target::Ours;
    };
    let mad = &mad[..mad.len().min(wire::mad::MAD_LEN)];
    match wire::cm::steer::steer(mad) {
        wire::cm::steer::Steer::Slot(s) => by_slot(s),
        wire::cm::steer::Steer::Service(sid) => Target::Service(sid),
        wire::cm::steer::Steer::Here => Target::Ours,
    }
}

/// The steering program: socket index = slot of the destination QP.
pub(crate) fn steering_program() -> [libc::sock_filter; 3] {
    let op = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    [
        // A = byte 5 of the UDP payload (BTH DestQP bits 23..16). A datagram too
        // short for it ends the program with 0: socket 0 takes it, and forwards.
        op(libc::BPF_LD | libc::BPF_B | libc::BPF_ABS, 5),
        op(libc::BPF_ALU | libc::BPF_RSH | libc::BPF_K, 8 - SLOT_BITS),
        op(libc::BPF_RET | libc::BPF_A, 0),
    ]
}

/// Why a slot could not be claimed.
#[derive(Debug)]
pub enum ShareError {
    /// Every slot of the address is taken.
    Full {
        /// The address.
        ip: IpAddr,
    },
    /// Another process held the claim lock too long.
    LockTimeout {
        /// The address.
        ip: IpAddr,
        /// The holder's process id, when it could be learned.
        holder: Option<i32>,
    },
    /// A process of another user holds the claim lock (abstract names carry
    /// no permissions, so anyone can take it): refused at once, not after
    /// [`LOCK_WAIT`].
    LockHeldByOtherUser {
        /// The address.
        ip: IpAddr,
        /// The holder's process id.
        pid: i32,
        /// The holder's user id.
        uid: u32,
    },
    /// A socket call failed.
    Io {
        /// What was being done.
        what: &'static str,
        /// The error.
        source: io::Error,
    },
}

impl std::fmt::Display for ShareError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShareError::Full { ip } => write!(
                f,
                "all {SLOTS} process slots of {ip} are taken (at most {SLOTS} processes share one address)"
            ),
            ShareError::LockTimeout { ip, holder: Some(pid) } => write!(
                f,
                "process {pid} has held the claim lock of {ip} for {LOCK_WAIT:?} (opening a device there); gave up waiting"
            ),
            ShareError::LockTimeout { ip, holder: None } => write!(
                f,
                "another process has been opening a device on {ip} for {LOCK_WAIT:?}; gave up waiting"
            ),
            ShareError::LockHeldByOtherUser { ip, pid, uid } => write!(
                f,
                "the claim lock of {ip} (abstract socket @{}) is held by process {pid} of user {uid}, not by us (user {}): processes sharing an address must be one user's; end that process or use another address",
                lock_name(*ip),
                sys::euid()
            ),
            ShareError::Io { what, source } => write!(f, "{what}: {source}"),
        }
    }
}

impl std::error::Error for ShareError {}

/// One process's claim on an address: its slot and its inbox.
#[derive(Debug)]
pub struct Slot {
    index: u8,
    ip: IpAddr,
    inbox: UnixDatagram,
    /// Held from the claim until the UDP socket joined the group ([`Slot::joined`]).
    lock: Mutex<Option<UnixListener>>,
    /// The listener registry: for each CM service ID this process listens on,
    /// the socket bound to its abstract name (a second inbox, [`Slot::register_service`]).
    services: Mutex<BTreeMap<u64, UnixDatagram>>,
}

fn name(ip: IpAddr, what: &str) -> io::Result<UnixAddr> {
    UnixAddr::from_abstract_name(format!("softverbs/4791/{ip}/{what}"))
}

/// The claim lock's abstract name (without the leading NUL).
fn lock_name(ip: IpAddr) -> String {
    format!("softverbs/4791/{ip}/lock")
}

impl Slot {
    /// Claims the lowest free slot of `ip` and holds the address's claim lock
    /// until [`Slot::joined`] (so sockets join the group in slot order).
    pub fn claim(ip: IpAddr) -> Result<Slot, ShareError> {
        let io = |what| move |source| ShareError::Io { what, source };
        let lock = lock(ip)?;
        for index in 0..SLOTS {
            let addr = name(ip, &index.to_string()).map_err(io("name a slot"))?;
            match UnixDatagram::bind_addr(&addr) {
                Ok(sock) => {
                    sock.set_nonblocking(true)
                        .map_err(io("set the inbox nonblocking"))?;
                    // Abstract names have no permissions: the kernel's
                    // credentials on each datagram tell our own forwards
                    // from anyone else's ([`Slot::receive`]).
                    sys::setsockopt_int(sock.as_fd(), libc::SOL_SOCKET, libc::SO_PASSCRED, 1)
                        .map_err(io("ask for the inbox senders' credentials"))?;
                    tracing::debug!(%ip, slot = index, "claimed a slot of the address");
                    return Ok(Slot {
                        index,
                        ip,
                        inbox: sock,
                        lock: Mutex::new(Some(lock)),
                        services: Mutex::new(BTreeMap::new()),
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => {}
                Err(e) => {
                    return Err(ShareError::Io {
                        what: "bind a slot",
                        source: e,
                    })
                }
            }
        }
        Err(ShareError::Full { ip })
    }

    /// This process's slot.
    pub fn index(&self) -> u8 {
        self.index
    }

    /// Registers this process as the listener of CM `service_id` on the
    /// address: binds `softverbs/4791/<address>/cm/<service id>` (atomic, one
    /// holder per namespace, freed at exit), so the process that receives a
    /// REQ or SIDR_REQ for it forwards it here. `AddrInUse` when another
    /// process of the address listens on it (Linux: `ib_cm_listen` -EBUSY).
    pub fn register_service(&self, service_id: u64) -> io::Result<()> {
        let mut services = self.services();
        if services.contains_key(&service_id) {
            return Ok(());
        }
        let sock = UnixDatagram::bind_addr(&service_name(self.ip, service_id)?)?;
        sock.set_nonblocking(true)?;
        sys::setsockopt_int(sock.as_fd(), libc::SOL_SOCKET, libc::SO_PASSCRED, 1)?;
        services.insert(service_id, sock);
        Ok(())
    }

    /// Gives up the registration of `service_id` (its name is freed).
    pub fn unregister_service(&self, service_id: u64) {
        self.services().remove(&service_id);
    }

    fn services(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, UnixDatagram>> {
        self.services
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether this process listens on `service_id`.
    pub(crate) fn serves(&self, service_id: u64) -> bool {
        self.services().contains_key(&service_id)
    }

    /// The registry sockets' descriptors (the progress thread polls them).
    pub(crate) fn service_fds(&self, out: &mut Vec<libc::pollfd>) {
        out.extend(
            self.services()
                .values()
                .map(|s| sys::pollfd(s.as_raw_fd(), libc::POLLIN)),
        );
    }

    /// Forwards a REQ/SIDR_REQ from `from` to the process registered for
    /// `service_id`; an error (`ConnectionRefused`/`NotFound`) when nobody is.
    pub(crate) fn forward_to_service(
        &self,
        service_id: u64,
        from: SocketAddr,
        bytes: &[u8],
    ) -> io::Result<()> {
        let to = service_name(self.ip, service_id)?;
        self.send_forward(&to, from, bytes)
    }

    /// Reads one datagram forwarded to any of our registry sockets, like
    /// [`Slot::receive`] (same header, same uid check).
    pub(crate) fn receive_service(&self, buf: &mut [u8]) -> io::Result<(SocketAddr, usize)> {
        let services = self.services();
        for sock in services.values() {
            match receive_on(sock, buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                other => return other,
            }
        }
        Err(io::Error::from(io::ErrorKind::WouldBlock))
    }

    /// The UDP socket joined the group: the next process may claim.
    pub(crate) fn joined(&self) {
        let mut lock = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        lock.take();
    }

    /// The inbox's descriptor (the progress thread polls it).
    pub(crate) fn inbox_fd(&self) -> RawFd {
        self.inbox.as_raw_fd()
    }

    /// Forwards a datagram from `from` to the process holding `slot`.
    pub(crate) fn forward(&self, slot: u8, from: SocketAddr, bytes: &[u8]) -> io::Result<()> {
        let to = name(self.ip, &slot.to_string())?;
        self.send_forward(&to, from, bytes)
    }

    fn send_forward(&self, to: &UnixAddr, from: SocketAddr, bytes: &[u8]) -> io::Result<()> {
        let mut msg = Vec::with_capacity(HEADER + bytes.len());
        let (family, addr) = match from.ip() {
            IpAddr::V4(v4) => (4u8, v4.to_ipv6_mapped()),
            IpAddr::V6(v6) => (6u8, v6),
        };
        msg.push(family);
        msg.extend_from_slice(&from.port().to_be_bytes());
        msg.extend_from_slice(&addr.octets());
        msg.extend_from_slice(bytes);
        // A unix datagram queue holds only net.unix.max_dgram_qlen (10 by
        // default) datagrams: when the owner is behind, give it a moment to
        // drain (bounded in tries and time) before dropping (RC retransmits).
        let start = Instant::now();
        for _ in 0..FORWARD_TRIES {
            match self.inbox.send_to_addr(&msg, to) {
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock && start.elapsed() < FORWARD_WAIT =>
                {
                    std::thread::yield_now();
                }
                other => return other.map(drop),
            }
        }
        Err(io::Error::from(io::ErrorKind::WouldBlock))
    }

    /// Reads one forwarded datagram into `buf`: its sender and length
    /// (the datagram is `buf[..len]`). `WouldBlock` when there is none.
    /// Only processes of our own user may forward (they share the address's
    /// reuseport group, which needs one effective uid): a datagram from any
    /// other sender is refused (`PermissionDenied`), never delivered.
    pub(crate) fn receive(&self, buf: &mut [u8]) -> io::Result<(SocketAddr, usize)> {
        receive_on(&self.inbox, buf)
    }

    /// Bytes a forwarded datagram of `max` bytes needs in the receive buffer.
    pub(crate) fn buffer_len(max: usize) -> usize {
        max + HEADER
    }
}

/// The registry name of CM service `service_id` on `ip`.
fn service_name(ip: IpAddr, service_id: u64) -> io::Result<UnixAddr> {
    name(ip, &format!("cm/{service_id:016x}"))
}

/// Reads one forward from `sock` (see [`Slot::receive`]).
fn receive_on(sock: &UnixDatagram, buf: &mut [u8]) -> io::Result<(SocketAddr, usize)> {
    {
        let (n, uid) = sys::recv_with_uid(sock.as_fd(), buf)?;
        if uid != Some(sys::euid()) {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("a forward from uid {uid:?}, not ours: dropped"),
            ));
        }
        if n < HEADER {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "short forward"));
        }
        let port = u16::from_be_bytes([buf[1], buf[2]]);
        let mut octets = [0u8; 16];
        octets.copy_from_slice(&buf[3..HEADER]);
        let v6 = Ipv6Addr::from(octets);
        let ip = match (buf[0], v6.to_ipv4_mapped()) {
            (4, Some(v4)) => IpAddr::V4(v4),
            _ => IpAddr::V6(v6),
        };
        buf.copy_within(HEADER..n, 0);
        Ok((SocketAddr::new(ip, port), n - HEADER))
    }
}

/// Takes the per-address claim lock: binds its abstract name as a listening
/// stream socket (freed by the kernel if the holder dies), waiting up to
/// [`LOCK_WAIT`]. Listening lets a waiter learn who holds it (`SO_PEERCRED`):
/// a holder of another user is refused at once, in words.
fn lock(ip: IpAddr) -> Result<UnixListener, ShareError> {
    let io = |what| move |source| ShareError::Io { what, source };
    let addr = name(ip, "lock").map_err(io("name the lock"))?;
    let start = Instant::now();
    let mut checked = false;
    loop {
        match UnixListener::bind_addr(&addr) {
            Ok(sock) => return Ok(sock),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse && !checked => {
                checked = true;
                if let Some((pid, uid)) = sys::abstract_listener_cred(lock_name(ip).as_bytes()) {
                    if uid != sys::euid() {
                        return Err(ShareError::LockHeldByOtherUser { ip, pid, uid });
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::AddrInUse && start.elapsed() < LOCK_WAIT => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                let holder =
                    sys::abstract_listener_cred(lock_name(ip).as_bytes()).map(|(pid, _)| pid);
                return Err(ShareError::LockTimeout { ip, holder });
            }
            Err(e) => {
                return Err(ShareError::Io {
                    what: "take the claim lock",
                    source: e,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qpn_ranges_are_disjoint_and_avoid_reserved_numbers() {
        let (f0, l0) = qpn_range(0);
        assert_eq!((f0, l0), (16, (1 << 17) - 1));
        let (f1, _) = qpn_range(1);
        assert_eq!(f1, l0 + 1);
        let (_, last) = qpn_range(SLOTS - 1);
        assert_eq!(last, 0xff_fffe);
        for s in 0..SLOTS {
            let (f, l) = qpn_range(s);
            assert_eq!((slot_of_qpn(f), slot_of_qpn(l)), (s, s));
            assert!(
                l - f + 1 >= 0x1_0000 - 16,
                "at least as many QPs as rxe offers"
            );
        }
    }

    #[test]
    fn datagram_slot_is_the_destination_qp_slot() {
        let mut bth = [0u8; 12];
        let qpn: u32 = qpn_range(5).0 + 77;
        bth[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        assert_eq!(slot_of(&bth), Some(5));
        assert_eq!(slot_of(&bth[..5]), None);
    }

    #[test]
    fn claims_take_distinct_slots_and_free_them_on_drop() {
        let ip: IpAddr = "127.0.77.1".parse().unwrap();
        let a = Slot::claim(ip).unwrap();
        a.joined();
        let b = Slot::claim(ip).unwrap();
        b.joined();
        assert_ne!(a.index(), b.index());
        let freed = a.index();
        drop(a);
        let c = Slot::claim(ip).unwrap();
        assert_eq!(c.index(), freed, "a freed slot is claimed again");
    }

    #[test]
    fn forwarding_keeps_the_sender() {
        let ip: IpAddr = "127.0.77.2".parse().unwrap();
        let a = Slot::claim(ip).unwrap();
        a.joined();
        let b = Slot::claim(ip).unwrap();
        b.joined();
        let from: SocketAddr = "127.9.8.7:4791".parse().unwrap();
        a.forward(b.index(), from, b"datagram").unwrap();
        let mut buf = vec![0u8; Slot::buffer_len(64)];
        let (got_from, len) = b.receive(&mut buf).unwrap();
        assert_eq!((got_from, &buf[..len]), (from, &b"datagram"[..]));
        let v6: SocketAddr = "[fe80::1]:99".parse().unwrap();
        b.forward(a.index(), v6, b"x").unwrap();
        let (got, len) = a.receive(&mut buf).unwrap();
        assert_eq!((got, len), (v6, 1));
        assert!(b.receive(&mut buf).unwrap_err().kind() == io::ErrorKind::WouldBlock);
    }

    /// A claim lock held by a process of another user (anyone can bind an
    /// abstract name) is refused at once with the holder named, instead of
    /// timing out. Needs root to run the holder as `nobody`; CI runs as root.
    #[test]
    fn a_lock_held_by_another_user_is_refused_and_named() {
        if sys::euid() != 0 {
            eprintln!("skipped: holding the lock as another user needs root");
            return;
        }
        let ip: IpAddr = "127.0.77.4".parse().unwrap();
        let script = format!(
            "import socket, sys, time; s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); \
             s.bind(b'\\0{}'); s.listen(1); print('held', flush=True); time.sleep(30)",
            lock_name(ip)
        );
        // setpriv execs python: the child's pid is the holder's (ended below
        // by that pid; the script also ends itself after 30 s).
        let mut holder = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .args(["/usr/bin/python3", "-c", &script])
            .current_dir("/")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let stdout = holder.stdout.take().unwrap();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
        assert_eq!(line.trim(), "held");
        let result = Slot::claim(ip);
        let _ = holder.kill();
        let _ = holder.wait();
        match result {
            Err(e @ ShareError::LockHeldByOtherUser { uid: 65534, .. }) => {
                let text = e.to_string();
                assert!(text.contains("of user 65534"), "{text}");
            }
            other => panic!("expected the holder to be named: {other:?}"),
        }
        // Once it is gone the address can be claimed.
        let a = Slot::claim(ip).unwrap();
        a.joined();
    }

    /// A datagram another user sends into an inbox (abstract names carry no
    /// permissions) is refused, never delivered. Needs root to send as
    /// `nobody`; CI runs as root.
    #[test]
    fn a_forward_from_another_user_is_refused() {
        if sys::euid() != 0 {
            eprintln!("skipped: sending as another user needs root");
            return;
        }
        let ip: IpAddr = "127.0.77.3".parse().unwrap();
        let a = Slot::claim(ip).unwrap();
        a.joined();
        // A well-formed forward header (IPv4 127.1.2.3:4791) and a payload.
        let mut msg = vec![4u8, 0x12, 0xb7];
        msg.extend_from_slice(
            &std::net::Ipv4Addr::new(127, 1, 2, 3)
                .to_ipv6_mapped()
                .octets(),
        );
        msg.extend_from_slice(b"forged");
        let script = format!(
            "import socket; s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); \
             s.sendto(bytes.fromhex('{}'), b'\\0softverbs/4791/{ip}/{}')",
            msg.iter().map(|b| format!("{b:02x}")).collect::<String>(),
            a.index()
        );
        let st = std::process::Command::new("timeout")
            .args([
                "20",
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ])
            .args(["/usr/bin/python3", "-c", &script])
            .current_dir("/")
            .status()
            .unwrap();
        assert!(st.success(), "the foreign sender ran: {st:?}");
        let mut buf = vec![0u8; Slot::buffer_len(64)];
        let e = a.receive(&mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        // Our own forwards still pass.
        a.forward(a.index(), "127.1.2.3:4791".parse().unwrap(), b"ours")
            .unwrap();
        let (_, len) = a.receive(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"ours");
    }

    /// The CM listener registry: one process per service ID of an address,
    /// REQs forwarded to it, the name freed when it stops listening.
    #[test]
    fn one_listener_per_service_and_requests_reach_it() {
        let ip: IpAddr = "127.0.77.4".parse().unwrap();
        let a = Slot::claim(ip).unwrap();
        a.joined();
        let b = Slot::claim(ip).unwrap();
        b.joined();
        b.register_service(0x0106_0000_0000_1c6f).unwrap();
        let e = a.register_service(0x0106_0000_0000_1c6f).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert!(b.serves(0x0106_0000_0000_1c6f) && !a.serves(0x0106_0000_0000_1c6f));
        let from: SocketAddr = "127.9.8.7:4791".parse().unwrap();
        a.forward_to_service(0x0106_0000_0000_1c6f, from, b"req")
            .unwrap();
        let mut buf = vec![0u8; Slot::buffer_len(64)];
        let (got, len) = b.receive_service(&mut buf).unwrap();
        assert_eq!((got, &buf[..len]), (from, &b"req"[..]));
        assert!(a
            .forward_to_service(0x0106_0000_0000_0001, from, b"x")
            .is_err());
        b.unregister_service(0x0106_0000_0000_1c6f);
        a.register_service(0x0106_0000_0000_1c6f).unwrap();
    }

    /// Data goes by the slot of its destination QP; a MAD to QP1 by the comm
    /// ID it names (top 7 bits) or, for a REQ, by its service ID.
    #[test]
    fn cm_mads_go_by_comm_id_slot_or_service() {
        use wire::cm::{rtu, Message, Repr};
        let mut data = [0u8; 12];
        data[5..8].copy_from_slice(&qpn_range(3).0.to_be_bytes()[1..]);
        assert_eq!(target(3, &data), Target::Ours);
        assert_eq!(target(0, &data), Target::Slot(3));
        let rtu_to = |comm_id: u32| {
            let mut d = vec![0u8; GSI_MAD_OFFSET + wire::mad::MAD_LEN + 4];
            d[5..8].copy_from_slice(&[0, 0, 1]);
            let r = Repr {
                tid: 1,
                attr_mod: 0,
                message: Message::Rtu(rtu::Repr {
                    local_comm_id: 9,
                    remote_comm_id: comm_id,
                    private_data: [0; rtu::PRIVATE_DATA_LEN],
                }),
            };
            r.emit(&mut d[GSI_MAD_OFFSET..][..wire::mad::MAD_LEN])
                .unwrap();
            d
        };
        assert_eq!(target(0, &rtu_to(5 << 25 | 77)), Target::Slot(5));
        assert_eq!(target(5, &rtu_to(5 << 25 | 77)), Target::Ours);
        assert_eq!(target(5, &rtu_to(77)), Target::Slot(0));
        // Not a MAD: the receiver's CM counts and drops it.
        let mut junk = vec![0u8; 40];
        junk[5..8].copy_from_slice(&[0, 0, 1]);
        assert_eq!(target(4, &junk), Target::Ours);
    }
}

//! RAW_PACKET queue pairs' packet sockets (spec/raw-packet.md).
//!
//! Each RAW_PACKET QP of a device owns one `AF_PACKET` raw socket bound to
//! the interface that holds the device's address. Opening it needs
//! `CAP_NET_RAW` (socket(2) says `EPERM` otherwise, and so does QP creation,
//! as rdma-core's hardware providers answer an unprivileged caller). Its
//! socket filter is the QP's flow rules compiled to classic BPF
//! ([`filter`]): a QP receives exactly the frames one of its rules matches,
//! nothing while it has none. Frames the interface sends are not read back
//! (`PACKET_IGNORE_OUTGOING`), so a QP sees each received frame once.
//!
//! The progress thread moves the frames ([`RawPath`]): what the engine's
//! `poll_frame` writes leaves through the socket of the QP it names; what a
//! socket reads goes to `handle_frame` for that socket's QP. The engine's
//! lock is never held across a system call. Frames pass the driver's
//! `SOFTVERBS_FAULTS` ([`faults`]) and `SOFTVERBS_PCAP` capture as RoCE
//! datagrams do: a sent frame is captured once the kernel took it, after the
//! transmit faults; a received one as read, before the receive faults.

mod faults;
pub(crate) mod filter;
pub mod flow;

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex, PoisonError};

use crate::capture::Capture;
use crate::counters::Counters;
use crate::driver::{Driver, Shared};
use crate::engine::Engine;
use crate::hold::Dir;
use crate::sys;
use faults::{Fate, RawFaults};
pub use flow::{FlowError, FlowRule};

/// `SOL_PACKET` option: do not read back frames this host sends (Linux 4.20).
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// The largest frame read: lo's MTU (65536) plus an Ethernet header, rounded.
pub const MAX_FRAME: usize = 65536 + 64;

/// The interface a device's RAW_PACKET QPs send and receive on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawPort {
    /// Its name (`lo`, `veth0`, ...).
    pub interface: String,
    /// Its index.
    pub ifindex: u32,
    /// Its MTU: a frame may carry this much after the Ethernet header.
    pub mtu: u32,
    /// Its MAC address (all zero on lo).
    pub mac: [u8; 6],
}

impl RawPort {
    /// The interface that holds `ip`, from the host's address list and sysfs.
    pub fn of(ip: std::net::IpAddr) -> io::Result<RawPort> {
        let interface = crate::host::interface_of(ip).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("no interface holds the device's address {ip}"),
            )
        })?;
        let ifindex = crate::host::interface_index(&interface).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("interface {interface} vanished"),
            )
        })?;
        let sysfs = |what: &str| {
            std::fs::read_to_string(format!("/sys/class/net/{interface}/{what}"))
                .map(|s| s.trim().to_owned())
        };
        let mtu = sysfs("mtu")?.parse().unwrap_or(1500);
        let mut mac = [0u8; 6];
        for (m, part) in mac.iter_mut().zip(sysfs("address")?.split(':')) {
            *m = u8::from_str_radix(part, 16).unwrap_or(0);
        }
        Ok(RawPort {
            interface,
            ifindex,
            mtu,
            mac,
        })
    }
}

/// One QP's packet socket and the rules its filter is made of.
#[derive(Debug)]
pub(crate) struct RawSocket {
    qpn: u32,
    fd: OwnedFd,
    rules: Mutex<Vec<(u64, FlowRule)>>,
}

impl RawSocket {
    fn open(qpn: u32, port: &RawPort) -> io::Result<RawSocket> {
        let fd = sys::packet::socket()?;
        sys::setsockopt_int(fd.as_fd(), libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)?;
        // Drop everything until a flow is attached, and before frames flow.
        let none = filter::program(&[]).map_err(io::Error::other)?;
        sys::packet::attach_filter(fd.as_fd(), &none)?;
        sys::packet::bind(fd.as_fd(), port.ifindex)?;
        Ok(RawSocket {
            qpn,
            fd,
            rules: Mutex::new(Vec::new()),
        })
    }

    /// Recompiles the filter from `rules`; on failure nothing changes.
    fn refilter(&self, rules: &[(u64, FlowRule)]) -> Result<(), FlowError> {
        let list: Vec<FlowRule> = rules.iter().map(|(_, r)| r.clone()).collect();
        let prog = filter::program(&list).map_err(|e| FlowError::Unsupported {
            what: e.to_string(),
        })?;
        sys::packet::attach_filter(self.fd.as_fd(), &prog).map_err(|e| FlowError::Invalid {
            what: format!("the kernel refused the socket filter: {e}"),
        })
    }
}

/// The device's packet sockets, as the driver's shared state keeps them.
#[derive(Debug, Default)]
pub(crate) struct RawSockets {
    list: Mutex<Vec<Arc<RawSocket>>>,
    version: std::sync::atomic::AtomicU64,
    next_flow: std::sync::atomic::AtomicU64,
}

impl RawSockets {
    /// Opens QP `qpn`'s socket on `port` and lists it.
    fn open(&self, qpn: u32, port: &RawPort) -> io::Result<()> {
        let socket = RawSocket::open(qpn, port)?;
        self.lock().push(Arc::new(socket));
        self.version.fetch_add(1, SeqCst);
        Ok(())
    }

    /// Adds the kernel's counts of each socket since the last reading to
    /// `c` (`raw_kernel_queued`, `raw_kernel_drops`).
    pub(crate) fn read_kernel_counts(&self, c: &Counters) {
        for s in self.lock().iter() {
            if let Ok((queued, drops)) = sys::packet::statistics(s.fd.as_fd()) {
                Counters::add(&c.raw_kernel_queued, u64::from(queued));
                Counters::add(&c.raw_kernel_drops, u64::from(drops));
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<RawSocket>>> {
        self.list.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn find(&self, qpn: u32) -> Option<Arc<RawSocket>> {
        self.lock().iter().find(|s| s.qpn == qpn).cloned()
    }
}

impl<E: Engine> Driver<E> {
    /// Opens the packet socket of RAW_PACKET QP `qpn` on the interface of
    /// the device's address (`EPERM` without `CAP_NET_RAW`). It receives
    /// nothing until [`Driver::add_flow`].
    pub fn open_raw(&self, qpn: u32) -> io::Result<RawPort> {
        let port = RawPort::of(self.local_addr().ip())?;
        self.shared().raw.open(qpn, &port)?;
        self.doorbell();
        Ok(port)
    }

    /// Closes the packet socket of QP `qpn` (its flows go with it).
    pub fn close_raw(&self, qpn: u32) {
        let raw = &self.shared().raw;
        raw.lock().retain(|s| s.qpn != qpn);
        raw.version.fetch_add(1, SeqCst);
        self.doorbell();
    }

    /// Adds a rule to QP `qpn`'s filter; its id for [`Driver::remove_flow`].
    pub fn add_flow(&self, qpn: u32, rule: FlowRule) -> Result<u64, FlowError> {
        let raw = &self.shared().raw;
        let socket = raw.find(qpn).ok_or_else(|| FlowError::Invalid {
            what: format!("QP {qpn:#x} is not a RAW_PACKET QP of this device"),
        })?;
        let id = raw.next_flow.fetch_add(1, SeqCst);
        let mut rules = socket.rules.lock().unwrap_or_else(PoisonError::into_inner);
        rules.push((id, rule));
        if let Err(e) = socket.refilter(&rules) {
            rules.pop();
            return Err(e);
        }
        Ok(id)
    }

    /// Removes rule `id` from QP `qpn`'s filter; false if there is no such rule.
    pub fn remove_flow(&self, qpn: u32, id: u64) -> bool {
        let Some(socket) = self.shared().raw.find(qpn) else {
            return false;
        };
        let mut rules = socket.rules.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(i) = rules.iter().position(|(r, _)| *r == id) else {
            return false;
        };
        let removed = rules.remove(i);
        if let Err(e) = socket.refilter(&rules) {
            // Fewer rules than a filter that compiled: cannot fail; keep it if it does.
            tracing::warn!(qpn, error = %e, "refiltering after a flow's removal failed");
            rules.insert(i, removed);
            return false;
        }
        true
    }
}

/// The progress thread's side: a copy of the socket list, a frame buffer,
/// and the faults frames pass.
#[derive(Debug)]
pub(crate) struct RawPath {
    sockets: Vec<Arc<RawSocket>>,
    seen: u64,
    buf: Vec<u8>,
    faults: RawFaults,
}

impl RawPath {
    pub(crate) fn new(opts: &crate::options::DriverOptions) -> RawPath {
        RawPath {
            sockets: Vec::new(),
            seen: 0,
            buf: Vec::new(),
            faults: RawFaults::new(opts),
        }
    }

    fn refresh<E: Engine>(&mut self, shared: &Shared<E>) {
        if self.sync_sockets(shared) {
            if self.sockets.is_empty() {
                self.buf = Vec::new();
            } else {
                self.buf.resize(MAX_FRAME, 0);
            }
        }
    }

    /// Takes the device's socket list again if it changed since; whether it did.
    fn sync_sockets<E: Engine>(&mut self, shared: &Shared<E>) -> bool {
        let v = shared.raw.version.load(SeqCst);
        if v == self.seen {
            return false;
        }
        self.sockets.clone_from(&shared.raw.lock());
        self.seen = v;
        true
    }

    /// Reads up to `budget` frames per socket: each is captured as read,
    /// then passes the receive faults into the engine.
    pub(crate) fn receive<E: Engine>(
        &mut self,
        shared: &Shared<E>,
        budget: usize,
        capture: &mut Option<Capture>,
    ) -> bool {
        self.refresh(shared);
        let mut work = false;
        for s in &self.sockets {
            for _ in 0..budget {
                let (n, real) = match sys::packet::recv(s.fd.as_fd(), &mut self.buf) {
                    Ok(got) => got,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => {
                        Counters::add(&shared.counters.recv_errors, 1);
                        tracing::warn!(qpn = s.qpn, error = %e, "packet socket receive failed");
                        break;
                    }
                };
                work = true;
                if n < real {
                    Counters::add(&shared.counters.recv_errors, 1);
                    tracing::warn!(
                        qpn = s.qpn,
                        len = real,
                        "frame longer than the buffer; dropped"
                    );
                    continue;
                }
                let now = shared.clock.now();
                let frame = &mut self.buf[..n];
                if let Some(cap) = capture.as_mut() {
                    cap.record_frame(now, frame, &shared.counters);
                }
                let c = &shared.counters;
                if let Fate::Pass = self.faults.inject(Dir::Rx, now, s.qpn, frame, c) {
                    shared.engine().handle_frame(now, s.qpn, frame);
                    self.faults.passed(Dir::Rx);
                }
            }
        }
        work
    }

    /// Releases the held frames that are due, then sends up to `budget`
    /// frames the engine has ready through the transmit faults.
    pub(crate) fn transmit<E: Engine>(
        &mut self,
        shared: &Shared<E>,
        budget: usize,
        capture: &mut Option<Capture>,
    ) -> bool {
        self.refresh(shared);
        let mut work = self.release(shared, budget, capture);
        if self.sockets.is_empty() {
            return work;
        }
        for _ in 0..budget {
            let now = shared.clock.now();
            let Some((qpn, len)) = shared.engine().poll_frame(now, &mut self.buf) else {
                break;
            };
            work = true;
            self.send_polled(shared, now, qpn, len, capture);
        }
        work
    }

    /// Sends the frame `poll_frame` just wrote (`len` bytes of QP `qpn`)
    /// through the transmit faults. A QP whose socket opened after this
    /// pass's refresh has its first frames here already (its post came
    /// meanwhile): the list is taken again before the frame is given up as
    /// a closed QP's.
    fn send_polled<E: Engine>(
        &mut self,
        shared: &Shared<E>,
        now: crate::clock::Nanos,
        qpn: u32,
        len: usize,
        capture: &mut Option<Capture>,
    ) {
        if !self.sockets.iter().any(|s| s.qpn == qpn) {
            self.sync_sockets(shared);
        }
        let frame = &mut self.buf[..len.min(MAX_FRAME)];
        let c = &shared.counters;
        if let Fate::Pass = self.faults.inject(Dir::Tx, now, qpn, frame, c) {
            send_frame(&self.sockets, shared, qpn, now, frame, capture);
            self.faults.passed(Dir::Tx);
        }
    }

    /// Sends or delivers up to `budget` held frames that are due.
    fn release<E: Engine>(
        &mut self,
        shared: &Shared<E>,
        budget: usize,
        capture: &mut Option<Capture>,
    ) -> bool {
        if self.faults.holds_none() {
            return false;
        }
        let mut work = false;
        let now = shared.clock.now();
        for _ in 0..budget {
            let Some(held) = self.faults.pop_due(now) else {
                break;
            };
            work = true;
            match held.dir {
                Dir::Rx => shared.engine().handle_frame(now, held.peer, &held.bytes),
                Dir::Tx => send_frame(&self.sockets, shared, held.peer, now, &held.bytes, capture),
            }
            self.faults.passed(held.dir);
            self.faults.recycle(held);
        }
        work
    }

    /// When the next held frame is due (for the progress thread's sleep).
    pub(crate) fn next_wake(&self) -> Option<crate::clock::Nanos> {
        self.faults.next_wake()
    }

    /// The sockets' poll entries.
    pub(crate) fn pollfds(&self, fds: &mut Vec<libc::pollfd>) {
        fds.extend(
            self.sockets
                .iter()
                .map(|s| sys::pollfd(s.fd.as_raw_fd(), libc::POLLIN)),
        );
    }
}

/// One frame leaves through QP `qpn`'s socket and, once the kernel took it,
/// goes into the capture.
fn send_frame<E: Engine>(
    sockets: &[Arc<RawSocket>],
    shared: &Shared<E>,
    qpn: u32,
    now: crate::clock::Nanos,
    frame: &[u8],
    capture: &mut Option<Capture>,
) {
    let Some(s) = sockets.iter().find(|s| s.qpn == qpn) else {
        tracing::debug!(qpn, "frame of a QP whose socket is closed; dropped");
        return;
    };
    match sys::packet::send(s.fd.as_fd(), frame) {
        Ok(_) => {
            if let Some(cap) = capture.as_mut() {
                cap.record_frame(now, frame, &shared.counters);
            }
        }
        Err(e) => {
            // Unreliable, as a NIC's raw send queue is: counted, logged.
            Counters::add(&shared.counters.send_errors, 1);
            tracing::warn!(qpn, len = frame.len(), error = %e, "frame send failed; dropped");
        }
    }
}

#[cfg(test)]
mod tests;

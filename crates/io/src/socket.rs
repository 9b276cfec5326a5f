//! The RoCEv2 UDP socket: how it is set up and how its errors are classified.
//!
//! Per `spec/roce-wire.md` §8.4–8.5 the socket is **unconnected** and has path
//! MTU discovery set to `IP_PMTUDISC_DO`, so every IPv4 datagram leaves with
//! DF = 1 and IP ID = 0 (the ID the ICRC is computed for). IPv6 sockets get
//! `IPV6_MTU_DISCOVER = IPV6_PMTUDISC_DO` (and, for dual-stack sockets, the IPv4
//! option too). The socket is nonblocking with generous kernel buffers.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;

use crate::options::DriverOptions;
use crate::{share, sys};

/// Binds the driver's socket with `opts`' buffers: alone on `addr`, or, with
/// `opts.share`, as a member of the address's reuseport group with the steering
/// program attached ([`crate::share`]).
pub(crate) fn bind_shared(addr: SocketAddr, opts: &DriverOptions) -> io::Result<UdpSocket> {
    let (rcv, snd) = (opts.recv_buffer_bytes, opts.send_buffer_bytes);
    let Some(slot) = &opts.share else {
        return bind(addr, rcv, snd);
    };
    let socket = sys::udp_bind_reuseport(addr).map_err(|e| {
        let why = if e.kind() == io::ErrorKind::AddrInUse {
            " — the port is held by a socket outside the address's sharing group: another \
             program, a softverbs process of another user (processes share an address \
             only under one user id), or the kernel's rdma_rxe"
        } else {
            ""
        };
        io::Error::new(e.kind(), format!("{e}{why}"))
    })?;
    sys::attach_reuseport_cbpf(socket.as_fd(), &share::steering_program())?;
    slot.joined();
    set_dont_fragment(&socket, addr)?;
    set_multicast_if(&socket, addr);
    set_buffer(&socket, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, rcv);
    set_buffer(&socket, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, snd);
    Ok(socket)
}

/// Binds the driver's socket to `addr` (port 0 picks a free port).
pub(crate) fn bind(
    addr: SocketAddr,
    rcvbuf_bytes: usize,
    sndbuf_bytes: usize,
) -> io::Result<UdpSocket> {
    let socket = UdpSocket::bind(addr)?;
    socket.set_nonblocking(true)?;
    set_dont_fragment(&socket, addr)?;
    set_multicast_if(&socket, addr);
    set_buffer(&socket, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, rcvbuf_bytes);
    set_buffer(&socket, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, sndbuf_bytes);
    Ok(socket)
}

/// DF = 1, IP ID = 0 (§8.5: unconnected + IP_PMTUDISC_DO).
fn set_dont_fragment(socket: &UdpSocket, addr: SocketAddr) -> io::Result<()> {
    let fd = socket.as_fd();
    match addr {
        SocketAddr::V4(_) => sys::setsockopt_int(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        ),
        SocketAddr::V6(_) => {
            sys::setsockopt_int(
                fd,
                libc::IPPROTO_IPV6,
                libc::IPV6_MTU_DISCOVER,
                libc::IPV6_PMTUDISC_DO,
            )?;
            // A dual-stack socket sends IPv4-mapped peers as IPv4; a v6-only one refuses this.
            let v4 = libc::IP_PMTUDISC_DO;
            let _ = sys::setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, v4);
            Ok(())
        }
    }
}

/// Datagrams to a multicast group (spec/multicast.md) leave through the
/// interface that holds the device's address. IPv4 needs nothing: a socket
/// bound to a local address sends multicast out of that address's interface
/// (`ip_route_output_key_hash_rcu`); IPv6 has no such rule, so
/// `IPV6_MULTICAST_IF` names it. A refusal is only logged (unicast is unaffected).
fn set_multicast_if(socket: &UdpSocket, addr: SocketAddr) {
    let SocketAddr::V6(v6) = addr else { return };
    let index = crate::host::interface_of(addr.ip()).and_then(|n| crate::host::interface_index(&n));
    let Some(index) = index.filter(|_| !v6.ip().is_unspecified()) else {
        return;
    };
    let (level, name) = (libc::IPPROTO_IPV6, libc::IPV6_MULTICAST_IF);
    if let Err(e) = sys::setsockopt_int(socket.as_fd(), level, name, index as libc::c_int) {
        tracing::debug!(error = %e, index, "IPV6_MULTICAST_IF refused");
    }
}

/// Asks for `bytes` of kernel buffer: the FORCE option (beyond rmem_max/wmem_max,
/// needs CAP_NET_ADMIN) first, then the capped one. A refusal is only logged.
fn set_buffer(socket: &UdpSocket, force: libc::c_int, plain: libc::c_int, bytes: usize) {
    let fd = socket.as_fd();
    let value = bytes.min(i32::MAX as usize) as libc::c_int;
    if sys::setsockopt_int(fd, libc::SOL_SOCKET, force, value).is_ok() {
        return;
    }
    if let Err(e) = sys::setsockopt_int(fd, libc::SOL_SOCKET, plain, value) {
        tracing::warn!(error = %e, option = plain, bytes, "socket buffer size refused");
    }
    let got = sys::getsockopt_int(fd, libc::SOL_SOCKET, plain).unwrap_or(-1);
    tracing::debug!(option = plain, asked = bytes, got, "socket buffer size");
}

/// What became of one send.
#[derive(Debug)]
pub(crate) enum SendOutcome {
    /// The kernel took the datagram.
    Sent,
    /// The kernel is out of room (EAGAIN/ENOBUFS): keep the datagram, retry later.
    Retry,
    /// Any other error: the datagram is dropped (the protocol retransmits).
    Failed(io::Error),
}

/// One `sendto` with the retry policy applied.
pub(crate) fn send(socket: &UdpSocket, to: SocketAddr, payload: &[u8]) -> SendOutcome {
    match socket.send_to(payload, to) {
        Ok(_) => SendOutcome::Sent,
        Err(e) if is_retryable(&e) => SendOutcome::Retry,
        Err(e) => SendOutcome::Failed(e),
    }
}

/// Asks the kernel to coalesce received datagrams (`UDP_GRO`, Linux 5.0); whether it agreed.
pub(crate) fn enable_gro(socket: &UdpSocket) -> bool {
    match sys::setsockopt_int(socket.as_fd(), sys::SOL_UDP, sys::UDP_GRO, 1) {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!(error = %e, "UDP_GRO refused; datagrams are read one by one");
            false
        }
    }
}

/// Whether datagrams to `to` may share a UDP GSO send. The kernel numbers the
/// IPv4 IDs of a GSO send's segments 0, 1, 2, … (`inet_gso_segment`), while the
/// ICRC is computed for ID 0 (spec/roce-wire.md §8.4–8.5): a receiver that checks
/// the ICRC against the real header (rxe, a RoCE NIC) would drop all but the
/// first. So IPv4 groups only to loopback addresses, whose receivers are UDP
/// sockets that never see the ID; IPv6 has no ID.
pub(crate) fn gso_eligible(to: SocketAddr) -> bool {
    match to {
        SocketAddr::V4(a) => a.ip().is_loopback(),
        SocketAddr::V6(_) => true,
    }
}

/// What one [`Sender::send`] did, for the counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SendReport {
    /// System calls made.
    pub(crate) calls: u64,
    /// Datagrams that left inside a GSO send of several.
    pub(crate) gso_datagrams: u64,
    /// The kernel refused GSO and it is now off for this socket.
    pub(crate) fell_back: bool,
}

/// Sends runs of datagrams: one sendmmsg(2) per run, each group of datagrams
/// that may share a UDP GSO send ([`crate::batch::gso_groups`]) as one message
/// of it. If the kernel refuses GSO (EIO, EINVAL, ENOPROTOOPT on a message of
/// several segments), GSO is off for good and the run goes one datagram per message.
#[derive(Debug)]
pub(crate) struct Sender {
    gso: bool,
    groups: Vec<usize>,
    sizes: Vec<(SocketAddr, usize)>,
}

impl Sender {
    pub(crate) fn new(gso: bool) -> Self {
        Sender {
            gso,
            groups: Vec::new(),
            sizes: Vec::new(),
        }
    }

    /// Whether GSO is (still) used.
    #[cfg(test)]
    pub(crate) fn gso(&self) -> bool {
        self.gso
    }

    /// [`Sender::send`], its system calls, GSO datagrams and fallbacks counted in `c`.
    pub(crate) fn send_counted(
        &mut self,
        socket: &UdpSocket,
        run: &[(SocketAddr, &[u8])],
        c: &crate::counters::Counters,
    ) -> io::Result<usize> {
        use crate::counters::Counters;
        let (result, report) = self.send(socket, run);
        Counters::add(&c.send_calls, report.calls);
        Counters::add(&c.gso_datagrams, report.gso_datagrams);
        if report.fell_back {
            Counters::add(&c.gso_fallbacks, 1);
        }
        result
    }

    /// Sends a run: `Ok(n)`, the first `n` datagrams left; `Err`, the first did not.
    pub(crate) fn send(
        &mut self,
        socket: &UdpSocket,
        run: &[(SocketAddr, &[u8])],
    ) -> (io::Result<usize>, SendReport) {
        let mut report = SendReport::default();
        if self.gso && run.len() > 1 {
            self.sizes.clear();
            self.sizes.extend(run.iter().map(|(to, b)| (*to, b.len())));
            crate::batch::gso_groups(&self.sizes, gso_eligible, &mut self.groups);
            if self.groups.len() < run.len() {
                let mut msgs = Vec::with_capacity(self.groups.len().min(sys::MMSG_MAX));
                let mut at = 0;
                let segs: Vec<&[u8]> = run.iter().map(|(_, b)| *b).collect();
                for &n in self.groups.iter().take(sys::MMSG_MAX) {
                    msgs.push(sys::GsoMessage {
                        to: run[at].0,
                        segments: &segs[at..at + n],
                    });
                    at += n;
                }
                report.calls += 1;
                match sys::sendmmsg_gso(socket.as_fd(), &msgs) {
                    Ok(sent) => {
                        let sent = sent.min(msgs.len());
                        let done: usize = self.groups[..sent].iter().sum();
                        report.gso_datagrams = self.groups[..sent]
                            .iter()
                            .filter(|&&n| n > 1)
                            .sum::<usize>() as u64;
                        return (Ok(done), report);
                    }
                    Err(e) if self.groups[0] > 1 && refuses_gso(&e) => {
                        tracing::info!(error = %e, "UDP GSO refused; sending datagram by datagram");
                        self.gso = false;
                        report.fell_back = true;
                    }
                    Err(e) => return (Err(e), report),
                }
            }
        }
        report.calls += 1;
        let result = match run {
            // One datagram: sendto(2), a little cheaper in the kernel (latency).
            [(to, bytes)] => socket.send_to(bytes, *to).map(|_| 1),
            _ => sys::sendmmsg(socket.as_fd(), run),
        };
        (result, report)
    }
}

/// The errors of a kernel (or route) that does not do UDP GSO.
fn refuses_gso(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EIO | libc::EINVAL | libc::ENOPROTOOPT | libc::EOPNOTSUPP)
    )
}

pub(crate) fn is_retryable(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
        || e.kind() == io::ErrorKind::Interrupted
        || e.raw_os_error() == Some(libc::ENOBUFS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn ipv4_socket_has_pmtudisc_do() {
        let s = bind("127.0.0.1:0".parse().unwrap(), 1 << 20, 1 << 20).unwrap();
        let v = sys::getsockopt_int(s.as_fd(), libc::IPPROTO_IP, libc::IP_MTU_DISCOVER).unwrap();
        assert_eq!(v, libc::IP_PMTUDISC_DO);
        let rcv = sys::getsockopt_int(s.as_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF).unwrap();
        assert!(rcv > 0);
    }

    #[test]
    fn ipv6_socket_has_pmtudisc_do() {
        let Ok(s) = bind("[::1]:0".parse().unwrap(), 1 << 20, 1 << 20) else {
            eprintln!("skipped: no IPv6 loopback");
            return;
        };
        let (level, name) = (libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER);
        assert_eq!(
            sys::getsockopt_int(s.as_fd(), level, name).unwrap(),
            libc::IPV6_PMTUDISC_DO
        );
    }

    #[test]
    fn retry_policy() {
        assert!(is_retryable(&io::Error::from(io::ErrorKind::WouldBlock)));
        assert!(is_retryable(&io::Error::from_raw_os_error(libc::ENOBUFS)));
        assert!(!is_retryable(&io::Error::from_raw_os_error(libc::EMSGSIZE)));
    }

    /// Reads `want` datagrams (GRO-coalesced buffers split back) from `b`, bounded.
    fn read_all(b: &UdpSocket, want: usize) -> Vec<Vec<u8>> {
        let slot = 65536;
        let mut mem = vec![0u8; 4 * slot];
        let mut meta = [sys::Received::default(); 4];
        let mut got = Vec::new();
        for _ in 0..1000 {
            if got.len() >= want {
                break;
            }
            let mut fds = [sys::pollfd(b.as_raw_fd(), libc::POLLIN)];
            sys::poll(&mut fds, Some(std::time::Duration::from_secs(5))).unwrap();
            let Ok(n) = sys::recvmmsg(b.as_fd(), &mut mem, slot, &mut meta) else {
                continue;
            };
            for (i, r) in meta[..n].iter().enumerate() {
                assert!(!r.truncated);
                for (off, len) in sys::split(r.len, r.segment) {
                    got.push(mem[i * slot + off..][..len].to_vec());
                }
            }
        }
        got
    }

    fn datagrams() -> Vec<Vec<u8>> {
        // 40 of 1,200 bytes then one of 77, all distinct.
        let mut d: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 1200]).collect();
        d.push(vec![0xee; 77]);
        d
    }

    fn send_all(s: &mut Sender, a: &UdpSocket, to: SocketAddr, d: &[Vec<u8>]) -> SendReport {
        let run: Vec<(SocketAddr, &[u8])> = d.iter().map(|x| (to, &x[..])).collect();
        let mut total = SendReport::default();
        let mut sent = 0;
        for _ in 0..1000 {
            if sent == run.len() {
                break;
            }
            let (r, rep) = s.send(a, &run[sent..]);
            sent += r.unwrap();
            total.calls += rep.calls;
            total.gso_datagrams += rep.gso_datagrams;
            total.fell_back |= rep.fell_back;
        }
        assert_eq!(sent, run.len());
        total
    }

    #[test]
    fn gso_send_and_gro_receive_give_back_the_datagrams() {
        let a = bind("127.0.0.1:0".parse().unwrap(), 1 << 20, 1 << 20).unwrap();
        let b = bind("127.0.0.1:0".parse().unwrap(), 1 << 20, 1 << 20).unwrap();
        let gro = enable_gro(&b);
        let d = datagrams();
        let mut s = Sender::new(true);
        let rep = send_all(&mut s, &a, b.local_addr().unwrap(), &d);
        assert!(s.gso(), "this kernel takes UDP GSO");
        assert!(!rep.fell_back);
        assert_eq!(rep.calls, 1, "41 datagrams in one sendmmsg");
        assert_eq!(rep.gso_datagrams, 41);
        assert_eq!(read_all(&b, d.len()), d, "gro = {gro}");
    }

    #[test]
    fn a_kernel_refusing_gso_falls_back_and_the_data_arrives() {
        // The kernel refuses UDP GSO (EINVAL) on a socket sending without UDP
        // checksums (udp_send_skb), which any user may set.
        let a = bind("127.0.0.1:0".parse().unwrap(), 1 << 20, 1 << 20).unwrap();
        sys::setsockopt_int(a.as_fd(), libc::SOL_SOCKET, libc::SO_NO_CHECK, 1).unwrap();
        let b = bind("127.0.0.1:0".parse().unwrap(), 1 << 20, 1 << 20).unwrap();
        let d = datagrams();
        let mut s = Sender::new(true);
        let rep = send_all(&mut s, &a, b.local_addr().unwrap(), &d);
        assert!(rep.fell_back && !s.gso(), "GSO is off for good");
        assert_eq!(rep.gso_datagrams, 0);
        assert_eq!(read_all(&b, d.len()), d);
        // Remembered: the next run makes one call.
        let rep = send_all(&mut s, &a, b.local_addr().unwrap(), &d);
        assert_eq!((rep.calls, rep.fell_back), (1, false));
        assert_eq!(read_all(&b, d.len()), d);
    }

    #[test]
    fn gso_only_where_the_ip_id_cannot_matter() {
        assert!(gso_eligible("127.3.4.5:4791".parse().unwrap()));
        assert!(gso_eligible("[::1]:4791".parse().unwrap()));
        assert!(gso_eligible("[fd00::1]:4791".parse().unwrap()));
        assert!(!gso_eligible("10.0.0.1:4791".parse().unwrap()));
    }
}

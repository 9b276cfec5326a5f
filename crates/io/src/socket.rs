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

pub(crate) fn is_retryable(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
        || e.kind() == io::ErrorKind::Interrupted
        || e.raw_os_error() == Some(libc::ENOBUFS)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

//! Socket addresses and the host's routing, as the CM needs them.

use std::ffi::c_int;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

/// The address and port (host order) of a C `sockaddr`; `EAFNOSUPPORT` for a
/// family other than AF_INET/AF_INET6.
///
/// # Safety
/// `sa` is non-NULL and points to a sockaddr of the size its family implies.
pub unsafe fn from_sockaddr(sa: *const libc::sockaddr) -> Result<(IpAddr, u16), c_int> {
    // SAFETY: per the contract.
    unsafe {
        match c_int::from((*sa).sa_family) {
            libc::AF_INET => {
                let sin = &*sa.cast::<libc::sockaddr_in>();
                Ok((
                    IpAddr::V4(Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes())),
                    u16::from_be(sin.sin_port),
                ))
            }
            libc::AF_INET6 => {
                let sin6 = &*sa.cast::<libc::sockaddr_in6>();
                Ok((
                    IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)),
                    u16::from_be(sin6.sin6_port),
                ))
            }
            _ => Err(libc::EAFNOSUPPORT),
        }
    }
}

/// The same from a `sockaddr_storage` we filled (AF_UNSPEC: `None`).
pub fn from_storage(ss: &libc::sockaddr_storage) -> Option<(IpAddr, u16)> {
    // SAFETY: a sockaddr_storage holds any sockaddr of its family.
    unsafe { from_sockaddr(std::ptr::from_ref(ss).cast::<libc::sockaddr>()) }.ok()
}

/// A `sockaddr_storage` holding `ip:port` (port in host order).
pub fn to_storage(ip: IpAddr, port: u16) -> libc::sockaddr_storage {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match ip {
        IpAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
            let sin = unsafe { &mut *(&raw mut ss).cast::<libc::sockaddr_in>() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = port.to_be();
            sin.sin_addr.s_addr = u32::from_ne_bytes(v4.octets());
        }
        IpAddr::V6(v6) => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { &mut *(&raw mut ss).cast::<libc::sockaddr_in6>() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = port.to_be();
            sin6.sin6_addr.s6_addr = v6.octets();
        }
    }
    ss
}

/// The RoCE GID of an address: IPv4-mapped for IPv4 (`rdma_ip2gid`).
pub fn gid_of(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The wildcard address of `ip`'s family.
pub fn any_of(ip: &IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    }
}

/// Whether `ip` is on loopback (127.0.0.0/8, ::1, or IPv4-mapped loopback).
pub fn is_loopback(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// The source address the host's routing picks to reach `dst` (a connected
/// UDP socket sends no packet). The error is the routing's errno, e.g.
/// `ENETUNREACH` when no route exists.
pub fn route_source(dst: IpAddr) -> Result<IpAddr, c_int> {
    let sock = UdpSocket::bind(SocketAddr::new(any_of(&dst), 0))
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EINVAL))?;
    sock.connect(SocketAddr::new(dst, 9))
        .map_err(|e| e.raw_os_error().unwrap_or(libc::ENETUNREACH))?;
    sock.local_addr()
        .map(|a| a.ip())
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EINVAL))
}

/// Whether `ip` is an address of this host (it can be bound).
pub fn is_host_addr(ip: IpAddr) -> bool {
    UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// The host's ephemeral port range (`ip_local_port_range`), default 32768–60999.
pub fn local_port_range() -> (u16, u16) {
    let parsed = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|v| v.parse::<u16>().ok());
            Some((it.next()??, it.next()??))
        });
    match parsed {
        Some((low, high)) if low > 0 && low <= high => (low, high),
        _ => (32768, 60999),
    }
}

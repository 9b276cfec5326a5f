//! The device's IP multicast groups: one UDP socket per group, bound to
//! `group:port` with `SO_REUSEADDR` and joined on the interface that holds the
//! device's address (`IP_ADD_MEMBERSHIP` / `IPV6_JOIN_GROUP`).
//!
//! Why a socket per group: the device's own socket is bound to its unicast
//! address, and the kernel hands a multicast datagram only to sockets bound to
//! the group address or the wildcard (`net/ipv4/udp.c`, `__udp_is_mcast_sock`).
//! Every socket bound to the group and port gets its own copy
//! (`__udp4_lib_mcast_deliver` clones the datagram for each; reuseport steering
//! plays no part), so every device, in every process of the host, that joined
//! the group receives each datagram once, and its engine hands it to each of its
//! attached QPs. Datagrams the device sends to a group loop back to the host's
//! members (`IP_MULTICAST_LOOP`, on by default). With `IP_MULTICAST_ALL` off a
//! socket takes only the groups it joined itself, on its own interface.
//! Facts and sources: `spec/multicast.md`.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::Arc;

use crate::sys;

/// One joined group: its address (with the device's port) and its socket.
pub(crate) type GroupSocket = (SocketAddr, Arc<UdpSocket>);

/// Opens the socket of `group` for a device on `local`, joined on its interface.
pub(crate) fn open(group: IpAddr, local: SocketAddr) -> io::Result<UdpSocket> {
    let bound = SocketAddr::new(group, local.port());
    let socket = sys::udp_bind_reuseaddr(bound)?;
    let words = |what: &'static str| {
        move |e: io::Error| io::Error::new(e.kind(), format!("{what} {group} on {local}: {e}"))
    };
    match (group, local.ip()) {
        (IpAddr::V4(g), IpAddr::V4(ip)) => {
            socket
                .join_multicast_v4(&g, &ip)
                .map_err(words("join the IPv4 multicast group"))?;
            sys::setsockopt_int(socket.as_fd(), libc::IPPROTO_IP, libc::IP_MULTICAST_ALL, 0)?;
        }
        (IpAddr::V6(g), IpAddr::V6(_)) => {
            let index = crate::host::interface_of(local.ip())
                .and_then(|name| crate::host::interface_index(&name))
                .unwrap_or(0);
            socket
                .join_multicast_v6(&g, index)
                .map_err(words("join the IPv6 multicast group"))?;
        }
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "multicast group {group} is not of the family of the device's address {local}"
                ),
            ))
        }
    }
    Ok(socket)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_sockets_of_one_group_each_get_a_copy() {
        let g: IpAddr = "239.77.0.1".parse().unwrap();
        let local: SocketAddr = "127.0.77.10:47913".parse().unwrap();
        let a = open(g, local).unwrap();
        let b = open(g, "127.0.77.11:47913".parse().unwrap()).unwrap();
        let tx = UdpSocket::bind("127.0.77.12:0").unwrap();
        tx.send_to(b"hello", SocketAddr::new(g, 47913)).unwrap();
        let mut buf = [0u8; 16];
        for s in [&a, &b] {
            s.set_read_timeout(Some(std::time::Duration::from_secs(2)))
                .unwrap();
            let (n, from) = s.recv_from(&mut buf).unwrap();
            assert_eq!(
                (&buf[..n], from.ip()),
                (&b"hello"[..], tx.local_addr().unwrap().ip())
            );
        }
        assert!(open(g, "[::1]:47913".parse().unwrap()).is_err());
    }
}

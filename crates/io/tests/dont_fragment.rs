//! A datagram really leaves with DF = 1 and IPv4 ID = 0 (`spec/roce-wire.md` §8.5).
//!
//! Observed with a raw IPv4/UDP socket, which sees a copy of every UDP datagram
//! the host receives, IP header included. That needs CAP_NET_RAW: without it the
//! test says so and passes (the socket option itself is checked by a unit test).
#![allow(unsafe_code)] // a raw socket, as only libc offers it (test-only)
mod common;

use std::io;
use std::net::{Ipv4Addr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Instant;

use common::{start, wait_until, Fake, DEADLINE};

fn raw_udp_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) takes no pointers.
    let fd = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::IPPROTO_UDP,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by socket(2) and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads one IPv4 packet from the raw socket, waiting at most 100 ms.
fn read_packet(fd: &OwnedFd, buf: &mut [u8]) -> Option<usize> {
    if !common::fd_readable(fd.as_raw_fd(), 100) {
        return None;
    }
    // SAFETY: buf is writable for buf.len() bytes during the call; fd is open.
    let n = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    usize::try_from(n).ok()
}

/// (flags+fragment offset, ID) of the first packet to `dst` carrying `marker`.
fn find_header(fd: &OwnedFd, dst: std::net::SocketAddrV4, marker: &[u8]) -> Option<(u16, u16)> {
    let mut buf = [0u8; 2048];
    let start = Instant::now();
    for _ in 0..10_000 {
        if start.elapsed() > DEADLINE {
            break;
        }
        let Some(n) = read_packet(fd, &mut buf) else {
            continue;
        };
        let p = &buf[..n];
        let ihl = usize::from(p.first()? & 0x0f) * 4;
        if n < ihl + 8 || p[9] != 17 || p[16..20] != dst.ip().octets() {
            continue;
        }
        let dport = u16::from_be_bytes([p[ihl + 2], p[ihl + 3]]);
        if dport == dst.port() && p[ihl + 8..].starts_with(marker) {
            return Some((
                u16::from_be_bytes([p[6], p[7]]),
                u16::from_be_bytes([p[4], p[5]]),
            ));
        }
    }
    None
}

#[test]
fn datagrams_leave_with_df_set_and_id_zero() {
    let raw = match raw_udp_socket() {
        Ok(fd) => fd,
        Err(e) => {
            eprintln!("skipped: no raw socket ({e}); DF is checked by the socket unit test");
            return;
        }
    };
    let sink = UdpSocket::bind("127.0.0.121:0").unwrap();
    let std::net::SocketAddr::V4(dst) = sink.local_addr().unwrap() else {
        unreachable!()
    };
    assert_eq!(*dst.ip(), Ipv4Addr::new(127, 0, 0, 121));
    let d = start(Fake::default(), "127.0.0.122:0");
    let marker = b"softverbs-df-probe".to_vec();
    d.with(|e| {
        for _ in 0..3 {
            e.s().outbox.push_back((dst.into(), marker.clone()));
        }
    });
    d.doorbell();
    assert!(wait_until(|| d.counters().datagrams_sent == 3));
    let (flags, id) = find_header(&raw, dst, &marker).expect("probe seen on the raw socket");
    assert_eq!(flags, 0x4000, "DF set, no fragment offset");
    assert_eq!(id, 0, "IPv4 ID is 0 on an unconnected DF socket");
}

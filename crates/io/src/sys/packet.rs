//! Packet sockets (`AF_PACKET`, packet(7)): the system calls a RAW_PACKET QP
//! needs. Creating one needs `CAP_NET_RAW` in the network namespace's user
//! namespace; without it socket(2) fails with `EPERM`.

use super::cvt;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `ETH_P_ALL` in network byte order, as bind(2) on a packet socket takes it.
fn all_protocols() -> u16 {
    (libc::ETH_P_ALL as u16).to_be()
}

/// A nonblocking raw packet socket that receives nothing yet (protocol 0:
/// no frames are queued to it until [`bind`]).
pub(crate) fn socket() -> io::Result<OwnedFd> {
    let ty = libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
    // SAFETY: plain socket(2); the fd it returns is owned below.
    let fd = cvt(unsafe { libc::socket(libc::AF_PACKET, ty, 0) })?;
    // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Binds to interface `ifindex`, all protocols: frames start arriving
/// (through the socket's filter).
pub(crate) fn bind(fd: BorrowedFd<'_>, ifindex: u32) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = all_protocols();
    sll.sll_ifindex = ifindex as i32;
    let len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    // SAFETY: `sll` is a live sockaddr_ll of `len` bytes; fd is open for the call.
    let ret = unsafe { libc::bind(fd.as_raw_fd(), (&raw const sll).cast(), len) };
    cvt(ret).map(drop)
}

/// Replaces the socket's filter (`SO_ATTACH_FILTER`).
pub(crate) fn attach_filter(fd: BorrowedFd<'_>, program: &[libc::sock_filter]) -> io::Result<()> {
    let prog = libc::sock_fprog {
        len: program.len() as libc::c_ushort,
        filter: program.as_ptr().cast_mut(),
    };
    let len = std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t;
    // SAFETY: `prog` points to `program`, which outlives the call (the kernel
    // copies it); `len` is the size of `prog`; fd is open for the call.
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&raw const prog).cast(),
            len,
        )
    };
    cvt(ret).map(drop)
}

/// The kernel's counts for the socket since they were last read
/// (`PACKET_STATISTICS`, packet(7); reading resets them): frames queued to
/// it (past its filter) and of them dropped for want of room.
pub(crate) fn statistics(fd: BorrowedFd<'_>) -> io::Result<(u32, u32)> {
    let zero = libc::tpacket_stats {
        tp_packets: 0,
        tp_drops: 0,
    };
    let stats = super::getsockopt_value(fd, libc::SOL_PACKET, libc::PACKET_STATISTICS, zero)?;
    Ok((stats.tp_packets, stats.tp_drops))
}

/// Sends one frame on the bound interface.
pub(crate) fn send(fd: BorrowedFd<'_>, frame: &[u8]) -> io::Result<usize> {
    // SAFETY: `frame` is valid for reads of its length during the call.
    let n = unsafe { libc::send(fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Receives one frame into `buf`: (bytes written, the frame's real length,
/// larger when it was cut to `buf`).
pub(crate) fn recv(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, usize)> {
    // SAFETY: `buf` is valid for writes of its length during the call.
    let n = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_TRUNC,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let real = n as usize;
    Ok((real.min(buf.len()), real))
}

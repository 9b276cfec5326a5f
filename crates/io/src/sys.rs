//! The system calls this crate makes through `libc`, each wrapped once.
//!
//! This module owns every `unsafe` block of the crate (DESIGN §3.8). Each wrapper
//! takes borrowed file descriptors (so the fd outlives the call) and turns the C
//! return convention into `io::Result`; nothing here keeps state.
#![allow(unsafe_code)] // the crate's one system-call module (workspace lint: unsafe_code = deny)

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use lanes::stamp::Point;

pub(crate) mod packet;
pub(crate) mod shm;

/// Maps a C `-1` return to the thread's `errno`.
fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `sendmmsg(2)` or `recvmmsg(2)` (`nr`) of `hdrs[..n]`, nonblocking: how
/// many messages went or came. The system call itself, not libc's wrapper:
/// that one is a thread-cancellation point and brackets every call with two
/// calls of its own (5.8 % of a polling thread that finds its socket empty,
/// UDP `ib_write_lat`); nothing here cancels threads. recvmmsg's fifth
/// argument, the timeout, is null (none); sendmmsg takes four.
///
/// # Safety
/// `hdrs[..n]` must be valid for the call (see each caller).
unsafe fn mmsg(
    nr: libc::c_long,
    fd: BorrowedFd<'_>,
    hdrs: *mut libc::mmsghdr,
    n: usize,
) -> io::Result<usize> {
    // SAFETY: the caller's promise about `hdrs`; fd is borrowed, so open.
    let ret = unsafe {
        libc::syscall(
            nr,
            fd.as_raw_fd(),
            hdrs,
            n as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut::<libc::timespec>(),
        )
    };
    // At most `n` on success.
    let got = usize::try_from(ret).map_err(|_| io::Error::last_os_error())?;
    if got > 0 {
        lanes::stamp::at(if nr == libc::SYS_recvmmsg {
            Point::SocketTaken
        } else {
            Point::SocketSent
        });
    }
    Ok(got)
}

/// Blocks every asynchronous signal in the calling thread (pthread_sigmask).
/// The library's own threads call it first: a signal sent to the process
/// (qperf's SIGALRM, a program's SIGINT) must reach one of the program's
/// threads and interrupt the call it is blocked in, as with a kernel
/// provider, which adds no threads. Signals a fault raises (SIGSEGV, SIGBUS,
/// SIGFPE, SIGILL, SIGTRAP) stay unblocked.
pub(crate) fn block_async_signals() {
    // SAFETY: sigset_t is plain data, filled by sigfillset before use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid sigset_t for the calls; pthread_sigmask changes only
    // this thread's mask.
    unsafe {
        libc::sigfillset(&raw mut set);
        for s in [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGFPE,
            libc::SIGILL,
            libc::SIGTRAP,
        ] {
            libc::sigdelset(&raw mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &raw const set, std::ptr::null_mut());
    }
}

/// eventfd(2) in counter (not semaphore) mode, close-on-exec and nonblocking.
pub(crate) fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers; a non-negative return is a new fd we own.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
    // SAFETY: `fd` was just returned by eventfd and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds `n` to an eventfd counter (an 8-byte write).
pub(crate) fn eventfd_write(fd: BorrowedFd<'_>, n: u64) -> io::Result<()> {
    let bytes = n.to_ne_bytes();
    // SAFETY: the buffer is 8 valid bytes for the duration of the call; fd is borrowed, so open.
    let ret = unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reads (and so resets to 0) an eventfd counter (an 8-byte read).
pub(crate) fn eventfd_read(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut bytes = [0u8; 8];
    // SAFETY: the buffer is 8 writable bytes for the duration of the call; fd is open.
    let ret = unsafe { libc::read(fd.as_raw_fd(), bytes.as_mut_ptr().cast(), bytes.len()) };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(u64::from_ne_bytes(bytes))
}

/// ppoll(2) on `fds`; `None` waits forever. EINTR is reported as 0 ready fds.
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout: Option<Duration>) -> io::Result<usize> {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(d.subsec_nanos()),
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), std::ptr::from_ref::<libc::timespec>);
    // SAFETY: `fds` is a valid mutable slice of pollfd for the call; ts_ptr is null or points
    // to a timespec living on this stack frame; a null sigmask means "keep the current one".
    let ret = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            ts_ptr,
            std::ptr::null(),
        )
    };
    match cvt(ret) {
        Ok(n) => Ok(n as usize),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
        Err(e) => Err(e),
    }
}

/// A `pollfd` entry for `fd` with `events`.
pub(crate) fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

/// recv(2) on a unix datagram socket with `SO_PASSCRED` set: the datagram
/// into `buf`, its length, and the sender's uid (`SCM_CREDENTIALS`, which the
/// kernel attaches and the sender cannot forge; `None` if it is missing).
pub(crate) fn recv_with_uid(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
) -> io::Result<(usize, Option<u32>)> {
    // Room for one SCM_CREDENTIALS message, aligned as cmsghdr needs.
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is a valid empty one; the fields set below
    // point at live locals for the duration of the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: `msg` describes `buf` and `control`, both live and writable.
    let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &raw mut msg, libc::MSG_DONTWAIT) };
    let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
    let mut uid = None;
    // SAFETY: the CMSG_* walk stays within `msg_controllen` bytes of
    // `control`, which the kernel filled; an SCM_CREDENTIALS payload is a
    // `ucred`, read unaligned.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&raw const msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_CREDENTIALS {
                let cred = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::ucred>());
                uid = Some(cred.uid);
            }
            c = libc::CMSG_NXTHDR(&raw const msg, c);
        }
    }
    Ok((n, uid))
}

/// The credentials (pid, uid) of the process listening on the abstract unix
/// stream name `name` (without its leading NUL): a nonblocking connect, then
/// `SO_PEERCRED`, which for a connection to a listener holds the listener's
/// credentials as of its `listen` (kernel `af_unix.c` `unix_listen` →
/// `init_peercred`, `unix_stream_connect` → `copy_peercred`). None when nobody
/// listens there or its backlog is full.
pub(crate) fn abstract_listener_cred(name: &[u8]) -> Option<(i32, u32)> {
    let conn = shm::connect_abstract(name).ok()?;
    shm::peer_cred(conn.as_fd()).ok()
}

/// This process's effective user ID.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// setsockopt(2) with an `int` value.
pub(crate) fn setsockopt_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` is a live c_int and `len` is its size; fd is open for the call.
    let ret =
        unsafe { libc::setsockopt(fd.as_raw_fd(), level, name, (&raw const value).cast(), len) };
    cvt(ret).map(drop)
}

/// getsockopt(2) of an `int` option.
pub(crate) fn getsockopt_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<libc::c_int> {
    getsockopt_value(fd, level, name, 0)
}

/// getsockopt(2) of an option whose value is the C type `T`, which the
/// kernel writes over `value` (a plain C struct or integer: every bit
/// pattern of it is a valid value; `c_int`, `ucred`, `tpacket_stats`).
pub(crate) fn getsockopt_value<T: Copy>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    mut value: T,
) -> io::Result<T> {
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` and `len` are live locals the kernel writes at most
    // `len` bytes into, and any bytes it writes make a valid `T` (the
    // contract above); fd is open for the call.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&raw mut value).cast(),
            &raw mut len,
        )
    };
    cvt(ret).map(|_| value)
}

/// Most datagrams one [`sendmmsg`] or [`recvmmsg`] call moves.
pub(crate) const MMSG_MAX: usize = 64;

/// A socket address as the kernel reads and writes it (IPv4 or IPv6).
#[repr(C)]
#[derive(Clone, Copy)]
union RawAddr {
    v4: libc::sockaddr_in,
    v6: libc::sockaddr_in6,
}

impl RawAddr {
    fn zeroed() -> Self {
        RawAddr {
            v6: libc::sockaddr_in6 {
                sin6_family: 0,
                sin6_port: 0,
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr { s6_addr: [0; 16] },
                sin6_scope_id: 0,
            },
        }
    }

    fn new(addr: &SocketAddr) -> (Self, libc::socklen_t) {
        match addr {
            SocketAddr::V4(a) => {
                let v4 = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(a.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                let len = std::mem::size_of::<libc::sockaddr_in>();
                (RawAddr { v4 }, len as libc::socklen_t)
            }
            SocketAddr::V6(a) => {
                let v6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo().to_be(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: a.ip().octets(),
                    },
                    sin6_scope_id: a.scope_id(),
                };
                let len = std::mem::size_of::<libc::sockaddr_in6>();
                (RawAddr { v6 }, len as libc::socklen_t)
            }
        }
    }

    /// The address the kernel wrote (`len` bytes of it); `None` for another family.
    fn get(&self, len: libc::socklen_t) -> Option<SocketAddr> {
        let len = len as usize;
        // SAFETY: both members are plain integers (every bit pattern is valid) and the
        // union is always fully initialized (zeroed() or new()); the family field is at
        // the same offset in both.
        let family = libc::c_int::from(unsafe { self.v4.sin_family });
        if family == libc::AF_INET && len >= std::mem::size_of::<libc::sockaddr_in>() {
            // SAFETY: as above.
            let a = unsafe { self.v4 };
            let ip = std::net::Ipv4Addr::from(a.sin_addr.s_addr.to_ne_bytes());
            return Some(SocketAddr::new(ip.into(), u16::from_be(a.sin_port)));
        }
        if family == libc::AF_INET6 && len >= std::mem::size_of::<libc::sockaddr_in6>() {
            // SAFETY: as above.
            let a = unsafe { self.v6 };
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            let port = u16::from_be(a.sin6_port);
            let flow = u32::from_be(a.sin6_flowinfo);
            return Some(SocketAddr::V6(std::net::SocketAddrV6::new(
                ip,
                port,
                flow,
                a.sin6_scope_id,
            )));
        }
        None
    }
}

/// The arrays one sendmmsg(2) or recvmmsg(2) call hands the kernel: headers,
/// iovecs, addresses and control buffers. Each thread keeps one set and
/// reuses it (after the first calls, no allocation per system call).
#[derive(Default)]
struct Arrays {
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    names: Vec<RawAddr>,
    control: Vec<[u64; CMSG_WORDS]>,
}

impl Arrays {
    /// `n` all-zero headers, addresses and control buffers and `iovs`
    /// all-zero iovecs (null pointers, zero lengths), sized to the call so a
    /// short batch does not clear a long array.
    fn reset(&mut self, n: usize, iovs: usize) {
        // SAFETY: mmsghdr and iovec are C structs of integers and raw pointers, for which
        // all-zero bytes (null pointers, zero lengths and flags) is a valid value.
        let (hdr, iov) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        self.hdrs.clear();
        self.hdrs.resize(n, hdr);
        self.iovs.clear();
        self.iovs.resize(iovs, iov);
        self.names.clear();
        self.names.resize(n, RawAddr::zeroed());
        self.control.clear();
        self.control.resize(n, [0; CMSG_WORDS]);
    }
}

thread_local! {
    static ARRAYS: std::cell::RefCell<Arrays> = std::cell::RefCell::new(Arrays::default());
}

/// Runs `f` with this thread's [`Arrays`], reset for `n` messages and `iovs`
/// iovecs; with fresh ones if they are in use (no call nests, but never
/// panic) or already gone (a call from a thread-local destructor).
fn with_arrays<R>(n: usize, iovs: usize, f: impl FnOnce(&mut Arrays) -> R) -> R {
    let mut f = Some(f);
    let mut run = |a: &mut Arrays| {
        a.reset(n, iovs);
        f.take().map(|f| f(a))
    };
    let kept = ARRAYS
        .try_with(|cell| cell.try_borrow_mut().ok().and_then(|mut a| run(&mut a)))
        .ok()
        .flatten();
    match kept {
        Some(r) => r,
        None => run(&mut Arrays::default()).expect("f runs once: the kept arrays did not run it"),
    }
}

/// sendmmsg(2): sends the first [`MMSG_MAX`] of `msgs` (each one datagram to its
/// address) in one call. `Ok(n)`: the first `n` were sent (the rest were not; a
/// partial send reports no error for the one that stopped it). `Err`: the first
/// was not sent. Nonblocking (`MSG_DONTWAIT`).
pub(crate) fn sendmmsg(fd: BorrowedFd<'_>, msgs: &[(SocketAddr, &[u8])]) -> io::Result<usize> {
    let n = msgs.len().min(MMSG_MAX);
    if n == 0 {
        return Ok(0);
    }
    with_arrays(n, n, |a| send_plain(fd, &msgs[..n], a))
}

fn send_plain(
    fd: BorrowedFd<'_>,
    msgs: &[(SocketAddr, &[u8])],
    a: &mut Arrays,
) -> io::Result<usize> {
    let n = msgs.len();
    let Arrays {
        hdrs, iovs, names, ..
    } = a;
    for (i, (to, bytes)) in msgs.iter().enumerate() {
        let (name, len) = RawAddr::new(to);
        names[i] = name;
        // The kernel only reads through iov_base on send.
        iovs[i].iov_base = bytes.as_ptr() as *mut libc::c_void;
        iovs[i].iov_len = bytes.len();
        let h = &mut hdrs[i].msg_hdr;
        h.msg_name = (&raw mut names[i]).cast();
        h.msg_namelen = len;
        h.msg_iov = &raw mut iovs[i];
        h.msg_iovlen = 1;
    }
    // SAFETY: hdrs[..n] point into names and iovs (live vectors, not resized or moved
    // during the call) and each iovec into a datagram borrowed from `msgs` for the call; the
    // kernel writes only msg_len; fd is borrowed, so open.
    unsafe { mmsg(libc::SYS_sendmmsg, fd, hdrs.as_mut_ptr(), n) }
}

/// `UDP_SEGMENT` (socket option and cmsg type at level `SOL_UDP`): the segment size of a
/// UDP GSO send (Linux 4.18; include/uapi/linux/udp.h; absent from the libc crate for glibc).
pub(crate) const UDP_SEGMENT: libc::c_int = 103;
/// `UDP_GRO` (socket option and cmsg type at level `SOL_UDP`): coalesced receive, the
/// segment size reported in a cmsg (Linux 5.0; include/uapi/linux/udp.h).
pub(crate) const UDP_GRO: libc::c_int = 104;
/// `SOL_UDP` is the protocol number of UDP.
pub(crate) const SOL_UDP: libc::c_int = libc::IPPROTO_UDP;

/// Room for one cmsg carrying an `int` (the largest this crate sends or reads), in u64s
/// so the buffer is aligned as `cmsghdr` needs.
const CMSG_WORDS: usize = 4;

/// One message of [`sendmmsg_gso`]: `segments` to `to`, sent as one UDP GSO
/// datagram cut every `segments[0].len()` bytes when there are several (all but
/// the last of that size, the last no longer), else as a plain datagram.
pub(crate) struct GsoMessage<'a> {
    pub(crate) to: SocketAddr,
    pub(crate) segments: &'a [&'a [u8]],
}

/// sendmmsg(2) of UDP GSO messages: the first [`MMSG_MAX`] of `msgs`, each one
/// mmsghdr whose iovecs are its segments, with a `UDP_SEGMENT` cmsg when it has
/// more than one. `Ok(n)`: the first `n` messages (all their segments) were sent;
/// `Err`: the first was not (EIO/EINVAL from a kernel that refuses GSO for this
/// socket or route). Nonblocking.
pub(crate) fn sendmmsg_gso(fd: BorrowedFd<'_>, msgs: &[GsoMessage<'_>]) -> io::Result<usize> {
    let n = msgs.len().min(MMSG_MAX);
    if n == 0 {
        return Ok(0);
    }
    let total: usize = msgs[..n].iter().map(|m| m.segments.len()).sum();
    with_arrays(n, total, |a| send_gso(fd, &msgs[..n], a))
}

fn send_gso(fd: BorrowedFd<'_>, msgs: &[GsoMessage<'_>], a: &mut Arrays) -> io::Result<usize> {
    let n = msgs.len();
    let Arrays {
        hdrs,
        iovs,
        names,
        control,
    } = a;
    let mut at = 0;
    for (i, m) in msgs.iter().enumerate() {
        let (name, len) = RawAddr::new(&m.to);
        names[i] = name;
        for (k, seg) in m.segments.iter().enumerate() {
            // The kernel only reads through iov_base on send.
            iovs[at + k].iov_base = seg.as_ptr() as *mut libc::c_void;
            iovs[at + k].iov_len = seg.len();
        }
        let h = &mut hdrs[i].msg_hdr;
        h.msg_name = (&raw mut names[i]).cast();
        h.msg_namelen = len;
        h.msg_iov = &raw mut iovs[at];
        h.msg_iovlen = m.segments.len() as _;
        at += m.segments.len();
        if m.segments.len() > 1 {
            let size = u16::try_from(m.segments[0].len()).unwrap_or(u16::MAX);
            h.msg_control = control[i].as_mut_ptr().cast();
            // SAFETY: CMSG_SPACE only computes a size.
            h.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as _;
            // SAFETY: msg_control points at CMSG_WORDS * 8 >= CMSG_SPACE(2) writable,
            // aligned bytes of `control[i]`, so the first header and its 2-byte payload
            // lie within it; the payload is written unaligned.
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&raw const *h);
                (*c).cmsg_level = SOL_UDP;
                (*c).cmsg_type = UDP_SEGMENT;
                (*c).cmsg_len = libc::CMSG_LEN(2) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), size);
            }
        }
    }
    // SAFETY: hdrs[..n] point into names, iovs and control (live vectors, not resized
    // or moved during the call) and each iovec into a segment borrowed from `msgs`
    // for the call; the kernel writes only msg_len; fd is borrowed, so open.
    unsafe { mmsg(libc::SYS_sendmmsg, fd, hdrs.as_mut_ptr(), n) }
}

/// The segment size of a `UDP_GRO` cmsg among the `len` control bytes of `msg`
/// (`None`: the datagram was not coalesced).
fn gro_segment(msg: &libc::msghdr) -> Option<usize> {
    if msg.msg_control.is_null() || msg.msg_controllen == 0 {
        return None;
    }
    let mut found = None;
    // SAFETY: the CMSG_* walk stays within `msg_controllen` bytes of `msg_control`,
    // which the caller guarantees are readable; a UDP_GRO payload is an int, read
    // unaligned.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == SOL_UDP
                && (*c).cmsg_type == UDP_GRO
                && (*c).cmsg_len as usize >= libc::CMSG_LEN(4) as usize
            {
                let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                found = usize::try_from(v).ok().filter(|&v| v > 0);
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    found
}

/// One datagram read by [`recvmmsg`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Received {
    /// Bytes written at the start of its slot.
    pub(crate) len: usize,
    /// The sender (`None` if the kernel reported an address we do not know).
    pub(crate) from: Option<SocketAddr>,
    /// The datagram was longer than its slot and was cut.
    pub(crate) truncated: bool,
    /// UDP GRO: the kernel coalesced datagrams of this size (the last may be
    /// shorter) into this one ([`split`] cuts it back); `None`: one datagram.
    pub(crate) segment: Option<usize>,
}

/// The datagrams of a buffer of `len` bytes read with `segment` (see
/// [`Received::segment`]): (offset, length) pairs in order, covering `len`.
pub(crate) fn split(len: usize, segment: Option<usize>) -> impl Iterator<Item = (usize, usize)> {
    let step = segment.filter(|&s| s > 0 && s < len).unwrap_or(len.max(1));
    (0..len)
        .step_by(step)
        .map(move |off| (off, step.min(len - off)))
}

/// recvmmsg(2) without waiting: reads up to `out.len()` (at most [`MMSG_MAX`])
/// datagrams into consecutive `slot`-byte slots of `mem`, describing datagram `i`
/// in `out[i]`. `Ok(n)`: `n >= 1` datagrams read; "nothing to read" is `WouldBlock`.
pub(crate) fn recvmmsg(
    fd: BorrowedFd<'_>,
    mem: &mut [u8],
    slot: usize,
    out: &mut [Received],
) -> io::Result<usize> {
    let n = out
        .len()
        .min(MMSG_MAX)
        .min(mem.len().checked_div(slot).unwrap_or(0));
    if n == 0 {
        return Ok(0);
    }
    with_arrays(n, n, |a| receive(fd, mem, slot, &mut out[..n], a))
}

fn receive(
    fd: BorrowedFd<'_>,
    mem: &mut [u8],
    slot: usize,
    out: &mut [Received],
    a: &mut Arrays,
) -> io::Result<usize> {
    let n = out.len();
    let Arrays {
        hdrs,
        iovs,
        names,
        control,
    } = a;
    for (i, chunk) in mem.chunks_exact_mut(slot).take(n).enumerate() {
        iovs[i].iov_base = chunk.as_mut_ptr().cast();
        iovs[i].iov_len = chunk.len();
        let h = &mut hdrs[i].msg_hdr;
        h.msg_name = (&raw mut names[i]).cast();
        h.msg_namelen = std::mem::size_of::<RawAddr>() as libc::socklen_t;
        h.msg_iov = &raw mut iovs[i];
        h.msg_iovlen = 1;
        h.msg_control = control[i].as_mut_ptr().cast();
        h.msg_controllen = std::mem::size_of_val(&control[i]) as _;
    }
    // SAFETY: hdrs[..n] point into names, iovs and control (live vectors, not resized or
    // moved during the call; the kernel writes at most msg_controllen control bytes)
    // and each iovec into a distinct `slot`-byte chunk of `mem`, exclusively
    // borrowed for the call; the kernel writes at most iov_len bytes per chunk and at
    // most msg_namelen bytes per name; a null timeout means none; fd is open.
    let got = unsafe { mmsg(libc::SYS_recvmmsg, fd, hdrs.as_mut_ptr(), n)? };
    for (i, r) in out.iter_mut().take(got).enumerate() {
        let h = &hdrs[i];
        *r = Received {
            len: (h.msg_len as usize).min(slot),
            from: names[i].get(h.msg_hdr.msg_namelen),
            truncated: h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
            segment: gro_segment(&h.msg_hdr),
        };
    }
    Ok(got)
}

/// A nonblocking, close-on-exec UDP socket with `SO_REUSEPORT` set, bound to
/// `addr`: it joins the reuseport group of the sockets on that address (all
/// must belong to one user id).
pub(crate) fn udp_bind_reuseport(addr: SocketAddr) -> io::Result<std::net::UdpSocket> {
    let family = match addr {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    let kind = libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK;
    // SAFETY: socket takes only integers; a non-negative return is a new fd we own.
    let fd = cvt(unsafe { libc::socket(family, kind, 0) })?;
    // SAFETY: `fd` was just returned by socket and is owned by nobody else.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    setsockopt_int(owned.as_fd(), libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)?;
    let (raw, len) = RawAddr::new(&addr);
    // SAFETY: `raw` is a sockaddr of `len` valid bytes living for the call; fd is open.
    let ret = unsafe { libc::bind(owned.as_raw_fd(), (&raw const raw).cast(), len) };
    cvt(ret)?;
    Ok(std::net::UdpSocket::from(owned))
}

/// A nonblocking UDP socket bound to `addr` with `SO_REUSEADDR`, so every
/// process's socket of a multicast group binds `group:port` (crate::mcast).
pub(crate) fn udp_bind_reuseaddr(addr: SocketAddr) -> io::Result<std::net::UdpSocket> {
    let family = match addr {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    let kind = libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK;
    // SAFETY: socket takes only integers; a non-negative return is a new fd we own.
    let fd = cvt(unsafe { libc::socket(family, kind, 0) })?;
    // SAFETY: `fd` was just returned by socket and is owned by nobody else.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    setsockopt_int(owned.as_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    let (raw, len) = RawAddr::new(&addr);
    // SAFETY: `raw` is a sockaddr of `len` valid bytes living for the call; fd is open.
    let ret = unsafe { libc::bind(owned.as_raw_fd(), (&raw const raw).cast(), len) };
    cvt(ret)?;
    Ok(std::net::UdpSocket::from(owned))
}

/// Attaches a classic-BPF program choosing the socket of the reuseport group
/// (`SO_ATTACH_REUSEPORT_CBPF`; unprivileged). It replaces the group's program.
pub(crate) fn attach_reuseport_cbpf(
    fd: BorrowedFd<'_>,
    program: &[libc::sock_filter],
) -> io::Result<()> {
    let prog = libc::sock_fprog {
        len: program.len() as libc::c_ushort,
        filter: program.as_ptr().cast_mut(),
    };
    let len = std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t;
    // SAFETY: `prog` points to `program`, which outlives the call (the kernel copies
    // it); `len` is the size of `prog`; fd is open for the call.
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            (&raw const prog).cast(),
            len,
        )
    };
    cvt(ret).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    fn pair(addr: &str) -> Option<(UdpSocket, UdpSocket)> {
        let a = UdpSocket::bind(addr).ok()?;
        let b = UdpSocket::bind(addr).ok()?;
        b.set_nonblocking(true).ok()?;
        Some((a, b))
    }

    /// Reads everything queued on `b` with recvmmsg, bounded by a count of calls.
    fn drain(b: &UdpSocket, want: usize) -> Vec<(Vec<u8>, SocketAddr)> {
        let slot = 2048;
        let mut mem = vec![0u8; 8 * slot];
        let mut meta = [Received::default(); 8];
        let mut got = Vec::new();
        for _ in 0..10_000 {
            if got.len() >= want {
                break;
            }
            let mut fds = [pollfd(b.as_raw_fd(), libc::POLLIN)];
            poll(&mut fds, Some(Duration::from_secs(5))).unwrap();
            match recvmmsg(b.as_fd(), &mut mem, slot, &mut meta) {
                Ok(n) => {
                    assert!((1..=8).contains(&n));
                    for (i, r) in meta[..n].iter().enumerate() {
                        assert!(!r.truncated);
                        got.push((mem[i * slot..][..r.len].to_vec(), r.from.unwrap()));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("recvmmsg: {e}"),
            }
        }
        got
    }

    fn round_trip(addr: &str) {
        let Some((a, b)) = pair(addr) else {
            eprintln!("skipped: cannot bind {addr}");
            return;
        };
        let to = b.local_addr().unwrap();
        let datagrams: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; 100 + usize::from(i)]).collect();
        let msgs: Vec<(SocketAddr, &[u8])> = datagrams.iter().map(|d| (to, &d[..])).collect();
        let mut sent = 0;
        for _ in 0..1000 {
            if sent == msgs.len() {
                break;
            }
            sent += sendmmsg(a.as_fd(), &msgs[sent..]).unwrap();
        }
        assert_eq!(sent, msgs.len());
        let got = drain(&b, datagrams.len());
        let from = a.local_addr().unwrap();
        assert_eq!(got.len(), datagrams.len());
        for (g, d) in got.iter().zip(&datagrams) {
            assert_eq!(&g.0, d);
            assert_eq!(g.1, from);
        }
    }

    #[test]
    fn sendmmsg_and_recvmmsg_move_datagrams_intact_ipv4() {
        round_trip("127.0.0.1:0");
    }

    #[test]
    fn sendmmsg_and_recvmmsg_move_datagrams_intact_ipv6() {
        round_trip("[::1]:0");
    }

    #[test]
    fn recvmmsg_reports_a_datagram_longer_than_its_slot() {
        let Some((a, b)) = pair("127.0.0.1:0") else {
            return;
        };
        a.send_to(&[7u8; 300], b.local_addr().unwrap()).unwrap();
        let mut mem = vec![0u8; 2 * 100];
        let mut meta = [Received::default(); 2];
        let mut fds = [pollfd(b.as_raw_fd(), libc::POLLIN)];
        poll(&mut fds, Some(Duration::from_secs(5))).unwrap();
        let n = recvmmsg(b.as_fd(), &mut mem, 100, &mut meta).unwrap();
        assert_eq!(n, 1);
        assert!(meta[0].truncated);
        assert_eq!(meta[0].len, 100);
    }

    #[test]
    fn recvmmsg_with_nothing_queued_would_block() {
        let Some((_a, b)) = pair("127.0.0.1:0") else {
            return;
        };
        let mut mem = vec![0u8; 100];
        let mut meta = [Received::default(); 1];
        let e = recvmmsg(b.as_fd(), &mut mem, 100, &mut meta).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn sendmmsg_error_on_the_first_datagram_is_reported() {
        let Some((a, b)) = pair("127.0.0.1:0") else {
            return;
        };
        let big = vec![0u8; 70_000]; // beyond any UDP datagram
        let to = b.local_addr().unwrap();
        let e = sendmmsg(a.as_fd(), &[(to, &big[..]), (to, &[1u8][..])]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EMSGSIZE));
    }

    #[test]
    fn raw_addresses_round_trip() {
        for s in ["127.1.2.3:4791", "[::1]:4791", "[fe80::1%3]:9"] {
            let addr: SocketAddr = s.parse().unwrap();
            let (raw, len) = RawAddr::new(&addr);
            assert_eq!(raw.get(len), Some(addr));
            assert_eq!(raw.get(len - 1), None, "short length");
        }
        assert_eq!(RawAddr::zeroed().get(28), None, "AF_UNSPEC");
    }

    /// A msghdr whose control bytes are `control` (one or two cmsgs written with
    /// the CMSG macros): what [`gro_segment`] reads from it.
    fn parse(cmsgs: &[(libc::c_int, libc::c_int, &[u8])]) -> Option<usize> {
        let mut control = [0u64; 16];
        // SAFETY: an all-zero msghdr is a valid empty one.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        let mut used = 0;
        // SAFETY: the walk stays within the 128 control bytes (the cmsgs are small).
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&raw const msg);
            for (level, kind, data) in cmsgs {
                (*c).cmsg_level = *level;
                (*c).cmsg_type = *kind;
                (*c).cmsg_len = libc::CMSG_LEN(data.len() as u32) as _;
                std::ptr::copy_nonoverlapping(data.as_ptr(), libc::CMSG_DATA(c), data.len());
                used += libc::CMSG_SPACE(data.len() as u32) as usize;
                c = libc::CMSG_NXTHDR(&raw const msg, c);
            }
        }
        msg.msg_controllen = used as _;
        gro_segment(&msg)
    }

    #[test]
    fn gro_cmsg_gives_the_segment_size() {
        let size = 1400i32.to_ne_bytes();
        assert_eq!(parse(&[(SOL_UDP, UDP_GRO, &size)]), Some(1400));
        // After another cmsg, too.
        let other = 5i32.to_ne_bytes();
        let two = [
            (libc::SOL_IP, libc::IP_TOS, &other[..]),
            (SOL_UDP, UDP_GRO, &size),
        ];
        assert_eq!(parse(&two), Some(1400));
        // Not coalesced: no cmsg, another one, a zero or short payload.
        assert_eq!(parse(&[]), None);
        assert_eq!(parse(&[(libc::SOL_IP, libc::IP_TOS, &other)]), None);
        assert_eq!(parse(&[(SOL_UDP, UDP_GRO, &0i32.to_ne_bytes())]), None);
        assert_eq!(parse(&[(SOL_UDP, UDP_GRO, &[1, 2])]), None);
    }

    #[test]
    fn split_cuts_at_the_segment_size_with_a_short_last() {
        let v = |len, seg| split(len, seg).collect::<Vec<_>>();
        assert_eq!(v(1000, None), vec![(0, 1000)]);
        assert_eq!(v(1000, Some(400)), vec![(0, 400), (400, 400), (800, 200)]);
        assert_eq!(v(800, Some(400)), vec![(0, 400), (400, 400)]);
        // A segment size at or beyond the length: one datagram.
        assert_eq!(v(300, Some(400)), vec![(0, 300)]);
        assert_eq!(v(400, Some(400)), vec![(0, 400)]);
        assert_eq!(v(10, Some(0)), vec![(0, 10)]);
        assert!(v(0, None).is_empty());
    }
}

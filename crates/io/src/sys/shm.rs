//! Shared memory for the same-host path (`crate::shm`): a sealed memfd, its
//! mapping, and the unix-socket calls that pass its descriptor to the peer;
//! and the kernel's cross-memory copy, measured as a baseline only
//! ([`cross_memory_read_self`], spec/same-host.md §4).
//!
//! Why unsafe is needed here and nowhere else: two processes can share pages
//! only through `mmap(MAP_SHARED)` of one file, and the bytes of such a
//! mapping are written by the other process, so the mapping is reached through
//! raw pointers. [`Mapping`] keeps that to four operations, each
//! bounds-checked against the mapping's length: an atomic word at an aligned
//! offset (the ring indices and the wake-up word, `AtomicU64`/`AtomicU32`,
//! which are `Sync` and may be shared with anyone), byte copies in and out,
//! and a shared slice of a received record ([`Mapping::bytes`], so the engine
//! places a datagram straight from the ring). Each touches only the part of
//! the ring the ring protocol hands to this side (`crate::shm::ring`): a
//! record the consumer holds is not written by a producer that keeps the
//! protocol until the consumer gives its room back. A peer that breaks the
//! protocol (only a process of our own user and network namespace can be a
//! peer) can change the bytes we copy or read (which are parsed as untrusted
//! network input, like any datagram, every index checked against the slice's
//! length, which is ours), never our memory outside the mapping.
//!
//! The file is sealed against shrinking and growing before it is passed on
//! (memfd_create(2), fcntl(2) `F_ADD_SEALS`), and the receiver checks the
//! seals before mapping it: a mapping whose file shrank would raise SIGBUS on
//! access, so a peer cannot make us fault by truncating it.

use super::cvt;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64};

/// The seals a shared ring's file must carry.
pub(crate) const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// A new anonymous file of `len` bytes (memfd_create(2), close-on-exec),
/// sealed against resizing ([`SEALS`]).
pub(crate) fn sealed_memfd(name: &str, len: u64) -> io::Result<OwnedFd> {
    let cname = std::ffi::CString::new(name).map_err(|_| io::ErrorKind::InvalidInput)?;
    let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // SAFETY: `cname` is a live NUL-terminated string; the result is checked.
    let fd = cvt(unsafe { libc::memfd_create(cname.as_ptr(), flags) })?;
    // SAFETY: `fd` was just returned by memfd_create and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let len = libc::off_t::try_from(len).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: ftruncate on an fd we own; no pointers.
    cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), len) })?;
    // SAFETY: fcntl F_ADD_SEALS takes an int argument; no pointers.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SEALS) })?;
    Ok(fd)
}

/// The seals of `fd` (`F_GET_SEALS`) and its length in bytes.
pub(crate) fn seals_and_len(fd: BorrowedFd<'_>) -> io::Result<(libc::c_int, u64)> {
    // SAFETY: fcntl F_GET_SEALS takes no argument.
    let seals = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) })?;
    // SAFETY: all-zero is a valid `stat`; fstat writes into the live local.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a live, writable stat.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &raw mut st) })?;
    Ok((seals, u64::try_from(st.st_size).unwrap_or(0)))
}

/// A shared, read-write mapping of a whole file. See the module doc.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; every access goes
// through the bounds-checked methods below (atomics, or copies the ring
// protocol gives to one side), so it may move to and be used from any thread.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` shared and read-write. The caller checked
    /// that the file is at least `len` long and sealed against shrinking.
    pub(crate) fn new(fd: BorrowedFd<'_>, len: usize) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: a fresh mapping chosen by the kernel (no fixed address), of
        // an fd open for the call; the result is checked against MAP_FAILED.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: ptr.cast(),
            len,
        })
    }

    /// Bytes mapped.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn check(&self, off: usize, len: usize, align: usize) -> bool {
        off.checked_add(len).is_some_and(|end| end <= self.len) && off.is_multiple_of(align)
    }

    /// The 64-bit atomic word at `off` (8-aligned, inside the mapping).
    /// Panics on a bad offset: offsets are this crate's constants, never input.
    pub(crate) fn atomic_u64(&self, off: usize) -> &AtomicU64 {
        assert!(self.check(off, 8, 8), "atomic_u64 at {off} of {}", self.len);
        // SAFETY: in bounds and 8-aligned (the mapping is page-aligned); an
        // AtomicU64 may be shared with other threads and processes, and the
        // reference lives no longer than `self`, which keeps the mapping.
        unsafe { &*self.ptr.add(off).cast::<AtomicU64>() }
    }

    /// The 32-bit atomic word at `off` (4-aligned, inside the mapping).
    pub(crate) fn atomic_u32(&self, off: usize) -> &AtomicU32 {
        assert!(self.check(off, 4, 4), "atomic_u32 at {off} of {}", self.len);
        // SAFETY: as for `atomic_u64`, with 4-byte alignment.
        unsafe { &*self.ptr.add(off).cast::<AtomicU32>() }
    }

    /// Asks the CPU to fetch the cache lines of `off..off + len` for
    /// writing (x86-64's `prefetchw`, where the CPU has it; nothing
    /// elsewhere): a producer's next record then finds its lines already
    /// its own instead of waiting for the consumer's core to give them up.
    /// A hint only: what the memory holds does not change.
    pub(crate) fn prefetch_write(&self, off: usize, len: usize) {
        #[cfg(target_arch = "x86_64")]
        if self.check(off, len, 1) && has_prefetchw() {
            for line in (off..off + len).step_by(64) {
                // SAFETY: inside the mapping (checked above).
                prefetchw(unsafe { self.ptr.add(line) });
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (off, len);
    }

    /// Copies `bytes` to `off`; `false` (nothing written) if it does not fit.
    pub(crate) fn write(&self, off: usize, bytes: &[u8]) -> bool {
        if !self.check(off, bytes.len(), 1) {
            return false;
        }
        // SAFETY: the destination range is inside the mapping (checked) and
        // cannot overlap `bytes`, which is our own memory; the ring protocol
        // gives this range to the writer alone until it publishes it.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.add(off), bytes.len()) };
        true
    }

    /// The `len` bytes at `off`, shared, or `None` out of bounds. Only for a
    /// range the ring protocol gives this side to read (a record taken and
    /// not yet released): see the module doc.
    pub(crate) fn bytes(&self, off: usize, len: usize) -> Option<&[u8]> {
        if !self.check(off, len, 1) {
            return None;
        }
        // SAFETY: the range is inside the mapping (checked), which lives as
        // long as the returned borrow of `self`; a u8 has no invalid values
        // and no alignment. The ring protocol keeps the peer from writing the
        // range while it is borrowed (it is a record the consumer holds);
        // a peer breaking it only changes the bytes, whose length is ours.
        Some(unsafe { std::slice::from_raw_parts(self.ptr.add(off), len) })
    }

    /// The `len` bytes at `off`, to write, or `None` out of bounds. Only for
    /// a range the ring protocol gives this side to write (room the
    /// producer reserved and has not published): see the module doc.
    pub(crate) fn bytes_mut(&mut self, off: usize, len: usize) -> Option<&mut [u8]> {
        if !self.check(off, len, 1) {
            return None;
        }
        // SAFETY: the range is inside the mapping (checked), which lives as
        // long as the returned borrow of `self` (mutable: no other slice of
        // this mapping is lent by this side meanwhile); a u8 has no invalid
        // values and no alignment. The ring protocol keeps the peer from
        // reading or writing the range until the producer publishes it; a
        // peer breaking it only changes bytes it will be sent anyway.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.add(off), len) })
    }

    /// Copies `out.len()` bytes from `off`; `false` (nothing read) if out of bounds.
    pub(crate) fn read(&self, off: usize, out: &mut [u8]) -> bool {
        if !self.check(off, out.len(), 1) {
            return false;
        }
        // SAFETY: the source range is inside the mapping (checked) and cannot
        // overlap `out`; the ring protocol gives this range to the reader
        // until it releases it (a peer that breaks it only changes the bytes).
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(off), out.as_mut_ptr(), out.len()) };
        true
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned; no reference
        // into the mapping outlives `self` (they borrow it).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Sends `bytes` on the connected unix socket `sock` with `fd` attached
/// (`SCM_RIGHTS`). Nonblocking.
pub(crate) fn send_with_fd(
    sock: BorrowedFd<'_>,
    bytes: &[u8],
    fd: BorrowedFd<'_>,
) -> io::Result<()> {
    let raw = fd.as_raw_fd();
    // Room for one cmsghdr with one int, aligned as cmsghdr needs.
    let mut control = [0u64; 4];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr().cast_mut().cast(),
        iov_len: bytes.len(),
    };
    // SAFETY: an all-zero msghdr is a valid empty one; the fields set below
    // point at live locals for the duration of the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is a pure size computation.
    msg.msg_controllen =
        unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) } as usize;
    // SAFETY: `control` holds at least CMSG_SPACE(int) bytes (32 > 24), so the
    // first header and its int payload are inside it; the payload is written
    // unaligned.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&raw const msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), raw);
    }
    let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
    // SAFETY: `msg` describes live `bytes` and `control`; the kernel only reads them.
    let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &raw const msg, flags) };
    let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
    if n != bytes.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "short send of a hello",
        ));
    }
    Ok(())
}

/// Receives into `buf` from the unix socket `sock` (nonblocking), with the
/// descriptor passed alongside, if any: (bytes read, the fd). Every passed
/// descriptor beyond the first is closed at once.
pub(crate) fn recv_with_fd(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
) -> io::Result<(usize, Option<OwnedFd>)> {
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
    let flags = libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC;
    // SAFETY: `msg` describes `buf` and `control`, both live and writable.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &raw mut msg, flags) };
    let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
    let mut got = None;
    // SAFETY: the CMSG_* walk stays within `msg_controllen` bytes of
    // `control`, which the kernel filled; an SCM_RIGHTS payload is an array
    // of ints, each a new descriptor of ours, read unaligned and owned at once.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&raw const msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let head = libc::CMSG_LEN(0) as usize;
                let count = ((*c).cmsg_len as usize).saturating_sub(head) / 4;
                let data = libc::CMSG_DATA(c).cast::<libc::c_int>();
                for i in 0..count {
                    let fd = OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i)));
                    if got.is_none() {
                        got = Some(fd);
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&raw const msg, c);
        }
    }
    Ok((n, got))
}

/// A nonblocking connection to the abstract unix stream name `name` (without
/// its leading NUL). A full backlog fails at once (`EAGAIN`) instead of
/// waiting for the listener to accept, as a blocking connect would.
pub(crate) fn connect_abstract(name: &[u8]) -> io::Result<OwnedFd> {
    // SAFETY: all-zero is a valid sockaddr_un.
    let mut sun: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if name.len() + 1 > sun.sun_path.len() {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    sun.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (dst, &b) in sun.sun_path[1..].iter_mut().zip(name) {
        *dst = b as libc::c_char;
    }
    let len = (std::mem::size_of::<libc::sa_family_t>() + 1 + name.len()) as libc::socklen_t;
    let ty = libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
    // SAFETY: socket(2) with constant arguments; the result is checked.
    let fd = cvt(unsafe { libc::socket(libc::AF_UNIX, ty, 0) })?;
    // SAFETY: `fd` was just opened and is owned here from now on.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: `sun` is a live sockaddr_un and `len` covers the family and the name.
    cvt(unsafe { libc::connect(fd.as_raw_fd(), (&raw const sun).cast(), len) })?;
    Ok(fd)
}

/// The credentials (pid, uid) of the peer of a connected unix socket
/// (`SO_PEERCRED`: for a connection to a listener, the listener's as of its
/// `listen`; for an accepted one, the connector's as of its `connect`).
pub(crate) fn peer_cred(sock: BorrowedFd<'_>) -> io::Result<(i32, u32)> {
    // SAFETY: all-zero is a valid ucred.
    let zero: libc::ucred = unsafe { std::mem::zeroed() };
    let cred = super::getsockopt_value(sock, libc::SOL_SOCKET, libc::SO_PEERCRED, zero)?;
    Ok((cred.pid, cred.uid))
}

/// Copies `src` into `dst` (of equal length) with process_vm_readv(2) on
/// this process: the kernel's cross-memory copy, the primitive a same-host
/// single copy would use (measured as a baseline, spec/same-host.md §4).
/// The bytes copied.
pub(crate) fn cross_memory_read_self(dst: &mut [u8], src: &[u8]) -> io::Result<usize> {
    let n = dst.len().min(src.len());
    let local = libc::iovec {
        iov_base: dst.as_mut_ptr().cast(),
        iov_len: n,
    };
    let remote = libc::iovec {
        iov_base: src.as_ptr().cast_mut().cast(),
        iov_len: n,
    };
    // SAFETY: both iovecs describe live slices of `n` bytes of this process
    // (`dst` writable and borrowed mutably for the call, `src` readable);
    // the kernel writes only within `dst`.
    let r = unsafe {
        libc::process_vm_readv(libc::getpid(), &raw const local, 1, &raw const remote, 1, 0)
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// Whether the CPU has `prefetchw` (CPUID 8000_0001h, ECX bit 8), asked
/// once.
#[cfg(target_arch = "x86_64")]
fn has_prefetchw() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        use std::arch::x86_64::__cpuid;
        // Leaf 8000_0001h only when the highest extended leaf has it.
        let max = __cpuid(0x8000_0000).eax;
        max >= 0x8000_0001 && __cpuid(0x8000_0001).ecx & (1 << 8) != 0
    })
}

/// `prefetchw` of the line at `p`.
#[cfg(target_arch = "x86_64")]
fn prefetchw(p: *const u8) {
    // SAFETY: a prefetch is a hint that never faults and changes no
    // memory or flags; the caller checked the CPU has the instruction.
    unsafe {
        std::arch::asm!("prefetchw [{0}]", in(reg) p, options(nostack, preserves_flags, readonly));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::sync::atomic::Ordering::SeqCst;

    #[test]
    fn a_cross_memory_read_of_this_process_copies_the_bytes() {
        let src: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let mut dst = vec![0u8; src.len()];
        assert_eq!(
            super::cross_memory_read_self(&mut dst, &src).unwrap(),
            src.len()
        );
        assert_eq!(dst, src);
    }

    #[test]
    fn two_mappings_of_one_memfd_share_bytes_and_atomics() {
        let fd = sealed_memfd("sv-test", 8192).unwrap();
        let (seals, len) = seals_and_len(fd.as_fd()).unwrap();
        assert_eq!((seals & SEALS, len), (SEALS, 8192));
        let a = Mapping::new(fd.as_fd(), 8192).unwrap();
        let b = Mapping::new(fd.as_fd(), 8192).unwrap();
        assert!(a.write(100, b"hello"));
        let mut out = [0u8; 5];
        assert!(b.read(100, &mut out));
        assert_eq!(&out, b"hello");
        a.atomic_u64(64).store(7, SeqCst);
        assert_eq!(b.atomic_u64(64).load(SeqCst), 7);
        assert!(!a.write(8190, b"xyz"), "out of bounds is refused");
        assert!(!b.read(usize::MAX, &mut out));
        // Sealed: the file cannot shrink under a mapping.
        // SAFETY (test): ftruncate on our own fd, no pointers.
        let r = unsafe { libc::ftruncate(fd.as_raw_fd(), 0) };
        assert_eq!(r, -1);
    }

    #[test]
    fn a_prefetch_changes_no_byte_and_ignores_what_is_out_of_bounds() {
        let fd = sealed_memfd("sv-test", 8192).unwrap();
        let a = Mapping::new(fd.as_fd(), 8192).unwrap();
        let bytes: Vec<u8> = (0..8192u32).map(|i| (i * 7) as u8).collect();
        assert!(a.write(0, &bytes));
        a.prefetch_write(0, 8192);
        a.prefetch_write(8000, 1000);
        a.prefetch_write(usize::MAX, 64);
        let mut out = vec![0u8; 8192];
        assert!(a.read(0, &mut out));
        assert_eq!(out, bytes);
    }

    #[test]
    fn a_descriptor_passes_over_a_socket_pair() {
        let (x, y) = std::os::unix::net::UnixStream::pair().unwrap();
        let fd = sealed_memfd("sv-test", 4096).unwrap();
        send_with_fd(x.as_fd(), b"hi", fd.as_fd()).unwrap();
        let mut buf = [0u8; 8];
        let (n, got) = recv_with_fd(y.as_fd(), &mut buf).unwrap();
        assert_eq!(&buf[..n], b"hi");
        let got = got.expect("a descriptor");
        assert_eq!(seals_and_len(got.as_fd()).unwrap().1, 4096);
        let (pid, uid) = peer_cred(y.as_fd()).unwrap();
        assert_eq!((pid, uid), (std::process::id() as i32, crate::sys::euid()));
    }
}

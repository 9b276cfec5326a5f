//! The system calls this crate makes through `libc`, each wrapped once.
//!
//! This module owns every `unsafe` block of the crate (DESIGN §3.8). Each wrapper
//! takes borrowed file descriptors (so the fd outlives the call) and turns the C
//! return convention into `io::Result`; nothing here keeps state.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Maps a C `-1` return to the thread's `errno`.
fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
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
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
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

/// setsockopt(2) with an `int` value.
pub(crate) fn setsockopt_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` is a live c_int and `len` is its size; fd is open for the call.
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            len,
        )
    };
    cvt(ret).map(drop)
}

/// getsockopt(2) of an `int` option.
pub(crate) fn getsockopt_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are live locals the kernel writes at most `len` bytes into.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    cvt(ret).map(|_| value)
}

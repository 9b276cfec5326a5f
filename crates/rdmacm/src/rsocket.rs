//! The rsocket calls (`rsocket`, `rbind`, … `riowrite`): part of the ABI, so
//! exported, but wire-compatible rsockets (rdma-core's rsocket protocol over
//! the CM) are later work. `rsocket` answers `ENOSYS` with a logged reason,
//! so no rsocket can exist; `rpoll` and `rselect` therefore serve ordinary
//! descriptors as poll(2) and select(2) do (rdma-core's do the same for
//! descriptors that are not rsockets — rdmacm-utils poll their event
//! channels with `rpoll`); every other call gets a descriptor that cannot be
//! an rsocket and answers `EBADF`, as rdma-core's do for one.

use crate::util::*;
use std::ffi::{c_int, c_void};

type Ssize = isize;

fn no_rsocket(verb: &str) -> c_int {
    refuse(
        verb,
        libc::EBADF,
        "the descriptor is not an rsocket (rsockets are not implemented in softverbs' librdmacm: rsocket() answers ENOSYS)",
    )
}

/// `int rsocket(int domain, int type, int protocol)`.
#[no_mangle]
pub extern "C" fn rsocket(_domain: c_int, _type: c_int, _protocol: c_int) -> c_int {
    init_log();
    fail(refuse(
        "rsocket",
        libc::ENOSYS,
        "rsockets (rdma-core's socket protocol over RDMA) are not implemented in softverbs' librdmacm yet",
    ))
}

/// `int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)`: poll(2).
#[no_mangle]
pub unsafe extern "C" fn rpoll(
    fds: *mut libc::pollfd,
    nfds: libc::nfds_t,
    timeout: c_int,
) -> c_int {
    // SAFETY: the caller's array of `nfds` pollfds, as for poll(2).
    unsafe { libc::poll(fds, nfds, timeout) }
}

/// `int rselect(int nfds, fd_set *, fd_set *, fd_set *, struct timeval *)`: select(2).
#[no_mangle]
pub unsafe extern "C" fn rselect(
    nfds: c_int,
    readfds: *mut libc::fd_set,
    writefds: *mut libc::fd_set,
    exceptfds: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    // SAFETY: the caller's sets and timeout, as for select(2).
    unsafe { libc::select(nfds, readfds, writefds, exceptfds, timeout) }
}

/// Defines calls that take an rsocket first and answer `EBADF`.
macro_rules! not_an_rsocket {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: `EBADF` (no rsocket can exist).")]
        #[no_mangle]
        pub unsafe extern "C" fn $name(_socket: c_int, $($arg: $ty),*) -> $ret {
            $(let _ = $arg;)*
            fail(no_rsocket(stringify!($name))) as $ret
        }
    )*};
}

not_an_rsocket! {
    rbind(addr: *const libc::sockaddr, addrlen: libc::socklen_t) -> c_int;
    rlisten(backlog: c_int) -> c_int;
    raccept(addr: *mut libc::sockaddr, addrlen: *mut libc::socklen_t) -> c_int;
    rconnect(addr: *const libc::sockaddr, addrlen: libc::socklen_t) -> c_int;
    rshutdown(how: c_int) -> c_int;
    rclose() -> c_int;
    rrecv(buf: *mut c_void, len: usize, flags: c_int) -> Ssize;
    rrecvfrom(buf: *mut c_void, len: usize, flags: c_int, src: *mut libc::sockaddr, addrlen: *mut libc::socklen_t) -> Ssize;
    rrecvmsg(msg: *mut libc::msghdr, flags: c_int) -> Ssize;
    rsend(buf: *const c_void, len: usize, flags: c_int) -> Ssize;
    rsendto(buf: *const c_void, len: usize, flags: c_int, dest: *const libc::sockaddr, addrlen: libc::socklen_t) -> Ssize;
    rsendmsg(msg: *const libc::msghdr, flags: c_int) -> Ssize;
    rread(buf: *mut c_void, count: usize) -> Ssize;
    rreadv(iov: *const libc::iovec, iovcnt: c_int) -> Ssize;
    rwrite(buf: *const c_void, count: usize) -> Ssize;
    rwritev(iov: *const libc::iovec, iovcnt: c_int) -> Ssize;
    rgetpeername(addr: *mut libc::sockaddr, addrlen: *mut libc::socklen_t) -> c_int;
    rgetsockname(addr: *mut libc::sockaddr, addrlen: *mut libc::socklen_t) -> c_int;
    rsetsockopt(level: c_int, optname: c_int, optval: *const c_void, optlen: libc::socklen_t) -> c_int;
    rgetsockopt(level: c_int, optname: c_int, optval: *mut c_void, optlen: *mut libc::socklen_t) -> c_int;
    riomap(buf: *mut c_void, len: usize, prot: c_int, flags: c_int, offset: libc::off_t) -> libc::off_t;
    riounmap(buf: *mut c_void, len: usize) -> c_int;
    riowrite(buf: *const c_void, count: usize, offset: libc::off_t, flags: c_int) -> usize;
}

/// `int rfcntl(int socket, int cmd, ...)`: `EBADF`. C-variadic; on x86_64
/// SysV an integer or pointer third argument sits where a fixed one would,
/// and this function reads none of them.
#[no_mangle]
pub unsafe extern "C" fn rfcntl(_socket: c_int, _cmd: c_int) -> c_int {
    fail(no_rsocket("rfcntl"))
}

crate::symver!("rsocket");

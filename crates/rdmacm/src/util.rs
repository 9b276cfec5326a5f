//! What every entry point shares: errno, refusal logging, and the registry
//! that tells a live object of this library from anything else.

use std::collections::HashSet;
use std::ffi::c_int;
use std::sync::{Mutex, MutexGuard, Once, PoisonError};

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// Reads the calling thread's `errno`.
pub(crate) fn errno() -> c_int {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() }
}

/// The symbolic name of an errno value, for log lines.
pub(crate) fn errno_name(e: c_int) -> &'static str {
    match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EBUSY => "EBUSY",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::ENOSYS => "ENOSYS",
        libc::ENODATA => "ENODATA",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::EADDRINUSE => "EADDRINUSE",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ECONNREFUSED => "ECONNREFUSED",
        _ => "errno",
    }
}

/// Logs a refusal at `warn` and returns `errno` for the caller to report.
pub(crate) fn refuse(verb: &str, errno: c_int, why: impl std::fmt::Display) -> c_int {
    tracing::warn!(target: "softverbs", "{verb} refused ({}): {why}", errno_name(errno));
    errno
}

/// rdma-core's `ERR(e)`: sets `errno` and returns −1.
pub(crate) fn fail(e: c_int) -> c_int {
    set_errno(e);
    -1
}

/// −1 with `errno` for an `Err`, 0 for `Ok`: the usual librdmacm return.
pub(crate) fn ret(r: Result<(), c_int>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

/// `SOFTVERBS_LOG=error|warn|info|debug|trace` sends the log to stderr; set up
/// once, on the first entry into the library.
pub(crate) fn init_log() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let Ok(level) = std::env::var("SOFTVERBS_LOG") else { return };
        match level.trim().parse::<tracing::Level>() {
            Ok(level) => {
                let _ = tracing_subscriber::fmt()
                    .with_max_level(level)
                    .with_writer(std::io::stderr)
                    .try_init();
            }
            Err(_) => eprintln!(
                "librdmacm (softverbs): SOFTVERBS_LOG={level:?} is not error, warn, info, debug or trace"
            ),
        }
    });
}

/// Locks a mutex, ignoring poisoning (a panic never crosses the C boundary
/// with a lock held in a state we cannot use).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The addresses of the live objects of one kind: a pointer is dereferenced
/// only after it is found here, so NULL, stale and foreign pointers get
/// `EINVAL` without being read.
pub(crate) struct Registry {
    live: Mutex<Option<HashSet<usize>>>,
    what: &'static str,
}

impl Registry {
    pub(crate) const fn new(what: &'static str) -> Registry {
        Registry {
            live: Mutex::new(None),
            what,
        }
    }

    pub(crate) fn insert<T>(&self, p: *const T) {
        lock(&self.live)
            .get_or_insert_with(HashSet::new)
            .insert(p as usize);
    }

    pub(crate) fn remove<T>(&self, p: *const T) -> bool {
        lock(&self.live)
            .as_mut()
            .is_some_and(|s| s.remove(&(p as usize)))
    }

    pub(crate) fn contains<T>(&self, p: *const T) -> bool {
        lock(&self.live)
            .as_ref()
            .is_some_and(|s| s.contains(&(p as usize)))
    }

    /// `Ok` if `p` is live, else a logged `EINVAL`.
    pub(crate) fn check<T>(&self, verb: &str, p: *const T) -> Result<(), c_int> {
        if p.is_null() {
            return Err(refuse(
                verb,
                libc::EINVAL,
                format_args!("the {} pointer is NULL", self.what),
            ));
        }
        if !self.contains(p) {
            return Err(refuse(
                verb,
                libc::EINVAL,
                format_args!(
                    "{p:?} is not a live {} of this library (destroyed, or never created here)",
                    self.what
                ),
            ));
        }
        Ok(())
    }
}

//! The errno values of the verbs (Linux numbering): the ground floor every
//! error type maps to. Imports nothing of the crate.

use std::fmt;

/// The errno values softverbs returns (Linux numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Errno {
    /// Operation not permitted (1).
    EPERM,
    /// No such entry (2).
    ENOENT,
    /// Out of memory / queue full (12).
    ENOMEM,
    /// Bad address (14).
    EFAULT,
    /// Bad file descriptor (9).
    EBADF,
    /// Try again: e.g. no XRC domain for a file without O_CREAT (11).
    EAGAIN,
    /// Resource busy: still in use (16).
    EBUSY,
    /// Invalid argument (22).
    EINVAL,
    /// No data: e.g. an empty GID-table entry (61).
    ENODATA,
    /// Operation not supported (95).
    EOPNOTSUPP,
}

impl Errno {
    /// The numeric value on Linux.
    pub const fn raw(self) -> i32 {
        match self {
            Errno::EPERM => 1,
            Errno::ENOENT => 2,
            Errno::EBADF => 9,
            Errno::EAGAIN => 11,
            Errno::ENOMEM => 12,
            Errno::EFAULT => 14,
            Errno::EBUSY => 16,
            Errno::EINVAL => 22,
            Errno::ENODATA => 61,
            Errno::EOPNOTSUPP => 95,
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

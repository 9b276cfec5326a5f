//! The error type of the public API.

use proto::Errno;
use std::fmt;
use std::sync::Arc;

/// Why a softverbs call was refused. `Display` says what was wrong in words;
/// [`Error::errno`] gives the errno Linux returns in the same case.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A verbs rule was broken (bad attribute, illegal transition, busy object…).
    #[error(transparent)]
    Verbs(#[from] proto::Error),
    /// A work request was refused by `post_send` / `post_recv`.
    #[error(transparent)]
    Post(#[from] proto::wr::PostError),
    /// The operating system refused something (socket, file descriptor).
    #[error("{op}: {source}")]
    Os {
        /// What was being done (`"waiting for a completion event"`).
        op: &'static str,
        /// The system's error, with its errno.
        #[source]
        source: OsError,
    },
    /// The device configuration (environment) is not valid.
    #[error("configuration: {0}")]
    Config(#[from] ConfigError),
    /// A registration names memory this process has not mapped, or not
    /// writable although the access flags allow writes: the kernel's pinning
    /// (`ib_umem_get`) refuses it with `EFAULT`.
    #[error("{op}: [{addr:#x}, +{len}) is not mapped{} in this process", if *.write { " writable" } else { "" })]
    Unmapped {
        /// The verb (`"reg_mr"`, `"rereg_mr"`).
        op: &'static str,
        /// Start of the range.
        addr: u64,
        /// Its length.
        len: u64,
        /// The access flags allow writes.
        write: bool,
    },
    /// A RAW_PACKET QP's packet socket could not be opened (`EPERM` without
    /// `CAP_NET_RAW`, as hardware providers answer).
    #[error("create_qp: a RAW_PACKET QP sends and receives Ethernet frames through an AF_PACKET socket, which needs CAP_NET_RAW: {source}")]
    RawPacket {
        /// The system's error.
        #[source]
        source: OsError,
    },
    /// `ibv_destroy_qp` while flows steer to the QP (`EBUSY`, as the kernel's
    /// QP use count refuses it).
    #[error("destroy_qp: {flows} flow(s) still steer to QP {qpn:#x}; destroy them first (ibv_destroy_flow)")]
    QpHasFlows {
        /// The QP.
        qpn: u32,
        /// Flows attached.
        flows: usize,
    },
    /// A work queue, indirection table or RSS QP verb was refused.
    #[error(transparent)]
    Rss(#[from] crate::wq::RssError),
    /// `ibv_create_flow` refused the rule (`EOPNOTSUPP` or `EINVAL`).
    #[error("create_flow: {0}")]
    Flow(#[from] sv_io::raw::FlowError),
}

/// An `std::io::Error`, shareable so [`Error`] stays `Clone`; two are equal
/// when their kind and errno are.
#[derive(Debug, Clone)]
pub struct OsError(Arc<std::io::Error>);

impl OsError {
    /// The system's error.
    pub fn io(&self) -> &std::io::Error {
        &self.0
    }

    /// Its errno, when it has one.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.0.raw_os_error()
    }
}

impl From<std::io::Error> for OsError {
    fn from(e: std::io::Error) -> OsError {
        OsError(Arc::new(e))
    }
}

impl PartialEq for OsError {
    fn eq(&self, other: &OsError) -> bool {
        self.0.kind() == other.0.kind() && self.0.raw_os_error() == other.0.raw_os_error()
    }
}

impl Eq for OsError {}

impl fmt::Display for OsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for OsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

/// A device configuration (environment) that cannot be used: which setting, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `SOFTVERBS_ADDR` names something that is not an address.
    #[error("SOFTVERBS_ADDR: {value:?} is not an IPv4 or IPv6 address")]
    Addr {
        /// The list element given.
        value: String,
    },
    /// `SOFTVERBS_MTU` is not an IB MTU.
    #[error("SOFTVERBS_MTU: {value:?} is not 256, 512, 1024, 2048 or 4096")]
    Mtu {
        /// The value given.
        value: String,
    },
    /// `SOFTVERBS_LOG` is not a level.
    #[error("SOFTVERBS_LOG={value:?} is not error, warn, info, debug or trace")]
    Log {
        /// The value given.
        value: String,
    },
    /// The driver's settings (`SOFTVERBS_FAULTS`, `SOFTVERBS_PCAP`, ...).
    #[error("device {device}: {source}")]
    Driver {
        /// The device.
        device: String,
        /// Which setting, and why.
        #[source]
        source: sv_io::OptionsError,
    },
    /// The device's socket could not be opened.
    #[error("cannot start device {device} on {addr} port 4791: {source}{hint}")]
    Start {
        /// The device.
        device: String,
        /// Its first address (`none` without one).
        addr: String,
        /// The system's error.
        #[source]
        source: OsError,
        /// A likely cause, in words, or empty.
        hint: &'static str,
    },
}

impl Error {
    /// The errno Linux returns for the same refusal.
    pub fn errno(&self) -> Errno {
        match self {
            Error::Verbs(e) => e.errno(),
            Error::Post(e) => e.errno(),
            Error::Config(_) | Error::Os { .. } => Errno::EINVAL,
            Error::Unmapped { .. } => Errno::EFAULT,
            Error::RawPacket { source } => match source.raw_os_error() {
                Some(libc::EPERM | libc::EACCES) => Errno::EPERM,
                _ => Errno::EINVAL,
            },
            Error::QpHasFlows { .. } => Errno::EBUSY,
            Error::Rss(e) => e.errno(),
            Error::Flow(e) if e.errno() == libc::EOPNOTSUPP => Errno::EOPNOTSUPP,
            Error::Flow(_) => Errno::EINVAL,
        }
    }
}

impl From<proto::error::ModifyError> for Error {
    fn from(e: proto::error::ModifyError) -> Self {
        Error::Verbs(proto::Error::Modify(e))
    }
}

/// A refused `destroy`: the error, and the object, unchanged and still usable.
pub struct DestroyError<T> {
    /// Why it was refused (`EBUSY` when something still uses it).
    pub error: Error,
    /// The object, handed back.
    pub object: T,
}

impl<T> fmt::Debug for DestroyError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DestroyError")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Display for DestroyError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl<T> std::error::Error for DestroyError<T> {}

/// Logs a refusal (target `softverbs`) and passes it on.
pub(crate) fn logged<T>(verb: &'static str, r: Result<T, proto::Error>) -> Result<T, Error> {
    r.map_err(|e| {
        tracing::warn!(target: "softverbs", "{verb} refused ({}): {e}", e.errno());
        Error::Verbs(e)
    })
}

/// Finishes an explicit `destroy`: on success marks the object destroyed (so its
/// drop does nothing more); on refusal logs and hands the object back.
pub(crate) fn finish_destroy<T>(
    verb: &'static str,
    r: Result<(), proto::Error>,
    destroyed: &std::sync::atomic::AtomicBool,
    object: T,
) -> Result<(), DestroyError<T>> {
    match logged(verb, r) {
        Ok(()) => {
            destroyed.store(true, std::sync::atomic::Ordering::Release);
            Ok(())
        }
        Err(error) => Err(DestroyError { error, object }),
    }
}

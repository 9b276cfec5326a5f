//! The error type of the public API.

use proto::Errno;
use std::fmt;

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
    #[error("{0}")]
    Os(String),
    /// The device configuration (environment) is not valid.
    #[error("configuration: {0}")]
    Config(String),
}

impl Error {
    /// The errno Linux returns for the same refusal.
    pub fn errno(&self) -> Errno {
        match self {
            Error::Verbs(e) => e.errno(),
            Error::Post(e) => e.errno(),
            Error::Config(_) | Error::Os(_) => Errno::EINVAL,
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

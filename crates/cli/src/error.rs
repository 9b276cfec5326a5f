//! The command's errors: a verbs refusal, or what went wrong around it (the
//! control connection, the server process, the peer's answers, completions).

use softverbs::WcStatus;
use std::time::Duration;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// softverbs refused a verb.
    #[error(transparent)]
    Verbs(#[from] softverbs::Error),
    /// The operating system refused something.
    #[error("{op}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The peer's connection message is not `QPN GID ADDR RKEY`.
    #[error("bad connection message from the peer: {line:?}")]
    PeerMessage {
        /// The line received.
        line: String,
    },
    /// The server answered something else than the step expects.
    #[error("server said {got:?}, expected {want:?}")]
    Reply {
        /// The line received.
        got: String,
        /// The line expected.
        want: &'static str,
    },
    /// A work request completed with an error.
    #[error("completion {wr_id} failed: {status}")]
    Completion {
        /// The WR.
        wr_id: u64,
        /// Its status.
        status: WcStatus,
    },
    /// Fewer completions than expected arrived in time.
    #[error("only {got} of {want} completions within {wait:?}")]
    Timeout {
        /// Completions that arrived.
        got: usize,
        /// Completions expected.
        want: usize,
        /// How long we waited.
        wait: Duration,
    },
    /// A benchmark thread panicked.
    #[error("a benchmark thread panicked")]
    ThreadPanicked,
}

impl CliError {
    /// A closure mapping an `io::Error` met while doing `op`.
    pub fn io(op: &'static str) -> impl Fn(std::io::Error) -> CliError + Copy {
        move |source| CliError::Io { op, source }
    }
}

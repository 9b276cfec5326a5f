//! [`DriverOptions`]: how a driver runs, and how the environment sets it.
//!
//! Environment variables read by [`DriverOptions::try_from_env`]:
//! - `SOFTVERBS_BUSY_POLL_US`: busy-poll window in microseconds (lenient: a bad
//!   value is ignored with a warning, as before);
//! - `SOFTVERBS_FAULTS`: fault injection, strict (see [`crate::faults`]);
//! - `SOFTVERBS_PCAP`: capture file template, strict (see [`crate::capture`]);
//! - `SOFTVERBS_GSO`, `SOFTVERBS_GRO`: `0`/`off`/`no`/`false` turn UDP GSO on send,
//!   UDP GRO on receive off (anything else leaves them on);
//! - `SOFTVERBS_CALLER_TX`: `0`/`off`/`no`/`false` turns the posting thread's
//!   own transmit off ([`DriverOptions::caller_tx`]; on by default), `1`/`on`/`yes`/`true` on.
//! - `SOFTVERBS_POLL_RX`: `0`/`off`/`no`/`false` turns receive by a thread
//!   polling an empty CQ off ([`DriverOptions::poll_receive`]; on by default), `1`/`on`/`yes`/`true` on;
//! - `SOFTVERBS_POLL_RX_LEASE_US`: how long the socket stays a polling
//!   thread's after its last empty poll ([`DriverOptions::poll_lease`]; lenient);
//! - `SOFTVERBS_POST_WAIT_US`: how long a post that answered a request
//!   waits for the next at most ([`DriverOptions::post_wait`]; `0` never;
//!   lenient);
//! - `SOFTVERBS_SHM`: the same-host path (`crate::shm`) is on by default;
//!   `1`/`on`/`yes`/`true` keeps it on, anything else turns it off.

use std::path::PathBuf;
use std::time::Duration;

use crate::capture::{capture_path, TemplateError};
use crate::faults::{FaultConfig, FaultConfigError};

/// How a driver runs. `Default` suits one device on one host.
#[derive(Clone, Debug)]
pub struct DriverOptions {
    /// How long the progress thread keeps polling after its last work before it
    /// sleeps in poll(2) (`SOFTVERBS_BUSY_POLL_US`). Zero (the default): sleep
    /// at once. RDMA programs spin in their own poll loops; a progress thread
    /// that spins too leaves them fighting for the cores: on 2 cores under load,
    /// ib_write_lat measured 14 ms typical with a 50 µs window, 25 µs with none.
    /// A window pays off only with cores to spare.
    pub busy_poll: Duration,
    /// Kernel receive buffer asked for (SO_RCVBUF).
    pub recv_buffer_bytes: usize,
    /// Kernel send buffer asked for (SO_SNDBUF).
    pub send_buffer_bytes: usize,
    /// Largest datagram sent or received (buffer size handed to the engine).
    pub max_datagram_bytes: usize,
    /// Work per step and pass: datagrams received, sent, notifications delivered.
    pub batch: usize,
    /// Name of the progress thread.
    pub thread_name: String,
    /// Faults injected into the datagrams (`SOFTVERBS_FAULTS`); default none.
    pub faults: FaultConfig,
    /// Datagrams held at once for delay and reordering; beyond it they go unheld.
    pub max_held: usize,
    /// Capture file (`SOFTVERBS_PCAP`, expanded); created, truncated, at start.
    pub capture: Option<PathBuf>,
    /// This process's slot of a shared address ([`crate::share`]): the socket
    /// joins the address's reuseport group and datagrams for other slots are
    /// forwarded. `None`: the socket is the address's alone.
    pub share: Option<std::sync::Arc<crate::share::Slot>>,
    /// Send runs of equal-size datagrams to one destination as one UDP GSO send
    /// (`SOFTVERBS_GSO=0` turns it off). A kernel that refuses it turns it off too.
    pub gso: bool,
    /// Let the kernel coalesce received datagrams (UDP GRO; `SOFTVERBS_GRO=0` turns it off).
    pub gro: bool,
    /// A thread that posts to an idle send queue transmits the datagrams itself
    /// (`Driver::posted`), without waking the progress thread. On by default
    /// (`SOFTVERBS_CALLER_TX=0` turns it off): with the polling receive it
    /// takes `ib_send_lat` from ≈ 55 µs typical (p99 0.2–2 ms) to ≈ 16 µs
    /// (p99 ≈ 60 µs); `ib_write_bw -s 64` measured 0.7× the median message
    /// rate with it on, inside a wide spread (spec/performance.md §13). Off
    /// by itself while faults, capture or the same-host path are in use:
    /// those live in the progress thread.
    pub caller_tx: bool,
    /// With `caller_tx`: posts closer together than this are a stream, which
    /// the progress thread sends in batches (sendmmsg, GSO) rather than the
    /// posting thread one `sendto(2)` each: a post that follows the
    /// thread's previous one by less is left to a poll or the progress
    /// thread instead. 20 µs: a ping-pong's posts are a round trip apart
    /// (≥ 20 µs here over UDP), a streaming program's a few µs
    /// (spec/performance.md §13). A post to an idle queue whose peer is
    /// reached through a same-host ring goes at once whatever the gap
    /// (`Driver::post`: no system call there to share; §27).
    pub caller_tx_stream_gap: Duration,
    /// With `caller_tx`: how long what a thread left to its next poll
    /// waits for its lane's polling threads (crate `lanes`) before another
    /// polling thread takes it (the lane's threads went quiet). As long as
    /// the stream gap: a thread that posts a stream polls again well within
    /// it. (A lane whose threads do not poll leaves its work to others at
    /// once.)
    pub caller_tx_lane_wait: Duration,
    /// An application thread that polls an empty CQ while the progress thread
    /// sleeps reads the socket itself ([`crate::Driver::drive_receive`]).
    /// On by default (`SOFTVERBS_POLL_RX=0` turns it off): with the lease
    /// below, a program that polls its CQ for the message it waits for has
    /// no wake-up in its path (spec/performance.md §11.3). Never with faults
    /// or a capture.
    pub poll_receive: bool,
    /// With `poll_receive`: how long after a thread's last poll of an empty
    /// CQ the socket stays its to read, at most (`SOFTVERBS_POLL_RX_LEASE_US`).
    /// While this lease holds, the progress thread does not watch the socket
    /// (an arrival does not wake it); it looks again when the lease ends, so
    /// a datagram that came after the last poll waits at most this long plus
    /// one wake-up. The lease halves each time a datagram waited for a
    /// thread that had stopped polling and doubles back while polls renew it
    /// (crate::pollrx). 2 ms unless set: shorter leases woke the progress
    /// threads of a stream so often that they took the polling threads'
    /// cores (spec/performance.md §17.14).
    /// `ibv_req_notify_cq` ends the lease at once.
    pub poll_lease: Duration,
    /// With `caller_tx` and `poll_receive`: how long a post waits at most
    /// for the answer to it, once the last posts each answered a request
    /// that had just come and were answered within this time (a program
    /// that answers and then spins on its memory for the next request,
    /// `crate::linger`); `SOFTVERBS_POST_WAIT_US`, 0 never. 1 ms unless
    /// set: a wait that ends unanswered costs this much, but the progress
    /// thread's wake-up it replaces takes as long beside spinning threads
    /// on two cores (spec/performance.md §19).
    pub post_wait: Duration,
    /// The same-host path (shared-memory rings to processes of this host,
    /// `crate::shm`; on by default, `SOFTVERBS_SHM=0` turns it off; the
    /// application threads work its rings as they work the socket,
    /// crate::callertx and crate::pollrx). Needs `share` (a slot): a driver
    /// without one never takes it.
    pub shm: bool,
}

impl Default for DriverOptions {
    fn default() -> Self {
        DriverOptions {
            busy_poll: Duration::ZERO,
            recv_buffer_bytes: 4 << 20,
            send_buffer_bytes: 4 << 20,
            max_datagram_bytes: 65536,
            batch: 64,
            thread_name: "softverbs-progress".into(),
            faults: FaultConfig::default(),
            max_held: 4096,
            capture: None,
            share: None,
            gso: true,
            gro: true,
            caller_tx: true,
            caller_tx_stream_gap: Duration::from_micros(20),
            caller_tx_lane_wait: Duration::from_micros(20),
            poll_receive: true,
            poll_lease: Duration::from_micros(2000),
            post_wait: Duration::from_micros(1000),
            shm: true,
        }
    }
}

/// An environment setting that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    /// `SOFTVERBS_FAULTS` is not valid.
    #[error(transparent)]
    Faults(#[from] FaultConfigError),
    /// `SOFTVERBS_PCAP` is not a valid template.
    #[error("{}: {value:?}: {reason}", DriverOptions::PCAP_ENV)]
    Capture {
        /// The value given.
        value: String,
        /// What is wrong with it.
        #[source]
        reason: TemplateError,
    },
}

impl DriverOptions {
    /// Environment variable overriding [`DriverOptions::busy_poll`], in microseconds.
    pub const BUSY_POLL_ENV: &'static str = "SOFTVERBS_BUSY_POLL_US";
    /// Environment variable setting [`DriverOptions::faults`].
    pub const FAULTS_ENV: &'static str = FaultConfig::ENV;
    /// Environment variable turning [`DriverOptions::gso`] off (`0`, `off`, `no`, `false`).
    pub const GSO_ENV: &'static str = "SOFTVERBS_GSO";
    /// Environment variable turning [`DriverOptions::gro`] off (`0`, `off`, `no`, `false`).
    pub const GRO_ENV: &'static str = "SOFTVERBS_GRO";
    /// Environment variable turning [`DriverOptions::caller_tx`] off (`0`,
    /// `off`, `no`, `false`) or on (`1`, `on`, `yes`, `true`).
    pub const CALLER_TX_ENV: &'static str = "SOFTVERBS_CALLER_TX";
    /// Environment variable turning [`DriverOptions::poll_receive`] on (`1`,
    /// `on`, `yes`, `true`) or off (`0`, `off`, `no`, `false`).
    pub const POLL_RX_ENV: &'static str = "SOFTVERBS_POLL_RX";
    /// Environment variable setting [`DriverOptions::poll_lease`], in microseconds.
    pub const POLL_RX_LEASE_ENV: &'static str = "SOFTVERBS_POLL_RX_LEASE_US";
    /// Environment variable setting [`DriverOptions::post_wait`], in microseconds.
    pub const POST_WAIT_ENV: &'static str = "SOFTVERBS_POST_WAIT_US";
    /// Environment variable turning [`DriverOptions::shm`] on (`1`, `on`, `yes`, `true`) or off.
    pub const SHM_ENV: &'static str = crate::shm::ENV;
    /// Environment variable setting [`DriverOptions::capture`] (`%p`, `%d`, `%%` expanded).
    pub const PCAP_ENV: &'static str = "SOFTVERBS_PCAP";

    /// The defaults with `SOFTVERBS_BUSY_POLL_US` applied; ignores fault and
    /// capture settings (see [`DriverOptions::try_from_env`]).
    pub fn from_env() -> Self {
        let mut opts = DriverOptions::default();
        opts.apply_busy_poll(|name| std::env::var(name).ok());
        opts
    }

    /// The defaults with every environment setting applied, for the device
    /// named `device` (the `%d` of `SOFTVERBS_PCAP`).
    pub fn try_from_env(device: &str) -> Result<Self, OptionsError> {
        let mut opts = DriverOptions::default();
        opts.apply_env(device, |name| std::env::var(name).ok())?;
        Ok(opts)
    }

    /// Applies the environment as seen through `get` (testable without `set_var`).
    /// Empty values count as unset.
    pub fn apply_env(
        &mut self,
        device: &str,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<(), OptionsError> {
        let get = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        self.apply_busy_poll(get);
        let off = |v: String| matches!(v.trim(), "0" | "off" | "no" | "false");
        if get(Self::GSO_ENV).is_some_and(off) {
            self.gso = false;
        }
        if get(Self::GRO_ENV).is_some_and(off) {
            self.gro = false;
        }
        let on = |v: String| matches!(v.trim(), "1" | "on" | "yes" | "true");
        if let Some(v) = get(Self::CALLER_TX_ENV) {
            self.caller_tx = on(v.clone()) || (self.caller_tx && !off(v));
        }
        if let Some(v) = get(Self::POLL_RX_ENV) {
            self.poll_receive = on(v.clone()) || (self.poll_receive && !off(v));
        }
        if let Some(v) = get(Self::POLL_RX_LEASE_ENV) {
            match v.trim().parse::<u64>() {
                Ok(us) => self.poll_lease = Duration::from_micros(us),
                Err(e) => tracing::warn!(value = %v, error = %e,
                    "{} is not a number of microseconds; ignored", Self::POLL_RX_LEASE_ENV),
            }
        }
        if let Some(v) = get(Self::POST_WAIT_ENV) {
            match v.trim().parse::<u64>() {
                Ok(us) => self.post_wait = Duration::from_micros(us),
                Err(e) => tracing::warn!(value = %v, error = %e,
                    "{} is not a number of microseconds; ignored", Self::POST_WAIT_ENV),
            }
        }
        if let Some(v) = get(Self::SHM_ENV) {
            self.shm = crate::shm::enabled_by(&v);
        }
        if let Some(text) = get(Self::FAULTS_ENV) {
            self.faults = text.parse().map_err(OptionsError::Faults)?;
        }
        if let Some(template) = get(Self::PCAP_ENV) {
            let path =
                capture_path(template.trim(), device).map_err(|reason| OptionsError::Capture {
                    value: template.clone(),
                    reason,
                })?;
            self.capture = Some(path);
        }
        Ok(())
    }

    fn apply_busy_poll(&mut self, get: impl Fn(&str) -> Option<String>) {
        let Some(text) = get(Self::BUSY_POLL_ENV) else {
            return;
        };
        match text.trim().parse::<u64>() {
            Ok(us) => self.busy_poll = Duration::from_micros(us),
            Err(e) => tracing::warn!(value = %text, error = %e,
                "{} is not a number of microseconds; ignored", Self::BUSY_POLL_ENV),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn busy_poll_from_the_environment() {
        let mut opts = DriverOptions::default();
        assert_eq!(opts.busy_poll, Duration::ZERO);
        opts.apply_env("d", env(&[("SOFTVERBS_BUSY_POLL_US", " 80 ")]))
            .unwrap();
        assert_eq!(opts.busy_poll, Duration::from_micros(80));
        opts.apply_env("d", env(&[("SOFTVERBS_BUSY_POLL_US", "fast")]))
            .unwrap();
        assert_eq!(opts.busy_poll, Duration::from_micros(80));
        opts.apply_env("d", env(&[("SOFTVERBS_BUSY_POLL_US", "250")]))
            .unwrap();
        assert_eq!(opts.busy_poll, Duration::from_micros(250));
    }

    #[test]
    fn caller_tx_is_on_unless_the_environment_turns_it_off() {
        assert!(DriverOptions::default().caller_tx);
        for (value, want) in [("0", false), ("off", false), ("1", true), ("bogus", true)] {
            let mut opts = DriverOptions::default();
            let vars = [(DriverOptions::CALLER_TX_ENV, value)];
            opts.apply_env("d", env(&vars)).unwrap();
            assert_eq!(opts.caller_tx, want, "{value}");
        }
        let mut opts = DriverOptions {
            caller_tx: false,
            ..DriverOptions::default()
        };
        opts.apply_env("d", env(&[(DriverOptions::CALLER_TX_ENV, "on")]))
            .unwrap();
        assert!(opts.caller_tx);
    }

    #[test]
    fn poll_receive_is_on_unless_the_environment_turns_it_off() {
        assert!(DriverOptions::default().poll_receive);
        for (value, want) in [("1", true), ("on", true), ("0", false), ("bogus", true)] {
            let mut opts = DriverOptions::default();
            let vars = [(DriverOptions::POLL_RX_ENV, value)];
            opts.apply_env("d", env(&vars)).unwrap();
            assert_eq!(opts.poll_receive, want, "{value}");
        }
        let mut opts = DriverOptions {
            poll_receive: true,
            ..DriverOptions::default()
        };
        opts.apply_env("d", env(&[(DriverOptions::POLL_RX_ENV, "off")]))
            .unwrap();
        assert!(!opts.poll_receive);
    }

    #[test]
    fn poll_lease_from_the_environment() {
        let mut opts = DriverOptions::default();
        assert_eq!(opts.poll_lease, Duration::from_micros(2000));
        let vars = [(DriverOptions::POLL_RX_LEASE_ENV, " 50 ")];
        opts.apply_env("d", env(&vars)).unwrap();
        assert_eq!(opts.poll_lease, Duration::from_micros(50));
        let vars = [(DriverOptions::POLL_RX_LEASE_ENV, "long")];
        opts.apply_env("d", env(&vars)).unwrap();
        assert_eq!(opts.poll_lease, Duration::from_micros(50), "ignored");
    }

    #[test]
    fn faults_and_capture_from_the_environment() {
        let mut opts = DriverOptions::default();
        let vars = [
            ("SOFTVERBS_FAULTS", "loss=0.5,seed=3"),
            ("SOFTVERBS_PCAP", "/tmp/%d.pcap"),
        ];
        opts.apply_env("dev1", env(&vars)).unwrap();
        assert_eq!((opts.faults.loss, opts.faults.seed), (0.5, 3));
        assert_eq!(opts.capture, Some(PathBuf::from("/tmp/dev1.pcap")));

        let mut opts = DriverOptions::default();
        opts.apply_env(
            "d",
            env(&[("SOFTVERBS_FAULTS", " "), ("SOFTVERBS_PCAP", "")]),
        )
        .unwrap();
        assert!(!opts.faults.is_active() && opts.capture.is_none());

        let e = opts
            .apply_env("d", env(&[("SOFTVERBS_FAULTS", "loss=2")]))
            .unwrap_err();
        assert!(e.to_string().contains("\"loss\""), "{e}");
        assert!(
            matches!(&e, OptionsError::Faults(f) if f.key == "loss"
                && matches!(&f.reason, crate::faults::FaultValueError::ProbabilityRange { value } if value == "2")),
            "{e:?}"
        );
        let e = opts
            .apply_env("d", env(&[("SOFTVERBS_PCAP", "/tmp/%x")]))
            .unwrap_err();
        assert!(e.to_string().starts_with("SOFTVERBS_PCAP"), "{e}");
        assert_eq!(
            e,
            OptionsError::Capture {
                value: "/tmp/%x".into(),
                reason: TemplateError::UnknownEscape { after: Some('x') },
            }
        );
        // The template error is the source, for reports that print the chain.
        let source = std::error::Error::source(&e).expect("a source");
        assert!(source.to_string().contains("\"%x\""), "{source}");
    }
}

//! Packet capture: every datagram a driver sends and receives, to a pcap file.
//!
//! Owns the capture file of one driver ([`Capture`]) and the expansion of the
//! `SOFTVERBS_PCAP` path template ([`capture_path`]). Each UDP payload is
//! wrapped in Ethernet / IPv4 (or IPv6) / UDP with the real addresses and ports
//! (IP ID 0 and DF, as the socket sends them; UDP checksum 0, fake MACs), so
//! Wireshark and tshark decode it as RoCEv2.
//!
//! What is recorded, and when:
//! - sent datagrams *after* transmit faults, when the kernel took them (what
//!   really went on the wire; a datagram lost by fault injection is absent, a
//!   corrupted one appears corrupted);
//! - received datagrams as read from the socket, *before* receive faults;
//! - datagrams of the loopback shortcut once, as sent;
//! - RAW_PACKET QPs' Ethernet frames (`crate::raw`) as they are — a pcap
//!   record is an Ethernet frame — at the same two points: sent ones after
//!   the transmit faults, received ones as read, before the receive faults.
//!
//! The file is flushed when the progress thread goes idle and at least every
//! [`FLUSH_EVERY`] while busy, so it is readable while the device runs and
//! complete once the device is closed. A write error stops the capture (logged
//! once, counted in `pcap_errors`); traffic goes on.
//!
//! Two drivers of one process may not write the same file: the second one's
//! start fails with a message that points at the `%d` substitution.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, BufWriter};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use wire::pcap::PcapWriter;
use wire::Encap;

use crate::clock::Nanos;
use crate::counters::Counters;

/// Longest time captured records wait in the buffer while the thread is busy.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// Expands a `SOFTVERBS_PCAP` template: `%p` becomes the process ID, `%d` the
/// device name, `%%` a percent sign. Any other `%` sequence is an error.
pub fn capture_path(template: &str, device: &str) -> Result<PathBuf, TemplateError> {
    let mut out = String::with_capacity(template.len() + 16);
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('p') => out.push_str(&std::process::id().to_string()),
            Some('d') => out.push_str(device),
            Some('%') => out.push('%'),
            other => return Err(TemplateError::UnknownEscape { after: other }),
        }
    }
    if out.is_empty() {
        return Err(TemplateError::Empty);
    }
    Ok(PathBuf::from(out))
}

/// Why a `SOFTVERBS_PCAP` template cannot be expanded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// A `%` followed by something other than `p`, `d` or `%`.
    #[error("{:?} is not %p (process ID), %d (device name) or %%", escape(*.after))]
    UnknownEscape {
        /// The character after the `%`; `None` at the end of the template.
        after: Option<char>,
    },
    /// The template expands to the empty path.
    #[error("empty path")]
    Empty,
}

/// The escape sequence as written: `%` and the character after it, if any.
fn escape(after: Option<char>) -> String {
    after.map_or("%".to_string(), |c| format!("%{c}"))
}

/// Paths of the captures open in this process (two drivers must not share a file).
fn open_paths() -> &'static Mutex<HashSet<PathBuf>> {
    static OPEN: OnceLock<Mutex<HashSet<PathBuf>>> = OnceLock::new();
    OPEN.get_or_init(Default::default)
}

/// One driver's capture file. See the module doc.
pub(crate) struct Capture {
    writer: PcapWriter<BufWriter<File>>,
    /// Registered path (absolute).
    key: PathBuf,
    /// Wall-clock microseconds at driver time 0.
    origin_us: u64,
    last_flush: Nanos,
    dirty: bool,
    broken: bool,
}

impl Capture {
    /// Creates (truncates) `path` and writes the pcap header. `origin` is the
    /// wall-clock time of the driver clock's zero.
    pub(crate) fn create(path: &Path, origin: SystemTime) -> io::Result<Capture> {
        let key = std::path::absolute(path)?;
        if !open_paths()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone())
        {
            let msg = format!(
                "{} is already the capture file of another device in this process (put %d, the device name, in SOFTVERBS_PCAP)",
                path.display()
            );
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, msg));
        }
        let writer = File::create(path)
            .and_then(|f| PcapWriter::new(BufWriter::with_capacity(1 << 16, f)))
            .and_then(|mut w| w.flush().map(|()| w));
        let writer = match writer {
            Ok(w) => w,
            Err(e) => {
                unregister(&key);
                let msg = format!("cannot create capture file {}: {e}", path.display());
                return Err(io::Error::new(e.kind(), msg));
            }
        };
        let origin_us = origin
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        Ok(Capture {
            writer,
            key,
            origin_us,
            last_flush: 0,
            dirty: false,
            broken: false,
        })
    }

    /// Records one datagram `from` → `to`.
    pub(crate) fn record(
        &mut self,
        now: Nanos,
        from: SocketAddr,
        to: SocketAddr,
        payload: &[u8],
        c: &Counters,
    ) {
        if self.broken {
            return;
        }
        let Some(mut encap) = Encap::from_addrs(
            from.ip().to_canonical(),
            to.ip().to_canonical(),
            from.port(),
        ) else {
            Counters::add(&c.pcap_errors, 1);
            return; // one IPv4, one IPv6 address: no frame can hold both
        };
        encap.dst_port = to.port();
        let ts_us = self.origin_us + now / 1000;
        let result = self.writer.write_transport(ts_us, &encap, payload);
        self.recorded(now, result, c);
    }

    /// Records one Ethernet frame of a RAW_PACKET QP, as it is.
    pub(crate) fn record_frame(&mut self, now: Nanos, frame: &[u8], c: &Counters) {
        if self.broken {
            return;
        }
        let ts_us = self.origin_us + now / 1000;
        let result = self.writer.write_frame(ts_us, frame);
        self.recorded(now, result, c);
    }

    fn recorded(&mut self, now: Nanos, result: io::Result<()>, c: &Counters) {
        self.check(result, c);
        if !self.broken {
            Counters::add(&c.pcap_records, 1);
            self.dirty = true;
            if now.saturating_sub(self.last_flush) >= FLUSH_EVERY.as_nanos() as u64 {
                self.flush(now, c);
            }
        }
    }

    /// Writes buffered records to the file (idle time, or every [`FLUSH_EVERY`]).
    pub(crate) fn flush(&mut self, now: Nanos, c: &Counters) {
        self.last_flush = now;
        if self.dirty && !self.broken {
            self.dirty = false;
            let result = self.writer.flush();
            self.check(result, c);
        }
    }

    fn check(&mut self, result: io::Result<()>, c: &Counters) {
        if let Err(e) = result {
            Counters::add(&c.pcap_errors, 1);
            self.broken = true;
            tracing::error!(path = %self.key.display(), error = %e, "packet capture failed; stopped");
        }
    }
}

fn unregister(key: &Path) {
    open_paths()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(key);
}

impl Drop for Capture {
    fn drop(&mut self) {
        if !self.broken {
            if let Err(e) = self.writer.flush() {
                tracing::error!(path = %self.key.display(), error = %e, "packet capture: final flush failed");
            }
        }
        unregister(&self.key);
    }
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture")
            .field("path", &self.key)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_templates() {
        let pid = std::process::id().to_string();
        assert_eq!(
            capture_path("/tmp/a.pcap", "dev").unwrap(),
            PathBuf::from("/tmp/a.pcap")
        );
        assert_eq!(
            capture_path("/tmp/%d-%p.pcap", "softverbs0").unwrap(),
            PathBuf::from(format!("/tmp/softverbs0-{pid}.pcap"))
        );
        assert_eq!(capture_path("x%%y", "d").unwrap(), PathBuf::from("x%y"));
        let e = capture_path("x%q", "d").unwrap_err();
        assert_eq!(e, TemplateError::UnknownEscape { after: Some('q') });
        assert!(e.to_string().contains("%q"), "{e}");
        let e = capture_path("x%", "d").unwrap_err();
        assert_eq!(e, TemplateError::UnknownEscape { after: None });
        assert!(e.to_string().contains("\"%\""), "{e}");
        assert_eq!(capture_path("", "d").unwrap_err(), TemplateError::Empty);
    }

    #[test]
    fn records_are_readable_frames_and_paths_are_exclusive() {
        let dir = std::env::temp_dir().join(format!("sv-io-capture-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.pcap");
        let c = Counters::default();
        let mut cap = Capture::create(&path, UNIX_EPOCH + Duration::from_secs(10)).unwrap();
        let again = Capture::create(&path, SystemTime::now()).unwrap_err();
        assert!(again.to_string().contains("%d"), "{again}");
        let a: SocketAddr = "127.0.0.1:4791".parse().unwrap();
        let b: SocketAddr = "[::ffff:127.0.0.2]:5000".parse().unwrap();
        let v6: SocketAddr = "[::1]:4791".parse().unwrap();
        cap.record(1_500_000, a, b, &[7; 30], &c);
        cap.record(2_000_000, a, v6, &[7; 30], &c); // mixed families: not recorded
        cap.flush(2_000_000, &c);
        let file = std::fs::read(&path).unwrap();
        let records: Vec<_> = wire::pcap::PcapReader::new(&file).unwrap().collect();
        assert_eq!(records.len(), 1);
        let r = records[0].as_ref().unwrap();
        assert_eq!((r.ts_sec, r.ts_frac), (10, 1500));
        let (encap, payload) = wire::encap::parse_frame(r.data).unwrap();
        assert_eq!(payload, &[7; 30]);
        assert_eq!((encap.src_port, encap.dst_port), (4791, 5000));
        let s = c.snapshot();
        assert_eq!((s.pcap_records, s.pcap_errors), (1, 1));
        drop(cap);
        // Closed: the path is free again.
        drop(Capture::create(&path, SystemTime::now()).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

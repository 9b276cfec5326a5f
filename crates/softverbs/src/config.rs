//! Devices and their configuration.
//!
//! One device per process by default, named `softverbs0`, needing no setup: it
//! takes a loopback address of its own (`127.x.y.z`, derived from the process ID;
//! Linux routes all of 127.0.0.0/8 to loopback), so two programs on one host
//! each open the default device and reach each other by the GIDs they exchange,
//! as every RoCE application already does.
//!
//! Environment (the same names will be accepted in a config file):
//! - `SOFTVERBS_ADDR`: the device's address(es), comma-separated IPv4/IPv6; one
//!   GID each, index 0 first. Puts the device on a real interface.
//! - `SOFTVERBS_DEVICE`: the device name (default `softverbs0`).
//! - `SOFTVERBS_MTU`: the active MTU, 256..=4096 (default 4096 on loopback, 1024
//!   otherwise, which fits a 1500-byte Ethernet MTU).
//! - `SOFTVERBS_FAULTS`: faults injected into the device's datagrams, e.g.
//!   `loss=0.05,dup=0.01,reorder=0.02,delay=200us,corrupt=0.001,seed=7,dir=tx`
//!   (every key: [`sv_io::faults`]). Read by every device, including those made
//!   with [`Device::with_config`]; [`Device::with_faults`] overrides it.
//! - `SOFTVERBS_PCAP`: write every datagram the device sends and receives to
//!   this pcap file; `%p` becomes the process ID, `%d` the device name (needed
//!   when a process opens several devices). [`Device::with_capture`] overrides it.
//! - `SOFTVERBS_BUSY_POLL_US`: the progress thread's busy-poll window.
//! - `SOFTVERBS_SHM`: `0` turns the same-host path off (on by default:
//!   packets to another process of this host go through shared-memory
//!   rings, spec/same-host.md); [`Device::with_same_host`] overrides it.
//! - `SOFTVERBS_LOG`: `error`, `warn`, `info`, `debug` or `trace`: the level
//!   of the log the `softverbs` command and the drop-in libibverbs send to
//!   stderr ([`log_level_from_env`]; a library never installs a logger itself).
//!
//! Bad values are refused when the device opens ([`Error::Config`], naming the
//! variable and the key). Contexts opened on the same device in one process
//! share one engine: the settings of the first open apply.

use crate::context::Context;
use crate::device::Shared;
use crate::error::{ConfigError, Error};
use proto::device::{DeviceConfig, DeviceInfo};
use proto::Mtu;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use sv_io::{DriverOptions, FaultConfig};

/// A device that can be opened.
#[derive(Debug, Clone)]
pub struct Device {
    config: DeviceConfig,
    /// Overrides `SOFTVERBS_FAULTS` when set.
    faults: Option<FaultConfig>,
    /// Overrides `SOFTVERBS_PCAP` when set (`Some(None)`: no capture).
    capture: Option<Option<PathBuf>>,
    /// Overrides `SOFTVERBS_SHM` when set.
    same_host: Option<bool>,
}

/// The devices of this process: one, configured from the environment.
pub fn devices() -> Result<Vec<Device>, Error> {
    Ok(vec![Device::with_config(config_from_env()?)])
}

impl Device {
    /// A device with an explicit configuration (tests, embedding). Fault
    /// injection and capture still come from the environment unless set with
    /// [`Device::with_faults`] and [`Device::with_capture`].
    pub fn with_config(config: DeviceConfig) -> Device {
        Device {
            config,
            faults: None,
            capture: None,
            same_host: None,
        }
    }

    /// Injects these faults instead of `SOFTVERBS_FAULTS` (parse one with
    /// `"loss=0.05,seed=7".parse()`; `FaultConfig::default()` means none).
    pub fn with_faults(mut self, faults: FaultConfig) -> Device {
        self.faults = Some(faults);
        self
    }

    /// Captures to `path` (no `%` expansion; `None`: no capture) instead of `SOFTVERBS_PCAP`.
    pub fn with_capture(mut self, path: Option<PathBuf>) -> Device {
        self.capture = Some(path);
        self
    }

    /// Turns the same-host path (`sv_io`'s shared-memory rings between
    /// processes of this host, spec/same-host.md) on or off instead of
    /// `SOFTVERBS_SHM`.
    pub fn with_same_host(mut self, on: bool) -> Device {
        self.same_host = Some(on);
        self
    }

    /// The device name (`ibv_get_device_name`).
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The configuration.
    pub fn config(&self) -> &DeviceConfig {
        &self.config
    }

    /// What the device reports to the query verbs and sysfs (limits, port, GID
    /// table, identity), without opening it: the same description its engine uses.
    pub fn info(&self) -> DeviceInfo {
        let mut info = DeviceInfo::new(&self.config);
        info.port.set_link(crate::device::link_rate(&self.config));
        info
    }

    /// `ibv_open_device`: a new context on this device.
    /// If the device is already open in this process, the new context shares
    /// it (and its fault and capture settings).
    pub fn open(&self) -> Result<Context, Error> {
        Context::new(self.shared()?)
    }

    /// Driver options: the environment, except what this device overrides
    /// (an overridden variable is not even parsed).
    fn driver_options(&self) -> Result<DriverOptions, Error> {
        let overridden = |name: &str| {
            (name == DriverOptions::FAULTS_ENV && self.faults.is_some())
                || (name == DriverOptions::PCAP_ENV && self.capture.is_some())
        };
        let mut opts = DriverOptions::default();
        opts.apply_env(&self.config.name, |name| {
            if overridden(name) {
                None
            } else {
                std::env::var(name).ok()
            }
        })
        .map_err(|source| ConfigError::Driver {
            device: self.config.name.clone(),
            source,
        })?;
        if let Some(f) = self.faults {
            opts.faults = f;
        }
        if let Some(c) = &self.capture {
            opts.capture.clone_from(c);
        }
        if let Some(on) = self.same_host {
            opts.shm = on;
        }
        Ok(opts)
    }

    fn shared(&self) -> Result<Arc<Shared>, Error> {
        let config = &self.config;
        let mut open = OPEN
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(s) = open.get(&config.name).and_then(Weak::upgrade) {
            return Ok(s);
        }
        let opts = self.driver_options()?;
        let s = Arc::new(Shared::start(config, &opts).map_err(|e| start_error(config, e))?);
        open.insert(config.name.clone(), Arc::downgrade(&s));
        Ok(s)
    }
}

/// The devices open in this process, by name (a second open shares one).
static OPEN: OnceLock<Mutex<HashMap<String, Weak<Shared>>>> = OnceLock::new();

/// Sends what each open device has yet to send, for a process about to
/// exit without closing its devices: what a poll left to the program's
/// next post or poll (an ACK a poll deferred, spec/rc-reliability.md §3),
/// and what its progress thread took in a pass it has not finished (the
/// ACK of a request whose completion the program may have seen already)
/// or has ready for its next. The drop-in library calls it from `atexit`.
/// The exiting thread's thread-local state is gone by then, so it
/// transmits nothing itself: it ends each such device's polling lease and
/// wakes its progress thread, which sends, and waits until that thread's
/// pass has ended (50 ms at most: on a busy machine a woken thread may
/// wait a time slice or more for a core). Does nothing while another
/// thread holds the registry (it never waits for it). How many devices had
/// something a poll left.
pub fn flush_open_devices() -> usize {
    use std::time::{Duration, Instant};
    let (pending, left): (Vec<Arc<Shared>>, usize) = {
        let Some(open) = OPEN.get().and_then(|m| m.try_lock().ok()) else {
            return 0;
        };
        let mut left = 0;
        let pending = open
            .values()
            .filter_map(Weak::upgrade)
            .filter(|s| match s.driver.hand_work_to_progress() {
                Some(poll_left) => {
                    left += usize::from(poll_left);
                    true
                }
                None => false,
            })
            .collect();
        (pending, left)
    };
    let deadline = Instant::now() + Duration::from_millis(50);
    let wait = |done: &dyn Fn() -> bool| {
        while !done() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(50));
        }
    };
    wait(&|| pending.iter().all(|s| !s.driver.has_unsent()));
    // The pass that took it has sent it once it has ended (a pass ends
    // after its transmit): one more pass boundary.
    let passes: Vec<u64> = pending.iter().map(|s| s.driver.counters().passes).collect();
    for s in &pending {
        s.driver.waker().ring();
    }
    let moved = || {
        let now = pending.iter().map(|s| s.driver.counters().passes);
        now.zip(&passes).all(|(n, &p)| n > p)
    };
    wait(&moved);
    left
}

fn start_error(config: &DeviceConfig, e: std::io::Error) -> Error {
    let addr = config
        .addrs
        .first()
        .map_or("none".to_string(), std::string::ToString::to_string);
    let hint = match config.addrs.first() {
        Some(ip) if !crate::device::bindable(*ip) => {
            " — that address is not on this host (SOFTVERBS_ADDR must name a local address)"
        }
        _ => "",
    };
    Error::Config(ConfigError::Start {
        device: config.name.clone(),
        addr,
        source: e.into(),
        hint,
    })
}

fn config_from_env() -> Result<DeviceConfig, Error> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let name = var("SOFTVERBS_DEVICE").unwrap_or_else(|| "softverbs0".to_string());
    let addrs = match var("SOFTVERBS_ADDR") {
        Some(list) => parse_addrs(&list)?,
        None => vec![IpAddr::V4(process_loopback_addr(std::process::id()))],
    };
    let default_mtu = if addrs.iter().all(IpAddr::is_loopback) {
        Mtu::Mtu4096
    } else {
        Mtu::Mtu1024
    };
    let active_mtu = match var("SOFTVERBS_MTU") {
        Some(m) => parse_mtu(&m)?,
        None => default_mtu,
    };
    Ok(DeviceConfig {
        name,
        addrs,
        active_mtu,
    })
}

fn parse_addrs(list: &str) -> Result<Vec<IpAddr>, Error> {
    list.split(',')
        .map(|a| {
            a.trim().parse::<IpAddr>().map_err(|_| {
                Error::Config(ConfigError::Addr {
                    value: a.to_string(),
                })
            })
        })
        .collect()
}

fn parse_mtu(s: &str) -> Result<Mtu, Error> {
    let bytes: u32 = s.trim().parse().unwrap_or(0);
    (1..=5)
        .filter_map(Mtu::from_raw)
        .find(|m| m.bytes() == bytes)
        .ok_or_else(|| {
            Error::Config(ConfigError::Mtu {
                value: s.to_string(),
            })
        })
}

/// The level `SOFTVERBS_LOG` asks for; `None` when it is unset.
pub fn log_level_from_env() -> Result<Option<tracing::Level>, Error> {
    let Ok(value) = std::env::var("SOFTVERBS_LOG") else {
        return Ok(None);
    };
    value
        .trim()
        .parse()
        .map(Some)
        .map_err(|_| Error::Config(ConfigError::Log { value }))
}

/// This process's own loopback address: `127.(1 + pid>>16).(pid>>8).(pid)`.
/// Process IDs are below 2^22 on Linux, so every process gets a distinct one.
pub fn process_loopback_addr(pid: u32) -> Ipv4Addr {
    Ipv4Addr::new(127, (1 + (pid >> 16)) as u8, (pid >> 8) as u8, pid as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_addresses_are_distinct_and_never_127_0() {
        let a = process_loopback_addr(1);
        let b = process_loopback_addr(65537);
        assert_ne!(a, b);
        assert!(a.is_loopback() && b.is_loopback());
        assert_ne!(a.octets()[1], 0);
        assert_eq!(
            process_loopback_addr(0x3f_ffff).octets(),
            [127, 64, 255, 255]
        );
    }

    #[test]
    fn parse_config_values() {
        assert_eq!(parse_mtu("2048").unwrap(), Mtu::Mtu2048);
        assert!(parse_mtu("1500").is_err());
        assert_eq!(parse_addrs("10.0.0.1, ::1").unwrap().len(), 2);
        assert!(parse_addrs("nope")
            .unwrap_err()
            .to_string()
            .contains("SOFTVERBS_ADDR"));
    }
}

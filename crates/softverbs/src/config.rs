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
//!
//! Contexts opened on the same device in one process share one engine.

use crate::context::Context;
use crate::error::Error;
use proto::device::DeviceConfig;
use crate::device::Shared;
use proto::Mtu;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// A device that can be opened.
#[derive(Debug, Clone)]
pub struct Device {
    config: DeviceConfig,
}

/// The devices of this process: one, configured from the environment.
pub fn devices() -> Result<Vec<Device>, Error> {
    Ok(vec![Device { config: config_from_env()? }])
}

impl Device {
    /// A device with an explicit configuration (tests, embedding).
    pub fn with_config(config: DeviceConfig) -> Device {
        Device { config }
    }

    /// The device name (`ibv_get_device_name`).
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The configuration.
    pub fn config(&self) -> &DeviceConfig {
        &self.config
    }

    /// `ibv_open_device`: a new context on this device.
    pub fn open(&self) -> Result<Context, Error> {
        Ok(Context::new(shared_for(&self.config)?))
    }
}

fn shared_for(config: &DeviceConfig) -> Result<Arc<Shared>, Error> {
    static OPEN: OnceLock<Mutex<HashMap<String, Weak<Shared>>>> = OnceLock::new();
    let mut open = OPEN.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    if let Some(s) = open.get(&config.name).and_then(Weak::upgrade) {
        return Ok(s);
    }
    let s = Arc::new(Shared::start(config).map_err(|e| start_error(config, e))?);
    open.insert(config.name.clone(), Arc::downgrade(&s));
    Ok(s)
}

fn start_error(config: &DeviceConfig, e: std::io::Error) -> Error {
    let addr = config.addrs.first().map_or("none".to_string(), |a| a.to_string());
    let hint = match config.addrs.first() {
        Some(ip) if !crate::device::bindable(*ip) => {
            " — that address is not on this host (SOFTVERBS_ADDR must name a local address)"
        }
        _ => " — is another softverbs device already using this address? (set SOFTVERBS_ADDR)",
    };
    Error::Config(format!("cannot start device {} on {addr} port 4791: {e}{hint}", config.name))
}

fn config_from_env() -> Result<DeviceConfig, Error> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let name = var("SOFTVERBS_DEVICE").unwrap_or_else(|| "softverbs0".to_string());
    let addrs = match var("SOFTVERBS_ADDR") {
        Some(list) => parse_addrs(&list)?,
        None => vec![IpAddr::V4(process_loopback_addr(std::process::id()))],
    };
    let default_mtu = if addrs.iter().all(IpAddr::is_loopback) { Mtu::Mtu4096 } else { Mtu::Mtu1024 };
    let active_mtu = match var("SOFTVERBS_MTU") {
        Some(m) => parse_mtu(&m)?,
        None => default_mtu,
    };
    Ok(DeviceConfig { name, addrs, active_mtu })
}

fn parse_addrs(list: &str) -> Result<Vec<IpAddr>, Error> {
    list.split(',')
        .map(|a| {
            a.trim().parse::<IpAddr>().map_err(|_| {
                Error::Config(format!("SOFTVERBS_ADDR: {a:?} is not an IPv4 or IPv6 address"))
            })
        })
        .collect()
}

fn parse_mtu(s: &str) -> Result<Mtu, Error> {
    let bytes: u32 = s.trim().parse().unwrap_or(0);
    (1..=5)
        .filter_map(Mtu::from_raw)
        .find(|m| m.bytes() == bytes)
        .ok_or_else(|| Error::Config(format!("SOFTVERBS_MTU: {s:?} is not 256, 512, 1024, 2048 or 4096")))
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
        assert_eq!(process_loopback_addr(0x3f_ffff).octets(), [127, 64, 255, 255]);
    }

    #[test]
    fn parse_config_values() {
        assert_eq!(parse_mtu("2048").unwrap(), Mtu::Mtu2048);
        assert!(parse_mtu("1500").is_err());
        assert_eq!(parse_addrs("10.0.0.1, ::1").unwrap().len(), 2);
        assert!(parse_addrs("nope").unwrap_err().to_string().contains("SOFTVERBS_ADDR"));
    }
}

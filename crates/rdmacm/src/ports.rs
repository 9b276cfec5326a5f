//! The port table of the RDMA port spaces (pure data, no I/O): who holds
//! which port, and the kernel's rules for sharing one (spec/rdmacm-abi.md
//! §3.3, kernel cma.c `cma_check_port`, `cma_alloc_any_port`).

use std::collections::BTreeMap;
use std::net::IpAddr;

/// One holder of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// Who holds it (the id's address).
    pub key: usize,
    /// The bound address (unspecified: the wildcard).
    pub addr: IpAddr,
    /// `RDMA_OPTION_ID_REUSEADDR`.
    pub reuse: bool,
    /// `RDMA_OPTION_ID_AFONLY` (or its default).
    pub afonly: bool,
    /// The holder listens.
    pub listening: bool,
}

/// Why a port cannot be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortError {
    /// Another id holds the port on the same address.
    InUse { port: u16, holder: IpAddr },
    /// Another id holds the port and one of the two addresses is the wildcard.
    WildcardOverlap { port: u16, holder: IpAddr },
    /// No free port in the ephemeral range.
    Exhausted { low: u16, high: u16 },
}

impl PortError {
    /// The errno the kernel returns for it.
    pub fn errno(&self) -> i32 {
        match self {
            PortError::InUse { .. } => libc::EADDRINUSE,
            PortError::WildcardOverlap { .. } | PortError::Exhausted { .. } => libc::EADDRNOTAVAIL,
        }
    }
}

impl std::fmt::Display for PortError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PortError::InUse { port, holder } => {
                write!(f, "port {port} is already bound to {holder} in this port space")
            }
            PortError::WildcardOverlap { port, holder } => write!(
                f,
                "port {port} is already bound to {holder} in this port space, and one of the two addresses is the wildcard"
            ),
            PortError::Exhausted { low, high } => write!(f, "no free port in {low}..={high}"),
        }
    }
}

/// Ports held per (port space, port).
#[derive(Debug, Default)]
pub struct PortTable {
    held: BTreeMap<(u32, u16), Vec<Owner>>,
}

impl PortTable {
    /// Whether `new` may share `port` of `ps` with its holders (`cma_check_port`).
    pub fn check(&self, ps: u32, port: u16, new: &Owner) -> Result<(), PortError> {
        let Some(owners) = self.held.get(&(ps, port)) else {
            return Ok(());
        };
        for cur in owners.iter().filter(|c| c.key != new.key) {
            if !cur.listening && new.reuse && cur.reuse {
                continue;
            }
            if new.afonly && cur.afonly && new.addr.is_ipv4() != cur.addr.is_ipv4() {
                continue;
            }
            if new.addr.is_unspecified() || cur.addr.is_unspecified() {
                return Err(PortError::WildcardOverlap {
                    port,
                    holder: cur.addr,
                });
            }
            if new.addr == cur.addr {
                return Err(PortError::InUse {
                    port,
                    holder: cur.addr,
                });
            }
        }
        Ok(())
    }

    /// Takes `port` (0: a free port of `low..=high`, trying from `start`).
    pub fn bind(
        &mut self,
        ps: u32,
        port: u16,
        new: Owner,
        (low, high): (u16, u16),
        start: u16,
    ) -> Result<u16, PortError> {
        let port = if port != 0 {
            self.check(ps, port, &new)?;
            port
        } else {
            let n = u32::from(high - low) + 1;
            (0..n)
                .map(|i| low + ((u32::from(start.saturating_sub(low)) + i) % n) as u16)
                .find(|p| !self.held.contains_key(&(ps, *p)))
                .ok_or(PortError::Exhausted { low, high })?
        };
        self.held.entry((ps, port)).or_default().push(new);
        Ok(port)
    }

    /// Marks the holder `key` listening, after checking its port as the kernel
    /// does for a listener (`cma_bind_listen`: no REUSEADDR sharing).
    pub fn listen(&mut self, key: usize) -> Result<(), PortError> {
        let Some((&(ps, port), owners)) = self
            .held
            .iter()
            .find(|(_, o)| o.iter().any(|o| o.key == key))
        else {
            return Ok(());
        };
        let mut me = *owners.iter().find(|o| o.key == key).expect("found above");
        me.reuse = false;
        self.check(ps, port, &me)?;
        for o in self
            .held
            .get_mut(&(ps, port))
            .into_iter()
            .flatten()
            .filter(|o| o.key == key)
        {
            o.listening = true;
        }
        Ok(())
    }

    /// Marks the holder `key` not listening (a listen that failed).
    pub fn unlisten(&mut self, key: usize) {
        for o in self.held.values_mut().flatten().filter(|o| o.key == key) {
            o.listening = false;
        }
    }

    /// Gives back what `key` holds.
    pub fn release(&mut self, key: usize) {
        self.held.retain(|_, owners| {
            owners.retain(|o| o.key != key);
            !owners.is_empty()
        });
    }
}

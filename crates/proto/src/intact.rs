//! The peers a datagram reaches with its bytes intact: the driver names
//! them, and the QPs leave the ICRC of their RC, UC and XRC packets to
//! them uncomputed (spec/same-host.md §4, lever 2).
//!
//! A same-host ring carries a datagram from this engine's buffer to the
//! peer's engine with nothing in between that could change a byte, and a
//! peer that accepted the ring without faults or a capture of its own does
//! not check the ICRC of such datagrams (`Engine::handle_local_datagram`).
//! Computing it was a twentieth of a sending thread's time in a 64 KiB
//! stream. The driver names the peers it reaches so (an address and the
//! QPN range of the process there) and names them again when the set
//! changes; it names none while its own faults or capture are on.
//!
//! A datagram left unsealed that ends up on a socket after all (the ring
//! went down between the emit and the send) fails the peer's ICRC check
//! and is dropped, as a datagram lost on a link: RC retransmits it, sealed
//! once the driver has named the peer no more. UD (whose receivers always
//! check) and QP1 never leave it unsealed.
//!
//! Promise: a QP's lookup is one atomic load while the set is unchanged
//! (its answer is cached per QP, [`IntactCache`]); the set's lock is taken
//! only when the driver changed it since.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::lock::ReadMostly;
use crate::types::Gid;

/// A peer the driver reaches with intact datagrams: the QPs `qpns` at `ip`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntactPeer {
    /// The peer's address.
    pub ip: IpAddr,
    /// The QPNs the peer's process holds there (first, last).
    pub qpns: (u32, u32),
}

/// The set the driver named, and how many times it named one.
#[derive(Debug, Default)]
pub struct IntactPeers {
    generation: AtomicU64,
    peers: ReadMostly<Vec<IntactPeer>>,
}

/// A QP's last answer: for which set, destination and QPN.
#[derive(Debug, Clone, Copy, Default)]
pub struct IntactCache {
    generation: u64,
    to: Option<(Gid, u32)>,
    intact: bool,
}

impl IntactPeers {
    /// The driver names the peers (replacing the set named before).
    pub fn set(&self, peers: &[IntactPeer]) {
        let mut p = self.peers.write();
        p.clear();
        p.extend_from_slice(peers);
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Whether QP `qpn` at the peer of GID `gid` is reached with intact
    /// datagrams. The QP's cache is compared by the GID (two words, no
    /// address made: this is asked for every packet a QP sends); the
    /// address is made from it only when the answer is looked up.
    pub fn contains(&self, cache: &mut IntactCache, gid: Gid, qpn: u32) -> bool {
        let generation = self.generation.load(Ordering::Acquire);
        if generation == 0 {
            return false;
        }
        if cache.generation == generation && cache.to == Some((gid, qpn)) {
            return cache.intact;
        }
        let ip = gid.ip();
        let intact = self
            .peers
            .read()
            .iter()
            .any(|p| p.ip == ip && (p.qpns.0..=p.qpns.1).contains(&qpn));
        *cache = IntactCache {
            generation,
            to: Some((gid, qpn)),
            intact,
        };
        intact
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_peers_only_and_a_new_set_replaces_the_old() {
        let set = IntactPeers::default();
        let mut c = IntactCache::default();
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let gid = Gid::from(ip);
        assert!(!set.contains(&mut c, gid, 0x10005), "nothing named yet");
        set.set(&[IntactPeer {
            ip,
            qpns: (0x10000, 0x1ffff),
        }]);
        assert!(set.contains(&mut c, gid, 0x10005));
        assert!(set.contains(&mut c, gid, 0x10005), "from the cache");
        assert!(!set.contains(&mut c, gid, 0x20005), "another process's QP");
        let other = Gid::from("127.0.0.2".parse::<IpAddr>().unwrap());
        assert!(!set.contains(&mut c, other, 0x10005), "another address");
        assert!(set.contains(&mut c, gid, 0x10005), "the first again");
        set.set(&[]);
        assert!(!set.contains(&mut c, gid, 0x10005), "named no more");
    }
}

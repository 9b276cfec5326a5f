//! The port table's sharing rules (src/ports.rs, pure) against
//! spec/rdmacm-abi.md §3.3 (kernel cma.c `cma_check_port`, `cma_alloc_any_port`).

#[allow(dead_code)]
#[path = "../src/ports.rs"]
mod ports;

use ports::{Owner, PortError, PortTable};
use std::net::IpAddr;

const TCP: u32 = 0x0106;
const UDP: u32 = 0x0111;
const RANGE: (u16, u16) = (40000, 40003);

fn owner(key: usize, addr: &str) -> Owner {
    Owner {
        key,
        addr: addr.parse::<IpAddr>().unwrap(),
        reuse: false,
        afonly: true,
        listening: false,
    }
}

#[test]
fn the_same_address_and_port_is_in_use_and_another_address_shares_it() {
    let mut t = PortTable::default();
    assert_eq!(
        t.bind(TCP, 7471, owner(1, "127.0.0.2"), RANGE, 40000),
        Ok(7471)
    );
    let e = t
        .bind(TCP, 7471, owner(2, "127.0.0.2"), RANGE, 40000)
        .unwrap_err();
    assert!(matches!(e, PortError::InUse { port: 7471, .. }));
    assert_eq!(e.errno(), libc::EADDRINUSE);
    assert_eq!(
        t.bind(TCP, 7471, owner(3, "127.0.0.3"), RANGE, 40000),
        Ok(7471)
    );
    // Port spaces are separate.
    assert_eq!(
        t.bind(UDP, 7471, owner(4, "127.0.0.2"), RANGE, 40000),
        Ok(7471)
    );
}

#[test]
fn the_wildcard_overlaps_every_address() {
    let mut t = PortTable::default();
    t.bind(TCP, 7471, owner(1, "0.0.0.0"), RANGE, 40000)
        .unwrap();
    let e = t
        .bind(TCP, 7471, owner(2, "127.0.0.2"), RANGE, 40000)
        .unwrap_err();
    assert!(matches!(e, PortError::WildcardOverlap { .. }));
    assert_eq!(e.errno(), libc::EADDRNOTAVAIL);
    // AF-only holders of different families do not collide.
    assert_eq!(t.bind(TCP, 7471, owner(3, "::"), RANGE, 40000), Ok(7471));
}

#[test]
fn reuseaddr_shares_until_one_listens() {
    let mut t = PortTable::default();
    let reuse = |k, a| Owner {
        reuse: true,
        ..owner(k, a)
    };
    t.bind(TCP, 7471, reuse(1, "127.0.0.2"), RANGE, 40000)
        .unwrap();
    assert_eq!(
        t.bind(TCP, 7471, reuse(2, "127.0.0.2"), RANGE, 40000),
        Ok(7471)
    );
    // A listener may not share its port through REUSEADDR.
    assert!(matches!(t.listen(2), Err(PortError::InUse { .. })));
    t.release(1);
    t.listen(2).unwrap();
    t.unlisten(2);
    assert_eq!(
        t.bind(TCP, 7471, reuse(4, "127.0.0.2"), RANGE, 40000),
        Ok(7471),
        "a failed listen shares again"
    );
    t.release(4);
    t.listen(2).unwrap();
    assert!(
        t.bind(TCP, 7471, reuse(3, "127.0.0.2"), RANGE, 40000)
            .is_err(),
        "a listener's port is not shared"
    );
}

#[test]
fn ephemeral_ports_are_free_ones_of_the_range_and_run_out() {
    let mut t = PortTable::default();
    let got: Vec<u16> = (1..=4)
        .map(|k| t.bind(TCP, 0, owner(k, "127.0.0.2"), RANGE, 40002).unwrap())
        .collect();
    assert_eq!(
        got,
        vec![40002, 40003, 40000, 40001],
        "from the start port, wrapping in the range"
    );
    let e = t
        .bind(TCP, 0, owner(5, "127.0.0.2"), RANGE, 40000)
        .unwrap_err();
    assert_eq!(
        e,
        PortError::Exhausted {
            low: 40000,
            high: 40003
        }
    );
    assert_eq!(e.errno(), libc::EADDRNOTAVAIL);
    // A released port is free again; a port someone holds is never handed out.
    t.release(2);
    assert_eq!(
        t.bind(TCP, 0, owner(6, "127.0.0.9"), RANGE, 40000),
        Ok(40003)
    );
}

//! Flow rules from their C layout to a socket filter, run by the cBPF
//! interpreter of `filter::run` on frames built by hand (the values of
//! rdma-core's pyverbs flow tests).

use super::filter::{program, run};
use super::flow::{parse, FlowError};

const DST_MAC: [u8; 6] = [0x01, 0x50, 0x56, 0x19, 0x20, 0xa7];
const SRC_MAC: [u8; 6] = [0x24, 0x8a, 0x07, 0xa5, 0x28, 0xc8];
const FULL: [u8; 6] = [0xff; 6];

fn attr(kind: u32, flags: u32, port: u8, specs: &[Vec<u8>]) -> Vec<u8> {
    let mut a = Vec::new();
    a.extend(0u32.to_ne_bytes()); // comp_mask
    a.extend(kind.to_ne_bytes());
    let size: usize = 20 + specs.iter().map(Vec::len).sum::<usize>();
    a.extend((size as u16).to_ne_bytes());
    a.extend(0u16.to_ne_bytes()); // priority
    a.push(specs.len() as u8);
    a.push(port);
    a.extend([0, 0]);
    a.extend(flags.to_ne_bytes());
    for s in specs {
        a.extend(s);
    }
    a
}

fn spec(ty: u32, size: usize, val_at: usize, val: &[u8], mask_at: usize, mask: &[u8]) -> Vec<u8> {
    let mut s = vec![0u8; size];
    s[..4].copy_from_slice(&ty.to_ne_bytes());
    s[4..6].copy_from_slice(&(size as u16).to_ne_bytes());
    s[val_at..val_at + val.len()].copy_from_slice(val);
    s[mask_at..mask_at + mask.len()].copy_from_slice(mask);
    s
}

/// `ibv_flow_spec_eth`: dst, src, ether_type (BE), vlan_tag (BE).
fn eth(dst: [u8; 6], src: [u8; 6], ethertype: u16, mask_src: bool, mask_type: bool) -> Vec<u8> {
    let mut val = Vec::new();
    val.extend(dst);
    val.extend(src);
    val.extend(ethertype.to_be_bytes());
    val.extend([0, 0]);
    let mut mask = Vec::new();
    mask.extend(FULL);
    mask.extend(if mask_src { FULL } else { [0; 6] });
    mask.extend(if mask_type { [0xff, 0xff] } else { [0, 0] });
    mask.extend([0, 0]);
    spec(0x20, 40, 6, &val, 22, &mask)
}

fn eth_vlan(tci: u16) -> Vec<u8> {
    let mut s = spec(0x20, 40, 6, &[0; 16], 22, &[0; 16]);
    s[20..22].copy_from_slice(&tci.to_be_bytes());
    s[36..38].copy_from_slice(&0x0fffu16.to_be_bytes());
    s
}

fn ipv4_ext(src: [u8; 4], dst: [u8; 4], proto: u8) -> Vec<u8> {
    let mut val = Vec::new();
    val.extend(src);
    val.extend(dst);
    val.extend([proto, 0, 0, 0]);
    let mut mask = vec![0xff; 8];
    mask.extend([0xff, 0, 0, 0]);
    spec(0x32, 32, 8, &val, 20, &mask)
}

fn ipv6(src: [u8; 16], dst: [u8; 16]) -> Vec<u8> {
    let mut val = Vec::new();
    val.extend(src);
    val.extend(dst);
    let mask = vec![0xff; 32];
    spec(0x31, 88, 8, &val, 48, &mask)
}

fn l4(tcp: bool, src: u16, dst: u16) -> Vec<u8> {
    let mut val = Vec::new();
    val.extend(dst.to_be_bytes());
    val.extend(src.to_be_bytes());
    spec(if tcp { 0x40 } else { 0x41 }, 16, 6, &val, 10, &[0xff; 4])
}

const SRC4: [u8; 4] = [1, 1, 1, 1];
const DST4: [u8; 4] = [2, 2, 2, 2];
fn v6(b: u8) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[0] = b;
    a[15] = b;
    a
}

/// An Ethernet frame with an IPv4 (IHL `ihl`) or IPv6 header and a UDP/TCP
/// header with the given ports.
fn frame(dst: [u8; 6], src: [u8; 6], ipv6: bool, ihl: u8, proto: u8, ports: (u16, u16)) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend(dst);
    f.extend(src);
    if ipv6 {
        f.extend(0x86ddu16.to_be_bytes());
        let mut h = [0u8; 40];
        h[0] = 0x60;
        h[6] = proto;
        h[7] = 64;
        h[8..24].copy_from_slice(&v6(0xa0));
        h[24..40].copy_from_slice(&v6(0xb0));
        f.extend(h);
    } else {
        f.extend(0x0800u16.to_be_bytes());
        let mut h = vec![0u8; usize::from(ihl) * 4];
        h[0] = 0x40 | ihl;
        h[8] = 64;
        h[9] = proto;
        h[12..16].copy_from_slice(&SRC4);
        h[16..20].copy_from_slice(&DST4);
        f.extend(h);
    }
    f.extend(ports.0.to_be_bytes());
    f.extend(ports.1.to_be_bytes());
    f.extend([0u8; 20]);
    f
}

fn matches(specs: &[Vec<u8>], f: &[u8], vlan: Option<u16>) -> bool {
    let rule = parse(&attr(0, 0, 1, specs)).unwrap();
    run(&program(&[rule]).unwrap(), f, vlan) != 0
}

#[test]
fn eth_rule_matches_macs_and_ethertype() {
    let s = [eth(DST_MAC, SRC_MAC, 0x0800, true, true)];
    let f = frame(DST_MAC, SRC_MAC, false, 5, 17, (1234, 5678));
    assert!(matches(&s, &f, None));
    let mut other = f.clone();
    other[5] ^= 1; // another destination
    assert!(!matches(&s, &other, None));
    let mut other = f.clone();
    other[11] ^= 1; // another source
    assert!(!matches(&s, &other, None));
    let v6 = frame(DST_MAC, SRC_MAC, true, 5, 17, (1234, 5678));
    assert!(!matches(&s, &v6, None), "EtherType masked");
    // Source not masked: any source passes.
    let s = [eth(DST_MAC, [0; 6], 0, false, false)];
    let mut other = f.clone();
    other[6..12].copy_from_slice(&[9; 6]);
    assert!(matches(&s, &other, None));
}

#[test]
fn ipv4_rule_implies_its_ethertype_and_udp_ports_follow_the_ihl() {
    let s = [
        eth(DST_MAC, SRC_MAC, 0x0800, true, true),
        ipv4_ext(SRC4, DST4, 17),
        l4(false, 1234, 5678),
    ];
    for ihl in [5, 6, 15] {
        let f = frame(DST_MAC, SRC_MAC, false, ihl, 17, (1234, 5678));
        assert!(matches(&s, &f, None), "ihl {ihl}");
        // Ports swapped: the spec's { dst_port, src_port } order is not the header's.
        let f = frame(DST_MAC, SRC_MAC, false, ihl, 17, (5678, 1234));
        assert!(!matches(&s, &f, None), "ihl {ihl}");
    }
    let tcp = frame(DST_MAC, SRC_MAC, false, 5, 6, (1234, 5678));
    assert!(!matches(&s, &tcp, None));
    let mut f = frame(DST_MAC, SRC_MAC, false, 5, 17, (1234, 5678));
    f[14 + 16] = 3; // another destination address
    assert!(!matches(&s, &f, None));
}

#[test]
fn ipv6_and_tcp_rules() {
    let s = [
        eth(DST_MAC, SRC_MAC, 0x86dd, true, true),
        ipv6(v6(0xa0), v6(0xb0)),
        l4(true, 1234, 5678),
    ];
    let f = frame(DST_MAC, SRC_MAC, true, 5, 6, (1234, 5678));
    assert!(matches(&s, &f, None));
    let udp = frame(DST_MAC, SRC_MAC, true, 5, 17, (1234, 5678));
    assert!(!matches(&s, &udp, None));
    let mut f2 = f.clone();
    f2[14 + 24] = 0xb1;
    assert!(!matches(&s, &f2, None));
    // An L4 rule alone takes IPv4 and IPv6 alike.
    let s = [l4(false, 1234, 5678)];
    assert!(matches(&s, &udp, None));
    assert!(matches(
        &s,
        &frame(DST_MAC, SRC_MAC, false, 5, 17, (1234, 5678)),
        None
    ));
    assert!(!matches(&s, &f, None));
    // A short frame of another type is refused, not read past its end.
    let arp = [DST_MAC.as_slice(), &SRC_MAC, &[0x08, 0x06], &[0; 28]].concat();
    assert!(!matches(&s, &arp, None));
}

#[test]
fn vlan_rule_reads_the_tag_from_the_metadata() {
    let s = [eth_vlan(0x0123)];
    let f = frame(DST_MAC, SRC_MAC, false, 5, 17, (1, 2));
    assert!(matches(&s, &f, Some(0x0123)));
    assert!(
        matches(&s, &f, Some(0xe123)),
        "priority bits are not in the mask"
    );
    assert!(!matches(&s, &f, Some(0x0124)));
    assert!(!matches(&s, &f, None));
}

#[test]
fn several_rules_any_one_matches_and_none_drops_all() {
    let r1 = parse(&attr(0, 0, 1, &[eth(DST_MAC, SRC_MAC, 0, false, false)])).unwrap();
    let r2 = parse(&attr(0, 0, 1, &[l4(false, 7, 8)])).unwrap();
    let prog = program(&[r1, r2]).unwrap();
    let other_mac = [0x02, 0, 0, 0, 0, 1];
    assert_ne!(
        run(&prog, &frame(DST_MAC, SRC_MAC, false, 5, 6, (1, 2)), None),
        0
    );
    assert_ne!(
        run(
            &prog,
            &frame(other_mac, SRC_MAC, false, 5, 17, (7, 8)),
            None
        ),
        0
    );
    assert_eq!(
        run(
            &prog,
            &frame(other_mac, SRC_MAC, false, 5, 17, (7, 9)),
            None
        ),
        0
    );
    let none = program(&[]).unwrap();
    assert_eq!(
        run(&none, &frame(DST_MAC, SRC_MAC, false, 5, 17, (7, 8)), None),
        0
    );
    let sniffer = parse(&attr(3, 0, 1, &[])).unwrap();
    let all = program(&[sniffer]).unwrap();
    assert_ne!(run(&all, &[0u8; 14], None), 0);
}

#[test]
fn refusals_name_the_reason_and_errno() {
    let e = |a: Vec<u8>| parse(&a).unwrap_err();
    let eth_ok = eth(DST_MAC, SRC_MAC, 0, false, false);
    assert!(matches!(
        e(attr(0, 0, 2, std::slice::from_ref(&eth_ok))),
        FlowError::Invalid { .. }
    ));
    let egress = e(attr(0, 1 << 2, 1, std::slice::from_ref(&eth_ok)));
    assert_eq!(egress.errno(), libc::EOPNOTSUPP, "{egress}");
    assert_eq!(e(attr(1, 0, 1, &[])).errno(), libc::EOPNOTSUPP);
    let vxlan = spec(0x50, 16, 8, &[0; 4], 12, &[0xff; 4]);
    let v = e(attr(0, 0, 1, &[vxlan]));
    assert_eq!(v.errno(), libc::EOPNOTSUPP);
    assert!(v.to_string().contains("0x50"), "{v}");
    let inner = spec(0x20 | 0x100, 40, 6, &[0; 16], 22, &[0; 16]);
    assert_eq!(e(attr(0, 0, 1, &[inner])).errno(), libc::EOPNOTSUPP);
    let mut short = eth_ok.clone();
    short[4..6].copy_from_slice(&38u16.to_ne_bytes());
    short.truncate(38);
    assert_eq!(e(attr(0, 0, 1, &[short])).errno(), libc::EINVAL);
    let two = e(attr(0, 0, 1, &[eth_ok.clone(), eth_ok.clone()]));
    assert_eq!(two.errno(), libc::EINVAL, "{two}");
    let mut past = attr(0, 0, 1, &[eth_ok]);
    past[12] = 2; // num_of_specs larger than what follows
    assert_eq!(e(past).errno(), libc::EINVAL);
    // DONT_TRAP is accepted.
    assert!(parse(&attr(0, 1 << 1, 1, &[])).is_ok());
}

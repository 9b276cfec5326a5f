//! `ibv_create_flow` steering rules, read from their C layout
//! (`struct ibv_flow_attr` followed by `num_of_specs` specs, each
//! `{ u32 type; u16 size; val; mask }`, values in network byte order), and
//! turned into masked comparisons on the bytes of a received frame.
//!
//! Offered (spec/raw-packet.md §3): attribute types NORMAL and SNIFFER; the
//! flag DONT_TRAP (every QP whose rule matches gets its own copy anyway);
//! specs ETH (dst/src MAC, EtherType, VLAN TCI), IPV4 and IPV4_EXT (addresses,
//! protocol, TOS, TTL), IPV6 (addresses, traffic class, flow label, next
//! header, hop limit) and TCP/UDP (ports). Everything else is refused with a
//! reason: `EOPNOTSUPP` for what verbs defines and this device does not do,
//! `EINVAL` for a malformed rule.

/// `struct ibv_flow_attr`'s size: the specs follow it.
pub const FLOW_ATTR_LEN: usize = 20;
/// The largest spec this parser reads (`struct ibv_flow_spec_ipv6`).
pub const MAX_SPEC_LEN: usize = 88;

const ATTR_NORMAL: u32 = 0x0;
const ATTR_ALL_DEFAULT: u32 = 0x1;
const ATTR_MC_DEFAULT: u32 = 0x2;
const ATTR_SNIFFER: u32 = 0x3;
const FLAG_DONT_TRAP: u32 = 1 << 1;
const SPEC_ETH: u32 = 0x20;
const SPEC_IPV4: u32 = 0x30;
const SPEC_IPV6: u32 = 0x31;
const SPEC_IPV4_EXT: u32 = 0x32;
const SPEC_TCP: u32 = 0x40;
const SPEC_UDP: u32 = 0x41;
const SPEC_INNER: u32 = 0x100;

const ETHERTYPE_IPV4: u32 = 0x0800;
const ETHERTYPE_IPV6: u32 = 0x86dd;
/// Where the network header starts: the kernel hands a packet socket (and
/// its filter) received frames with any VLAN tag already taken out into the
/// packet's metadata.
const L3: u32 = 14;

/// Why a rule was refused. `errno()` is what `ibv_create_flow` sets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlowError {
    /// Verbs defines it; this device does not offer it.
    #[error("{what} is not supported by softverbs flow steering (spec/raw-packet.md §3)")]
    Unsupported {
        /// What was asked for.
        what: String,
    },
    /// The rule is malformed.
    #[error("invalid flow rule: {what}")]
    Invalid {
        /// What is wrong.
        what: String,
    },
}

impl FlowError {
    /// `EOPNOTSUPP` or `EINVAL`.
    pub fn errno(&self) -> i32 {
        match self {
            FlowError::Unsupported { .. } => libc::EOPNOTSUPP,
            FlowError::Invalid { .. } => libc::EINVAL,
        }
    }
}

fn unsupported(what: impl Into<String>) -> FlowError {
    FlowError::Unsupported { what: what.into() }
}

fn invalid(what: impl Into<String>) -> FlowError {
    FlowError::Invalid { what: what.into() }
}

/// Where a comparison's offset counts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Base {
    /// The frame's first byte.
    Frame,
    /// The IPv4 payload (after the header's IHL × 4 bytes).
    Ipv4Payload,
    /// The VLAN TCI in the packet's metadata (`SKF_AD_VLAN_TAG`).
    VlanTci,
    /// Whether the packet had a VLAN tag (`SKF_AD_VLAN_TAG_PRESENT`).
    VlanPresent,
}

/// One comparison: `(load(base + off, width) & mask) == value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Check {
    /// Where `off` counts from.
    pub base: Base,
    /// Byte offset.
    pub off: u32,
    /// 1, 2 or 4 bytes, big-endian.
    pub width: u8,
    /// Bits compared.
    pub mask: u32,
    /// Their value.
    pub value: u32,
}

/// A parsed rule: the frame matches if every check of any one alternative
/// holds (an L4 rule with no L3 spec has an IPv4 and an IPv6 alternative).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowRule {
    /// Alternatives, each a conjunction.
    pub alternatives: Vec<Vec<Check>>,
    /// `priority` as given (each QP gets its own copy of a matching frame,
    /// so it orders nothing here).
    pub priority: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum L3Kind {
    V4,
    V6,
}

#[derive(Default)]
struct Parsed {
    has_eth: bool,
    eth: Vec<Check>,
    l3: Option<(L3Kind, Vec<Check>)>,
    l4: Option<(u8, Vec<Check>)>,
}

fn be(b: &[u8]) -> u32 {
    b.iter().fold(0, |a, &x| (a << 8) | u32::from(x))
}

/// Masked comparisons of `n` bytes of `val`/`mask` at `val_at`/`mask_at`,
/// against the frame at `off` (in 4-byte words, then 2, then 1).
fn bytes(spec: &[u8], val_at: usize, mask_at: usize, n: usize, base: Base, off: u32) -> Vec<Check> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < n {
        let w = if n - i >= 4 {
            4
        } else if n - i >= 2 {
            2
        } else {
            1
        };
        let mask = be(&spec[mask_at + i..mask_at + i + w]);
        let value = be(&spec[val_at + i..val_at + i + w]) & mask;
        if mask != 0 {
            out.push(Check {
                base,
                off: off + i as u32,
                width: w as u8,
                mask,
                value,
            });
        }
        i += w;
    }
    out
}

fn check(base: Base, off: u32, width: u8, value: u32) -> Check {
    let mask = match width {
        1 => 0xff,
        2 => 0xffff,
        _ => u32::MAX,
    };
    Check {
        base,
        off,
        width,
        mask,
        value,
    }
}

/// Reads a rule: `attr` is `struct ibv_flow_attr` and the specs after it.
pub fn parse(attr: &[u8]) -> Result<FlowRule, FlowError> {
    if attr.len() < FLOW_ATTR_LEN {
        return Err(invalid(
            "the attribute is shorter than struct ibv_flow_attr",
        ));
    }
    let u32_at = |o: usize| u32::from_ne_bytes([attr[o], attr[o + 1], attr[o + 2], attr[o + 3]]);
    let (comp_mask, kind, flags) = (u32_at(0), u32_at(4), u32_at(16));
    let priority = u16::from_ne_bytes([attr[10], attr[11]]);
    let (num_specs, port) = (attr[12], attr[13]);
    if comp_mask != 0 {
        return Err(unsupported(format!("flow_attr.comp_mask {comp_mask:#x}")));
    }
    if port != 1 {
        return Err(invalid(format!("port {port}: the device has port 1 only")));
    }
    if flags & !FLAG_DONT_TRAP != 0 {
        return Err(unsupported(format!(
            "flags {flags:#x} (only IBV_FLOW_ATTR_FLAGS_DONT_TRAP; EGRESS rules are not offered)"
        )));
    }
    match kind {
        ATTR_NORMAL => {}
        ATTR_SNIFFER => {
            // Every frame of the port; specs, if any, are not consulted.
            return Ok(FlowRule {
                alternatives: vec![Vec::new()],
                priority,
            });
        }
        ATTR_ALL_DEFAULT | ATTR_MC_DEFAULT => {
            return Err(unsupported(
                "IBV_FLOW_ATTR_ALL_DEFAULT / MC_DEFAULT (\"traffic no other QP took\" has no meaning across the host's packet sockets)",
            ))
        }
        other => return Err(invalid(format!("flow_attr.type {other}"))),
    }
    let mut p = Parsed::default();
    let mut at = FLOW_ATTR_LEN;
    for i in 0..num_specs {
        let hdr = attr
            .get(at..at + 6)
            .ok_or_else(|| invalid(format!("spec {i} runs past the attribute")))?;
        let ty = u32::from_ne_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
        let size = usize::from(u16::from_ne_bytes([hdr[4], hdr[5]]));
        let spec = attr
            .get(at..at + size)
            .ok_or_else(|| invalid(format!("spec {i} (size {size}) runs past the attribute")))?;
        spec_into(&mut p, ty, spec, i)?;
        at += size;
    }
    Ok(FlowRule {
        alternatives: conjunctions(p),
        priority,
    })
}

fn want_size(ty: u32) -> Option<usize> {
    Some(match ty {
        SPEC_ETH => 40,
        SPEC_IPV4 => 24,
        SPEC_IPV4_EXT => 32,
        SPEC_IPV6 => 88,
        SPEC_TCP | SPEC_UDP => 16,
        _ => return None,
    })
}

fn spec_into(p: &mut Parsed, ty: u32, spec: &[u8], i: u8) -> Result<(), FlowError> {
    if ty & SPEC_INNER != 0 {
        return Err(unsupported("IBV_FLOW_SPEC_INNER (tunnel inner headers)"));
    }
    let Some(size) = want_size(ty) else {
        return Err(unsupported(format!(
            "spec type {ty:#x} (offered: ETH, IPV4, IPV4_EXT, IPV6, TCP, UDP)"
        )));
    };
    if spec.len() != size {
        return Err(invalid(format!(
            "spec {i} (type {ty:#x}) has size {}, its struct is {size} bytes",
            spec.len()
        )));
    }
    let dup = |what: &str| invalid(format!("spec {i}: a second {what} spec"));
    match ty {
        SPEC_ETH => {
            if p.has_eth {
                return Err(dup("ETH"));
            }
            p.has_eth = true;
            p.eth = eth(spec);
        }
        SPEC_IPV4 | SPEC_IPV4_EXT => {
            if p.l3.is_some() {
                return Err(dup("L3"));
            }
            p.l3 = Some((L3Kind::V4, ipv4(spec, ty == SPEC_IPV4_EXT)?));
        }
        SPEC_IPV6 => {
            if p.l3.is_some() {
                return Err(dup("L3"));
            }
            p.l3 = Some((L3Kind::V6, ipv6(spec)));
        }
        _ => {
            if p.l4.is_some() {
                return Err(dup("L4"));
            }
            let proto = if ty == SPEC_TCP { 6 } else { 17 };
            // ibv_flow_tcp_udp_filter is { dst_port, src_port }; the header
            // has the source port first.
            let mut ports = bytes(spec, 6, 10, 2, Base::Frame, 2);
            ports.extend(bytes(spec, 8, 12, 2, Base::Frame, 0));
            p.l4 = Some((proto, ports));
        }
    }
    Ok(())
}

/// `struct ibv_flow_spec_eth`: val at 6, mask at 22; dst MAC, src MAC,
/// EtherType, VLAN TCI.
fn eth(spec: &[u8]) -> Vec<Check> {
    let mut c = bytes(spec, 6, 22, 14, Base::Frame, 0);
    let tci_mask = be(&spec[36..38]);
    if tci_mask != 0 {
        c.push(check(Base::VlanPresent, 0, 4, 1));
        c.push(Check {
            base: Base::VlanTci,
            off: 0,
            width: 4,
            mask: tci_mask,
            value: be(&spec[20..22]) & tci_mask,
        });
    }
    c
}

/// `struct ibv_flow_spec_ipv4(_ext)`: val at 8; src, dst (and proto, tos,
/// ttl, flags).
fn ipv4(spec: &[u8], ext: bool) -> Result<Vec<Check>, FlowError> {
    let mask_at = if ext { 20 } else { 16 };
    let mut c = bytes(spec, 8, mask_at, 8, Base::Frame, L3 + 12);
    if ext {
        c.extend(bytes(spec, 16, 28, 1, Base::Frame, L3 + 9)); // protocol
        c.extend(bytes(spec, 17, 29, 1, Base::Frame, L3 + 1)); // TOS
        c.extend(bytes(spec, 18, 30, 1, Base::Frame, L3 + 8)); // TTL
        if spec[31] != 0 {
            return Err(unsupported("IPV4_EXT flags match"));
        }
    }
    Ok(c)
}

/// `struct ibv_flow_spec_ipv6`: val at 8, mask at 48; src, dst, flow label,
/// next header, traffic class, hop limit.
fn ipv6(spec: &[u8]) -> Vec<Check> {
    let (v, m) = (8, 48);
    let mut c = bytes(spec, v, m, 32, Base::Frame, L3 + 8);
    // The first word: version(4) traffic class(8) flow label(20).
    let fl_mask = be(&spec[m + 32..m + 36]) & 0xf_ffff;
    let tc_mask = u32::from(spec[m + 37]);
    let mask = (tc_mask << 20) | fl_mask;
    if mask != 0 {
        let value = ((u32::from(spec[v + 37]) << 20) | be(&spec[v + 32..v + 36])) & mask;
        c.push(Check {
            base: Base::Frame,
            off: L3,
            width: 4,
            mask,
            value,
        });
    }
    c.extend(bytes(spec, v + 36, m + 36, 1, Base::Frame, L3 + 6)); // next header
    c.extend(bytes(spec, v + 38, m + 38, 1, Base::Frame, L3 + 7)); // hop limit
    c
}

/// The alternatives of a parsed rule: the L3 spec (or, for an L4 spec
/// without one, each of IPv4 and IPv6) implies its EtherType; the L4 spec
/// implies the IP protocol.
fn conjunctions(p: Parsed) -> Vec<Vec<Check>> {
    let kinds: Vec<(L3Kind, Vec<Check>)> = match (p.l3, p.l4.is_some()) {
        (Some(l3), _) => vec![l3],
        (None, true) => vec![(L3Kind::V4, Vec::new()), (L3Kind::V6, Vec::new())],
        (None, false) => return vec![p.eth],
    };
    kinds
        .into_iter()
        .map(|(kind, l3)| {
            let mut c = p.eth.clone();
            let ethertype = match kind {
                L3Kind::V4 => ETHERTYPE_IPV4,
                L3Kind::V6 => ETHERTYPE_IPV6,
            };
            // EtherType first, so no deeper load runs on a frame of another type.
            c.insert(0, check(Base::Frame, 12, 2, ethertype));
            c.extend(l3);
            if let Some((proto, ports)) = &p.l4 {
                let (proto_at, base, l4_at) = match kind {
                    L3Kind::V4 => (L3 + 9, Base::Ipv4Payload, 0),
                    L3Kind::V6 => (L3 + 6, Base::Frame, L3 + 40),
                };
                c.push(check(Base::Frame, proto_at, 1, u32::from(*proto)));
                for port in ports {
                    c.push(Check {
                        base,
                        off: l4_at + port.off,
                        ..*port
                    });
                }
            }
            c
        })
        .collect()
}

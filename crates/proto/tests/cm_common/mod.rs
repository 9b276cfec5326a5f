//! Helpers shared by the CM tests: endpoints with rdma_cm defaults, request
//! parameters, and draining a CM's output.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr};

use proto::cm::{AcceptParams, Cm, CmConfig, CmEvent, ConnId, ConnectParams, PathParams, Transmit};
use proto::Gid;
use wire::cm::{self, cma, TransportType};
use wire::{Psn, Qpn};

/// The GID of node `n`: 10.0.0.n, IPv4-mapped.
pub fn gid(n: u8) -> Gid {
    Gid::from(IpAddr::V4(Ipv4Addr::new(10, 0, 0, n)))
}

pub fn guid(n: u8) -> u64 {
    0x0200_00FF_FE00_0000 | u64::from(n)
}

/// A CM for node `n` with the rdma_cm defaults.
pub fn node(n: u8, seed: u64) -> Cm {
    Cm::new(CmConfig::rdma_cm(gid(n), guid(n), seed ^ u64::from(n)))
}

pub const PORT: u16 = 7471;

pub fn service() -> u64 {
    cma::service_id(cma::PortSpace::Tcp, PORT)
}

/// REQ private data as rdma_cm builds it: the cma header, then `user`.
pub fn req_private_data(from: u8, to: u8, user: &[u8]) -> Vec<u8> {
    let mut pd = vec![0u8; cma::HEADER_LEN];
    cma::Header {
        src_port: 40000 + u16::from(from),
        src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, from)),
        dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, to)),
    }
    .emit(&mut pd)
    .unwrap();
    pd.extend_from_slice(user);
    pd
}

pub fn connect_params(from: u8, to: u8, qpn: u32, psn: u32, user: &[u8]) -> ConnectParams {
    ConnectParams {
        peer: gid(to),
        service_id: service(),
        qpn: Qpn::from_masked(qpn),
        transport: TransportType::Rc,
        starting_psn: Psn::from_masked(psn),
        responder_resources: 4,
        initiator_depth: 2,
        flow_control: true,
        retry_count: 7,
        rnr_retry_count: 6,
        srq: false,
        path_mtu: 3,
        path: PathParams::default(),
        private_data: req_private_data(from, to, user),
    }
}

pub fn accept_params(qpn: u32, psn: u32, user: &[u8]) -> AcceptParams {
    AcceptParams {
        qpn: Qpn::from_masked(qpn),
        starting_psn: Psn::from_masked(psn),
        responder_resources: 3,
        initiator_depth: 1,
        flow_control: true,
        rnr_retry_count: 5,
        srq: false,
        private_data: user.to_vec(),
    }
}

pub fn drain(cm: &mut Cm) -> Vec<Transmit> {
    std::iter::from_fn(|| cm.poll_transmit()).collect()
}

pub fn events(cm: &mut Cm) -> Vec<CmEvent> {
    std::iter::from_fn(|| cm.poll_event()).collect()
}

pub fn parse(t: &Transmit) -> cm::Message {
    cm::Repr::parse(&t.mad).expect("we emit valid MADs").message
}

pub fn tid(t: &Transmit) -> u64 {
    cm::Repr::parse(&t.mad).unwrap().tid
}

/// Deliver every MAD `from` has queued to `to` (all must be addressed to it).
pub fn pump(from: &mut Cm, from_gid: Gid, to: &mut Cm, now: u64) -> Vec<cm::Message> {
    let mut seen = Vec::new();
    for t in drain(from) {
        assert_eq!(t.to, to.config().local_gid, "MAD addressed elsewhere");
        seen.push(parse(&t));
        to.handle_mad(now, from_gid, &t.mad);
    }
    seen
}

pub const REQ: usize = 0;
pub const REP: usize = 3;

pub fn one(v: Vec<cm::Message>) -> cm::Message {
    assert_eq!(v.len(), 1, "{v:?}");
    v.into_iter().next().unwrap()
}

/// A and B up to ESTABLISHED on both sides; returns (a, b, id_a, id_b).
pub fn established(seed: u64) -> (proto::cm::Cm, proto::cm::Cm, ConnId, ConnId) {
    let (mut a, mut b) = (node(1, seed), node(2, seed));
    b.listen(service()).unwrap();
    let id_a = a
        .connect(0, &connect_params(1, 2, 0x11, 0x100, b"hello"))
        .unwrap();
    pump(&mut a, gid(1), &mut b, 0);
    let Some(CmEvent::ConnectRequest { id: id_b, .. }) = b.poll_event() else {
        panic!()
    };
    b.accept(0, id_b, &accept_params(0x22, 0x200, b"world"))
        .unwrap();
    pump(&mut b, gid(2), &mut a, 0);
    assert!(matches!(
        a.poll_event(),
        Some(CmEvent::ConnectResponse { .. })
    ));
    a.ready_to_use(id_a, &[]).unwrap();
    pump(&mut a, gid(1), &mut b, 0);
    assert_eq!(events(&mut a), vec![CmEvent::Established { id: id_a }]);
    assert_eq!(events(&mut b), vec![CmEvent::Established { id: id_b }]);
    (a, b, id_a, id_b)
}

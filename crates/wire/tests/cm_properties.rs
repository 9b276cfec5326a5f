//! Property tests of the CM wire types: `parse(emit(x)) == x` for every CM
//! message with random field values (each in its field's range), the parser
//! never panics on arbitrary or mutated MADs, and the rdma_cm header and
//! service IDs round-trip.

use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use wire::cm::{self, cma, Message, MsgKind, RejReason, SidrStatus, TransportType};
use wire::mad::MAD_LEN;
use wire::{PKey, Psn, Qkey, Qpn};

fn bytes<const N: usize>() -> impl Strategy<Value = [u8; N]> {
    proptest::collection::vec(any::<u8>(), N).prop_map(|v| v.try_into().unwrap())
}

fn qpn() -> impl Strategy<Value = Qpn> {
    (0u32..1 << 24).prop_map(Qpn::from_masked)
}

fn psn() -> impl Strategy<Value = Psn> {
    (0u32..1 << 24).prop_map(Psn::from_masked)
}

fn kind() -> impl Strategy<Value = MsgKind> {
    prop_oneof![Just(MsgKind::Req), Just(MsgKind::Rep), Just(MsgKind::Other)]
}

fn path() -> impl Strategy<Value = cm::req::Path> {
    (
        any::<(u16, u16)>(),
        bytes::<16>(),
        bytes::<16>(),
        (0u32..1 << 20, 0u8..64, any::<u8>(), any::<u8>()),
        (0u8..16, any::<bool>(), 0u8..32),
    )
        .prop_map(
            |(lids, lg, rg, (fl, rate, tc, hop), (sl, sub, ack))| cm::req::Path {
                local_lid: lids.0,
                remote_lid: lids.1,
                local_gid: lg,
                remote_gid: rg,
                flow_label: fl,
                packet_rate: rate,
                traffic_class: tc,
                hop_limit: hop,
                sl,
                subnet_local: sub,
                local_ack_timeout: ack,
            },
        )
}

fn req() -> impl Strategy<Value = Message> {
    (
        (
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
            qpn(),
            any::<u8>(),
        ),
        (0u32..1 << 24, any::<u8>(), 0u32..1 << 24, 0u8..32),
        (
            prop_oneof![
                Just(TransportType::Rc),
                Just(TransportType::Uc),
                Just(TransportType::Extended)
            ],
            any::<bool>(),
            psn(),
            0u8..32,
            0u8..8,
        ),
        (
            any::<u16>(),
            0u8..16,
            any::<bool>(),
            0u8..8,
            0u8..16,
            any::<bool>(),
            0u8..8,
        ),
        (path(), path(), any::<bool>(), bytes::<92>()),
    )
        .prop_map(|(a, b, c, d, e)| {
            Message::Req(cm::req::Repr {
                local_comm_id: a.0,
                service_id: a.1,
                local_ca_guid: a.2,
                local_qkey: Qkey(a.3),
                local_qpn: a.4,
                responder_resources: a.5,
                local_eecn: b.0,
                initiator_depth: b.1,
                remote_eecn: b.2,
                remote_cm_response_timeout: b.3,
                transport: c.0,
                flow_control: c.1,
                starting_psn: c.2,
                local_cm_response_timeout: c.3,
                retry_count: c.4,
                pkey: PKey(d.0),
                path_mtu: d.1,
                rdc_exists: d.2,
                rnr_retry_count: d.3,
                max_cm_retries: d.4,
                srq: d.5,
                extended_transport_type: d.6,
                primary_path: e.0,
                alternate_path: e.1,
                sap_supported: e.2,
                private_data: e.3,
            })
        })
}

fn rep() -> impl Strategy<Value = Message> {
    (
        (
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            qpn(),
            0u32..1 << 24,
            psn(),
        ),
        (
            any::<u8>(),
            any::<u8>(),
            0u8..32,
            0u8..4,
            any::<bool>(),
            0u8..8,
            any::<bool>(),
        ),
        (any::<u64>(), bytes::<196>()),
    )
        .prop_map(|(a, b, c)| {
            Message::Rep(cm::rep::Repr {
                local_comm_id: a.0,
                remote_comm_id: a.1,
                local_qkey: Qkey(a.2),
                local_qpn: a.3,
                local_eecn: a.4,
                starting_psn: a.5,
                responder_resources: b.0,
                initiator_depth: b.1,
                target_ack_delay: b.2,
                failover_accepted: b.3,
                flow_control: b.4,
                rnr_retry_count: b.5,
                srq: b.6,
                local_ca_guid: c.0,
                private_data: c.1,
            })
        })
}

fn others() -> impl Strategy<Value = Message> {
    prop_oneof![
        (any::<(u32, u32)>(), kind(), 0u8..32, bytes::<222>()).prop_map(|(ids, k, t, pd)| {
            Message::Mra(cm::mra::Repr {
                local_comm_id: ids.0,
                remote_comm_id: ids.1,
                message_mraed: k,
                service_timeout: t,
                private_data: pd,
            })
        }),
        (
            any::<(u32, u32)>(),
            kind(),
            any::<u16>(),
            0u8..=72,
            bytes::<72>(),
            bytes::<148>()
        )
            .prop_map(|(ids, k, code, len, ari, pd)| {
                Message::Rej(cm::rej::Repr {
                    local_comm_id: ids.0,
                    remote_comm_id: ids.1,
                    message_rejected: k,
                    reason: RejReason::from_code(code),
                    ari_len: len,
                    ari,
                    private_data: pd,
                })
            }),
        (any::<(u32, u32)>(), any::<bool>(), bytes::<224>()).prop_map(|(ids, drep, pd)| {
            let r = cm::rtu::Repr {
                local_comm_id: ids.0,
                remote_comm_id: ids.1,
                private_data: pd,
            };
            if drep {
                Message::Drep(r)
            } else {
                Message::Rtu(r)
            }
        }),
        (any::<(u32, u32)>(), qpn(), bytes::<220>()).prop_map(|(ids, q, pd)| {
            Message::Dreq(cm::dreq::Repr {
                local_comm_id: ids.0,
                remote_comm_id: ids.1,
                remote_qpn: q,
                private_data: pd,
            })
        }),
        (any::<u32>(), any::<u16>(), any::<u64>(), bytes::<216>()).prop_map(|(id, pk, sid, pd)| {
            Message::SidrReq(cm::sidr_req::Repr {
                request_id: id,
                pkey: PKey(pk),
                service_id: sid,
                private_data: pd,
            })
        }),
        (
            (
                any::<u32>(),
                any::<u8>(),
                0u8..=72,
                qpn(),
                any::<u64>(),
                any::<u32>()
            ),
            bytes::<72>(),
            bytes::<136>()
        )
            .prop_map(|(a, info, pd)| {
                Message::SidrRep(cm::sidr_rep::Repr {
                    request_id: a.0,
                    status: SidrStatus::from_code(a.1),
                    info_len: a.2,
                    qpn: a.3,
                    service_id: a.4,
                    qkey: Qkey(a.5),
                    info,
                    private_data: pd,
                })
            }),
    ]
}

fn mad() -> impl Strategy<Value = cm::Repr> {
    (
        any::<u64>(),
        any::<u32>(),
        prop_oneof![req(), rep(), others()],
    )
        .prop_map(|(tid, attr_mod, message)| cm::Repr {
            tid,
            attr_mod,
            message,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn parse_emit_round_trip(r in mad()) {
        let bytes = r.to_bytes();
        prop_assert_eq!(cm::Repr::parse(&bytes), Ok(r.clone()));
        // Emitting again gives the same bytes (reserved bits stay zero).
        prop_assert_eq!(cm::Repr::parse(&bytes).unwrap().to_bytes(), bytes);
    }

    #[test]
    fn parser_never_panics_on_arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = cm::Repr::parse(&b);
    }

    #[test]
    fn parser_never_panics_on_mutated_mads(
        r in mad(),
        flips in proptest::collection::vec((0usize..MAD_LEN, any::<u8>()), 1..8),
        cm_header in any::<bool>(),
    ) {
        let mut bytes = r.to_bytes();
        for (at, v) in flips {
            // Keep the header a CM Send half of the time so the message parsers run.
            if cm_header && at < 4 { continue; }
            bytes[at] = v;
        }
        if let Ok(p) = cm::Repr::parse(&bytes) {
            // Whatever parses re-emits to bytes that parse to the same thing.
            prop_assert_eq!(cm::Repr::parse(&p.to_bytes()), Ok(p));
        }
    }

    #[test]
    fn cma_header_round_trip(port in any::<u16>(), v4 in any::<bool>(), a in any::<[u8; 16]>(), b in any::<[u8; 16]>()) {
        let (src, dst) = if v4 {
            (IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3])), IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3])))
        } else {
            (IpAddr::V6(Ipv6Addr::from(a)), IpAddr::V6(Ipv6Addr::from(b)))
        };
        let h = cma::Header { src_port: port, src, dst };
        let mut out = [0u8; cma::HEADER_LEN];
        h.emit(&mut out).unwrap();
        prop_assert_eq!(cma::Header::parse(&out), Ok(h));
    }

    #[test]
    fn service_ids_split_back(port in any::<u16>(), ps in 0usize..4) {
        let ps = [cma::PortSpace::Ipoib, cma::PortSpace::Tcp, cma::PortSpace::Udp, cma::PortSpace::Ib][ps];
        prop_assert_eq!(cma::split_service_id(cma::service_id(ps, port)), Some((ps, port)));
    }
}

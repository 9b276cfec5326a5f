//! Tests of work-request checks, cross-checked against the spec.
use super::*;
use crate::error::Errno;
use crate::handle::{AhHandle, Handle, PdHandle};
use crate::spec_md::{plain, table_after};
use crate::types::{QpState, QpType};

const N: bool = false;
const Y: bool = true;

const QP_SM: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../spec/qp-state-machine.md"
));
const COMPLETIONS: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../spec/completions.md"
));
const QP_QUERY: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../spec/qp-query.md"
));

fn pd(i: u64) -> PdHandle {
    Handle::from_raw(i)
}
fn ah(i: u64) -> AhHandle {
    Handle::from_raw(i)
}

#[test]
fn wr_opcode_rows_complete() {
    for (i, r) in WR_OPCODES.iter().enumerate() {
        assert_eq!(
            WR_OPCODES.iter().filter(|s| s.0 == r.0).count(),
            1,
            "{}",
            r.2
        );
        assert_eq!(WrOpcode::from_raw(r.1), Some(r.0));
        assert_eq!((r.0.raw(), r.0.name()), (r.1, r.2), "row {i}");
        assert_eq!(
            OPCODE_MATRIX.iter().filter(|m| m.opcode == r.0).count(),
            1,
            "{}",
            r.2
        );
    }
    for v in [12, 13, 16, 128, u32::MAX] {
        assert_eq!(WrOpcode::from_raw(v), None);
    }
}

/// completions.md §2: "`enum ibv_wr_opcode` for reference: RDMA_WRITE 0, ...".
#[test]
fn wr_opcodes_match_spec() {
    let at = COMPLETIONS
        .find("`enum ibv_wr_opcode` for reference:")
        .expect("paragraph");
    let para = &COMPLETIONS[at..COMPLETIONS[at..]
        .find("\n\n")
        .map_or(COMPLETIONS.len(), |e| at + e)];
    let list = para.split_once(':').expect("colon").1.replace('\n', " ");
    let mut seen = 0;
    for item in list.trim().trim_end_matches('.').split(',') {
        let (name, value) = item.trim().rsplit_once(' ').expect("name value");
        let value: u32 = value.parse().expect("number");
        let op = WrOpcode::from_raw(value).unwrap_or_else(|| panic!("{name} = {value} missing"));
        assert_eq!(op.name(), format!("IBV_WR_{name}"));
        seen += 1;
    }
    assert_eq!(seen, WR_OPCODES.len());
}

/// The `ibv_post_send(3)` opcode table (rdma-core man page), re-typed here:
/// (opcode, UD, UC, RC). FLUSH/ATOMIC_WRITE are absent from the man page;
/// spec rc-reliability.md §1.1 makes them RC-only.
const MAN_PAGE: [(&str, [bool; 3]); 11] = [
    ("IBV_WR_SEND", [Y, Y, Y]),
    ("IBV_WR_SEND_WITH_IMM", [Y, Y, Y]),
    ("IBV_WR_RDMA_WRITE", [N, Y, Y]),
    ("IBV_WR_RDMA_WRITE_WITH_IMM", [N, Y, Y]),
    ("IBV_WR_RDMA_READ", [N, N, Y]),
    ("IBV_WR_ATOMIC_CMP_AND_SWP", [N, N, Y]),
    ("IBV_WR_ATOMIC_FETCH_AND_ADD", [N, N, Y]),
    ("IBV_WR_LOCAL_INV", [N, Y, Y]),
    ("IBV_WR_BIND_MW", [N, Y, Y]),
    ("IBV_WR_SEND_WITH_INV", [N, Y, Y]),
    ("IBV_WR_TSO", [Y, N, N]),
];

#[test]
fn matrix_matches_man_page() {
    for (name, cols) in MAN_PAGE {
        let r = OPCODE_MATRIX
            .iter()
            .find(|r| r.opcode.name() == name)
            .expect(name);
        assert_eq!(r.verbs, cols, "{name}");
    }
    for op in [WrOpcode::Flush, WrOpcode::AtomicWrite] {
        let r = OPCODE_MATRIX.iter().find(|r| r.opcode == op).expect("row");
        assert_eq!(r.verbs, [N, N, Y]);
    }
    // We never offer what verbs forbids.
    for r in OPCODE_MATRIX {
        for c in 0..3 {
            assert!(r.verbs[c] || !r.softverbs[c], "{} col {c}", r.opcode);
        }
    }
}

/// Our offer is inside rxe's supported send-op sets (spec qp-query.md §2).
#[test]
fn offer_within_rxe() {
    let text = plain(QP_QUERY);
    let at = text.find("rxe's supported sets:").expect("sentence");
    let s = &text[at..at + 300];
    assert!(s.contains("UD = SEND, SEND_WITH_IMM"));
    assert!(s.contains("UC = WRITE, WRITE_WITH_IMM, SEND, SEND_WITH_IMM"));
    let ud: Vec<_> = OPCODE_MATRIX
        .iter()
        .filter(|r| r.softverbs[0])
        .map(|r| r.opcode)
        .collect();
    assert_eq!(ud, [WrOpcode::Send, WrOpcode::SendWithImm]);
}

#[test]
fn opcode_check_words_and_errno() {
    assert_eq!(check_opcode(WrOpcode::RdmaRead, QpType::Rc), Ok(()));
    let e = check_opcode(WrOpcode::RdmaRead, QpType::Uc).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    assert_eq!(
        e.to_string(),
        "IBV_WR_RDMA_READ is not valid on a UC QP (see the opcode table in ibv_post_send(3))"
    );
    for op in [
        WrOpcode::LocalInv,
        WrOpcode::BindMw,
        WrOpcode::SendWithInv,
        WrOpcode::AtomicWrite,
    ] {
        assert_eq!(check_opcode(op, QpType::Rc), Ok(()), "{op}");
    }
    // UC has no SEND_WITH_INVALIDATE opcode (roce-wire.md §4.2).
    assert_eq!(
        check_opcode(WrOpcode::SendWithInv, QpType::Uc)
            .unwrap_err()
            .errno(),
        Errno::EOPNOTSUPP
    );
    assert_eq!(check_opcode(WrOpcode::Flush, QpType::Rc), Ok(()));
    assert_eq!(
        check_opcode(WrOpcode::Tso, QpType::Ud).unwrap_err().errno(),
        Errno::EOPNOTSUPP
    );
    assert_eq!(
        check_opcode(WrOpcode::Driver1, QpType::Rc)
            .unwrap_err()
            .errno(),
        Errno::EINVAL
    );
    // spec/xrc.md §5: XRC_SEND takes the RC opcodes; XRC_RECV has no send queue.
    for op in [
        WrOpcode::Send,
        WrOpcode::RdmaRead,
        WrOpcode::AtomicCmpAndSwp,
    ] {
        assert_eq!(
            check_opcode(op, QpType::XrcSend),
            check_opcode(op, QpType::Rc)
        );
    }
    assert_eq!(
        check_opcode(WrOpcode::Send, QpType::XrcRecv)
            .unwrap_err()
            .errno(),
        Errno::EINVAL
    );
}

fn cell_disposition(cell: &str) -> Disposition {
    match plain(cell).as_str() {
        "error EINVAL" => Disposition::Refused,
        "accepted (queued)" | "accepted (held until RTS)" => Disposition::Queued,
        "accepted" => Disposition::Processed,
        "accepted → flushed" => Disposition::Flushed,
        other => panic!("unknown cell {other:?}"),
    }
}

/// qp-state-machine.md §7, first table, cell by cell.
#[test]
fn post_table_matches_spec() {
    let rows = table_after(QP_SM, "## 7. Which states accept posting");
    assert_eq!(rows.len(), 7);
    for (r, rule) in rows.iter().zip(POST_TABLE) {
        assert_eq!(r[0], rule.state.name());
        assert_eq!(cell_disposition(&r[1]), rule.recv, "recv in {}", r[0]);
        assert_eq!(cell_disposition(&r[2]), rule.send, "send in {}", r[0]);
    }
    for s in QpState::ALL {
        assert_eq!(POST_TABLE[s as usize].state, s);
    }
}

/// Every errno in §7's "other post_* errors" table is one we return.
#[test]
fn other_errors_table_errnos() {
    let rows = table_after(QP_SM, "Other `post_*` errors");
    assert!(rows.len() >= 9);
    let full = rows
        .iter()
        .find(|r| r[0].contains("queue full"))
        .expect("queue full row");
    assert!(full[1].contains("ENOMEM"));
    assert!(rows
        .iter()
        .filter(|r| !r[0].contains("queue full"))
        .all(|r| r[1].starts_with("`EINVAL`")));
}

const SGE8: [Sge; 1] = [Sge {
    addr: 0x1000,
    length: 8,
    lkey: 1,
}];

fn rc() -> SendQueueCtx {
    SendQueueCtx {
        qp_type: QpType::Rc,
        state: QpState::Rts,
        pd: pd(1),
        max_send_wr: 4,
        max_send_sge: 2,
        max_inline_data: 64,
        max_rd_atomic: 1,
        ud_mtu: 1024,
        outstanding: 0,
    }
}

fn send(sg: &[Sge]) -> SendWr<'_> {
    SendWr {
        wr_id: 7,
        opcode: WrOpcode::Send,
        flags: SendFlags::SIGNALED,
        sg_list: sg,
        imm_data: ImmData::default(),
        target: WrTarget::None,
    }
}

fn no_ah(_: AhHandle) -> Option<PdHandle> {
    None
}

fn post(q: &SendQueueCtx, wr: &SendWr<'_>) -> Result<Disposition, PostError> {
    check_post_send(q, wr, |h| (h.raw() < 10).then(|| pd(h.raw())))
}

#[test]
fn send_states() {
    let wr = send(&SGE8);
    for s in QpState::ALL {
        let q = SendQueueCtx { state: s, ..rc() };
        let got = check_post_send(&q, &wr, no_ah);
        assert_eq!(
            got.as_ref().ok().copied(),
            Some(post_send_disposition(s)).filter(|d| *d != Disposition::Refused),
            "{s}"
        );
    }
    let e = check_post_send(
        &SendQueueCtx {
            state: QpState::Init,
            ..rc()
        },
        &wr,
        no_ah,
    )
    .unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    assert!(
        e.to_string().starts_with("ibv_post_send in state INIT: "),
        "{e}"
    );
}

#[test]
fn send_sge_length_inline() {
    let three = [SGE8[0]; 3];
    let e = post(&rc(), &send(&three)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "ibv_post_send: num_sge = 3 exceeds cap.max_send_sge = 2"
    );
    let big = [Sge {
        length: u32::MAX,
        ..SGE8[0]
    }; 2];
    assert!(
        matches!(post(&SendQueueCtx { max_send_sge: 2, ..rc() }, &send(&big)), Err(PostError::MessageTooLong { len, .. }) if len == 2 * u64::from(u32::MAX))
    );
    let exact = [Sge {
        length: 1 << 30,
        ..SGE8[0]
    }; 2];
    assert_eq!(post(&rc(), &send(&exact)), Ok(Disposition::Processed)); // 2^31 is allowed
    let mut wr = send(&exact);
    wr.flags = SendFlags::INLINE;
    assert!(matches!(
        post(&rc(), &wr),
        Err(PostError::InlineTooLong { max: 64, .. })
    ));
    let mut wr = send(&SGE8);
    wr.flags = SendFlags::INLINE;
    assert_eq!(post(&rc(), &wr), Ok(Disposition::Processed));
    wr.opcode = WrOpcode::RdmaRead;
    wr.target = WrTarget::Rdma(RdmaTarget::default());
    assert_eq!(
        post(&rc(), &wr),
        Err(PostError::InlineOpcode {
            opcode: WrOpcode::RdmaRead
        })
    );
}

#[test]
fn send_flags_checked() {
    let mut wr = send(&SGE8);
    wr.flags = SendFlags(0x20);
    assert_eq!(post(&rc(), &wr).unwrap_err().errno(), Errno::EINVAL);
    wr.flags = SendFlags::IP_CSUM;
    assert_eq!(post(&rc(), &wr), Err(PostError::IpCsum));
    wr.flags = SendFlags::FENCE | SendFlags::SOLICITED | SendFlags::SIGNALED;
    assert!(post(&rc(), &wr).is_ok());
}

fn atomic(addr: u64, sg: &[Sge]) -> SendWr<'_> {
    SendWr {
        opcode: WrOpcode::AtomicFetchAndAdd,
        target: WrTarget::Atomic(AtomicTarget {
            remote_addr: addr,
            compare_add: 1,
            swap: 0,
            rkey: 9,
        }),
        ..send(sg)
    }
}

#[test]
fn atomics() {
    assert_eq!(
        post(&rc(), &atomic(0x2000, &SGE8)),
        Ok(Disposition::Processed)
    );
    let e = post(&rc(), &atomic(0x2004, &SGE8)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "IBV_WR_ATOMIC_FETCH_AND_ADD: wr.atomic.remote_addr = 0x2004 is not 8-byte aligned"
    );
    let four = [Sge {
        length: 4,
        ..SGE8[0]
    }];
    assert!(matches!(
        post(&rc(), &atomic(0x2000, &four)),
        Err(PostError::AtomicLength { len: 4, .. })
    ));
    let halves = [four[0], four[0]];
    assert!(post(&rc(), &atomic(0x2000, &halves)).is_ok()); // total 8
    let q = SendQueueCtx {
        max_rd_atomic: 0,
        ..rc()
    };
    assert_eq!(
        post(&q, &atomic(0x2000, &SGE8)).unwrap_err().errno(),
        Errno::EINVAL
    );
    let read = SendWr {
        opcode: WrOpcode::RdmaRead,
        target: WrTarget::Rdma(RdmaTarget::default()),
        ..send(&SGE8)
    };
    assert_eq!(
        post(&q, &read),
        Err(PostError::NoRdAtomic {
            opcode: WrOpcode::RdmaRead
        })
    );
}

#[test]
fn wrong_target() {
    let wr = SendWr {
        opcode: WrOpcode::RdmaWrite,
        ..send(&SGE8)
    };
    let e = post(&rc(), &wr).unwrap_err();
    assert_eq!(
        e.to_string(),
        "IBV_WR_RDMA_WRITE on an RC QP reads wr.rdma, but the WR carries none"
    );
    let ud = SendQueueCtx {
        qp_type: QpType::Ud,
        ..rc()
    };
    assert!(matches!(
        post(&ud, &send(&SGE8)),
        Err(PostError::WrongTarget {
            expected: "wr.ud",
            ..
        })
    ));
}

fn ud_send(len: u32) -> [Sge; 1] {
    [Sge {
        length: len,
        ..SGE8[0]
    }]
}

#[test]
fn ud_rules() {
    let q = SendQueueCtx {
        qp_type: QpType::Ud,
        ..rc()
    };
    let sg = ud_send(1024);
    let mut wr = send(&sg);
    wr.target = WrTarget::Ud(UdTarget {
        ah: ah(1),
        remote_qpn: 0x11,
        remote_qkey: 0x1111,
    });
    assert_eq!(post(&q, &wr), Ok(Disposition::Processed));
    wr.target = WrTarget::Ud(UdTarget {
        ah: ah(2),
        remote_qpn: 0x11,
        remote_qkey: 0,
    });
    assert_eq!(post(&q, &wr), Err(PostError::AhPd));
    wr.target = WrTarget::Ud(UdTarget {
        ah: ah(77),
        remote_qpn: 0x11,
        remote_qkey: 0,
    });
    assert_eq!(post(&q, &wr), Err(PostError::NoSuchAh { ah: 77 }));
    let sg = ud_send(1025);
    let wr = SendWr {
        sg_list: &sg,
        target: WrTarget::Ud(UdTarget {
            ah: ah(1),
            remote_qpn: 0x11,
            remote_qkey: 0,
        }),
        ..send(&sg)
    };
    assert_eq!(
        post(&q, &wr),
        Err(PostError::UdTooLong {
            opcode: WrOpcode::Send,
            len: 1025,
            mtu: 1024
        })
    );
    let w = SendWr {
        opcode: WrOpcode::RdmaWrite,
        ..wr
    };
    assert!(matches!(
        post(&q, &w),
        Err(PostError::OpcodeForQpType { .. })
    ));
}

#[test]
fn queue_full_is_enomem() {
    let q = SendQueueCtx {
        outstanding: 4,
        ..rc()
    };
    let e = post(&q, &send(&SGE8)).unwrap_err();
    assert_eq!(e.errno(), Errno::ENOMEM);
    assert_eq!(e.to_string(), "ibv_post_send: the queue is full (4 outstanding = cap.max_send_wr); poll completions first");
    // Posting into ERR still checks the WR and the room, then flushes it.
    let q = SendQueueCtx {
        state: QpState::Err,
        outstanding: 3,
        ..rc()
    };
    assert_eq!(post(&q, &send(&SGE8)), Ok(Disposition::Flushed));
}

fn rq() -> RecvQueueCtx {
    RecvQueueCtx {
        state: QpState::Init,
        has_srq: false,
        max_recv_wr: 2,
        max_recv_sge: 1,
        outstanding: 0,
    }
}

#[test]
fn recv_rules() {
    let wr = RecvWr {
        wr_id: 1,
        sg_list: &SGE8,
    };
    assert_eq!(check_post_recv(&rq(), &wr), Ok(Disposition::Queued));
    assert_eq!(
        check_post_recv(
            &RecvQueueCtx {
                state: QpState::Rtr,
                ..rq()
            },
            &wr
        ),
        Ok(Disposition::Processed)
    );
    assert_eq!(
        check_post_recv(
            &RecvQueueCtx {
                state: QpState::Err,
                ..rq()
            },
            &wr
        ),
        Ok(Disposition::Flushed)
    );
    let e = check_post_recv(
        &RecvQueueCtx {
            state: QpState::Reset,
            ..rq()
        },
        &wr,
    )
    .unwrap_err();
    assert_eq!(e.to_string(), "ibv_post_recv in state RESET: receives may be posted from INIT on; move the QP to INIT first");
    assert_eq!(
        check_post_recv(
            &RecvQueueCtx {
                has_srq: true,
                ..rq()
            },
            &wr
        ),
        Err(PostError::HasSrq)
    );
    let two = RecvWr {
        wr_id: 1,
        sg_list: &[SGE8[0]; 2],
    };
    assert_eq!(
        check_post_recv(&rq(), &two).unwrap_err().errno(),
        Errno::EINVAL
    );
    assert_eq!(
        check_post_recv(
            &RecvQueueCtx {
                outstanding: 2,
                ..rq()
            },
            &wr
        )
        .unwrap_err()
        .errno(),
        Errno::ENOMEM
    );
    assert_eq!(
        check_post_srq_recv(&wr, 1, 1, 1).unwrap_err().errno(),
        Errno::ENOMEM
    );
    assert!(check_post_srq_recv(&two, 4, 1, 0)
        .unwrap_err()
        .to_string()
        .contains("srq_attr.max_sge = 1"));
    assert_eq!(check_post_srq_recv(&wr, 4, 1, 0), Ok(()));
}

#[test]
fn imm_data_byte_order() {
    let imm = ImmData::from_value(0x0102_0304);
    assert_eq!(imm.0, [1, 2, 3, 4]);
    assert_eq!(imm.value(), 0x0102_0304);
    // A C field holding htonl(0x01020304) has the bytes 01 02 03 04 in memory.
    let c_field = u32::from_ne_bytes([1, 2, 3, 4]);
    assert_eq!(ImmData::from_c_field(c_field), imm);
    assert_eq!(imm.to_c_field(), c_field);
}

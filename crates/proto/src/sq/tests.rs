use super::*;
use crate::wr::{AtomicTarget, RdmaTarget, UdTarget, WrTarget};
use lanes::LaneSet;
use proptest::prelude::*;
use std::time::{Duration, Instant};

const PD: u64 = 7;

fn pd(raw: u64) -> PdHandle {
    PdHandle::from_raw(raw)
}

fn cfg(qp_type: QpType, depth: u32) -> SendRingConfig {
    SendRingConfig {
        qp_type,
        pd: pd(PD),
        max_send_wr: depth,
        max_send_sge: 3,
        max_inline_data: 32,
        ud_mtu: 1024,
    }
}

fn ring_with(c: SendRingConfig, dev: Arc<Device>) -> SendRing {
    let r = SendRing::new(c, dev);
    r.set_handle(QpHandle::from_raw(42));
    r
}

fn ring(qp_type: QpType, depth: u32) -> SendRing {
    ring_with(cfg(qp_type, depth), Arc::default())
}

fn sge(tag: u64) -> Sge {
    Sge {
        addr: tag,
        length: (tag as u32 & 0xff) + 1,
        lkey: (tag >> 8) as u32 | 0x100,
    }
}

fn send(wr_id: u64, sg: &[Sge]) -> SendWr<'_> {
    SendWr {
        wr_id,
        opcode: WrOpcode::Send,
        flags: SendFlags::SIGNALED,
        sg_list: sg,
        imm_data: ImmData::from_value(wr_id as u32),
        target: WrTarget::None,
    }
}

/// Everything the engine would take, in order: (wr_id, sges, inline, ud).
type Taken = (u64, Vec<Sge>, Option<Vec<u8>>, Option<UdDest>);

fn take_all(r: &SendRing) -> Vec<Taken> {
    let mut out = Vec::new();
    r.drain(|d| {
        out.push((
            d.wr.wr_id,
            d.wr.sg_list.to_vec(),
            d.inline.map(<[u8]>::to_vec),
            d.ud,
        ))
    });
    out
}

#[test]
fn a_post_checks_state_opcode_sges_inline_and_depth_as_check_post_send() {
    let r = ring(QpType::Rc, 2);
    let sg = [sge(1)];
    let e = r.post(&send(1, &sg), None, 0).unwrap_err();
    assert!(matches!(e, PostError::BadState { .. }), "RESET: {e}");
    for s in [QpState::Init, QpState::Rtr] {
        r.set_mirror(s, 0, 0);
        assert!(matches!(
            r.post(&send(1, &sg), None, 0),
            Err(PostError::BadState { .. })
        ));
    }
    r.set_mirror(QpState::Rts, 0, 0);
    let four = [sge(1), sge(2), sge(3), sge(4)];
    assert!(matches!(
        r.post(&send(1, &four), None, 0),
        Err(PostError::TooManySge { num_sge: 4, .. })
    ));
    let read = SendWr {
        opcode: WrOpcode::RdmaRead,
        target: WrTarget::Rdma(RdmaTarget::default()),
        ..send(1, &sg)
    };
    // max_rd_atomic comes from the mirror.
    assert!(matches!(
        r.post(&read, None, 0),
        Err(PostError::NoRdAtomic { .. })
    ));
    let inline = SendWr {
        flags: SendFlags::INLINE,
        sg_list: &[Sge {
            addr: 1,
            length: 33,
            lkey: 0,
        }],
        ..send(1, &[])
    };
    assert!(matches!(
        r.post(&inline, Some(&[0; 33]), 0),
        Err(PostError::InlineTooLong { len: 33, max: 32 })
    ));
    r.set_mirror(QpState::Rts, 1, 0);
    assert_eq!(
        r.post(&read, None, 0).unwrap(),
        SendPost::Queued { idle: true }
    );
    assert_eq!(
        r.post(&send(2, &sg), None, 0).unwrap(),
        SendPost::Queued { idle: false }
    );
    // Full: ENOMEM, as today, and nothing changes.
    let e = r.post(&send(3, &sg), None, 0).unwrap_err();
    assert!(matches!(e, PostError::QueueFull { depth: 2, .. }), "{e}");
    assert_eq!(e.errno(), crate::error::Errno::ENOMEM);
    assert_eq!((r.queued(), r.pending()), (2, 2));
    // A UD opcode table row: RDMA_WRITE is not valid on UD.
    let ud = ring(QpType::Ud, 2);
    ud.set_mirror(QpState::Rts, 0, 0);
    let write = SendWr {
        opcode: WrOpcode::RdmaWrite,
        target: WrTarget::Ud(UdTarget {
            ah: AhHandle::from_raw(1),
            remote_qpn: 1,
            remote_qkey: 1,
        }),
        ..send(1, &sg)
    };
    assert!(matches!(
        ud.post(&write, None, 0),
        Err(PostError::OpcodeForQpType { .. })
    ));
}

/// The ring wraps many times over a depth of 3: the engine sees every WR in
/// order with its own SGEs, and the depth (posted − retired) is what refuses.
#[test]
fn the_ring_wraps_and_refuses_only_when_the_queue_is_full() {
    let r = ring(QpType::Rc, 3);
    r.set_mirror(QpState::Rts, 0, 0);
    let mut next_retire = 0u64;
    let mut retired_before_drain = Vec::new();
    for id in 0..100u64 {
        let sg: Vec<Sge> = (0..id % 5).map(|k| sge(id * 5 + k)).collect();
        let post = r.post(&send(id, &sg), None, 0);
        if id % 5 == 4 {
            assert!(matches!(post, Err(PostError::TooManySge { .. })));
            continue;
        }
        let post = match post {
            Err(PostError::QueueFull { .. }) => {
                // The engine takes and retires the oldest: room again.
                let taken = take_all(&r);
                retired_before_drain.extend(taken.iter().map(|t| t.0));
                r.taken(1);
                next_retire += 1;
                r.post(&send(id, &sg), None, 0)
            }
            other => other,
        };
        assert!(
            matches!(post, Ok(SendPost::Queued { .. })),
            "{id}: {post:?}"
        );
        assert!(r.queued() <= 3);
    }
    retired_before_drain.extend(take_all(&r).iter().map(|t| t.0));
    let want: Vec<u64> = (0..100).filter(|id| id % 5 != 4).collect();
    assert_eq!(retired_before_drain, want, "every WR once, in order");
    assert!(next_retire > 20, "the ring wrapped");
}

#[test]
fn the_engine_reads_back_each_field() {
    let r = ring_with(cfg(QpType::Rc, 4), Arc::default());
    r.set_mirror(QpState::Rts, 2, 0);
    let sg = [sge(5), sge(6)];
    let atomic = SendWr {
        wr_id: 9,
        opcode: WrOpcode::AtomicFetchAndAdd,
        flags: SendFlags::SIGNALED | SendFlags::FENCE,
        sg_list: &[Sge {
            addr: 0x1000,
            length: 8,
            lkey: 3,
        }],
        imm_data: ImmData::from_value(0),
        target: WrTarget::Atomic(AtomicTarget {
            remote_addr: 0x2000,
            compare_add: 5,
            swap: 6,
            rkey: 7,
        }),
    };
    r.post(&atomic, None, 0).unwrap();
    r.post(&send(10, &sg), None, 0x0100_0005).unwrap();
    let mut seen = Vec::new();
    r.drain(|d| {
        let w = d.wr;
        seen.push((
            (w.wr_id, w.opcode, w.flags, w.target, w.imm_data),
            d.xrc_srqn,
            w.sg_list.to_vec(),
        ))
    });
    assert_eq!(seen.len(), 2);
    let a = atomic;
    assert_eq!(seen[0].0, (9, a.opcode, a.flags, a.target, a.imm_data));
    assert_eq!(seen[0].2, atomic.sg_list);
    assert_eq!(seen[1].0 .4, ImmData::from_value(10));
    assert_eq!(seen[1].1, 5, "xrc_srqn masked to 24 bits");
    assert_eq!(seen[1].2, sg);
}

/// Inline bytes are copied at post time: the caller reuses its buffer at
/// once and the engine still reads what was posted.
#[test]
fn inline_data_is_copied_at_post_time() {
    let r = ring(QpType::Uc, 4);
    r.set_mirror(QpState::Rts, 0, 0);
    let mut buf = *b"hello, inline world";
    let wr = SendWr {
        flags: SendFlags::INLINE,
        sg_list: &[Sge {
            addr: 1,
            length: buf.len() as u32,
            lkey: 0,
        }],
        ..send(1, &[])
    };
    r.post(&wr, Some(&buf), 0).unwrap();
    buf.fill(0);
    let zero = SendWr {
        flags: SendFlags::INLINE,
        sg_list: &[],
        ..send(2, &[])
    };
    r.post(&zero, Some(&[]), 0).unwrap();
    let taken = take_all(&r);
    assert_eq!(taken[0].2.as_deref(), Some(&b"hello, inline world"[..]));
    assert_eq!(taken[1].2.as_deref(), Some(&[][..]), "inline, empty");
    // A non-inline WR carries no inline bytes even if some are offered.
    r.post(&send(3, &[]), Some(b"x"), 0).unwrap();
    assert_eq!(take_all(&r)[0].2, None);
}

/// A UD WR takes its destination from the AH at post time: destroying the
/// AH afterwards changes nothing for it; after the destroy a post naming it
/// is refused; an AH of another PD is refused.
#[test]
fn a_ud_post_copies_the_ah_and_outlives_its_destroy() {
    let dev = Arc::new(Device::default());
    let ahs = &dev.ahs;
    let r = ring_with(cfg(QpType::Ud, 4), dev.clone());
    r.set_mirror(QpState::Rts, 0, 0x1111);
    let (ah, other) = (AhHandle::from_raw(5), AhHandle::from_raw(6));
    let dgid = Gid::from("127.0.0.9".parse::<std::net::IpAddr>().unwrap());
    let entry = AhEntry {
        pd: pd(PD),
        dgid,
        sgid_index: 0,
        hop_limit: 9,
        traffic_class: 3,
    };
    ahs.insert(ah, entry);
    ahs.insert(other, AhEntry { pd: pd(8), ..entry });
    let ud = |ah, qkey| SendWr {
        target: WrTarget::Ud(UdTarget {
            ah,
            remote_qpn: 0x0100_0077,
            remote_qkey: qkey,
        }),
        ..send(1, &[])
    };
    r.post(&ud(ah, 0x8000_0000), None, 0).unwrap();
    r.post(&ud(ah, 0x2222), None, 0).unwrap();
    ahs.remove(ah);
    assert!(matches!(
        r.post(&ud(ah, 1), None, 0),
        Err(PostError::NoSuchAh { .. })
    ));
    assert!(matches!(
        r.post(&ud(other, 1), None, 0),
        Err(PostError::AhPd)
    ));
    let taken = take_all(&r);
    let want = UdDest {
        dgid,
        sgid_index: 0,
        hop_limit: 9,
        traffic_class: 3,
        remote_qpn: 0x77,
        qkey: 0x1111,
    };
    assert_eq!(taken[0].3, Some(want), "bit 31: the QP's own Q_Key");
    assert_eq!(
        taken[1].3,
        Some(UdDest {
            qkey: 0x2222,
            ..want
        })
    );
}

#[test]
fn err_and_sqe_mean_flush_and_a_racing_change_means_settle() {
    let r = ring(QpType::Uc, 4);
    assert!(!r.set_mirror(QpState::Rts, 0, 0));
    r.post(&send(1, &[]), None, 0).unwrap();
    assert!(
        r.set_mirror(QpState::Err, 0, 0),
        "moved with a WR in the ring"
    );
    assert!(
        !r.set_mirror(QpState::Err, 0, 0),
        "no change, nothing to do"
    );
    assert_eq!(r.post(&send(2, &[]), None, 0).unwrap(), SendPost::Flush);
    assert_eq!(r.pending(), 1, "a flushed post is not in the ring");
    let r = ring(QpType::Uc, 4);
    r.set_mirror(QpState::Sqe, 0, 0);
    assert_eq!(r.post(&send(2, &[]), None, 0).unwrap(), SendPost::Flush);
    r.set_mirror(QpState::Sqd, 0, 0);
    assert_eq!(
        r.post(&send(2, &[]), None, 0).unwrap(),
        SendPost::Queued { idle: true },
        "SQD holds it"
    );
    // A change of max_rd_atomic or Q_Key alone settles nothing.
    assert!(!r.set_mirror(QpState::Sqd, 3, 9));
}

/// The interleavings of a post with the engine's move to ERR, SQE or RESET,
/// step by step: whichever order, the WQE is either drained by the engine's
/// settle or the post says Settle.
#[test]
fn a_post_racing_a_move_to_err_is_never_left_behind() {
    for to in [QpState::Err, QpState::Sqe, QpState::Reset] {
        // Checked in RTS; the engine moves (nothing in the ring yet: no
        // settle); then the slot is published: the post must say Settle.
        let r = ring(QpType::Uc, 4);
        r.set_mirror(QpState::Rts, 0, 0);
        let Ok(Write::Written(w)) = r.write(&send(5, &[]), None, 0) else {
            panic!("not written")
        };
        assert!(!r.set_mirror(to, 0, 0));
        assert_eq!(r.publish(w), SendPost::Settle, "{to:?}");
        // Published before the move: the engine settles it.
        let r = ring(QpType::Uc, 4);
        r.set_mirror(QpState::Rts, 0, 0);
        let Ok(Write::Written(w)) = r.write(&send(5, &[]), None, 0) else {
            panic!("not written")
        };
        assert_eq!(r.publish(w), SendPost::Queued { idle: true });
        assert!(r.set_mirror(to, 0, 0), "{to:?}");
    }
}

#[test]
fn a_post_lists_its_qp_once_until_the_engine_unlists_it() {
    let dev = Arc::new(Device::default());
    let posted = &dev.posted;
    let r = SendRing::new(cfg(QpType::Uc, 8), dev.clone());
    r.set_handle(QpHandle::from_raw(0x55));
    r.set_mirror(QpState::Rts, 0, 0);
    r.post(&send(1, &[]), None, 0).unwrap();
    r.post(&send(2, &[]), None, 0).unwrap();
    let mine = lanes::lane();
    let mut list = Vec::new();
    posted.take(LaneSet::ALL, &mut list);
    assert_eq!(
        list,
        [(mine, QpHandle::from_raw(0x55))],
        "in the poster's lane"
    );
    posted.take(LaneSet::ALL, &mut list);
    assert_eq!(list.len(), 1, "nothing new");
    r.unlist();
    take_all(&r);
    r.post(&send(3, &[]), None, 0).unwrap();
    list.clear();
    posted.take(LaneSet::ALL, &mut list);
    assert_eq!(list, [(mine, QpHandle::from_raw(0x55))], "listed again");
}

/// A post lists its QP in the posting thread's lane: a take of another
/// lane does not see it, a take of the poster's does (crate `lanes`).
#[test]
fn a_post_is_listed_in_its_posters_lane() {
    let dev = Arc::new(Device::default());
    let r = Arc::new(SendRing::new(cfg(QpType::Uc, 8), dev.clone()));
    r.set_handle(QpHandle::from_raw(0x77));
    r.set_mirror(QpState::Rts, 0, 0);
    let poster = {
        let r = r.clone();
        std::thread::spawn(move || {
            r.post(&send(1, &[]), None, 0).unwrap();
            lanes::lane()
        })
        .join()
        .unwrap()
    };
    let others: LaneSet = (0..lanes::LANES).filter(|&i| i != poster).collect();
    let mut list = Vec::new();
    assert!(!dev.posted.any(others));
    dev.posted.take(others, &mut list);
    assert!(list.is_empty(), "not in another lane");
    assert!(dev.posted.any_in(poster));
    dev.posted.take(LaneSet::of(poster), &mut list);
    assert_eq!(list, [(poster, QpHandle::from_raw(0x77))]);
}

/// A poster and the engine's side that drains only the QPs on the posted
/// list (take, unlist, drain, as `Engine::take_posted_in` does), at once:
/// no WQE is ever left in the ring while the QP is off the list (a post
/// that saw the mark still set is taken by the drain after the unlist).
/// Every WR arrives once, in order. Bounded in count (50 000) and time
/// (30 s).
#[test]
fn a_post_racing_the_unlist_is_never_left_off_the_list() {
    const N: u64 = 50_000;
    let deadline = Instant::now() + Duration::from_secs(30);
    let dev = Arc::new(Device::default());
    let r = Arc::new(ring_with(cfg(QpType::Rc, 8), dev.clone()));
    r.set_mirror(QpState::Rts, 0, 0);
    let poster = {
        let r = r.clone();
        std::thread::spawn(move || {
            let mut id = 0;
            while id < N && Instant::now() < deadline {
                match r.post(&send(id, &[]), None, 0) {
                    Ok(SendPost::Queued { .. }) => id += 1,
                    Err(PostError::QueueFull { .. }) => std::hint::spin_loop(),
                    other => panic!("unexpected {other:?}"),
                }
            }
            id
        })
    };
    let (mut next, mut list) = (0u64, Vec::new());
    let mut drain = |list: &mut Vec<(usize, QpHandle)>| {
        dev.posted.take(LaneSet::ALL, list);
        for _ in list.drain(..) {
            r.unlist();
            let mut got = 0;
            r.drain(|d| {
                assert_eq!(d.wr.wr_id, next, "out of order or duplicated");
                next += 1;
                got += 1;
            });
            r.taken(got);
        }
    };
    while !poster.is_finished() {
        drain(&mut list);
    }
    let posted = poster.join().unwrap();
    assert_eq!(posted, N, "the poster did not finish in time");
    // Whatever is still in the ring is listed: one more take finds it.
    drain(&mut list);
    assert_eq!(next, N, "WQEs left in the ring with the QP off the list");
    assert_eq!(r.pending(), 0);
}

/// Three posting threads and the engine's side taking and retiring WQEs at
/// once: each WQE arrives exactly once, each poster's in its order, with
/// its SGEs, and the depth is never exceeded. Bounded in count (3 × 20 000)
/// and time (30 s).
#[test]
fn concurrent_posters_and_the_engine_side() {
    const PER: u64 = 20_000;
    const DEPTH: u32 = 16;
    let deadline = Instant::now() + Duration::from_secs(30);
    let r = Arc::new(ring(QpType::Rc, DEPTH));
    r.set_mirror(QpState::Rts, 0, 0);
    let posters: Vec<_> = (1..=3u64)
        .map(|t| {
            let r = r.clone();
            std::thread::spawn(move || {
                let mut seq = 0;
                while seq < PER && Instant::now() < deadline {
                    let id = t << 32 | seq;
                    let sg: Vec<Sge> = (0..seq % 4).map(|k| sge(id + k)).collect();
                    match r.post(&send(id, &sg), None, 0) {
                        Ok(SendPost::Queued { .. }) => seq += 1,
                        Err(PostError::QueueFull { .. }) => std::thread::yield_now(),
                        other => panic!("unexpected {other:?}"),
                    }
                }
                seq
            })
        })
        .collect();
    let mut next = [0u64; 4];
    let mut in_queue = 0u32;
    while next[1..].iter().sum::<u64>() < 3 * PER && Instant::now() < deadline {
        assert!(r.queued() <= DEPTH, "beyond the depth");
        let mut got = 0;
        r.drain(|d| {
            let (t, seq) = ((d.wr.wr_id >> 32) as usize, d.wr.wr_id & 0xffff_ffff);
            assert_eq!(seq, next[t], "poster {t} out of order or duplicated");
            let want: Vec<Sge> = (0..seq % 4).map(|k| sge(d.wr.wr_id + k)).collect();
            assert_eq!(d.wr.sg_list, &want[..]);
            next[t] += 1;
            got += 1;
        });
        in_queue += got;
        // Retire half of what the engine holds (as ACKs would).
        let n = in_queue.div_ceil(2);
        r.taken(n);
        in_queue -= n;
        if got == 0 {
            std::thread::yield_now();
        }
    }
    let posted: Vec<u64> = posters.into_iter().map(|p| p.join().unwrap()).collect();
    assert_eq!(posted, [PER; 3], "posters did not finish in time");
    assert_eq!(next[1..], [PER; 3]);
    r.taken(in_queue);
    assert_eq!(r.queued(), 0);
}

fn arb_opcode() -> impl Strategy<Value = WrOpcode> {
    prop::sample::select(crate::wr::WR_OPCODES.map(|r| r.0).to_vec())
}

fn arb_target() -> impl Strategy<Value = WrTarget> {
    prop_oneof![
        Just(WrTarget::None),
        (any::<u64>(), any::<u32>()).prop_map(|(a, k)| WrTarget::Rdma(RdmaTarget {
            remote_addr: a & !4,
            rkey: k
        })),
        (0u64..3).prop_map(|a| WrTarget::Atomic(AtomicTarget {
            remote_addr: a * 4,
            compare_add: 1,
            swap: 2,
            rkey: 3
        })),
        (1u64..4, 0u32..2).prop_map(|(ah, q)| WrTarget::Ud(UdTarget {
            ah: AhHandle::from_raw(ah),
            remote_qpn: 5,
            remote_qkey: q << 31,
        })),
        any::<u32>().prop_map(|rkey| WrTarget::Invalidate { rkey }),
    ]
}

proptest! {
    /// A post on the ring answers exactly as `check_post_send` does on the
    /// same QP as the engine sees it (state, type, capacities, depth, AHs):
    /// the same error, or accepted (Flush exactly when it says Flushed).
    #[test]
    fn a_ring_post_answers_as_check_post_send(
        qp_type in prop::sample::select(vec![QpType::Rc, QpType::Uc, QpType::Ud, QpType::XrcSend]),
        state in prop::sample::select(QpState::ALL.to_vec()),
        rd_atomic in 0u8..2,
        opcode in arb_opcode(),
        flags in 0u32..0x40,
        nsge in 0usize..5,
        len in prop::sample::select(vec![0u32, 8, 16, 33, 1025]),
        target in arb_target(),
        prefill in 0u32..4,
    ) {
        let dev = Arc::new(Device::default());
        let ahs = &dev.ahs;
        let gid = Gid::ZERO;
        let e = AhEntry { pd: pd(PD), dgid: gid, sgid_index: 0, hop_limit: 1, traffic_class: 0 };
        ahs.insert(AhHandle::from_raw(1), e);
        ahs.insert(AhHandle::from_raw(2), AhEntry { pd: pd(9), ..e });
        let r = ring_with(cfg(qp_type, 3), dev.clone());
        r.set_mirror(QpState::Rts, rd_atomic, 0);
        for i in 0..prefill.min(3) {
            let mut w = send(100 + u64::from(i), &[]);
            if qp_type == QpType::Ud {
                w.target = WrTarget::Ud(UdTarget { ah: AhHandle::from_raw(1), remote_qpn: 5, remote_qkey: 0 });
            }
            r.post(&w, None, 0).unwrap();
        }
        r.set_mirror(state, rd_atomic, 0);
        let sg: Vec<Sge> = (0..nsge).map(|i| Sge { addr: 8 * i as u64, length: len / nsge.max(1) as u32, lkey: 1 }).collect();
        let wr = SendWr { wr_id: 1, opcode, flags: SendFlags(flags), sg_list: &sg, imm_data: ImmData::default(), target };
        let ctx = SendQueueCtx {
            qp_type, state, pd: pd(PD), max_send_wr: 3, max_send_sge: 3, max_inline_data: 32,
            max_rd_atomic: rd_atomic, ud_mtu: 1024, outstanding: prefill.min(3),
        };
        let want = check_post_send(&ctx, &wr, |h| ahs.get(h).map(|a| a.pd));
        let inline = vec![0u8; crate::wr::sg_total_len(&sg) as usize];
        let got = r.post(&wr, Some(&inline), 0);
        match (want, got) {
            (Err(w), Err(g)) => prop_assert_eq!(w, g),
            (Ok(Disposition::Flushed), Ok(SendPost::Flush)) => {}
            (Ok(d), Ok(SendPost::Queued { .. })) => prop_assert!(matches!(d, Disposition::Processed | Disposition::Queued)),
            (w, g) => prop_assert!(false, "check_post_send {:?}, ring {:?}", w, g),
        }
    }
}

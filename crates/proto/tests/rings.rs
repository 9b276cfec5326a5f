//! The receive ring against the engine, across threads: posts made without
//! the engine race the QP's move to ERR, and every accepted WR still
//! completes exactly once (flushed), whichever side won each race.

mod net;
use net::*;
use proto::rq::RingPost;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn set_state(n: &Mutex<Node>, qp: QpHandle, s: QpState) {
    let attr = QpAttr {
        qp_state: s,
        ..QpAttr::default()
    };
    n.lock()
        .unwrap()
        .e
        .modify_qp(qp, &attr, AttrMask::STATE)
        .unwrap();
}

/// Each round: a poster thread posts up to 200 receives without the engine
/// (taking it only when the ring says Flush or Settle, as softverbs does)
/// while this thread moves the QP to ERR at a jittered moment. Then every
/// WR the poster saw accepted must come out of the CQ exactly once with
/// WR_FLUSH_ERR, and nothing else. Bounded: 150 rounds, 60 s.
#[test]
fn posts_racing_the_move_to_err_each_complete_once() {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut net = Net::new();
    let (qa, _, _, _) = connect(&mut net, QpType::Rc);
    let gid = net.b.gid();
    let node = Arc::new(Mutex::new(net.a));
    let ring = node.lock().unwrap().e.recv_ring(qa).unwrap();
    let sge = [Sge {
        addr: BASE,
        length: 64,
        lkey: 0,
    }];
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for round in 0..150u64 {
        assert!(Instant::now() < deadline, "out of time at round {round}");
        let poster = {
            let (node, ring) = (node.clone(), ring.clone());
            std::thread::spawn(move || {
                let mut accepted = Vec::new();
                for i in 0..200 {
                    let wr = RecvWr {
                        wr_id: round << 16 | i,
                        sg_list: &sge,
                    };
                    let r = match ring.post(&wr) {
                        Ok(RingPost::Queued) => Ok(()),
                        Ok(RingPost::Flush | RingPost::Full) => {
                            node.lock().unwrap().e.post_recv(qa, &wr).map(drop)
                        }
                        Ok(RingPost::Settle) => node.lock().unwrap().e.settle_recv(qa),
                        Err(e) => Err(e),
                    };
                    match r {
                        Ok(()) => accepted.push(wr.wr_id),
                        Err(e) => panic!("post refused: {e}"),
                    }
                }
                accepted
            })
        };
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        for _ in 0..x % 20_000 {
            std::hint::spin_loop();
        }
        set_state(&node, qa, QpState::Err);
        let accepted = poster.join().unwrap();
        let mut n = node.lock().unwrap();
        let wcs = n.poll();
        let mut seen = BTreeSet::new();
        for w in &wcs {
            assert_eq!(w.status, WcStatus::WrFlushErr, "{w:?}");
            assert_eq!(w.opcode, WcOpcode::Recv);
            assert!(seen.insert(w.wr_id), "wr_id {:#x} completed twice", w.wr_id);
        }
        let want: BTreeSet<u64> = accepted.iter().copied().collect();
        assert_eq!(seen, want, "round {round}: accepted WRs and flushes differ");
        assert_eq!(n.e.qp(qa).unwrap().recv_queue_len(), 0);
        drop(n);
        // Back to RTS for the next round.
        set_state(&node, qa, QpState::Reset);
        let mut n = node.lock().unwrap();
        up(&mut n, qa, QpType::Rc, 0x1234, gid);
    }
}

/// A post while the QP is in RESET is refused and leaves nothing behind; a
/// post in INIT survives INIT → RTR → RTS and is consumed by an arriving
/// SEND (the engine takes it from the ring).
#[test]
fn a_ring_post_is_consumed_by_an_arriving_send() {
    let mut net = Net::new();
    let (qa, _, qb, _) = connect(&mut net, QpType::Rc);
    let (lkey_a, _) = net.a.mr(0, 4096, 0xf);
    let (lkey_b, _) = net.b.mr(0, 4096, 0xf);
    let ring = net.b.e.recv_ring(qb).unwrap();
    let rsge = [Sge {
        addr: BASE,
        length: 64,
        lkey: lkey_b,
    }];
    assert_eq!(
        ring.post(&RecvWr {
            wr_id: 77,
            sg_list: &rsge
        })
        .unwrap(),
        RingPost::Queued
    );
    let ssge = [Sge {
        addr: BASE + 1024,
        length: 64,
        lkey: lkey_a,
    }];
    net.a
        .e
        .post_send(qa, &send_wr(5, WrOpcode::Send, &ssge, WrTarget::None), None)
        .unwrap();
    net.run();
    let got: Vec<_> = net
        .b
        .poll()
        .iter()
        .map(|w| (w.wr_id, w.status, w.byte_len))
        .collect();
    assert_eq!(got, [(77, WcStatus::Success, 64)]);
    assert_eq!(net.b.e.qp(qb).unwrap().recv_queue_len(), 0);
}

// ---- the send ring (proto::sq) ----

use proto::sq::{SendPost, SendRing};
use proto::wr::PostError;

/// Posts `wr` on `ring` as softverbs does: the engine only for Flush and
/// Settle. Ok(true) if accepted, Ok(false) if the queue was full.
fn ring_post(
    node: &Mutex<Node>,
    qp: QpHandle,
    ring: &SendRing,
    wr: &SendWr<'_>,
) -> Result<bool, proto::wr::PostError> {
    match ring.post(wr, None, 0) {
        Ok(SendPost::Queued { .. }) => Ok(true),
        Ok(SendPost::Flush) => node.lock().unwrap().e.post_send(qp, wr, None).map(|_| true),
        Ok(SendPost::Settle) => node.lock().unwrap().e.settle_send(qp).map(|()| true),
        Err(proto::wr::PostError::QueueFull { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The engine's side of A as the progress thread runs it: the datagrams A
/// has to send are taken (and dropped: UC sends complete when sent), at
/// most 256 a pass (posters refill meanwhile; the CQ of 4096 must not
/// overrun between two polls).
fn transmit_all(n: &mut Node) -> usize {
    let mut buf = vec![0u8; 9000];
    let mut sent = 0;
    while sent < 256 && n.e.poll_transmit(0, &n.mem, &mut buf).is_some() {
        sent += 1;
    }
    sent
}

/// Each round: a poster thread posts up to 200 UC SENDs on the send ring
/// (the engine only for Flush/Settle) while this thread transmits what was
/// posted and moves the QP to ERR at a jittered moment. Then every WR the
/// poster saw accepted completes exactly once, in posting order: a run of
/// successes (sent before the move), then flushes; nothing else.
/// Bounded: 100 rounds, 60 s.
#[test]
fn send_posts_racing_the_move_to_err_each_complete_once_in_order() {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut net = Net::new();
    let (qa, _, nb, _) = connect(&mut net, QpType::Uc);
    let peer = net.b.e.qp(nb).unwrap().ctl.qpn();
    let gid = net.b.gid();
    let node = Arc::new(Mutex::new(net.a));
    let ring = node.lock().unwrap().e.send_ring(qa).unwrap();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut both = 0;
    for round in 0..100u64 {
        assert!(Instant::now() < deadline, "out of time at round {round}");
        let poster = {
            let (node, ring) = (node.clone(), ring.clone());
            std::thread::spawn(move || {
                let mut accepted = Vec::new();
                for i in 0..200 {
                    let wr = send_wr(round << 16 | i, WrOpcode::Send, &[], WrTarget::None);
                    match ring_post(&node, qa, &ring, &wr) {
                        Ok(true) => accepted.push(wr.wr_id),
                        other => panic!("post refused: {other:?}"),
                    }
                }
                accepted
            })
        };
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Once the poster has begun, a jittered number of progress passes.
        while ring.queued() == 0 && !poster.is_finished() && Instant::now() < deadline {
            std::thread::yield_now();
        }
        for _ in 0..=x % 4 {
            transmit_all(&mut node.lock().unwrap());
            std::thread::yield_now();
        }
        set_state(&node, qa, QpState::Err);
        let accepted = poster.join().unwrap();
        let mut n = node.lock().unwrap();
        let wcs = n.poll();
        let got: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
        assert_eq!(got, accepted, "round {round}: each once, in posting order");
        let ok = wcs.iter().take_while(|w| w.status == WcStatus::Success);
        let flushed = &wcs[ok.count()..];
        assert!(
            flushed.iter().all(|w| w.status == WcStatus::WrFlushErr),
            "successes, then flushes only"
        );
        if !flushed.is_empty() && flushed.len() < wcs.len() {
            both += 1;
        }
        assert_eq!(n.e.qp(qa).unwrap().send_queue_len(), 0);
        assert_eq!(ring.queued(), 0, "the depth count is back to zero");
        drop(n);
        set_state(&node, qa, QpState::Reset);
        let mut n = node.lock().unwrap();
        up(&mut n, qa, QpType::Uc, peer, gid);
    }
    // How the races fell is timing, never asserted; it is only reported.
    eprintln!("{both} of 100 rounds saw both successes and flushes");
}

/// `post_send` on the ring succeeds while another thread holds the engine
/// (the lock is held for the whole post and released only after it).
#[test]
fn a_send_post_succeeds_while_the_engine_lock_is_held() {
    let mut net = Net::new();
    let (qa, _, _, _) = connect(&mut net, QpType::Uc);
    let node = Arc::new(Mutex::new(net.a));
    let ring = node.lock().unwrap().e.send_ring(qa).unwrap();
    let guard = node.lock().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let poster = std::thread::spawn(move || {
        let wr = send_wr(7, WrOpcode::Send, &[], WrTarget::None);
        tx.send(ring.post(&wr, None, 0)).unwrap();
    });
    let posted = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the post waited for the engine lock");
    assert_eq!(posted.unwrap(), SendPost::Queued { idle: true });
    poster.join().unwrap();
    let mut n = guard;
    assert_eq!(transmit_all(&mut n), 1, "the progress side finds it");
    let wcs = n.poll();
    assert_eq!(
        (wcs.len(), wcs[0].wr_id, wcs[0].status),
        (1, 7, WcStatus::Success)
    );
}

/// An `IBV_SEND_INLINE` post gathers its bytes through the MR check and
/// posts while another thread holds the engine: the device's read-only copy
/// of its regions answers, with the engine's refusals (an unknown key, a
/// region deregistered meanwhile) and the engine's bytes.
#[test]
fn an_inline_post_gathers_through_the_mr_check_while_the_engine_lock_is_held() {
    let mut net = Net::new();
    let (qa, _, _, _) = connect(&mut net, QpType::Uc);
    let data = pattern(48, 3);
    net.a.mem.write(BASE + 0x100, &data);
    let (lkey, _) = net.a.mr(0x100, 0x100, 0);
    let (gone, _) = net.a.mr(0x200, 0x100, 0);
    let h = proto::testing::mr_handle(&net.a.e, gone).unwrap();
    net.a.e.dereg_mr(h).unwrap();
    let node = Arc::new(Mutex::new(net.a));
    let ring = node.lock().unwrap().e.send_ring(qa).unwrap();
    let guard = node.lock().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let poster = {
        let data = data.clone();
        std::thread::spawn(move || {
            // The poster's view of the same bytes (VecMemory is not Sync).
            let mem = proto::memory::VecMemory::new(BASE, MEM);
            mem.write(BASE + 0x100, &data);
            let mut buf = Vec::new();
            let sge = |lkey, off, length| Sge {
                addr: BASE + off,
                length,
                lkey,
            };
            let mut post = |wr_id, sges: &[Sge]| {
                let wr = SendWr {
                    flags: SendFlags::SIGNALED | SendFlags::INLINE,
                    ..send_wr(wr_id, WrOpcode::Send, sges, WrTarget::None)
                };
                ring.gather_inline(&mem, sges, &mut buf)
                    .and_then(|()| ring.post(&wr, Some(&buf), 0))
            };
            let r = vec![
                post(1, &[sge(lkey, 0x100, 16), sge(lkey, 0x110, 32)]),
                post(2, &[sge(lkey, 0x1f0, 32)]), // past the region's end
                post(3, &[sge(gone, 0x200, 8)]),  // deregistered
                post(4, &[sge(lkey ^ 1, 0x100, 8)]), // stale tag
            ];
            tx.send(r).unwrap();
        })
    };
    let r = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the inline post waited for the engine lock");
    poster.join().unwrap();
    assert_eq!(r[0], Ok(SendPost::Queued { idle: true }));
    for (i, e) in r[1..].iter().enumerate() {
        assert!(
            matches!(e, Err(PostError::InlineData { .. })),
            "post {}: {e:?}",
            i + 2
        );
    }
    let mut guard = guard;
    let n = &mut *guard;
    let mut buf = vec![0u8; 9000];
    assert!(n.e.poll_transmit(0, &n.mem, &mut buf).is_some());
    assert!(
        buf.windows(data.len()).any(|w| w == data.as_slice()),
        "the SEND carries the gathered bytes"
    );
    let wcs = n.poll();
    assert_eq!((wcs.len(), wcs[0].wr_id), (1, 1));
}

/// Two posting threads on one QP and one on another, while this thread
/// runs the progress side: every WR completes once, each poster's in its
/// order; full queues refuse (ENOMEM) and the poster retries. Bounded:
/// 3 × 2000 WRs, 60 s.
#[test]
fn posting_threads_on_one_qp_and_on_two_qps() {
    const PER: u64 = 2000;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut net = Net::new();
    let (q1, _, _, _) = connect(&mut net, QpType::Uc);
    let (q2, _, _, _) = connect(&mut net, QpType::Uc);
    let node = Arc::new(Mutex::new(net.a));
    let posters: Vec<_> = [(1u64, q1), (2, q1), (3, q2)]
        .into_iter()
        .map(|(t, qp)| {
            let node = node.clone();
            let ring = node.lock().unwrap().e.send_ring(qp).unwrap();
            std::thread::spawn(move || {
                let mut seq = 0;
                while seq < PER && Instant::now() < deadline {
                    let wr = send_wr(t << 32 | seq, WrOpcode::Send, &[], WrTarget::None);
                    match ring_post(&node, qp, &ring, &wr) {
                        Ok(true) => seq += 1,
                        Ok(false) => std::thread::sleep(Duration::from_micros(50)),
                        Err(e) => panic!("post refused: {e}"),
                    }
                }
                seq
            })
        })
        .collect();
    let mut next = [0u64; 4];
    while next[1..].iter().sum::<u64>() < 3 * PER && Instant::now() < deadline {
        let mut n = node.lock().unwrap();
        let sent = transmit_all(&mut n);
        for w in n.poll() {
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            let (t, seq) = ((w.wr_id >> 32) as usize, w.wr_id & 0xffff_ffff);
            assert_eq!(seq, next[t], "poster {t}: out of order or twice");
            let qp = if t == 3 { q2 } else { q1 };
            assert_eq!(w.qp_num, n.e.qp(qp).unwrap().ctl.qpn(), "on its QP");
            next[t] += 1;
        }
        drop(n);
        if sent == 0 {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    let posted: Vec<u64> = posters.into_iter().map(|p| p.join().unwrap()).collect();
    assert_eq!(posted, [PER; 3], "posters did not finish in time");
    assert_eq!(next[1..], [PER; 3]);
}

/// A UD post through the ring: its inline bytes are copied at post time (the
/// buffer is overwritten at once) and its destination too (the AH is
/// destroyed before the engine ever sees the WR); B receives what was
/// posted. After the destroy, a post naming the AH is refused.
#[test]
fn a_ud_ring_post_keeps_its_inline_bytes_and_its_destination() {
    let mut net = Net::new();
    let (qa, na, qb, nb) = connect(&mut net, QpType::Ud);
    let (lb, _) = net.b.mr(0, 1 << 16, 1);
    let ah = net
        .a
        .e
        .create_ah(net.a.pd, &AhAttr::roce(net.b.gid(), 0))
        .unwrap();
    net.b
        .e
        .post_recv(
            qb,
            &RecvWr {
                wr_id: 1,
                sg_list: &[Sge {
                    addr: BASE,
                    length: 2048,
                    lkey: lb,
                }],
            },
        )
        .unwrap();
    let ring = net.a.e.send_ring(qa).unwrap();
    let mut buf = pattern(200, 9);
    let sg = [Sge {
        addr: 0xdead_0000,
        length: 200,
        lkey: 0,
    }];
    let wr = SendWr {
        flags: SendFlags::SIGNALED | SendFlags::INLINE,
        ..send_wr(
            5,
            WrOpcode::Send,
            &sg,
            WrTarget::Ud(UdTarget {
                ah,
                remote_qpn: nb,
                remote_qkey: 0x1111,
            }),
        )
    };
    assert_eq!(
        ring.post(&wr, Some(&buf), 0).unwrap(),
        SendPost::Queued { idle: true }
    );
    buf.fill(0);
    net.a.e.destroy_ah(ah).unwrap();
    assert!(matches!(
        ring.post(&wr, Some(&buf), 0),
        Err(proto::wr::PostError::NoSuchAh { .. })
    ));
    net.run();
    let wa = net.a.poll();
    assert_eq!(
        wa.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(5, WcStatus::Success)]
    );
    let wb = net.b.poll();
    assert_eq!(wb.len(), 1, "{wb:?}");
    assert_eq!((wb[0].wr_id, wb[0].byte_len, wb[0].src_qp), (1, 240, na));
    assert_eq!(net.b.mem.snapshot(BASE + 40, 200), pattern(200, 9));
}

/// A move to ERR with WRs waiting in the send queue (sent, not yet
/// acknowledged) and newer ones still on the send ring (posted without the
/// engine, not yet taken): every WR completes with WR_FLUSH_ERR in posting
/// order — the ring's WRs after the queue's, although the move's turn takes
/// the ring before it flushes the queue. (Found by tests/concurrency.rs: a
/// post racing the control thread's move to ERR completed before older
/// WRs of its QP.)
#[test]
fn a_move_to_err_flushes_the_queue_and_the_ring_in_posting_order() {
    let mut net = Net::new();
    let (qa, _, _, _) = connect(&mut net, QpType::Rc);
    let ring = net.a.e.send_ring(qa).unwrap();
    let post = |wr_id| {
        let wr = send_wr(wr_id, WrOpcode::Send, &[], WrTarget::None);
        assert!(matches!(
            ring.post(&wr, None, 0),
            Ok(SendPost::Queued { .. })
        ));
    };
    for wr_id in 0..3 {
        post(wr_id);
    }
    // Taken and sent; B never answers (the datagrams are dropped).
    let mut buf = vec![0u8; 9000];
    let n = &net.a;
    while n.e.poll_transmit(0, &n.mem, &mut buf).is_some() {}
    assert_eq!(n.e.qp(qa).unwrap().send_queue_len(), 3);
    for wr_id in 3..5 {
        post(wr_id);
    }
    assert_eq!(ring.pending(), 2, "still on the ring");
    let attr = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    net.a.e.modify_qp(qa, &attr, AttrMask::STATE).unwrap();
    let got: Vec<_> = net.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    let want: Vec<_> = (0..5).map(|id| (id, WcStatus::WrFlushErr)).collect();
    assert_eq!(got, want, "flushed once each, in posting order");
    assert_eq!(ring.queued(), 0, "the depth count is back to zero");
}

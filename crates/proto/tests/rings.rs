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

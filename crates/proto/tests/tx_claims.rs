//! Transmit claims (proto::sched::TxClaims, spec/concurrency.md §2): a QP a
//! transmitting thread took a datagram from is given no turn by another
//! thread until the first lets it go, and what wakes it meanwhile (a post)
//! waits for that release, then goes to the ready queue. Two claim sets on
//! one thread stand for two transmitting threads.

mod cm_common;
mod net;
use net::*;
use proto::datapath::TxClaims;

/// (destination QPN, PSN) of a datagram.
fn who(buf: &[u8]) -> (u32, u32) {
    let r = wire::TransportRepr::parse(buf).expect("a valid packet");
    (r.bth.dest_qp.get(), r.bth.psn.get())
}

/// A's QPs `qa1`, `qa2` connected to B's (`nb1`, `nb2`); each WRITEs
/// `len` bytes (1 KiB MTU: `len / 1024` packets).
fn write(net: &mut Net, qa: QpHandle, wr_id: u64, len: u32, lkey: u32, rkey: u32) {
    let sg = [Sge {
        addr: BASE,
        length: len,
        lkey,
    }];
    let t = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE,
        rkey,
    });
    net.a
        .e
        .post_send(qa, &send_wr(wr_id, WrOpcode::RdmaWrite, &sg, t), None)
        .unwrap();
}

/// A's QP of a connected RC pair and its peer's QPN.
type Pair = (QpHandle, u32);

/// Two connected RC pairs, and (A's lkey, B's rkey).
fn two_pairs() -> (Net, Pair, Pair, (u32, u32)) {
    let mut net = Net::new();
    let (qa1, _, _, nb1) = connect(&mut net, QpType::Rc);
    let (qa2, _, _, nb2) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 1 << 16, 1);
    let (_, rb) = net.b.mr(0, 1 << 16, 1 | 2 | 4 | 8);
    (net, (qa1, nb1), (qa2, nb2), (la, rb))
}

#[test]
fn a_claimed_qp_sends_from_its_thread_only_until_released() {
    let (mut net, (qa1, nb1), (qa2, nb2), (la, rb)) = two_pairs();
    // QP 1 first in the ready queue: 3 packets; QP 2: 2 packets.
    write(&mut net, qa1, 1, 3 * 1024, la, rb);
    write(&mut net, qa2, 2, 2 * 1024, la, rb);
    let (e, mem, now) = (&net.a.e, &net.a.mem, net.now);
    let mut buf = vec![0u8; 9000];
    let (mut one, mut two) = (TxClaims::default(), TxClaims::default());
    let t = e
        .poll_transmit_claimed(now, mem, &mut buf, &mut one)
        .unwrap();
    let (qpn, first) = who(&buf[..t.len]);
    assert_eq!(qpn, nb1, "the front of the ready queue");
    // The other thread gets QP 2's packets, never QP 1's.
    let mut got = Vec::new();
    while let Some(t) = e.poll_transmit_claimed(now, mem, &mut buf, &mut two) {
        got.push(who(&buf[..t.len]));
    }
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|&(q, _)| q == nb2), "{got:?}");
    // QP 1's next packets come to the thread that claimed it, in order.
    for k in 1..3 {
        let t = e
            .poll_transmit_claimed(now, mem, &mut buf, &mut one)
            .unwrap();
        assert_eq!(who(&buf[..t.len]), (nb1, first + k));
    }
    assert!(e
        .poll_transmit_claimed(now, mem, &mut buf, &mut one)
        .is_none());
    // A post to QP 1 while it is claimed: not for the other thread; and the
    // claimer's round skips a QP whose last turn found nothing.
    write(&mut net, qa1, 3, 1024, la, rb);
    let (e, mem) = (&net.a.e, &net.a.mem);
    assert!(e
        .poll_transmit_claimed(now, mem, &mut buf, &mut two)
        .is_none());
    assert!(e
        .poll_transmit_claimed(now, mem, &mut buf, &mut one)
        .is_none());
    assert!(e.qp_tx_pending(qa1), "claimed with a post waiting");
    // Released: it goes to the ready queue, and any thread may take it.
    assert!(
        e.release_claims(&mut one),
        "a QP went back to the ready queue"
    );
    assert!(one.is_empty());
    let t = e
        .poll_transmit_claimed(now, mem, &mut buf, &mut two)
        .unwrap();
    assert_eq!(who(&buf[..t.len]), (nb1, first + 3));
    // Their last packets left: neither QP comes round again.
    e.release_claims(&mut two);
    assert!(e.poll_transmit(now, mem, &mut buf).is_none());
    assert!(!e.qp_tx_pending(qa1) && !e.qp_tx_pending(qa2));
    // Everything arrives and completes once.
    net.run();
    let mut ids: Vec<_> = net.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    ids.sort_by_key(|&(id, _)| id);
    assert_eq!(
        ids,
        [1, 2, 3].map(|id| (id, WcStatus::Success)),
        "each WRITE completes once"
    );
}

#[test]
fn plain_poll_transmit_takes_turns_as_before() {
    // Without claims held across calls, QPs alternate packet by packet
    // (each goes to the back of the ready queue after a packet).
    let (mut net, (qa1, nb1), (qa2, nb2), (la, rb)) = two_pairs();
    write(&mut net, qa1, 1, 2 * 1024, la, rb);
    write(&mut net, qa2, 2, 2 * 1024, la, rb);
    let mut buf = vec![0u8; 9000];
    let mut order = Vec::new();
    while let Some(t) = net.a.e.poll_transmit(net.now, &net.a.mem, &mut buf) {
        order.push(who(&buf[..t.len]).0);
    }
    assert_eq!(order, [nb1, nb2, nb1, nb2]);
}

#[test]
fn a_qp_reset_while_in_the_ready_queue_is_claimed_by_one_thread_only() {
    let mut net = Net::new();
    let (qa, _, _, nb) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 1 << 16, 1);
    let (_, rb) = net.b.mr(0, 1 << 16, 1 | 2 | 4 | 8);
    write(&mut net, qa, 1, 2 * 1024, la, rb);
    let mut buf = vec![0u8; 9000];
    // Its first packet leaves; it stays in the ready queue for the second.
    assert!(net
        .a
        .e
        .poll_transmit(net.now, &net.a.mem, &mut buf)
        .is_some());
    assert!(net.a.e.qp_tx_pending(qa));
    // RESET and back to RTS while it is there (RTS wakes it), then a post.
    let reset = QpAttr {
        qp_state: QpState::Reset,
        ..QpAttr::default()
    };
    modify(&mut net.a, qa, reset, AttrMask::STATE);
    up(&mut net.a, qa, QpType::Rc, nb, net.b.gid());
    write(&mut net, qa, 2, 2 * 1024, la, rb);
    // One thread takes its first packet; the other gets none of its packets.
    one_thread_only(
        &net,
        nb,
        "a second ready-queue entry let another thread claim the QP",
    );
}

/// One thread claims the next two datagrams (both to QP `to`); a second
/// thread gets nothing between them (`why` if it does).
fn one_thread_only(net: &Net, to: u32, why: &str) {
    let (e, mem, now) = (&net.a.e, &net.a.mem, net.now);
    let mut buf = vec![0u8; 9000];
    let (mut one, mut two) = (TxClaims::default(), TxClaims::default());
    let t = e
        .poll_transmit_claimed(now, mem, &mut buf, &mut one)
        .unwrap();
    assert_eq!(who(&buf[..t.len]).0, to);
    assert!(
        e.poll_transmit_claimed(now, mem, &mut buf, &mut two)
            .is_none(),
        "{why}"
    );
    let t = e
        .poll_transmit_claimed(now, mem, &mut buf, &mut one)
        .unwrap();
    assert_eq!(who(&buf[..t.len]).0, to);
    e.release_claims(&mut one);
    e.release_claims(&mut two);
}

#[test]
fn the_cms_mads_leave_from_one_thread_at_a_time() {
    let mut net = Net::new();
    // Two REQs queued (the peer's address in the device's family).
    let peer = Gid::from(net.b.ip);
    for qpn in [0x11, 0x12] {
        let p = proto::cm::ConnectParams {
            peer,
            ..cm_common::connect_params(1, 2, qpn, 0x100, &[])
        };
        net.a.e.cm_mut().connect(0, &p).unwrap();
    }
    // Both MADs go to QP1, from the first thread only.
    one_thread_only(&net, 1, "the second MAD waits for the first thread");
    let (mut buf, mut two) = (vec![0u8; 9000], TxClaims::default());
    assert!(net
        .a
        .e
        .poll_transmit_claimed(net.now, &net.a.mem, &mut buf, &mut two)
        .is_none());
    net.a.e.release_claims(&mut two);
}

#[test]
fn the_posting_thread_gets_its_qps_turn_at_once_and_keeps_the_claim() {
    let (net, (qa1, nb1), _, (la, rb)) = two_pairs();
    post_on_ring(&net, qa1, 2, la, rb);
    let (e, mem, now) = (&net.a.e, &net.a.mem, net.now);
    let mut buf = vec![0u8; 9000];
    let (mut one, mut two) = (TxClaims::default(), TxClaims::default());
    let t = e
        .poll_transmit_posted(qa1, now, mem, &mut buf, &mut one)
        .expect("the posted QP's first packet");
    let (to, first) = who(&buf[..t.len]);
    assert_eq!(to, nb1);
    assert!(
        e.poll_transmit_claimed(now, mem, &mut buf, &mut two)
            .is_none(),
        "another thread takes nothing of a QP the posting thread claims"
    );
    let t = e
        .poll_transmit_claimed(now, mem, &mut buf, &mut one)
        .expect("the claimer's next turn sends the second WRITE");
    assert_eq!(who(&buf[..t.len]), (nb1, first + 1));
    e.release_claims(&mut one);
    e.release_claims(&mut two);
    // Its last packet left: no turn comes round for nothing.
    assert!(!e.qp_tx_pending(qa1));
    assert!(e.poll_transmit(now, mem, &mut buf).is_none());
}

#[test]
fn a_posted_turn_is_none_for_a_qp_claimed_elsewhere_or_queued() {
    let (mut net, (qa1, nb1), (qa2, nb2), (la, rb)) = two_pairs();
    // QP 1: claimed by another thread after its first packet.
    post_on_ring(&net, qa1, 2, la, rb);
    let (mut one, mut two) = (TxClaims::default(), TxClaims::default());
    let mut buf = vec![0u8; 9000];
    {
        let (e, mem, now) = (&net.a.e, &net.a.mem, net.now);
        let t = e
            .poll_transmit_claimed(now, mem, &mut buf, &mut two)
            .unwrap();
        let (_, first) = who(&buf[..t.len]);
        assert!(e
            .poll_transmit_posted(qa1, now, mem, &mut buf, &mut one)
            .is_none());
        let t = e
            .poll_transmit_claimed(now, mem, &mut buf, &mut two)
            .unwrap();
        assert_eq!(who(&buf[..t.len]), (nb1, first + 1), "the claimer sends on");
        e.release_claims(&mut one);
        e.release_claims(&mut two);
    }
    // QP 2: posted through the engine, so it waits in the ready queue; the
    // ready queue's turn takes it.
    write(&mut net, qa2, 3, 1024, la, rb);
    let (e, mem, now) = (&net.a.e, &net.a.mem, net.now);
    assert!(e
        .poll_transmit_posted(qa2, now, mem, &mut buf, &mut one)
        .is_none());
    e.release_claims(&mut one);
    let t = e.poll_transmit(now, mem, &mut buf).unwrap();
    assert_eq!(who(&buf[..t.len]).0, nb2);
    assert!(e.poll_transmit(now, mem, &mut buf).is_none());
}

//! Datagrams built in place (proto::output::Room, spec/performance.md
//! §25). A receive's responses: an RC QP's ACK is built through the room
//! the driver offers, while the QP's lock is held, and needs no transmit
//! turn; without room, or while a transmitting thread claims the QP, it
//! waits for the usual turns. A post's packets likewise
//! (`Engine::transmit_posted_through`), a few at once; and a post to an
//! idle queue made straight into the send queue with them
//! (`Engine::post_send_through`, spec/performance.md §27); and the ready
//! QPs a stream's posts left (`Engine::transmit_ready_through`). A ring's batch
//! taken in one call (`Engine::handle_local_batch`) ends as its datagrams
//! taken one by one, and so does a socket read's (`Engine::handle_batch`,
//! each datagram's ICRC checked).

mod cm_common;
mod net;
use net::*;
use proto::datapath::TxClaims;
use proto::output::{Room, Transmit};
use std::net::SocketAddr;
use wire::opcode::Operation;

/// A way out that keeps what is published (or offers no room).
struct Keep {
    room: bool,
    buf: Vec<u8>,
    asked: Vec<(SocketAddr, u32)>,
    out: Vec<(SocketAddr, Vec<u8>)>,
}

impl Keep {
    fn new(room: bool) -> Keep {
        Keep {
            room,
            buf: vec![0; 9000],
            asked: Vec::new(),
            out: Vec::new(),
        }
    }
}

impl Room for Keep {
    fn room(&mut self, to: SocketAddr, qpn: u32) -> Option<&mut [u8]> {
        self.asked.push((to, qpn));
        self.room.then_some(&mut self.buf[..])
    }

    fn publish(&mut self, t: &Transmit) {
        self.out.push((t.to, self.buf[..t.len].to_vec()));
    }
}

/// `from`'s signaled `len`-byte RDMA WRITE `wr_id` on its QP `qp` into
/// `to`'s memory, each side through a new MR.
fn post_write(from: &mut Node, to: &mut Node, qp: QpHandle, wr_id: u64, len: u32) {
    let (lkey, _) = from.mr(0, 1 << 16, 1);
    let (_, rkey) = to.mr(0, 1 << 16, 1 | 2 | 4 | 8);
    let sg = [Sge {
        addr: BASE,
        length: len,
        lkey,
    }];
    let t = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE,
        rkey,
    });
    let wr = send_wr(wr_id, WrOpcode::RdmaWrite, &sg, t);
    from.e.post_send(qp, &wr, None).unwrap();
}

/// A connected RC pair; A's `len`-byte WRITE (signaled) posted. (A's QP
/// and QPN, B's QP.)
fn posted_write(net: &mut Net, len: u32) -> (QpHandle, u32, QpHandle) {
    let (qa, na, qb, _) = connect(net, QpType::Rc);
    post_write(&mut net.a, &mut net.b, qa, 1, len);
    // What the connection left (turns that find nothing) goes first.
    let mut buf = vec![0u8; 9000];
    assert!(net
        .b
        .e
        .poll_transmit(net.now, &net.b.mem, &mut buf)
        .is_none());
    (qa, na, qb)
}

/// A's next datagram, and A's and B's addresses.
fn from_a(net: &Net) -> (Vec<u8>, SocketAddr, SocketAddr) {
    let mut buf = vec![0u8; 9000];
    let t = net
        .a
        .e
        .poll_transmit(net.now, &net.a.mem, &mut buf)
        .expect("A's WRITE");
    buf.truncate(t.len);
    let a = net.a.addr();
    (buf, a, net.b.addr())
}

/// A's next datagram, taken by B through its same-host entry with `way`.
fn to_b(net: &Net, way: &mut Keep) {
    let (datagram, a, b) = from_a(net);
    net.b
        .e
        .handle_local_datagram(net.now, a, b, &datagram, &net.b.mem, Some(way));
}

fn is_ack(datagram: &[u8]) -> bool {
    let r = wire::TransportRepr::parse(datagram).expect("a valid packet");
    r.opcode().operation() == Operation::Ack
}

#[test]
fn a_request_is_acknowledged_at_once_through_the_way_out() {
    let mut net = Net::new();
    let (qa, na, _) = posted_write(&mut net, 64);
    let sent = net.b.e.counters().packets_sent;
    let mut way = Keep::new(true);
    to_b(&net, &mut way);
    let a = net.a.addr();
    assert_eq!(way.asked, [(a, na)], "room asked for A's QP");
    assert_eq!(way.out.len(), 1, "one datagram published");
    let (to, ack) = &way.out[0];
    assert_eq!(*to, a);
    assert!(is_ack(ack), "the WRITE's ACK");
    assert_eq!(net.b.e.counters().packets_sent, sent + 1, "counted as sent");
    // No turn left for it: the ACK already left.
    let mut buf = vec![0u8; 9000];
    assert!(net
        .b
        .e
        .poll_transmit(net.now, &net.b.mem, &mut buf)
        .is_none());
    // It completes A's WRITE.
    let b = net.b.addr();
    net.a.e.handle_datagram(net.now, b, a, ack, &net.a.mem);
    let wc = net.a.poll();
    assert_eq!(wc.len(), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::Success));
    // The ACK that completed A's last WQE leaves A's QP with nothing to
    // send: no turn is queued for it (Engine::sync).
    assert!(!net.a.e.qp_tx_pending(qa));
}

/// A way out that notes, at each publish, how many whole WRITEs its
/// engine has counted (`Engine::writes_taken`).
struct Noting<'a> {
    keep: Keep,
    e: &'a Engine,
    counted: Vec<u64>,
}

impl Room for Noting<'_> {
    fn room(&mut self, to: SocketAddr, qpn: u32) -> Option<&mut [u8]> {
        self.keep.room(to, qpn)
    }

    fn publish(&mut self, t: &Transmit) {
        self.counted.push(self.e.writes_taken().0);
        self.keep.publish(t);
    }
}

/// A program spinning on its memory sees a WRITE's bytes as soon as they
/// are placed and posts its answer at once; the driver's linger reads the
/// count then to know that the post answers a WRITE. So the count must
/// not wait for the ACK: the WRITE is counted before its ACK is built,
/// whether taken alone or in a ring's batch (spec/performance.md §33).
#[test]
fn a_write_is_counted_before_its_ack_is_built() {
    for batch in [false, true] {
        let mut net = Net::new();
        posted_write(&mut net, 64);
        let (datagram, a, b) = from_a(&net);
        let (e, mem) = (&net.b.e, &net.b.mem);
        assert_eq!(e.writes_taken().0, 0);
        let mut way = Noting {
            keep: Keep::new(true),
            e,
            counted: Vec::new(),
        };
        if batch {
            let mut it = std::iter::once(&datagram[..]);
            e.handle_local_batch(net.now, (a, b), &mut it, mem, Some(&mut way));
        } else {
            e.handle_local_datagram(net.now, a, b, &datagram, mem, Some(&mut way));
        }
        assert!(is_ack(&way.keep.out[0].1), "batch {batch}: the ACK left");
        assert_eq!(way.counted, [1], "batch {batch}: counted when the ACK left");
        assert_eq!(e.writes_taken().0, 1, "batch {batch}: counted once");
    }
}

#[test]
fn without_room_the_ack_waits_for_a_transmit_turn() {
    let mut net = Net::new();
    posted_write(&mut net, 64);
    let mut way = Keep::new(false);
    to_b(&net, &mut way);
    assert_eq!(way.asked.len(), 1);
    assert!(way.out.is_empty());
    let mut buf = vec![0u8; 9000];
    let t = net
        .b
        .e
        .poll_transmit(net.now, &net.b.mem, &mut buf)
        .expect("the ACK, in a turn");
    assert!(is_ack(&buf[..t.len]));
    net.run();
    assert_eq!(net.a.poll()[0].status, WcStatus::Success);
}

#[test]
fn a_qp_a_transmitting_thread_claims_answers_after_its_packets() {
    let mut net = Net::new();
    let (_, _, qb) = posted_write(&mut net, 64);
    // B's own two-packet WRITE to A; a transmitting thread claims B's QP
    // with its first packet.
    post_write(&mut net.b, &mut net.a, qb, 2, 2 * 1024);
    let mut buf = vec![0u8; 9000];
    let mut claims = TxClaims::default();
    let first = net
        .b
        .e
        .poll_transmit_claimed(net.now, &net.b.mem, &mut buf, &mut claims)
        .expect("B's first packet");
    assert!(!is_ack(&buf[..first.len]));
    // A's WRITE arrives meanwhile: no reply at once (the claimer holds a
    // packet of the QP that has yet to leave).
    let mut way = Keep::new(true);
    to_b(&net, &mut way);
    assert!(way.asked.is_empty() && way.out.is_empty());
    // The claimer's turns send the rest; the ACK leaves in a turn too.
    let mut ack = false;
    while let Some(t) = net
        .b
        .e
        .poll_transmit_claimed(net.now, &net.b.mem, &mut buf, &mut claims)
    {
        ack |= is_ack(&buf[..t.len]);
    }
    net.b.e.release_claims(&mut claims);
    while let Some(t) = net.b.e.poll_transmit(net.now, &net.b.mem, &mut buf) {
        ack |= is_ack(&buf[..t.len]);
    }
    assert!(ack, "the ACK left in a transmit turn");
}

/// A connected RC pair with `n` one-packet WRITEs posted on A's send ring
/// ([`post_on_ring`]). (The net, A's QP, B's QPN.)
fn posted_on_ring(n: u64) -> (Net, QpHandle, u32) {
    let mut net = Net::new();
    let (qa, _, _, nb) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 1 << 16, 1);
    let (_, rb) = net.b.mr(0, 1 << 16, 1 | 2 | 4 | 8);
    post_on_ring(&net, qa, n, la, rb);
    (net, qa, nb)
}

#[test]
fn a_posts_packets_go_straight_through_the_room_and_the_rest_wait_for_turns() {
    let (net, qa, nb) = posted_on_ring(6);
    let (e, mem, now) = (&net.a.e, &net.a.mem, net.now);
    let mut way = Keep::new(true);
    let sent = e.counters().packets_sent;
    // At most four at once, to B's QP, in PSN order; published as built.
    assert_eq!(e.transmit_posted_through(qa, now, mem, &mut way), Some(4));
    let b = net.b.addr();
    assert!(way.asked.iter().all(|&w| w == (b, nb)));
    let psns: Vec<u32> = way
        .out
        .iter()
        .map(|(to, d)| {
            assert_eq!(*to, b);
            wire::TransportRepr::parse(d).unwrap().bth.psn.get()
        })
        .collect();
    assert_eq!(psns.len(), 4);
    assert!(psns.windows(2).all(|w| w[1] == w[0] + 1), "{psns:?}");
    assert_eq!(e.counters().packets_sent, sent + 4);
    // The other two wait in the ready queue, after the four.
    let mut buf = vec![0u8; 9000];
    for k in 0..2 {
        let t = e
            .poll_transmit(now, mem, &mut buf)
            .expect("the rest in turns");
        let psn = wire::TransportRepr::parse(&buf[..t.len])
            .unwrap()
            .bth
            .psn
            .get();
        assert_eq!(psn, psns[3] + 1 + k);
    }
    assert!(e.poll_transmit(now, mem, &mut buf).is_none());
}

#[test]
fn without_room_or_with_a_claimer_a_post_is_left_to_the_turns() {
    // No room: nothing taken, the turns send it.
    let (net, qa, _) = posted_on_ring(1);
    let (e, mem, now) = (&net.a.e, &net.a.mem, net.now);
    let mut none = Keep::new(false);
    assert_eq!(e.transmit_posted_through(qa, now, mem, &mut none), None);
    assert!(none.out.is_empty());
    let mut buf = vec![0u8; 9000];
    assert!(e.poll_transmit(now, mem, &mut buf).is_some());
    // A claimer holds a packet of the QP: the post waits for its turns.
    let (net, qa, _) = posted_on_ring(2);
    let (e, mem, now) = (&net.a.e, &net.a.mem, net.now);
    let mut claims = TxClaims::default();
    let first = e
        .poll_transmit_claimed(now, mem, &mut buf, &mut claims)
        .expect("the claimer's first packet");
    let psn = wire::TransportRepr::parse(&buf[..first.len])
        .unwrap()
        .bth
        .psn
        .get();
    let mut way = Keep::new(true);
    assert_eq!(e.transmit_posted_through(qa, now, mem, &mut way), None);
    assert!(way.out.is_empty() && way.asked.is_empty());
    let t = e
        .poll_transmit_claimed(now, mem, &mut buf, &mut claims)
        .expect("the claimer sends on");
    let next = wire::TransportRepr::parse(&buf[..t.len])
        .unwrap()
        .bth
        .psn
        .get();
    assert_eq!(next, psn + 1);
    e.release_claims(&mut claims);
}

/// The PSNs of what the turns of `claims` send until none is left.
fn turns(net: &Net, claims: &mut TxClaims) -> Vec<u32> {
    let mut buf = vec![0u8; 9000];
    let (e, mem, now) = (&net.a.e, &net.a.mem, net.now);
    let mut psns = Vec::new();
    while let Some(t) = e.poll_transmit_claimed(now, mem, &mut buf, claims) {
        psns.push(psn_of(&buf[..t.len]));
    }
    e.release_claims(claims);
    psns
}

#[test]
fn a_streams_ready_qps_go_straight_through_the_room_within_the_budget() {
    // All six at once, in PSN order, to B's QP, counted as sent.
    let (net, _, nb) = posted_on_ring(6);
    let (e, mem, now) = (&net.a.e, &net.a.mem, net.now);
    let mut way = Keep::new(true);
    let mut claims = TxClaims::default();
    let sent = e.counters().packets_sent;
    assert_eq!(
        e.transmit_ready_through(now, mem, &mut claims, &mut way, 64),
        6
    );
    let b = net.b.addr();
    assert!(way.asked.iter().all(|&w| w == (b, nb)));
    let psns: Vec<u32> = way.out.iter().map(|(_, d)| psn_of(d)).collect();
    assert_eq!(psns.len(), 6);
    assert!(psns.windows(2).all(|w| w[1] == w[0] + 1), "{psns:?}");
    assert_eq!(e.counters().packets_sent, sent + 6);
    assert!(claims.is_empty(), "nothing claimed");
    assert!(turns(&net, &mut claims).is_empty(), "nothing left");
    // A budget of four: the other two wait in the ready queue, after them.
    let (net, _, _) = posted_on_ring(6);
    let (e, mem, now) = (&net.a.e, &net.a.mem, net.now);
    let mut way = Keep::new(true);
    assert_eq!(
        e.transmit_ready_through(now, mem, &mut claims, &mut way, 4),
        4
    );
    let first: Vec<u32> = way.out.iter().map(|(_, d)| psn_of(d)).collect();
    let rest = turns(&net, &mut claims);
    assert_eq!(rest, [first[3] + 1, first[3] + 2]);
}

#[test]
fn a_ready_qp_without_room_or_claimed_elsewhere_is_left_to_the_turns() {
    // No room for its peer: claimed for the same claims' turns, which send
    // all of it in order.
    let (net, _, _) = posted_on_ring(3);
    let (e, mem, now) = (&net.a.e, &net.a.mem, net.now);
    let mut none = Keep::new(false);
    let mut claims = TxClaims::default();
    assert_eq!(
        e.transmit_ready_through(now, mem, &mut claims, &mut none, 64),
        0
    );
    assert!(none.out.is_empty());
    assert!(!claims.is_empty(), "claimed for its turns");
    let psns = turns(&net, &mut claims);
    assert_eq!(psns.len(), 3);
    assert!(psns.windows(2).all(|w| w[1] == w[0] + 1), "{psns:?}");
    // Two such QPs ready: only the first is claimed here; the other stays
    // in the ready queue for the usual turns, which send both.
    let mut net = Net::new();
    let (qa, _, _, _) = connect(&mut net, QpType::Rc);
    let (qc, _, _, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 1 << 16, 1);
    let (_, rb) = net.b.mr(0, 1 << 16, 1 | 2 | 4 | 8);
    post_on_ring(&net, qa, 2, la, rb);
    post_writes(&net, qc, 2, la, rb);
    let (e, mem, now) = (&net.a.e, &net.a.mem, net.now);
    assert_eq!(
        e.transmit_ready_through(now, mem, &mut claims, &mut none, 64),
        0
    );
    // Another thread's turns find the second in the ready queue (and only
    // it: the first is claimed), ours send the first.
    let mut theirs = TxClaims::default();
    assert_eq!(turns(&net, &mut theirs).len(), 2, "the other left ready");
    assert_eq!(turns(&net, &mut claims).len(), 2, "the claimed one");
    // Claims let go before the QP had a turn (a batch that ended first):
    // it goes back to the ready queue with all it has.
    let (net, _, _) = posted_on_ring(3);
    let (e, mem, now) = (&net.a.e, &net.a.mem, net.now);
    assert_eq!(
        e.transmit_ready_through(now, mem, &mut claims, &mut none, 64),
        0
    );
    e.release_claims(&mut claims);
    assert_eq!(turns(&net, &mut claims).len(), 3, "back in the ready queue");
    // Another thread claims the QP (it holds a packet of it): nothing goes
    // through; that thread's turns send on in order.
    let (net, _, _) = posted_on_ring(3);
    let (e, mem, now) = (&net.a.e, &net.a.mem, net.now);
    let mut buf = vec![0u8; 9000];
    let mut theirs = TxClaims::default();
    let t = e
        .poll_transmit_claimed(now, mem, &mut buf, &mut theirs)
        .expect("the claimer's first packet");
    let first = psn_of(&buf[..t.len]);
    let mut way = Keep::new(true);
    let mut mine = TxClaims::default();
    assert_eq!(
        e.transmit_ready_through(now, mem, &mut mine, &mut way, 64),
        0
    );
    assert!(way.out.is_empty() && mine.is_empty());
    assert_eq!(turns(&net, &mut theirs), [first + 1, first + 2]);
}

/// A connected RC pair, nothing posted yet: (the net, A's QP, B's QPN, A's
/// lkey, B's rkey), B's leftover turns taken.
fn idle_pair() -> (Net, QpHandle, u32, u32, u32) {
    let mut net = Net::new();
    let (qa, _, _, nb) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 1 << 16, 1);
    let (_, rb) = net.b.mr(0, 1 << 16, 1 | 2 | 4 | 8);
    post_on_ring(&net, qa, 0, la, rb);
    (net, qa, nb, la, rb)
}

/// A one-packet WRITE from A's memory to B's.
fn write_wr(id: u64, sg: &[Sge], rkey: u32) -> SendWr<'_> {
    let t = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE,
        rkey,
    });
    send_wr(id, WrOpcode::RdmaWrite, sg, t)
}

/// The PSN of a datagram.
fn psn_of(d: &[u8]) -> u32 {
    wire::TransportRepr::parse(d).unwrap().bth.psn.get()
}

#[test]
fn a_post_to_an_idle_queue_goes_straight_into_the_queue_and_the_room() {
    let (mut net, qa, nb, la, rb) = idle_pair();
    let sg = [Sge {
        addr: BASE,
        length: 64,
        lkey: la,
    }];
    let ring = net.a.e.send_ring(qa).unwrap();
    let mut way = Keep::new(true);
    let (e, mem, now) = (&net.a.e, &net.a.mem, net.now);
    let sent = e.post_send_through(qa, &write_wr(7, &sg, rb), None, now, mem, &mut way);
    assert_eq!(sent, Some(Ok(1)), "the WRITE left through the room");
    assert_eq!(way.asked[0], (net.b.addr(), nb));
    assert_eq!(ring.pending(), 0, "no slot of the ring was used");
    assert_eq!(ring.queued(), 1, "counted as a post is");
    // B takes it and answers; A's WRITE completes, and the count goes down.
    let (a, b) = (net.a.addr(), net.b.addr());
    let mut back = Keep::new(true);
    let (_, d) = &way.out[0];
    net.b
        .e
        .handle_local_datagram(now, a, b, d, &net.b.mem, Some(&mut back));
    let (_, ack) = &back.out[0];
    assert!(is_ack(ack));
    net.a
        .e
        .handle_local_datagram(now, b, a, ack, &net.a.mem, None);
    let wcs = net.a.poll();
    assert_eq!(wcs.len(), 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (7, WcStatus::Success));
    assert_eq!(ring.queued(), 0);
}

#[test]
fn a_post_through_is_checked_as_a_ring_post_and_refused_alike() {
    let (net, qa, _, la, rb) = idle_pair();
    let ring = net.a.e.send_ring(qa).unwrap();
    let mut way = Keep::new(true);
    let (e, mem, now) = (&net.a.e, &net.a.mem, net.now);
    // More SGEs than the QP takes: refused, nothing posted or sent.
    let sg = vec![
        Sge {
            addr: BASE,
            length: 8,
            lkey: la,
        };
        64
    ];
    let wr = write_wr(1, &sg, rb);
    let got = e.post_send_through(qa, &wr, None, now, mem, &mut way);
    let want = ring.post(&wr, None, 0).map(|_| ()).unwrap_err();
    assert_eq!(got, Some(Err(want)));
    assert!(way.out.is_empty());
    assert_eq!((ring.queued(), ring.pending()), (0, 0));
}

#[test]
fn a_post_through_comes_after_what_waits_in_the_ring_or_is_not_made() {
    let (net, qa, _, la, rb) = idle_pair();
    let sg = [Sge {
        addr: BASE,
        length: 64,
        lkey: la,
    }];
    let ring = net.a.e.send_ring(qa).unwrap();
    let (e, mem, now) = (&net.a.e, &net.a.mem, net.now);
    // A WR waits in the ring: the post is not made here (it must come
    // after that one: the ring's post takes it).
    ring.post(&write_wr(1, &sg, rb), None, 0).unwrap();
    let mut way = Keep::new(true);
    let wr = write_wr(2, &sg, rb);
    assert_eq!(e.post_send_through(qa, &wr, None, now, mem, &mut way), None);
    assert!(way.out.is_empty());
    assert_eq!((ring.queued(), ring.pending()), (1, 1));
    // No room for the peer, or a flush (ERR): not made here either.
    let (net, qa, _, la, rb) = idle_pair();
    let (e, mem, now) = (&net.a.e, &net.a.mem, net.now);
    let sg = [Sge {
        addr: BASE,
        length: 64,
        lkey: la,
    }];
    let mut none = Keep::new(false);
    let wr = write_wr(3, &sg, rb);
    assert_eq!(
        e.post_send_through(qa, &wr, None, now, mem, &mut none),
        None
    );
    assert_eq!(net.a.e.send_ring(qa).unwrap().queued(), 0);
    let mut net = net;
    let err = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    modify(&mut net.a, qa, err, AttrMask::STATE);
    let mut way = Keep::new(true);
    let (e, mem, now) = (&net.a.e, &net.a.mem, net.now);
    assert_eq!(e.post_send_through(qa, &wr, None, now, mem, &mut way), None);
    assert!(way.out.is_empty());
    assert_eq!(net.a.e.send_ring(qa).unwrap().queued(), 0);
}

#[test]
fn a_post_through_to_a_claimed_qp_joins_its_queue_and_its_turns_send_it() {
    // A claimer holds the first of two WRITEs posted on the ring.
    let (net, qa, _, la, rb) = idle_pair();
    post_on_ring(&net, qa, 2, la, rb);
    let (e, mem, now) = (&net.a.e, &net.a.mem, net.now);
    let mut buf = vec![0u8; 9000];
    let mut claims = TxClaims::default();
    let first = e
        .poll_transmit_claimed(now, mem, &mut buf, &mut claims)
        .expect("the claimer's first packet");
    let psn = psn_of(&buf[..first.len]);
    // The ring is drained (into the queue): a post may go straight in, but
    // sends nothing beside the claimer.
    let ring = e.send_ring(qa).unwrap();
    assert_eq!(ring.pending(), 0);
    let sg = [Sge {
        addr: BASE,
        length: 64,
        lkey: la,
    }];
    let mut way = Keep::new(true);
    let wr = write_wr(9, &sg, rb);
    assert_eq!(
        e.post_send_through(qa, &wr, None, now, mem, &mut way),
        Some(Ok(0))
    );
    assert!(way.out.is_empty());
    assert_eq!(ring.queued(), 3);
    // The claimer's turns send the rest in order: the second, then it.
    let mut psns = Vec::new();
    while let Some(t) = e.poll_transmit_claimed(now, mem, &mut buf, &mut claims) {
        psns.push(psn_of(&buf[..t.len]));
    }
    e.release_claims(&mut claims);
    while let Some(t) = e.poll_transmit(now, mem, &mut buf) {
        psns.push(psn_of(&buf[..t.len]));
    }
    assert_eq!(psns, [psn + 1, psn + 2]);
}

/// Two RC pairs between A and B, and A's datagrams of `n` one-packet
/// WRITEs (64 B, signaled) posted on each pair in turn, in transmit order:
/// (the net, A's QPs, the datagrams).
fn two_streams(n: u64) -> (Net, [QpHandle; 2], Vec<Vec<u8>>) {
    let mut net = Net::new();
    let (q1, _, _, _) = connect(&mut net, QpType::Rc);
    let (q2, _, _, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 1 << 16, 1);
    let (_, rb) = net.b.mr(0, 1 << 16, 1 | 2 | 4 | 8);
    for id in 0..2 * n {
        let q = if id % 2 == 0 { q1 } else { q2 };
        let off = 64 * id;
        net.a.mem.write(BASE + off, &pattern(64, id as u8));
        let sg = [Sge {
            addr: BASE + off,
            length: 64,
            lkey: la,
        }];
        let t = WrTarget::Rdma(RdmaTarget {
            remote_addr: BASE + 0x8000 + off,
            rkey: rb,
        });
        net.a
            .e
            .post_send(q, &send_wr(id, WrOpcode::RdmaWrite, &sg, t), None)
            .unwrap();
    }
    let mut out = Vec::new();
    let mut buf = vec![0u8; 9000];
    while let Some(t) = net.a.e.poll_transmit(net.now, &net.a.mem, &mut buf) {
        out.push(buf[..t.len].to_vec());
    }
    (net, [q1, q2], out)
}

/// What a receiver made of a stream and what its sender then completed.
#[derive(Debug, PartialEq)]
struct Outcome {
    /// B's device counters.
    counters: proto::output::DeviceCounters,
    /// The 64 KiB B's WRITEs land in.
    landed: Vec<u8>,
    /// B's responses: through the room, then its transmit turns.
    responses: Vec<Vec<u8>>,
    /// A's completions once it took them back.
    done: Vec<(u64, WcStatus)>,
}

/// How B takes the datagrams.
#[derive(Clone, Copy)]
enum Entry {
    /// Same-host, one by one (the last one's responses through a room).
    RingOne,
    /// Same-host, as one ring's batch (the last one's through a room).
    RingBatch,
    /// A socket's, one by one.
    SocketOne,
    /// A socket's, as one read's batch.
    SocketBatch,
}

/// What B makes of `datagrams` taken as `entry` says, and what A completes
/// once B's responses are taken back.
fn outcome(mut net: Net, datagrams: &[Vec<u8>], entry: Entry) -> Outcome {
    let (a, b) = (net.a.addr(), net.b.addr());
    let mut room = Keep::new(true);
    let mut it = datagrams.iter().map(Vec::as_slice);
    let (e, mem) = (&net.b.e, &net.b.mem);
    let last = datagrams.len() - 1;
    match entry {
        Entry::RingBatch => e.handle_local_batch(net.now, (a, b), &mut it, mem, Some(&mut room)),
        Entry::SocketBatch => e.handle_batch(net.now, (a, b), &mut it, mem),
        Entry::RingOne => {
            for (i, d) in it.enumerate() {
                let reply = (i == last).then_some(&mut room as &mut dyn Room);
                e.handle_local_datagram(net.now, a, b, d, mem, reply);
            }
        }
        Entry::SocketOne => it.for_each(|d| e.handle_datagram(net.now, a, b, d, mem)),
    }
    let mut responses: Vec<Vec<u8>> = room.out.into_iter().map(|(_, d)| d).collect();
    let mut buf = vec![0u8; 9000];
    while let Some(t) = net.b.e.poll_transmit(net.now, &net.b.mem, &mut buf) {
        responses.push(buf[..t.len].to_vec());
    }
    for r in &responses {
        net.a
            .e
            .handle_local_datagram(net.now, b, a, r, &net.a.mem, None);
    }
    let mut landed = vec![0u8; 1 << 16];
    net.b.mem.read(BASE, &mut landed);
    let done = net.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    Outcome {
        counters: net.b.e.counters(),
        landed,
        responses,
        done,
    }
}

#[test]
fn a_rings_batch_taken_at_once_ends_as_its_datagrams_one_by_one() {
    let (net, _, datagrams) = two_streams(4);
    assert_eq!(datagrams.len(), 8);
    // In transmit order (the QPs take turns); the same QP's datagrams
    // together; and so with, among a QP's, a copy under a wrong P_Key, a
    // truncated one, one with a UD opcode, and one for a QP that does not
    // exist (each refused inside the QP's turn, at its start, or alone).
    let mut grouped: Vec<Vec<u8>> = datagrams.iter().step_by(2).cloned().collect();
    grouped.extend(datagrams.iter().skip(1).step_by(2).cloned());
    let mut bad = grouped.clone();
    let mut pkey = grouped[1].clone();
    pkey[2] = 0x12; // P_Key 0x12ff: not the default partition
    bad.insert(1, pkey);
    bad.insert(2, grouped[1][..10].to_vec());
    let mut nobody = grouped[5].clone();
    nobody[7] ^= 0x40; // another destination QPN
    bad.insert(6, nobody.clone());
    bad.insert(3, nobody);
    let mut ud = grouped[2].clone();
    ud[0] = 0x64; // UD SEND_ONLY to an RC QP: alone, its ICRC checked
    bad.insert(5, ud); // right after grouped[1], in its QP's turn
    drop(net);
    for order in [datagrams, grouped, bad] {
        same_outcome(&order, Entry::RingOne, Entry::RingBatch);
    }
}

/// B takes `order` as `one` and as `all` alike; every WRITE completes.
fn same_outcome(order: &[Vec<u8>], one: Entry, all: Entry) -> Outcome {
    let one = outcome(two_streams(4).0, order, one);
    let all = outcome(two_streams(4).0, order, all);
    assert_eq!(one.counters, all.counters, "B's counters");
    assert!(one.landed == all.landed, "the bytes landed alike");
    assert_eq!(one.responses, all.responses, "B's responses");
    assert_eq!(one.done, all.done, "A's completions");
    assert_eq!(all.done.len(), 8);
    assert!(all.done.iter().all(|&(_, s)| s == WcStatus::Success));
    all
}

/// `datagram` (sent from A's port 4791 to B's) with its ICRC made again
/// after a change to its bytes.
fn resealed(net: &Net, mut datagram: Vec<u8>) -> Vec<u8> {
    let mut encap = wire::Encap::from_addrs(net.a.ip, net.b.ip, 4791).unwrap();
    encap.dst_port = 4791;
    wire::icrc::seal(&encap, &mut datagram).unwrap();
    datagram
}

#[test]
fn a_socket_reads_batch_taken_at_once_ends_as_its_datagrams_one_by_one() {
    let (net, _, datagrams) = two_streams(4);
    assert_eq!(
        resealed(&net, datagrams[0].clone()),
        datagrams[0],
        "sealed as sent"
    );
    let mut grouped: Vec<Vec<u8>> = datagrams.iter().step_by(2).cloned().collect();
    grouped.extend(datagrams.iter().skip(1).step_by(2).cloned());
    // Among a QP's datagrams: a copy whose ICRC does not match its bytes
    // (dropped for it inside the QP's turn, and at a turn's start), a
    // sealed copy under a wrong P_Key (refused by the QP's check), a
    // truncated one, and a sealed one for a QP that does not exist.
    let mut bad = grouped.clone();
    let mut corrupt = grouped[1].clone();
    corrupt[30] ^= 0x01; // a payload bit; the ICRC left as it was
    let mut pkey = grouped[2].clone();
    pkey[2] = 0x12; // P_Key 0x12ff: not the default partition
    let mut nobody = grouped[5].clone();
    nobody[7] ^= 0x40; // another destination QPN
    bad.insert(1, corrupt.clone());
    bad.insert(3, resealed(&net, pkey));
    bad.insert(4, grouped[1][..10].to_vec());
    bad.insert(7, resealed(&net, nobody));
    bad.insert(0, corrupt.clone());
    bad.insert(6, corrupt);
    drop(net);
    for order in [&datagrams, &grouped] {
        let all = same_outcome(order, Entry::SocketOne, Entry::SocketBatch);
        assert_eq!(all.counters.drop_icrc, 0);
    }
    let all = same_outcome(&bad, Entry::SocketOne, Entry::SocketBatch);
    let c = &all.counters;
    assert_eq!(
        (c.drop_icrc, c.drop_malformed, c.drop_no_qp),
        (3, 1, 1),
        "each bad datagram dropped for what is wrong with it"
    );
    assert!(c.drop_pkey >= 1, "the wrong P_Key refused: {c:?}");
}

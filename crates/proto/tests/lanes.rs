//! Lanes (crate `lanes`, proto::sched::TxClaims::reach): a QP posted to on
//! its send ring waits in the poster's lane, and only a transmit that
//! reaches that lane takes it; a thread that reaches every lane (the
//! progress thread, or one taking over a quiet lane) sends what it takes,
//! and what the QP has left goes back to the poster's lane, not to the
//! taker's. So two threads that each transmit their own lane work QPs of
//! their own.

mod cm_common;
mod net;
use net::*;
use proto::datapath::{LaneSet, TxClaims};

/// A connected RC pair; `n` WRITEs of 1 KiB (one packet each) posted on
/// A's send ring by a thread of its own. (A's QP, B's QPN, the poster's lane.)
fn posted_by_another_thread(net: &mut Net, n: u64) -> (QpHandle, u32, usize) {
    let (qa, _, _, nb) = connect(net, QpType::Rc);
    let (la, _) = net.a.mr(0, 1 << 16, 1);
    let (_, rb) = net.b.mr(0, 1 << 16, 1 | 2 | 4 | 8);
    // What the connection left in this thread's lane (QPs its moves woke,
    // with nothing to send) goes first.
    let mut setup = reaching(LaneSet::mine());
    let mut buf = vec![0u8; 9000];
    let left = net
        .a
        .e
        .poll_transmit_claimed(net.now, &net.a.mem, &mut buf, &mut setup);
    assert!(left.is_none(), "nothing to send before the posts");
    net.a.e.release_claims(&mut setup);
    assert_eq!(net.a.e.busy_lanes(), LaneSet::NONE);
    let ring = net.a.e.send_ring(qa).unwrap();
    let lane = std::thread::spawn(move || {
        let sg = [Sge {
            addr: BASE,
            length: 1024,
            lkey: la,
        }];
        let t = WrTarget::Rdma(RdmaTarget {
            remote_addr: BASE,
            rkey: rb,
        });
        for id in 0..n {
            ring.post(&send_wr(id, WrOpcode::RdmaWrite, &sg, t), None, 0)
                .unwrap();
        }
        lanes::lane()
    })
    .join()
    .unwrap();
    (qa, nb, lane)
}

/// Claims reaching `lanes`.
fn reaching(lanes: LaneSet) -> TxClaims {
    let mut claims = TxClaims::default();
    claims.reach = lanes;
    claims
}

/// The destination QPN of a datagram.
fn to_qpn(buf: &[u8]) -> u32 {
    wire::TransportRepr::parse(buf).unwrap().bth.dest_qp.get()
}

#[test]
fn a_posted_qp_waits_for_a_transmit_that_reaches_its_posters_lane() {
    let mut net = Net::new();
    let (_, nb, poster) = posted_by_another_thread(&mut net, 2);
    assert_ne!(poster, lanes::lane(), "the poster is another thread");
    let (e, mem, now) = (&net.a.e, &net.a.mem, net.now);
    assert_eq!(e.busy_lanes(), LaneSet::of(poster), "listed in its lane");
    let mut buf = vec![0u8; 9000];
    let others: LaneSet = (0..lanes::LANES).filter(|&i| i != poster).collect();
    let mut claims = reaching(others);
    assert!(
        e.poll_transmit_claimed(now, mem, &mut buf, &mut claims)
            .is_none(),
        "another lane's transmit does not take it"
    );
    e.release_claims(&mut claims);
    assert!(!e.has_driver_work_in(others));
    let mut claims = reaching(LaneSet::of(poster));
    for _ in 0..2 {
        let t = e
            .poll_transmit_claimed(now, mem, &mut buf, &mut claims)
            .expect("the poster's lane's transmit takes it");
        assert_eq!(to_qpn(&buf[..t.len]), nb);
    }
    assert!(e
        .poll_transmit_claimed(now, mem, &mut buf, &mut claims)
        .is_none());
    e.release_claims(&mut claims);
    assert_eq!(e.busy_lanes(), LaneSet::NONE);
}

#[test]
fn a_qp_taken_by_a_thread_reaching_every_lane_goes_back_to_its_home() {
    let mut net = Net::new();
    let (_, nb, poster) = posted_by_another_thread(&mut net, 3);
    let (e, mem, now) = (&net.a.e, &net.a.mem, net.now);
    let mut buf = vec![0u8; 9000];
    // This thread reaches every lane (as the progress thread does): it
    // takes the QP and sends one packet of three, then lets it go.
    let mut all = reaching(LaneSet::ALL);
    let t = e
        .poll_transmit_claimed(now, mem, &mut buf, &mut all)
        .unwrap();
    assert_eq!(to_qpn(&buf[..t.len]), nb);
    assert!(e.release_claims(&mut all), "it has more to send");
    // The rest waits in the poster's lane, not in this thread's.
    assert_eq!(e.busy_lanes(), LaneSet::of(poster));
    let mut mine = reaching(LaneSet::mine());
    assert!(e
        .poll_transmit_claimed(now, mem, &mut buf, &mut mine)
        .is_none());
    e.release_claims(&mut mine);
    let mut home = reaching(LaneSet::of(poster));
    let mut sent = 0;
    while e
        .poll_transmit_claimed(now, mem, &mut buf, &mut home)
        .is_some()
    {
        sent += 1;
    }
    assert_eq!(sent, 2);
}

//! A program's answer leaves before the ACK of the request it answers
//! (`proto::qp::actor::Qp::next_packet`, spec/performance.md §19): a peer
//! spinning on its socket finds the answer first, and over UDP the two
//! share one GSO send (a segment may be shorter than the one before it,
//! never longer).

mod net;
use net::*;

/// BTH opcodes (IBA 9.2: RC RDMA WRITE Only, RC Acknowledge).
const WRITE_ONLY: u8 = 0x0a;
const ACKNOWLEDGE: u8 = 0x11;

/// 8 bytes at `BASE` of the region `lkey` names.
fn eight_bytes(lkey: u32) -> [Sge; 1] {
    [Sge {
        addr: BASE,
        length: 8,
        lkey,
    }]
}

/// 64 bytes into the peer's region `rkey` names.
fn peer_at(rkey: u32) -> WrTarget {
    WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE + 64,
        rkey,
    })
}

#[test]
fn an_answer_goes_ahead_of_the_ack_of_the_write_it_answers() {
    let mut net = Net::new();
    let (qa, _, qb, _) = connect(&mut net, QpType::Rc);
    let (la, ra) = net.a.mr(0, 4096, 0xf);
    let (lb, rb) = net.b.mr(0, 4096, 0xf);
    let (from_a, from_b) = (net.a.addr(), net.b.addr());
    let mut buf = vec![0u8; 9000];
    for round in 0..4u64 {
        // A writes 8 bytes into B's memory; B takes it and sends nothing yet.
        let sa = eight_bytes(la);
        let wr = send_wr(round, WrOpcode::RdmaWrite, &sa, peer_at(rb));
        net.a.e.post_send(qa, &wr, None).unwrap();
        let t = net
            .a
            .e
            .poll_transmit(net.now, &net.a.mem, &mut buf)
            .expect("A's WRITE");
        let write = buf[..t.len].to_vec();
        assert!(net
            .a
            .e
            .poll_transmit(net.now, &net.a.mem, &mut buf)
            .is_none());
        net.b
            .e
            .handle_datagram(net.now, from_a, from_b, &write, &net.b.mem);
        // B answers with a WRITE of its own: the answer first, then the ACK.
        let sb = eight_bytes(lb);
        let wr = send_wr(round, WrOpcode::RdmaWrite, &sb, peer_at(ra));
        let ring = net.b.e.qp(qb).unwrap().send_ring().clone();
        assert!(matches!(
            ring.post(&wr, None, 0),
            Ok(proto::sq::SendPost::Queued { .. })
        ));
        let mut out = Vec::new();
        while let Some(t) = net.b.e.poll_transmit(net.now, &net.b.mem, &mut buf) {
            out.push(buf[..t.len].to_vec());
        }
        let ops: Vec<u8> = out.iter().map(|d| d[0]).collect();
        assert_eq!(
            ops,
            [WRITE_ONLY, ACKNOWLEDGE],
            "round {round}: B's WRITE_ONLY, then its ACK"
        );
        for d in &out {
            net.a
                .e
                .handle_datagram(net.now, from_b, from_a, d, &net.a.mem);
        }
        // A's ACK of B's WRITE, so that the next round starts from nothing owed.
        net.run();
    }
}

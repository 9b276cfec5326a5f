//! `Engine::poll_timeout` reads the earliest deadline without a lock: the
//! scheduler's heap mirrors its earliest into an atomic, and the CM's is
//! read again only after the CM was reached (proto::datapath::gsi). The
//! engine's answer must still follow every change of either.

mod cm_common;
mod net;
use net::*;

#[test]
fn the_deadline_follows_the_cms_retries() {
    let mut net = Net::new();
    assert_eq!(net.a.e.poll_timeout(), None, "a fresh device has no timer");
    let p = proto::cm::ConnectParams {
        peer: Gid::from(net.b.ip),
        ..cm_common::connect_params(1, 2, 0x11, 0x100, &[])
    };
    net.a.e.cm_mut().connect(0, &p).unwrap();
    let mut buf = vec![0u8; 9000];
    let mut last = None;
    for round in 0..3 {
        // The REQ (again, after a timeout) leaves; its retry timer runs.
        let mut sent = 0;
        while net
            .a
            .e
            .poll_transmit(net.now, &net.a.mem, &mut buf)
            .is_some()
        {
            sent += 1;
        }
        assert_eq!(sent, 1, "round {round}: one REQ");
        let cm = net.a.e.cm().poll_timeout();
        assert!(
            cm.is_some() && cm != last,
            "round {round}: a new retry deadline"
        );
        assert_eq!(net.a.e.poll_timeout(), cm, "round {round}");
        last = cm;
        net.now = cm.unwrap();
        net.a.e.handle_timeout(net.now);
    }
}

#[test]
fn the_deadline_follows_a_qps_ack_timer() {
    let mut net = Net::new();
    let (qa, _, _, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 4096, 0xf);
    let (_, rb) = net.b.mr(0, 4096, 0xf);
    let sg = [Sge {
        addr: BASE,
        length: 8,
        lkey: la,
    }];
    let target = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE,
        rkey: rb,
    });
    let wr = send_wr(1, WrOpcode::RdmaWrite, &sg, target);
    net.a.e.post_send(qa, &wr, None).unwrap();
    assert_eq!(net.a.e.poll_timeout(), None, "nothing sent yet");
    let (from_a, from_b) = (
        SocketAddr::new(net.a.ip, 4791),
        SocketAddr::new(net.b.ip, 4791),
    );
    let mut buf = vec![0u8; 9000];
    let t = net
        .a
        .e
        .poll_transmit(net.now, &net.a.mem, &mut buf)
        .unwrap();
    let due = net.a.e.poll_timeout().expect("the WRITE's ACK timer runs");
    assert!(due > net.now);
    let write = buf[..t.len].to_vec();
    net.b
        .e
        .handle_datagram(net.now, from_a, from_b, &write, &net.b.mem);
    let mut acks = 0;
    while let Some(t) = net.b.e.poll_transmit(net.now, &net.b.mem, &mut buf) {
        let ack = buf[..t.len].to_vec();
        net.a
            .e
            .handle_datagram(net.now, from_b, from_a, &ack, &net.a.mem);
        acks += 1;
    }
    assert_eq!(acks, 1);
    assert_eq!(net.a.e.poll_timeout(), None, "acknowledged: no timer left");
}

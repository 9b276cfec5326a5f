//! The same-host path's entry point, `Engine::handle_local_datagram`
//! (spec/same-host.md §1 "The ICRC on the path"): an RC datagram is taken
//! without an ICRC check (counted in `icrc_unchecked`), the same bytes given
//! to `handle_datagram` (a socket's datagram) are dropped for their ICRC, and
//! a UD datagram is checked either way.

mod net;
use net::*;
use proto::intact::IntactPeer;

/// Catches A's next datagram instead of delivering it.
fn catch_next(net: &mut Net) -> Vec<u8> {
    let caught = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let c = caught.clone();
    net.drop_from_a = Some(Box::new(move |p| {
        if c.borrow().is_empty() {
            *c.borrow_mut() = p.to_vec();
        }
        true
    }));
    net.pump_once();
    net.drop_from_a = None;
    let got = caught.borrow().clone();
    assert!(!got.is_empty(), "A sent nothing");
    got
}

/// A posts a 100-byte WRITE of `pattern(100, seed)` from its region `la`
/// to `BASE + 4096` of B's region `rb`; its datagram, caught.
fn write_caught(net: &mut Net, qa: QpHandle, la: u32, rb: u32, id: u64, seed: u8) -> Vec<u8> {
    net.a.mem.write(BASE, &pattern(100, seed));
    let sg = [Sge {
        addr: BASE,
        length: 100,
        lkey: la,
    }];
    let t = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE + 4096,
        rkey: rb,
    });
    net.a
        .e
        .post_send(qa, &send_wr(id, WrOpcode::RdmaWrite, &sg, t), None)
        .unwrap();
    catch_next(net)
}

fn ends(net: &Net) -> (SocketAddr, SocketAddr) {
    (net.a.addr(), net.b.addr())
}

#[test]
fn a_local_rc_datagram_is_taken_without_the_icrc_check_a_socket_one_is_not() {
    let mut net = Net::new();
    let (qa, _, _qb, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 4096, 1);
    let (_, rb) = net.b.mr(0, 8192, 1 | 2);
    let data = pattern(100, 9);
    let mut bad = write_caught(&mut net, qa, la, rb, 1, 9);
    let last = bad.len() - 1;
    bad[last] ^= 0x5a; // the ICRC's last byte
    let (from, to) = ends(&net);
    let before = net.b.e.counters();
    net.b.e.handle_datagram(net.now, from, to, &bad, &net.b.mem);
    let socket = net.b.e.counters();
    assert_eq!(
        socket.drop_icrc,
        before.drop_icrc + 1,
        "from a socket: checked"
    );
    assert_eq!(net.b.mem.snapshot(BASE + 4096, 100), vec![0; 100]);
    net.b
        .e
        .handle_local_datagram(net.now, from, to, &bad, &net.b.mem, None);
    let local = net.b.e.counters();
    assert_eq!(local.drop_icrc, socket.drop_icrc);
    assert_eq!(local.icrc_unchecked, socket.icrc_unchecked + 1);
    assert_eq!(net.b.mem.snapshot(BASE + 4096, 100), data, "placed");
    // The ACK reaches A: the WRITE completes as over any wire.
    net.run();
    let wc: Vec<_> = net.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(wc, [(1, WcStatus::Success)]);
}

#[test]
fn a_local_ud_datagram_is_still_checked() {
    let mut net = Net::new();
    let (qa, _, qb, nb) = connect(&mut net, QpType::Ud);
    let (la, _) = net.a.mr(0, 1 << 16, 1);
    let (lb, _) = net.b.mr(0, 1 << 16, 1);
    let ah = net
        .a
        .e
        .create_ah(net.a.pd, &AhAttr::roce(net.b.gid(), 0))
        .unwrap();
    net.a.mem.write(BASE, &pattern(200, 4));
    let rsg = [Sge {
        addr: BASE + 0x1000,
        length: 2048,
        lkey: lb,
    }];
    net.b
        .e
        .post_recv(
            qb,
            &RecvWr {
                wr_id: 7,
                sg_list: &rsg,
            },
        )
        .unwrap();
    let sg = [Sge {
        addr: BASE,
        length: 200,
        lkey: la,
    }];
    let t = WrTarget::Ud(UdTarget {
        ah,
        remote_qpn: nb,
        remote_qkey: 0x1111,
    });
    net.a
        .e
        .post_send(qa, &send_wr(1, WrOpcode::Send, &sg, t), None)
        .unwrap();
    // Naming B as reached intact changes nothing for UD: its receivers
    // check every ICRC, so the datagram stays sealed.
    net.a.e.set_intact_peers(&[IntactPeer {
        ip: net.b.ip,
        qpns: (nb, nb),
    }]);
    let good = catch_next(&mut net);
    let mut bad = good.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0x5a;
    let (from, to) = ends(&net);
    let before = net.b.e.counters();
    net.b
        .e
        .handle_local_datagram(net.now, from, to, &bad, &net.b.mem, None);
    let after = net.b.e.counters();
    assert_eq!(after.drop_icrc, before.drop_icrc + 1, "UD: checked");
    assert_eq!(after.icrc_unchecked, before.icrc_unchecked);
    assert!(net.b.poll().is_empty());
    // The intact datagram arrives, its GRH area as from a socket.
    net.b
        .e
        .handle_local_datagram(net.now, from, to, &good, &net.b.mem, None);
    let wc = net.b.poll();
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(7, WcStatus::Success)]
    );
    assert_eq!(net.b.mem.snapshot(BASE + 0x1000 + 40, 200), pattern(200, 4));
}

/// A peer the driver names as reached intact (crate::intact) gets A's RC
/// datagrams without an ICRC: its same-host entry places them, a socket's
/// check drops them. Its ACKs to A, which B did not name, stay sealed; and
/// once A names nobody, A seals again.
#[test]
fn a_peer_named_intact_gets_rc_datagrams_unsealed() {
    let mut net = Net::new();
    let (qa, _, _qb, nb) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 4096, 1);
    let (_, rb) = net.b.mr(0, 8192, 1 | 2);
    net.a.e.set_intact_peers(&[IntactPeer {
        ip: net.b.ip,
        qpns: (nb - 1, nb + 1),
    }]);
    let write = |net: &mut Net, id, seed| write_caught(net, qa, la, rb, id, seed);
    let unsealed = write(&mut net, 1, 3);
    assert_eq!(unsealed[unsealed.len() - 4..], [0; 4], "no ICRC computed");
    assert_eq!(net.a.e.counters().qps.packets_unsealed, 1);
    let (from, to) = ends(&net);
    let before = net.b.e.counters();
    net.b
        .e
        .handle_datagram(net.now, from, to, &unsealed, &net.b.mem);
    assert_eq!(
        net.b.e.counters().drop_icrc,
        before.drop_icrc + 1,
        "a socket checks"
    );
    net.b
        .e
        .handle_local_datagram(net.now, from, to, &unsealed, &net.b.mem, None);
    assert_eq!(
        net.b.mem.snapshot(BASE + 4096, 100),
        pattern(100, 3),
        "placed"
    );
    // B's ACK is sealed (A reaches B's path, B named nobody): A's socket
    // entry takes it and the WRITE completes.
    net.run();
    let wc: Vec<_> = net.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(wc, [(1, WcStatus::Success)]);
    assert_eq!(net.b.e.counters().qps.packets_unsealed, 0);
    // Named no more: sealed, and a socket takes it.
    net.a.e.set_intact_peers(&[]);
    let sealed = write(&mut net, 2, 4);
    assert_ne!(sealed[sealed.len() - 4..], [0; 4]);
    net.b
        .e
        .handle_datagram(net.now, from, to, &sealed, &net.b.mem);
    assert_eq!(net.b.mem.snapshot(BASE + 4096, 100), pattern(100, 4));
    assert_eq!(net.a.e.counters().qps.packets_unsealed, 1);
}

/// The driver's loopback shortcut hands a device's own datagram back with
/// `handle_own_datagram`: placed as a local one (or, `checked`, as a
/// socket's), but a whole WRITE it brings is not counted in
/// `writes_taken` (no post of the program answers a WRITE it made itself;
/// sv_io's linger waits for counted WRITEs). A peer's WRITE, local or from
/// a socket, is counted.
#[test]
fn a_devices_own_write_is_placed_but_not_counted_as_taken() {
    let mut net = Net::new();
    let (qa, _, _qb, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 4096, 1);
    let (_, rb) = net.b.mr(0, 8192, 1 | 2);
    let (from, to) = ends(&net);
    let taken = |net: &Net| net.b.e.writes_taken().0;
    // Own, unchecked and checked: placed, not counted.
    for (id, checked) in [(1u64, false), (2, true)] {
        let seed = id as u8;
        let write = write_caught(&mut net, qa, la, rb, id, seed);
        let before = taken(&net);
        net.b
            .e
            .handle_own_datagram(net.now, (from, to), &write, &net.b.mem, checked);
        let mem = net.b.mem.snapshot(BASE + 4096, 100);
        assert_eq!(mem, pattern(100, seed), "placed (checked {checked})");
        assert_eq!(taken(&net), before, "not counted (checked {checked})");
        net.run();
    }
    // A peer's, through the same-host path and through a socket: counted.
    for (id, local) in [(3u64, true), (4, false)] {
        let write = write_caught(&mut net, qa, la, rb, id, id as u8);
        let before = taken(&net);
        match local {
            true => net
                .b
                .e
                .handle_local_datagram(net.now, from, to, &write, &net.b.mem, None),
            false => net
                .b
                .e
                .handle_datagram(net.now, from, to, &write, &net.b.mem),
        }
        assert_eq!(taken(&net), before + 1, "counted (local {local})");
        net.run();
    }
    let wc: Vec<_> = net.a.poll().iter().map(|w| w.status).collect();
    assert_eq!(wc, [WcStatus::Success; 4], "all four completed");
}

//! `Engine::poll_timeout` reads the earliest deadline without a lock: the
//! scheduler's heap mirrors its earliest into an atomic, and the CM's is
//! read again only after the CM was reached (proto::datapath::gsi). The
//! engine's answer must still follow every change of either: at once when
//! a deadline comes earlier, and, for a QP's timer that moved later or
//! stopped, once the heap's entry for it is near or comes due
//! (`Engine::sync`).

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

/// A connected RC pair, `n` 8-byte WRITEs posted on A at `net.now` and
/// sent; their datagrams, and A's QP.
fn writes_sent(net: &mut Net, n: u64) -> (QpHandle, Vec<Vec<u8>>) {
    let (qa, _, _, _) = connect(net, QpType::Rc);
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
    for id in 1..=n {
        let wr = send_wr(id, WrOpcode::RdmaWrite, &sg, target);
        net.a.e.post_send(qa, &wr, None).unwrap();
    }
    assert_eq!(net.a.e.poll_timeout(), None, "nothing sent yet");
    let mut buf = vec![0u8; 9000];
    let mut sent = Vec::new();
    while let Some(t) = net.a.e.poll_transmit(net.now, &net.a.mem, &mut buf) {
        sent.push(buf[..t.len].to_vec());
    }
    assert_eq!(sent.len() as u64, n);
    (qa, sent)
}

/// B takes `datagram` at `at`; its answers reach A at `at` (the engine's
/// clock told first, as the driver does). How many.
fn answered(net: &mut Net, datagram: &[u8], at: u64) -> usize {
    let (from_a, from_b) = (net.a.addr(), net.b.addr());
    net.b.e.set_now(at);
    net.b
        .e
        .handle_datagram(at, from_a, from_b, datagram, &net.b.mem);
    let (mut buf, mut n) = (vec![0u8; 9000], 0);
    while let Some(t) = net.b.e.poll_transmit(at, &net.b.mem, &mut buf) {
        let answer = buf[..t.len].to_vec();
        net.a.e.set_now(at);
        net.a
            .e
            .handle_datagram(at, from_b, from_a, &answer, &net.a.mem);
        n += 1;
    }
    n
}

/// A's expiry at `at`: whether anything was sent again.
fn expiry_resends(net: &mut Net, at: u64) -> bool {
    net.a.e.handle_timeout(at);
    let mut buf = vec![0u8; 9000];
    net.a.e.poll_transmit(at, &net.a.mem, &mut buf).is_some()
}

#[test]
fn the_deadline_follows_a_qps_ack_timer() {
    let mut net = Net::new();
    let (qa, sent) = writes_sent(&mut net, 1);
    let due = net.a.e.poll_timeout().expect("the WRITE's ACK timer runs");
    assert!(due > net.now);
    let now = net.now;
    assert_eq!(answered(&mut net, &sent[0], now), 1, "one ACK");
    // The timer stopped far from its deadline: its entry stays.
    assert_eq!(
        net.a.e.poll_timeout(),
        Some(due),
        "stopped, left in the heap"
    );
    // Its expiry finds nothing due, sends nothing again, counts no
    // timeout, and leaves no entry.
    assert!(!expiry_resends(&mut net, due), "nothing sent again");
    assert_eq!(net.a.e.qp_counters(qa).unwrap().timeouts, 0);
    assert_eq!(net.a.e.poll_timeout(), None, "acknowledged: no timer left");
}

#[test]
fn a_timer_stopped_near_its_deadline_leaves_the_heap_at_once() {
    let mut net = Net::new();
    let (_, sent) = writes_sent(&mut net, 1);
    let due = net.a.e.poll_timeout().unwrap();
    assert_eq!(answered(&mut net, &sent[0], due - 500_000), 1);
    assert_eq!(
        net.a.e.poll_timeout(),
        None,
        "half a millisecond off: taken out"
    );
}

#[test]
fn a_timer_restarted_later_comes_due_at_its_new_deadline() {
    // The first WRITE's ACK comes 1 µs after it was sent (the entry then
    // is far off), or half a millisecond before its deadline (near).
    for lazy in [true, false] {
        let mut net = Net::new();
        let (qa, sent) = writes_sent(&mut net, 2);
        let first = net.a.e.poll_timeout().unwrap();
        let period = first - net.now;
        let late = if lazy { period - 1_000 } else { 500_000 };
        // That ACK restarts the timer for the second WRITE.
        let at = first - late;
        assert_eq!(answered(&mut net, &sent[0], at), 1);
        let restarted = at + period;
        // Far off, the entry stays, comes due, finds nothing due, and the
        // real deadline takes its place; near, it is moved at once.
        if lazy {
            assert_eq!(net.a.e.poll_timeout(), Some(first), "late {late}");
            assert!(!expiry_resends(&mut net, first), "late {late}");
            assert_eq!(net.a.e.qp_counters(qa).unwrap().timeouts, 0);
        }
        assert_eq!(net.a.e.poll_timeout(), Some(restarted), "late {late}");
        // The second WRITE is never answered: its timer fires then.
        assert!(expiry_resends(&mut net, restarted), "late {late}: resent");
        assert_eq!(net.a.e.qp_counters(qa).unwrap().timeouts, 1, "late {late}");
    }
}

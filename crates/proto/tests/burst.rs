//! A transmit turn that takes several packets of one QP
//! (`Engine::poll_transmit_burst`): each QP's datagrams are those the
//! one-at-a-time turns build, in the same order; a turn takes one QP's
//! packets only, `max` at most, and only as many as the batch has buffers;
//! the QPs still take turns; and the receiver completes every WR.

mod net;
use net::*;
use proto::datapath::TxClaims;
use proto::testing::Batch;

/// Three RC pairs between A and B, and on each of A's QPs `n` WRITEs of
/// 3 KiB (three packets each at the harness's 1 KiB path MTU), posted:
/// (the net, A's QPs).
fn three_streams(n: u64) -> (Net, Vec<QpHandle>) {
    let mut net = Net::new();
    let qps: Vec<QpHandle> = (0..3).map(|_| connect(&mut net, QpType::Rc).0).collect();
    let (la, _) = net.a.mr(0, 1 << 16, 1);
    let (_, rb) = net.b.mr(0, 1 << 18, 1 | 2);
    for (k, &q) in qps.iter().enumerate() {
        for id in 0..n {
            let off = 3072 * (id + n * k as u64);
            net.a.mem.write(BASE + off, &pattern(3072, id as u8));
            let sg = [Sge {
                addr: BASE + off,
                length: 3072,
                lkey: la,
            }];
            let t = WrTarget::Rdma(RdmaTarget {
                remote_addr: BASE + off,
                rkey: rb,
            });
            let wr = send_wr(id + 100 * k as u64, WrOpcode::RdmaWrite, &sg, t);
            net.a.e.post_send(q, &wr, None).unwrap();
        }
    }
    (net, qps)
}

/// A datagram's destination QPN (BTH bytes 5–7).
fn dest_qpn(d: &[u8]) -> u32 {
    u32::from_be_bytes([0, d[5], d[6], d[7]])
}

/// The datagrams of each destination QP, in order.
fn per_qp(datagrams: &[Vec<u8>]) -> std::collections::BTreeMap<u32, Vec<Vec<u8>>> {
    let mut m = std::collections::BTreeMap::<u32, Vec<Vec<u8>>>::new();
    for d in datagrams {
        m.entry(dest_qpn(d)).or_default().push(d.clone());
    }
    m
}

/// A's datagrams taken by bursts of `max` into batches of `slots`
/// buffers (claims let go after each batch, as a driver does once its
/// batch left): the datagrams of each call.
fn by_bursts(net: &Net, slots: usize, max: usize) -> Vec<Vec<Vec<u8>>> {
    let mut calls = Vec::new();
    loop {
        let mut claims = TxClaims::default();
        let mut batch = Batch::new(slots);
        let mut taken = 0;
        loop {
            let before = batch.built.len();
            let n = net
                .a
                .e
                .poll_transmit_burst(net.now, &net.a.mem, &mut claims, &mut batch, max);
            assert_eq!(n, batch.built.len() - before, "the count is what was built");
            if n == 0 {
                break;
            }
            calls.push(batch.datagrams().skip(before).map(<[u8]>::to_vec).collect());
            taken += n;
        }
        net.a.e.release_claims(&mut claims);
        if taken == 0 {
            return calls;
        }
    }
}

#[test]
fn a_burst_takes_a_qps_packets_as_its_turns_one_by_one_do() {
    let (net, _) = three_streams(5);
    let mut one = Vec::new();
    let mut buf = vec![0u8; 9000];
    while let Some(t) = net.a.e.poll_transmit(net.now, &net.a.mem, &mut buf) {
        one.push(buf[..t.len].to_vec());
    }
    assert_eq!(one.len(), 45, "three packets a WRITE");
    for (slots, max) in [(64, 16), (64, 4), (5, 16), (1, 16), (64, 1)] {
        let (net, _) = three_streams(5);
        let calls = by_bursts(&net, slots, max);
        for c in &calls {
            assert!(
                !c.is_empty() && c.len() <= max.min(slots),
                "{} in a call",
                c.len()
            );
            let q = dest_qpn(&c[0]);
            assert!(
                c.iter().all(|d| dest_qpn(d) == q),
                "one QP's packets a call"
            );
        }
        let all: Vec<Vec<u8>> = calls.concat();
        assert!(
            per_qp(&all) == per_qp(&one),
            "slots {slots}, max {max}: each QP's datagrams"
        );
        // The QPs take turns: the first three calls go to the three.
        let first: std::collections::BTreeSet<u32> =
            calls.iter().take(3).map(|c| dest_qpn(&c[0])).collect();
        assert_eq!(
            first.len(),
            3,
            "slots {slots}, max {max}: the QPs take turns"
        );
    }
}

#[test]
fn what_a_burst_built_completes_at_the_sender() {
    let (mut net, _) = three_streams(5);
    let calls = by_bursts(&net, 7, 4);
    let (from, to) = (net.a.addr(), net.b.addr());
    for d in calls.concat() {
        net.b.e.handle_datagram(net.now, from, to, &d, &net.b.mem);
    }
    net.run();
    let mut done: Vec<(u64, WcStatus)> = net.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    done.sort_by_key(|&(id, _)| id);
    let want: Vec<(u64, WcStatus)> = (0..3)
        .flat_map(|k| (0..5).map(move |id| (id + 100 * k, WcStatus::Success)))
        .collect();
    assert_eq!(done, want);
    for k in 0..3u64 {
        for id in 0..5 {
            let off = 3072 * (id + 5 * k);
            assert_eq!(
                net.b.mem.snapshot(BASE + off, 3072),
                pattern(3072, id as u8)
            );
        }
    }
}

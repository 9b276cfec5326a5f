//! Runs (proto::run, spec/same-host.md §4 lever 1): a QP sending a plain
//! WRITE or SEND to a peer reached intact puts the message's next packets in
//! one datagram when the driver asks for it (`Engine::poll_transmit_run`),
//! and the peer's engine takes them apart (`Engine::handle_local_run`).
//! The packets must be the ones the QP sends without runs, bit for bit, and
//! the transfer must end the same (memory, completions); a lost run is
//! recovered like lost packets; a run that breaks a rule is dropped whole.

mod net;
use net::*;
use proto::intact::IntactPeer;
use proto::run::Segments;

/// What each side sent (each packet's bytes, runs taken apart) and how
/// many runs A and B sent, moving everything until both sides are quiet
/// (timers fired as virtual time advances). Both transmit with runs into
/// `buf_len`-byte buffers when `runs`. `drop_first_run[i]` loses side
/// `i`'s first
/// run.
fn drive(
    net: &mut Net,
    runs: bool,
    buf_len: usize,
    mut drop_first_run: [bool; 2],
) -> ([Vec<Vec<u8>>; 2], [u32; 2]) {
    let mut buf = vec![0u8; buf_len];
    let (mut sent, mut nruns) = ([Vec::new(), Vec::new()], [0, 0]);
    for _ in 0..10_000 {
        let (now, before) = (net.now, (sent[0].len(), sent[1].len()));
        let (a, b) = (&mut net.a, &mut net.b);
        let [drop_a, drop_b] = &mut drop_first_run;
        nruns[0] += transmit_local(a, b, now, runs, &mut buf, &mut sent[0], drop_a);
        nruns[1] += transmit_local(b, a, now, runs, &mut buf, &mut sent[1], drop_b);
        if (sent[0].len(), sent[1].len()) != before {
            continue;
        }
        let next = [net.a.e.poll_timeout(), net.b.e.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        let Some(next) = next else {
            return (sent, nruns);
        };
        net.now = net.now.max(next);
        net.a.e.handle_timeout(net.now);
        net.b.e.handle_timeout(net.now);
    }
    panic!("the network never went quiet");
}

/// A connected pair of `t` that name each other reached intact. A's
/// region is [BASE, + 0x8_0000), B's the next 0x8_0000 bytes (writable and
/// readable from afar); each holds a pattern. Returns (net, A's QP, B's QP,
/// A's lkey, B's rkey, B's lkey).
fn pair(t: QpType) -> (Net, QpHandle, QpHandle, u32, u32, u32) {
    let mut net = Net::new();
    let (qa, na, qb, nb) = connect(&mut net, t);
    let (la, _) = net.a.mr(0, 0x8_0000, 1);
    let (lb, rb) = net.b.mr(0x8_0000, 0x8_0000, 1 | 2 | 4);
    net.a.mem.write(BASE, &pattern(0x8_0000, 7));
    net.b.mem.write(BASE + 0x8_0000, &pattern(0x8_0000, 9));
    for (node, ip, qpn) in [(&net.a, net.b.ip, nb), (&net.b, net.a.ip, na)] {
        node.e.set_intact_peers(&[IntactPeer {
            ip,
            qpns: (qpn, qpn),
        }]);
    }
    (net, qa, qb, la, rb, lb)
}

/// How a transfer ended.
struct Outcome {
    /// Both sides' memory.
    placed: Vec<u8>,
    /// Both sides' completions: (id, status, opcode, length).
    wcs: Vec<(u64, WcStatus, WcOpcode, u32)>,
    /// The packets A and B sent (runs taken apart).
    packets: [Vec<Vec<u8>>; 2],
    /// A's and B's runs.
    runs: [u32; 2],
    /// A's and B's QP counters.
    counters: [proto::qp::data::QpCounters; 2],
}

/// A posts two messages of `len` bytes (`op`: to B's region, or a READ of
/// it into A's), B's receives posted for SENDs; how it ended.
fn transfer(
    t: QpType,
    op: WrOpcode,
    len: u32,
    runs: bool,
    buf_len: usize,
    drop_first_run: [bool; 2],
) -> Outcome {
    let (mut net, qa, qb, la, rb, lb) = pair(t);
    for i in 0..2u64 {
        let off = i * 0x3_0000;
        if op == WrOpcode::Send {
            let sg = [Sge {
                addr: BASE + 0x8_0000 + off,
                length: len,
                lkey: lb,
            }];
            let wr = RecvWr {
                wr_id: 10 + i,
                sg_list: &sg,
            };
            net.b.e.post_recv(qb, &wr).unwrap();
        }
        let sg = [Sge {
            addr: BASE + off,
            length: len,
            lkey: la,
        }];
        let target = WrTarget::Rdma(RdmaTarget {
            remote_addr: BASE + 0x8_0000 + off,
            rkey: rb,
        });
        let wr = send_wr(i, op, &sg, target);
        net.a.e.post_send(qa, &wr, None).unwrap();
    }
    let (packets, runs) = drive(&mut net, runs, buf_len, drop_first_run);
    let wcs = [net.a.poll(), net.b.poll()]
        .concat()
        .iter()
        .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len))
        .collect();
    let counters = [
        *net.a.e.qp(qa).unwrap().counters(),
        *net.b.e.qp(qb).unwrap().counters(),
    ];
    Outcome {
        placed: net.a.mem.snapshot(BASE, 0x10_0000),
        wcs,
        packets,
        runs,
        counters,
    }
}

#[test]
fn a_run_is_its_packets_bit_for_bit_and_ends_the_same() {
    // At MTU 1024: one byte, one packet, one byte more, two packets, a
    // short last, and 70 packets (an AckReq every 64 cuts a WRITE's or a
    // SEND's run there). A READ's response packets run from B.
    let cases = [
        (QpType::Rc, WrOpcode::RdmaWrite),
        (QpType::Rc, WrOpcode::Send),
        (QpType::Rc, WrOpcode::RdmaRead),
        (QpType::Uc, WrOpcode::RdmaWrite),
        (QpType::Uc, WrOpcode::Send),
    ];
    for (t, op) in cases {
        for len in [1, 1024, 1025, 2048, 5000, 70_000] {
            for buf_len in [4096, 65536] {
                let plain = transfer(t, op, len, false, buf_len, [false; 2]);
                let run = transfer(t, op, len, true, buf_len, [false; 2]);
                let what = format!("{t:?} {op:?} {len} bytes, {buf_len}-byte buffer");
                assert_eq!(plain.runs, [0, 0], "{what}: runs only when asked");
                for side in 0..2 {
                    let (r, p) = (&run.packets[side], &plain.packets[side]);
                    assert_eq!(r.len(), p.len(), "{what}: as many packets from {side}");
                    for (i, (r, p)) in r.iter().zip(p).enumerate() {
                        assert_eq!(r, p, "{what}: packet {i} from {side}");
                    }
                    let c = (&run.counters[side], &plain.counters[side]);
                    assert_eq!(c.0.packets_sent, c.1.packets_sent, "{what}");
                    assert_eq!(u64::from(run.runs[side]), c.0.runs_sent, "{what}");
                }
                assert_eq!(run.wcs, plain.wcs, "{what}: the same completions");
                let ok = run.wcs.iter().all(|w| w.1 == WcStatus::Success);
                assert!(ok, "{what}: {:?}", run.wcs);
                let ends = if op == WrOpcode::Send { 4 } else { 2 };
                assert_eq!(
                    run.wcs.len(),
                    ends,
                    "{what}: both messages (a SEND's at both ends)"
                );
                assert!(run.placed == plain.placed, "{what}: the same bytes placed");
                // Who runs: the requester for a WRITE or SEND, the
                // responder for a READ.
                let multi = len > 1024 && buf_len > 2 * 1024 + 64;
                let runner = usize::from(op == WrOpcode::RdmaRead);
                assert_eq!(run.runs[runner] > 0, multi, "{what}: {:?} runs", run.runs);
                assert_eq!(run.runs[1 - runner], 0, "{what}: {:?} runs", run.runs);
            }
        }
    }
}

#[test]
fn a_lost_run_is_sent_again_packet_by_packet() {
    // A lost WRITE run: go-back-N after the sequence NAK or the timeout. A
    // lost READ response run: the requester asks again from the gap.
    for (op, side) in [(WrOpcode::RdmaWrite, 0), (WrOpcode::RdmaRead, 1)] {
        let lose = [side == 0, side == 1];
        let plain = transfer(QpType::Rc, op, 20_000, false, 65536, [false; 2]);
        let lost = transfer(QpType::Rc, op, 20_000, true, 65536, lose);
        assert!(lost.placed == plain.placed, "{op:?}: every byte arrives");
        assert_eq!(lost.wcs.len(), 2);
        let ok = lost.wcs.iter().all(|w| w.1 == WcStatus::Success);
        assert!(ok, "{op:?}: {:?}", lost.wcs);
        let c = lost.counters[side];
        assert!(
            c.retransmitted_packets + c.dup_reads_answered > 0,
            "{op:?}: the lost run's packets went again: {c:?}"
        );
        assert!(
            lost.runs[side] >= 2,
            "{op:?}: the second message still went in a run"
        );
    }
}

#[test]
fn a_run_that_breaks_a_rule_is_dropped_whole() {
    let (mut net, qa, _qb, la, rb, _) = pair(QpType::Rc);
    let sg = [Sge {
        addr: BASE,
        length: 3000,
        lkey: la,
    }];
    let target = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE + 0x8_0000,
        rkey: rb,
    });
    net.a
        .e
        .post_send(qa, &send_wr(1, WrOpcode::RdmaWrite, &sg, target), None)
        .unwrap();
    let mut buf = vec![0u8; 65536];
    let mut claims = proto::sched::TxClaims::default();
    let t = net
        .a
        .e
        .poll_transmit_run(net.now, &net.a.mem, &mut buf, &mut claims)
        .unwrap();
    let segs = t.segments.expect("a 3-packet WRITE goes as a run");
    let (a, b) = (net.a.addr(), net.b.addr());
    let bytes = &buf[..t.len];
    let bad = [
        Segments { mss: 1000, ..segs },
        Segments { mss: 4096, ..segs },
        Segments {
            last: wire::Opcode::new(0x02).unwrap(),
            ..segs
        },
    ];
    for s in bad {
        let before = net.b.e.counters();
        net.b
            .e
            .handle_local_run(net.now, (a, b), bytes, s.to_tag(), &net.b.mem, None);
        let after = net.b.e.counters();
        assert_eq!(after.drop_malformed, before.drop_malformed + 1, "{s:?}");
        assert_eq!(
            after.qps.packets_received, before.qps.packets_received,
            "{s:?}: no packet taken"
        );
    }
    assert!(
        net.b.mem.snapshot(BASE + 0x8_0000, 3000) == pattern(0x8_0000, 9)[..3000],
        "nothing placed"
    );
    // With its own segments it is taken.
    net.b
        .e
        .handle_local_run(net.now, (a, b), bytes, segs.to_tag(), &net.b.mem, None);
    assert!(net.b.mem.snapshot(BASE + 0x8_0000, 3000) == pattern(0x8_0000, 7)[..3000]);
}

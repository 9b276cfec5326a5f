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
use proto::run::{Run, Segments};
use wire::TransportRepr;

/// The packets of a run datagram, emitted one by one as they would have
/// gone alone (unsealed: the peer is reached intact).
fn expand(datagram: &[u8], segs: Segments) -> Vec<Vec<u8>> {
    let first = TransportRepr::parse(datagram).expect("a run parses");
    let run = Run::new(&first, first.payload(datagram), segs).expect("a valid run");
    let mut out = Vec::new();
    let mut r = first;
    for i in 0..run.len() {
        let payload = run.packet(i, &mut r);
        let at = r.header_len();
        let mut buf = vec![0u8; at + payload.len() + 3 + 4];
        buf[at..at + payload.len()].copy_from_slice(payload);
        let n = r.emit_in_place_unsealed(&mut buf).unwrap();
        buf.truncate(n);
        out.push(buf);
    }
    out
}

/// What A sent (each packet's bytes, a run's taken apart) and how many
/// runs, moving everything until both sides are quiet (timers fired as
/// virtual time advances). A transmits with runs into `buf_len`-byte
/// buffers when `runs`; every datagram reaches the other side through the
/// same-host entries. `drop_first_run` loses A's first run.
fn drive(
    net: &mut Net,
    runs: bool,
    buf_len: usize,
    mut drop_first_run: bool,
) -> (Vec<Vec<u8>>, u32) {
    let (a, b) = (
        SocketAddr::new(net.a.ip, 4791),
        SocketAddr::new(net.b.ip, 4791),
    );
    let mut buf = vec![0u8; buf_len];
    let mut claims = proto::sched::TxClaims::default();
    let (mut sent, mut nruns) = (Vec::new(), 0);
    for _ in 0..10_000 {
        let mut moved = false;
        loop {
            let t = match runs {
                true => net
                    .a
                    .e
                    .poll_transmit_run(net.now, &net.a.mem, &mut buf, &mut claims),
                false => net.a.e.poll_transmit(net.now, &net.a.mem, &mut buf),
            };
            let Some(t) = t else { break };
            moved = true;
            let bytes = &buf[..t.len];
            match t.segments {
                Some(segs) => {
                    nruns += 1;
                    sent.extend(expand(bytes, segs));
                    if std::mem::take(&mut drop_first_run) {
                        continue;
                    }
                    net.b
                        .e
                        .handle_local_run(net.now, a, b, bytes, segs.to_tag(), &net.b.mem);
                }
                None => {
                    sent.push(bytes.to_vec());
                    net.b
                        .e
                        .handle_local_datagram(net.now, a, b, bytes, &net.b.mem);
                }
            }
        }
        net.a.e.release_claims(&mut claims);
        while let Some(t) = net.b.e.poll_transmit(net.now, &net.b.mem, &mut buf) {
            moved = true;
            assert_eq!(t.segments, None, "B sends no runs here");
            net.a
                .e
                .handle_local_datagram(net.now, b, a, &buf[..t.len], &net.a.mem);
        }
        if moved {
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

/// A connected pair of `t` whose A names B reached intact, B's region
/// writable at BASE + 0x8_0000; A's memory holds a pattern. Returns (net,
/// A's QP, B's QP, A's lkey, B's rkey, B's lkey).
fn pair(t: QpType) -> (Net, QpHandle, QpHandle, u32, u32, u32) {
    let mut net = Net::new();
    let (qa, _, qb, nb) = connect(&mut net, t);
    let (la, _) = net.a.mr(0, 0x8_0000, 1);
    let (lb, rb) = net.b.mr(0x8_0000, 0x8_0000, 1 | 2);
    net.a.mem.write(BASE, &pattern(0x8_0000, 7));
    net.a.e.set_intact_peers(&[IntactPeer {
        ip: net.b.ip,
        qpns: (nb, nb),
    }]);
    (net, qa, qb, la, rb, lb)
}

/// How a transfer ended.
struct Outcome {
    /// B's memory.
    placed: Vec<u8>,
    /// Both sides' completions: (id, status, opcode, length).
    wcs: Vec<(u64, WcStatus, WcOpcode, u32)>,
    /// The packets A sent (runs taken apart).
    packets: Vec<Vec<u8>>,
    /// A's runs.
    runs: u32,
    /// A's QP counters.
    counters: proto::qp::data::QpCounters,
}

/// A posts two messages of `len` bytes (`op`), B's receives posted for
/// SENDs; how it ended.
fn transfer(
    t: QpType,
    op: WrOpcode,
    len: u32,
    runs: bool,
    buf_len: usize,
    drop_first_run: bool,
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
            net.b
                .e
                .post_recv(
                    qb,
                    &RecvWr {
                        wr_id: 10 + i,
                        sg_list: &sg,
                    },
                )
                .unwrap();
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
        net.a
            .e
            .post_send(qa, &send_wr(i, op, &sg, target), None)
            .unwrap();
    }
    let (sent, nruns) = drive(&mut net, runs, buf_len, drop_first_run);
    let wcs = [net.a.poll(), net.b.poll()]
        .concat()
        .iter()
        .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len))
        .collect();
    let counters = *net.a.e.qp(qa).unwrap().counters();
    Outcome {
        placed: net.b.mem.snapshot(BASE + 0x8_0000, 0x8_0000),
        wcs,
        packets: sent,
        runs: nruns,
        counters,
    }
}

#[test]
fn a_run_is_its_packets_bit_for_bit_and_ends_the_same() {
    // At MTU 1024: one byte, one packet, one byte more, two packets, a
    // short last, and 70 packets (an AckReq every 64 cuts a run there).
    for t in [QpType::Rc, QpType::Uc] {
        for op in [WrOpcode::RdmaWrite, WrOpcode::Send] {
            for len in [1, 1024, 1025, 2048, 5000, 70_000] {
                for buf_len in [4096, 65536] {
                    let plain = transfer(t, op, len, false, buf_len, false);
                    let run = transfer(t, op, len, true, buf_len, false);
                    let what = format!("{t:?} {op:?} {len} bytes, {buf_len}-byte buffer");
                    assert_eq!(plain.runs, 0, "{what}: runs only when asked");
                    assert_eq!(
                        run.packets.len(),
                        plain.packets.len(),
                        "{what}: as many packets"
                    );
                    for (i, (r, p)) in run.packets.iter().zip(&plain.packets).enumerate() {
                        assert_eq!(r, p, "{what}: packet {i}");
                    }
                    assert_eq!(run.wcs, plain.wcs, "{what}: the same completions");
                    assert!(
                        run.wcs.iter().all(|w| w.1 == WcStatus::Success),
                        "{what}: {:?}",
                        run.wcs
                    );
                    let ends = if op == WrOpcode::Send { 4 } else { 2 };
                    assert_eq!(
                        run.wcs.len(),
                        ends,
                        "{what}: both messages (a SEND's at both ends)"
                    );
                    assert!(run.placed == plain.placed, "{what}: the same bytes placed");
                    let multi = len > 1024 && buf_len > 2 * 1024 + 64;
                    assert_eq!(run.runs > 0, multi, "{what}: {} runs", run.runs);
                    assert_eq!(u64::from(run.runs), run.counters.runs_sent, "{what}");
                    assert_eq!(
                        run.counters.packets_sent, plain.counters.packets_sent,
                        "{what}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_lost_run_is_sent_again_packet_by_packet() {
    let plain = transfer(QpType::Rc, WrOpcode::RdmaWrite, 20_000, false, 65536, false);
    let lost = transfer(QpType::Rc, WrOpcode::RdmaWrite, 20_000, true, 65536, true);
    assert!(lost.placed == plain.placed, "every byte arrives");
    assert_eq!(lost.wcs.len(), 2);
    assert!(
        lost.wcs.iter().all(|w| w.1 == WcStatus::Success),
        "{:?}",
        lost.wcs
    );
    let c = lost.counters;
    assert!(
        c.retransmitted_packets > 0,
        "the lost run's packets went again"
    );
    assert!(lost.runs >= 2, "the second message still went in a run");
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
    let (a, b) = (
        SocketAddr::new(net.a.ip, 4791),
        SocketAddr::new(net.b.ip, 4791),
    );
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
            .handle_local_run(net.now, a, b, bytes, s.to_tag(), &net.b.mem);
        let after = net.b.e.counters();
        assert_eq!(after.drop_malformed, before.drop_malformed + 1, "{s:?}");
        assert_eq!(
            after.qps.packets_received, before.qps.packets_received,
            "{s:?}: no packet taken"
        );
    }
    assert_eq!(
        net.b.mem.snapshot(BASE + 0x8_0000, 3000),
        vec![0; 3000],
        "nothing placed"
    );
    // With its own segments it is taken.
    net.b
        .e
        .handle_local_run(net.now, a, b, bytes, segs.to_tag(), &net.b.mem);
    assert_eq!(
        net.b.mem.snapshot(BASE + 0x8_0000, 3000),
        pattern(0x8_0000, 7)[..3000]
    );
}

//! RC reliability corner cases found by the simulator (crates/sim), each as a
//! scripted two-engine conversation: RNR on a one-packet WRITE_WITH_IMM,
//! responses for a later WQE after an implied NAK, the implied NAK's retry
//! budget, and the counters that record all of it.

mod net;
use net::*;
use std::cell::Cell;
use std::rc::Rc;

/// Opcode byte of a datagram (BTH byte 0).
fn opcode(pkt: &[u8]) -> u8 {
    pkt[0]
}
const READ_RESPONSE_LAST: u8 = 0x0f;
const READ_RESPONSE_ONLY: u8 = 0x10;

fn post(n: &mut Node, qp: QpHandle, wr_id: u64, op: WrOpcode, sg: &[Sge], t: WrTarget) {
    n.e.post_send(qp, &send_wr(wr_id, op, sg, t), None).unwrap();
}

/// Posts a receive of `length` bytes at `addr` (one SGE).
fn post_recv(n: &mut Node, qp: QpHandle, wr_id: u64, addr: u64, length: u32, lkey: u32) {
    let sg_list = [Sge { addr, length, lkey }];
    let wr = RecvWr {
        wr_id,
        sg_list: &sg_list,
    };
    n.e.post_recv(qp, &wr).unwrap();
}

/// An RNR NAK for a WRITE_ONLY_WITH_IMMEDIATE must leave the responder as it
/// was: the resent packet is the same ONLY packet, not an invalid request.
#[test]
fn rnr_on_write_only_with_imm_then_the_retry_succeeds() {
    let mut net = Net::new();
    let (qa, _, qb, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 4096, 1);
    let (lb, rb) = net.b.mr(0, 4096, 1 | 2);
    net.a.mem.write(BASE, &pattern(100, 3));
    let sg = [Sge {
        addr: BASE,
        length: 100,
        lkey: la,
    }];
    let t = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE + 512,
        rkey: rb,
    });
    post(&mut net.a, qa, 1, WrOpcode::RdmaWriteWithImm, &sg, t);
    // A sends, B has no receive: RNR NAK; A waits.
    net.pump_once();
    net.pump_once();
    assert_eq!(net.b.e.qp_counters(qb).unwrap().rnr_naks_sent, 1);
    post_recv(&mut net.b, qb, 9, BASE + 2048, 16, lb);
    net.run();
    let wa = net.a.poll();
    assert_eq!(
        wa.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success)]
    );
    let wb = net.b.poll();
    assert_eq!(wb.len(), 1);
    assert_eq!(
        (wb[0].wr_id, wb[0].status, wb[0].opcode, wb[0].byte_len),
        (9, WcStatus::Success, WcOpcode::RecvRdmaWithImm, 100)
    );
    assert_eq!(net.b.mem.snapshot(BASE + 512, 100), pattern(100, 3));
    assert_eq!(net.b.state(qb), QpState::Rts);
    let ca = net.a.e.qp_counters(qa).unwrap();
    assert_eq!((ca.rnr_naks_received, ca.retransmitted_packets), (1, 1));
}

/// After an RNR NAK the responder sends no further NAK until the NAKed PSN
/// comes again (qib/hfi1 `r_nak_state`: an RNR NAK, like a sequence NAK,
/// is "a NAK already sent"): the packets behind the refused one are dropped
/// in silence, not answered with a PSN-sequence NAK that would have the
/// requester resend at once instead of after the RNR delay. One RNR wait,
/// one resend round, and all three SENDs land.
#[test]
fn no_sequence_nak_follows_an_rnr_nak() {
    let mut net = Net::new();
    let (qa, _, qb, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 4096, 1);
    let (lb, _) = net.b.mr(0, 4096, 1);
    net.a.mem.write(BASE, &pattern(48, 6));
    for i in 0..3u64 {
        let sg = [Sge {
            addr: BASE + 16 * i,
            length: 16,
            lkey: la,
        }];
        post(&mut net.a, qa, i, WrOpcode::Send, &sg, WrTarget::None);
    }
    // B takes all three with no receive posted: one RNR NAK, two drops.
    net.pump_once();
    let cb = net.b.e.qp_counters(qb).unwrap();
    assert_eq!(
        (cb.rnr_naks_sent, cb.seq_naks_sent, cb.drop_sequence),
        (1, 0, 2),
        "the packets behind the RNR NAK"
    );
    for i in 0..3u64 {
        post_recv(&mut net.b, qb, 10 + i, BASE + 1024 + 16 * i, 16, lb);
    }
    net.run();
    let done: Vec<_> = net.a.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(done, [0, 1, 2].map(|i| (i, WcStatus::Success)));
    assert_eq!(net.b.poll().len(), 3);
    assert_eq!(net.b.mem.snapshot(BASE + 1024, 48), pattern(48, 6));
    let ca = net.a.e.qp_counters(qa).unwrap();
    assert_eq!(
        (
            ca.rnr_naks_received,
            ca.seq_naks_received,
            ca.retransmit_rounds
        ),
        (1, 0, 1)
    );
    assert_eq!(net.b.e.qp_counters(qb).unwrap().seq_naks_sent, 0);
}

/// READ W1 (two response packets) then READ W2. W1's LAST response is lost,
/// W2's ONLY arrives: it implies W1's response was lost (resend from W1's
/// missing packet); W2's response itself is for a later WQE and must be
/// ignored, not failed with BAD_RESP_ERR.
#[test]
fn a_response_for_a_later_read_after_a_lost_one_is_ignored_and_both_complete() {
    let mut net = Net::new();
    let (qa, _, qb, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 8192, 1);
    let (_, rb) = net.b.mr(0, 8192, 1 | 4);
    net.b.mem.write(BASE, &pattern(1500, 5));
    net.b.mem.write(BASE + 4096, &pattern(40, 6));
    let lost = Rc::new(Cell::new(0));
    let l = lost.clone();
    net.drop_from_b = Some(Box::new(move |p| {
        let drop = opcode(p) == READ_RESPONSE_LAST && l.get() == 0;
        l.set(l.get() + u32::from(drop));
        drop
    }));
    for (id, off, len, dst) in [(1u64, 0u64, 1500u32, 0u64), (2, 4096, 40, 4096)] {
        let sg = [Sge {
            addr: BASE + dst,
            length: len,
            lkey: la,
        }];
        let t = WrTarget::Rdma(RdmaTarget {
            remote_addr: BASE + off,
            rkey: rb,
        });
        post(&mut net.a, qa, id, WrOpcode::RdmaRead, &sg, t);
    }
    net.run();
    assert_eq!(lost.get(), 1);
    let wa = net.a.poll();
    assert_eq!(
        wa.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(net.a.mem.snapshot(BASE, 1500), pattern(1500, 5));
    assert_eq!(net.a.mem.snapshot(BASE + 4096, 40), pattern(40, 6));
    let ca = net.a.e.qp_counters(qa).unwrap();
    assert_eq!(ca.implied_naks, 1, "{ca:?}");
    assert!(ca.stale_responses >= 1, "{ca:?}");
    let cb = net.b.e.qp_counters(qb).unwrap();
    assert!(cb.dup_reads_answered >= 1, "{cb:?}");
}

/// A READ whose responses are always lost, followed by a SEND that is ACKed:
/// every ACK implies the READ response was lost. That retry counts against
/// `retry_cnt` like a timeout (rc-reliability.md §1.3), once per round, so the
/// READ ends in RETRY_EXC_ERR after 1 + retry_cnt requests instead of
/// retrying forever.
#[test]
fn implied_naks_spend_the_retry_budget() {
    let mut net = Net::new();
    let p = Params {
        retry_cnt: 2,
        ..Params::default()
    };
    let (qa, _, qb, _) = connect_with(&mut net, QpType::Rc, p);
    let (la, _) = net.a.mr(0, 8192, 1);
    let (lb, rb) = net.b.mr(0, 8192, 1 | 4);
    net.drop_from_b = Some(Box::new(|p| opcode(p) == READ_RESPONSE_ONLY));
    let reads = Rc::new(Cell::new(0));
    let r = reads.clone();
    net.drop_from_a = Some(Box::new(move |p| {
        r.set(r.get() + u32::from(opcode(p) == 0x0c));
        false
    }));
    for i in 0..4 {
        post_recv(&mut net.b, qb, 100 + i, BASE + 4096, 64, lb);
    }
    let sg = [Sge {
        addr: BASE,
        length: 8,
        lkey: la,
    }];
    let t = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE,
        rkey: rb,
    });
    post(&mut net.a, qa, 1, WrOpcode::RdmaRead, &sg, t);
    post(&mut net.a, qa, 2, WrOpcode::Send, &sg, WrTarget::None);
    net.run();
    let wa = net.a.poll();
    assert_eq!(
        wa.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(
        reads.get(),
        1 + 2,
        "one READ request and retry_cnt = 2 resends"
    );
    assert_eq!(net.a.state(qa), QpState::Err);
    let ca = net.a.e.qp_counters(qa).unwrap();
    assert_eq!(ca.implied_naks + ca.timeouts, 3, "{ca:?}");
}

/// A perfect network: no retransmission, timeout, NAK, duplicate or drop is
/// counted; the device totals equal the sum of the QPs.
#[test]
fn counters_stay_zero_without_faults_and_add_up() {
    let mut net = Net::new();
    let (qa, _, qb, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 8192, 1);
    let (lb, rb) = net.b.mr(0, 8192, 1 | 2 | 4);
    post_recv(&mut net.b, qb, 7, BASE, 4096, lb);
    let sg = [Sge {
        addr: BASE,
        length: 3000,
        lkey: la,
    }];
    post(&mut net.a, qa, 1, WrOpcode::Send, &sg, WrTarget::None);
    let t = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE + 4096,
        rkey: rb,
    });
    post(&mut net.a, qa, 2, WrOpcode::RdmaWrite, &sg, t);
    post(&mut net.a, qa, 3, WrOpcode::RdmaRead, &sg, t);
    net.run();
    assert_eq!(net.a.poll().len(), 3);
    let (ca, cb) = (
        net.a.e.qp_counters(qa).unwrap(),
        net.b.e.qp_counters(qb).unwrap(),
    );
    for c in [ca, cb] {
        assert_eq!(
            (
                c.retransmitted_packets,
                c.retransmit_rounds,
                c.timeouts,
                c.rnr_naks_sent + c.rnr_naks_received,
                c.seq_naks_sent + c.seq_naks_received,
                c.duplicates,
                c.dropped,
                c.stale_responses
            ),
            (0, 0, 0, 0, 0, 0, 0, 0),
            "{c:?}"
        );
    }
    // A: 3 + 3 request packets + 1 READ request; B: ACKs (coalesced) + 3 READ responses.
    assert_eq!(ca.packets_sent, 7);
    assert_eq!(ca.bytes_sent, 6000);
    assert_eq!(cb.bytes_received, 6000);
    assert_eq!(ca.bytes_received, 3000);
    let da = net.a.e.counters();
    assert_eq!(da.qps, ca);
    assert_eq!(da.packets_sent, ca.packets_sent);
    assert_eq!(da.drop_icrc + da.drop_malformed + da.drop_not_accepted, 0);
}

/// A two-packet READ whose FIRST response is lost: the LAST that does arrive
/// must not move the oldest unacknowledged PSN past the missing FIRST (else
/// the resent FIRST looks stale and the READ can never finish).
#[test]
fn a_read_whose_first_response_is_lost_is_re_read_from_the_start() {
    let mut net = Net::new();
    let (qa, _, _, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 8192, 1);
    let (_, rb) = net.b.mr(0, 8192, 1 | 4);
    net.b.mem.write(BASE, &pattern(1500, 9));
    let lost = Rc::new(Cell::new(0));
    let l = lost.clone();
    net.drop_from_b = Some(Box::new(move |p| {
        let drop = opcode(p) == 0x0d && l.get() == 0;
        l.set(l.get() + u32::from(drop));
        drop
    }));
    let sg = [Sge {
        addr: BASE,
        length: 1500,
        lkey: la,
    }];
    let t = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE,
        rkey: rb,
    });
    post(&mut net.a, qa, 1, WrOpcode::RdmaRead, &sg, t);
    net.run();
    assert_eq!(lost.get(), 1);
    let wa = net.a.poll();
    assert_eq!(
        wa.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success)]
    );
    assert_eq!(net.a.mem.snapshot(BASE, 1500), pattern(1500, 9));
    assert_eq!(net.a.e.qp_counters(qa).unwrap().timeouts, 0);
}

/// READ (response lost) then SEND that meets an RNR NAK: the RNR NAK implies
/// the READ's response was lost, and the RNR rewind to the SEND must not skip
/// the READ's resend: both complete after the RNR wait, without waiting for
/// an ACK timeout.
#[test]
fn an_rnr_rewind_does_not_skip_a_read_waiting_for_its_resend() {
    let mut net = Net::new();
    let (qa, _, qb, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, 8192, 1);
    let (lb, rb) = net.b.mr(0, 8192, 1 | 4);
    net.b.mem.write(BASE + 4096, &pattern(8, 4));
    let lost = Rc::new(Cell::new(0));
    let l = lost.clone();
    net.drop_from_b = Some(Box::new(move |p| {
        let drop = opcode(p) == READ_RESPONSE_ONLY && l.get() == 0;
        l.set(l.get() + u32::from(drop));
        drop
    }));
    let sg = [Sge {
        addr: BASE,
        length: 8,
        lkey: la,
    }];
    let t = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE + 4096,
        rkey: rb,
    });
    post(&mut net.a, qa, 1, WrOpcode::RdmaRead, &sg, t);
    post(&mut net.a, qa, 2, WrOpcode::Send, &sg, WrTarget::None);
    net.pump_once();
    net.pump_once();
    assert_eq!(net.a.e.qp_counters(qa).unwrap().rnr_naks_received, 1);
    post_recv(&mut net.b, qb, 5, BASE, 64, lb);
    net.run();
    let wa = net.a.poll();
    assert_eq!(
        wa.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(net.a.mem.snapshot(BASE, 8), pattern(8, 4));
    assert_eq!(
        net.a.e.qp_counters(qa).unwrap().timeouts,
        0,
        "no ACK timeout needed"
    );
}

/// A long READ whose response stream has one gap, with the requester getting
/// to send between response packets (as on a real network): it asks for the
/// missing part once per retry round, not once per packet behind the gap, and
/// the responder answers a repeated request by replacing its queued answer,
/// not by queueing another — else every gap multiplies the traffic and a big
/// READ never finishes (seen as RETRY_EXC_ERR on a 64 MiB READ over UDP).
/// Scripted with the simulator's kind of interleaving, one packet at a time.
#[test]
fn a_gap_in_a_long_read_is_recovered_with_one_resend() {
    let mut net = Net::new();
    let (qa, _, qb, _) = connect(&mut net, QpType::Rc);
    let len = 256 * 1024u32;
    let (la, _) = net.a.mr(0, 2 * u64::from(len), 1);
    let (_, rb) = net.b.mr(0, u64::from(len), 1 | 4);
    net.b.mem.write(BASE, &pattern(len as usize, 2));
    let sg = [Sge {
        addr: BASE + u64::from(len),
        length: len,
        lkey: la,
    }];
    let t = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE,
        rkey: rb,
    });
    post(&mut net.a, qa, 1, WrOpcode::RdmaRead, &sg, t);
    // B sends one packet at a time; A answers whatever it wants after each.
    let (requests, responses) = net.lockstep(20_000, 10);
    let wa = net.a.poll();
    assert_eq!(
        wa.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success)]
    );
    assert_eq!(
        net.a.mem.snapshot(BASE + u64::from(len), len as usize),
        pattern(len as usize, 2)
    );
    assert_eq!(requests, 2, "the READ and one resend from the gap");
    // The original stream up to the packet that showed the gap (11), then the
    // answer from the gap on (247), which replaced the rest of the original.
    assert_eq!(responses, 11 + 247);
    let (ca, cb) = (
        net.a.e.qp_counters(qa).unwrap(),
        net.b.e.qp_counters(qb).unwrap(),
    );
    assert_eq!(
        (
            ca.retransmitted_packets,
            ca.read_gaps,
            ca.retransmit_rounds,
            cb.dup_reads_answered
        ),
        (1, 1, 1, 1),
        "{ca:?} {cb:?}"
    );
}

/// A gap in a READ's response stream is a sequence error on the requester's
/// side and spends a transport retry like an implied NAK (rc-reliability.md
/// §1.3; rxe COMPST_ERROR_RETRY, hfi1 rdma_seq_err). With `retry_cnt` 0 the
/// first gap ends the READ in RETRY_EXC_ERR at once, before any ACK timeout;
/// with budget left, the same gap is resumed (the test above).
#[test]
fn a_read_gap_spends_the_retry_budget() {
    let mut net = Net::new();
    let p = Params {
        retry_cnt: 0,
        ..Params::default()
    };
    let (qa, _, _, _) = connect_with(&mut net, QpType::Rc, p);
    let len = 64 * 1024u32;
    let (la, _) = net.a.mr(0, 2 * u64::from(len), 1);
    let (_, rb) = net.b.mr(0, u64::from(len), 1 | 4);
    let sg = [Sge {
        addr: BASE + u64::from(len),
        length: len,
        lkey: la,
    }];
    let t = WrTarget::Rdma(RdmaTarget {
        remote_addr: BASE,
        rkey: rb,
    });
    post(&mut net.a, qa, 1, WrOpcode::RdmaRead, &sg, t);
    net.lockstep(1000, 3);
    let wa = net.a.poll();
    assert_eq!(
        wa.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::RetryExcErr)]
    );
    let c = net.a.e.qp_counters(qa).unwrap();
    assert_eq!((c.read_gaps, c.timeouts), (1, 0), "{c:?}");
}

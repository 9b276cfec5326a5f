//! The stress test's checks after a run (see the crate doc).

use super::*;

// ---- the checks ----

pub(crate) fn check(w: &World) {
    for side in 0..2 {
        check_side(w, side);
    }
    check_atomics(w);
    check_counters(w);
    check_events(w);
}

pub(crate) fn status_run_ok(side: usize, slot: usize, statuses: &[WcStatus]) -> bool {
    if !victim(slot) {
        return statuses.iter().all(|s| *s == WcStatus::Success);
    }
    // Successes, at most one transport error, then flushes.
    let ok = statuses
        .iter()
        .take_while(|s| **s == WcStatus::Success)
        .count();
    let mut rest = &statuses[ok..];
    if side == 0 {
        if let Some((first, tail)) = rest.split_first() {
            if matches!(first, WcStatus::RetryExcErr | WcStatus::RnrRetryExcErr) {
                rest = tail;
            }
        }
    }
    rest.iter().all(|s| *s == WcStatus::WrFlushErr)
}

pub(crate) fn check_side(w: &World, side: usize) {
    let s = &w.sides[side];
    let peer = &w.sides[1 - side];
    let log = lock(&s.log).clone();
    assert!(
        s.cq_shared.is_empty(),
        "side {side}: the CQ was polled empty"
    );
    let qpn = |side: usize, slot: usize| w.qpn[side][slot].load(SeqCst);
    let slot_of_qpn = |q: u32| (0..NQ).find(|&k| qpn(side, k) == q);

    // Send WRs: each exactly once, in posting order, on its QP.
    let mut sends: BTreeMap<usize, Vec<(u64, WorkCompletion)>> = BTreeMap::new();
    // Receives: each WQE at most once; what each consumed.
    let mut recvs = BTreeSet::new();
    let mut delivered: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    let mut recv_count = 0u64;
    for c in &log {
        if let Some((s2, slot, seq)) = decode_wr_id(c.wr_id) {
            assert_eq!(s2, side, "a completion of the other side's WR: {c:?}");
            assert_eq!(c.qp_num, qpn(side, slot), "a WR completes on its QP: {c:?}");
            sends.entry(slot).or_default().push((seq, *c));
            continue;
        }
        assert_eq!(c.wr_id >> 48, RECV_ID >> 48, "unknown wr_id: {c:?}");
        assert_eq!((c.wr_id >> 40 & 0xff) as usize, side, "{c:?}");
        let idx = c.wr_id & 0xff_ffff_ffff;
        assert!(
            idx < w.recv_posted[side].load(SeqCst),
            "never posted: {c:?}"
        );
        assert!(
            recvs.insert(idx),
            "receive WQE {idx} completed twice: {c:?}"
        );
        recv_count += 1;
        let slot = slot_of_qpn(c.qp_num).unwrap_or_else(|| panic!("on no QP: {c:?}"));
        if c.status == WcStatus::WrFlushErr {
            assert!(victim(slot), "only a victim flushes a receive: {c:?}");
            continue;
        }
        assert_eq!(c.status, WcStatus::Success, "{c:?}");
        let (from_side, from_slot, seq) = match c.opcode {
            WcOpcode::Recv => {
                let head = s.mem.bytes(RECV + idx * SLOT, 8);
                let id = u64::from_le_bytes(head.try_into().expect("8 bytes"));
                let who = decode_wr_id(id)
                    .unwrap_or_else(|| panic!("receive {idx} holds no WR id: {c:?}"));
                let op = plan(who.0, who.1, who.2);
                assert!(
                    matches!(op.kind, Kind::Send | Kind::SendImm),
                    "receive {idx} got {op:?}"
                );
                assert_eq!(c.byte_len, op.len, "the SEND's length: {c:?}");
                let got = s.mem.bytes(RECV + idx * SLOT, u64::from(op.len));
                assert!(
                    got == payload(id, op.len),
                    "SEND {id:#x}: bytes differ in receive {idx}"
                );
                let with_imm = c.wc_flags.0 & WcFlags::WITH_IMM.0 != 0;
                assert_eq!(with_imm, op.kind == Kind::SendImm, "{c:?}");
                if with_imm {
                    assert_eq!(c.imm_data, ImmData::from_value(imm(who.0, who.1, who.2)));
                }
                who
            }
            WcOpcode::RecvRdmaWithImm => {
                let who = decode_imm(c.imm_data.value());
                assert_eq!(plan(who.0, who.1, who.2).kind, Kind::WriteImm, "{c:?}");
                who
            }
            op => panic!("a receive completion with opcode {op:?}"),
        };
        assert_eq!(from_side, 1 - side, "{c:?}");
        assert_eq!(from_slot, slot, "received on the peer's partner QP: {c:?}");
        assert!(
            seq < w.posted[from_side][from_slot].load(SeqCst),
            "delivered but never posted: {c:?}"
        );
        delivered.entry(slot).or_default().push(seq);
    }

    for slot in 0..NQ {
        let posted = w.posted[side][slot].load(SeqCst);
        let got = sends.remove(&slot).unwrap_or_default();
        let seqs: Vec<u64> = got.iter().map(|(q, _)| *q).collect();
        if seqs != (0..posted).collect::<Vec<_>>() {
            let detail: Vec<String> = got
                .iter()
                .map(|(q, c)| format!("{q}:{:?}/{:?}", c.status, plan(side, slot, *q).kind))
                .collect();
            panic!(
                "side {side} slot {slot}: {posted} posted, not every WR once in posting order: {}\ncontrol: {:?}",
                detail.join(" "),
                lock(&w.control_log)
            );
        }
        let statuses: Vec<WcStatus> = got.iter().map(|(_, c)| c.status).collect();
        assert!(
            status_run_ok(side, slot, &statuses),
            "side {side} slot {slot}: statuses {statuses:?}"
        );
        for (seq, c) in &got {
            if c.status != WcStatus::Success {
                continue;
            }
            let op = plan(side, slot, *seq);
            assert_eq!(c.opcode, op.kind.wc(), "{c:?}");
            let off = slot_off(slot, *seq);
            let id = wr_id(side, slot, *seq);
            match op.kind {
                Kind::Write | Kind::WriteImm => assert!(
                    peer.mem.bytes(WTGT + off, u64::from(op.len)) == payload(id, op.len),
                    "WRITE {id:#x}: the bytes at the peer differ"
                ),
                Kind::Read => {
                    assert_eq!(c.byte_len, op.len, "{c:?}");
                    let want: Vec<u8> = (op.read_off..op.read_off + u64::from(op.len))
                        .map(rsrc_byte)
                        .collect();
                    assert!(
                        s.mem.bytes(LOCAL + off, u64::from(op.len)) == want,
                        "READ {id:#x}: the bytes read differ"
                    );
                }
                Kind::FetchAdd => assert_eq!(c.byte_len, 8, "{c:?}"),
                Kind::Send | Kind::SendImm => {}
            }
        }
        // What the peer's partner QP sent that needs a receive here.
        let from = 1 - side;
        let mut got_seqs = delivered.remove(&slot).unwrap_or_default();
        assert!(
            got_seqs.windows(2).all(|p| p[0] < p[1]),
            "side {side} slot {slot}: messages received once each, in order: {got_seqs:?}"
        );
        let sender = lock(&peer.log).clone();
        let sender_ok: BTreeSet<u64> = sender
            .iter()
            .filter(|c| c.status == WcStatus::Success)
            .filter_map(|c| decode_wr_id(c.wr_id))
            .filter(|&(s2, k, _)| s2 == from && k == slot)
            .map(|(_, _, q)| q)
            .filter(|&q| plan(from, slot, q).kind.consumes_recv())
            .collect();
        let got_set: BTreeSet<u64> = got_seqs.drain(..).collect();
        if victim(slot) {
            // Every message its sender saw acknowledged was received (the
            // victim's completions were polled before its destroy).
            assert!(
                sender_ok.is_subset(&got_set),
                "side {side}: acknowledged but never received: {:?}",
                sender_ok.difference(&got_set).collect::<Vec<_>>()
            );
        } else {
            assert_eq!(
                got_set, sender_ok,
                "side {side} slot {slot}: every message the peer sent received exactly once"
            );
        }
    }
    // Every SRQ WQE completed once or is still queued.
    let posted = w.recv_posted[side].load(SeqCst);
    let queued = u64::from(s.srq_ring.queued());
    assert_eq!(
        posted - queued,
        recv_count,
        "side {side}: {posted} receives posted, {queued} queued, {recv_count} completed"
    );
}

/// The fetch-and-adds into each device's word: sorted by the value they
/// returned, each starts where the one before ended (each was executed
/// exactly once, none at the same time as another), the last ends at the
/// word's value.
pub(crate) fn check_atomics(w: &World) {
    for side in 0..2 {
        let from = 1 - side;
        let mut chain = Vec::new();
        for slot in (0..STABLE).chain([FRESH]) {
            for seq in 0..w.posted[from][slot].load(SeqCst) {
                let op = plan(from, slot, seq);
                if op.kind != Kind::FetchAdd {
                    continue;
                }
                let b = w.sides[from].mem.bytes(LOCAL + slot_off(slot, seq), 8);
                let original = u64::from_ne_bytes(b.try_into().expect("8 bytes"));
                chain.push((original, op.add));
            }
        }
        chain.sort_unstable();
        let mut at = 0;
        for (original, add) in &chain {
            assert_eq!(*original, at, "side {side}: fetch-and-add chain broken");
            at += add;
        }
        let word = w.sides[side].mem.bytes(COUNTER, 8);
        let word = u64::from_ne_bytes(word.try_into().expect("8 bytes"));
        assert_eq!(word, at, "side {side}: the word is the sum of the adds");
        assert!(chain.len() > 10, "side {side}: only {} adds", chain.len());
    }
}

pub(crate) fn check_counters(w: &World) {
    let [a, b] = [w.sides[0].rd().counters(), w.sides[1].rd().counters()];
    if w.cfg.mode != Mode::Reorder {
        // Each QP's packets arrive in order: a responder finds a PSN ahead
        // of the one it expects only behind an RNR NAK it sent (the
        // packets that followed the refused one), once per NAK at most.
        for (c, side) in [(&a, "A"), (&b, "B")] {
            assert!(
                c.qps.seq_naks_sent <= c.qps.rnr_naks_sent,
                "side {side}: packets out of order: {:?}",
                c.qps
            );
        }
    }
    for (x, y, what) in [(&a, &b, "A to B"), (&b, &a, "B to A")] {
        assert_eq!(
            x.packets_sent, y.packets_received,
            "{what}: every datagram handed over"
        );
        assert_eq!(x.bytes_sent, y.bytes_received, "{what}: bytes");
    }
    for (c, side) in [(&a, "A"), (&b, "B")] {
        // The device's counts and its QPs' (destroyed ones included) agree.
        assert_eq!(c.qps.packets_sent, c.packets_sent, "side {side}: sent");
        assert_eq!(
            c.qps.packets_received + c.drop_no_qp + c.drop_not_accepted,
            c.packets_received,
            "side {side}: every datagram taken by a QP or dropped: {c:?}"
        );
        let bad = [
            c.drop_malformed,
            c.drop_icrc,
            c.drop_wrong_transport,
            c.drop_wrong_peer,
            c.drop_pkey,
        ];
        assert_eq!(bad, [0; 5], "side {side}: {c:?}");
    }
    assert_eq!(w.in_flight.load(SeqCst), 0);
}

/// Each destroyed QP went to ERR on an SRQ: exactly one last-WQE event for it.
/// B's SRQ limit was armed: one limit event if it is disarmed now (the
/// event and the disarm are one step), none if still armed. Nothing else.
pub(crate) fn check_events(w: &World) {
    for (side, s) in w.sides.iter().enumerate() {
        let events = lock(&s.asyncs).clone();
        let retired: Vec<QpHandle> = lock(&w.retired)
            .iter()
            .filter(|(s2, _)| *s2 == side)
            .map(|(_, h)| *h)
            .collect();
        assert_eq!(retired.len(), 1 + NQ - CHURN, "side {side}: destroyed QPs");
        let limit = Event::Async {
            kind: AsyncEventKind::SrqLimitReached,
            element: EventElement::Srq(s.srq),
        };
        let count = |want: &Event| events.iter().filter(|e| *e == want).count();
        for h in &retired {
            let last_wqe = Event::Async {
                kind: AsyncEventKind::QpLastWqeReached,
                element: EventElement::Qp(*h),
            };
            assert_eq!(count(&last_wqe), 1, "side {side}: {events:?}");
        }
        let armed = s.rd().query_srq(s.srq).expect("query_srq").srq_limit;
        let limit_events = usize::from(side == 1 && armed == 0);
        assert_eq!(count(&limit), limit_events, "side {side}: {events:?}");
        let want = retired.len() + limit_events;
        assert_eq!(events.len(), want, "side {side}: {events:?}");
    }
}

pub(crate) fn report(w: &World, what: &str) {
    let c = [w.sides[0].rd().counters(), w.sides[1].rd().counters()];
    eprintln!(
        "{what}: {} + {} completions, {} + {} datagrams, retransmitted {} + {}, ACK timeouts {} + {}, seq NAKs {} + {}, RNR NAKs {} + {}, {} idle jumps and {} steps of the clock, {} completion events on B, SRQ limit of B {}; {:?}",
        lock(&w.sides[0].log).len(),
        lock(&w.sides[1].log).len(),
        c[0].packets_sent,
        c[1].packets_sent,
        c[0].qps.retransmitted_packets,
        c[1].qps.retransmitted_packets,
        c[0].qps.timeouts,
        c[1].qps.timeouts,
        c[0].qps.seq_naks_sent,
        c[1].qps.seq_naks_sent,
        c[0].qps.rnr_naks_sent,
        c[1].qps.rnr_naks_sent,
        w.timer_jumps.load(SeqCst),
        w.drifts.load(SeqCst),
        w.sides[1].completion_events.load(SeqCst),
        match w.sides[1].rd().query_srq(w.sides[1].srq).map(|a| a.srq_limit) {
            Ok(0) => "reached",
            _ => "not reached",
        },
        lock(&w.control_log),
    );
}

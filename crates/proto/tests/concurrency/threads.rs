//! The stress test's threads: posters, transmitters, receivers, pollers, the timer, the control thread.

use super::*;

// ---- the threads ----

pub(crate) fn poster(w: &World, side: usize, slot: usize) {
    let info = loop {
        if let Some(i) = w.info(side, slot) {
            break i;
        }
        if w.stopped() {
            return;
        }
        sleep(Duration::from_micros(200));
    };
    let (s, peer) = (&w.sides[side], &w.sides[1 - side]);
    'wrs: for seq in 0..w.cfg.per {
        if w.stop_posting[side][slot].load(SeqCst) || w.stopped() {
            break;
        }
        let op = plan(side, slot, seq);
        let id = wr_id(side, slot, seq);
        let off = slot_off(slot, seq);
        let (addr, target) = match op.kind {
            Kind::Send | Kind::SendImm => (SRC + off, WrTarget::None),
            Kind::Write | Kind::WriteImm => (
                SRC + off,
                WrTarget::Rdma(RdmaTarget {
                    remote_addr: WTGT + off,
                    rkey: peer.rkey,
                }),
            ),
            Kind::Read => (
                LOCAL + off,
                WrTarget::Rdma(RdmaTarget {
                    remote_addr: RSRC + op.read_off,
                    rkey: peer.rkey,
                }),
            ),
            Kind::FetchAdd => (
                LOCAL + off,
                WrTarget::Atomic(AtomicTarget {
                    remote_addr: COUNTER,
                    compare_add: op.add,
                    swap: 0,
                    rkey: peer.rkey,
                }),
            ),
        };
        if addr == SRC + off {
            s.mem.write(addr, &payload(id, op.len));
        }
        let sge = [Sge {
            addr,
            length: op.len,
            lkey: s.lkey,
        }];
        let wr = SendWr {
            wr_id: id,
            opcode: op.kind.opcode(),
            flags: SendFlags::SIGNALED,
            sg_list: &sge,
            imm_data: ImmData::from_value(imm(side, slot, seq)),
            target,
        };
        loop {
            // Rooms mode: every other post straight into the send queue
            // and the peer's FIFO, when it can be made so.
            if w.cfg.mode == Mode::Rooms && seq % 2 == 0 {
                let mut room = FifoRoom::into(w, 1 - side);
                let (e, now) = (s.rd(), w.now.load(SeqCst));
                match e.post_send_through(info.h, &wr, None, now, &s.mem, &mut room) {
                    Some(Ok(_)) => {
                        w.posted_through.fetch_add(1, SeqCst);
                        break;
                    }
                    Some(Err(PostError::QueueFull { .. })) => {
                        if w.stop_posting[side][slot].load(SeqCst) || w.stopped() {
                            break 'wrs;
                        }
                        sleep(Duration::from_micros(30));
                        continue;
                    }
                    Some(Err(e)) => panic!("post of {id:#x} refused: {e}"),
                    None => {}
                }
            }
            match info.ring.post(&wr, None, 0) {
                Ok(SendPost::Queued { .. }) => break,
                Ok(SendPost::Flush) => {
                    s.wr().post_send(info.h, &wr, None).expect("post_send");
                    break;
                }
                Ok(SendPost::Settle) => {
                    s.wr().settle_send(info.h).expect("settle_send");
                    break;
                }
                Err(PostError::QueueFull { .. }) => {
                    if w.stop_posting[side][slot].load(SeqCst) || w.stopped() {
                        break 'wrs;
                    }
                    sleep(Duration::from_micros(30));
                }
                Err(e) => panic!("post of {id:#x} refused: {e}"),
            }
        }
        w.posted[side][slot].store(seq + 1, SeqCst);
        w.bump();
        if w.cfg.mode == Mode::Lanes {
            send_own_lane(w, side, seq % 2 == 1);
        }
        if w.cfg.mode == Mode::Rooms {
            let mut room = FifoRoom::into(w, 1 - side);
            let (e, now) = (s.rd(), w.now.load(SeqCst));
            e.transmit_posted_through(info.h, now, &s.mem, &mut room);
        }
        // A third of the WRs end a burst: the poster waits until all it
        // posted completed, so the next post finds the QP idle (the post
        // alone must wake it: the posted list, no packet of its own due).
        if mix(id).is_multiple_of(3) {
            while w.send_completions(side, slot) < seq + 1
                && !w.stop_posting[side][slot].load(SeqCst)
                && !w.stopped()
            {
                sleep(Duration::from_micros(50));
            }
        }
    }
    w.poster_done[side][slot].store(true, SeqCst);
}

/// Keeps the SRQ stocked: NRECV WQEs, each with its own buffer.
pub(crate) fn srq_poster(w: &World, side: usize) {
    let s = &w.sides[side];
    let mut idx = 0;
    while idx < NRECV && !w.stopped() {
        let sge = [Sge {
            addr: RECV + idx * SLOT,
            length: SLOT as u32,
            lkey: s.lkey,
        }];
        let wr = RecvWr {
            wr_id: recv_id(side, idx),
            sg_list: &sge,
        };
        let posted = match s.srq_ring.post(&wr) {
            Ok(RingPost::Queued) => true,
            Ok(RingPost::Full) => match s.wr().post_srq_recv(s.srq, &wr) {
                Ok(()) => true,
                Err(PostError::QueueFull { .. }) => false,
                Err(e) => panic!("post_srq_recv: {e}"),
            },
            Ok(other) => panic!("an SRQ ring said {other:?}"),
            Err(PostError::QueueFull { .. }) => false,
            Err(e) => panic!("SRQ post refused: {e}"),
        };
        if posted {
            idx += 1;
            w.recv_posted[side].store(idx, SeqCst);
            w.bump();
        } else {
            sleep(Duration::from_micros(50));
        }
    }
}

/// The BTH's destination QP of a RoCEv2 datagram.
pub(crate) fn dest_qpn(d: &[u8]) -> u32 {
    u32::from_be_bytes([0, d[5], d[6], d[7]])
}

/// Takes up to 32 datagrams from `side` (its read side held only
/// meanwhile), with `claims` through `poll_transmit_claimed`.
pub(crate) fn take_batch(
    w: &World,
    side: usize,
    buf: &mut [u8],
    mut claims: Option<&mut TxClaims>,
) -> Vec<Vec<u8>> {
    let s = &w.sides[side];
    let peer_ip = w.sides[1 - side].ip;
    let mut batch = Vec::new();
    let e = s.rd();
    let now = w.now.load(SeqCst);
    while batch.len() < 32 {
        let t = match claims.as_deref_mut() {
            Some(c) => e.poll_transmit_claimed(now, &s.mem, buf, c),
            None => e.poll_transmit(now, &s.mem, buf),
        };
        let Some(t) = t else {
            break;
        };
        assert_eq!(t.to.ip(), peer_ip, "a datagram for the peer");
        w.in_flight.fetch_add(1, SeqCst);
        batch.push(buf[..t.len].to_vec());
    }
    batch
}

/// Hands datagram `d` to device `to`: as from its socket, or (`local`) as
/// from the same-host path (RC's ICRC not verified).
pub(crate) fn deliver(w: &World, to: usize, d: &[u8], local: bool) {
    let (s, from) = (&w.sides[to], &w.sides[1 - to]);
    let (e, now) = (s.rd(), w.now.load(SeqCst));
    if local {
        e.handle_local_datagram(now, from.addr(), s.addr(), d, &s.mem, None);
    } else {
        e.handle_datagram(now, from.addr(), s.addr(), d, &s.mem);
    }
    drop(e);
    w.in_flight.fetch_sub(1, SeqCst);
    w.bump();
}

/// Serial and rooms modes: the only transmitting thread of `side`; the
/// datagrams go to the peer's receiving thread that owns their destination
/// QP. With rooms, the QPs stay claimed until their datagrams are in the
/// FIFOs (posters and receivers build into the same FIFOs meanwhile).
pub(crate) fn transmitter(w: &World, side: usize, shards: &[mpsc::Sender<Vec<u8>>]) {
    let mut buf = vec![0u8; 4096];
    let mut claims = TxClaims::default();
    let claimed = w.cfg.mode == Mode::Rooms;
    let mut round = 0u64;
    while !w.stopped() {
        w.busy.fetch_add(1, SeqCst);
        round += 1;
        if claimed && round.is_multiple_of(2) {
            // Every other round, the ready QPs' packets straight into the
            // peer's FIFOs first (as `sv_io`'s polls and progress thread
            // send a stream's), the rest below with the same claims.
            let mut room = FifoRoom::into(w, 1 - side);
            let (s, now) = (&w.sides[side], w.now.load(SeqCst));
            s.rd()
                .transmit_ready_through(now, &s.mem, &mut claims, &mut room, 32);
        }
        let batch = take_batch(w, side, &mut buf, claimed.then_some(&mut claims));
        let n = batch.len();
        for d in batch {
            let k = dest_qpn(&d) as usize % shards.len();
            shards[k].send(d).expect("a receiving thread");
        }
        if claimed {
            w.sides[side].rd().release_claims(&mut claims);
        }
        w.busy.fetch_sub(1, SeqCst);
        if n == 0 {
            sleep(Duration::from_micros(20));
        }
    }
}

pub(crate) fn receiver(w: &World, side: usize, rx: &mpsc::Receiver<Vec<u8>>, local: bool) {
    loop {
        match rx.recv_timeout(Duration::from_millis(5)) {
            Ok(d) if local && w.cfg.mode == Mode::Rooms => deliver_responding(w, side, &d),
            Ok(d) => deliver(w, side, &d, local),
            Err(mpsc::RecvTimeoutError::Timeout) if !w.stopped() => {}
            Err(_) => return,
        }
    }
}

/// Rooms mode: room in the FIFOs into device `to` (by destination QPN),
/// as `sv_io`'s same-host rings give it: a datagram built there while the
/// engine holds its QP goes in at once, in order.
pub(crate) struct FifoRoom<'a> {
    w: &'a World,
    fifos: Vec<mpsc::Sender<Vec<u8>>>,
    ip: IpAddr,
    buf: Vec<u8>,
    qpn: u32,
}

impl FifoRoom<'_> {
    pub(crate) fn into(w: &World, to: usize) -> FifoRoom<'_> {
        FifoRoom {
            w,
            fifos: lock(&w.inbox[to]).clone(),
            ip: w.sides[to].ip,
            buf: vec![0; 4096],
            qpn: 0,
        }
    }
}

impl proto::output::Room for FifoRoom<'_> {
    fn room(&mut self, to: SocketAddr, qpn: u32) -> Option<&mut [u8]> {
        assert_eq!(to.ip(), self.ip, "room asked for the peer");
        self.qpn = qpn;
        Some(&mut self.buf)
    }

    fn publish(&mut self, t: &proto::output::Transmit) {
        let d = self.buf[..t.len].to_vec();
        assert_eq!(dest_qpn(&d), self.qpn, "built for the QP the room was for");
        self.w.built_in_place.fetch_add(1, SeqCst);
        // In flight before it is in the FIFO (its receiver counts it out).
        self.w.in_flight.fetch_add(1, SeqCst);
        let k = self.qpn as usize % self.fifos.len();
        let _ = self.fifos[k].send(d);
    }
}

/// Rooms mode, a receiving thread of the same-host kind: `d` into `side`,
/// the responses it makes built into the FIFOs back to the sender.
fn deliver_responding(w: &World, side: usize, d: &[u8]) {
    let (s, from) = (&w.sides[side], &w.sides[1 - side]);
    let mut room = FifoRoom::into(w, 1 - side);
    let (e, now) = (s.rd(), w.now.load(SeqCst));
    e.handle_local_datagram(now, from.addr(), s.addr(), d, &s.mem, Some(&mut room));
    drop(e);
    w.in_flight.fetch_sub(1, SeqCst);
    w.bump();
}

/// Lanes mode: a poster sends what its lane of `side` has (its posts, and
/// what its deliveries made ready there), handing it to the peer itself.
fn send_own_lane(w: &World, side: usize, local: bool) {
    let mut buf = vec![0u8; 4096];
    let mut claims = TxClaims::default();
    claims.reach = lanes::LaneSet::mine();
    w.busy.fetch_add(1, SeqCst);
    let batch = take_batch(w, side, &mut buf, Some(&mut claims));
    w.own_lane_sent.fetch_add(batch.len(), SeqCst);
    for d in batch {
        deliver(w, 1 - side, &d, local);
    }
    w.sides[side].rd().release_claims(&mut claims);
    w.busy.fetch_sub(1, SeqCst);
}

/// Reorder and claims modes: one of two transmitting threads of `side`,
/// handing its datagrams to the peer itself (the peer's read side, after
/// its own is let go); with claims, the QPs it took datagrams from are let
/// go only after that.
pub(crate) fn transmit_direct(w: &World, side: usize, local: bool) {
    let mut buf = vec![0u8; 4096];
    let mut claims = TxClaims::default();
    let claimed = matches!(w.cfg.mode, Mode::Claims | Mode::Lanes);
    while !w.stopped() {
        w.busy.fetch_add(1, SeqCst);
        let batch = take_batch(w, side, &mut buf, claimed.then_some(&mut claims));
        let n = batch.len();
        for d in batch {
            deliver(w, 1 - side, &d, local);
        }
        if claimed {
            w.sides[side].rd().release_claims(&mut claims);
        }
        w.busy.fetch_sub(1, SeqCst);
        if n == 0 {
            sleep(Duration::from_micros(20));
        }
    }
}

/// A's CQ: a busy poller (two of them run).
pub(crate) fn busy_poller(w: &World, side: usize) {
    let s = &w.sides[side];
    while !w.stopped() {
        if s.poll() > 0 {
            w.bump();
        } else {
            sleep(Duration::from_micros(20));
        }
    }
    s.poll();
}

/// B's CQ: poll it empty, arm it, poll once more, then sleep until the
/// completion event (no timeout: a lost event stalls the traffic).
pub(crate) fn event_poller(w: &World, side: usize, wake: &mpsc::Receiver<Wake>) {
    let s = &w.sides[side];
    loop {
        if s.poll() > 0 {
            w.bump();
            continue;
        }
        s.cq_shared.req_notify(false);
        if s.poll() > 0 {
            w.bump();
            continue;
        }
        match wake.recv() {
            Ok(Wake::Event) => {}
            Ok(Wake::Stop) | Err(_) => break,
        }
    }
    s.poll();
}

/// Takes every event of `side`'s engine: completion events wake B's poller,
/// async events are kept. After the stop, what is left is taken once more.
pub(crate) fn event_taker(w: &World, side: usize) {
    let s = &w.sides[side];
    loop {
        let last = w.stopped();
        let mut got = Vec::new();
        {
            let e = s.rd();
            while let Some(ev) = e.poll_event() {
                got.push(ev);
            }
        }
        if got.is_empty() {
            if last {
                return;
            }
            sleep(Duration::from_micros(50));
            continue;
        }
        for ev in got {
            match ev {
                Event::Completion { cq, channel } => {
                    assert_eq!((cq, channel), (s.cq, 7), "only B's CQ has a channel");
                    s.completion_events.fetch_add(1, SeqCst);
                    if let Some(tx) = lock(&w.wake_b).as_ref() {
                        let _ = tx.send(Wake::Event);
                    }
                }
                ev => lock(&s.asyncs).push(ev),
            }
        }
    }
}

/// The virtual clock: 1 ms more for every 16 steps that moved something,
/// so timers fire while traffic flows (`handle_timeout` beside everything
/// else; a QP whose packets move is not failed by it: its packets wait
/// behind far fewer steps than a 67 ms ACK timeout is worth, and a
/// spurious timeout only resends); and a jump to the next deadline when
/// the devices have looked idle twice, 300 µs apart, with nothing moving
/// in between.
pub(crate) fn timer(w: &World) {
    let mut drifted = w.activity.load(SeqCst);
    while !w.stopped() {
        let seen = w.activity.load(SeqCst);
        if seen >= drifted + 16 {
            drifted = seen;
            let now = w.now.fetch_add(1_000_000, SeqCst) + 1_000_000;
            w.drifts.fetch_add(1, SeqCst);
            for s in &w.sides {
                let e = s.rd();
                e.set_now(now);
                e.handle_timeout(now);
            }
            continue;
        }
        if !w.looks_idle() {
            sleep(Duration::from_micros(100));
            continue;
        }
        sleep(Duration::from_micros(300));
        if w.activity.load(SeqCst) != seen || !w.looks_idle() {
            continue;
        }
        let next = w.sides.iter().filter_map(|s| s.rd().poll_timeout()).min();
        let Some(t) = next else {
            continue;
        };
        let now = w.now.fetch_max(t, SeqCst).max(t);
        for s in &w.sides {
            let e = s.rd();
            e.set_now(now);
            e.handle_timeout(now);
        }
        w.timer_jumps.fetch_add(1, SeqCst);
        w.bump();
    }
}

pub(crate) fn wait_until(w: &World, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(100);
    while !f() {
        assert!(!w.stopped(), "stopped while waiting for {what}");
        assert!(
            Instant::now() < deadline,
            "control: waited too long for {what}"
        );
        sleep(Duration::from_micros(500));
    }
}

/// Stops the poster of (side, slot), waits until every WR it posted has
/// completed, then destroys the QP as an application on an SRQ must: moved
/// to ERR first (a receive WQE it took from the SRQ for a message that
/// never ended completes with a flush), its CQ polled empty, under the
/// write side (no completion of it is purged unseen).
pub(crate) fn retire(w: &World, side: usize, slot: usize) {
    w.stop_posting[side][slot].store(true, SeqCst);
    wait_until(w, "the victim's poster", || {
        w.poster_done[side][slot].load(SeqCst)
    });
    let posted = w.posted[side][slot].load(SeqCst);
    wait_until(w, "the victim's completions", || {
        w.send_completions(side, slot) == posted
    });
    let info = w.info(side, slot).expect("the victim exists");
    let s = &w.sides[side];
    let mut e = s.wr();
    let state = e.qp(info.h).expect("the victim").ctl.state();
    if state != QpState::Err {
        let attr = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        e.modify_qp(info.h, &attr, AttrMask::STATE)
            .expect("modify to ERR");
    }
    s.poll();
    e.destroy_qp(info.h).expect("destroy_qp");
    lock(&w.qps)[side][slot] = None;
    lock(&w.retired).push((side, info.h));
    drop(e);
    lock(&w.control_log).push(format!(
        "destroyed slot {slot} on {} after {posted} WRs (it was in {state:?})",
        ["A", "B"][side]
    ));
}

pub(crate) fn control(w: &World) {
    let progress = |side: usize| -> u64 { (0..STABLE).map(|k| w.send_completions(side, k)).sum() };
    let quarter = STABLE as u64 * w.cfg.per / 5;
    wait_until(w, "some traffic", || {
        progress(0) >= quarter && progress(1) >= quarter
    });
    // Grow both CQs while completions stream in.
    for s in &w.sides {
        let got = s.wr().resize_cq(s.cq, 8192).expect("resize_cq up");
        assert!(got >= 8192);
    }
    // Arm B's SRQ limit just below its depth: a take that leaves fewer
    // WQEs raises the event once and disarms it (if one comes).
    let b = &w.sides[1];
    let arm = SrqAttr {
        max_wr: 0,
        max_sge: 0,
        srq_limit: SRQ_WR - 1,
    };
    b.wr()
        .modify_srq(b.srq, &arm, proto::srq::SRQ_LIMIT)
        .expect("arm the SRQ limit");
    // B's victim to ERR while both ends still post and A's still sends.
    let vb = w.info(1, VICTIM).expect("B's victim");
    let attr = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    w.sides[1]
        .wr()
        .modify_qp(vb.h, &attr, AttrMask::STATE)
        .expect("modify to ERR");
    lock(&w.control_log).push(format!(
        "B's victim to ERR after {} of its WRs were posted",
        w.posted[1][VICTIM].load(SeqCst)
    ));
    // Let the flushes race the posts a while.
    wait_until(w, "more posts on B's victim", || {
        w.poster_done[1][VICTIM].load(SeqCst) || w.posted[1][VICTIM].load(SeqCst) > w.cfg.per / 2
    });
    retire(w, 1, VICTIM);
    // A new pair, on the same CQs and SRQs, joins the traffic.
    w.make_pair(FRESH);
    lock(&w.control_log).push("created and connected a new pair".into());
    // A's victim fails once its retries run out (its peer is gone), or
    // finished before that; then it goes too.
    let va = w.info(0, VICTIM).expect("A's victim");
    wait_until(w, "A's victim to fail or finish", || {
        let state = w.sides[0].rd().qp(va.h).map(|q| q.ctl.state());
        state == Ok(QpState::Err) || w.poster_done[0][VICTIM].load(SeqCst)
    });
    retire(w, 0, VICTIM);
    // Churn: pairs created, carrying traffic, failed (one end moved to ERR,
    // then the other) and destroyed, one after another, while the others
    // keep going (handles and QPNs of destroyed QPs, their timers and
    // turns, meet new QPs).
    let err = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    for c in CHURN..NQ {
        w.make_pair(c);
        wait_until(w, "the churn pair's first posts", || {
            (0..2).all(|s| w.posted[s][c].load(SeqCst) >= 5 || w.poster_done[s][c].load(SeqCst))
        });
        let first = c % 2;
        for side in [first, 1 - first] {
            let info = w.info(side, c).expect("the churn QP");
            w.sides[side]
                .wr()
                .modify_qp(info.h, &err, AttrMask::STATE)
                .expect("modify to ERR");
        }
        for side in [first, 1 - first] {
            retire(w, side, c);
        }
    }
    // Shrink both CQs: still above everything they may hold.
    for s in &w.sides {
        let got = s.wr().resize_cq(s.cq, 2048).expect("resize_cq down");
        assert!(got >= 2048);
    }
    lock(&w.control_log).push("resized both CQs up and down".into());
    w.control_done.store(true, SeqCst);
}

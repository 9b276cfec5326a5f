//! Deterministic simulation of three CM endpoints on a virtual clock with
//! seeded loss, duplication, reordering, corruption and a partition; every
//! MAD travels as a whole RoCEv2 packet (UD SEND_ONLY to QP1 with ICRC) and
//! is received through the ICRC check, the transport parser and the GSI
//! checks, as the device will carry it; owners that accept,
//! reject, reply late and disconnect from either side at random times.
//!
//! Invariants, checked for every seed:
//! - every connection attempt ends on the active side exactly once
//!   (ESTABLISHED, REJECTED or UNREACHABLE), and the active side is
//!   established iff the passive side is (by RTU, or by the first data
//!   packet when the RTU is lost: COMM_EST); a refused or unlisted request is
//!   never established anywhere;
//! - the QP parameters the two sides derive agree (each side's SQ PSN is the
//!   other's RQ PSN, destination QPNs cross);
//! - every established side reports DISCONNECTED exactly once and leaves
//!   TimeWait; at the end every table is empty and the network quiet;
//! - no request MAD (REQ, REP, DREQ, SIDR_REQ) is sent more than
//!   1 + max_cm_retries = 16 times, and resends are at least its timeout apart;
//! - every SIDR request gets exactly one answer.
//!
//! Every failure names its seed and profile; `CM_SIM_SEED=n` reruns one seed.

mod cm_common;

use std::collections::{BTreeMap, HashMap};

use cm_common::*;
use proto::cm::timing::MS_NS;
use proto::cm::{Cm, CmError, CmEvent, ConnId, QpTarget};
use proto::rng::Rng;
use proto::Gid;
use std::net::Ipv4Addr;
use wire::cm::{self, cma, Message, RejReason, SidrStatus};
use wire::{icrc, mad, Encap, Psn, Qpn, TransportRepr};

const NODES: u8 = 3;
const SECOND: u64 = 1_000 * MS_NS;

#[derive(Debug, Clone, Copy)]
struct Profile {
    name: &'static str,
    loss: f64,
    dup: f64,
    max_delay_ns: u64,
    /// Chance a delivered packet has a byte flipped (the ICRC must catch it).
    corrupt: f64,
    /// Node cut off from everyone during [start, end).
    partition: Option<(u8, u64, u64)>,
}

const PROFILES: [Profile; 6] = [
    Profile {
        name: "clean",
        loss: 0.0,
        dup: 0.0,
        max_delay_ns: MS_NS,
        corrupt: 0.0,
        partition: None,
    },
    Profile {
        name: "loss5",
        loss: 0.05,
        dup: 0.0,
        max_delay_ns: MS_NS,
        corrupt: 0.0,
        partition: None,
    },
    Profile {
        name: "loss20",
        loss: 0.20,
        dup: 0.0,
        max_delay_ns: MS_NS,
        corrupt: 0.0,
        partition: None,
    },
    Profile {
        name: "dupreorder",
        loss: 0.05,
        dup: 0.15,
        max_delay_ns: 80 * MS_NS,
        corrupt: 0.0,
        partition: None,
    },
    Profile {
        name: "corrupt",
        loss: 0.02,
        dup: 0.02,
        max_delay_ns: 5 * MS_NS,
        corrupt: 0.10,
        partition: None,
    },
    Profile {
        name: "partition",
        loss: 0.05,
        dup: 0.05,
        max_delay_ns: 10 * MS_NS,
        corrupt: 0.0,
        partition: Some((2, 5 * SECOND, 35 * SECOND)),
    },
];

/// After this the network heals (no loss, no partition) and the run must quiesce.
const HEAL_AT: u64 = 300 * SECOND;
const END: u64 = 3_600 * SECOND;
const MAX_STEPS: usize = 200_000;

/// What the requester asks for, by the first user byte of its private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ask {
    Accept,
    Refuse,
    Unlisted,
    /// To an address where nothing answers.
    Dead,
}

/// An address no simulated node has.
const DEAD: u8 = 9;

#[derive(Debug, Default)]
struct Attempt {
    from: u8,
    to: u8,
    ask: Option<Ask>,
    active_id: Option<ConnId>,
    active_end: Vec<&'static str>,
    /// (node, id) of every passive connection this attempt created.
    passive: Vec<(u8, ConnId)>,
    passive_established: usize,
}

#[derive(Debug, Default)]
struct Side {
    established: bool,
    disconnected: usize,
    timewait_exit: usize,
    /// The owner destroyed the id while connected (`cm_destroy_id`, spec/cm.md
    /// §5.8): it must send one DREQ, report nothing more, and leave the table
    /// when its TimeWait ends.
    destroyed: bool,
    /// (local QPN, remote QPN, rq_psn, sq_psn) once established.
    qp: Option<(u32, u32, u32, u32)>,
}

enum Action {
    Connect {
        tag: u32,
    },
    Accept(ConnId, u32),
    Rtu(ConnId),
    Disconnect(ConnId),
    /// `rdma_destroy_id` without `rdma_disconnect` first.
    Destroy(ConnId),
    Sidr {
        tag: u32,
    },
    /// The first data packet of an established active side reaches the
    /// passive QP (RC delivers it, retrying through loss; after a partition
    /// heals): `ib_cm_notify(COMM_EST)` if the RTU has not arrived.
    Data(ConnId),
}

struct Sim {
    p: Profile,
    rng: Rng,
    now: u64,
    nodes: Vec<Cm>,
    /// Whole RoCEv2 UDP payloads (BTH + DETH + MAD + ICRC) in flight.
    net: BTreeMap<(u64, u64), (u8, u8, Vec<u8>)>,
    /// Packets the ICRC caught.
    icrc_drops: u64,
    seq: u64,
    actions: BTreeMap<(u64, u64), (u8, Action)>,
    attempts: BTreeMap<u32, Attempt>,
    by_active: HashMap<(u8, ConnId), u32>,
    by_passive: HashMap<(u8, ConnId), u32>,
    sides: HashMap<(u8, ConnId), Side>,
    sidr: BTreeMap<u32, Vec<&'static str>>,
    sidr_by_id: HashMap<(u8, ConnId), u32>,
    /// (node, attr, tid, comm id) → send times of request MADs.
    sends: HashMap<(u8, u16, u64, u32), Vec<u64>>,
    /// Passive sides established by data before the RTU.
    comm_est: u64,
}

/// The IPv4 + UDP framing between two nodes (the ICRC covers it).
fn encap(from: u8, to: u8) -> Encap {
    let ip = |n: u8| Ipv4Addr::new(10, 0, 0, n);
    Encap::ipv4(ip(from), ip(to), 0xC000 | u16::from(from))
}

fn node_of(g: Gid) -> u8 {
    (1..=NODES).find(|n| gid(*n) == g).unwrap_or(DEAD)
}

impl Sim {
    fn new(p: Profile, seed: u64) -> Sim {
        let mut nodes: Vec<Cm> = (1..=NODES).map(|n| node(n, seed)).collect();
        for cm in &mut nodes {
            cm.listen(service()).unwrap();
            cm.listen(cma::service_id(cma::PortSpace::Udp, PORT))
                .unwrap();
        }
        Sim {
            p,
            rng: Rng::new(seed),
            now: 0,
            nodes,
            net: BTreeMap::new(),
            icrc_drops: 0,
            seq: 0,
            actions: BTreeMap::new(),
            attempts: BTreeMap::new(),
            by_active: HashMap::new(),
            by_passive: HashMap::new(),
            sides: HashMap::new(),
            sidr: BTreeMap::new(),
            sidr_by_id: HashMap::new(),
            sends: HashMap::new(),
            comm_est: 0,
        }
    }

    fn cm(&mut self, n: u8) -> &mut Cm {
        &mut self.nodes[usize::from(n - 1)]
    }

    fn schedule(&mut self, at: u64, n: u8, a: Action) {
        self.seq += 1;
        self.actions.insert((at, self.seq), (n, a));
    }

    fn cut_off(&self, a: u8, b: u8) -> bool {
        match self.p.partition {
            Some((n, s, e)) => {
                (a == n || b == n) && self.now >= s && self.now < e && self.now < HEAL_AT
            }
            None => false,
        }
    }

    fn record_send(&mut self, n: u8, mad: &[u8; 256]) {
        let Ok(r) = cm::Repr::parse(mad) else {
            panic!("node {n} sent an invalid MAD")
        };
        let key = match &r.message {
            Message::Req(q) => (q.local_comm_id, 0x10),
            Message::Rep(q) => (q.local_comm_id, 0x13),
            Message::Dreq(q) => (q.local_comm_id, 0x15),
            Message::SidrReq(q) => (q.request_id, 0x17),
            _ => return,
        };
        self.sends
            .entry((n, key.1, r.tid, key.0))
            .or_default()
            .push(self.now);
    }

    fn flush(&mut self) {
        for n in 1..=NODES {
            while let Some(t) = self.cm(n).poll_transmit() {
                self.record_send(n, &t.mad);
                let to = node_of(t.to);
                let healed = self.now >= HEAL_AT;
                let lost = self.rng.chance(self.p.loss) && !healed;
                let copies = if self.rng.chance(self.p.dup) && !healed {
                    2
                } else {
                    1
                };
                if lost || to == DEAD || self.cut_off(n, to) {
                    continue;
                }
                // As the device will carry it: UD SEND_ONLY to QP1 (spec/cm.md §7).
                let gsi = mad::gsi_transport(Psn::from_masked(self.seq as u32));
                let mut packet = vec![0u8; gsi.buffer_len()];
                gsi.emit(&mut packet, &t.mad, &encap(n, to)).unwrap();
                for _ in 0..copies {
                    let delay = self.rng.range(10_000, self.p.max_delay_ns.max(10_000));
                    let mut copy = packet.clone();
                    if self.rng.chance(self.p.corrupt) && !healed {
                        let at = self.rng.below(copy.len() as u64) as usize;
                        copy[at] ^= 1 << self.rng.below(8);
                    }
                    self.seq += 1;
                    self.net.insert((self.now + delay, self.seq), (to, n, copy));
                }
            }
        }
    }

    fn next_time(&self) -> Option<u64> {
        let net = self.net.keys().next().map(|k| k.0);
        let act = self.actions.keys().next().map(|k| k.0);
        let timers = self.nodes.iter().filter_map(Cm::poll_timeout);
        net.into_iter().chain(act).chain(timers).min()
    }

    fn step(&mut self) {
        while let Some(entry) = self.net.first_entry() {
            if entry.key().0 > self.now {
                break;
            }
            let (to, from, packet) = entry.remove();
            if self.cut_off(from, to) {
                continue;
            }
            // The receive path: ICRC, transport headers, GSI checks, then the CM.
            if icrc::verify(&encap(from, to), &packet).is_err() {
                self.icrc_drops += 1;
                continue;
            }
            let t = TransportRepr::parse(&packet).expect("an ICRC-clean packet we built");
            mad::check_gsi(&t).expect("a GSI datagram");
            let payload = t.payload(&packet);
            if std::env::var_os("CM_SIM_TRACE").is_some() {
                let m = cm::Repr::parse(payload)
                    .map(|r| r.message.name())
                    .unwrap_or_default();
                eprintln!("{:>10} ms {from} -> {to}: {m}", self.now / MS_NS);
            }
            let now = self.now;
            self.cm(to).handle_mad(now, gid(from), payload);
        }
        for n in 1..=NODES {
            let now = self.now;
            if self.cm(n).poll_timeout().is_some_and(|t| t <= now) {
                self.cm(n).handle_timeout(now);
            }
        }
        while let Some(entry) = self.actions.first_entry() {
            if entry.key().0 > self.now {
                break;
            }
            let (n, a) = entry.remove();
            self.act(n, a);
        }
        for n in 1..=NODES {
            while let Some(e) = self.cm(n).poll_event() {
                self.on_event(n, e);
            }
        }
        self.flush();
    }

    fn act(&mut self, n: u8, a: Action) {
        let now = self.now;
        let result = match a {
            Action::Connect { tag } => {
                let to = self.attempts[&tag].to;
                let ask = self.attempts[&tag].ask.unwrap();
                let mut user = vec![ask as u8];
                user.extend_from_slice(&tag.to_be_bytes());
                let mut p = connect_params(n, to, 0x100 + tag, tag * 7, &user);
                if ask == Ask::Unlisted {
                    p.service_id = cma::service_id(cma::PortSpace::Tcp, PORT + 1);
                }
                let id = self.cm(n).connect(now, &p).unwrap();
                self.attempts.get_mut(&tag).unwrap().active_id = Some(id);
                self.by_active.insert((n, id), tag);
                Ok(())
            }
            Action::Accept(id, tag) => {
                let ap = accept_params(0x8000 + tag, tag * 11, b"ok");
                self.cm(n).accept(now, id, &ap)
            }
            Action::Rtu(id) => self.cm(n).ready_to_use(id, &[]),
            Action::Disconnect(id) => self.cm(n).disconnect(now, id, &[]),
            Action::Destroy(id) => {
                let r = self.cm(n).destroy(now, id);
                if r.is_ok() {
                    self.sides.entry((n, id)).or_default().destroyed = true;
                }
                r
            }
            Action::Data(id) => {
                let r = self.cm(n).establish(id);
                self.comm_est += u64::from(r.is_ok());
                r
            }
            Action::Sidr { tag } => {
                let to = (n % NODES) + 1;
                let udp = cma::service_id(cma::PortSpace::Udp, PORT);
                let id = self
                    .cm(n)
                    .sidr_request(now, gid(to), udp, &tag.to_be_bytes())
                    .unwrap();
                self.sidr.insert(tag, Vec::new());
                self.sidr_by_id.insert((n, id), tag);
                Ok(())
            }
        };
        // A scheduled step may find the connection gone or moved on (the peer
        // acted first, or it failed): only those refusals are expected.
        if let Err(e) = result {
            assert!(
                matches!(e, CmError::WrongState { .. } | CmError::UnknownId(_)),
                "node {n}: {e}"
            );
        }
    }

    fn on_event(&mut self, n: u8, e: CmEvent) {
        let now = self.now;
        if std::env::var_os("CM_SIM_TRACE").is_some() {
            eprintln!("{:>10} ms node {n}: {e:?}", now / MS_NS);
        }
        if let Some(side) = self.sides.get(&(n, e.id())) {
            assert!(
                !side.destroyed,
                "node {n}: an event for a destroyed id: {e:?}"
            );
        }
        match e {
            CmEvent::ConnectRequest { id, request, .. } => {
                let tag = u32::from_be_bytes(request.private_data[37..41].try_into().unwrap());
                let ask = request.private_data[36];
                let a = self.attempts.get_mut(&tag).expect("a known attempt");
                a.passive.push((n, id));
                self.by_passive.insert((n, id), tag);
                if ask == Ask::Refuse as u8 {
                    self.cm(n).reject(now, id, b"no").unwrap();
                } else {
                    // Late accepts make the requester resend its REQ (→ MRA).
                    let delay = self.rng.range(0, 9 * SECOND);
                    self.schedule(now + delay, n, Action::Accept(id, tag));
                }
            }
            CmEvent::ConnectResponse { id, .. } => {
                let delay = self.rng.range(0, 6 * SECOND);
                self.schedule(now + delay, n, Action::Rtu(id));
            }
            CmEvent::Established { id } => {
                let a = self.cm(n).qp_attrs(id, QpTarget::Rtr).unwrap();
                let b = self.cm(n).qp_attrs(id, QpTarget::Rts).unwrap();
                let tag = self.tag_of(n, id);
                let local = if self.by_active.contains_key(&(n, id)) {
                    0x100 + tag
                } else {
                    0x8000 + tag
                };
                let side = self.sides.entry((n, id)).or_default();
                assert!(!side.established, "established twice");
                side.established = true;
                side.qp = Some((
                    local,
                    a.dest_qpn.unwrap().get(),
                    a.rq_psn.unwrap().get(),
                    b.sq_psn.unwrap().get(),
                ));
                if self.by_active.contains_key(&(n, id)) {
                    self.attempts
                        .get_mut(&tag)
                        .unwrap()
                        .active_end
                        .push("ESTABLISHED");
                    let passive = self.attempts[&tag].passive.clone();
                    for (pn, pid) in passive {
                        let mut at = now + self.rng.range(10_000, self.p.max_delay_ns.max(10_000));
                        if let Some((cut, _, end)) = self.p.partition {
                            if (cut == n || cut == pn) && now < end {
                                at = at.max(end);
                            }
                        }
                        self.schedule(at, pn, Action::Data(pid));
                    }
                } else {
                    self.attempts.get_mut(&tag).unwrap().passive_established += 1;
                }
                let delay = self.rng.range(SECOND, 40 * SECOND);
                // One connected side in four is destroyed without a disconnect.
                let end = if self.rng.below(4) == 0 {
                    Action::Destroy(id)
                } else {
                    Action::Disconnect(id)
                };
                self.schedule(now + delay, n, end);
            }
            CmEvent::Disconnected { id, .. } => {
                self.sides.entry((n, id)).or_default().disconnected += 1;
                if self.cm(n).state(id) == Some("DREQ_RCVD") {
                    let delay = self.rng.range(0, 2 * SECOND);
                    self.schedule(now + delay, n, Action::Disconnect(id));
                }
            }
            CmEvent::TimewaitExit { id } => {
                self.sides.entry((n, id)).or_default().timewait_exit += 1
            }
            CmEvent::Rejected { id, reason, .. } => self.end_active(n, id, reason_name(reason)),
            CmEvent::Unreachable { id, .. } => self.end_active(n, id, "UNREACHABLE"),
            CmEvent::SidrRequest { id, .. } => {
                self.cm(n)
                    .sidr_reply(
                        id,
                        SidrStatus::Success,
                        Qpn::from_masked(0x77),
                        cma::RDMA_UDP_QKEY,
                        &[],
                    )
                    .unwrap();
            }
            CmEvent::SidrResolved { id, qpn, .. } => {
                assert_eq!(qpn, Qpn::from_masked(0x77));
                let tag = self.sidr_by_id[&(n, id)];
                self.sidr.get_mut(&tag).unwrap().push("RESOLVED");
            }
            CmEvent::SidrUnreachable { id, .. } => {
                let tag = self.sidr_by_id[&(n, id)];
                self.sidr.get_mut(&tag).unwrap().push("UNREACHABLE");
            }
        }
    }

    fn tag_of(&self, n: u8, id: ConnId) -> u32 {
        *self
            .by_active
            .get(&(n, id))
            .or(self.by_passive.get(&(n, id)))
            .expect("a known connection")
    }

    fn end_active(&mut self, n: u8, id: ConnId, how: &'static str) {
        if let Some(tag) = self.by_active.get(&(n, id)) {
            self.attempts.get_mut(tag).unwrap().active_end.push(how);
        }
    }

    fn run(&mut self) {
        let mut tag = 0;
        for n in 1..=NODES {
            for _ in 0..4 {
                tag += 1;
                let to = ((n + self.rng.range(0, 1) as u8) % NODES) + 1;
                let ask = match self.rng.below(12) {
                    0 => Ask::Refuse,
                    1 => Ask::Unlisted,
                    2 => Ask::Dead,
                    _ => Ask::Accept,
                };
                let to = if ask == Ask::Dead { DEAD } else { to };
                self.attempts.insert(
                    tag,
                    Attempt {
                        from: n,
                        to,
                        ask: Some(ask),
                        ..Attempt::default()
                    },
                );
                let at = self.rng.range(0, 20 * SECOND);
                self.schedule(at, n, Action::Connect { tag });
            }
            tag += 1;
            let at = self.rng.range(0, 20 * SECOND);
            self.schedule(at, n, Action::Sidr { tag });
        }
        let mut steps = 0;
        while let Some(t) = self.next_time() {
            assert!(t >= self.now, "time went backwards");
            assert!(t <= END, "not quiet by {} s", END / SECOND);
            self.now = t;
            self.step();
            steps += 1;
            assert!(steps < MAX_STEPS, "no quiescence after {MAX_STEPS} steps");
        }
    }

    fn check(&self) {
        for (n, cm) in self.nodes.iter().enumerate() {
            assert!(
                cm.is_empty(),
                "node {} still holds {} entries",
                n + 1,
                cm.len()
            );
            assert!(
                cm.counters().retransmitted.iter().sum::<u64>()
                    <= cm.counters().sent.iter().sum::<u64>()
            );
        }
        assert!(self.net.is_empty());
        for (tag, a) in &self.attempts {
            assert_eq!(
                a.active_end.len(),
                1,
                "attempt {tag} {a:?}: one outcome on the active side"
            );
            let est = a.active_end[0] == "ESTABLISHED";
            match a.ask.unwrap() {
                Ask::Accept => {}
                Ask::Refuse => assert!(
                    !est && a.passive_established == 0,
                    "refused attempt {tag} established: {a:?}"
                ),
                Ask::Dead => {
                    assert!(
                        a.passive.is_empty() && a.active_end[0] == "UNREACHABLE",
                        "{a:?}"
                    );
                }
                Ask::Unlisted => {
                    assert!(
                        a.passive.is_empty(),
                        "unlisted attempt {tag} reached an owner"
                    );
                    assert!(
                        matches!(a.active_end[0], "INVALID_SERVICE_ID" | "UNREACHABLE"),
                        "{a:?}"
                    );
                }
            }
            assert!(
                a.passive_established <= 1,
                "attempt {tag} established twice on the passive side: {a:?}"
            );
            assert_eq!(
                est,
                a.passive_established == 1,
                "attempt {tag}: active {} but passive established {} times: {a:?}",
                a.active_end[0],
                a.passive_established
            );
            if est {
                self.check_pair(*tag, a);
            }
        }
        for ((n, id), s) in &self.sides {
            if s.destroyed {
                let dreqs: usize = self
                    .sends
                    .iter()
                    .filter(|((m, attr, _, c), _)| m == n && *attr == 0x15 && *c == id.0)
                    .map(|(_, t)| t.len())
                    .sum();
                assert!(dreqs <= 1, "node {n} {id:?}: destroyed, sent {dreqs} DREQs");
            } else if s.established {
                assert_eq!(
                    s.disconnected, 1,
                    "node {n} {id:?}: DISCONNECTED {} times",
                    s.disconnected
                );
                assert_eq!(
                    s.timewait_exit, 1,
                    "node {n} {id:?}: left TimeWait {} times",
                    s.timewait_exit
                );
            }
        }
        for (tag, outcome) in &self.sidr {
            assert_eq!(outcome.len(), 1, "SIDR {tag}: {outcome:?}");
        }
        for ((n, attr, _, _), times) in &self.sends {
            assert!(
                times.len() <= 16,
                "node {n} sent attribute 0x{attr:x} {} times",
                times.len()
            );
            let min_gap = match attr {
                0x10 => 6144 * MS_NS,
                0x15 => 4096 * MS_NS,
                _ => 4096 * MS_NS,
            };
            for w in times.windows(2) {
                assert!(
                    w[1] - w[0] >= min_gap,
                    "node {n} resent 0x{attr:x} after {} ms",
                    (w[1] - w[0]) / MS_NS
                );
            }
        }
    }

    fn check_pair(&self, tag: u32, a: &Attempt) {
        let act = &self.sides[&(a.from, a.active_id.unwrap())];
        let (pn, pid) = a
            .passive
            .iter()
            .find(|k| self.sides.get(k).is_some_and(|s| s.established))
            .unwrap();
        let pas = &self.sides[&(*pn, *pid)];
        let (al, ar, arq, asq) = act.qp.unwrap();
        let (pl, pr, prq, psq) = pas.qp.unwrap();
        assert_eq!(
            (ar, pr),
            (pl, al),
            "attempt {tag}: destination QPNs do not cross"
        );
        assert_eq!(
            (asq, psq),
            (prq, arq),
            "attempt {tag}: SQ PSN ≠ the peer's RQ PSN"
        );
    }
}

fn reason_name(r: RejReason) -> &'static str {
    match r {
        RejReason::InvalidServiceId => "INVALID_SERVICE_ID",
        RejReason::ConsumerDefined => "CONSUMER_REJECT",
        RejReason::StaleConnection => "STALE",
        _ => "OTHER_REJECT",
    }
}

/// What a batch of runs exercised, so a quiet batch cannot pass unnoticed.
#[derive(Debug, Default)]
struct Tally {
    established: u64,
    refused: u64,
    unlisted: u64,
    unreachable: u64,
    retransmitted: u64,
    duplicates: u64,
    mras: u64,
    comm_est: u64,
    icrc_drops: u64,
    destroyed: u64,
}

fn run_one(p: Profile, seed: u64, tally: &mut Tally) {
    let outcome = std::panic::catch_unwind(|| {
        let mut sim = Sim::new(p, seed);
        sim.run();
        sim.check();
        sim
    });
    if let Ok(sim) = &outcome {
        for a in sim.attempts.values() {
            match a.active_end[0] {
                "ESTABLISHED" => tally.established += 1,
                "CONSUMER_REJECT" => tally.refused += 1,
                "INVALID_SERVICE_ID" => tally.unlisted += 1,
                "UNREACHABLE" => tally.unreachable += 1,
                _ => {}
            }
        }
        for cm in &sim.nodes {
            let c = cm.counters();
            tally.retransmitted += c.retransmitted.iter().sum::<u64>();
            tally.duplicates += c.duplicates;
            tally.mras += c.sent[1];
            // Established by data first: more ESTABLISHED events than RTUs received.
        }
        tally.comm_est += sim.comm_est;
        tally.destroyed += sim.sides.values().filter(|s| s.destroyed).count() as u64;
        tally.icrc_drops += sim.icrc_drops;
    }
    if let Err(e) = outcome.map(|_| ()) {
        let msg = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| {
                e.downcast_ref::<&str>()
                    .map(std::string::ToString::to_string)
            })
            .unwrap_or_default();
        panic!(
            "cm_sim profile {} seed {seed} failed (rerun: CM_SIM_SEED={seed}): {msg}",
            p.name
        );
    }
}

fn seeds(count: u64) -> Vec<u64> {
    match std::env::var("CM_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(s) => vec![s],
        None => (1..=count).collect(),
    }
}

#[test]
fn connections_form_or_fail_on_both_sides_under_faults() {
    let single = std::env::var_os("CM_SIM_SEED").is_some();
    for p in PROFILES {
        let mut t = Tally::default();
        for seed in seeds(60) {
            run_one(p, seed, &mut t);
        }
        eprintln!("cm_sim {:<10} {t:?}", p.name);
        if single {
            continue;
        }
        // Each batch must exercise what it is for.
        assert!(
            t.established > 0
                && t.refused > 0
                && t.unlisted > 0
                && t.unreachable > 0
                && t.destroyed > 0,
            "{}: {t:?}",
            p.name
        );
        if p.loss > 0.0 {
            assert!(
                t.retransmitted > 0 && t.mras > 0,
                "{}: no retries exercised: {t:?}",
                p.name
            );
        }
        if p.dup > 0.0 {
            assert!(
                t.duplicates > 0,
                "{}: no duplicates exercised: {t:?}",
                p.name
            );
        }
        if p.corrupt > 0.0 {
            assert!(t.icrc_drops > 0, "{}: no corruption caught: {t:?}", p.name);
        }
        if p.partition.is_some() {
            assert!(
                t.comm_est > 0,
                "{}: no passive side established by data: {t:?}",
                p.name
            );
        }
    }
}

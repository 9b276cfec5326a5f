//! The connection manager: IBTA CM over MADs on QP1, with rdma_cm's
//! conventions (spec/cm.md).
//!
//! Owns: [`Cm`] — listeners, the table of connections (each a [`conn`] state
//! machine) and SIDR requests ([`sidr`]), comm ID and TID allocation,
//! matching of received MADs to connections, MAD retries, and the counters.
//! It is sans-IO like the rest of `proto`: time comes in as nanoseconds, MADs
//! go out through [`Cm::poll_transmit`], the owner learns what happened through
//! [`Cm::poll_event`].
//!
//! Call order: feed [`Cm::handle_mad`] every datagram received on QP1 and
//! [`Cm::handle_timeout`] when [`Cm::poll_timeout`] is due; after any call,
//! drain [`Cm::poll_transmit`] (send each MAD to QP1 of `to`: BTH dest QP 1,
//! DETH Q_Key 0x80010000 and source QP 1, P_Key 0xFFFF, spec/cm.md §1.2) and
//! [`Cm::poll_event`].
//!
//! Promises: a malformed, forged or unexpected MAD is dropped and counted by
//! [`DropReason`], never a panic; a connection forms on both sides or the
//! owner gets `Rejected`/`Unreachable`; every request MAD is sent at most
//! `1 + max_cm_retries` times; a MAD for a connection is accepted only from
//! that connection's peer GID (our addition: the kernel matches comm IDs only).

mod conn;
mod held;
mod outbox;
mod qp_attr;
mod sidr;
pub mod timing;
mod types;

use std::collections::{BTreeMap, BTreeSet};

use wire::cm::{self, rej, Message, MsgKind, RejReason, SidrStatus};
use wire::mad::MAD_LEN;
use wire::Qpn;

use crate::rng::Rng;
use crate::types::Gid;
use conn::{mad, Conn, Fate};
use held::HeldReq;
pub use held::{HOLD_NS, MAX_HELD};
use outbox::Outbox;
use sidr::{SidrRcvd, SidrSent};
pub use types::*;

// The comm-ID slot policy (spec/cm.md §8): the steering needs only bytes, so
// it lives with the wire format, shared by this CM and io's forwarding.
pub use wire::cm::steer::{comm_id_slot, steer, Steer, COMM_ID_SLOTS};
use wire::cm::steer::{COMM_ID_LOW_MASK, COMM_ID_SLOT_SHIFT};

/// A REJ for a MAD that has no connection of ours (`cm_issue_rej`, §5.3):
/// the IDs swapped from the received message, its TID.
fn issue_rej(
    out: &mut Outbox,
    to: Gid,
    tid: u64,
    their_local: u32,
    their_remote: u32,
    kind: MsgKind,
    reason: RejReason,
) {
    let r = rej::Repr {
        local_comm_id: their_remote,
        remote_comm_id: their_local,
        message_rejected: kind,
        reason,
        ari_len: 0,
        ari: [0; rej::ARI_LEN],
        private_data: [0; rej::PRIVATE_DATA_LEN],
    };
    out.send(to, mad(tid, Message::Rej(r)), false);
}

/// The connection with local ID `local` (and remote ID `remote` when given)
/// that belongs to `from`.
fn lookup(
    conns: &mut BTreeMap<u32, Conn>,
    local: u32,
    remote: Option<u32>,
    from: Gid,
) -> Result<&mut Conn, DropReason> {
    let c = conns.get_mut(&local).ok_or(DropReason::UnknownCommId)?;
    if remote.is_some_and(|r| r != c.remote_id) {
        return Err(DropReason::UnknownCommId);
    }
    if c.peer != from {
        return Err(DropReason::ForeignSource);
    }
    Ok(c)
}

/// A connection manager for one port. `Clone` snapshots it whole (tests
/// replay hostile input from a saved phase).
#[derive(Debug, Clone)]
pub struct Cm {
    cfg: CmConfig,
    hi_tid: u64,
    next_id: u32,
    id_xor: u32,
    /// Our slot of a shared address, in the top bits of every comm ID (§8).
    slot: u8,
    listeners: BTreeSet<u64>,
    /// Service IDs bound (rdma_bind_addr) and not released: how many times.
    reserved: BTreeMap<u64, u32>,
    /// REQs for a reserved service ID nobody listens on yet ([`held`]).
    held: Vec<HeldReq>,
    conns: BTreeMap<u32, Conn>,
    sidr_sent: BTreeMap<u32, SidrSent>,
    sidr_rcvd: BTreeMap<u32, SidrRcvd>,
    out: Outbox,
}

impl Cm {
    /// A CM with no listeners and no connections.
    pub fn new(cfg: CmConfig) -> Cm {
        let mut rng = Rng::new(cfg.seed);
        let r = rng.next_u64();
        Cm {
            cfg,
            // cm_form_tid: the MAD agent's hi_tid in the upper word (§1.5).
            hi_tid: (r >> 32) << 32,
            next_id: rng.next_u64() as u32,
            // cm_alloc_id_priv: cyclic IDs XOR a random operand (§5.2).
            id_xor: r as u32,
            slot: 0,
            listeners: BTreeSet::new(),
            reserved: BTreeMap::new(),
            held: Vec::new(),
            conns: BTreeMap::new(),
            sidr_sent: BTreeMap::new(),
            sidr_rcvd: BTreeMap::new(),
            out: Outbox::default(),
        }
    }

    /// The settings it was made with.
    pub fn config(&self) -> &CmConfig {
        &self.cfg
    }

    /// MADs sent, resent, received, duplicated and dropped.
    pub fn counters(&self) -> &CmCounters {
        &self.out.counters
    }

    /// Connections and SIDR requests in the table (TimeWait included).
    pub fn len(&self) -> usize {
        self.conns.len() + self.sidr_sent.len() + self.sidr_rcvd.len()
    }

    /// True when the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The CM state of `id` (`"ESTABLISHED"`, ...), `None` when unknown.
    pub fn state(&self, id: ConnId) -> Option<&'static str> {
        if let Some(c) = self.conns.get(&id.0) {
            return Some(c.state.name());
        }
        if self.sidr_sent.contains_key(&id.0) {
            return Some("SIDR_REQ_SENT");
        }
        self.sidr_rcvd.get(&id.0).map(|_| "SIDR_REQ_RCVD")
    }

    /// Puts `slot` (of [`COMM_ID_SLOTS`]) into the top bits of every comm ID
    /// allocated from now on, so that the process of a shared address that
    /// receives a MAD naming it can hand it to ours ([`steer`], spec/cm.md §8).
    pub fn set_slot(&mut self, slot: u8) -> Result<(), CmError> {
        if u32::from(slot) >= COMM_ID_SLOTS {
            return Err(CmError::OutOfRange {
                field: "comm ID slot",
                value: u64::from(slot),
                max: u64::from(COMM_ID_SLOTS - 1),
            });
        }
        self.slot = slot;
        Ok(())
    }

    fn alloc_id(&mut self) -> Result<u32, CmError> {
        if self.len() >= self.cfg.max_connections {
            return Err(CmError::TooManyConnections(self.cfg.max_connections));
        }
        loop {
            let id = ((self.next_id ^ self.id_xor) & COMM_ID_LOW_MASK)
                | (u32::from(self.slot) << COMM_ID_SLOT_SHIFT);
            self.next_id = self.next_id.wrapping_add(1);
            let used = self.conns.contains_key(&id)
                || self.out.muted.contains(&id)
                || self.sidr_sent.contains_key(&id)
                || self.sidr_rcvd.contains_key(&id);
            if id != 0 && !used {
                return Ok(id);
            }
        }
    }

    fn tid(&self, local_id: u32) -> u64 {
        self.hi_tid | u64::from(local_id)
    }

    fn conn(&mut self, id: ConnId) -> Result<&mut Conn, CmError> {
        self.conns.get_mut(&id.0).ok_or(CmError::UnknownId(id.0))
    }
}

// The owner's calls.
impl Cm {
    /// Listen on `service_id` (IB_CM_LISTEN; rdma_cm: `cma::service_id(ps, port)`).
    pub fn listen(&mut self, service_id: u64) -> Result<ListenId, CmError> {
        if !self.listeners.insert(service_id) {
            return Err(CmError::AlreadyListening(service_id));
        }
        // REQs that came between the bind and this listen are taken now.
        let (now_ours, rest) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| h.service_id == service_id);
        self.held = rest;
        for h in now_ours {
            self.replay(h);
        }
        Ok(ListenId(service_id))
    }

    /// The service ID is bound (`rdma_bind_addr`): a REQ for it that comes
    /// before the listen is held, not rejected ([`held`]). Counted: each
    /// `reserve` needs its `release`.
    pub fn reserve(&mut self, service_id: u64) {
        *self.reserved.entry(service_id).or_insert(0) += 1;
    }

    /// Undoes one [`Cm::reserve`]; when none is left and nobody listens, the
    /// REQs held for it are rejected (invalid service ID).
    pub fn release(&mut self, service_id: u64) {
        if let Some(n) = self.reserved.get_mut(&service_id) {
            *n -= 1;
            if *n == 0 {
                self.reserved.remove(&service_id);
            }
        }
        if !self.reserved.contains_key(&service_id) {
            self.reject_held(|h| h.service_id == service_id);
        }
    }

    /// Whether a REQ for `service_id` is ours to take: listened on, or
    /// bound and its listen to come.
    pub fn wants(&self, service_id: u64) -> bool {
        self.listeners.contains(&service_id) || self.reserved.contains_key(&service_id)
    }

    /// REQs held now (for the counters and tests).
    pub fn held_requests(&self) -> usize {
        self.held.len()
    }

    /// Stop accepting requests for `l`; connections made through it stay.
    pub fn stop_listening(&mut self, l: ListenId) -> Result<(), CmError> {
        if !self.listeners.remove(&l.0) {
            return Err(CmError::UnknownListener(l.0));
        }
        Ok(())
    }

    /// Send a REQ (spec/cm.md §3.4); the outcome arrives as an event.
    pub fn connect(&mut self, now: u64, p: &ConnectParams) -> Result<ConnId, CmError> {
        let id = self.alloc_id()?;
        let conn = Conn::connect(id, self.tid(id), &self.cfg, p, now, &mut self.out)?;
        self.conns.insert(id, conn);
        Ok(ConnId(id))
    }

    /// `connect` with this connection's own MAD timing (rdma_cm's
    /// `cma_response_timeout`/`max_cm_retries` per id instead of the device's):
    /// the REQ announces `timing`'s response timeout and retries, and is resent
    /// every `2 × packet life + response timeout` at most `max_cm_retries` times.
    pub fn connect_with(
        &mut self,
        now: u64,
        p: &ConnectParams,
        timing: CmTiming,
    ) -> Result<ConnId, CmError> {
        let id = self.alloc_id()?;
        let cfg = CmConfig {
            packet_life_time: timing.packet_life_time,
            cm_response_timeout: timing.cm_response_timeout,
            max_cm_retries: timing.max_cm_retries,
            ..self.cfg
        };
        let conn = Conn::connect(id, self.tid(id), &cfg, p, now, &mut self.out)?;
        self.conns.insert(id, conn);
        Ok(ConnId(id))
    }

    /// Answer a `ConnectRequest` with a REP.
    pub fn accept(&mut self, now: u64, id: ConnId, p: &AcceptParams) -> Result<(), CmError> {
        let cfg = self.cfg;
        let c = self.conns.get_mut(&id.0).ok_or(CmError::UnknownId(id.0))?;
        c.accept(&cfg, p, now, &mut self.out)
    }

    /// Refuse a request or a reply (REJ, consumer defined, reason 28).
    pub fn reject(&mut self, now: u64, id: ConnId, private_data: &[u8]) -> Result<(), CmError> {
        let c = self.conns.get_mut(&id.0).ok_or(CmError::UnknownId(id.0))?;
        if c.reject(private_data, now, &mut self.out)? == Fate::Remove {
            self.conns.remove(&id.0);
        }
        Ok(())
    }

    /// After `ConnectResponse` (and the QP in RTS): send the RTU.
    pub fn ready_to_use(&mut self, id: ConnId, private_data: &[u8]) -> Result<(), CmError> {
        let c = self.conns.get_mut(&id.0).ok_or(CmError::UnknownId(id.0))?;
        c.ready_to_use(private_data, &mut self.out)
    }

    /// Passive side: data arrived on the QP before the RTU.
    pub fn establish(&mut self, id: ConnId) -> Result<(), CmError> {
        let c = self.conns.get_mut(&id.0).ok_or(CmError::UnknownId(id.0))?;
        c.establish(&mut self.out)
    }

    /// DREQ from ESTABLISHED, DREP after a `Disconnected`.
    pub fn disconnect(&mut self, now: u64, id: ConnId, private_data: &[u8]) -> Result<(), CmError> {
        let c = self.conns.get_mut(&id.0).ok_or(CmError::UnknownId(id.0))?;
        c.disconnect(private_data, now, &mut self.out)
    }

    /// Forget `id`, telling the peer as `cm_destroy_id` does (§5.8). A
    /// connection that enters TimeWait stays in the table, silent, until
    /// TimeWait ends: late DREQs get their DREP, late REQs a REJ (stale
    /// connection), and the comm ID is not handed out again meanwhile.
    pub fn destroy(&mut self, now: u64, id: ConnId) -> Result<(), CmError> {
        if let Some(c) = self.conns.get_mut(&id.0) {
            if c.destroy(self.cfg.ca_guid, now, &mut self.out) == Fate::Remove {
                self.conns.remove(&id.0);
            } else {
                self.out.muted.insert(id.0);
                // Events queued before the destroy have no owner either.
                self.out.events.retain(|e| e.id() != id);
            }
            return Ok(());
        }
        if self.sidr_sent.remove(&id.0).is_some() {
            return Ok(());
        }
        if let Some(s) = self.sidr_rcvd.remove(&id.0) {
            return s.reply(
                SidrStatus::Reject,
                Qpn::from_masked(0),
                0,
                &[],
                &mut self.out,
            );
        }
        Err(CmError::UnknownId(id.0))
    }

    /// The QP attributes for `target` (`ib_cm_init_qp_attr`, spec/cm.md §6).
    pub fn qp_attrs(&mut self, id: ConnId, target: QpTarget) -> Result<CmQpAttrs, CmError> {
        self.conn(id)?.qp_attrs(target)
    }

    /// Resolve `service_id` at `peer` to a UD QP (SIDR_REQ).
    pub fn sidr_request(
        &mut self,
        now: u64,
        peer: Gid,
        service_id: u64,
        private_data: &[u8],
    ) -> Result<ConnId, CmError> {
        let id = self.alloc_id()?;
        let s = SidrSent::start(
            (id, self.tid(id)),
            &self.cfg,
            peer,
            service_id,
            private_data,
            now,
            &mut self.out,
        )?;
        self.sidr_sent.insert(id, s);
        Ok(ConnId(id))
    }

    /// Answer a `SidrRequest`.
    pub fn sidr_reply(
        &mut self,
        id: ConnId,
        status: SidrStatus,
        qpn: Qpn,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        let s = self.sidr_rcvd.get(&id.0).ok_or(CmError::UnknownId(id.0))?;
        s.reply(status, qpn, qkey, private_data, &mut self.out)?;
        self.sidr_rcvd.remove(&id.0);
        Ok(())
    }
}

// Driving the machine.
impl Cm {
    /// The next MAD to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.out.tx.pop_front()
    }

    /// MADs waiting for [`Cm::poll_transmit`].
    pub fn transmits_pending(&self) -> usize {
        self.out.tx.len()
    }

    /// The next event for the owner.
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.out.events.pop_front()
    }

    /// The earliest time `handle_timeout` has work.
    pub fn poll_timeout(&self) -> Option<u64> {
        let conns = self.conns.values().filter_map(Conn::deadline);
        let sidr = self.sidr_sent.values().map(|s| s.pending.deadline);
        let held = self.held.iter().map(HeldReq::deadline);
        conns.chain(sidr).chain(held).min()
    }

    /// Resend due MADs, end what waited too long, end TimeWaits.
    pub fn handle_timeout(&mut self, now: u64) {
        let out = &mut self.out;
        self.conns
            .retain(|_, c| c.on_timeout(now, out) == Fate::Keep);
        let conns = &self.conns;
        out.muted.retain(|id| conns.contains_key(id));
        self.sidr_sent
            .retain(|_, s| s.on_timeout(now, out) == Fate::Keep);
        self.reject_held(|h| h.deadline() <= now);
    }

    /// A datagram received on QP1 from `from` (its 256-byte payload).
    pub fn handle_mad(&mut self, now: u64, from: Gid, bytes: &[u8]) {
        let repr = match cm::Repr::parse(bytes) {
            Ok(r) => r,
            Err(e) => return self.out.counters.drop(DropReason::of(&e)),
        };
        if let Some(i) = CmCounters::slot(repr.message.attr_id()) {
            self.out.counters.received[i] += 1;
        }
        let tid = repr.tid;
        let result = match &repr.message {
            Message::Req(r) => self.on_req(now, from, tid, r, bytes),
            Message::Mra(m) => self.on_mra(now, from, m),
            Message::Rej(r) => self.on_rej(now, from, r),
            Message::Rep(r) => self.on_rep(now, from, tid, r),
            Message::Rtu(r) => lookup(
                &mut self.conns,
                r.remote_comm_id,
                Some(r.local_comm_id),
                from,
            )
            .map(|c| c.on_rtu(&mut self.out)),
            Message::Dreq(d) => self.on_dreq(from, tid, d),
            Message::Drep(r) => lookup(
                &mut self.conns,
                r.remote_comm_id,
                Some(r.local_comm_id),
                from,
            )
            .and_then(|c| c.on_drep(now, &mut self.out)),
            Message::SidrReq(r) => self.on_sidr_req(from, tid, r),
            Message::SidrRep(r) => self.on_sidr_rep(from, r),
        };
        if let Err(reason) = result {
            self.out.counters.drop(reason);
        }
    }
}

// Received MADs that need the whole table.
impl Cm {
    /// `cm_req_handler` / `cm_match_req` (spec/cm.md §5.3).
    fn on_req(
        &mut self,
        now: u64,
        from: Gid,
        tid: u64,
        r: &cm::req::Repr,
        bytes: &[u8],
    ) -> Result<(), DropReason> {
        let dup = self.conns.values_mut().find(|c| {
            !c.active && c.remote_id == r.local_comm_id && c.remote_guid == r.local_ca_guid
        });
        if let Some(c) = dup {
            if c.peer != from {
                return Err(DropReason::ForeignSource);
            }
            c.on_dup_req(&mut self.out);
            return Ok(());
        }
        let stale = self
            .conns
            .values()
            .find(|c| {
                c.holds_remote_qpn()
                    && c.remote_guid == r.local_ca_guid
                    && c.remote_qpn == r.local_qpn
            })
            .map(|c| c.local_id);
        if let Some(old) = stale {
            issue_rej(
                &mut self.out,
                from,
                tid,
                r.local_comm_id,
                0,
                MsgKind::Req,
                RejReason::StaleConnection,
            );
            self.disconnect_stale(old, now);
            return Ok(());
        }
        if !self.listeners.contains(&r.service_id) && self.reserved.contains_key(&r.service_id) {
            // Bound, the listen still to come: hold it (a resent REQ is the
            // one already held).
            let again = self.held.iter().any(|h| {
                h.remote_id == r.local_comm_id && h.remote_guid == r.local_ca_guid && h.from == from
            });
            if again {
                self.out.counters.duplicates += 1;
                return Ok(());
            }
            if self.held.len() < MAX_HELD {
                self.held.push(HeldReq {
                    service_id: r.service_id,
                    from,
                    remote_id: r.local_comm_id,
                    remote_guid: r.local_ca_guid,
                    arrived: now,
                    mad: bytes[..bytes.len().min(MAD_LEN)].to_vec(),
                });
                return Ok(());
            }
        }
        if !self.listeners.contains(&r.service_id) {
            issue_rej(
                &mut self.out,
                from,
                tid,
                r.local_comm_id,
                0,
                MsgKind::Req,
                RejReason::InvalidServiceId,
            );
            return Ok(());
        }
        let Ok(id) = self.alloc_id() else {
            issue_rej(
                &mut self.out,
                from,
                tid,
                r.local_comm_id,
                0,
                MsgKind::Req,
                RejReason::NoResources,
            );
            return Err(DropReason::NoResources);
        };
        let conn = Conn::from_req(id, &self.cfg, from, tid, r);
        let request = ConnRequest {
            service_id: r.service_id,
            remote_qpn: r.local_qpn,
            remote_ca_guid: r.local_ca_guid,
            transport: r.transport,
            remote_starting_psn: r.starting_psn,
            responder_resources: r.initiator_depth,
            initiator_depth: r.responder_resources,
            flow_control: r.flow_control,
            retry_count: r.retry_count,
            rnr_retry_count: r.rnr_retry_count,
            srq: r.srq,
            path_mtu: r.path_mtu,
            private_data: r.private_data.to_vec(),
        };
        self.conns.insert(id, conn);
        self.out.event(CmEvent::ConnectRequest {
            id: ConnId(id),
            listen: ListenId(r.service_id),
            from,
            request,
        });
        Ok(())
    }

    /// A held REQ whose listen came: handled as if it arrived now (its
    /// arrival time stands for `now`: it only times a stale connection's DREQ).
    fn replay(&mut self, h: HeldReq) {
        let Ok(repr) = cm::Repr::parse(&h.mad) else {
            return;
        };
        if let Message::Req(r) = &repr.message {
            if let Err(reason) = self.on_req(h.arrived, h.from, repr.tid, r, &h.mad) {
                self.out.counters.drop(reason);
            }
        }
    }

    /// Rejects (invalid service ID, as when nobody listens) and forgets the
    /// held REQs that `which` picks.
    fn reject_held(&mut self, which: impl Fn(&HeldReq) -> bool) {
        let (gone, rest) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| which(h));
        self.held = rest;
        for h in gone {
            let Ok(repr) = cm::Repr::parse(&h.mad) else {
                continue;
            };
            issue_rej(
                &mut self.out,
                h.from,
                repr.tid,
                h.remote_id,
                0,
                MsgKind::Req,
                RejReason::InvalidServiceId,
            );
        }
    }

    /// A new REQ/REP reuses the QP of a connection we still hold: that one is
    /// stale; disconnect it (`cm_match_req`, `cm_rep_handler`).
    fn disconnect_stale(&mut self, old: u32, now: u64) {
        if let Some(c) = self.conns.get_mut(&old) {
            // Only an ESTABLISHED connection sends a DREQ; others ignore it.
            // Its resends are timed from now, like any DREQ.
            let _ = c.disconnect(&[], now, &mut self.out);
        }
    }

    /// `cm_acquire_mraed_id` + `cm_mra_handler` (§4.4).
    fn on_mra(&mut self, now: u64, from: Gid, m: &cm::mra::Repr) -> Result<(), DropReason> {
        let remote = (m.message_mraed != MsgKind::Req).then_some(m.local_comm_id);
        let c = lookup(&mut self.conns, m.remote_comm_id, remote, from)?;
        c.on_mra(m, now, &mut self.out)
    }

    /// `cm_acquire_rejected_id` + `cm_rej_handler` (§5.7).
    fn on_rej(&mut self, now: u64, from: Gid, r: &rej::Repr) -> Result<(), DropReason> {
        let local = if r.reason == RejReason::Timeout {
            let mut guid = [0u8; 8];
            guid.copy_from_slice(&r.ari[..8]);
            let guid = u64::from_be_bytes(guid);
            self.conns
                .values()
                .find(|c| c.remote_id == r.local_comm_id && c.remote_guid == guid)
                .map(|c| c.local_id)
                .ok_or(DropReason::UnknownCommId)?
        } else {
            r.remote_comm_id
        };
        let remote = (r.reason != RejReason::Timeout && r.message_rejected != MsgKind::Req)
            .then_some(r.local_comm_id);
        let c = lookup(&mut self.conns, local, remote, from)?;
        if c.on_rej(r, now, &mut self.out)? == Fate::Remove {
            self.conns.remove(&local);
        }
        Ok(())
    }

    /// `cm_rep_handler` / `cm_dup_rep_handler` (§5.4).
    fn on_rep(
        &mut self,
        now: u64,
        from: Gid,
        tid: u64,
        r: &cm::rep::Repr,
    ) -> Result<(), DropReason> {
        let c = lookup(&mut self.conns, r.remote_comm_id, None, from)?;
        if c.remote_id != 0 {
            if c.remote_id != r.local_comm_id {
                return Err(DropReason::UnknownCommId);
            }
            c.on_dup_rep(&mut self.out);
            return Ok(());
        }
        let me = c.local_id;
        let stale = self
            .conns
            .values()
            .find(|o| {
                o.local_id != me
                    && o.holds_remote_qpn()
                    && o.remote_guid == r.local_ca_guid
                    && o.remote_qpn == r.local_qpn
            })
            .map(|o| o.local_id);
        if let Some(old) = stale {
            issue_rej(
                &mut self.out,
                from,
                tid,
                r.local_comm_id,
                r.remote_comm_id,
                MsgKind::Rep,
                RejReason::StaleConnection,
            );
            self.disconnect_stale(old, now);
            return Ok(());
        }
        let c = lookup(&mut self.conns, r.remote_comm_id, None, from)?;
        c.on_rep(r, &mut self.out)
    }

    /// `cm_dreq_handler`; a DREQ for no connection still gets its DREP
    /// (`cm_issue_drep`, §5.6).
    fn on_dreq(&mut self, from: Gid, tid: u64, d: &cm::dreq::Repr) -> Result<(), DropReason> {
        match lookup(
            &mut self.conns,
            d.remote_comm_id,
            Some(d.local_comm_id),
            from,
        ) {
            Ok(c) => c.on_dreq(d, tid, &mut self.out),
            Err(DropReason::UnknownCommId) => {
                self.out.counters.duplicates += 1;
                let drep = cm::rtu::Repr {
                    local_comm_id: d.remote_comm_id,
                    remote_comm_id: d.local_comm_id,
                    private_data: [0; cm::rtu::PRIVATE_DATA_LEN],
                };
                self.out.send(from, mad(tid, Message::Drep(drep)), false);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// `cm_sidr_req_handler` (§5.9).
    fn on_sidr_req(
        &mut self,
        from: Gid,
        tid: u64,
        r: &cm::sidr_req::Repr,
    ) -> Result<(), DropReason> {
        if self
            .sidr_rcvd
            .values()
            .any(|s| s.request_id == r.request_id && s.peer == from)
        {
            self.out.counters.duplicates += 1;
            return Ok(());
        }
        if !self.listeners.contains(&r.service_id) {
            let rep = sidr::sidr_rep(
                r.request_id,
                tid,
                r.service_id,
                SidrStatus::Unsupported,
                Qpn::from_masked(0),
                0,
                [0; cm::sidr_rep::PRIVATE_DATA_LEN],
            );
            self.out.send(from, rep, false);
            return Ok(());
        }
        let id = self.alloc_id().map_err(|_| DropReason::NoResources)?;
        self.sidr_rcvd.insert(
            id,
            SidrRcvd {
                peer: from,
                request_id: r.request_id,
                tid,
                service_id: r.service_id,
            },
        );
        self.out.event(CmEvent::SidrRequest {
            id: ConnId(id),
            listen: ListenId(r.service_id),
            from,
            pkey: r.pkey.0,
            private_data: r.private_data.to_vec(),
        });
        Ok(())
    }

    /// `cm_sidr_rep_handler` (§5.9).
    fn on_sidr_rep(&mut self, from: Gid, r: &cm::sidr_rep::Repr) -> Result<(), DropReason> {
        let s = self
            .sidr_sent
            .get(&r.request_id)
            .ok_or(DropReason::UnknownCommId)?;
        if s.peer != from {
            return Err(DropReason::ForeignSource);
        }
        s.on_rep(r, &mut self.out);
        self.sidr_sent.remove(&r.request_id);
        Ok(())
    }
}

/// Private data the owner passes is checked against these sizes (§2.10).
pub const REQ_PRIVATE_DATA_LEN: usize = cm::req::PRIVATE_DATA_LEN;
/// See [`REQ_PRIVATE_DATA_LEN`].
pub const REP_PRIVATE_DATA_LEN: usize = cm::rep::PRIVATE_DATA_LEN;
/// See [`REQ_PRIVATE_DATA_LEN`].
pub const REJ_PRIVATE_DATA_LEN: usize = cm::rej::PRIVATE_DATA_LEN;

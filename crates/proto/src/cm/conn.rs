//! One connection's CM state machine (spec/cm.md §5): REQ_SENT … TIMEWAIT as
//! an enum whose request-bearing states carry their outstanding MAD.
//!
//! Owns: [`Conn`] — the negotiated parameters, the state, the MAD retry of the
//! state's outstanding request, and the QP attributes derived from them.
//! Promises: every transition is one of the kernel's (cited per method);
//! a call or MAD not valid in the current state changes nothing and is
//! reported (`CmError::WrongState`) or counted (`DropReason::WrongState`);
//! a request MAD is sent at most `1 + max_cm_retries` times, `timeout_ns`
//! apart; nothing here panics on network input.

use wire::cm::{self, rej, Message, MsgKind, RejReason, TransportType};
use wire::mad::MAD_LEN;
use wire::{PKey, Psn, Qkey, Qpn};

use super::outbox::Outbox;
use super::timing::{ack_timeout, convert_to_ms, req_timeout_ns, MS_NS};
use super::types::*;
use crate::types::Gid;

/// A request MAD waiting for its answer (spec/cm.md §4.2, §4.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outstanding {
    pub mad: [u8; MAD_LEN],
    pub deadline: u64,
    pub timeout_ns: u64,
    pub retries_left: u8,
    pub sends: u8,
}

impl Outstanding {
    fn new(mad: [u8; MAD_LEN], now: u64, timeout_ns: u64, retries: u8) -> Outstanding {
        Outstanding {
            mad,
            deadline: now.saturating_add(timeout_ns),
            timeout_ns,
            retries_left: retries,
            sends: 1,
        }
    }
}

/// The CM states of a connection (`enum ib_cm_state`, spec/cm.md §5.1;
/// IDLE is "not in the table", LISTEN lives in the manager, SIDR in `sidr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum State {
    ReqSent(Outstanding),
    MraReqRcvd(Outstanding),
    /// Passive: REQ delivered, MRA not yet due (rdma_cm's delayed MRA, §4.6).
    MraReqSent,
    RepSent(Outstanding),
    MraRepRcvd(Outstanding),
    /// Active: REP delivered, RTU not sent yet (delayed MRA, §4.6).
    MraRepSent,
    Established,
    DreqSent(Outstanding),
    DreqRcvd,
    TimeWait {
        until: u64,
    },
}

impl State {
    pub fn name(&self) -> &'static str {
        match self {
            State::ReqSent(_) => "REQ_SENT",
            State::MraReqRcvd(_) => "MRA_REQ_RCVD",
            State::MraReqSent => "MRA_REQ_SENT",
            State::RepSent(_) => "REP_SENT",
            State::MraRepRcvd(_) => "MRA_REP_RCVD",
            State::MraRepSent => "MRA_REP_SENT",
            State::Established => "ESTABLISHED",
            State::DreqSent(_) => "DREQ_SENT",
            State::DreqRcvd => "DREQ_RCVD",
            State::TimeWait { .. } => "TIMEWAIT",
        }
    }

    /// The message a REJ sent in this state rejects (`ib_send_cm_rej`: the REQ
    /// while it is being answered, the REP while the RTU is not sent yet).
    fn rejected_message(&self) -> MsgKind {
        match self {
            State::MraReqSent => MsgKind::Req,
            State::MraRepSent => MsgKind::Rep,
            _ => MsgKind::Other,
        }
    }

    fn outstanding(&mut self) -> Option<&mut Outstanding> {
        match self {
            State::ReqSent(o)
            | State::MraReqRcvd(o)
            | State::RepSent(o)
            | State::MraRepRcvd(o)
            | State::DreqSent(o) => Some(o),
            _ => None,
        }
    }
}

/// Whether the manager keeps the connection after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    Keep,
    Remove,
}

/// One connection, active or passive.
#[derive(Debug, Clone)]
pub(crate) struct Conn {
    pub local_id: u32,
    /// 0 until the peer's comm ID is known.
    pub remote_id: u32,
    pub peer: Gid,
    pub local_gid: Gid,
    pub remote_guid: u64,
    pub active: bool,
    /// The TID of the transaction being answered (or our REQ's).
    pub tid: u64,
    pub local_qpn: Qpn,
    pub remote_qpn: Qpn,
    pub transport: TransportType,
    /// Our starting PSN: the QP's RQ PSN (spec/cm.md §6).
    pub rq_psn: Psn,
    /// The peer's starting PSN: the QP's SQ PSN.
    pub sq_psn: Psn,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub path_mtu: u8,
    pub path: PathParams,
    /// The path's local ACK timeout code (`av.timeout`, §3.6).
    pub ack_timeout: u8,
    /// The MAD timeout of this side's requests (§4.2).
    pub timeout_ns: u64,
    pub max_retries: u8,
    pub mra_service_timeout: u8,
    pub disconnect_reported: bool,
    /// The RTU we sent, resent on a duplicate REP (§5.4).
    pub rtu: Option<[u8; MAD_LEN]>,
    pub state: State,
}

pub(crate) fn fit<const N: usize>(what: &'static str, data: &[u8]) -> Result<[u8; N], CmError> {
    if data.len() > N {
        return Err(CmError::PrivateDataTooLong {
            what,
            len: data.len(),
            max: N,
        });
    }
    let mut out = [0u8; N];
    out[..data.len()].copy_from_slice(data);
    Ok(out)
}

pub(crate) fn mad(tid: u64, message: Message) -> [u8; MAD_LEN] {
    cm::Repr {
        tid,
        attr_mod: 0,
        message,
    }
    .to_bytes()
}

/// The REQ rdma_cm sends on RoCE (`cma_connect_ib`, `cm_format_req`;
/// spec/cm.md §3.4): our timeouts and retries, permissive LIDs on a routed
/// path, the path's local ACK timeout `ack`.
fn req_repr(
    local_id: u32,
    cfg: &CmConfig,
    p: &ConnectParams,
    ack: u8,
    private_data: [u8; cm::req::PRIVATE_DATA_LEN],
) -> cm::req::Repr {
    cm::req::Repr {
        local_comm_id: local_id,
        service_id: p.service_id,
        local_ca_guid: cfg.ca_guid,
        local_qkey: Qkey(0),
        local_qpn: p.qpn,
        responder_resources: p.responder_resources,
        local_eecn: 0,
        initiator_depth: p.initiator_depth,
        remote_eecn: 0,
        remote_cm_response_timeout: cfg.cm_response_timeout,
        transport: p.transport,
        flow_control: p.flow_control,
        starting_psn: p.starting_psn,
        local_cm_response_timeout: cfg.cm_response_timeout,
        retry_count: p.retry_count,
        pkey: PKey(wire::mad::DEFAULT_PKEY),
        path_mtu: p.path_mtu,
        rdc_exists: false,
        rnr_retry_count: p.rnr_retry_count,
        max_cm_retries: cfg.max_cm_retries,
        srq: p.srq,
        // Extended Transport Type 1: XRC (spec/xrc.md §8).
        extended_transport_type: u8::from(p.transport == TransportType::Extended),
        // cm_format_req: hop limit > 1 → permissive LIDs, not subnet local.
        primary_path: cm::req::Path {
            local_lid: 0xFFFF,
            remote_lid: 0xFFFF,
            local_gid: cfg.local_gid.0,
            remote_gid: p.peer.0,
            flow_label: p.path.flow_label,
            packet_rate: p.path.packet_rate,
            traffic_class: p.path.traffic_class,
            hop_limit: p.path.hop_limit,
            sl: p.path.sl,
            subnet_local: p.path.hop_limit <= 1,
            local_ack_timeout: ack,
        },
        alternate_path: cm::req::Path::default(),
        sap_supported: false,
        private_data,
    }
}

fn check_max(field: &'static str, value: u8, max: u8) -> Result<(), CmError> {
    if value > max {
        return Err(CmError::OutOfRange {
            field,
            value: value.into(),
            max: max.into(),
        });
    }
    Ok(())
}

fn wrong(op: &'static str, state: &State) -> CmError {
    CmError::WrongState {
        op,
        state: state.name(),
    }
}

impl Conn {
    /// Active side: build and send the REQ (`cma_connect_ib`, `cm_format_req`,
    /// `ib_send_cm_req`; spec/cm.md §3.4, §4.2). State REQ_SENT.
    pub fn connect(
        local_id: u32,
        tid: u64,
        cfg: &CmConfig,
        p: &ConnectParams,
        now: u64,
        out: &mut Outbox,
    ) -> Result<Conn, CmError> {
        let private_data = fit::<{ cm::req::PRIVATE_DATA_LEN }>("REQ", &p.private_data)?;
        check_max("retry_count", p.retry_count, 7)?;
        check_max("rnr_retry_count", p.rnr_retry_count, 7)?;
        check_max("path_mtu", p.path_mtu, 5)?;
        let ack = ack_timeout(cfg.ack_delay, cfg.packet_life_time);
        let req = req_repr(local_id, cfg, p, ack, private_data);
        let bytes = mad(tid, Message::Req(req));
        let timeout_ns = req_timeout_ns(cfg.packet_life_time, cfg.cm_response_timeout);
        out.send(p.peer, bytes, false);
        Ok(Conn {
            local_id,
            remote_id: 0,
            peer: p.peer,
            local_gid: cfg.local_gid,
            remote_guid: 0,
            active: true,
            tid,
            local_qpn: p.qpn,
            remote_qpn: Qpn::from_masked(0),
            transport: p.transport,
            rq_psn: p.starting_psn,
            sq_psn: Psn::from_masked(0),
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            retry_count: p.retry_count,
            rnr_retry_count: p.rnr_retry_count,
            path_mtu: p.path_mtu,
            path: p.path,
            ack_timeout: ack,
            timeout_ns,
            max_retries: cfg.max_cm_retries,
            mra_service_timeout: cfg.mra_service_timeout,
            disconnect_reported: false,
            rtu: None,
            state: State::ReqSent(Outstanding::new(bytes, now, timeout_ns, cfg.max_cm_retries)),
        })
    }

    /// Passive side: a REQ matched a listener (`cm_req_handler`,
    /// `cm_format_req_event`, spec/cm.md §5.3). rdma_cm delivers the request
    /// and moves on to MRA_REQ_SENT with a delayed MRA (§4.6).
    pub fn from_req(
        local_id: u32,
        cfg: &CmConfig,
        from: Gid,
        tid: u64,
        req: &cm::req::Repr,
    ) -> Conn {
        let p = &req.primary_path;
        // cm_format_paths_from_req: packet life time = local ACK timeout − 1.
        let life = p.local_ack_timeout.saturating_sub(1);
        Conn {
            local_id,
            remote_id: req.local_comm_id,
            peer: from,
            local_gid: cfg.local_gid,
            remote_guid: req.local_ca_guid,
            active: false,
            tid,
            local_qpn: Qpn::from_masked(0),
            remote_qpn: req.local_qpn,
            transport: req.transport,
            rq_psn: Psn::from_masked(0),
            sq_psn: req.starting_psn,
            responder_resources: req.initiator_depth,
            initiator_depth: req.responder_resources,
            retry_count: req.retry_count,
            rnr_retry_count: req.rnr_retry_count,
            path_mtu: req.path_mtu,
            path: PathParams {
                hop_limit: p.hop_limit,
                traffic_class: p.traffic_class,
                flow_label: p.flow_label,
                sl: p.sl,
                packet_rate: p.packet_rate,
            },
            ack_timeout: ack_timeout(cfg.ack_delay, life),
            timeout_ns: convert_to_ms(req.local_cm_response_timeout) * MS_NS,
            max_retries: req.max_cm_retries,
            mra_service_timeout: cfg.mra_service_timeout,
            disconnect_reported: false,
            rtu: None,
            state: State::MraReqSent,
        }
    }

    /// When `handle_timeout` must next look at this connection.
    pub fn deadline(&self) -> Option<u64> {
        match &self.state {
            State::ReqSent(o)
            | State::MraReqRcvd(o)
            | State::RepSent(o)
            | State::MraRepRcvd(o)
            | State::DreqSent(o) => Some(o.deadline),
            State::TimeWait { until } => Some(*until),
            _ => None,
        }
    }

    /// True while the connection holds its (remote QPN, CA GUID) pair
    /// (`cm_insert_remote_qpn` until `cm_enter_timewait`).
    pub fn holds_remote_qpn(&self) -> bool {
        self.remote_guid != 0
            && !matches!(
                self.state,
                State::TimeWait { .. } | State::ReqSent(_) | State::MraReqRcvd(_)
            )
    }

    fn enter_timewait(&mut self, now: u64) {
        // cm_enter_timewait: wait cm_convert_to_ms(av.timeout) (§4.5).
        let until = now.saturating_add(convert_to_ms(self.ack_timeout) * MS_NS);
        self.state = State::TimeWait { until };
    }

    fn report_disconnect(&mut self, timed_out: bool, out: &mut Outbox) {
        if !self.disconnect_reported {
            self.disconnect_reported = true;
            out.event(CmEvent::Disconnected {
                id: ConnId(self.local_id),
                timed_out,
            });
        }
    }

    fn mra(&self, kind: MsgKind) -> [u8; MAD_LEN] {
        mad(
            self.tid,
            Message::Mra(cm::mra::Repr {
                local_comm_id: self.local_id,
                remote_comm_id: self.remote_id,
                message_mraed: kind,
                service_timeout: self.mra_service_timeout,
                private_data: [0; cm::mra::PRIVATE_DATA_LEN],
            }),
        )
    }

    fn drep(&self, private_data: [u8; cm::rtu::PRIVATE_DATA_LEN]) -> [u8; MAD_LEN] {
        mad(
            self.tid,
            Message::Drep(cm::rtu::Repr {
                local_comm_id: self.local_id,
                remote_comm_id: self.remote_id,
                private_data,
            }),
        )
    }

    /// Sends a REJ from the current state (`cm_format_rej`, spec/cm.md §5.7).
    pub fn send_rej(
        &self,
        reason: RejReason,
        ari: &[u8],
        pd: [u8; rej::PRIVATE_DATA_LEN],
        out: &mut Outbox,
    ) {
        let mut ari_buf = [0u8; rej::ARI_LEN];
        let n = ari.len().min(rej::ARI_LEN);
        ari_buf[..n].copy_from_slice(&ari[..n]);
        let r = rej::Repr {
            local_comm_id: self.local_id,
            remote_comm_id: self.remote_id,
            message_rejected: self.state.rejected_message(),
            reason,
            ari_len: n as u8,
            ari: ari_buf,
            private_data: pd,
        };
        out.send(self.peer, mad(self.tid, Message::Rej(r)), false);
    }
}

// The owner's calls.
impl Conn {
    /// `ib_send_cm_rep` from REQ_RCVD / MRA_REQ_SENT → REP_SENT (§3.5, §5.4).
    pub fn accept(
        &mut self,
        cfg: &CmConfig,
        p: &AcceptParams,
        now: u64,
        out: &mut Outbox,
    ) -> Result<(), CmError> {
        if self.state != State::MraReqSent {
            return Err(wrong("accept", &self.state));
        }
        let private_data = fit::<{ cm::rep::PRIVATE_DATA_LEN }>("REP", &p.private_data)?;
        check_max("rnr_retry_count", p.rnr_retry_count, 7)?;
        let rep = cm::rep::Repr {
            local_comm_id: self.local_id,
            remote_comm_id: self.remote_id,
            local_qkey: Qkey(0),
            local_qpn: p.qpn,
            local_eecn: 0,
            starting_psn: p.starting_psn,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: cfg.ack_delay,
            failover_accepted: 0,
            flow_control: p.flow_control,
            rnr_retry_count: p.rnr_retry_count,
            srq: p.srq,
            local_ca_guid: cfg.ca_guid,
            private_data,
        };
        self.local_qpn = p.qpn;
        self.rq_psn = p.starting_psn;
        self.responder_resources = p.responder_resources;
        self.initiator_depth = p.initiator_depth;
        let bytes = mad(self.tid, Message::Rep(rep));
        out.send(self.peer, bytes, false);
        self.state = State::RepSent(Outstanding::new(
            bytes,
            now,
            self.timeout_ns,
            self.max_retries,
        ));
        Ok(())
    }

    /// `ib_send_cm_rej` (consumer defined) from the states that allow it
    /// (spec/cm.md §5.7): REP_SENT/MRA_REP_RCVD go to TimeWait, others end.
    pub fn reject(&mut self, pd: &[u8], now: u64, out: &mut Outbox) -> Result<Fate, CmError> {
        let pd = fit::<{ rej::PRIVATE_DATA_LEN }>("REJ", pd)?;
        match self.state {
            State::ReqSent(_) | State::MraReqRcvd(_) | State::MraReqSent | State::MraRepSent => {
                self.send_rej(RejReason::ConsumerDefined, &[], pd, out);
                Ok(Fate::Remove)
            }
            State::RepSent(_) | State::MraRepRcvd(_) => {
                self.send_rej(RejReason::ConsumerDefined, &[], pd, out);
                self.enter_timewait(now);
                Ok(Fate::Keep)
            }
            _ => Err(wrong("reject", &self.state)),
        }
    }

    /// `ib_send_cm_rtu` from REP_RCVD / MRA_REP_SENT → ESTABLISHED (§5.5).
    pub fn ready_to_use(&mut self, pd: &[u8], out: &mut Outbox) -> Result<(), CmError> {
        if self.state != State::MraRepSent {
            return Err(wrong("rtu", &self.state));
        }
        let private_data = fit::<{ cm::rtu::PRIVATE_DATA_LEN }>("RTU", pd)?;
        let bytes = mad(
            self.tid,
            Message::Rtu(cm::rtu::Repr {
                local_comm_id: self.local_id,
                remote_comm_id: self.remote_id,
                private_data,
            }),
        );
        out.send(self.peer, bytes, false);
        self.rtu = Some(bytes);
        self.state = State::Established;
        out.event(CmEvent::Established {
            id: ConnId(self.local_id),
        });
        Ok(())
    }

    /// `ib_cm_notify(IB_EVENT_COMM_EST)`: data arrived before the RTU (§5.5).
    pub fn establish(&mut self, out: &mut Outbox) -> Result<(), CmError> {
        match self.state {
            State::RepSent(_) | State::MraRepRcvd(_) => {
                self.state = State::Established;
                out.event(CmEvent::Established {
                    id: ConnId(self.local_id),
                });
                Ok(())
            }
            _ => Err(wrong("establish", &self.state)),
        }
    }

    /// `ib_send_cm_dreq` from ESTABLISHED, or `ib_send_cm_drep` from
    /// DREQ_RCVD (§5.6).
    pub fn disconnect(&mut self, pd: &[u8], now: u64, out: &mut Outbox) -> Result<(), CmError> {
        match self.state {
            State::Established => {
                let private_data = fit::<{ cm::dreq::PRIVATE_DATA_LEN }>("DREQ", pd)?;
                let bytes = mad(
                    self.tid,
                    Message::Dreq(cm::dreq::Repr {
                        local_comm_id: self.local_id,
                        remote_comm_id: self.remote_id,
                        remote_qpn: self.remote_qpn,
                        private_data,
                    }),
                );
                out.send(self.peer, bytes, false);
                self.state = State::DreqSent(Outstanding::new(
                    bytes,
                    now,
                    self.timeout_ns,
                    self.max_retries,
                ));
                Ok(())
            }
            State::DreqRcvd => {
                let private_data = fit::<{ cm::rtu::PRIVATE_DATA_LEN }>("DREP", pd)?;
                out.send(self.peer, self.drep(private_data), false);
                self.enter_timewait(now);
                Ok(())
            }
            _ => Err(wrong("disconnect", &self.state)),
        }
    }

    /// `cm_destroy_id` (spec/cm.md §5.8): tell the peer; `Keep` when the
    /// connection enters TimeWait (from ESTABLISHED after its one DREQ, from
    /// DREQ_SENT, and from REP_SENT / MRA_REP_RCVD after the REJ), so a late
    /// DREQ still gets its DREP, a late REQ a REJ (stale connection), and the
    /// comm ID is not reused before TimeWait ends (§5.8).
    pub fn destroy(&mut self, ca_guid: u64, now: u64, out: &mut Outbox) -> Fate {
        let no_pd = [0u8; rej::PRIVATE_DATA_LEN];
        match self.state {
            State::ReqSent(_) | State::MraReqRcvd(_) => {
                self.send_rej(RejReason::Timeout, &ca_guid.to_be_bytes(), no_pd, out);
                Fate::Remove
            }
            State::MraReqSent | State::MraRepSent => {
                self.send_rej(RejReason::ConsumerDefined, &[], no_pd, out);
                Fate::Remove
            }
            State::RepSent(_) | State::MraRepRcvd(_) => {
                // ib_send_cm_rej from these states enters TimeWait.
                self.send_rej(RejReason::ConsumerDefined, &[], no_pd, out);
                self.enter_timewait(now);
                Fate::Keep
            }
            State::Established => {
                // ib_send_cm_dreq, then "goto retest": DREQ_SENT cancels the
                // MAD (sent once) and enters TimeWait.
                let _ = self.disconnect(&[], now, out);
                self.enter_timewait(now);
                Fate::Keep
            }
            State::DreqSent(_) => {
                self.enter_timewait(now);
                Fate::Keep
            }
            State::DreqRcvd => {
                out.send(self.peer, self.drep([0; cm::rtu::PRIVATE_DATA_LEN]), false);
                self.enter_timewait(now);
                Fate::Keep
            }
            State::TimeWait { .. } => Fate::Keep,
        }
    }
}

// MADs from the peer.
impl Conn {
    /// A REQ with our (remote ID, CA GUID) again (`cm_dup_req_handler`, §5.3).
    pub fn on_dup_req(&mut self, out: &mut Outbox) {
        out.counters.duplicates += 1;
        match self.state {
            State::MraReqSent => out.send(self.peer, self.mra(MsgKind::Req), false),
            State::TimeWait { .. } => self.send_rej(
                RejReason::StaleConnection,
                &[],
                [0; rej::PRIVATE_DATA_LEN],
                out,
            ),
            _ => {}
        }
    }

    /// An MRA (`cm_mra_handler`, §4.4): stretch the outstanding request's timeout.
    pub fn on_mra(
        &mut self,
        m: &cm::mra::Repr,
        now: u64,
        out: &mut Outbox,
    ) -> Result<(), DropReason> {
        let timeout_ns =
            (convert_to_ms(m.service_timeout) + convert_to_ms(self.ack_timeout)) * MS_NS;
        let stretch = |o: &mut Outstanding| {
            o.timeout_ns = timeout_ns;
            o.deadline = now.saturating_add(timeout_ns);
        };
        let state = std::mem::replace(&mut self.state, State::Established);
        self.state = match (state, m.message_mraed) {
            (State::ReqSent(mut o), MsgKind::Req) => {
                stretch(&mut o);
                State::MraReqRcvd(o)
            }
            (State::RepSent(mut o), MsgKind::Rep) => {
                stretch(&mut o);
                State::MraRepRcvd(o)
            }
            (s @ (State::MraReqRcvd(_) | State::MraRepRcvd(_)), _) => {
                out.counters.duplicates += 1;
                self.state = s;
                return Ok(());
            }
            (s, _) => {
                self.state = s;
                return Err(DropReason::WrongState);
            }
        };
        Ok(())
    }

    /// The REP for our REQ (`cm_rep_handler`, §5.4): learn the peer, tell
    /// the owner, hold a delayed MRA (§4.6).
    pub fn on_rep(&mut self, rep: &cm::rep::Repr, out: &mut Outbox) -> Result<(), DropReason> {
        if !matches!(self.state, State::ReqSent(_) | State::MraReqRcvd(_)) {
            return Err(DropReason::WrongState);
        }
        self.remote_id = rep.local_comm_id;
        self.remote_guid = rep.local_ca_guid;
        self.remote_qpn = rep.local_qpn;
        self.sq_psn = rep.starting_psn;
        self.initiator_depth = rep.responder_resources;
        self.responder_resources = rep.initiator_depth;
        self.rnr_retry_count = rep.rnr_retry_count;
        // cm_rep_handler: av.timeout = cm_ack_timeout(target ack delay, av.timeout − 1).
        self.ack_timeout = ack_timeout(rep.target_ack_delay, self.ack_timeout.saturating_sub(1));
        self.state = State::MraRepSent;
        out.event(CmEvent::ConnectResponse {
            id: ConnId(self.local_id),
            reply: ConnReply {
                remote_qpn: rep.local_qpn,
                remote_ca_guid: rep.local_ca_guid,
                remote_starting_psn: rep.starting_psn,
                responder_resources: rep.initiator_depth,
                initiator_depth: rep.responder_resources,
                flow_control: rep.flow_control,
                rnr_retry_count: rep.rnr_retry_count,
                srq: rep.srq,
                private_data: rep.private_data.to_vec(),
            },
        });
        Ok(())
    }

    /// A REP we already have (`cm_dup_rep_handler`, §5.4).
    pub fn on_dup_rep(&mut self, out: &mut Outbox) {
        out.counters.duplicates += 1;
        match (&self.state, self.rtu) {
            (State::MraRepSent, _) => out.send(self.peer, self.mra(MsgKind::Rep), false),
            (State::Established, Some(rtu)) => out.send(self.peer, rtu, false),
            _ => {}
        }
    }

    /// `cm_rtu_handler` (§5.5).
    pub fn on_rtu(&mut self, out: &mut Outbox) {
        match self.state {
            State::RepSent(_) | State::MraRepRcvd(_) => {
                self.state = State::Established;
                out.event(CmEvent::Established {
                    id: ConnId(self.local_id),
                });
            }
            _ => out.counters.duplicates += 1,
        }
    }

    /// `cm_dreq_handler` (§5.6).
    pub fn on_dreq(
        &mut self,
        d: &cm::dreq::Repr,
        tid: u64,
        out: &mut Outbox,
    ) -> Result<(), DropReason> {
        if d.remote_qpn != self.local_qpn {
            return Err(DropReason::WrongQpn);
        }
        match self.state {
            State::RepSent(_) | State::DreqSent(_) | State::Established | State::MraRepRcvd(_) => {
                self.state = State::DreqRcvd;
                self.tid = tid;
                self.report_disconnect(false, out);
                Ok(())
            }
            State::TimeWait { .. } => {
                out.counters.duplicates += 1;
                self.tid = tid;
                out.send(self.peer, self.drep([0; cm::rtu::PRIVATE_DATA_LEN]), false);
                Ok(())
            }
            State::DreqRcvd => {
                out.counters.duplicates += 1;
                Ok(())
            }
            _ => Err(DropReason::WrongState),
        }
    }

    /// `cm_drep_handler` (§5.6).
    pub fn on_drep(&mut self, now: u64, out: &mut Outbox) -> Result<(), DropReason> {
        match self.state {
            State::DreqSent(_) | State::DreqRcvd => {
                self.enter_timewait(now);
                self.report_disconnect(false, out);
                Ok(())
            }
            _ => Err(DropReason::WrongState),
        }
    }

    /// `cm_rej_handler` (§5.7).
    pub fn on_rej(
        &mut self,
        r: &rej::Repr,
        now: u64,
        out: &mut Outbox,
    ) -> Result<Fate, DropReason> {
        let fate = match self.state {
            State::ReqSent(_)
            | State::MraReqRcvd(_)
            | State::RepSent(_)
            | State::MraRepRcvd(_)
            | State::MraReqSent => {
                if r.reason == RejReason::StaleConnection {
                    self.enter_timewait(now);
                    Fate::Keep
                } else {
                    Fate::Remove
                }
            }
            State::DreqSent(_) | State::MraRepSent | State::Established => {
                self.enter_timewait(now);
                Fate::Keep
            }
            _ => return Err(DropReason::WrongState),
        };
        out.event(CmEvent::Rejected {
            id: ConnId(self.local_id),
            reason: r.reason,
            private_data: r.private_data.to_vec(),
        });
        Ok(fate)
    }

    /// Resends a due request or ends the state that waited for it
    /// (`cm_process_send_error`, §4.3); ends TimeWait (§4.5).
    pub fn on_timeout(&mut self, now: u64, out: &mut Outbox) -> Fate {
        if let State::TimeWait { until } = self.state {
            if now >= until {
                out.event(CmEvent::TimewaitExit {
                    id: ConnId(self.local_id),
                });
                return Fate::Remove;
            }
            return Fate::Keep;
        }
        let peer = self.peer;
        let Some(o) = self.state.outstanding() else {
            return Fate::Keep;
        };
        if now < o.deadline {
            return Fate::Keep;
        }
        if o.retries_left > 0 {
            o.retries_left -= 1;
            o.sends = o.sends.saturating_add(1);
            o.deadline = now.saturating_add(o.timeout_ns);
            out.send(peer, o.mad, true);
            return Fate::Keep;
        }
        let sends = o.sends;
        match self.state {
            State::DreqSent(_) => {
                self.enter_timewait(now);
                self.report_disconnect(true, out);
                Fate::Keep
            }
            _ => {
                out.event(CmEvent::Unreachable {
                    id: ConnId(self.local_id),
                    sends,
                });
                Fate::Remove
            }
        }
    }
}

// QP attributes (`cm_init_qp_init_attr`, `_rtr_attr`, `_rts_attr`; spec/cm.md §6).
impl Conn {
    pub fn qp_attrs(&self, target: QpTarget) -> Result<CmQpAttrs, CmError> {
        let remote_known = !matches!(self.state, State::ReqSent(_) | State::MraReqRcvd(_));
        let alive = !matches!(
            self.state,
            State::DreqSent(_) | State::DreqRcvd | State::TimeWait { .. }
        );
        // Kernel cm.c: the QP type is RC or UC, or for XRC (transport 3,
        // spec/xrc.md §8) XRC_INI on the active side and XRC_TGT on the
        // passive one (`cm_req_get_qp_type`). RTR carries the responder's
        // attributes for RC and XRC_TGT (`cm_init_qp_rtr_attr`); RTS the
        // requester's for RC and XRC_INI, and the ACK timeout for every
        // reliable one (`cm_init_qp_rts_attr`).
        let rc = self.transport == TransportType::Rc;
        let xrc = self.transport == TransportType::Extended;
        let responder = rc || (xrc && !self.active);
        let requester = rc || (xrc && self.active);
        let mut a = CmQpAttrs::default();
        match target {
            QpTarget::Init if alive => {
                let rdma_read = self.responder_resources > 0;
                a.access = Some(CmAccess {
                    remote_write: true,
                    remote_read: rdma_read,
                    remote_atomic: rdma_read,
                });
                a.pkey_index = Some(0);
                a.port_num = Some(1);
            }
            QpTarget::Rtr if alive && remote_known => {
                a.ah = Some(CmAh {
                    dgid: self.peer,
                    sgid: self.local_gid,
                    hop_limit: self.path.hop_limit,
                    traffic_class: self.path.traffic_class,
                    flow_label: self.path.flow_label,
                    sl: self.path.sl,
                });
                a.path_mtu = Some(self.path_mtu);
                a.dest_qpn = Some(self.remote_qpn);
                a.rq_psn = Some(self.rq_psn);
                if responder {
                    a.max_dest_rd_atomic = Some(self.responder_resources);
                    a.min_rnr_timer = Some(0);
                }
            }
            QpTarget::Rts if alive && remote_known => {
                a.sq_psn = Some(self.sq_psn);
                if requester {
                    a.retry_cnt = Some(self.retry_count);
                    a.rnr_retry = Some(self.rnr_retry_count);
                    a.max_rd_atomic = Some(self.initiator_depth);
                }
                if rc || xrc {
                    a.timeout = Some(self.ack_timeout);
                }
            }
            _ => {
                return Err(CmError::WrongState {
                    op: "qp_attrs",
                    state: self.state.name(),
                })
            }
        }
        Ok(a)
    }
}

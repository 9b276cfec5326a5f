//! Connected RC queue pairs: listener, request, connect, connection.

use super::channel::{hub_points_to, CmChannel, Route};
use super::common::*;
use crate::device::Shared;
use crate::pd::ProtectionDomain;
use crate::qp::{QueuePair, Rc};
use proto::types::Gid;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wire::cm::cma::{self, Header};

/// A connected RC queue pair and its CM connection.
pub struct Connection {
    qp: QueuePair<Rc>,
    dev: Arc<Shared>,
    id: ConnId,
    ch: Arc<CmChannel>,
    peer_private_data: Vec<u8>,
    peer: IpAddr,
    disconnected: bool,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("id", &self.id)
            .field("peer", &self.peer)
            .field("qp", &self.qp)
            .finish()
    }
}

/// Something that happened to an established connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnEvent {
    /// The connection is up (the RTU arrived; passive side).
    Established,
    /// The peer disconnected (DREQ), or our DREQ was answered or timed out.
    Disconnected,
    /// TimeWait ended; the CM forgot the connection.
    TimewaitExit,
}

impl Connection {
    /// The connected QP (RTS).
    pub fn qp(&self) -> &QueuePair<Rc> {
        &self.qp
    }

    /// The peer's private data: the REP's 196 bytes (active side) or the
    /// REQ's user part, 56 bytes (passive side).
    pub fn peer_private_data(&self) -> &[u8] {
        &self.peer_private_data
    }

    /// The peer's address.
    pub fn peer(&self) -> IpAddr {
        self.peer
    }

    /// The CM's local communication ID.
    pub fn id(&self) -> u32 {
        self.id.0
    }

    /// The channel this connection's events arrive on (its fd is pollable).
    pub fn channel(&self) -> &Arc<CmChannel> {
        &self.ch
    }

    /// The next event, waiting at most `timeout` (`Duration::ZERO`: only look).
    pub fn next_event(&self, timeout: Duration) -> Option<ConnEvent> {
        let id = self.id;
        let e = self.ch.take(Some(Instant::now() + timeout), |e| match e {
            CmEvent::Established { id: i }
            | CmEvent::Disconnected { id: i, .. }
            | CmEvent::TimewaitExit { id: i } => *i == id,
            _ => false,
        })?;
        Some(match e {
            CmEvent::Established { .. } => ConnEvent::Established,
            CmEvent::Disconnected { .. } => ConnEvent::Disconnected,
            _ => ConnEvent::TimewaitExit,
        })
    }

    /// Waits (at most `timeout`) until the peer disconnects; true if it did.
    pub fn wait_disconnected(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_event(left) {
                Some(ConnEvent::Disconnected) => return true,
                Some(_) => {}
                None => return false,
            }
        }
    }

    /// `rdma_disconnect`: the QP to ERR (its outstanding work requests
    /// complete with `WR_FLUSH_ERR`), then a DREQ, or the DREP when the peer
    /// disconnected first. Does not wait for the DREP.
    pub fn disconnect(&mut self) -> Result<(), CmError> {
        let qp = self.qp.handle();
        let id = self.id;
        // An ACK a poll left to this thread leaves before the QP's ERR.
        self.dev.driver.flush_left();
        self.dev.cm(|e, now| {
            let err = proto::QpAttr {
                qp_state: proto::QpState::Err,
                ..Default::default()
            };
            e.modify_qp(qp, &err, proto::AttrMask::STATE)?;
            // Passive side whose RTU was lost: the peer used the connection,
            // so it is established (the kernel learns it from COMM_EST).
            if matches!(e.cm().state(id), Some("REP_SENT" | "MRA_REP_RCVD")) {
                e.cm_mut().establish(id)?;
            }
            e.cm_mut().disconnect(now, id, &[])?;
            Ok::<_, CmError>(())
        })?;
        self.disconnected = true;
        Ok(())
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        let id = self.id;
        let hub = self.dev.hub();
        // rdma_destroy_id: cm_destroy_id tells the peer (DREQ/REJ) if needed.
        let _ = self.dev.cm(|e, now| e.cm_mut().destroy(now, id));
        hub.unset(Route::Conn(id.0));
    }
}

/// A listener on (device address, port, port space) (`rdma_listen`).
pub struct Listener {
    pub(super) dev: Arc<Shared>,
    listen: ListenId,
    pub(super) ch: Arc<CmChannel>,
    port: u16,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("port", &self.port)
            .finish()
    }
}

/// A peer's connection request, to accept or reject.
pub struct ConnectRequest {
    dev: Arc<Shared>,
    ch: Arc<CmChannel>,
    id: ConnId,
    peer: IpAddr,
    private_data: Vec<u8>,
    request: proto::cm::ConnRequest,
    answered: bool,
}

impl std::fmt::Debug for ConnectRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectRequest")
            .field("id", &self.id)
            .field("peer", &self.peer)
            .finish()
    }
}

impl Listener {
    /// Listens on `port` of `ps` at the device of `pd`.
    pub fn bind(pd: &ProtectionDomain, ps: PortSpace, port: u16) -> Result<Listener, CmError> {
        let dev = pd.inner.ctx.dev.clone();
        let ch = CmChannel::new()?;
        let hub = dev.hub();
        let listen = dev.cm(|e, _| {
            let l = e.cm_mut().listen(cma::service_id(ps, port))?;
            hub.set(Route::Listen(l.0), &ch);
            Ok::<_, CmError>(l)
        })?;
        Ok(Listener {
            dev,
            listen,
            ch,
            port,
        })
    }

    /// The channel requests arrive on (its fd is pollable).
    pub fn channel(&self) -> &Arc<CmChannel> {
        &self.ch
    }

    /// The next connection request, waiting at most `timeout`.
    pub fn accept_request(&self, timeout: Duration) -> Result<ConnectRequest, CmError> {
        self.next(Some(Instant::now() + timeout))
            .ok_or(CmError::TimedOut(timeout))
    }

    /// The next connection request if one waits (for event-driven callers).
    pub fn try_request(&self) -> Option<ConnectRequest> {
        self.next(None)
    }

    fn next(&self, deadline: Option<Instant>) -> Option<ConnectRequest> {
        let e = self
            .ch
            .take(deadline, |e| matches!(e, CmEvent::ConnectRequest { .. }))?;
        let CmEvent::ConnectRequest {
            id, from, request, ..
        } = e
        else {
            return None;
        };
        // cma_req_handler: the rdma_cm header precedes the user's bytes.
        let private_data = match Header::parse(&request.private_data) {
            Ok(_) => request.private_data[cma::HEADER_LEN..].to_vec(),
            Err(_) => request.private_data.clone(),
        };
        Some(ConnectRequest {
            dev: self.dev.clone(),
            ch: self.ch.clone(),
            id,
            peer: from.ip(),
            private_data,
            request,
            answered: false,
        })
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let l = self.listen;
        let hub = self.dev.hub();
        let _ = self.dev.cm(|e, _| e.cm_mut().stop_listening(l));
        hub.unset(Route::Listen(l.0));
    }
}

impl ConnectRequest {
    /// The user part of the REQ's private data (56 bytes).
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }

    /// The requester's address.
    pub fn peer(&self) -> IpAddr {
        self.peer
    }

    /// The REQ's fields (QPN, PSN, resources, MTU, retry counts).
    pub fn request(&self) -> &proto::cm::ConnRequest {
        &self.request
    }

    /// Moves `qp` (in RESET) to INIT with the CM's attributes, so that
    /// receives can be posted before [`ConnectRequest::accept`] (what
    /// `rdma_create_qp` on a connection's id does).
    pub fn init_qp(&self, qp: &QueuePair<Rc>) -> Result<(), CmError> {
        let (id, h) = (self.id, qp.handle());
        self.dev.cm(|e, _| modify_to(e, h, id, QpTarget::Init))
    }

    /// `rdma_accept`: the QP (RESET or INIT) to INIT/RTR/RTS with the negotiated attributes,
    /// then the REP with `private_data`. The connection is usable at once
    /// (the RTU, or the first packet from the peer, completes it).
    pub fn accept(mut self, qp: QueuePair<Rc>, private_data: &[u8]) -> Result<Connection, CmError> {
        if private_data.len() > REP_PRIVATE_DATA_MAX {
            return Err(CmError::PrivateDataTooLong {
                what: "REP",
                len: private_data.len(),
                max: REP_PRIVATE_DATA_MAX,
            });
        }
        let (id, h) = (self.id, qp.handle());
        let p = AcceptParams {
            qpn: Qpn::from_masked(qp.qp_num()),
            starting_psn: start_psn(qp.qp_num()),
            responder_resources: self.request.responder_resources.min(16),
            initiator_depth: self.request.initiator_depth.min(16),
            flow_control: true,
            rnr_retry_count: self.request.rnr_retry_count,
            srq: false,
            private_data: private_data.to_vec(),
        };
        let ch = CmChannel::new()?;
        let hub = self.dev.hub();
        self.dev.cm(|e, now| {
            e.cm_mut().accept(now, id, &p)?;
            if e.query_qp(h)?.0.qp_state == proto::QpState::Reset {
                modify_to(e, h, id, QpTarget::Init)?;
            }
            for t in [QpTarget::Rtr, QpTarget::Rts] {
                modify_to(e, h, id, t)?;
            }
            hub.set(Route::Conn(id.0), &ch);
            Ok::<_, CmError>(())
        })?;
        self.answered = true;
        Ok(Connection {
            qp,
            dev: self.dev.clone(),
            id,
            ch,
            peer_private_data: std::mem::take(&mut self.private_data),
            peer: self.peer,
            disconnected: false,
        })
    }

    /// `rdma_reject`: REJ (consumer defined) with `private_data` (≤ 148 bytes).
    pub fn reject(mut self, private_data: &[u8]) -> Result<(), CmError> {
        let id = self.id;
        self.dev
            .cm(|e, now| e.cm_mut().reject(now, id, private_data))?;
        self.answered = true;
        Ok(())
    }
}

impl Drop for ConnectRequest {
    fn drop(&mut self) {
        let id = self.id;
        let hub = self.dev.hub();
        if !self.answered {
            let _ = self.dev.cm(|e, now| e.cm_mut().destroy(now, id));
        }
        // Accepted connections re-routed the id to their own channel.
        if !self.answered || hub_points_to(&hub, id, &self.ch) {
            hub.unset(Route::Conn(id.0));
        }
    }
}

/// A connection attempt under way ([`connect_start`]).
pub struct Connecting {
    conn: Option<Connection>,
    port: u16,
}

/// `rdma_connect` without waiting: the QP goes to INIT and the REQ leaves.
/// Finish with [`Connecting::wait`].
pub fn connect_start(
    qp: QueuePair<Rc>,
    peer: IpAddr,
    port: u16,
    opts: &ConnectOptions,
) -> Result<Connecting, CmError> {
    if opts.private_data.len() > REQ_PRIVATE_DATA_MAX {
        return Err(CmError::PrivateDataTooLong {
            what: "REQ",
            len: opts.private_data.len(),
            max: REQ_PRIVATE_DATA_MAX,
        });
    }
    let dev = qp.pd().ctx.dev.clone();
    let ch = CmChannel::new()?;
    let hub = dev.hub();
    let h = qp.handle();
    let qpn = qp.qp_num();
    let id = dev.cm(|e, now| {
        let local = device_ip(e);
        if local.is_ipv4() != peer.is_ipv4() {
            return Err(CmError::AddressFamily { local, peer });
        }
        // cma_format_hdr: version, IP version, our port, source and destination.
        let mut pd = vec![0u8; cma::HEADER_LEN];
        let hdr = Header {
            src_port: 0xC000 | (qpn as u16 & 0x3FFF),
            src: local,
            dst: peer,
        };
        hdr.emit(&mut pd)
            .map_err(|_| proto::cm::CmError::PrivateDataTooLong {
                what: "REQ",
                len: cma::HEADER_LEN,
                max: 92,
            })?;
        pd.extend_from_slice(&opts.private_data);
        let p = ConnectParams {
            peer: Gid::from(peer),
            service_id: cma::service_id(opts.port_space, port),
            qpn: Qpn::from_masked(qpn),
            transport: TransportType::Rc,
            starting_psn: start_psn(qpn),
            responder_resources: opts.responder_resources,
            initiator_depth: opts.initiator_depth,
            flow_control: true,
            retry_count: opts.retry_count,
            rnr_retry_count: opts.rnr_retry_count,
            srq: false,
            path_mtu: e.info().port.active_mtu.raw() as u8,
            path: PathParams::default(),
            private_data: pd,
        };
        let id = e.cm_mut().connect_with(now, &p, opts.timing)?;
        hub.set(Route::Conn(id.0), &ch);
        if let Err(err) = modify_to(e, h, id, QpTarget::Init) {
            let _ = e.cm_mut().destroy(now, id);
            return Err(err);
        }
        Ok(id)
    })?;
    Ok(Connecting {
        conn: Some(Connection {
            qp,
            dev,
            id,
            ch,
            peer_private_data: Vec::new(),
            peer,
            disconnected: false,
        }),
        port,
    })
}

impl Connecting {
    /// The QP (already in INIT: receives may be posted before [`Connecting::wait`]).
    pub fn qp(&self) -> Option<&QueuePair<Rc>> {
        self.conn.as_ref().map(|c| &c.qp)
    }

    /// The channel the outcome arrives on.
    pub fn channel(&self) -> Option<&Arc<CmChannel>> {
        self.conn.as_ref().map(|c| &c.ch)
    }

    /// Waits (at most `timeout`) for the REP, then moves the QP to RTR and
    /// RTS and sends the RTU; or reports the rejection or silence.
    pub fn wait(mut self, timeout: Duration) -> Result<Connection, CmError> {
        let mut conn = self.conn.take().ok_or(CmError::TimedOut(timeout))?;
        let id = conn.id;
        let e = conn
            .ch
            .take(Some(Instant::now() + timeout), |e| match e {
                CmEvent::ConnectResponse { id: i, .. }
                | CmEvent::Rejected { id: i, .. }
                | CmEvent::Unreachable { id: i, .. }
                | CmEvent::Disconnected { id: i, .. } => *i == id,
                _ => false,
            })
            .ok_or(CmError::TimedOut(timeout))?;
        match e {
            CmEvent::ConnectResponse { reply, .. } => {
                let h = conn.qp.handle();
                conn.dev.cm(|e, _| {
                    modify_to(e, h, id, QpTarget::Rtr)?;
                    modify_to(e, h, id, QpTarget::Rts)?;
                    e.cm_mut().ready_to_use(id, &[])?;
                    Ok::<_, CmError>(())
                })?;
                conn.peer_private_data = reply.private_data;
                Ok(conn)
            }
            CmEvent::Rejected {
                reason: RejReason::InvalidServiceId,
                ..
            } => Err(CmError::NobodyListening {
                peer: conn.peer,
                port: self.port,
            }),
            CmEvent::Rejected {
                reason,
                private_data,
                ..
            } => Err(CmError::Rejected {
                reason,
                private_data,
            }),
            CmEvent::Unreachable { sends, .. } => Err(CmError::Unreachable { sends }),
            _ => Err(CmError::Disconnected),
        }
    }
}

/// `rdma_connect` on an RC QP in RESET: the REQ to `port` at `peer`, then
/// the QP through INIT/RTR/RTS and the RTU. Waits at most `opts.wait`.
pub fn connect(
    qp: QueuePair<Rc>,
    peer: IpAddr,
    port: u16,
    opts: &ConnectOptions,
) -> Result<Connection, CmError> {
    connect_start(qp, peer, port, opts)?.wait(opts.wait)
}

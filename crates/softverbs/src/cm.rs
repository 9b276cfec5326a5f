//! Connection management: connect and accept RC queue pairs over IBTA CM on
//! RoCEv2 (MADs on QP1, with rdma_cm's service IDs and private-data header,
//! spec/cm.md), and resolve UD services (SIDR).
//!
//! The device's [`proto::cm::Cm`] runs inside its engine (QP1, driven by the
//! progress thread); this module is its owner. [`Listener`] listens on
//! (device address, port, port space) and yields [`ConnectRequest`]s that
//! [`ConnectRequest::accept`] or [`ConnectRequest::reject`]; [`connect`]
//! sends a REQ and returns a [`Connection`]. Both drive the caller's RC QP
//! through INIT → RTR → RTS with the attributes the CM negotiated (QPNs,
//! PSNs, MTU, responder resources / initiator depth, retry counts, ACK
//! timeout), as `rdma_accept`/`rdma_connect` do. [`Connection::disconnect`]
//! moves the QP to ERR (flushing its work requests) and sends the DREQ (or
//! the DREP when the peer disconnected first).
//!
//! Every call blocks at most for the timeout it is given. Events are also
//! available without blocking, each object's on a file descriptor that is
//! readable while events wait ([`CmChannel`]): the C ABI's event channel polls it.
//!
//! # The narrow interface for librdmacm
//! `rdma_listen` → [`Listener::bind`]; `rdma_connect` → [`connect`] (or
//! [`connect_start`] + [`Connection::next_event`] for the asynchronous form);
//! `RDMA_CM_EVENT_CONNECT_REQUEST` → [`Listener::try_request`] on the
//! channel's fd; `rdma_accept` → [`ConnectRequest::accept`]; `rdma_reject` →
//! [`ConnectRequest::reject`]; `rdma_disconnect` → [`Connection::disconnect`];
//! `RDMA_CM_EVENT_DISCONNECTED` → [`Connection::next_event`];
//! `rdma_resolve_route` for UD → [`resolve_ud`]. Options
//! (`RDMA_OPTION_ID_ACK_TIMEOUT`, the kernel's `cma_response_timeout` and
//! `max_cm_retries`) → [`ConnectOptions::timing`].

use crate::device::Shared;
use crate::pd::ProtectionDomain;
use crate::qp::{QueuePair, Rc};
use proto::cm::{
    AcceptParams, Cm, CmEvent, CmQpAttrs, ConnId, ConnectParams, ListenId, PathParams, QpTarget,
};
use proto::types::Gid;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};
use sv_io::EventFd;
use wire::cm::cma::{self, Header};
use wire::cm::TransportType;
use wire::{Psn, Qpn};

pub use proto::cm::{CmCounters, CmTiming, DropReason};
pub use wire::cm::cma::PortSpace;
pub use wire::cm::{RejReason, SidrStatus};

/// The user's part of REQ private data (92 bytes minus the 36-byte header).
pub const REQ_PRIVATE_DATA_MAX: usize = 56;
/// Private data of a REP.
pub const REP_PRIVATE_DATA_MAX: usize = 196;
/// Private data of a REJ.
pub const REJ_PRIVATE_DATA_MAX: usize = 148;

/// What went wrong with a connection, in words and with the peer's answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[allow(missing_docs)] // the fields are what the variant's text names
pub enum CmError {
    /// The peer refused (REJ); `private_data` is the REJ's 148 bytes.
    #[error("rejected by the peer: {reason:?}")]
    Rejected {
        reason: RejReason,
        private_data: Vec<u8>,
    },
    /// Nobody listens on that port at the peer (REJ invalid service ID).
    #[error("nobody listens on port {port} at {peer}")]
    NobodyListening { peer: IpAddr, port: u16 },
    /// The peer never answered: the REQ (or REP) was sent `sends` times.
    #[error("no answer after {sends} sends (unreachable)")]
    Unreachable { sends: u8 },
    /// The caller's own wait ran out before the CM reached an outcome.
    #[error("no outcome within {0:?}")]
    TimedOut(Duration),
    /// The connection went down (DREQ) while waiting for something else.
    #[error("the peer disconnected")]
    Disconnected,
    /// A SIDR request was answered with a failure status.
    #[error("SIDR answered {0:?}")]
    Sidr(SidrStatus),
    /// The CM refused the call (state, lengths, listener in use).
    #[error(transparent)]
    Cm(#[from] proto::cm::CmError),
    /// A verbs call on the QP failed (its modify to INIT/RTR/RTS/ERR).
    #[error("queue pair: {0}")]
    Qp(#[from] proto::Error),
    /// The peer's addresses are of another family than the device's.
    #[error("{peer} is not reachable from the device's address {local}")]
    AddressFamily { local: IpAddr, peer: IpAddr },
    /// An operating-system resource (the event fd) could not be made.
    #[error("event fd: {0}")]
    Os(std::io::ErrorKind),
    /// Private data longer than the message carries.
    #[error("{what} private data is {len} bytes, at most {max}")]
    PrivateDataTooLong {
        what: &'static str,
        len: usize,
        max: usize,
    },
}

/// Where events wait: a queue, a condition variable for blocking waits and
/// an eventfd that is readable while the queue is not empty.
pub struct CmChannel {
    q: Mutex<VecDeque<CmEvent>>,
    cv: Condvar,
    fd: EventFd,
}

impl CmChannel {
    fn new() -> Result<Arc<CmChannel>, CmError> {
        Ok(Arc::new(CmChannel {
            q: Mutex::new(VecDeque::new()),
            cv: Condvar::new(),
            fd: EventFd::new().map_err(|e| CmError::Os(e.kind()))?,
        }))
    }

    fn push(&self, e: CmEvent) {
        let mut q = self.q.lock().unwrap_or_else(|p| p.into_inner());
        q.push_back(e);
        let _ = self.fd.add(1);
        self.cv.notify_all();
    }

    /// The first event `pick` accepts, waiting until `deadline`.
    fn take(&self, deadline: Option<Instant>, pick: impl Fn(&CmEvent) -> bool) -> Option<CmEvent> {
        let mut q = self.q.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(i) = q.iter().position(&pick) {
                let e = q.remove(i);
                if q.is_empty() {
                    let _ = self.fd.take();
                }
                return e;
            }
            let left = deadline?.checked_duration_since(Instant::now())?;
            q = self
                .cv
                .wait_timeout(q, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Waits (poll(2) on [`CmChannel::fd`]) until an event waits or `timeout`
    /// passes; true when one waits.
    pub fn wait_readable(&self, timeout: Option<Duration>) -> bool {
        self.fd.wait_readable(timeout).unwrap_or(false)
    }

    /// Events waiting (of every object routed to this channel).
    pub fn len(&self) -> usize {
        self.q.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// True when no event waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The file descriptor: readable while events wait.
    pub fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.fd.as_raw_fd()
    }
}

/// Routes the device CM's events to the channel of the object they concern.
#[derive(Default)]
pub(crate) struct Hub {
    routes: Mutex<HashMap<Route, Weak<CmChannel>>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Route {
    Listen(u64),
    Conn(u32),
}

impl Hub {
    fn set(&self, r: Route, ch: &Arc<CmChannel>) {
        let mut m = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        m.insert(r, Arc::downgrade(ch));
    }

    fn unset(&self, r: Route) {
        let mut m = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        m.remove(&r);
    }

    /// Moves every event the CM has to its channel (called under the engine lock).
    pub(crate) fn drain(&self, cm: &mut Cm) {
        while let Some(e) = cm.poll_event() {
            let (route, new_conn) = match &e {
                CmEvent::ConnectRequest { id, listen, .. }
                | CmEvent::SidrRequest { id, listen, .. } => (Route::Listen(listen.0), Some(*id)),
                CmEvent::ConnectResponse { id, .. }
                | CmEvent::Established { id }
                | CmEvent::Rejected { id, .. }
                | CmEvent::Unreachable { id, .. }
                | CmEvent::Disconnected { id, .. }
                | CmEvent::TimewaitExit { id }
                | CmEvent::SidrResolved { id, .. }
                | CmEvent::SidrUnreachable { id, .. } => (Route::Conn(id.0), None),
            };
            let ch = {
                let m = self.routes.lock().unwrap_or_else(|p| p.into_inner());
                m.get(&route).and_then(Weak::upgrade)
            };
            match (ch, new_conn) {
                (Some(ch), Some(id)) => {
                    // Until accepted, the request's later events go to the listener.
                    self.set(Route::Conn(id.0), &ch);
                    ch.push(e);
                }
                (Some(ch), None) => ch.push(e),
                (None, Some(id)) => {
                    // The listener is gone: refuse, as the kernel does for a
                    // destroyed listen ID.
                    let _ = cm.destroy(id);
                }
                (None, None) => {
                    if let CmEvent::TimewaitExit { .. } = e {
                        continue;
                    }
                    tracing::debug!(target: "softverbs::cm", "event for a forgotten id: {e:?}");
                }
            }
        }
    }
}

impl Shared {
    /// Runs `f` on the CM under the engine lock, routes the events it made,
    /// and wakes the progress thread to send its MADs.
    pub(crate) fn cm<R>(&self, f: impl FnOnce(&mut proto::Engine, u64) -> R) -> R {
        let now = self.driver.now();
        let r = self.driver.with(|d| {
            let r = f(&mut d.engine, now);
            d.cm_hub.drain(d.engine.cm_mut());
            r
        });
        self.driver.doorbell();
        r
    }

    pub(crate) fn hub(&self) -> Arc<Hub> {
        self.driver.with(|d| d.cm_hub.clone())
    }
}

/// How to connect (`struct rdma_conn_param` and the id's options).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectOptions {
    /// Port space of the service (rdma_cm: TCP for RC).
    pub port_space: PortSpace,
    /// At most [`REQ_PRIVATE_DATA_MAX`] bytes.
    pub private_data: Vec<u8>,
    /// RDMA READs/atomics we accept at once (0..=255).
    pub responder_resources: u8,
    /// RDMA READs/atomics we issue at once.
    pub initiator_depth: u8,
    /// Transport retries (0..=7).
    pub retry_count: u8,
    /// RNR retries (0..=7, 7 = infinite).
    pub rnr_retry_count: u8,
    /// MAD timing (rdma_cm's defaults: life 18, response timeout 20, 15 retries).
    pub timing: CmTiming,
    /// The longest this call waits for an outcome (beyond it: [`CmError::TimedOut`]).
    pub wait: Duration,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            port_space: PortSpace::Tcp,
            private_data: Vec::new(),
            responder_resources: 16,
            initiator_depth: 16,
            retry_count: 7,
            rnr_retry_count: 7,
            timing: CmTiming {
                packet_life_time: 18,
                cm_response_timeout: 20,
                max_cm_retries: 15,
            },
            wait: Duration::from_secs(120),
        }
    }
}

/// A PSN to start from: different per connection, as rdma_cm's random seq_num.
fn start_psn(salt: u32) -> Psn {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    Psn::from_masked(t.wrapping_mul(2_654_435_761) ^ salt.wrapping_mul(40_503))
}

fn device_ip(e: &proto::Engine) -> IpAddr {
    e.info().gids.first().copied().unwrap_or(Gid::ZERO).ip()
}

/// Applies the CM's attributes for `target` to the QP (one `modify_qp`).
fn modify_to(
    e: &mut proto::Engine,
    qp: proto::engine::QpHandle,
    id: ConnId,
    target: QpTarget,
) -> Result<(), CmError> {
    let a: CmQpAttrs = e.cm_mut().qp_attrs(id, target)?;
    let (attr, mask) = a
        .to_verbs(target, 0)
        .ok_or(proto::cm::CmError::OutOfRange {
            field: "path_mtu",
            value: u64::from(a.path_mtu.unwrap_or(0)),
            max: 5,
        })?;
    e.modify_qp(qp, &attr, mask)?;
    Ok(())
}

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
                Some(_) => continue,
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
        let _ = self.dev.cm(|e, _| e.cm_mut().destroy(id));
        hub.unset(Route::Conn(id.0));
    }
}

/// A listener on (device address, port, port space) (`rdma_listen`).
pub struct Listener {
    dev: Arc<Shared>,
    listen: ListenId,
    ch: Arc<CmChannel>,
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
            let _ = self.dev.cm(|e, _| e.cm_mut().destroy(id));
        }
        // Accepted connections re-routed the id to their own channel.
        if !self.answered || hub_points_to(&hub, id, &self.ch) {
            hub.unset(Route::Conn(id.0));
        }
    }
}

fn hub_points_to(hub: &Hub, id: ConnId, ch: &Arc<CmChannel>) -> bool {
    let m = hub.routes.lock().unwrap_or_else(|p| p.into_inner());
    m.get(&Route::Conn(id.0))
        .and_then(Weak::upgrade)
        .is_some_and(|c| Arc::ptr_eq(&c, ch))
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
            let _ = e.cm_mut().destroy(id);
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

/// A UD service resolved through SIDR: where to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdService {
    /// The remote UD QP number.
    pub qpn: u32,
    /// Its Q_Key.
    pub qkey: u32,
    /// The SIDR_REP's private data (136 bytes).
    pub private_data: Vec<u8>,
}

/// `rdma_resolve_route` + `rdma_connect` for a UD id: resolves `port` (UDP
/// port space) at `peer` to a QPN and Q_Key (SIDR_REQ/SIDR_REP).
pub fn resolve_ud(
    pd: &ProtectionDomain,
    peer: IpAddr,
    port: u16,
    private_data: &[u8],
    wait: Duration,
) -> Result<UdService, CmError> {
    let dev = pd.inner.ctx.dev.clone();
    let ch = CmChannel::new()?;
    let hub = dev.hub();
    let id = dev.cm(|e, now| {
        let local = device_ip(e);
        let mut pd = vec![0u8; cma::HEADER_LEN];
        let hdr = Header {
            src_port: 0,
            src: local,
            dst: peer,
        };
        let _ = hdr.emit(&mut pd);
        pd.extend_from_slice(private_data);
        let sid = cma::service_id(PortSpace::Udp, port);
        let id = e.cm_mut().sidr_request(now, Gid::from(peer), sid, &pd)?;
        hub.set(Route::Conn(id.0), &ch);
        Ok::<_, CmError>(id)
    })?;
    let e = ch.take(Some(Instant::now() + wait), |e| {
        matches!(e, CmEvent::SidrResolved { id: i, .. } | CmEvent::SidrUnreachable { id: i, .. } if *i == id)
    });
    hub.unset(Route::Conn(id.0));
    match e {
        Some(CmEvent::SidrResolved {
            qpn,
            qkey,
            private_data,
            ..
        }) => Ok(UdService {
            qpn: qpn.get(),
            qkey,
            private_data,
        }),
        Some(CmEvent::SidrUnreachable {
            status: Some(s), ..
        }) => Err(CmError::Sidr(s)),
        Some(CmEvent::SidrUnreachable { sends, .. }) => Err(CmError::Unreachable { sends }),
        _ => {
            let _ = dev.cm(|e, _| e.cm_mut().destroy(id));
            Err(CmError::TimedOut(wait))
        }
    }
}

impl Listener {
    /// Answers the next SIDR request (waiting at most `wait`) with `qpn` and
    /// `qkey` (`rdma_accept` on a UD id). Returns the requester's private data
    /// (its user part).
    pub fn answer_sidr(&self, qpn: u32, qkey: u32, wait: Duration) -> Result<Vec<u8>, CmError> {
        let e = self
            .ch
            .take(Some(Instant::now() + wait), |e| {
                matches!(e, CmEvent::SidrRequest { .. })
            })
            .ok_or(CmError::TimedOut(wait))?;
        let CmEvent::SidrRequest {
            id, private_data, ..
        } = e
        else {
            return Err(CmError::TimedOut(wait));
        };
        let hub = self.dev.hub();
        self.dev.cm(|e, _| {
            e.cm_mut()
                .sidr_reply(id, SidrStatus::Success, Qpn::from_masked(qpn), qkey, &[])
        })?;
        hub.unset(Route::Conn(id.0));
        Ok(match Header::parse(&private_data) {
            Ok(_) => private_data[cma::HEADER_LEN..].to_vec(),
            Err(_) => private_data,
        })
    }
}

impl crate::Context {
    /// The device CM's counters: MADs sent/received by kind, drops by reason.
    pub fn cm_counters(&self) -> CmCounters {
        self.inner
            .dev
            .driver
            .with(|d| d.engine.cm_counters().clone())
    }

    /// Datagrams for QP1 that never reached the CM (not a GSI MAD).
    pub fn gsi_counters(&self) -> proto::gsi::GsiCounters {
        self.inner.dev.driver.with(|d| d.engine.gsi_counters())
    }
}

/// Per-process, per-start entropy for the CM's comm IDs and TIDs.
pub(crate) fn seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    t ^ (u64::from(std::process::id()) << 32)
}

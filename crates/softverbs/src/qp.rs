//! Queue pairs: creation, the general modify, query and destroy. The typed
//! transitions are in `transition.rs`.

use crate::cq::{CompletionQueue, CqInner};
use crate::error::{logged, DestroyError, Error};
use crate::pd::{PdInner, ProtectionDomain};
use crate::srq::{SharedReceiveQueue, SrqInner};
use proto::engine::{QpCreate, QpHandle};
use proto::qp::create::{comp_mask, QpRequest};
use proto::{AttrMask, QpAttr, QpCap, QpState, QpType};
use std::marker::PhantomData;
use std::sync::Arc;

/// A transport, as a type: what a [`QueuePair`] is statically known to be.
pub trait Transport: Send + Sync + 'static {
    /// The QP type, when statically known.
    const TYPE: Option<QpType>;
}

/// Reliable connection.
pub enum Rc {}
/// Unreliable connection.
pub enum Uc {}
/// Unreliable datagram.
pub enum Ud {}
/// A QP whose type is only known at run time.
pub enum AnyTransport {}

impl Transport for Rc {
    const TYPE: Option<QpType> = Some(QpType::Rc);
}
impl Transport for Uc {
    const TYPE: Option<QpType> = Some(QpType::Uc);
}
impl Transport for Ud {
    const TYPE: Option<QpType> = Some(QpType::Ud);
}
impl Transport for AnyTransport {
    const TYPE: Option<QpType> = None;
}

/// What a QP is created with (`struct ibv_qp_init_attr(_ex)`).
#[derive(Clone, Copy)]
pub struct QpInit<'a> {
    /// CQ for send completions.
    pub send_cq: &'a CompletionQueue,
    /// CQ for receive completions (also with an SRQ).
    pub recv_cq: &'a CompletionQueue,
    /// Receive from this SRQ instead of an own receive queue (RC, UD).
    pub srq: Option<&'a SharedReceiveQueue>,
    /// Requested capacities; the QP gets at least these.
    pub cap: QpCap,
    /// Every send WR generates a completion.
    pub sq_sig_all: bool,
    /// `ibv_create_qp_ex` comp_mask (`IBV_QP_INIT_ATTR_PD` for the plain call).
    pub comp_mask: u32,
    /// `create_flags` (with `IBV_QP_INIT_ATTR_CREATE_FLAGS`); none are supported.
    pub create_flags: u32,
    /// `send_ops_flags` (with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`).
    pub send_ops_flags: u64,
    /// `max_tso_header` (with `IBV_QP_INIT_ATTR_MAX_TSO_HEADER`; RAW_PACKET
    /// only): the largest header of the QP's TSO work requests.
    pub max_tso_header: u16,
}

impl<'a> QpInit<'a> {
    /// Defaults: 16 send and 16 receive WRs, one SGE each, no inline data, no SRQ,
    /// only signaled WRs complete.
    pub fn new(send_cq: &'a CompletionQueue, recv_cq: &'a CompletionQueue) -> Self {
        QpInit {
            send_cq,
            recv_cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 16,
                max_recv_wr: 16,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
            comp_mask: comp_mask::PD,
            create_flags: 0,
            send_ops_flags: 0,
            max_tso_header: 0,
        }
    }
}

/// How a QP is set up besides the engine's QP.
enum Setup {
    Plain,
    Hidden,
    Rss(Arc<dyn RssTable>, crate::device::RssDispatch),
}

/// What an RSS QP holds of its indirection table (rss.rs implements it): the
/// table lives as long as the QP, and counts the QPs over it (a table in
/// use is not destroyed).
pub(crate) trait RssTable: Send + Sync {
    /// An RSS QP over the table was made.
    fn qp_added(&self);
    /// An RSS QP over the table is gone.
    fn qp_removed(&self);
}

/// A RAW_PACKET QP's packet socket (spec/raw-packet.md): without it (no
/// `CAP_NET_RAW`: `EPERM`) the QP is destroyed again and creation fails. The
/// engine learns the interface's MTU, which bounds a frame.
fn open_raw(pd: &Arc<PdInner>, h: QpHandle, qpn: u32) -> Result<(), Error> {
    match pd.ctx.dev.driver.open_raw(qpn) {
        Ok(port) => {
            let max = port.mtu + proto::datapath::ETH_HEADER_LEN + proto::datapath::VLAN_TAG_LEN;
            pd.with(|e| e.set_raw_frame_max(max));
            Ok(())
        }
        Err(source) => {
            let _ = pd.with(|e| e.destroy_qp(h));
            let err = Error::RawPacket {
                source: source.into(),
            };
            tracing::debug!(error = %err, "create_qp refused");
            Err(err)
        }
    }
}

/// A flow steering rule attached to a RAW_PACKET QP (`struct ibv_flow`):
/// frames it matches go to the QP's receive queue. Destroyed when dropped.
pub struct Flow {
    qp: Arc<QpInner>,
    id: u64,
}

impl Flow {
    /// `ibv_destroy_flow`.
    pub fn destroy(self) {}
}

impl Drop for Flow {
    fn drop(&mut self) {
        self.qp.pd.ctx.dev.driver.remove_flow(self.qp.qpn, self.id);
        self.qp
            .flows
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl std::fmt::Debug for Flow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flow")
            .field("qp_num", &self.qp.qpn)
            .field("id", &self.id)
            .finish()
    }
}

/// A queue pair (`struct ibv_qp`) of transport `T`.
pub struct QueuePair<T: Transport = AnyTransport> {
    inner: Arc<QpInner>,
    _transport: PhantomData<T>,
}

struct QpInner {
    pd: Arc<PdInner>,
    _cqs: Vec<Arc<CqInner>>,
    _srq: Option<Arc<SrqInner>>,
    /// An XRC_RECV QP's handle's XRC domain open (the engine's handle, and
    /// the domain object, kept alive while the QP is).
    xrcd: Option<(
        proto::handle::XrcdHandle,
        Arc<dyn std::any::Any + Send + Sync>,
    )>,
    h: QpHandle,
    qpn: u32,
    qp_type: QpType,
    cap: QpCap,
    /// The receive ring `post_recv` writes without the engine lock.
    recv_ring: Option<Arc<proto::rq::RecvRing>>,
    /// The send ring `post_send` writes without the engine lock (none for
    /// RAW_PACKET and XRC_RECV QPs, which post under the engine).
    send_ring: Option<Arc<proto::sq::SendRing>>,
    /// Flows steering to this QP (`ibv_destroy_qp` is `EBUSY` meanwhile).
    flows: std::sync::atomic::AtomicUsize,
    /// What kind of RAW_PACKET QP it is (none for other types).
    raw: RawKind,
}

/// A RAW_PACKET QP with its own packet socket, a work queue's hidden QP
/// (rss.rs: no socket), or an RSS QP (a socket, frames spread over a table).
enum RawKind {
    NotRaw,
    Socket,
    Hidden,
    Rss(Arc<dyn RssTable>),
}

impl Drop for QpInner {
    fn drop(&mut self) {
        self.let_posted_sends_leave();
        match &self.raw {
            RawKind::Socket => self.pd.ctx.dev.driver.close_raw(self.qpn),
            RawKind::Rss(table) => {
                self.pd.ctx.dev.driver.close_raw(self.qpn);
                let qpn = self.qpn;
                self.pd.ctx.dev.with_device(|d| d.rss.remove(&qpn));
                table.qp_removed();
            }
            RawKind::NotRaw | RawKind::Hidden => {}
        }
        // The last handle is gone: detach (as closing the verbs file does), destroy.
        let (left, groups) = self.pd.with(|e| {
            if let Some(counters) = e.qp_counters(self.h) {
                tracing::debug!(qpn = self.qpn, ?counters, "QP destroyed");
            }
            let left = e.forget_mcast(self.h);
            let _ = match &self.xrcd {
                // This handle of an XRC_RECV QP others may hold too.
                Some((x, _)) => e.destroy_xrc_qp_handle(self.h, *x),
                None => e.destroy_qp(self.h),
            };
            (left, e.mcast_groups())
        });
        if left {
            if let Err(e) = self.pd.ctx.dev.driver.set_groups(&groups) {
                tracing::warn!(error = %e, "leaving multicast groups failed");
            }
        }
    }
}

impl QpInner {
    /// A NIC executes the send WQEs whose doorbell it got before a destroy
    /// command reaches it (rxe even transmits in the posting call), so a
    /// program may post datagrams and destroy the QP at once (mckey's sender
    /// does). Here the progress thread sends them: the destroy waits until
    /// the QP has nothing left to transmit, at most 100 ms.
    fn let_posted_sends_leave(&self) {
        use std::time::{Duration, Instant};
        const MAX_WAIT: Duration = Duration::from_millis(100);
        let h = self.h;
        let dev = &self.pd.ctx.dev;
        // What was left to a polling thread (an ACK its poll deferred) first.
        dev.driver.flush_left();
        let pending = || self.pd.with(|e| e.qp_tx_pending(h));
        if !pending() {
            // Nothing queued: an idle QP is destroyed at once.
            return;
        }
        let deadline = Instant::now() + MAX_WAIT;
        while pending() && Instant::now() < deadline {
            dev.doorbell();
            std::thread::sleep(Duration::from_micros(200));
        }
        // The last packets taken may still wait in the progress thread's
        // batch: one more whole pass has flushed them.
        let seen = dev.driver.counters().passes;
        while dev.driver.counters().passes <= seen && Instant::now() < deadline {
            dev.doorbell();
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// Attach or detach in the engine, then the driver's memberships follow;
    /// an attach whose join fails is undone.
    fn mcast(&self, gid: &proto::Gid, attach: bool) -> Result<(), Error> {
        let h = self.h;
        let done = self.pd.with(|e| {
            let m = if attach {
                e.attach_mcast(h, gid)
            } else {
                e.detach_mcast(h, gid)
            };
            m.map(|m| (m, e.mcast_groups()))
        });
        let (m, groups) = logged(
            if attach {
                "attach_mcast"
            } else {
                "detach_mcast"
            },
            done,
        )?;
        if !m.changed {
            return Ok(());
        }
        let driver = &self.pd.ctx.dev.driver;
        let Err(source) = driver.set_groups(&groups) else {
            return Ok(());
        };
        if attach {
            let groups = self.pd.with(|e| {
                let _ = e.detach_mcast(h, gid);
                e.mcast_groups()
            });
            let _ = driver.set_groups(&groups);
        }
        let op = if attach {
            "joining the IP multicast group"
        } else {
            "leaving the IP multicast group"
        };
        let e = Error::Os {
            op,
            source: source.into(),
        };
        tracing::warn!(error = %e, "{op}");
        Err(e)
    }
}

/// What `ibv_query_qp` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInfo {
    /// The attributes; fields not in `valid` hold `QpAttr::default()`'s values.
    pub attr: QpAttr,
    /// Which attributes are valid in the current state.
    pub valid: AttrMask,
    /// QP type (`init_attr.qp_type`).
    pub qp_type: QpType,
    /// Capacities (`init_attr.cap`).
    pub cap: QpCap,
    /// `init_attr.sq_sig_all`.
    pub sq_sig_all: bool,
    /// Whether the QP receives through an SRQ.
    pub has_srq: bool,
}

impl QpInfo {
    /// The state.
    pub fn state(&self) -> QpState {
        self.attr.qp_state
    }
}

impl QueuePair<AnyTransport> {
    pub(crate) fn create(pd: Arc<PdInner>, init: &QpInit<'_>, qp_type: u32) -> Result<Self, Error> {
        Self::create_as(pd, init, qp_type, Setup::Plain)
    }

    /// A work queue's receive-only RAW_PACKET QP, with no packet socket (rss.rs).
    pub(crate) fn create_hidden(pd: Arc<PdInner>, init: &QpInit<'_>) -> Result<Self, Error> {
        Self::create_as(pd, init, QpType::RawPacket.raw(), Setup::Hidden)
    }

    /// An RSS QP over `table` (rss.rs): its engine QP (on `cq`, the first
    /// WQ's, never moved from RESET: it neither sends nor receives itself),
    /// its packet socket, and the device's dispatch of its frames.
    pub(crate) fn create_rss(
        pd: Arc<PdInner>,
        table: Arc<dyn RssTable>,
        cq: &CompletionQueue,
        dispatch: crate::device::RssDispatch,
    ) -> Result<Self, Error> {
        let init = QpInit {
            cap: QpCap {
                max_send_wr: 0,
                max_recv_wr: 0,
                max_send_sge: 0,
                max_recv_sge: 0,
                max_inline_data: 0,
            },
            ..QpInit::new(cq, cq)
        };
        Self::create_as(
            pd,
            &init,
            QpType::RawPacket.raw(),
            Setup::Rss(table, dispatch),
        )
    }

    fn create_as(
        pd: Arc<PdInner>,
        init: &QpInit<'_>,
        qp_type: u32,
        setup: Setup,
    ) -> Result<Self, Error> {
        let req = QpRequest {
            qp_type,
            cap: init.cap,
            has_srq: init.srq.is_some(),
            comp_mask: init.comp_mask,
            create_flags: init.create_flags,
            send_ops_flags: init.send_ops_flags,
            max_tso_header: init.max_tso_header,
        };
        let c = QpCreate {
            pd: pd.h,
            send_cq: Some(init.send_cq.inner.h),
            recv_cq: Some(init.recv_cq.inner.h),
            srq: init.srq.map(|s| s.inner.h),
            req,
            sq_sig_all: init.sq_sig_all,
        };
        let (created, recv_ring, send_ring) = logged(
            "create_qp",
            pd.with(|e| {
                e.create_qp(&c).map(|cr| {
                    let send = e.send_ring(cr.handle).ok();
                    (cr, e.recv_ring(cr.handle).ok(), send)
                })
            }),
        )?;
        let send_ring = send_ring.filter(|_| created.qp_type != QpType::RawPacket);
        let raw = match (created.qp_type, setup) {
            (QpType::RawPacket, Setup::Hidden) => RawKind::Hidden,
            (QpType::RawPacket, Setup::Plain) => {
                open_raw(&pd, created.handle, created.qpn)?;
                RawKind::Socket
            }
            (QpType::RawPacket, Setup::Rss(table, dispatch)) => {
                open_raw(&pd, created.handle, created.qpn)?;
                let qpn = created.qpn;
                pd.ctx.dev.with_device(|d| d.rss.insert(qpn, dispatch));
                table.qp_added();
                RawKind::Rss(table)
            }
            _ => RawKind::NotRaw,
        };
        let inner = QpInner {
            recv_ring,
            send_ring,
            pd,
            _cqs: vec![init.send_cq.inner.clone(), init.recv_cq.inner.clone()],
            _srq: init.srq.map(|s| s.inner.clone()),
            xrcd: None,
            h: created.handle,
            qpn: created.qpn,
            qp_type: created.qp_type,
            cap: created.cap,
            flows: Default::default(),
            raw,
        };
        Ok(QueuePair {
            inner: Arc::new(inner),
            _transport: PhantomData,
        })
    }

    /// An XRC_RECV QP (created or opened) in an XRC domain: no PD, no CQs.
    pub(crate) fn xrc_target(
        pd: Arc<PdInner>,
        created: &proto::engine::QpCreated,
        xrcd: (
            proto::handle::XrcdHandle,
            Arc<dyn std::any::Any + Send + Sync>,
        ),
    ) -> Self {
        let inner = QpInner {
            pd,
            _cqs: Vec::new(),
            _srq: None,
            xrcd: Some(xrcd),
            h: created.handle,
            qpn: created.qpn,
            qp_type: created.qp_type,
            cap: created.cap,
            // An XRC_RECV QP has no receive queue of its own (its SRQs do).
            recv_ring: None,
            // Nor a send queue.
            send_ring: None,
            flows: Default::default(),
            raw: RawKind::NotRaw,
        };
        QueuePair {
            inner: Arc::new(inner),
            _transport: PhantomData,
        }
    }

    /// The typed view of this QP, if it is of transport `T`.
    pub fn typed<T: Transport>(self) -> Result<QueuePair<T>, Self> {
        if T::TYPE.is_none() || T::TYPE == Some(self.inner.qp_type) {
            Ok(self.retype())
        } else {
            Err(self)
        }
    }
}

impl<T: Transport> QueuePair<T> {
    /// The receive CQ's shared part.
    pub(crate) fn cq_inner(&self) -> Arc<CqInner> {
        self.inner._cqs[1].clone()
    }

    pub(crate) fn retype<U: Transport>(self) -> QueuePair<U> {
        QueuePair {
            inner: self.inner,
            _transport: PhantomData,
        }
    }

    /// The receive ring (posting without the engine lock).
    pub(crate) fn recv_ring(&self) -> Option<&Arc<proto::rq::RecvRing>> {
        self.inner.recv_ring.as_ref()
    }

    /// The send ring (posting without the engine lock).
    pub(crate) fn send_ring(&self) -> Option<&Arc<proto::sq::SendRing>> {
        self.inner.send_ring.as_ref()
    }

    pub(crate) fn handle(&self) -> QpHandle {
        self.inner.h
    }

    pub(crate) fn pd(&self) -> &PdInner {
        &self.inner.pd
    }

    /// An identifier that async events name this QP by.
    pub fn id(&self) -> u64 {
        self.inner.h.raw()
    }

    /// Forgets the static transport.
    pub fn untyped(self) -> QueuePair<AnyTransport> {
        self.retype()
    }

    /// The 24-bit QP number.
    pub fn qp_num(&self) -> u32 {
        self.inner.qpn
    }

    /// The QP type.
    pub fn qp_type(&self) -> QpType {
        self.inner.qp_type
    }

    /// The capacities granted at creation (each ≥ the request).
    pub fn cap(&self) -> QpCap {
        self.inner.cap
    }

    /// `ibv_modify_qp`: the general form. Checked completely against the verbs
    /// table and every value rule before anything changes; a refused call
    /// changes nothing, not even the state.
    pub fn modify(&self, attr: &QpAttr, mask: AttrMask) -> Result<(), Error> {
        let h = self.inner.h;
        // An ACK a poll left to this thread leaves before the state changes.
        self.inner.pd.ctx.dev.driver.flush_left();
        logged(
            "modify_qp",
            self.inner.pd.with(|e| e.modify_qp(h, attr, mask).map(drop)),
        )
    }

    /// `ibv_query_qp`: every attribute valid in the current state, and init_attr.
    pub fn query(&self) -> Result<QpInfo, Error> {
        let h = self.inner.h;
        let (attr, valid, init) = logged("query_qp", self.inner.pd.with(|e| e.query_qp(h)))?;
        Ok(QpInfo {
            attr,
            valid,
            qp_type: init.qp_type,
            cap: init.cap,
            sq_sig_all: init.sq_sig_all,
            has_srq: init.srq.is_some(),
        })
    }

    /// The current state (as `ibv_query_qp` reports it).
    pub fn state(&self) -> Result<QpState, Error> {
        Ok(self.query()?.state())
    }

    /// `ibv_destroy_qp`: allowed in any state; queued work requests are discarded
    /// without completions.
    ///
    /// Refused with `EBUSY` while the QP is attached to a multicast group
    /// (ibv_destroy_qp(3)); the QP is handed back. Dropping the last handle
    /// instead detaches and destroys.
    pub fn destroy(self) -> Result<(), DestroyError<Self>> {
        if let Err(error) = self.destroyable() {
            return Err(DestroyError {
                error,
                object: self,
            });
        }
        drop(self);
        Ok(())
    }

    /// Whether [`QueuePair::destroy`] would succeed: `EBUSY` while attached
    /// to a multicast group or while flows steer to it.
    pub fn destroyable(&self) -> Result<(), Error> {
        let flows = self.inner.flows.load(std::sync::atomic::Ordering::SeqCst);
        if flows > 0 {
            let e = Error::QpHasFlows {
                qpn: self.inner.qpn,
                flows,
            };
            tracing::debug!(error = %e, "destroy_qp refused");
            return Err(e);
        }
        let h = self.inner.h;
        logged("destroy_qp", self.inner.pd.with(|e| e.mcast_attached(h)))
    }

    /// `ibv_attach_mcast`: this QP receives the datagrams sent to the multicast
    /// group `gid` (an IPv4-mapped 224.0.0.0/4 GID on an IPv4 device, an
    /// ff00::/8 GID on an IPv6 one): the device joins the IP group on the
    /// interface of its address. UD QPs only (`EINVAL` otherwise); attaching
    /// twice succeeds. Senders reach the group with an address handle whose
    /// `dgid` is `gid` and remote QPN 0xFFFFFF. See `spec/multicast.md`.
    pub fn attach_mcast(&self, gid: &proto::Gid) -> Result<(), Error> {
        self.inner.mcast(gid, true)
    }

    /// `ibv_create_flow` with the rule in its C layout (`struct
    /// ibv_flow_attr` followed by its specs; spec/raw-packet.md §3 lists
    /// what is offered). RAW_PACKET QPs only: a UD QP's flows (IPoIB
    /// steering) are not offered (`EOPNOTSUPP`), other types are `EINVAL`.
    pub fn create_flow(&self, attr: &[u8]) -> Result<Flow, Error> {
        let q = &self.inner;
        let refuse = |what: String, unsupported: bool| {
            Error::Flow(if unsupported {
                sv_io::raw::FlowError::Unsupported { what }
            } else {
                sv_io::raw::FlowError::Invalid { what }
            })
        };
        match q.qp_type {
            QpType::RawPacket => {}
            QpType::Ud => {
                return Err(refuse("flow steering to a UD QP".into(), true));
            }
            t => {
                return Err(refuse(
                    format!("flows steer to RAW_PACKET QPs, not {t:?} QPs"),
                    false,
                ))
            }
        }
        let rule = sv_io::raw::flow::parse(attr).map_err(Error::Flow);
        let id = rule
            .and_then(|r| q.pd.ctx.dev.driver.add_flow(q.qpn, r).map_err(Error::Flow))
            .inspect_err(|e| tracing::debug!(error = %e, "create_flow refused"))?;
        q.flows.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(Flow { qp: q.clone(), id })
    }

    /// `ibv_detach_mcast`: `EINVAL` when the QP is not attached to `gid`.
    pub fn detach_mcast(&self, gid: &proto::Gid) -> Result<(), Error> {
        self.inner.mcast(gid, false)
    }
}

impl<T: Transport> std::fmt::Debug for QueuePair<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePair")
            .field("qp_num", &self.inner.qpn)
            .field("qp_type", &self.inner.qp_type)
            .finish()
    }
}

impl ProtectionDomain {
    /// `ibv_create_qp` / `ibv_create_qp_ex` with a raw `ibv_qp_type` value: types
    /// softverbs does not support (XRC, RAW_PACKET) are refused with `EOPNOTSUPP`.
    pub fn create_qp(
        &self,
        init: &QpInit<'_>,
        qp_type: u32,
    ) -> Result<QueuePair<AnyTransport>, Error> {
        QueuePair::create(self.inner.clone(), init, qp_type)
    }

    fn create_typed<T: Transport>(
        &self,
        init: &QpInit<'_>,
        t: QpType,
    ) -> Result<QueuePair<T>, Error> {
        QueuePair::create(self.inner.clone(), init, t.raw()).map(QueuePair::retype)
    }

    /// A reliable-connection QP.
    pub fn create_rc_qp(&self, init: &QpInit<'_>) -> Result<QueuePair<Rc>, Error> {
        self.create_typed(init, QpType::Rc)
    }

    /// An unreliable-connection QP.
    pub fn create_uc_qp(&self, init: &QpInit<'_>) -> Result<QueuePair<Uc>, Error> {
        self.create_typed(init, QpType::Uc)
    }

    /// An unreliable-datagram QP.
    pub fn create_ud_qp(&self, init: &QpInit<'_>) -> Result<QueuePair<Ud>, Error> {
        self.create_typed(init, QpType::Ud)
    }
}

//! Typed QP transitions: each struct is one step of the verbs state machine for
//! one transport, and its public fields are exactly that step's *required*
//! attributes, so leaving one out does not compile. Optional attributes are added
//! with [`Modify`]'s setters and checked at run time like everything else.

use crate::error::Error;
use crate::qp::{QueuePair, Rc, Transport, Uc, Ud};
use proto::{AccessFlags, AhAttr, AttrMask, MigState, Mtu, QpAttr, QpState};
use std::marker::PhantomData;

/// A modify request for a QP of transport `T`: attributes plus mask.
#[derive(Debug, Clone, Copy)]
pub struct Modify<T> {
    /// The attributes.
    pub attr: QpAttr,
    /// Which of them to apply.
    pub mask: AttrMask,
    _transport: PhantomData<fn() -> T>,
}

impl<T> Modify<T> {
    /// A request moving to `state` with nothing else.
    pub fn to(state: QpState) -> Self {
        let attr = QpAttr {
            qp_state: state,
            ..QpAttr::default()
        };
        Modify {
            attr,
            mask: AttrMask::STATE,
            _transport: PhantomData,
        }
    }

    fn set(mut self, bit: AttrMask, f: impl FnOnce(&mut QpAttr)) -> Self {
        f(&mut self.attr);
        self.mask |= bit;
        self
    }

    /// Optional `IBV_QP_ACCESS_FLAGS`.
    pub fn access(self, access: AccessFlags) -> Self {
        self.set(AttrMask::ACCESS_FLAGS, |a| a.qp_access_flags = access)
    }

    /// Optional `IBV_QP_PKEY_INDEX`.
    pub fn pkey_index(self, index: u16) -> Self {
        self.set(AttrMask::PKEY_INDEX, |a| a.pkey_index = index)
    }

    /// Optional `IBV_QP_QKEY` (UD).
    pub fn qkey(self, qkey: u32) -> Self {
        self.set(AttrMask::QKEY, |a| a.qkey = qkey)
    }

    /// Optional `IBV_QP_MIN_RNR_TIMER` (RC).
    pub fn min_rnr_timer(self, code: u8) -> Self {
        self.set(AttrMask::MIN_RNR_TIMER, |a| a.min_rnr_timer = code)
    }

    /// Optional `IBV_QP_CUR_STATE`: "the QP is currently in `state`" (only into RTS).
    pub fn cur_state(self, state: QpState) -> Self {
        self.set(AttrMask::CUR_STATE, |a| a.cur_qp_state = state)
    }

    /// Optional `IBV_QP_PATH_MIG_STATE`.
    pub fn path_mig_state(self, state: MigState) -> Self {
        self.set(AttrMask::PATH_MIG_STATE, |a| a.path_mig_state = state)
    }
}

/// One step of the state machine that is legal for transport `T`.
pub trait Transition<T>: Sized {
    /// The request with this step's required attributes.
    fn request(self) -> Modify<T>;
}

/// A step that ends in INIT (RESET→INIT).
pub trait ToInit<T>: Transition<T> {}
/// A step that ends in RTR (INIT→RTR).
pub trait ToRtr<T>: Transition<T> {}
/// A step that ends in RTS (RTR→RTS).
pub trait ToRts<T>: Transition<T> {}

impl ToInit<Rc> for ConnectedInit {}
impl ToInit<Uc> for ConnectedInit {}
impl ToInit<Ud> for DatagramInit {}
impl ToRtr<Rc> for RcRtr {}
impl ToRtr<Uc> for UcRtr {}
impl ToRtr<Ud> for UdRtr {}
impl ToRts<Rc> for RcRts {}
impl ToRts<Uc> for SqPsnRts {}
impl ToRts<Ud> for SqPsnRts {}

impl<T> Transition<T> for Modify<T> {
    fn request(self) -> Modify<T> {
        self
    }
}

/// RESET→INIT for RC and UC.
#[derive(Debug, Clone, Copy)]
pub struct ConnectedInit {
    /// P_Key index (0: the only entry).
    pub pkey_index: u16,
    /// Port (1).
    pub port_num: u8,
    /// What remote peers may do (REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC).
    pub access: AccessFlags,
}

/// RESET→INIT for UD.
#[derive(Debug, Clone, Copy)]
pub struct DatagramInit {
    /// P_Key index.
    pub pkey_index: u16,
    /// Port (1).
    pub port_num: u8,
    /// Q_Key incoming datagrams must carry.
    pub qkey: u32,
}

/// INIT→RTR for RC.
#[derive(Debug, Clone, Copy)]
pub struct RcRtr {
    /// Path to the peer (GRH required).
    pub ah: AhAttr,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// The peer's QP number.
    pub dest_qp_num: u32,
    /// First PSN expected from the peer.
    pub rq_psn: u32,
    /// Responder resources for incoming READ/atomics.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code sent to the peer.
    pub min_rnr_timer: u8,
}

/// INIT→RTR for UC.
#[derive(Debug, Clone, Copy)]
pub struct UcRtr {
    /// Path to the peer (GRH required).
    pub ah: AhAttr,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// The peer's QP number.
    pub dest_qp_num: u32,
    /// First PSN expected from the peer.
    pub rq_psn: u32,
}

/// INIT→RTR for UD (nothing required).
#[derive(Debug, Clone, Copy, Default)]
pub struct UdRtr;

/// RTR→RTS for RC.
#[derive(Debug, Clone, Copy)]
pub struct RcRts {
    /// First PSN to send.
    pub sq_psn: u32,
    /// ACK timeout code: 4.096 µs × 2^timeout (0 = none).
    pub timeout: u8,
    /// Transport retries (0..=7).
    pub retry_cnt: u8,
    /// RNR retries (0..=7, 7 = infinite).
    pub rnr_retry: u8,
    /// Outstanding READ/atomics as initiator.
    pub max_rd_atomic: u8,
}

/// RTR→RTS for UC and UD.
#[derive(Debug, Clone, Copy)]
pub struct SqPsnRts {
    /// First PSN to send.
    pub sq_psn: u32,
}

/// RTS→SQD: drain the send queue; `notify` asks for `IBV_EVENT_SQ_DRAINED`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Drain {
    /// Deliver the SQ-drained async event.
    pub notify: bool,
}

/// SQD→RTS or SQE→RTS (nothing required).
#[derive(Debug, Clone, Copy, Default)]
pub struct Resume;

/// Any state but RESET → ERR.
#[derive(Debug, Clone, Copy, Default)]
pub struct ToError;

/// Any state → RESET.
#[derive(Debug, Clone, Copy, Default)]
pub struct ToReset;

fn conn_init<T>(s: ConnectedInit) -> Modify<T> {
    Modify::to(QpState::Init)
        .pkey_index(s.pkey_index)
        .access(s.access)
        .set(AttrMask::PORT, |a| a.port_num = s.port_num)
}

fn conn_rtr<T>(ah: AhAttr, mtu: Mtu, dest_qp_num: u32, rq_psn: u32) -> Modify<T> {
    Modify::to(QpState::Rtr)
        .set(AttrMask::AV, |a| a.ah_attr = ah)
        .set(AttrMask::PATH_MTU, |a| a.path_mtu = mtu)
        .set(AttrMask::DEST_QPN, |a| a.dest_qp_num = dest_qp_num)
        .set(AttrMask::RQ_PSN, |a| a.rq_psn = rq_psn)
}

fn sq_psn<T>(m: Modify<T>, psn: u32) -> Modify<T> {
    m.set(AttrMask::SQ_PSN, |a| a.sq_psn = psn)
}

impl Transition<Rc> for ConnectedInit {
    fn request(self) -> Modify<Rc> {
        conn_init(self)
    }
}
impl Transition<Uc> for ConnectedInit {
    fn request(self) -> Modify<Uc> {
        conn_init(self)
    }
}
impl Transition<Ud> for DatagramInit {
    fn request(self) -> Modify<Ud> {
        Modify::to(QpState::Init)
            .pkey_index(self.pkey_index)
            .qkey(self.qkey)
            .set(AttrMask::PORT, |a| a.port_num = self.port_num)
    }
}
impl Transition<Rc> for RcRtr {
    fn request(self) -> Modify<Rc> {
        conn_rtr(self.ah, self.path_mtu, self.dest_qp_num, self.rq_psn)
            .min_rnr_timer(self.min_rnr_timer)
            .set(AttrMask::MAX_DEST_RD_ATOMIC, |a| {
                a.max_dest_rd_atomic = self.max_dest_rd_atomic
            })
    }
}
impl Transition<Uc> for UcRtr {
    fn request(self) -> Modify<Uc> {
        conn_rtr(self.ah, self.path_mtu, self.dest_qp_num, self.rq_psn)
    }
}
impl Transition<Ud> for UdRtr {
    fn request(self) -> Modify<Ud> {
        Modify::to(QpState::Rtr)
    }
}
impl Transition<Rc> for RcRts {
    fn request(self) -> Modify<Rc> {
        sq_psn(Modify::to(QpState::Rts), self.sq_psn)
            .set(AttrMask::TIMEOUT, |a| a.timeout = self.timeout)
            .set(AttrMask::RETRY_CNT, |a| a.retry_cnt = self.retry_cnt)
            .set(AttrMask::RNR_RETRY, |a| a.rnr_retry = self.rnr_retry)
            .set(AttrMask::MAX_QP_RD_ATOMIC, |a| {
                a.max_rd_atomic = self.max_rd_atomic
            })
    }
}
impl Transition<Uc> for SqPsnRts {
    fn request(self) -> Modify<Uc> {
        sq_psn(Modify::to(QpState::Rts), self.sq_psn)
    }
}
impl Transition<Ud> for SqPsnRts {
    fn request(self) -> Modify<Ud> {
        sq_psn(Modify::to(QpState::Rts), self.sq_psn)
    }
}
impl<T: Transport> Transition<T> for Drain {
    fn request(self) -> Modify<T> {
        Modify::to(QpState::Sqd).set(AttrMask::EN_SQD_ASYNC_NOTIFY, |a| {
            a.en_sqd_async_notify = u8::from(self.notify)
        })
    }
}
impl<T: Transport> Transition<T> for Resume {
    fn request(self) -> Modify<T> {
        Modify::to(QpState::Rts)
    }
}
impl<T: Transport> Transition<T> for ToError {
    fn request(self) -> Modify<T> {
        Modify::to(QpState::Err)
    }
}
impl<T: Transport> Transition<T> for ToReset {
    fn request(self) -> Modify<T> {
        Modify::to(QpState::Reset)
    }
}

impl<T: Transport> QueuePair<T> {
    /// Applies a typed transition (with any optional attributes added to it).
    pub fn apply(&self, t: impl Transition<T>) -> Result<(), Error> {
        let m = t.request();
        self.modify(&m.attr, m.mask)
    }

    /// RESET→INIT with the transport's required attributes.
    pub fn to_init(&self, t: impl ToInit<T>) -> Result<(), Error> {
        self.apply(t)
    }

    /// INIT→RTR with the transport's required attributes.
    pub fn to_rtr(&self, t: impl ToRtr<T>) -> Result<(), Error> {
        self.apply(t)
    }

    /// RTR→RTS with the transport's required attributes.
    pub fn to_rts(&self, t: impl ToRts<T>) -> Result<(), Error> {
        self.apply(t)
    }
}

//! Queue pairs: the control state of one QP, its creation rules
//! ([`create`]), the modify-QP table ([`table`]) and state machine ([`modify`]).
//!
//! [`QpControl`] is everything `ibv_modify_qp` and `ibv_query_qp` act on. The data
//! path keeps its own per-QP state beside it and reports state changes it makes
//! by itself (to ERR, to SQE, SQD drained) through [`QpControl::device_move`] and
//! [`QpControl::drain_finished`].

pub mod actor;
pub mod completer;
pub mod create;
pub mod data;
pub mod modify;
pub mod requester;
pub mod responder;
pub mod sgl;
pub mod table;
pub mod wqe;

use crate::mask::AttrMask;
use crate::types::{QpAttr, QpCap, QpState, QpType};

/// The attributes that every state reports (spec qp-query.md §3.2).
pub const ALWAYS_VALID: AttrMask = AttrMask::of(&[AttrMask::STATE, AttrMask::CAP]);

/// The control-path state of one queue pair.
#[derive(Debug, Clone)]
pub struct QpControl {
    qp_type: QpType,
    qpn: u32,
    state: QpState,
    /// Attribute values as set by modify; meaningful where `valid` says so.
    attr: QpAttr,
    /// Which attributes have been set since the QP last left RESET.
    valid: AttrMask,
    cap: QpCap,
    sq_sig_all: bool,
    has_srq: bool,
    sq_draining: bool,
    sqd_notify: bool,
}

impl QpControl {
    /// A new QP in RESET.
    pub fn new(qp_type: QpType, qpn: u32, cap: QpCap, sq_sig_all: bool, has_srq: bool) -> Self {
        QpControl {
            qp_type,
            qpn,
            state: QpState::Reset,
            attr: QpAttr::default(),
            valid: ALWAYS_VALID,
            cap,
            sq_sig_all,
            has_srq,
            sq_draining: false,
            sqd_notify: false,
        }
    }

    /// The QP type.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// The 24-bit QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// The current state.
    pub fn state(&self) -> QpState {
        self.state
    }

    /// The capacities in force.
    pub fn cap(&self) -> QpCap {
        self.cap
    }

    /// Whether every send WR generates a completion.
    pub fn sq_sig_all(&self) -> bool {
        self.sq_sig_all
    }

    /// Whether the QP receives through an SRQ.
    pub fn has_srq(&self) -> bool {
        self.has_srq
    }

    /// True while an SQD drain is still in progress.
    pub fn sq_draining(&self) -> bool {
        self.sq_draining
    }

    /// The stored attributes (raw; see [`QpControl::valid`]).
    pub fn attr(&self) -> &QpAttr {
        &self.attr
    }

    /// Which attributes are valid now.
    pub fn valid(&self) -> AttrMask {
        self.valid
    }

    /// `ibv_query_qp`: every valid attribute, zero elsewhere, and which are valid.
    ///
    /// The mask of `ibv_query_qp` is only a hint (man page): like rxe and rdmavt we
    /// always fill everything we have. `cur_qp_state` reports the current state, as
    /// rxe does; `en_sqd_async_notify` is irrelevant to query and reported as set.
    pub fn query(&self) -> (QpAttr, AttrMask) {
        let mut out = QpAttr::default();
        let a = &self.attr;
        let v = self.valid;
        macro_rules! copy_if {
            ($bit:ident => $($field:ident),+) => {
                if v.contains(AttrMask::$bit) { $(out.$field = a.$field;)+ }
            };
        }
        copy_if!(ACCESS_FLAGS => qp_access_flags);
        copy_if!(PKEY_INDEX => pkey_index);
        copy_if!(PORT => port_num);
        copy_if!(QKEY => qkey);
        copy_if!(AV => ah_attr);
        copy_if!(PATH_MTU => path_mtu);
        copy_if!(TIMEOUT => timeout);
        copy_if!(RETRY_CNT => retry_cnt);
        copy_if!(RNR_RETRY => rnr_retry);
        copy_if!(RQ_PSN => rq_psn);
        copy_if!(MAX_QP_RD_ATOMIC => max_rd_atomic);
        copy_if!(ALT_PATH => alt_ah_attr, alt_pkey_index, alt_port_num, alt_timeout);
        copy_if!(MIN_RNR_TIMER => min_rnr_timer);
        copy_if!(SQ_PSN => sq_psn);
        copy_if!(MAX_DEST_RD_ATOMIC => max_dest_rd_atomic);
        copy_if!(PATH_MIG_STATE => path_mig_state);
        copy_if!(DEST_QPN => dest_qp_num);
        out.qp_state = self.state;
        out.cur_qp_state = self.state;
        out.cap = self.cap;
        out.sq_draining = u8::from(self.state == QpState::Sqd && self.sq_draining);
        out.en_sqd_async_notify = u8::from(self.sqd_notify);
        (out, v)
    }

    /// A state change the device makes by itself: to ERR on a fatal error, to SQE
    /// after a send error on UC/UD. Returns the previous state.
    /// No table check applies here. The data path moves only UC/UD QPs to SQE
    /// (an RC send error is fatal and goes to ERR, qp-state-machine.md §6.4); the
    /// tests use this to reach the table's RC SQE rows too.
    pub fn device_move(&mut self, to: QpState) -> QpState {
        let from = self.state;
        self.state = to;
        if to != QpState::Sqd {
            self.sq_draining = false;
        }
        from
    }

    /// The data path reports that the SQD drain finished. Returns true when the
    /// `IBV_EVENT_SQ_DRAINED` event is due (it was requested at RTS→SQD).
    pub fn drain_finished(&mut self) -> bool {
        let was = self.state == QpState::Sqd && self.sq_draining;
        self.sq_draining = false;
        was && self.sqd_notify
    }

    /// The Q_Key if set, else 0.
    pub fn qkey_or_zero(&self) -> u32 {
        if self.valid().contains(AttrMask::QKEY) {
            self.attr().qkey
        } else {
            0
        }
    }

    /// Does this state process incoming requests (RTR, RTS, SQD, SQE)?
    pub fn accepts_requests(&self) -> bool {
        matches!(
            self.state(),
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        )
    }

    /// Does this state process responses (RTS, SQD)?
    pub fn accepts_responses(&self) -> bool {
        self.qp_type().is_reliable() && matches!(self.state(), QpState::Rts | QpState::Sqd)
    }

    /// Updates the live PSNs the data path reports, which query returns
    /// (qp-query.md §3.1: next PSN to send, next PSN expected).
    pub fn set_live_psns(&mut self, sq_psn: Option<u32>, rq_psn: Option<u32>) {
        if let Some(p) = sq_psn {
            self.attr.sq_psn = p & crate::types::MASK_24;
        }
        if let Some(p) = rq_psn {
            self.attr.rq_psn = p & crate::types::MASK_24;
        }
    }
}

/// A BTH with the fields softverbs always sends the same way (default P_Key,
/// no migration, no congestion marks; PadCnt is filled in by `emit`).
pub(crate) fn bth(
    opcode: wire::Opcode,
    dest_qpn: u32,
    psn: wire::Psn,
    ack_req: bool,
    solicited: bool,
) -> wire::bth::Repr {
    wire::bth::Repr {
        opcode,
        solicited,
        mig_req: false,
        pad_count: 0,
        pkey: wire::PKey::DEFAULT,
        fecn: false,
        becn: false,
        dest_qp: wire::Qpn::from_masked(dest_qpn),
        ack_req,
        psn,
    }
}

//! `ibv_modify_qp`: the legality check (`ib_modify_qp_is_ok`), every value
//! check, and the all-or-nothing apply.
//!
//! Order of checks, each returning the errno Linux returns
//! (`shared/spec/qp-state-machine.md` §3 and §5):
//! 1. mask bits outside the known set → `EOPNOTSUPP`;
//! 2. (a raw `qp_state` / `cur_qp_state` that names no state is refused by
//!    the C ABI's conversion, before the call: `QpAttr` holds only states);
//! 3. the table: `CUR_STATE` only naming RTR/RTS/SQD/SQE, a legal pair, every
//!    required bit present, no bit outside required ∪ optional → `EINVAL`;
//! 4. an SQD drain still in progress allows only → ERR (rxe) → `EINVAL`;
//! 5. every attribute the mask selects, range-checked → `EINVAL`
//!    (`ENODATA` for an empty GID entry, `EPERM` for a controlled Q_Key).
//!
//! Decisions where the spec leaves a choice:
//! - UC SQD→SQD with `IBV_QP_AV` is accepted (the table lists AV as optional).
//!   Linux refuses it because uverbs silently adds `IBV_QP_PORT`, which the UC
//!   row does not allow (qp-state-machine.md §3); we do not add bits the caller
//!   did not ask for.
//! - The table check runs on every call, with or without `IBV_QP_STATE` (as
//!   mlx5 and rdmavt do; modern rxe skips it without STATE).
//!
//! Only when all of that passed is anything written ([`QpControl::modify`]): a
//! refused call changes nothing, not even the state (man page `ibv_modify_qp(3)`).

use super::table::{self, Masks};
use super::{QpControl, ALWAYS_VALID};
use crate::ah::check_av;
use crate::device::DeviceInfo;
use crate::error::{ModifyError, RangeError};
use crate::mask::AttrMask;
use crate::types::{AccessFlags, Mtu, QpAttr, QpState, MASK_24};

/// What a successful modify did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    /// The state before the call.
    pub from: QpState,
    /// The state after the call.
    pub to: QpState,
}

/// The environment a modify is checked against.
#[derive(Debug, Clone, Copy)]
pub struct ModifyEnv<'a> {
    /// The device (limits, port, GID table).
    pub dev: &'a DeviceInfo,
    /// Whether the caller may set a controlled Q_Key (bit 31).
    pub privileged: bool,
}

impl QpControl {
    /// Checks `attr`/`mask` completely, then applies them. On `Err` nothing changed.
    pub fn modify(
        &mut self,
        attr: &QpAttr,
        mask: AttrMask,
        env: ModifyEnv<'_>,
    ) -> Result<Transition, ModifyError> {
        let (cur, next) = self.check_transition(attr, mask)?;
        if self.state == QpState::Sqd && self.sq_draining && next != QpState::Err {
            return Err(ModifyError::StillDraining);
        }
        self.check_values(attr, mask, cur, next, env)?;
        let from = self.state;
        self.apply(attr, mask, next);
        Ok(Transition { from, to: next })
    }

    /// Steps 1–3: the mask and the table. Returns the (cur, next) pair used.
    pub fn check_transition(
        &self,
        attr: &QpAttr,
        mask: AttrMask,
    ) -> Result<(QpState, QpState), ModifyError> {
        let unknown = mask - AttrMask::KNOWN;
        if !unknown.is_empty() {
            return Err(ModifyError::UnknownMaskBits { bits: unknown.0 });
        }
        let next = mask.contains(AttrMask::STATE).then_some(attr.qp_state);
        let cur = if mask.contains(AttrMask::CUR_STATE) {
            let cur = attr.cur_qp_state;
            // ib_modify_qp_is_ok: an explicit current state must be RTR, RTS, SQD or SQE.
            if !matches!(
                cur,
                QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
            ) {
                return Err(ModifyError::CurStateNotAllowed { cur });
            }
            cur
        } else {
            self.state
        };
        // A modify without IBV_QP_STATE is the transition cur→cur.
        let next = next.unwrap_or(cur);
        let masks =
            table::lookup(self.qp_type, cur, next).ok_or(ModifyError::IllegalTransition {
                from: cur,
                to: next,
                hint: table::illegal_hint(cur, next),
            })?;
        self.check_masks(masks, mask, cur, next)?;
        Ok((cur, next))
    }

    fn check_masks(
        &self,
        masks: Masks,
        mask: AttrMask,
        from: QpState,
        to: QpState,
    ) -> Result<(), ModifyError> {
        let qp_type = self.qp_type;
        let missing = masks.required - mask;
        if !missing.is_empty() {
            let required = masks.required;
            return Err(ModifyError::MissingRequired {
                qp_type,
                from,
                to,
                required,
                missing,
            });
        }
        let extra = mask - masks.required - masks.optional - AttrMask::STATE;
        if !extra.is_empty() {
            let Masks { required, optional } = masks;
            return Err(ModifyError::NotAccepted {
                qp_type,
                from,
                to,
                required,
                optional,
                extra,
            });
        }
        Ok(())
    }

    /// Step 5: every attribute the mask selects.
    fn check_values(
        &self,
        a: &QpAttr,
        mask: AttrMask,
        cur: QpState,
        next: QpState,
        env: ModifyEnv<'_>,
    ) -> Result<(), ModifyError> {
        let dev = env.dev;
        let has = |bit| mask.contains(bit);
        if has(AttrMask::PORT) {
            // uverbs rdma_is_port_valid; name the field, not just the number.
            dev.check_port(a.port_num)
                .map_err(|_| ModifyError::BadPort {
                    owner: "attr",
                    port: a.port_num,
                })?;
        }
        if has(AttrMask::PKEY_INDEX) {
            dev.query_pkey(1, u32::from(a.pkey_index))?;
        }
        if has(AttrMask::AV) {
            check_av("ah_attr", &a.ah_attr, dev)?;
            // uverbs: in INIT→RTR the AV's port must be the QP's (fixed at RESET→INIT).
            let qp_port = self.attr.port_num;
            if cur == QpState::Init && next == QpState::Rtr && a.ah_attr.port_num != qp_port {
                return Err(ModifyError::AvPortMismatch {
                    ah_port: a.ah_attr.port_num,
                    qp_port,
                });
            }
        }
        if has(AttrMask::ALT_PATH) {
            // The core refuses alternate paths on RoCE ports (APM is IB-only).
            return Err(ModifyError::AltPathOnRoce);
        }
        if has(AttrMask::PATH_MTU) {
            check_mtu(a.path_mtu, dev.port.max_mtu)?;
        }
        check_ranges(a, mask, env)?;
        if has(AttrMask::ACCESS_FLAGS) {
            let unsupported = a.qp_access_flags.0 & !AccessFlags::QP_SUPPORTED.0;
            if unsupported != 0 {
                return Err(ModifyError::AccessFlags {
                    flags: a.qp_access_flags.0,
                    unsupported,
                });
            }
        }
        // uverbs (recent kernels): a controlled Q_Key needs privilege.
        if has(AttrMask::QKEY) && a.qkey & 0x8000_0000 != 0 && !env.privileged {
            return Err(ModifyError::ControlledQkey { qkey: a.qkey });
        }
        Ok(())
    }

    /// Step 6: write everything selected. Only called after every check passed.
    fn apply(&mut self, a: &QpAttr, mask: AttrMask, next: QpState) {
        let from = self.state;
        if next == QpState::Reset {
            // Entering RESET forgets every attribute: RESET→INIT→RTR→RTS must
            // supply them all again (qp-state-machine.md §6.1).
            self.attr = QpAttr::default();
            self.valid = ALWAYS_VALID;
            self.sq_draining = false;
            self.sqd_notify = false;
        }
        let s = &mut self.attr;
        macro_rules! store {
            ($bit:ident => $($field:ident),+) => {
                if mask.contains(AttrMask::$bit) { $(s.$field = a.$field;)+ }
            };
        }
        store!(ACCESS_FLAGS => qp_access_flags);
        store!(PKEY_INDEX => pkey_index);
        store!(PORT => port_num);
        store!(QKEY => qkey);
        store!(AV => ah_attr);
        store!(PATH_MTU => path_mtu);
        store!(TIMEOUT => timeout);
        store!(RETRY_CNT => retry_cnt);
        store!(RNR_RETRY => rnr_retry);
        store!(MAX_QP_RD_ATOMIC => max_rd_atomic);
        store!(MIN_RNR_TIMER => min_rnr_timer);
        store!(MAX_DEST_RD_ATOMIC => max_dest_rd_atomic);
        store!(PATH_MIG_STATE => path_mig_state);
        store!(DEST_QPN => dest_qp_num);
        // The core masks PSNs to 24 bits (with a warning) rather than refusing.
        if mask.contains(AttrMask::RQ_PSN) {
            s.rq_psn = a.rq_psn & MASK_24;
        }
        if mask.contains(AttrMask::SQ_PSN) {
            s.sq_psn = a.sq_psn & MASK_24;
        }
        self.valid |= mask - AttrMask::CUR_STATE - AttrMask::EN_SQD_ASYNC_NOTIFY;
        if from == QpState::Rts && next == QpState::Sqd {
            self.sq_draining = true;
            self.sqd_notify =
                mask.contains(AttrMask::EN_SQD_ASYNC_NOTIFY) && a.en_sqd_async_notify != 0;
        }
        if next != QpState::Sqd {
            self.sq_draining = false;
        }
        self.state = next;
    }
}

fn check_mtu(mtu: Mtu, max: Mtu) -> Result<(), ModifyError> {
    if mtu <= max {
        return Ok(());
    }
    Err(RangeError::mtu(mtu.raw(), max).into())
}

/// The numeric range checks (spec §5), one row each.
fn check_ranges(a: &QpAttr, mask: AttrMask, env: ModifyEnv<'_>) -> Result<(), ModifyError> {
    let dev = &env.dev.attr;
    let rows: [(AttrMask, &'static str, u64, u64, &'static str); 7] = [
        (
            AttrMask::TIMEOUT,
            "attr.timeout",
            a.timeout.into(),
            31,
            "; ACK timeout is 4.096 µs × 2^timeout",
        ),
        (
            AttrMask::RETRY_CNT,
            "attr.retry_cnt",
            a.retry_cnt.into(),
            7,
            "; a 3-bit count",
        ),
        (
            AttrMask::RNR_RETRY,
            "attr.rnr_retry",
            a.rnr_retry.into(),
            7,
            "; a 3-bit count, 7 = infinite",
        ),
        (
            AttrMask::MIN_RNR_TIMER,
            "attr.min_rnr_timer",
            a.min_rnr_timer.into(),
            31,
            "; a 5-bit timer code",
        ),
        (
            AttrMask::DEST_QPN,
            "attr.dest_qp_num",
            a.dest_qp_num.into(),
            MASK_24.into(),
            "; QP numbers are 24 bits",
        ),
        (
            AttrMask::MAX_QP_RD_ATOMIC,
            "attr.max_rd_atomic",
            a.max_rd_atomic.into(),
            dev.max_qp_init_rd_atom.into(),
            "; device limit max_qp_init_rd_atom",
        ),
        (
            AttrMask::MAX_DEST_RD_ATOMIC,
            "attr.max_dest_rd_atomic",
            a.max_dest_rd_atomic.into(),
            dev.max_qp_rd_atom.into(),
            "; device limit max_qp_rd_atom",
        ),
    ];
    for (bit, what, value, max, note) in rows {
        if mask.contains(bit) && value > max {
            return Err(RangeError {
                what,
                value,
                min: 0,
                max,
                note,
            }
            .into());
        }
    }
    Ok(())
}

//! The modify-QP legality table, as data.
//!
//! This is the Linux kernel's `qp_state_table` (`drivers/infiniband/core/verbs.c`,
//! consulted by `ib_modify_qp_is_ok()`), reproduced per QP type exactly as
//! `shared/spec/qp-state-machine.md` §4 gives it. A (from, to) pair absent from
//! [`TABLE`] is an illegal transition for every type. `IBV_QP_STATE` itself is
//! never listed: it is always allowed (and required to change state).
//! `tests/modify_table_spec.rs` parses the spec's markdown tables and checks this
//! table against them cell by cell.

use crate::mask::AttrMask;
use crate::types::{QpState, QpType};

/// Required and optional attribute masks of one transition for one QP type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Masks {
    /// Bits that must be in the mask.
    pub required: AttrMask,
    /// Bits that may be in the mask.
    pub optional: AttrMask,
}

/// One legal (from, to) pair and its masks for every QP type, in
/// [`QpType::ALL`] order: UD, UC, RC, XRC_SEND, XRC_RECV, RAW_PACKET, SMI, GSI.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// Current state.
    pub from: QpState,
    /// Next state.
    pub to: QpState,
    /// Masks per QP type.
    pub per_type: [Masks; 8],
}

const fn m(bits: &[AttrMask]) -> AttrMask {
    AttrMask::of(bits)
}

const E: AttrMask = AttrMask::EMPTY;
const NONE: Masks = Masks {
    required: E,
    optional: E,
};

const fn r(required: AttrMask) -> Masks {
    Masks {
        required,
        optional: E,
    }
}

const fn o(optional: AttrMask) -> Masks {
    Masks {
        required: E,
        optional,
    }
}

const fn ro(required: AttrMask, optional: AttrMask) -> Masks {
    Masks { required, optional }
}

/// A transition that accepts only `IBV_QP_STATE`, for every type.
const fn bare(from: QpState, to: QpState) -> Rule {
    Rule {
        from,
        to,
        per_type: [NONE; 8],
    }
}

use AttrMask as A;
use QpState::*;

// Abbreviations for recurring sets.
const PKEY_PORT_QKEY: AttrMask = m(&[A::PKEY_INDEX, A::PORT, A::QKEY]);
const PKEY_PORT_ACCESS: AttrMask = m(&[A::PKEY_INDEX, A::PORT, A::ACCESS_FLAGS]);
const PKEY_QKEY: AttrMask = m(&[A::PKEY_INDEX, A::QKEY]);
const CONN_RTR_REQ: AttrMask = m(&[A::AV, A::PATH_MTU, A::DEST_QPN, A::RQ_PSN]);
const REL_RTR_REQ: AttrMask = m(&[
    A::AV,
    A::PATH_MTU,
    A::DEST_QPN,
    A::RQ_PSN,
    A::MAX_DEST_RD_ATOMIC,
    A::MIN_RNR_TIMER,
]);
const CONN_RTR_OPT: AttrMask = m(&[A::ALT_PATH, A::ACCESS_FLAGS, A::PKEY_INDEX]);
const REL_RTS_REQ: AttrMask = m(&[
    A::TIMEOUT,
    A::RETRY_CNT,
    A::RNR_RETRY,
    A::SQ_PSN,
    A::MAX_QP_RD_ATOMIC,
]);
const CUR_QKEY: AttrMask = m(&[A::CUR_STATE, A::QKEY]);
const CUR_ALT_ACC_MIG: AttrMask = m(&[
    A::CUR_STATE,
    A::ALT_PATH,
    A::ACCESS_FLAGS,
    A::PATH_MIG_STATE,
]);
const CUR_ALT_ACC_RNR_MIG: AttrMask = m(&[
    A::CUR_STATE,
    A::ALT_PATH,
    A::ACCESS_FLAGS,
    A::MIN_RNR_TIMER,
    A::PATH_MIG_STATE,
]);
const SQD: AttrMask = A::EN_SQD_ASYNC_NOTIFY;

/// The table (spec §4). Order: UD, UC, RC, XRC_SEND, XRC_RECV, RAW, SMI, GSI.
pub const TABLE: &[Rule] = &[
    bare(Reset, Reset),
    Rule {
        from: Reset,
        to: Init,
        per_type: [
            r(PKEY_PORT_QKEY),
            r(PKEY_PORT_ACCESS),
            r(PKEY_PORT_ACCESS),
            r(PKEY_PORT_ACCESS),
            r(PKEY_PORT_ACCESS),
            r(A::PORT),
            r(PKEY_QKEY),
            r(PKEY_QKEY),
        ],
    },
    bare(Init, Reset),
    bare(Init, Err),
    Rule {
        from: Init,
        to: Init,
        per_type: [
            o(PKEY_PORT_QKEY),
            o(PKEY_PORT_ACCESS),
            o(PKEY_PORT_ACCESS),
            o(PKEY_PORT_ACCESS),
            o(PKEY_PORT_ACCESS),
            NONE,
            o(PKEY_QKEY),
            o(PKEY_QKEY),
        ],
    },
    Rule {
        from: Init,
        to: Rtr,
        per_type: [
            o(PKEY_QKEY),
            ro(CONN_RTR_REQ, CONN_RTR_OPT),
            ro(REL_RTR_REQ, CONN_RTR_OPT),
            ro(CONN_RTR_REQ, CONN_RTR_OPT),
            ro(REL_RTR_REQ, CONN_RTR_OPT),
            NONE,
            o(PKEY_QKEY),
            o(PKEY_QKEY),
        ],
    },
    bare(Rtr, Reset),
    bare(Rtr, Err),
    Rule {
        from: Rtr,
        to: Rts,
        per_type: [
            ro(A::SQ_PSN, CUR_QKEY),
            ro(A::SQ_PSN, CUR_ALT_ACC_MIG),
            ro(REL_RTS_REQ, CUR_ALT_ACC_RNR_MIG),
            ro(REL_RTS_REQ, CUR_ALT_ACC_MIG),
            ro(m(&[A::TIMEOUT, A::SQ_PSN]), CUR_ALT_ACC_RNR_MIG),
            o(A::RATE_LIMIT),
            ro(A::SQ_PSN, CUR_QKEY),
            ro(A::SQ_PSN, CUR_QKEY),
        ],
    },
    bare(Rts, Reset),
    bare(Rts, Err),
    Rule {
        from: Rts,
        to: Rts,
        per_type: [
            o(CUR_QKEY),
            o(CUR_ALT_ACC_MIG),
            o(CUR_ALT_ACC_RNR_MIG),
            o(CUR_ALT_ACC_MIG),
            o(CUR_ALT_ACC_RNR_MIG),
            o(A::RATE_LIMIT),
            o(CUR_QKEY),
            o(CUR_QKEY),
        ],
    },
    Rule {
        from: Rts,
        to: Sqd,
        per_type: [o(SQD), o(SQD), o(SQD), o(SQD), o(SQD), NONE, o(SQD), o(SQD)],
    },
    bare(Sqd, Reset),
    bare(Sqd, Err),
    Rule {
        from: Sqd,
        to: Rts,
        per_type: [
            o(CUR_QKEY),
            o(CUR_ALT_ACC_MIG),
            o(CUR_ALT_ACC_RNR_MIG),
            o(CUR_ALT_ACC_MIG),
            o(CUR_ALT_ACC_RNR_MIG),
            NONE,
            o(CUR_QKEY),
            o(CUR_QKEY),
        ],
    },
    Rule {
        from: Sqd,
        to: Sqd,
        per_type: [
            o(PKEY_QKEY),
            o(m(&[
                A::AV,
                A::ALT_PATH,
                A::ACCESS_FLAGS,
                A::PKEY_INDEX,
                A::PATH_MIG_STATE,
            ])),
            o(m(&[
                A::PORT,
                A::AV,
                A::TIMEOUT,
                A::RETRY_CNT,
                A::RNR_RETRY,
                A::MAX_QP_RD_ATOMIC,
                A::MAX_DEST_RD_ATOMIC,
                A::ALT_PATH,
                A::ACCESS_FLAGS,
                A::PKEY_INDEX,
                A::MIN_RNR_TIMER,
                A::PATH_MIG_STATE,
            ])),
            o(m(&[
                A::PORT,
                A::AV,
                A::TIMEOUT,
                A::RETRY_CNT,
                A::RNR_RETRY,
                A::MAX_QP_RD_ATOMIC,
                A::ALT_PATH,
                A::ACCESS_FLAGS,
                A::PKEY_INDEX,
                A::PATH_MIG_STATE,
            ])),
            o(m(&[
                A::PORT,
                A::AV,
                A::TIMEOUT,
                A::MAX_DEST_RD_ATOMIC,
                A::ALT_PATH,
                A::ACCESS_FLAGS,
                A::PKEY_INDEX,
                A::MIN_RNR_TIMER,
                A::PATH_MIG_STATE,
            ])),
            NONE,
            o(PKEY_QKEY),
            o(PKEY_QKEY),
        ],
    },
    bare(Sqe, Reset),
    bare(Sqe, Err),
    Rule {
        from: Sqe,
        to: Rts,
        per_type: [
            o(CUR_QKEY),
            o(m(&[A::CUR_STATE, A::ACCESS_FLAGS])),
            NONE,
            NONE,
            NONE,
            NONE,
            o(CUR_QKEY),
            o(CUR_QKEY),
        ],
    },
    bare(Err, Reset),
    bare(Err, Err),
];

fn type_index(t: QpType) -> usize {
    QpType::ALL.iter().position(|x| *x == t).unwrap_or(0)
}

/// The masks of `from → to` for `qp_type`, or `None` if the pair is illegal.
pub fn lookup(qp_type: QpType, from: QpState, to: QpState) -> Option<Masks> {
    TABLE
        .iter()
        .find(|rule| rule.from == from && rule.to == to)
        .map(|rule| rule.per_type[type_index(qp_type)])
}

/// Why a well-known illegal pair is illegal, for error messages.
pub fn illegal_hint(from: QpState, to: QpState) -> &'static str {
    match (from, to) {
        (Reset, Err) => " (Linux allows only RESET and INIT after RESET; move to INIT first)",
        (Rtr, Rtr) => {
            " (RTR→RTR is not in the table: in RTR every modify, even one without IBV_QP_STATE, must move to RTS, ERR or RESET)"
        }
        (Sqe, Sqe) => " (SQE→SQE is not in the table: from SQE go to RTS, ERR or RESET)",
        (_, Sqe) => " (SQE is entered only by the device, after a send error on a UC/UD QP)",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_pairs_match_spec_4_1() {
        // Spec §4.1 as a 7×7 grid of ✔ marks (rows = from, columns = to).
        const GRID: [&str; 7] = [
            "XX.....", // RESET
            "XXX...X", // INIT
            "X..X..X", // RTR
            "X..XX.X", // RTS
            "X..XX.X", // SQD
            "X..X..X", // SQE
            "X.....X", // ERR
        ];
        for from in QpState::ALL {
            for to in QpState::ALL {
                let want = GRID[from as usize].as_bytes()[to as usize] == b'X';
                assert_eq!(lookup(QpType::Rc, from, to).is_some(), want, "{from}→{to}");
            }
        }
    }

    #[test]
    fn state_bit_never_listed_and_required_optional_disjoint() {
        for rule in TABLE {
            for masks in rule.per_type {
                assert!(!masks.required.contains(AttrMask::STATE));
                assert!(!masks.optional.contains(AttrMask::STATE));
                assert!((masks.required & masks.optional).is_empty());
                assert!(!(masks.required | masks.optional).contains(AttrMask::CAP));
            }
        }
    }

    #[test]
    fn pairs_are_unique() {
        for (i, a) in TABLE.iter().enumerate() {
            for b in &TABLE[i + 1..] {
                assert!(
                    !(a.from == b.from && a.to == b.to),
                    "{}→{} twice",
                    a.from,
                    a.to
                );
            }
        }
    }
}

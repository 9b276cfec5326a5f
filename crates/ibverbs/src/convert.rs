//! The conversions between the `verbs.h` attribute structs and softverbs'
//! types, both ways, each written once as a field list.
//!
//! `ibv_qp_attr` carries enums as plain numbers; softverbs' `QpAttr` holds
//! types. A number that names nothing in a field the mask selects is refused
//! here, with `EINVAL` and words ([`checked_qp_attr`]); the value rules that
//! hold for Rust callers too (ranges, device limits) stay in `proto`.

use crate::ffi::*;
use proto::error::RangeError;
use proto::types::{AhAttr, GlobalRoute};
use proto::{AccessFlags, AttrMask, Gid, MigState, Mtu, QpCap, QpState};
use softverbs::{QpAttr, QpInfo, SrqAttr};

/// `both_ways!(C <-> Rust, to_rust, to_c { same-named fields } { nested: to_rust / to_c })`.
macro_rules! both_ways {
    ($c:ident <-> $r:ident, $to_r:ident, $to_c:ident { $($f:ident),* $(,)? } { $($n:ident: $nr:ident / $nc:ident),* $(,)? }) => {
        pub(crate) fn $to_r(a: &$c) -> $r {
            $r { $($f: a.$f,)* $($n: $nr(&a.$n),)* }
        }
        pub(crate) fn $to_c(a: &$r) -> $c {
            $c { $($f: a.$f,)* $($n: $nc(&a.$n),)* }
        }
    };
}

fn gid(g: &ibv_gid) -> Gid {
    Gid(g.raw)
}

fn c_gid(g: &Gid) -> ibv_gid {
    ibv_gid { raw: g.0 }
}

both_ways!(ibv_qp_cap <-> QpCap, qp_cap, c_qp_cap {
    max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data,
} {});

both_ways!(ibv_global_route <-> GlobalRoute, global_route, c_global_route {
    flow_label, sgid_index, hop_limit, traffic_class,
} { dgid: gid / c_gid });

both_ways!(ibv_ah_attr <-> AhAttr, ah_attr, c_ah_attr {
    dlid, sl, src_path_bits, static_rate, is_global, port_num,
} { grh: global_route / c_global_route });

// The enum fields: a number that names nothing becomes the default here, which
// is only ever read when `check_raw` let it through (its mask bit is clear).
fn state(v: &u32) -> QpState {
    QpState::from_raw(*v).unwrap_or(QpState::Reset)
}

fn c_state(s: &QpState) -> u32 {
    s.raw()
}

fn mtu(v: &u32) -> Mtu {
    Mtu::from_raw(*v).unwrap_or(QpAttr::default().path_mtu)
}

fn c_mtu(m: &Mtu) -> u32 {
    m.raw()
}

fn mig_state(v: &u32) -> MigState {
    MigState::from_raw(*v).unwrap_or_default()
}

fn c_mig_state(m: &MigState) -> u32 {
    m.raw()
}

fn access(v: &u32) -> AccessFlags {
    AccessFlags(*v)
}

fn c_access(a: &AccessFlags) -> u32 {
    a.0
}

both_ways!(ibv_qp_attr <-> QpAttr, qp_attr, c_qp_attr {
    qkey, rq_psn, sq_psn, dest_qp_num, pkey_index, alt_pkey_index, en_sqd_async_notify, sq_draining,
    max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry,
    alt_port_num, alt_timeout, rate_limit,
} {
    qp_state: state / c_state, cur_qp_state: state / c_state, path_mtu: mtu / c_mtu,
    path_mig_state: mig_state / c_mig_state, qp_access_flags: access / c_access,
    cap: qp_cap / c_qp_cap, ah_attr: ah_attr / c_ah_attr, alt_ah_attr: ah_attr / c_ah_attr,
});

/// A raw `ibv_qp_attr` number that names no value of its enum.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AttrError {
    /// `qp_state` or `cur_qp_state` is not a state value (0..=6).
    #[error("attr.{field} = {value} is not a QP state (0..=6)")]
    BadStateValue {
        /// `"qp_state"` or `"cur_qp_state"`.
        field: &'static str,
        /// The value given.
        value: u32,
    },
    /// `path_mtu` is not an `enum ibv_mtu`, or `path_mig_state` not an `enum ibv_mig_state`.
    #[error(transparent)]
    Range(#[from] RangeError),
}

impl AttrError {
    /// The errno: Linux refuses a value outside its enum with `EINVAL`.
    pub(crate) fn errno(&self) -> std::ffi::c_int {
        libc::EINVAL
    }
}

/// `ibv_modify_qp`'s attributes as types, or the first selected field whose
/// number names nothing (always `EINVAL`).
///
/// With mask bits outside the known set nothing is checked: softverbs refuses
/// those first, with `EOPNOTSUPP`, before it looks at any value.
pub(crate) fn checked_qp_attr(a: &ibv_qp_attr, mask: AttrMask) -> Result<QpAttr, AttrError> {
    if (mask - AttrMask::KNOWN).is_empty() {
        check_raw(a, mask)?;
    }
    Ok(qp_attr(a))
}

fn check_raw(a: &ibv_qp_attr, mask: AttrMask) -> Result<(), AttrError> {
    let state_field = |bit, field, value| match QpState::from_raw(value) {
        None if mask.contains(bit) => Err(AttrError::BadStateValue { field, value }),
        _ => Ok(()),
    };
    state_field(AttrMask::STATE, "qp_state", a.qp_state)?;
    state_field(AttrMask::CUR_STATE, "cur_qp_state", a.cur_qp_state)?;
    if mask.contains(AttrMask::PATH_MTU) && Mtu::from_raw(a.path_mtu).is_none() {
        return Err(RangeError::mtu(a.path_mtu, Mtu::Mtu4096).into());
    }
    if mask.contains(AttrMask::PATH_MIG_STATE) && MigState::from_raw(a.path_mig_state).is_none() {
        return Err(RangeError {
            what: "attr.path_mig_state",
            value: a.path_mig_state.into(),
            min: 0,
            max: MigState::Armed.raw().into(),
            note: "; MIGRATED, REARM or ARMED",
        }
        .into());
    }
    Ok(())
}

/// `ibv_query_qp`'s attributes: as verbs.h promises, a field the QP has not
/// been given reads 0 (softverbs' `QpAttr` holds a typed default there).
pub(crate) fn c_query_attr(info: &QpInfo) -> ibv_qp_attr {
    let mut c = c_qp_attr(&info.attr);
    if !info.valid.contains(AttrMask::PATH_MTU) {
        c.path_mtu = 0;
    }
    c
}

both_ways!(ibv_srq_attr <-> SrqAttr, srq_attr, c_srq_attr { max_wr, max_sge, srq_limit } {});

#[cfg(test)]
mod tests {
    //! The raw-number refusals of `ibv_modify_qp` (moved here from proto's
    //! modify tests when `QpAttr` took types): each names the field and its
    //! value, with `EINVAL`, exactly as before.
    use super::*;
    use proptest::prelude::*;

    fn refused(a: &ibv_qp_attr, mask: AttrMask) -> AttrError {
        let e = checked_qp_attr(a, mask).expect_err("a raw value that names nothing");
        assert_eq!(e.errno(), libc::EINVAL, "{e}");
        e
    }

    #[test]
    fn qp_state_above_6_is_einval() {
        for bad in [7u32, 100] {
            let a = ibv_qp_attr {
                qp_state: bad,
                ..Default::default()
            };
            let e = refused(&a, AttrMask::STATE);
            assert_eq!(
                e,
                AttrError::BadStateValue {
                    field: "qp_state",
                    value: bad
                }
            );
            assert!(e.to_string().contains("qp_state = "), "{e}");
        }
    }

    #[test]
    fn cur_qp_state_above_6_is_einval() {
        for bad in [7u32, 8, u32::MAX] {
            let a = ibv_qp_attr {
                qp_state: 3,
                cur_qp_state: bad,
                ..Default::default()
            };
            let e = refused(&a, AttrMask::STATE | AttrMask::CUR_STATE);
            assert_eq!(
                e,
                AttrError::BadStateValue {
                    field: "cur_qp_state",
                    value: bad
                }
            );
            assert!(e.to_string().contains("cur_qp_state"), "{e}");
        }
    }

    #[test]
    fn raw_path_mtu_must_be_an_ibv_mtu() {
        let mask = AttrMask::STATE | AttrMask::PATH_MTU;
        for mtu in [0u32, 6, 7, u32::MAX] {
            let e = refused(
                &ibv_qp_attr {
                    qp_state: 2,
                    path_mtu: mtu,
                    ..Default::default()
                },
                mask,
            );
            assert!(
                e.to_string().contains(&format!("attr.path_mtu = {mtu}")),
                "{e}"
            );
            assert!(e.to_string().contains("allowed 1..=5"), "{e}");
        }
        for mtu in 1..=5 {
            let a = checked_qp_attr(
                &ibv_qp_attr {
                    path_mtu: mtu,
                    ..Default::default()
                },
                mask,
            )
            .unwrap();
            assert_eq!(a.path_mtu.raw(), mtu);
        }
    }

    #[test]
    fn raw_path_mig_state_must_be_an_ibv_mig_state() {
        let mask = AttrMask::STATE | AttrMask::PATH_MIG_STATE;
        let e = refused(
            &ibv_qp_attr {
                qp_state: 3,
                path_mig_state: 3,
                ..Default::default()
            },
            mask,
        );
        assert!(e.to_string().contains("attr.path_mig_state = 3"), "{e}");
        for (raw, typed) in [
            (0, MigState::Migrated),
            (1, MigState::Rearm),
            (2, MigState::Armed),
        ] {
            let a = ibv_qp_attr {
                path_mig_state: raw,
                ..Default::default()
            };
            assert_eq!(checked_qp_attr(&a, mask).unwrap().path_mig_state, typed);
        }
    }

    #[test]
    fn unknown_mask_bits_leave_the_refusal_to_softverbs() {
        // softverbs refuses these with EOPNOTSUPP before it looks at any value
        // (proto's unknown_mask_bits_are_eopnotsupp_before_anything_else).
        let a = ibv_qp_attr {
            qp_state: 9,
            path_mtu: 0,
            ..Default::default()
        };
        for bit in (21..=24).chain(26..=31) {
            let mask = AttrMask::STATE | AttrMask::PATH_MTU | AttrMask(1 << bit);
            assert!(checked_qp_attr(&a, mask).is_ok(), "bit {bit}");
        }
        assert!(checked_qp_attr(&a, AttrMask::STATE | AttrMask::RATE_LIMIT).is_err());
    }

    #[test]
    fn query_reports_an_unset_path_mtu_as_0() {
        let mut attr = QpAttr {
            qp_state: QpState::Init,
            ..QpAttr::default()
        };
        let info = |attr, valid| QpInfo {
            attr,
            valid,
            qp_type: proto::QpType::Rc,
            cap: QpCap::default(),
            sq_sig_all: false,
            has_srq: false,
        };
        let c = c_query_attr(&info(attr, AttrMask::STATE));
        assert_eq!((c.qp_state, c.path_mtu), (1, 0));
        attr.path_mtu = Mtu::Mtu4096;
        let c = c_query_attr(&info(attr, AttrMask::STATE | AttrMask::PATH_MTU));
        assert_eq!(c.path_mtu, 5);
    }

    proptest! {
        /// For any raw numbers and mask: refused exactly when a selected enum
        /// field names nothing (and the mask is all known bits); otherwise every
        /// selected enum field comes back as the number it was.
        #[test]
        fn raw_enum_fields_are_refused_exactly_when_they_name_nothing(
            qp_state in 0u32..10, cur_qp_state in 0u32..10, path_mtu in 0u32..8,
            path_mig_state in 0u32..5, access in any::<u32>(), mask in any::<u32>(),
        ) {
            let raw = ibv_qp_attr {
                qp_state, cur_qp_state, path_mtu, path_mig_state, qp_access_flags: access,
                ..Default::default()
            };
            let mask = AttrMask(mask);
            let has = |b| mask.contains(b);
            let bad = (mask - AttrMask::KNOWN).is_empty()
                && ((has(AttrMask::STATE) && qp_state > 6)
                    || (has(AttrMask::CUR_STATE) && cur_qp_state > 6)
                    || (has(AttrMask::PATH_MTU) && !(1..=5).contains(&path_mtu))
                    || (has(AttrMask::PATH_MIG_STATE) && path_mig_state > 2));
            match checked_qp_attr(&raw, mask) {
                Err(e) => {
                    prop_assert!(bad, "refused {}", e);
                    prop_assert_eq!(e.errno(), libc::EINVAL);
                }
                Ok(a) => {
                    prop_assert!(!bad);
                    let back = c_qp_attr(&a);
                    prop_assert_eq!(back.qp_access_flags, access);
                    for (bit, got, want) in [
                        (AttrMask::STATE, back.qp_state, qp_state),
                        (AttrMask::CUR_STATE, back.cur_qp_state, cur_qp_state),
                        (AttrMask::PATH_MTU, back.path_mtu, path_mtu),
                        (AttrMask::PATH_MIG_STATE, back.path_mig_state, path_mig_state),
                    ] {
                        if has(bit) && (mask - AttrMask::KNOWN).is_empty() {
                            prop_assert_eq!(got, want, "{}", bit);
                        }
                    }
                }
            }
        }
    }
}

//! Property: for random (type, start state, attribute values, mask), `modify_qp`
//! either succeeds exactly when an independent oracle says so — the spec table
//! parsed from markdown (tests/common/spec.rs) plus the §5 value rules written
//! out here — and then stores exactly the masked attributes, or fails with one
//! of the oracle's errnos and leaves the QP exactly unchanged.
//!
//! `QpAttr` holds states, MTUs and migration states as types; the raw numbers
//! a C caller may pass for them (and their refusal) are the C conversion's
//! property, tested beside it in crates/ibverbs/src/convert.rs.

mod common;

use common::spec::{self, SpecTable};
use common::{config, good_av, Fixture};
use proptest::prelude::*;
use proto::qp::modify::Transition;
use proto::{AccessFlags, AhAttr, AttrMask, Errno, Gid, MigState, Mtu, QpAttr, QpState, QpType};
use std::fmt::Debug;
use std::sync::OnceLock;

fn spec_table() -> &'static SpecTable {
    static S: OnceLock<SpecTable> = OnceLock::new();
    S.get_or_init(spec::load)
}

/// Bits named in spec §2 (independent of `AttrMask::KNOWN`).
fn spec_known() -> AttrMask {
    spec_table()
        .names
        .values()
        .fold(AttrMask::EMPTY, |a, b| a | *b)
}

// ---- the oracle ----

/// Spec §3: the table verdict. `Ok(next)` or the errno.
fn table_verdict(t: QpType, actual: QpState, a: &QpAttr, mask: AttrMask) -> Result<QpState, Errno> {
    if !(mask - spec_known()).is_empty() {
        return Err(Errno::EOPNOTSUPP);
    }
    let has = |b| mask.contains(b);
    let next = has(AttrMask::STATE).then_some(a.qp_state);
    let cur = if has(AttrMask::CUR_STATE) {
        let c = a.cur_qp_state;
        if !matches!(c, QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe) {
            return Err(Errno::EINVAL);
        }
        c
    } else {
        actual
    };
    let next = next.unwrap_or(cur);
    let cell = spec_table().lookup(t, cur, next).ok_or(Errno::EINVAL)?;
    let extra = mask - cell.required - cell.optional - AttrMask::STATE;
    if !mask.contains(cell.required) || !extra.is_empty() {
        return Err(Errno::EINVAL);
    }
    Ok(next)
}

/// The av rules on the test device (one port, GID 0 filled, GID 1 empty, 2 entries).
fn av_errno(av: &AhAttr) -> Option<Errno> {
    if av.port_num != 1 || av.is_global == 0 {
        return Some(Errno::EINVAL);
    }
    match av.grh.sgid_index {
        0 => {}
        1 => return Some(Errno::ENODATA),
        _ => return Some(Errno::EINVAL),
    }
    // Any 32-bit flow label is accepted, as Linux accepts it (its low 20 bits count).
    (av.grh.dgid == Gid::ZERO).then_some(Errno::EINVAL)
}

/// Spec §5: the errno of every selected attribute whose value is refused.
fn value_errnos(a: &QpAttr, mask: AttrMask) -> Vec<Errno> {
    use AttrMask as A;
    let checks: [(AttrMask, Option<Errno>); 13] = [
        (A::PORT, (a.port_num != 1).then_some(Errno::EINVAL)),
        (A::PKEY_INDEX, (a.pkey_index != 0).then_some(Errno::EINVAL)),
        (A::AV, av_errno(&a.ah_attr)),
        (A::ALT_PATH, Some(Errno::EINVAL)), // no APM on RoCE
        (A::TIMEOUT, (a.timeout > 31).then_some(Errno::EINVAL)),
        (A::RETRY_CNT, (a.retry_cnt > 7).then_some(Errno::EINVAL)),
        (A::RNR_RETRY, (a.rnr_retry > 7).then_some(Errno::EINVAL)),
        (
            A::MIN_RNR_TIMER,
            (a.min_rnr_timer > 31).then_some(Errno::EINVAL),
        ),
        (
            A::DEST_QPN,
            (a.dest_qp_num > 0xff_ffff).then_some(Errno::EINVAL),
        ),
        (
            A::MAX_QP_RD_ATOMIC,
            (a.max_rd_atomic > 128).then_some(Errno::EINVAL),
        ),
        (
            A::MAX_DEST_RD_ATOMIC,
            (a.max_dest_rd_atomic > 128).then_some(Errno::EINVAL),
        ),
        (
            A::ACCESS_FLAGS,
            // rxe's RXE_ACCESS_SUPPORTED_QP (spec/qp-state-machine.md §5).
            (a.qp_access_flags.0 & !(0xf | 0x10 | 0x40 | 0x100 | 0x200 | 0x3ff0_0000) != 0)
                .then_some(Errno::EINVAL),
        ),
        (A::QKEY, (a.qkey & 0x8000_0000 != 0).then_some(Errno::EPERM)),
    ];
    // Every typed path MTU is within the test device's maximum (4096), and every
    // MigState is one of the three: no refusal left for them here.
    checks
        .iter()
        .filter(|(b, _)| mask.contains(*b))
        .filter_map(|(_, e)| *e)
        .collect()
}

fn oracle(t: QpType, actual: QpState, a: &QpAttr, mask: AttrMask) -> Result<QpState, Vec<Errno>> {
    let next = table_verdict(t, actual, a, mask).map_err(|e| vec![e])?;
    let errs = value_errnos(a, mask);
    if errs.is_empty() {
        Ok(next)
    } else {
        Err(errs)
    }
}

/// Does query report the value `a` set for `bit`? (PSNs masked to 24 bits.)
fn stored(bit: AttrMask, q: &QpAttr, a: &QpAttr) -> bool {
    use AttrMask as A;
    match bit {
        b if b == A::PORT => q.port_num == a.port_num,
        b if b == A::PKEY_INDEX => q.pkey_index == a.pkey_index,
        b if b == A::QKEY => q.qkey == a.qkey,
        b if b == A::ACCESS_FLAGS => q.qp_access_flags == a.qp_access_flags,
        b if b == A::AV => q.ah_attr == a.ah_attr,
        b if b == A::PATH_MTU => q.path_mtu == a.path_mtu,
        b if b == A::TIMEOUT => q.timeout == a.timeout,
        b if b == A::RETRY_CNT => q.retry_cnt == a.retry_cnt,
        b if b == A::RNR_RETRY => q.rnr_retry == a.rnr_retry,
        b if b == A::RQ_PSN => q.rq_psn == a.rq_psn & 0xff_ffff,
        b if b == A::SQ_PSN => q.sq_psn == a.sq_psn & 0xff_ffff,
        b if b == A::MAX_QP_RD_ATOMIC => q.max_rd_atomic == a.max_rd_atomic,
        b if b == A::MAX_DEST_RD_ATOMIC => q.max_dest_rd_atomic == a.max_dest_rd_atomic,
        b if b == A::MIN_RNR_TIMER => q.min_rnr_timer == a.min_rnr_timer,
        b if b == A::PATH_MIG_STATE => q.path_mig_state == a.path_mig_state,
        b if b == A::DEST_QPN => q.dest_qp_num == a.dest_qp_num,
        _ => true, // STATE, CUR_STATE, EN_SQD_ASYNC_NOTIFY: not stored attributes
    }
}

// ---- strategies ----

fn pick<T: Clone + Debug + 'static>(good: T, bad: &[T]) -> impl Strategy<Value = T> {
    prop_oneof![4 => Just(good), 1 => proptest::sample::select(bad.to_vec())]
}

fn av() -> impl Strategy<Value = AhAttr> {
    let g = good_av();
    (
        pick(1u8, &[0, 2]),
        pick(1u8, &[0]),
        pick(0u8, &[1, 1, 2]), // 1 = the empty GID entry (ENODATA), twice as likely
        pick(g.grh.dgid, &[Gid::ZERO]),
        pick(5u32, &[0xf_ffff, 1 << 20]),
    )
        .prop_map(move |(port_num, is_global, sgid, dgid, flow)| {
            let mut a = AhAttr {
                port_num,
                is_global,
                ..g
            };
            (a.grh.sgid_index, a.grh.dgid, a.grh.flow_label) = (sgid, dgid, flow);
            a
        })
}

fn attr() -> impl Strategy<Value = QpAttr> {
    let states = proptest::sample::select(QpState::ALL.to_vec());
    let words = (
        states.clone(),
        states,
        pick(Mtu::Mtu1024, &[Mtu::Mtu256, Mtu::Mtu4096]),
        pick(MigState::Migrated, &[MigState::Rearm, MigState::Armed]),
        pick(0x1111_1111u32, &[0x8000_0000, 0]),
        any::<u32>(),
        any::<u32>(),
        pick(0x99u32, &[0xff_ffff, 0x100_0000]),
        pick(0x7u32, &[0, 0xf, 0x10 | 0x40, 0x20, 0x8000_0000]).prop_map(AccessFlags),
    );
    let bytes = (
        av(),
        pick(0u16, &[1]),
        (pick(4u8, &[0, 128, 129, 255]), pick(4u8, &[128, 129])),
        pick(12u8, &[0, 31, 32]),
        pick(1u8, &[0, 2]),
        (
            pick(14u8, &[31, 32]),
            pick(7u8, &[0, 8]),
            pick(7u8, &[0, 8]),
        ),
    );
    (words, bytes).prop_map(|(w, b)| {
        let mut a = common::good_attr(QpState::Reset, QpState::Reset);
        (
            a.qp_state,
            a.cur_qp_state,
            a.path_mtu,
            a.path_mig_state,
            a.qkey,
        ) = (w.0, w.1, w.2, w.3, w.4);
        (a.rq_psn, a.sq_psn, a.dest_qp_num, a.qp_access_flags) = (w.5, w.6, w.7, w.8);
        (a.ah_attr, a.pkey_index, a.min_rnr_timer, a.port_num) = (b.0, b.1, b.3, b.4);
        (a.max_rd_atomic, a.max_dest_rd_atomic) = b.2;
        (a.timeout, a.retry_cnt, a.rnr_retry) = b.5;
        a
    })
}

/// How the mask is built: STATE or not, the spec's required set for the
/// requested pair or not, a random subset of its optional set, and noise bits.
#[derive(Debug, Clone)]
struct MaskPlan {
    /// Replace `qp_state` by the n-th legal next state of the start state
    /// (illegal pairs would otherwise dominate), and `cur_qp_state` by the start.
    legal_next: Option<usize>,
    truthful_cur: bool,
    state: bool,
    required: bool,
    optional: u32,
    noise: Vec<u8>,
}

fn mask_plan() -> impl Strategy<Value = MaskPlan> {
    let noise = prop::collection::vec(prop_oneof![6 => 0u8..21, 1 => 21u8..32], 0..=2);
    let flags = (
        prop::bool::weighted(0.7),
        prop::bool::weighted(0.85),
        prop::bool::weighted(0.75),
    );
    (
        proptest::option::weighted(0.7, 0usize..8),
        flags,
        any::<u32>(),
        noise,
    )
        .prop_map(
            |(legal_next, (truthful_cur, state, required), optional, noise)| MaskPlan {
                legal_next,
                truthful_cur,
                state,
                required,
                optional,
                noise,
            },
        )
}

/// Applies the plan: returns the attributes and mask to modify with.
fn prepare(plan: &MaskPlan, t: QpType, start: QpState, a: &QpAttr) -> (QpAttr, AttrMask) {
    let mut a = *a;
    let legal: Vec<QpState> = QpState::ALL
        .into_iter()
        .filter(|n| spec_table().lookup(t, start, *n).is_some())
        .collect();
    if let Some(i) = plan.legal_next {
        a.qp_state = legal[i % legal.len()];
    }
    if plan.truthful_cur {
        a.cur_qp_state = start;
    }
    (a, build_mask(plan, t, start, &a))
}

fn build_mask(plan: &MaskPlan, t: QpType, start: QpState, a: &QpAttr) -> AttrMask {
    let mut m = if plan.state {
        AttrMask::STATE
    } else {
        AttrMask::EMPTY
    };
    let next = if plan.state { a.qp_state } else { start };
    if let Some(cell) = spec_table().lookup(t, start, next) {
        if plan.required {
            m |= cell.required;
        }
        m |= cell.optional & AttrMask(plan.optional);
    }
    for b in &plan.noise {
        m |= AttrMask(1 << b);
    }
    m
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn modify_matches_the_oracle(
        t in proptest::sample::select(QpType::SUPPORTED.to_vec()),
        start in proptest::sample::select(QpState::ALL.to_vec()),
        a in attr(),
        plan in mask_plan(),
    ) {
        let mut fx = Fixture::with(&config(true));
        let h = fx.qp_in(t, start);
        let (a, mask) = prepare(&plan, t, start, &a);
        let before = fx.snap(h);
        let want = oracle(t, start, &a, mask);
        let got = fx.eng.modify_qp(h, &a, mask);
        let after = fx.snap(h);
        match (want, got) {
            (Ok(next), Ok(tr)) => {
                prop_assert_eq!(tr, Transition { from: start, to: next });
                prop_assert_eq!(after.0.qp_state, next);
                check_success(next, mask, &a, &before, &after)?;
            }
            (Err(errnos), Err(e)) => {
                prop_assert!(errnos.contains(&e.errno()), "{} ({:?}) not in {:?}", e, e.errno(), errnos);
                prop_assert_eq!(after, before, "refused modify changed the QP: {}", e);
            }
            (want, got) => prop_assert!(false, "mask {}: oracle {:?}, engine {:?}", mask, want, got),
        }
    }
}

fn check_success(
    next: QpState,
    mask: AttrMask,
    a: &QpAttr,
    before: &(QpAttr, AttrMask),
    after: &(QpAttr, AttrMask),
) -> Result<(), TestCaseError> {
    let set = mask - AttrMask::CUR_STATE - AttrMask::EN_SQD_ASYNC_NOTIFY;
    if next == QpState::Reset {
        prop_assert_eq!(after.1, AttrMask::STATE | AttrMask::CAP);
        return Ok(());
    }
    prop_assert_eq!(after.1, before.1 | set, "valid mask");
    for bit in AttrMask::KNOWN.iter() {
        if set.contains(bit) {
            prop_assert!(stored(bit, &after.0, a), "{} not stored", bit);
        } else {
            prop_assert!(
                stored(bit, &after.0, &before.0),
                "{} changed without its bit",
                bit
            );
        }
    }
    Ok(())
}

/// The generator must reach successes and every kind of refusal often enough,
/// or the property above would hold vacuously.
#[test]
fn generator_covers_successes_and_every_errno() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strat = (
        proptest::sample::select(QpType::SUPPORTED.to_vec()),
        proptest::sample::select(QpState::ALL.to_vec()),
        attr(),
        mask_plan(),
    );
    let (mut ok, mut errs) = (0, std::collections::HashMap::new());
    let n = 4000;
    for _ in 0..n {
        let (t, start, a, plan) = strat.new_tree(&mut runner).unwrap().current();
        let (a, mask) = prepare(&plan, t, start, &a);
        match oracle(t, start, &a, mask) {
            Ok(_) => ok += 1,
            Err(e) => {
                for errno in e {
                    *errs.entry(errno).or_insert(0) += 1;
                }
            }
        }
    }
    assert!(ok > n / 10, "only {ok} of {n} cases succeed");
    eprintln!("{ok} of {n} succeed; refusals {errs:?}");
    // Controlled Q_Keys and empty GID entries need a rarer combination (a UD QKEY,
    // an AV in INIT→RTR or SQD→SQD): a few in 4000 is what the weights give.
    let floors = [
        (Errno::EINVAL, n / 20),
        (Errno::EOPNOTSUPP, n / 20),
        (Errno::EPERM, 3),
        (Errno::ENODATA, 3),
    ];
    for (errno, floor) in floors {
        assert!(
            errs.get(&errno).copied().unwrap_or(0) >= floor,
            "{errno:?}: {ok} ok, {errs:?}"
        );
    }
}

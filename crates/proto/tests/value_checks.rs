//! Every value check of spec/qp-state-machine.md §5: the errno, a Display that
//! names the field, the boundary value still accepted, and a refusal that leaves
//! the QP exactly as it was.

mod common;

use common::{config, good_attr, minimal, Fixture};
use proto::error::ModifyError;
use proto::qp::modify::ModifyEnv;
use proto::qp::QpControl;
use proto::{
    AccessFlags, AttrMask, Errno, Error, Gid, MigState, Mtu, QpAttr, QpCap, QpState, QpType,
};

/// A modify `from → to` on a fresh QP of type `t`, with the minimal mask plus `extra`
/// and `good_attr` changed by `tweak`.
struct Case {
    t: QpType,
    from: QpState,
    to: QpState,
    extra: AttrMask,
}

use QpState::{Init, Reset, Rtr, Rts};

const INIT_RC: Case = Case {
    t: QpType::Rc,
    from: Reset,
    to: Init,
    extra: AttrMask::EMPTY,
};
const INIT_UD: Case = Case {
    t: QpType::Ud,
    from: Reset,
    to: Init,
    extra: AttrMask::EMPTY,
};
const RTR_RC: Case = Case {
    t: QpType::Rc,
    from: Init,
    to: Rtr,
    extra: AttrMask::EMPTY,
};
const RTS_RC: Case = Case {
    t: QpType::Rc,
    from: Rtr,
    to: Rts,
    extra: AttrMask::EMPTY,
};

impl Case {
    fn with(self, extra: AttrMask) -> Case {
        Case { extra, ..self }
    }

    fn run(
        &self,
        fx: &mut Fixture,
        tweak: impl Fn(&mut QpAttr),
    ) -> (Result<(), ModifyError>, QpAttr) {
        let h = fx.qp_in(self.t, self.from);
        let mut attr = good_attr(self.from, self.to);
        tweak(&mut attr);
        let mask = AttrMask::STATE | minimal(self.t, self.from, self.to) | self.extra;
        let before = fx.snap(h);
        let r = fx.eng.modify_qp(h, &attr, mask).map(|_| ());
        let after = fx.snap(h);
        match r {
            Ok(()) => {
                assert_eq!(after.0.qp_state, self.to);
                (Ok(()), after.0)
            }
            Err(Error::Modify(e)) => {
                assert_eq!(after, before, "refused modify ({e}) changed the QP");
                (Err(e), after.0)
            }
            Err(other) => panic!("not a modify error: {other:?}"),
        }
    }

    /// Expects a refusal with `errno` whose Display contains `words`.
    fn refuses(&self, tweak: impl Fn(&mut QpAttr), errno: Errno, words: &str) -> ModifyError {
        self.refuses_on(&mut Fixture::new(), tweak, errno, words)
    }

    fn refuses_on(
        &self,
        fx: &mut Fixture,
        tweak: impl Fn(&mut QpAttr),
        errno: Errno,
        words: &str,
    ) -> ModifyError {
        let e = self.run(fx, tweak).0.expect_err("value should be refused");
        assert_eq!(e.errno(), errno, "{e}");
        assert!(
            e.to_string().contains(words),
            "{e:?} Display {e} lacks {words:?}"
        );
        e
    }

    /// Expects success; returns what query reports afterwards.
    fn accepts(&self, tweak: impl Fn(&mut QpAttr)) -> QpAttr {
        let (r, got) = self.run(&mut Fixture::new(), tweak);
        r.unwrap_or_else(|e| panic!("refused: {e}"));
        got
    }
}

#[test]
fn port_must_exist() {
    for port in [0u8, 2, 255] {
        let e = INIT_RC.refuses(
            |a| a.port_num = port,
            Errno::EINVAL,
            &format!("attr.port_num = {port}"),
        );
        assert_eq!(
            e,
            ModifyError::BadPort {
                owner: "attr",
                port
            }
        );
    }
    assert_eq!(INIT_RC.accepts(|a| a.port_num = 1).port_num, 1);
}

#[test]
fn av_port_must_exist_and_be_the_qps() {
    // One port only: an AV port other than the QP's (1) is also a port that does
    // not exist, so the device-port check fires before AvPortMismatch can.
    for port in [0u8, 2] {
        RTR_RC.refuses(
            |a| a.ah_attr.port_num = port,
            Errno::EINVAL,
            &format!("ah_attr.port_num = {port}"),
        );
    }
}

#[test]
fn roce_needs_a_grh() {
    let e = RTR_RC.refuses(
        |a| a.ah_attr.is_global = 0,
        Errno::EINVAL,
        "RoCE needs a GRH",
    );
    assert_eq!(e, ModifyError::NoGrh { which: "ah_attr" });
    assert!(e.to_string().contains("ah_attr.is_global"));
}

#[test]
fn zero_dgid_is_refused_and_any_flow_label_accepted() {
    RTR_RC.refuses(
        |a| a.ah_attr.grh.dgid = Gid::ZERO,
        Errno::EINVAL,
        "ah_attr.grh.dgid",
    );
    // Linux copies the 32-bit field unchecked; UCX passes ~0.
    for flow in [0xf_ffff, 1 << 20, u32::MAX] {
        let got = RTR_RC.accepts(|a| a.ah_attr.grh.flow_label = flow);
        assert_eq!(got.ah_attr.grh.flow_label, flow);
    }
}

#[test]
fn sgid_index_beyond_the_table_is_einval() {
    for idx in [1u8, 255] {
        RTR_RC.refuses(
            |a| a.ah_attr.grh.sgid_index = idx,
            Errno::EINVAL,
            &format!("GID index {idx}"),
        );
    }
}

#[test]
fn sgid_index_of_an_empty_entry_is_enodata() {
    let mut fx = Fixture::with(&config(true));
    assert_eq!(fx.eng.info().port.gid_tbl_len, 2);
    let e = RTR_RC.refuses_on(
        &mut fx,
        |a| a.ah_attr.grh.sgid_index = 1,
        Errno::ENODATA,
        "GID index 1",
    );
    assert!(e.to_string().contains("empty"), "{e}");
    RTR_RC.refuses_on(
        &mut fx,
        |a| a.ah_attr.grh.sgid_index = 2,
        Errno::EINVAL,
        "beyond the GID table",
    );
    RTR_RC
        .run(&mut fx, |a| a.ah_attr.grh.sgid_index = 0)
        .0
        .expect("index 0 is filled");
}

#[test]
fn pkey_index_beyond_the_table_is_einval() {
    INIT_RC.refuses(|a| a.pkey_index = 1, Errno::EINVAL, "P_Key index 1");
    INIT_UD.refuses(
        |a| a.pkey_index = 0xffff,
        Errno::EINVAL,
        "P_Key index 65535",
    );
    RTR_RC
        .with(AttrMask::PKEY_INDEX)
        .refuses(|a| a.pkey_index = 1, Errno::EINVAL, "P_Key index 1");
}

#[test]
fn every_path_mtu_up_to_the_device_max_is_stored() {
    // A raw number that is no ibv_mtu (0, 6, …) is refused by the C conversion
    // (crates/ibverbs/src/convert.rs, its test raw_path_mtu_must_be_an_ibv_mtu).
    assert_eq!(Fixture::new().eng.info().port.max_mtu, Mtu::Mtu4096);
    for mtu in [
        Mtu::Mtu256,
        Mtu::Mtu512,
        Mtu::Mtu1024,
        Mtu::Mtu2048,
        Mtu::Mtu4096,
    ] {
        assert_eq!(RTR_RC.accepts(|a| a.path_mtu = mtu).path_mtu, mtu);
    }
}

#[test]
fn rts_ranges() {
    RTS_RC.refuses(|a| a.timeout = 32, Errno::EINVAL, "attr.timeout = 32");
    RTS_RC.refuses(|a| a.retry_cnt = 8, Errno::EINVAL, "attr.retry_cnt = 8");
    RTS_RC.refuses(|a| a.rnr_retry = 8, Errno::EINVAL, "attr.rnr_retry = 8");
    RTS_RC.refuses(
        |a| a.max_rd_atomic = 129,
        Errno::EINVAL,
        "attr.max_rd_atomic = 129",
    );
    let opt = RTS_RC.with(AttrMask::MIN_RNR_TIMER | AttrMask::PATH_MIG_STATE);
    opt.refuses(
        |a| a.min_rnr_timer = 32,
        Errno::EINVAL,
        "attr.min_rnr_timer = 32",
    );
    // path_mig_state = 3 names no state: refused by the C conversion
    // (crates/ibverbs/src/convert.rs); ARMED (2) is the largest.
    let got = opt.accepts(|a| {
        (a.timeout, a.retry_cnt, a.rnr_retry, a.max_rd_atomic) = (31, 7, 7, 128);
        (a.min_rnr_timer, a.path_mig_state) = (31, MigState::Armed);
    });
    assert_eq!(
        (got.timeout, got.retry_cnt, got.rnr_retry, got.max_rd_atomic),
        (31, 7, 7, 128)
    );
    assert_eq!(
        (got.min_rnr_timer, got.path_mig_state),
        (31, MigState::Armed)
    );
}

#[test]
fn rtr_ranges() {
    RTR_RC.refuses(
        |a| a.min_rnr_timer = 32,
        Errno::EINVAL,
        "attr.min_rnr_timer = 32",
    );
    RTR_RC.refuses(
        |a| a.dest_qp_num = 0x100_0000,
        Errno::EINVAL,
        "attr.dest_qp_num = 16777216",
    );
    RTR_RC.refuses(
        |a| a.max_dest_rd_atomic = 129,
        Errno::EINVAL,
        "attr.max_dest_rd_atomic = 129",
    );
    let got = RTR_RC
        .accepts(|a| (a.dest_qp_num, a.max_dest_rd_atomic, a.min_rnr_timer) = (0xff_ffff, 128, 31));
    assert_eq!(
        (got.dest_qp_num, got.max_dest_rd_atomic, got.min_rnr_timer),
        (0xff_ffff, 128, 31)
    );
}

#[test]
fn device_limits_are_the_ones_checked() {
    let fx = Fixture::new();
    let a = &fx.eng.info().attr;
    assert_eq!(
        (a.max_qp_init_rd_atom, a.max_qp_rd_atom),
        (128, 128),
        "the 129 cases above rely on this"
    );
}

#[test]
fn access_flags_rxe_qp_set() {
    // rxe's RXE_ACCESS_SUPPORTED_QP: ZERO_BASED, HUGETLB, bits 10..=19 and
    // 30..=31 are refused (spec/qp-state-machine.md §5).
    for bad in [0x20u32, 0x80, 0x400, 1 << 19, 0x8000_0000] {
        let e = INIT_RC.refuses(
            |a| a.qp_access_flags = AccessFlags(bad),
            Errno::EINVAL,
            "attr.qp_access_flags",
        );
        assert!(
            matches!(e, ModifyError::AccessFlags { unsupported, .. } if unsupported == bad),
            "{e:?}"
        );
    }
    assert_eq!(
        INIT_RC
            .accepts(|a| a.qp_access_flags = AccessFlags(0xf))
            .qp_access_flags,
        AccessFlags(0xf)
    );
    assert_eq!(
        INIT_RC
            .accepts(|a| a.qp_access_flags = AccessFlags(0))
            .qp_access_flags,
        AccessFlags(0)
    );
    // An MR's flags (MW_BIND, ON_DEMAND, flush, optional range) are kept.
    let mr_flags = AccessFlags(0xf | 0x10 | 0x40 | 0x100 | 0x200 | (1 << 20));
    assert_eq!(
        INIT_RC
            .accepts(|a| a.qp_access_flags = mr_flags)
            .qp_access_flags,
        mr_flags
    );
}

#[test]
fn controlled_qkey_is_eperm_for_users() {
    let e = INIT_UD.refuses(
        |a| a.qkey = 0x8000_0000,
        Errno::EPERM,
        "attr.qkey = 0x80000000",
    );
    assert_eq!(e, ModifyError::ControlledQkey { qkey: 0x8000_0000 });
    assert_eq!(INIT_UD.accepts(|a| a.qkey = 0x7fff_ffff).qkey, 0x7fff_ffff);
    // A privileged caller may set it (QpControl level: the Engine is unprivileged).
    let fx = Fixture::new();
    let env = ModifyEnv {
        dev: fx.eng.info(),
        privileged: true,
    };
    let mut qp = QpControl::new(QpType::Ud, 0x42, QpCap::default(), false, false);
    let mut a = good_attr(Reset, Init);
    a.qkey = 0x8000_0001;
    qp.modify(&a, AttrMask::STATE | minimal(QpType::Ud, Reset, Init), env)
        .expect("privileged");
    assert_eq!(qp.query().0.qkey, 0x8000_0001);
}

#[test]
fn wide_psns_are_accepted_and_masked() {
    let got = RTR_RC.accepts(|a| a.rq_psn = 0xff12_3456);
    assert_eq!(got.rq_psn, 0x12_3456);
    let got = RTS_RC.accepts(|a| a.sq_psn = 0x01ab_cdef);
    assert_eq!(got.sq_psn, 0xab_cdef);
}

#[test]
fn fields_outside_the_mask_are_ignored() {
    let bogus = |a: &mut QpAttr| {
        (
            a.timeout,
            a.retry_cnt,
            a.max_rd_atomic,
            a.path_mtu,
            a.pkey_index,
        ) = (99, 99, 255, Mtu::Mtu256, 9);
        (a.qkey, a.qp_access_flags, a.ah_attr.is_global, a.port_num) =
            (0x8000_0000, AccessFlags(0xffff), 0, 7);
    };
    let uc_rts = Case {
        t: QpType::Uc,
        from: Rtr,
        to: Rts,
        extra: AttrMask::EMPTY,
    };
    let got = uc_rts.accepts(bogus);
    assert_eq!(
        (got.timeout, got.qkey, got.pkey_index),
        (0, 0, 0),
        "not valid for UC, reported as 0"
    );
}

#[test]
fn value_checks_come_after_the_table() {
    // A missing required bit wins over a bad value in a field that is present.
    let mut fx = Fixture::new();
    let h = fx.qp(QpType::Rc);
    let mut a = good_attr(Reset, Init);
    a.port_num = 9;
    let e = fx
        .eng
        .modify_qp(h, &a, AttrMask::STATE | AttrMask::PORT)
        .unwrap_err();
    assert!(
        matches!(e, Error::Modify(ModifyError::MissingRequired { .. })),
        "{e:?}"
    );
}

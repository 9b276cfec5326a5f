//! On-demand paging through the Rust API: regions registered with
//! `ON_DEMAND` carry every operation (each access faults its range in), and
//! `ProtectionDomain::advise_mr` prefetches or refuses with the kernel's errno
//! and a reason in words. (Unmapped and read-only pages, and implicit regions,
//! are driven from C in the ibverbs crate's `tests/c/memory_checks.c`.)

mod pair;

use pair::*;
use softverbs::*;

const LEN: usize = 8192;
const ODP: AccessFlags = AccessFlags::ON_DEMAND;

fn odp_sides(tag: u8) -> (Side, Side) {
    let (mut a, mut b) = sides_on("odp", 21, tag, 0);
    a.mr = a.pd.reg_mr(LEN, ALL | ODP).unwrap();
    b.mr = b.pd.reg_mr(LEN, ALL | ODP).unwrap();
    (a, b)
}

#[test]
fn on_demand_regions_carry_send_write_read_and_atomics() {
    let (a, b) = odp_sides(0);
    assert!(a.mr.access().contains(ODP));
    let (qa, qb) = rc_pair(&a, &b);
    let data = pattern(3000, 7);
    assert!(a.mr.write(0, &data));
    // SEND into an on-demand receive buffer.
    qb.post_recv(&recv_wr(1, &[b.mr.sge(0, 4096)])).unwrap();
    let sg = [a.mr.sge(0, 3000)];
    qa.post_send(&send_wr(2, WrOpcode::Send, &sg, WrTarget::None, SIG))
        .unwrap();
    assert_eq!(ids(&wait(&a.scq, 1)), [(2, WcStatus::Success)]);
    assert_eq!(wait(&b.rcq, 1)[0].byte_len, 3000);
    assert_eq!(read(&b.mr, 0, 3000), data);
    // WRITE and READ through the rkey.
    let t = WrTarget::Rdma(b.mr.remote(4096));
    qa.post_send(&send_wr(3, WrOpcode::RdmaWrite, &sg, t, SIG))
        .unwrap();
    assert_eq!(ids(&wait(&a.scq, 1)), [(3, WcStatus::Success)]);
    assert_eq!(read(&b.mr, 4096, 3000), data);
    let back = [a.mr.sge(4096, 3000)];
    qa.post_send(&send_wr(4, WrOpcode::RdmaRead, &back, t, SIG))
        .unwrap();
    assert_eq!(ids(&wait(&a.scq, 1)), [(4, WcStatus::Success)]);
    assert_eq!(read(&a.mr, 4096, 3000), data);
    // Fetch-and-add on an on-demand word.
    assert!(b.mr.write(8000, &5u64.to_ne_bytes()));
    let res = [a.mr.sge(8000, 8)];
    let at = WrTarget::Atomic(AtomicTarget {
        remote_addr: b.mr.addr() + 8000,
        rkey: b.mr.rkey(),
        compare_add: 10,
        swap: 0,
    });
    qa.post_send(&send_wr(5, WrOpcode::AtomicFetchAndAdd, &res, at, SIG))
        .unwrap();
    assert_eq!(ids(&wait(&a.scq, 1)), [(5, WcStatus::Success)]);
    assert_eq!(read(&b.mr, 8000, 8), 15u64.to_ne_bytes());
    assert_eq!(read(&a.mr, 8000, 8), 5u64.to_ne_bytes());
}

#[test]
fn advise_mr_prefetches_or_says_why_not() {
    let (a, _b) = odp_sides(1);
    let sge = a.mr.sge(0, 4096);
    for (advice, flags) in [(0, 1), (1, 0), (2, 0)] {
        a.pd.advise_mr(advice, flags, &[sge]).unwrap();
    }
    let pinned = a.pd.reg_mr(64, ALL).unwrap();
    let read_only = a.pd.reg_mr(64, AccessFlags::REMOTE_READ | ODP).unwrap();
    let other_pd = a.ctx.alloc_pd().unwrap();
    let outside = Sge {
        addr: a.mr.addr() + LEN as u64 - 8,
        length: 16,
        lkey: a.mr.lkey(),
    };
    let cases: Vec<(&ProtectionDomain, u32, u32, Sge, Errno, &str)> = vec![
        (&a.pd, 7, 0, sge, Errno::EOPNOTSUPP, "advice 7 is not"),
        (
            &a.pd,
            0,
            2,
            sge,
            Errno::EINVAL,
            "beyond IBV_ADVISE_MR_FLAG_FLUSH",
        ),
        (
            &a.pd,
            0,
            0,
            pinned.sge(0, 8),
            Errno::ENOENT,
            "names no on-demand",
        ),
        (
            &other_pd,
            0,
            0,
            sge,
            Errno::EPERM,
            "another protection domain",
        ),
        (
            &a.pd,
            1,
            0,
            read_only.sge(0, 8),
            Errno::EPERM,
            "lacks IBV_ACCESS_LOCAL_WRITE",
        ),
        (&a.pd, 0, 0, outside, Errno::EFAULT, "is outside the region"),
    ];
    for (pd, advice, flags, sge, errno, words) in cases {
        let e = pd.advise_mr(advice, flags, &[sge]).unwrap_err();
        assert_eq!(e.errno(), errno, "{e}");
        assert!(e.to_string().contains(words), "{words:?}: {e}");
    }
}

#[test]
fn on_demand_alone_is_valid_zero_based_is_not() {
    let (a, _b) = sides_on("odp-reg", 21, 2, 64);
    // ON_DEMAND alone (local read only) is a valid registration.
    let m = a.pd.reg_mr(64, ODP).unwrap();
    assert_eq!(m.access(), ODP);
    // ZERO_BASED is still not offered.
    let e = a.pd.reg_mr(64, ODP | AccessFlags::ZERO_BASED).unwrap_err();
    assert_eq!(e.errno(), Errno::EOPNOTSUPP, "{e}");
}

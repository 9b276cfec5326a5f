//! Memory windows and ATOMIC WRITE through the Rust API (spec/memory-windows.md):
//! a window's rkey reaches only its range with its rights, invalidation cuts it,
//! a dropped region takes its windows' bindings with it, and refusals say why.

mod pair;

use pair::*;
use softverbs::*;

const LEN: usize = 4096;

fn write_to(a: &Side, qa: &QueuePair<Rc>, remote_addr: u64, rkey: u32, id: u64) -> WcStatus {
    let sg = [a.mr.sge(0, 8)];
    let t = WrTarget::Rdma(RdmaTarget { remote_addr, rkey });
    qa.post_send(&send_wr(id, WrOpcode::RdmaWrite, &sg, t, SIG))
        .unwrap();
    wait(&a.scq, 1)[0].status
}

fn bind(
    b: &Side,
    qb: &QueuePair<Rc>,
    w: &MemoryWindow,
    mr: &MemoryRegion,
    off: u64,
    len: u64,
) -> WcStatus {
    let t = w.bind_target(
        Some(mr.lkey()),
        mr.addr() + off,
        len,
        AccessFlags::REMOTE_WRITE,
        w.next_rkey(),
    );
    qb.post_send(&send_wr(50, WrOpcode::BindMw, &[], t, SIG))
        .unwrap();
    let wc = wait(&b.scq, 1)[0];
    assert_eq!(wc.opcode, WcOpcode::BindMw);
    wc.status
}

fn invalidate(b: &Side, qb: &QueuePair<Rc>, rkey: u32) -> WcStatus {
    let t = WrTarget::Invalidate { rkey };
    qb.post_send(&send_wr(51, WrOpcode::LocalInv, &[], t, SIG))
        .unwrap();
    wait(&b.scq, 1)[0].status
}

fn window_region(b: &Side) -> MemoryRegion {
    b.pd.reg_mr(LEN, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND)
        .unwrap()
}

#[test]
fn type2_window_reaches_its_range_until_invalidated() {
    let (a, b) = sides_on("mw-t2", 27, 0, LEN);
    let region = window_region(&b);
    let (qa, qb) = rc_pair(&a, &b);
    let w = b.pd.alloc_mw(MwType::Two).unwrap();
    assert!(!w.is_bound());
    assert_eq!(bind(&b, &qb, &w, &region, 64, 64), WcStatus::Success);
    assert!(w.is_bound());
    let rkey = w.rkey();
    assert!(a.mr.write(0, b"windowed"));
    assert_eq!(
        write_to(&a, &qa, region.addr() + 64, rkey, 1),
        WcStatus::Success
    );
    assert_eq!(read(&region, 64, 8), b"windowed");
    assert_eq!(invalidate(&b, &qb, rkey), WcStatus::Success);
    assert!(!w.is_bound());
    assert_eq!(
        write_to(&a, &qa, region.addr() + 64, rkey, 2),
        WcStatus::RemAccessErr
    );
}

#[test]
fn the_regions_own_rkey_allows_nothing_remote() {
    let (a, b) = sides_on("mw-rkey", 27, 1, LEN);
    let region = window_region(&b);
    let (qa, _qb) = rc_pair(&a, &b);
    assert_eq!(
        write_to(&a, &qa, region.addr(), region.rkey(), 1),
        WcStatus::RemAccessErr
    );
}

#[test]
fn a_dropped_region_or_window_leaves_no_key_behind() {
    let (a, b) = sides_on("mw-drop", 27, 2, LEN);
    let (qa, qb) = rc_pair(&a, &b);
    let region = window_region(&b);
    let addr = region.addr();
    let w = b.pd.alloc_mw(MwType::Two).unwrap();
    assert_eq!(bind(&b, &qb, &w, &region, 0, 64), WcStatus::Success);
    let rkey = w.rkey();
    drop(region);
    assert!(!w.is_bound(), "the region took the binding with it");
    assert_eq!(write_to(&a, &qa, addr, rkey, 1), WcStatus::RemAccessErr);

    let (qa, qb) = rc_pair(&a, &b);
    let region = window_region(&b);
    assert_eq!(bind(&b, &qb, &w, &region, 0, 64), WcStatus::Success);
    let rkey = w.rkey();
    w.dealloc();
    assert_eq!(
        write_to(&a, &qa, region.addr(), rkey, 2),
        WcStatus::RemAccessErr
    );
}

#[test]
fn refused_binds_and_invalidations_say_why() {
    let (_a, b) = sides_on("mw-bad", 27, 3, LEN);
    let (_qa, qb) = rc_pair(&_a, &b);
    let w = b.pd.alloc_mw(MwType::Two).unwrap();
    // b.mr has every access bit but MW_BIND (IBA C10-73).
    assert_eq!(bind(&b, &qb, &w, &b.mr, 0, 64), WcStatus::MwBindErr);
    let why = qb.window_error().expect("a reason").to_string();
    assert!(why.contains("without IBV_ACCESS_MW_BIND"), "{why}");
    assert_eq!(state(&qb), QpState::Err);

    let (_qa, qb) = rc_pair(&_a, &b);
    let other = b.ctx.alloc_pd().unwrap();
    let foreign = other.alloc_mw(MwType::Two).unwrap();
    assert_eq!(invalidate(&b, &qb, foreign.rkey()), WcStatus::LocQpOpErr);
    let why = qb.window_error().expect("a reason").to_string();
    assert!(why.contains("another protection domain"), "{why}");
    assert_eq!(MwType::from_raw(3), None, "only types 1 and 2 exist");
}

#[test]
fn atomic_write_places_eight_bytes() {
    let (a, b) = sides_on("mw-aw", 27, 4, LEN);
    let (qa, _qb) = rc_pair(&a, &b);
    assert!(a.mr.write(0, &0x1122_3344_5566_7788u64.to_ne_bytes()));
    let sg = [a.mr.sge(0, 8)];
    let t = WrTarget::Rdma(RdmaTarget {
        remote_addr: b.mr.addr() + 16,
        rkey: b.mr.rkey(),
    });
    qa.post_send(&send_wr(9, WrOpcode::AtomicWrite, &sg, t, SIG))
        .unwrap();
    let wc = wait(&a.scq, 1)[0];
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::AtomicWrite)
    );
    assert_eq!(read(&b.mr, 16, 8), 0x1122_3344_5566_7788u64.to_ne_bytes());
    // Misaligned: refused at post time, with the reason.
    let t = WrTarget::Rdma(RdmaTarget {
        remote_addr: b.mr.addr() + 12,
        rkey: b.mr.rkey(),
    });
    let e = qa
        .post_send(&send_wr(10, WrOpcode::AtomicWrite, &sg, t, SIG))
        .unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    assert!(e.to_string().contains("not 8-byte aligned"), "{e}");
}

#[test]
fn flush_to_global_visibility() {
    let (a, b) = sides_on("mw-flush", 27, 5, LEN);
    let (qa, _qb) = rc_pair(&a, &b);
    let region =
        b.pd.reg_mr(
            LEN,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::FLUSH_GLOBAL,
        )
        .unwrap();
    let target = |level| {
        WrTarget::Flush(FlushTarget {
            remote_addr: region.addr(),
            rkey: region.rkey(),
            len: 64,
            placement: FLUSH_GLOBAL,
            level,
        })
    };
    assert!(a.mr.write(0, b"flushed!"));
    assert_eq!(
        write_to(&a, &qa, region.addr(), region.rkey(), 1),
        WcStatus::Success
    );
    for level in [FLUSH_RANGE, FLUSH_MR] {
        qa.post_send(&send_wr(2, WrOpcode::Flush, &[], target(level), SIG))
            .unwrap();
        let wc = wait(&a.scq, 1)[0];
        assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::Flush));
    }
    assert_eq!(read(&region, 0, 8), b"flushed!");
    // Persistence is not offered: refused at post time, in words.
    let mut t = target(FLUSH_RANGE);
    if let WrTarget::Flush(f) = &mut t {
        f.placement = FLUSH_PERSISTENT;
    }
    let e = qa
        .post_send(&send_wr(3, WrOpcode::Flush, &[], t, SIG))
        .unwrap_err();
    assert_eq!(e.errno(), Errno::EOPNOTSUPP);
    assert!(e.to_string().contains("no persistent memory"), "{e}");
}

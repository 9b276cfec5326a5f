//! Device memory through the Rust API: allocation within the device's
//! budget, word-aligned copies with the kernel's errno, and zero-based
//! regions over it that SEND, RDMA WRITE and RDMA READ reach by offsets from
//! 0, checked like any region (bounds, access, PD).

mod pair;

use pair::*;
use softverbs::*;

const ZB: AccessFlags = AccessFlags::ZERO_BASED;
const MAX: u64 = 256 * 1024;

#[test]
fn allocation_and_copies_follow_the_rules() {
    let ctx = device("dm-alloc", "127.7.22.1", Mtu::Mtu1024);
    let dm = ctx.alloc_dm(64, 6, 0).unwrap();
    assert_eq!(dm.len(), 64);
    let mut back = [0u8; 64];
    dm.copy_from(0, &mut back).unwrap();
    assert_eq!(back, [0; 64], "zeroed");
    dm.copy_to(8, &pattern(16, 3)).unwrap();
    let mut got = [0u8; 16];
    dm.copy_from(8, &mut got).unwrap();
    assert_eq!(got.to_vec(), pattern(16, 3));

    let cases: [(u64, u32, u32, Errno, &str); 4] = [
        (64, 0, 1, Errno::EINVAL, "comp_mask"),
        (0, 0, 0, Errno::EINVAL, "not within 1..=262144"),
        (MAX + 1, 0, 0, Errno::EINVAL, "max_dm_size"),
        (64, 13, 0, Errno::EINVAL, "page-aligned"),
    ];
    for (len, align, mask, errno, words) in cases {
        let e = ctx.alloc_dm(len, align, mask).unwrap_err();
        assert_eq!(e.errno(), errno, "{e}");
        assert!(e.to_string().contains(words), "{words:?}: {e}");
    }
    for (off, len, errno) in [
        (3u64, 4usize, Errno::EINVAL),
        (4, 3, Errno::EINVAL),
        (64, 4, Errno::EFAULT),
        (0, 68, Errno::EFAULT),
    ] {
        let e = dm.copy_to(off, &vec![1; len]).unwrap_err();
        assert_eq!(e.errno(), errno, "to {off}+{len}: {e}");
        let e = dm.copy_from(off, &mut vec![0; len]).unwrap_err();
        assert_eq!(e.errno(), errno, "from {off}+{len}: {e}");
    }
    // The device's budget is shared by its contexts; freed memory returns to it.
    let other = ctx.clone();
    let big = other.alloc_dm(MAX - 64, 0, 0).unwrap();
    let e = ctx.alloc_dm(4, 0, 0).unwrap_err();
    assert_eq!(e.errno(), Errno::ENOMEM, "{e}");
    drop(big);
    ctx.alloc_dm(4, 0, 0).expect("budget back after the free");
}

#[test]
fn zero_based_regions_carry_traffic_by_offset() {
    let (a, b) = sides_on("dm-mr", 22, 1, 4096);
    let dm = b.ctx.alloc_dm(1024, 0, 0).unwrap();
    // Registration rules.
    let e =
        b.pd.reg_dm_mr(&dm, 0, 64, AccessFlags::LOCAL_WRITE)
            .unwrap_err();
    assert!(
        e.to_string().contains("must include IBV_ACCESS_ZERO_BASED"),
        "{e}"
    );
    let e =
        b.pd.reg_dm_mr(&dm, 512, 1024, ZB | AccessFlags::LOCAL_WRITE)
            .unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL, "{e}");
    let acc = ZB | AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    // Bytes 256..768 of the device memory, addressed 0..512.
    let mr = b.pd.reg_dm_mr(&dm, 256, 512, acc).unwrap();
    assert_eq!(mr.len(), 512);
    let dm = dm.free().expect_err("in use by a region");
    assert_eq!(dm.error.errno(), Errno::EBUSY, "{}", dm.error);
    let dm = dm.object;

    let (qa, qb) = rc_pair(&a, &b);
    let data = pattern(200, 9);
    assert!(a.mr.write(0, &data));
    let sg = [a.mr.sge(0, 200)];
    // SEND into the region at offset 16.
    qb.post_recv(&recv_wr(
        1,
        &[Sge {
            addr: 16,
            length: 256,
            lkey: mr.lkey(),
        }],
    ))
    .unwrap();
    qa.post_send(&send_wr(2, WrOpcode::Send, &sg, WrTarget::None, SIG))
        .unwrap();
    assert_eq!(ids(&wait(&a.scq, 1)), [(2, WcStatus::Success)]);
    wait(&b.rcq, 1);
    let mut got = vec![0u8; 200];
    dm.copy_from(256 + 16, &mut got).unwrap();
    assert_eq!(got, data);
    // RDMA WRITE at region address 300 (device memory byte 556).
    let t = WrTarget::Rdma(RdmaTarget {
        remote_addr: 300,
        rkey: mr.rkey(),
    });
    qa.post_send(&send_wr(3, WrOpcode::RdmaWrite, &sg, t, SIG))
        .unwrap();
    assert_eq!(ids(&wait(&a.scq, 1)), [(3, WcStatus::Success)]);
    dm.copy_from(556, &mut got).unwrap();
    assert_eq!(got, data);
    // RDMA READ back from region address 300.
    let back = [a.mr.sge(1024, 200)];
    qa.post_send(&send_wr(4, WrOpcode::RdmaRead, &back, t, SIG))
        .unwrap();
    assert_eq!(ids(&wait(&a.scq, 1)), [(4, WcStatus::Success)]);
    assert_eq!(read(&a.mr, 1024, 200), data);
    // Past the region's 512 bytes: refused, the device memory after it untouched.
    let beyond = WrTarget::Rdma(RdmaTarget {
        remote_addr: 400,
        rkey: mr.rkey(),
    });
    qa.post_send(&send_wr(5, WrOpcode::RdmaWrite, &sg, beyond, SIG))
        .unwrap();
    assert_eq!(ids(&wait(&a.scq, 1)), [(5, WcStatus::RemAccessErr)]);
    let mut tail = vec![0u8; 256];
    dm.copy_from(768, &mut tail).unwrap();
    assert_eq!(tail, vec![0; 256]);
    drop((qa, qb));
    drop(mr);
    dm.free().expect("free once the region is gone");
}

//! The payload of every datagram comes from the right bytes: the sender
//! gathers straight from registered memory into the datagram (requests and
//! READ responses), so these tests move messages through several unaligned
//! SGEs, across path-MTU boundaries, with a transmit buffer full of junk
//! before every packet and with packets lost (the retransmission gathers
//! again). Every byte is compared with what was posted; the receiver checks
//! every ICRC, so a wrong pad or payload byte would also be a counted drop.

mod net;
use net::*;

const MTU: usize = 1024;
const JUNK: u8 = 0xA5;

/// Lengths around the path-MTU boundaries (MTU 1024) and one long message.
const LENGTHS: [usize; 12] = [
    1,
    3,
    MTU - 1,
    MTU,
    MTU + 1,
    2 * MTU - 1,
    2 * MTU,
    2 * MTU + 1,
    3 * MTU + 3,
    5 * MTU - 2,
    7001,
    16 * MTU + 5,
];

/// `len` bytes cut into up to `pieces` SGEs at unaligned addresses inside
/// `[BASE + off, ..)`, scattered with gaps; returns the SGEs (all with `lkey`).
fn sges(off: u64, len: usize, pieces: usize, lkey: u32) -> Vec<Sge> {
    let pieces = pieces.clamp(1, 4).min(len.max(1));
    let mut out = Vec::new();
    let mut addr = BASE + off + 3; // unaligned from the start
    let mut left = len;
    for i in 0..pieces {
        let n = if i + 1 == pieces {
            left
        } else {
            // Uneven cuts: 1/3, then 1/2 of the rest, ... plus an odd offset.
            // (every piece at least one byte).
            (left / (pieces - i) + 7 * i + 1).min(left - (pieces - i - 1))
        };
        out.push(Sge {
            addr,
            length: n as u32,
            lkey,
        });
        addr += n as u64 + 13 + i as u64; // a gap, so neighbours are not contiguous
        left -= n;
    }
    out
}

/// Writes `data` through the list `sg` into `mem`.
fn scatter_into(mem: &VecMemory, sg: &[Sge], data: &[u8]) {
    let mut at = 0;
    for s in sg {
        let n = s.length as usize;
        mem.write(s.addr, &data[at..at + n]);
        at += n;
    }
    assert_eq!(at, data.len());
}

/// Reads the bytes of the list `sg` from `mem`.
fn gather_from(mem: &VecMemory, sg: &[Sge]) -> Vec<u8> {
    sg.iter()
        .flat_map(|s| mem.snapshot(s.addr, s.length as usize))
        .collect()
}

/// [`Net::run`], but the transmit buffer is filled with junk before every
/// packet (so pad or payload bytes the engine fails to write show), and
/// `lose(from_a, n)` says whether the `n`-th packet (1-based, per side) is lost.
fn run_junk(net: &mut Net, mut lose: impl FnMut(bool, u32) -> bool) {
    let mut buf = vec![JUNK; 9000];
    let mut count = [0u32; 2];
    for _ in 0..100_000 {
        let mut moved = false;
        for from_a in [true, false] {
            let (src, dst) = if from_a {
                (&mut net.a, &mut net.b)
            } else {
                (&mut net.b, &mut net.a)
            };
            loop {
                buf.fill(JUNK);
                let Some(t) = src.e.poll_transmit(net.now, &src.mem, &mut buf) else {
                    break;
                };
                moved = true;
                let c = &mut count[usize::from(!from_a)];
                *c += 1;
                if lose(from_a, *c) {
                    continue;
                }
                let (from, to) = (src.addr(), dst.addr());
                dst.e
                    .handle_datagram(net.now, from, to, &buf[..t.len], &dst.mem);
            }
        }
        if moved {
            continue;
        }
        let next = [net.a.e.poll_timeout(), net.b.e.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        let Some(t) = next else { return };
        net.now = net.now.max(t);
        net.a.e.handle_timeout(net.now);
        net.b.e.handle_timeout(net.now);
    }
    panic!("the network never went quiet");
}

/// No datagram was malformed or failed its ICRC on either side.
fn no_bad_datagrams(net: &Net) {
    for e in [&net.a.e, &net.b.e] {
        let c = e.counters();
        assert_eq!((c.drop_malformed, c.drop_icrc), (0, 0), "{c:?}");
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Send,
    Write,
    Read,
}

/// One message of `len` bytes by `op` from A's list of `pieces` SGEs to B's
/// list of `pieces + 1` SGEs (READ: from B's memory into A's list), with
/// packets lost as `lose` says; every byte checked, and the completions.
fn one_message(op: Op, len: usize, pieces: usize, seed: u8, lose: impl FnMut(bool, u32) -> bool) {
    let mut net = Net::new();
    let (qa, _, qb, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, MEM as u64, 1 | 2);
    let (lb, rb) = net.b.mr(0, MEM as u64, 1 | 2 | 4);
    let data = pattern(len, seed);
    // Junk everywhere first, so bytes placed in the wrong spot show.
    net.a.mem.write(BASE, &vec![0x5A; MEM]);
    net.b.mem.write(BASE, &vec![0x3C; MEM]);
    let a_sg = sges(0x100, len, pieces, la);
    let b_sg = sges(0x4_0000, len, pieces + 1, lb);
    let (remote, wr_op) = match op {
        Op::Send => (WrTarget::None, WrOpcode::Send),
        Op::Write | Op::Read => {
            let opcode = if op == Op::Write {
                WrOpcode::RdmaWrite
            } else {
                WrOpcode::RdmaRead
            };
            let t = RdmaTarget {
                remote_addr: BASE + 0x8_0001, // unaligned remote address
                rkey: rb,
            };
            (WrTarget::Rdma(t), opcode)
        }
    };
    match op {
        Op::Read => net.b.mem.write(BASE + 0x8_0001, &data),
        _ => scatter_into(&net.a.mem, &a_sg, &data),
    }
    if op == Op::Send {
        let wr = RecvWr {
            wr_id: 9,
            sg_list: &b_sg,
        };
        net.b.e.post_recv(qb, &wr).unwrap();
    }
    net.a
        .e
        .post_send(qa, &send_wr(1, wr_op, &a_sg, remote), None)
        .unwrap();
    run_junk(&mut net, lose);
    let wa = net.a.poll();
    assert_eq!(wa.len(), 1, "{op:?} {len}: {wa:?}");
    assert_eq!(wa[0].status, WcStatus::Success, "{op:?} {len}");
    let got = match op {
        Op::Send => {
            let wb = net.b.poll();
            assert_eq!(
                (wb[0].status, wb[0].byte_len),
                (WcStatus::Success, len as u32)
            );
            gather_from(&net.b.mem, &b_sg)[..len].to_vec()
        }
        Op::Write => net.b.mem.snapshot(BASE + 0x8_0001, len),
        Op::Read => gather_from(&net.a.mem, &a_sg),
    };
    assert!(got == data, "{op:?} {len} B in {pieces} SGEs: bytes differ");
    // Nothing outside the target ranges changed: the gap after each
    // destination SGE (or after the WRITE's range) keeps its junk.
    let (mem, gaps, junk): (&VecMemory, Vec<(u64, usize)>, u8) = match op {
        Op::Write => (&net.b.mem, vec![(BASE + 0x8_0001 + len as u64, 16)], 0x3C),
        Op::Send => (&net.b.mem, gaps_after(&b_sg), 0x3C),
        Op::Read => (&net.a.mem, gaps_after(&a_sg), 0x5A),
    };
    for (at, n) in gaps {
        let g = mem.snapshot(at, n);
        assert!(
            g.iter().all(|&b| b == junk),
            "{op:?} {len}: wrote at {at:#x}"
        );
    }
    no_bad_datagrams(&net);
}

/// The gaps [`sges`] leaves after each element: (address, length).
fn gaps_after(sg: &[Sge]) -> Vec<(u64, usize)> {
    sg.iter()
        .enumerate()
        .map(|(i, s)| (s.addr + u64::from(s.length), 13 + i))
        .collect()
}

#[test]
fn send_write_read_through_several_unaligned_sges_at_mtu_boundaries() {
    for (i, &len) in LENGTHS.iter().enumerate() {
        for op in [Op::Send, Op::Write, Op::Read] {
            for pieces in [1, 2, 4] {
                one_message(op, len, pieces, i as u8, |_, _| false);
            }
        }
    }
}

#[test]
fn lost_packets_are_gathered_again_byte_for_byte() {
    for (i, &len) in LENGTHS.iter().enumerate() {
        for op in [Op::Send, Op::Write, Op::Read] {
            // Every third of A's first 12 packets and every fourth of B's
            // (ACKs, READ responses) lost: retransmissions and resumed READs
            // gather again. (A loss pattern that never ends could meet the
            // same packet of every go-back-N round and exhaust the retries.)
            one_message(op, len, 3, i as u8 + 40, |from_a, n| {
                n <= 12 && if from_a { n % 3 == 2 } else { n % 4 == 3 }
            });
        }
    }
}

#[test]
fn many_messages_in_flight_keep_their_order_and_bytes() {
    let mut net = Net::new();
    let (qa, _, qb, _) = connect(&mut net, QpType::Rc);
    let (la, _) = net.a.mr(0, MEM as u64, 1 | 2);
    let (lb, rb) = net.b.mr(0, MEM as u64, 1 | 2 | 4);
    // 48 WRITEs and SENDs of mixed sizes posted at once, to distinct places.
    let mut want = Vec::new();
    let mut src = 0x100u64;
    let mut dst = 0x4_0000u64;
    for i in 0..48u64 {
        let len = [64usize, 1, MTU + 1, 3 * MTU, 777][i as usize % 5];
        let data = pattern(len, i as u8);
        let sg = sges(src, len, 1 + i as usize % 3, la);
        scatter_into(&net.a.mem, &sg, &data);
        let (op, t) = if i % 2 == 0 {
            let t = WrTarget::Rdma(RdmaTarget {
                remote_addr: BASE + dst,
                rkey: rb,
            });
            (WrOpcode::RdmaWrite, t)
        } else {
            let rsg = [Sge {
                addr: BASE + dst,
                length: len as u32,
                lkey: lb,
            }];
            let wr = RecvWr {
                wr_id: i,
                sg_list: &rsg,
            };
            net.b.e.post_recv(qb, &wr).unwrap();
            (WrOpcode::Send, WrTarget::None)
        };
        net.a
            .e
            .post_send(qa, &send_wr(i, op, &sg, t), None)
            .unwrap();
        want.push((dst, data));
        src += 4 * MTU as u64 + 64;
        dst += 4 * MTU as u64 + 64;
    }
    run_junk(&mut net, |from_a, n| from_a && n % 7 == 0 && n < 60);
    let wa = net.a.poll();
    let ids: Vec<u64> = wa.iter().map(|w| w.wr_id).collect();
    assert_eq!(
        ids,
        (0..48).collect::<Vec<_>>(),
        "completions in posting order"
    );
    assert!(wa.iter().all(|w| w.status == WcStatus::Success));
    for (dst, data) in want {
        assert!(
            net.b.mem.snapshot(BASE + dst, data.len()) == data,
            "at {dst:#x}"
        );
    }
    no_bad_datagrams(&net);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Any length up to 6 MTUs, any number of SGEs, any operation, a random
    /// loss pattern: the bytes arrive exactly.
    #[test]
    fn random_messages_arrive_exactly(
        len in 1usize..6 * MTU,
        pieces in 1usize..5,
        op in 0u8..3,
        seed in proptest::prelude::any::<u8>(),
        loss in 0u32..6,
    ) {
        let op = [Op::Send, Op::Write, Op::Read][op as usize];
        one_message(op, len, pieces, seed, |_, n| loss > 1 && n < 12 && n % (loss + 1) == 1);
    }
}

//! Two devices in one process, each with its own loopback address and UDP
//! socket, and helpers to connect QPs between them.

#![allow(dead_code)]

use softverbs::*;
use std::time::Duration;

pub const T: Duration = Duration::from_secs(10);
pub const ALL: AccessFlags = AccessFlags(0xf);
pub const QKEY: u32 = 0x11;

/// A side on a device of its own (see [`device`] for `ip`) whose same-host
/// path is on or off as `same_host` says, with an MR of `mr_len` bytes.
pub fn side_on_path(name: &str, ip: &str, same_host: bool, mr_len: usize) -> Side {
    let cfg = DeviceConfig {
        name: name.into(),
        addrs: vec![private_addr(ip)],
        active_mtu: Mtu::Mtu1024,
    };
    let dev = Device::with_config(cfg).with_same_host(same_host);
    Side::new(dev.open().unwrap(), mr_len)
}

/// A device on a loopback address of its own. `ip` (127.7.X.Y) names the
/// device within the test binary; the address really used mixes in the
/// process ID, so copies of the suite running at once on one host (other
/// worktrees, CI jobs) do not take each other's addresses.
pub fn device(name: &str, ip: &str, mtu: Mtu) -> Context {
    let cfg = DeviceConfig {
        name: name.into(),
        addrs: vec![private_addr(ip)],
        active_mtu: mtu,
    };
    Device::with_config(cfg).open().unwrap()
}

/// 127.7.X.Y → 127.(128 + Y).(8X + pid/256 mod 8).(pid mod 256), X < 32, Y < 128.
pub fn private_addr(ip: &str) -> std::net::IpAddr {
    let o: std::net::Ipv4Addr = ip.parse().unwrap();
    let [_, _, x, y] = o.octets();
    assert!(
        x < 32 && y < 128,
        "test address {ip} out of the mapped range"
    );
    let pid = std::process::id();
    std::net::Ipv4Addr::new(127, 128 + y, x * 8 + ((pid >> 8) % 8) as u8, pid as u8).into()
}

/// One side: a PD, a send CQ, a receive CQ and a registered buffer.
pub struct Side {
    pub ctx: Context,
    pub pd: ProtectionDomain,
    pub scq: CompletionQueue,
    pub rcq: CompletionQueue,
    pub mr: MemoryRegion,
}

impl Side {
    pub fn new(ctx: Context, mr_len: usize) -> Side {
        let pd = ctx.alloc_pd().unwrap();
        let scq = ctx.create_cq(1024).unwrap();
        let rcq = ctx.create_cq(1024).unwrap();
        let mr = pd.reg_mr(mr_len, ALL).unwrap();
        Side {
            ctx,
            pd,
            scq,
            rcq,
            mr,
        }
    }

    pub fn init(&self) -> QpInit<'_> {
        let mut i = QpInit::new(&self.scq, &self.rcq);
        i.cap = QpCap {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 64,
        };
        i
    }

    pub fn gid(&self) -> Gid {
        self.ctx.query_gid(1, 0).unwrap()
    }
}

/// Exactly `n` completions on `cq` within `T`.
pub fn wait(cq: &CompletionQueue, n: usize) -> Vec<WorkCompletion> {
    wait_within(cq, n, T)
}

/// Exactly `n` completions on `cq` within `limit` (a bound that only catches
/// a hang: transfers of many megabytes in a debug build on a loaded machine
/// need more than `T`).
pub fn wait_within(cq: &CompletionQueue, n: usize, limit: Duration) -> Vec<WorkCompletion> {
    let wc = cq.wait(n, limit);
    assert_eq!(
        wc.len(),
        n,
        "{} of {n} completions within {limit:?}: {wc:?}",
        wc.len()
    );
    wc
}

/// Nothing more on `cq` right now.
pub fn empty(cq: &CompletionQueue) {
    let mut v = Vec::new();
    assert_eq!(cq.poll(16, &mut v), 0, "unexpected completions {v:?}");
}

pub struct RcOpts {
    /// Local ACK timeout exponent (4.096 µs × 2^timeout).
    pub timeout: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub mtu: Mtu,
    /// Responder resources for incoming READs/atomics.
    pub max_dest_rd_atomic: u8,
    /// The first PSN of both directions (`sq_psn` and the peer's `rq_psn`).
    pub psn: u32,
}

impl Default for RcOpts {
    fn default() -> Self {
        RcOpts {
            timeout: 14,
            rnr_retry: 7,
            min_rnr_timer: 1,
            mtu: Mtu::Mtu1024,
            max_dest_rd_atomic: 16,
            psn: 0,
        }
    }
}

/// Brings `qp` to RTS connected to `peer_qpn` at `peer_gid`.
pub fn rc_connect(qp: &QueuePair<Rc>, peer_gid: Gid, peer_qpn: u32, o: &RcOpts) {
    qp.to_init(ConnectedInit {
        pkey_index: 0,
        port_num: 1,
        access: ALL,
    })
    .unwrap();
    qp.to_rtr(RcRtr {
        ah: AhAttr::roce(peer_gid, 0),
        path_mtu: o.mtu,
        dest_qp_num: peer_qpn,
        rq_psn: o.psn,
        max_dest_rd_atomic: o.max_dest_rd_atomic,
        min_rnr_timer: o.min_rnr_timer,
    })
    .unwrap();
    qp.to_rts(RcRts {
        sq_psn: o.psn,
        timeout: o.timeout,
        retry_cnt: 7,
        rnr_retry: o.rnr_retry,
        max_rd_atomic: 16,
    })
    .unwrap();
}

/// A connected RC pair with the given init attributes.
pub fn rc_pair_with(
    a: &Side,
    ia: &QpInit<'_>,
    b: &Side,
    ib: &QpInit<'_>,
    o: &RcOpts,
) -> (QueuePair<Rc>, QueuePair<Rc>) {
    let qa = a.pd.create_rc_qp(ia).unwrap();
    let qb = b.pd.create_rc_qp(ib).unwrap();
    rc_connect(&qa, b.gid(), qb.qp_num(), o);
    rc_connect(&qb, a.gid(), qa.qp_num(), o);
    (qa, qb)
}

pub fn rc_pair(a: &Side, b: &Side) -> (QueuePair<Rc>, QueuePair<Rc>) {
    rc_pair_with(a, &a.init(), b, &b.init(), &RcOpts::default())
}

pub fn uc_pair(a: &Side, b: &Side) -> (QueuePair<Uc>, QueuePair<Uc>) {
    let qa = a.pd.create_uc_qp(&a.init()).unwrap();
    let qb = b.pd.create_uc_qp(&b.init()).unwrap();
    for (qp, gid, peer) in [(&qa, b.gid(), qb.qp_num()), (&qb, a.gid(), qa.qp_num())] {
        qp.to_init(ConnectedInit {
            pkey_index: 0,
            port_num: 1,
            access: ALL,
        })
        .unwrap();
        qp.to_rtr(UcRtr {
            ah: AhAttr::roce(gid, 0),
            path_mtu: Mtu::Mtu1024,
            dest_qp_num: peer,
            rq_psn: 0,
        })
        .unwrap();
        qp.to_rts(SqPsnRts { sq_psn: 0 }).unwrap();
    }
    (qa, qb)
}

pub fn ud_qp(s: &Side) -> QueuePair<Ud> {
    let q = s.pd.create_ud_qp(&s.init()).unwrap();
    q.to_init(DatagramInit {
        pkey_index: 0,
        port_num: 1,
        qkey: QKEY,
    })
    .unwrap();
    q.to_rtr(UdRtr).unwrap();
    q.to_rts(SqPsnRts { sq_psn: 0 }).unwrap();
    q
}

pub fn send_wr<'a>(
    id: u64,
    op: WrOpcode,
    sg: &'a [Sge],
    target: WrTarget,
    flags: SendFlags,
) -> SendWr<'a> {
    SendWr {
        wr_id: id,
        opcode: op,
        flags,
        sg_list: sg,
        imm_data: ImmData::from_value(0x1234),
        target,
    }
}

/// Posts an 8-byte SEND from the start of `mr` (no target: RC, UC), the
/// filler many tests put behind the WR they are about.
pub fn post_send8<T: Transport>(qp: &QueuePair<T>, mr: &MemoryRegion, id: u64, flags: SendFlags) {
    let sg = [mr.sge(0, 8)];
    qp.post_send(&send_wr(id, WrOpcode::Send, &sg, WrTarget::None, flags))
        .unwrap();
}

pub fn recv_wr(id: u64, sg: &[Sge]) -> RecvWr<'_> {
    RecvWr {
        wr_id: id,
        sg_list: sg,
    }
}

pub fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| ((i * 31 + (i >> 8) * 7) as u8) ^ seed)
        .collect()
}

pub fn read(mr: &MemoryRegion, off: usize, n: usize) -> Vec<u8> {
    let mut v = vec![0; n];
    assert!(mr.read(off, &mut v));
    v
}

/// (wr_id, status) of each completion.
pub fn ids(wc: &[WorkCompletion]) -> Vec<(u64, WcStatus)> {
    wc.iter().map(|w| (w.wr_id, w.status)).collect()
}

/// Signaled, the usual send flag of these tests.
pub const SIG: SendFlags = SendFlags::SIGNALED;

/// Two sides on 127.7.`net`.(2·`tag`) and .(2·`tag`+1) (a test that also places
/// devices by hand in that net keeps clear of these hosts: two devices on one
/// address would share it, as processes of one host do), named
/// `prefix-tag-a` / `-b`, each with an MR of `mr_len` bytes.
pub fn sides_on(prefix: &str, net: u8, tag: u8, mr_len: usize) -> (Side, Side) {
    let side = |end: &str, host: u8| {
        let ip = format!("127.7.{net}.{host}");
        Side::new(
            device(&format!("{prefix}-{tag}-{end}"), &ip, Mtu::Mtu1024),
            mr_len,
        )
    };
    (side("a", 2 * tag), side("b", 2 * tag + 1))
}

/// The QP's state as `ibv_query_qp` reports it.
pub fn state<T: Transport>(q: &QueuePair<T>) -> QpState {
    q.state().unwrap()
}

/// Waits (bounded) until `q` reaches `want`: the peer learns of an error from a
/// NAK it sent, so its state changes on its own progress thread.
pub fn await_state<T: Transport>(q: &QueuePair<T>, want: QpState) {
    let deadline = std::time::Instant::now() + T;
    while state(q) != want && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(state(q), want);
}

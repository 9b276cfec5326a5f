//! The operation × transport matrix, written once and run by two roles that
//! talk over a line-based TCP control channel: the requester (role A) posts
//! each operation, the responder (role B) prepares for it and checks what
//! arrived. The same code runs as two threads of one process (two devices, or
//! one device) and as two processes (see `ops_matrix.rs`).
//!
//! Every case is verified byte for byte on the side where the bytes land, with
//! guard bytes around the target that must stay untouched, and every `ibv_wc`
//! field of both completions is checked against what completions.md §1–§4 give
//! for the opcode.

#![allow(dead_code)]

use softverbs::*;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

pub const T: Duration = Duration::from_secs(10);
pub const ALL: AccessFlags = AccessFlags(0xf);
pub const QKEY: u32 = 0x1234_5678;
/// Registered bytes on each side.
pub const MR_LEN: usize = 1 << 20;
/// Where A gathers from / READ and atomic results land (A), where receives and
/// RDMA targets are (B).
const SRC: usize = 0;
const DST: usize = 256 << 10;
const RECV: usize = 600 << 10;
const ATOMIC: usize = 900 << 10;
/// Space left between scatter/gather pieces (must stay untouched).
const GAP: usize = 16;
/// Guard bytes checked around every RDMA target.
const GUARD: usize = 64;

/// The control channel: one line per message.
pub struct Ctrl {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Ctrl {
    pub fn listen() -> (TcpListener, u16) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        (l, port)
    }

    pub fn accept(l: TcpListener) -> Ctrl {
        l.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match l.accept() {
                Ok((s, _)) => return Ctrl::over(s),
                Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => panic!("the peer never connected: {e}"),
            }
        }
    }

    pub fn connect(port: u16) -> Ctrl {
        Ctrl::over(TcpStream::connect(("127.0.0.1", port)).expect("connect to the control port"))
    }

    fn over(s: TcpStream) -> Ctrl {
        s.set_nonblocking(false).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        Ctrl {
            reader: BufReader::new(s.try_clone().unwrap()),
            writer: s,
        }
    }

    pub fn send(&mut self, line: &str) {
        writeln!(self.writer, "{line}")
            .and_then(|()| self.writer.flush())
            .expect("control channel write");
    }

    pub fn recv(&mut self) -> String {
        let mut s = String::new();
        let n = self
            .reader
            .read_line(&mut s)
            .expect("control channel read (peer died or timed out)");
        assert!(
            n > 0,
            "the peer closed the control channel (it failed; see its output)"
        );
        s.trim().to_string()
    }

    pub fn expect(&mut self, want: &str) {
        let got = self.recv();
        assert_eq!(got, want, "control channel out of step");
    }
}

/// What one side tells the other at set-up.
#[derive(Debug, Clone, Copy)]
struct Hello {
    gid: Gid,
    rc: u32,
    uc: u32,
    ud: u32,
    addr: u64,
    rkey: u32,
    mtu: u32,
    max_sge: u32,
    max_inline: u32,
}

impl Hello {
    fn line(&self) -> String {
        let hex: String = self.gid.0.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{hex} {} {} {} {} {} {} {} {}",
            self.rc,
            self.uc,
            self.ud,
            self.addr,
            self.rkey,
            self.mtu,
            self.max_sge,
            self.max_inline
        )
    }

    fn parse(line: &str) -> Hello {
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f.len(), 9, "bad hello {line:?}");
        let mut gid = [0u8; 16];
        for (i, b) in gid.iter_mut().enumerate() {
            *b = u8::from_str_radix(&f[0][2 * i..2 * i + 2], 16).unwrap();
        }
        let n = |i: usize| f[i].parse::<u64>().unwrap();
        Hello {
            gid: Gid(gid),
            rc: n(1) as u32,
            uc: n(2) as u32,
            ud: n(3) as u32,
            addr: n(4),
            rkey: n(5) as u32,
            mtu: n(6) as u32,
            max_sge: n(7) as u32,
            max_inline: n(8) as u32,
        }
    }
}

/// One side: its objects and what the peer told it.
pub struct End {
    pub ctx: Context,
    pub pd: ProtectionDomain,
    pub scq: CompletionQueue,
    pub rcq: CompletionQueue,
    pub mr: MemoryRegion,
    pub rc: QueuePair<Rc>,
    pub uc: QueuePair<Uc>,
    pub ud: QueuePair<Ud>,
    ah: Option<AddressHandle>,
    peer: Hello,
    me: Hello,
    ctrl: Ctrl,
}

fn create(
    ctx: &Context,
) -> (
    ProtectionDomain,
    CompletionQueue,
    CompletionQueue,
    MemoryRegion,
) {
    let pd = ctx.alloc_pd().unwrap();
    let scq = ctx.create_cq(256).unwrap();
    let rcq = ctx.create_cq(256).unwrap();
    let mr = pd.reg_mr(MR_LEN, ALL).unwrap();
    (pd, scq, rcq, mr)
}

impl End {
    /// Creates the QPs (send and receive SGEs up to the device's max_sge, inline
    /// up to what the QP grants for 1024 asked), swaps hellos, connects.
    pub fn setup(ctx: Context, mut ctrl: Ctrl) -> End {
        let (pd, scq, rcq, mr) = create(&ctx);
        let max_sge = ctx.query_device().max_sge;
        let mut init = QpInit::new(&scq, &rcq);
        init.cap = QpCap {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: max_sge,
            max_recv_sge: max_sge,
            max_inline_data: 1024,
        };
        let rc = pd.create_rc_qp(&init).unwrap();
        let uc = pd.create_uc_qp(&init).unwrap();
        let ud = pd.create_ud_qp(&init).unwrap();
        assert!(rc.cap().max_inline_data >= 1024 && rc.cap().max_send_sge >= max_sge);
        let me = Hello {
            gid: ctx.query_gid(1, 0).unwrap(),
            rc: rc.qp_num(),
            uc: uc.qp_num(),
            ud: ud.qp_num(),
            addr: mr.addr(),
            rkey: mr.rkey(),
            mtu: ctx.query_port(1).unwrap().active_mtu.bytes(),
            max_sge,
            max_inline: rc
                .cap()
                .max_inline_data
                .min(uc.cap().max_inline_data)
                .min(ud.cap().max_inline_data),
        };
        ctrl.send(&me.line());
        let peer = Hello::parse(&ctrl.recv());
        let mut end = End {
            ctx,
            pd,
            scq,
            rcq,
            mr,
            rc,
            uc,
            ud,
            ah: None,
            peer,
            me,
            ctrl,
        };
        end.connect();
        end
    }

    fn mtu(&self) -> Mtu {
        let bytes = self.me.mtu.min(self.peer.mtu);
        (1..=5)
            .filter_map(Mtu::from_raw)
            .find(|m| m.bytes() == bytes)
            .unwrap()
    }

    fn connect(&mut self) {
        let (ah, mtu, p) = (AhAttr::roce(self.peer.gid, 0), self.mtu(), self.peer);
        self.rc
            .to_init(ConnectedInit {
                pkey_index: 0,
                port_num: 1,
                access: ALL,
            })
            .unwrap();
        self.rc
            .to_rtr(RcRtr {
                ah,
                path_mtu: mtu,
                dest_qp_num: p.rc,
                rq_psn: 0x77,
                max_dest_rd_atomic: 16,
                min_rnr_timer: 1,
            })
            .unwrap();
        self.rc
            .to_rts(RcRts {
                sq_psn: 0x77,
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
                max_rd_atomic: 16,
            })
            .unwrap();
        // UC PSNs near the 2^24 wrap, so multi-packet messages cross it.
        self.uc
            .to_init(ConnectedInit {
                pkey_index: 0,
                port_num: 1,
                access: ALL,
            })
            .unwrap();
        self.uc
            .to_rtr(UcRtr {
                ah,
                path_mtu: mtu,
                dest_qp_num: p.uc,
                rq_psn: 0xff_fffe,
            })
            .unwrap();
        self.uc.to_rts(SqPsnRts { sq_psn: 0xff_fffe }).unwrap();
        self.ud
            .to_init(DatagramInit {
                pkey_index: 0,
                port_num: 1,
                qkey: QKEY,
            })
            .unwrap();
        self.ud.to_rtr(UdRtr).unwrap();
        self.ud.to_rts(SqPsnRts { sq_psn: 0 }).unwrap();
        self.ah = Some(self.pd.create_ah(&ah).unwrap());
        self.ctrl.send("connected");
        self.ctrl.expect("connected");
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tr {
    Rc,
    Uc,
    Ud,
}

/// One operation of the matrix.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    pub tr: Tr,
    pub op: WrOpcode,
    pub len: usize,
    /// SGEs on the requester side (gather; READ/atomic: scatter).
    pub send_sges: usize,
    /// SGEs on the receive WR (UD: plus one 40-byte element for the GRH area).
    pub recv_sges: usize,
    pub inline: bool,
    /// CAS: the compare value matches (swap happens).
    pub cas_hit: bool,
}

fn case(tr: Tr, op: WrOpcode, len: usize, send_sges: usize, recv_sges: usize) -> Case {
    Case {
        tr,
        op,
        len,
        send_sges,
        recv_sges,
        inline: false,
        cas_hit: false,
    }
}

/// The matrix for path MTU `mtu`, `max_sge` SGEs and `max_inline` inline bytes.
pub fn cases(mtu: usize, max_sge: usize, max_inline: usize) -> Vec<Case> {
    use WrOpcode::*;
    let multi = 3 * mtu + 123; // four packets, the last short
    let mut v = Vec::new();
    for op in [Send, SendWithImm, RdmaWrite, RdmaWriteWithImm, RdmaRead] {
        v.push(case(Tr::Rc, op, 0, 0, 1));
        v.push(case(Tr::Rc, op, 1, 1, 1));
        v.push(case(Tr::Rc, op, multi, max_sge, max_sge));
    }
    v.push(case(Tr::Rc, Send, 2 * mtu, 1, 1)); // exactly two full packets
    v.push(Case {
        inline: true,
        ..case(Tr::Rc, Send, max_inline, 3, 2)
    });
    v.push(Case {
        inline: true,
        ..case(Tr::Rc, RdmaWriteWithImm, 100, 2, 1)
    });
    v.push(Case {
        cas_hit: true,
        ..case(Tr::Rc, AtomicCmpAndSwp, 8, 1, 0)
    });
    v.push(case(Tr::Rc, AtomicCmpAndSwp, 8, 1, 0));
    v.push(case(Tr::Rc, AtomicFetchAndAdd, 8, 1, 0));
    for op in [Send, SendWithImm, RdmaWrite, RdmaWriteWithImm] {
        v.push(case(Tr::Uc, op, 1, 1, 1));
        v.push(case(Tr::Uc, op, multi, max_sge, max_sge));
    }
    v.push(Case {
        inline: true,
        ..case(Tr::Uc, Send, 64, 1, 1)
    });
    for op in [Send, SendWithImm] {
        v.push(case(Tr::Ud, op, 0, 0, 1));
        v.push(case(Tr::Ud, op, 1, 1, 1));
        v.push(case(Tr::Ud, op, mtu, max_sge, max_sge - 1)); // a full-MTU datagram
    }
    v.push(Case {
        inline: true,
        ..case(Tr::Ud, SendWithImm, max_inline.min(mtu), 2, 1)
    });
    v
}

/// A deterministic byte pattern; `seed` varies it per case.
pub fn pattern(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Splits `len` bytes into `n` pieces placed at `base`, `GAP` bytes apart:
/// (offset, length) of each.
fn pieces(base: usize, len: usize, n: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut off = base;
    for i in 0..n {
        let l = len / n + usize::from(i < len % n);
        out.push((off, l));
        off += l + GAP;
    }
    out
}

fn sges(mr: &MemoryRegion, p: &[(usize, usize)]) -> Vec<Sge> {
    p.iter().map(|&(o, l)| mr.sge(o, l as u32)).collect()
}

/// Reads the pieces back to back.
fn gather(mr: &MemoryRegion, p: &[(usize, usize)]) -> Vec<u8> {
    let mut out = Vec::new();
    for &(o, l) in p {
        let mut b = vec![0; l];
        assert!(mr.read(o, &mut b));
        out.extend(b);
    }
    out
}

/// Fills the pieces with `data`, back to back.
fn scatter(mr: &MemoryRegion, p: &[(usize, usize)], data: &[u8]) {
    let mut at = 0;
    for &(o, l) in p {
        assert!(mr.write(o, &data[at..at + l]));
        at += l;
    }
}

/// Byte-for-byte equality, reporting the first difference (not megabytes of bytes).
pub fn same(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!(
            "{what}: first difference at byte {i} of {}: got {:#04x}, want {:#04x}",
            want.len(),
            got[i],
            want[i]
        );
    }
}

fn zero(mr: &MemoryRegion, from: usize, len: usize) {
    assert!(mr.write(from, &vec![0; len]));
}

fn assert_zero(mr: &MemoryRegion, from: usize, len: usize, what: &str) {
    let mut b = vec![0xff; len];
    mr.read(from, &mut b);
    assert!(
        b.iter().all(|&x| x == 0),
        "{what}: bytes changed that no operation targets"
    );
}

fn imm_for(i: usize) -> u32 {
    0xa5_00_00_00 | i as u32
}

fn wc_op(op: WrOpcode) -> WcOpcode {
    match op {
        WrOpcode::Send | WrOpcode::SendWithImm => WcOpcode::Send,
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
        WrOpcode::RdmaRead => WcOpcode::RdmaRead,
        WrOpcode::AtomicCmpAndSwp => WcOpcode::CompSwap,
        WrOpcode::AtomicFetchAndAdd => WcOpcode::FetchAdd,
        other => panic!("not in the matrix: {other:?}"),
    }
}

fn consumes_recv(op: WrOpcode) -> bool {
    matches!(
        op,
        WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm
    )
}

/// The only completion within `T` on `cq`; and nothing else behind it.
fn one(cq: &CompletionQueue, what: &str) -> WorkCompletion {
    let wc = cq.wait(1, T);
    assert_eq!(wc.len(), 1, "{what}: no completion within {T:?}");
    let mut more = Vec::new();
    assert_eq!(
        cq.poll(4, &mut more),
        0,
        "{what}: unexpected extra completions {more:?}"
    );
    wc[0]
}

const ATOMIC_START: u64 = 0x0102_0304_0506_0708;

impl End {
    fn qpn(&self, tr: Tr) -> u32 {
        match tr {
            Tr::Rc => self.rc.qp_num(),
            Tr::Uc => self.uc.qp_num(),
            Tr::Ud => self.ud.qp_num(),
        }
    }

    fn peer_qpn(&self, tr: Tr) -> u32 {
        match tr {
            Tr::Rc => self.peer.rc,
            Tr::Uc => self.peer.uc,
            Tr::Ud => self.peer.ud,
        }
    }

    pub fn cases(&self) -> Vec<Case> {
        let m = |a: u32, b: u32| a.min(b) as usize;
        cases(
            self.mtu().bytes() as usize,
            m(self.me.max_sge, self.peer.max_sge),
            m(self.me.max_inline, self.peer.max_inline),
        )
    }

    /// Role A: posts every case and checks its own completion (and, for READ
    /// and atomics, the bytes that came back).
    pub fn run_requester(&mut self) -> usize {
        let cases = self.cases();
        for (i, c) in cases.iter().enumerate() {
            self.ctrl.expect(&format!("ready {i}"));
            self.request(i, c);
            self.ctrl.send(&format!("done {i}"));
            self.ctrl.expect(&format!("checked {i}"));
        }
        self.ctrl.send("bye");
        cases.len()
    }

    /// Role B: prepares each case, then checks what arrived.
    pub fn run_responder(&mut self) -> usize {
        let cases = self.cases();
        for (i, c) in cases.iter().enumerate() {
            let recv = self.prepare(i, c);
            self.ctrl.send(&format!("ready {i}"));
            self.ctrl.expect(&format!("done {i}"));
            self.verify(i, c, recv);
            self.ctrl.send(&format!("checked {i}"));
        }
        self.ctrl.expect("bye");
        cases.len()
    }

    fn request(&mut self, i: usize, c: &Case) {
        let what = format!("case {i} {c:?} (requester)");
        let data = pattern(c.len, i as u64);
        let region = c.len + c.send_sges * GAP + 2 * GUARD;
        zero(&self.mr, SRC, region);
        let p = pieces(SRC + GUARD, c.len, c.send_sges);
        let is_local_target = matches!(c.op, WrOpcode::RdmaRead) || c.op.is_atomic();
        if !is_local_target {
            scatter(&self.mr, &p, &data);
        }
        let sg = sges(&self.mr, &p);
        let target = self.target(i, c);
        let mut flags = SendFlags::SIGNALED;
        if c.inline {
            flags = flags | SendFlags::INLINE;
        }
        let wr = SendWr {
            wr_id: 0x1000 + i as u64,
            opcode: c.op,
            flags,
            sg_list: &sg,
            imm_data: ImmData::from_value(imm_for(i)),
            target,
        };
        self.post(c.tr, &wr);
        if c.inline {
            // The bytes were taken at post time: changing them now must not matter.
            zero(&self.mr, SRC, region);
        }
        let wc = one(&self.scq, &what);
        let want_len = if c.op.is_atomic() { 8 } else { c.len as u32 };
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode, wc.qp_num, wc.byte_len),
            (
                0x1000 + i as u64,
                WcStatus::Success,
                wc_op(c.op),
                self.qpn(c.tr),
                want_len
            ),
            "{what}: {wc:?}"
        );
        assert_eq!(
            (wc.wc_flags, wc.src_qp, wc.vendor_err),
            (WcFlags::NONE, 0, 0),
            "{what}: send-side flags/src_qp {wc:?}"
        );
        if c.op == WrOpcode::RdmaRead {
            same(
                &gather(&self.mr, &p),
                &pattern(c.len, 0x5eed + i as u64),
                &format!("{what}: READ data"),
            );
        }
        if c.op.is_atomic() {
            let mut w = [0u8; 8];
            self.mr.read(SRC + GUARD, &mut w);
            assert_eq!(
                u64::from_ne_bytes(w),
                ATOMIC_START + i as u64,
                "{what}: original value returned"
            );
        }
        if is_local_target || c.inline {
            // Nothing outside the scatter pieces (or, inline, anything) was written.
            let mut all = gather(&self.mr, &[(SRC, region)]);
            for &(o, l) in &p {
                all[o - SRC..o - SRC + l].fill(0);
            }
            assert!(
                all.iter().all(|&b| b == 0),
                "{what}: local bytes outside the SGEs changed"
            );
        }
    }

    fn target(&self, i: usize, c: &Case) -> WrTarget {
        let remote = self.peer.addr + (DST + GUARD) as u64;
        match (c.tr, c.op) {
            (Tr::Ud, _) => self.ah.as_ref().unwrap().ud(self.peer.ud, QKEY),
            (_, WrOpcode::AtomicCmpAndSwp) => {
                let base = ATOMIC_START + i as u64;
                let compare = if c.cas_hit { base } else { base ^ 1 };
                WrTarget::Atomic(AtomicTarget {
                    remote_addr: self.peer.addr + ATOMIC as u64,
                    compare_add: compare,
                    swap: 0xdead_beef_0000_0001,
                    rkey: self.peer.rkey,
                })
            }
            (_, WrOpcode::AtomicFetchAndAdd) => WrTarget::Atomic(AtomicTarget {
                remote_addr: self.peer.addr + ATOMIC as u64,
                compare_add: 0x1_0000_0001,
                swap: 0,
                rkey: self.peer.rkey,
            }),
            (_, op) if op.is_rdma_write() || op == WrOpcode::RdmaRead => {
                WrTarget::Rdma(RdmaTarget {
                    remote_addr: remote,
                    rkey: self.peer.rkey,
                })
            }
            _ => WrTarget::None,
        }
    }

    fn post(&self, tr: Tr, wr: &SendWr<'_>) {
        match tr {
            Tr::Rc => self.rc.post_send(wr),
            Tr::Uc => self.uc.post_send(wr),
            Tr::Ud => self.ud.post_send(wr),
        }
        .unwrap_or_else(|e| panic!("post_send {wr:?}: {e}"));
    }

    /// Zeroes the target area (with guards), posts the receive, fills READ
    /// sources and atomic words. Returns the receive pieces.
    fn prepare(&mut self, i: usize, c: &Case) -> Vec<(usize, usize)> {
        let grh = usize::from(c.tr == Tr::Ud) * 40;
        zero(&self.mr, DST, c.len + 2 * GUARD);
        zero(
            &self.mr,
            RECV,
            c.len + grh + (c.recv_sges + 1) * GAP + 2 * GUARD + 64,
        );
        let mut p = Vec::new();
        if consumes_recv(c.op) {
            if grh > 0 {
                p.push((RECV + GUARD, 40));
            }
            let base = RECV + GUARD + grh + usize::from(grh > 0) * GAP;
            // Room for a few bytes more than arrive, spread over the SGEs.
            p.extend(pieces(base, c.len + 5, c.recv_sges));
            let sg = sges(&self.mr, &p);
            let wr = RecvWr {
                wr_id: 0x2000 + i as u64,
                sg_list: &sg,
            };
            match c.tr {
                Tr::Rc => self.rc.post_recv(&wr),
                Tr::Uc => self.uc.post_recv(&wr),
                Tr::Ud => self.ud.post_recv(&wr),
            }
            .unwrap();
        }
        if c.op == WrOpcode::RdmaRead {
            assert!(self
                .mr
                .write(DST + GUARD, &pattern(c.len, 0x5eed + i as u64)));
        }
        if c.op.is_atomic() {
            assert!(self
                .mr
                .write(ATOMIC, &(ATOMIC_START + i as u64).to_ne_bytes()));
        }
        p
    }

    fn verify(&mut self, i: usize, c: &Case, p: Vec<(usize, usize)>) {
        let what = format!("case {i} {c:?} (responder)");
        let data = pattern(c.len, i as u64);
        let grh = usize::from(c.tr == Tr::Ud) * 40;
        if consumes_recv(c.op) {
            let wc = one(&self.rcq, &what);
            self.check_recv_wc(i, c, &wc, &what);
            let got = gather(&self.mr, &p);
            // WRITE_WITH_IMM places its data at the RDMA target, not in the receive buffer.
            let placed = if c.op == WrOpcode::RdmaWriteWithImm {
                0
            } else {
                c.len
            };
            same(
                &got[grh..grh + placed],
                &data[..placed],
                &format!("{what}: received bytes"),
            );
            if grh > 0 {
                self.check_grh(&got[..40], c, &what);
            }
            assert!(
                got[grh + placed..].iter().all(|&b| b == 0),
                "{what}: receive buffer bytes past the message written"
            );
            let area = c.len + grh + (c.recv_sges + 1) * GAP + 2 * GUARD + 64;
            let mut all = gather(&self.mr, &[(RECV, area)]);
            for &(o, l) in &p {
                all[o - RECV..o - RECV + l].fill(0);
            }
            assert!(
                all.iter().all(|&b| b == 0),
                "{what}: bytes outside the receive SGEs changed"
            );
        } else {
            let mut nothing = Vec::new();
            assert_eq!(
                self.rcq.poll(4, &mut nothing),
                0,
                "{what}: a one-sided op made a receive completion {nothing:?}"
            );
        }
        if c.op.is_rdma_write() {
            self.check_write(c, &data, &what);
        }
        if c.op.is_atomic() {
            let start = ATOMIC_START + i as u64;
            let want = match c.op {
                WrOpcode::AtomicFetchAndAdd => start.wrapping_add(0x1_0000_0001),
                _ if c.cas_hit => 0xdead_beef_0000_0001,
                _ => start,
            };
            let mut w = [0u8; 8];
            self.mr.read(ATOMIC, &mut w);
            assert_eq!(
                u64::from_ne_bytes(w),
                want,
                "{what}: atomic result in memory"
            );
        }
        let _ = grh;
    }

    fn check_recv_wc(&self, i: usize, c: &Case, wc: &WorkCompletion, what: &str) {
        let ud = c.tr == Tr::Ud;
        let imm = c.op.has_imm();
        let opcode = if c.op == WrOpcode::RdmaWriteWithImm {
            WcOpcode::RecvRdmaWithImm
        } else {
            WcOpcode::Recv
        };
        let byte_len = c.len as u32 + if ud { 40 } else { 0 };
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode, wc.qp_num, wc.byte_len),
            (
                0x2000 + i as u64,
                WcStatus::Success,
                opcode,
                self.qpn(c.tr),
                byte_len
            ),
            "{what}: {wc:?}"
        );
        let mut flags = WcFlags::NONE.0;
        if ud {
            flags |= WcFlags::GRH.0;
        }
        if imm {
            flags |= WcFlags::WITH_IMM.0;
        }
        assert_eq!(wc.wc_flags, WcFlags(flags), "{what}: wc_flags {wc:?}");
        if imm {
            assert_eq!(wc.imm_data.value(), imm_for(i), "{what}: imm_data");
            assert_eq!(
                wc.imm_data.0,
                imm_for(i).to_be_bytes(),
                "{what}: imm_data in network order"
            );
        } else {
            assert_eq!(wc.imm_data.value(), 0, "{what}: imm_data without WITH_IMM");
        }
        let src_qp = if ud { self.peer_qpn(Tr::Ud) } else { 0 };
        // UD on RoCE: sl is the packet type as ConnectX reports it (UDP bit,
        // then 2 for IPv4, 1 for IPv6), which UCX reads.
        let sl = match (ud, self.peer.gid.ip()) {
            (false, _) => 0,
            (true, std::net::IpAddr::V4(_)) => 0xa,
            (true, std::net::IpAddr::V6(_)) => 0x9,
        };
        assert_eq!(
            (wc.src_qp, wc.vendor_err, wc.pkey_index, wc.slid, wc.sl),
            (src_qp, 0, 0, 0, sl),
            "{what}: {wc:?}"
        );
    }

    /// The GRH area of a UD receive over IPv4 (rc-reliability.md §7): 20 zero
    /// bytes, then the IPv4 header as received — version 4, IHL 5, UDP, total
    /// length = IP + UDP + BTH + DETH (+ ImmDt) + padded payload + ICRC, the peer's
    /// address as source and ours as destination, a valid checksum.
    fn check_grh(&self, g: &[u8], c: &Case, what: &str) {
        let (std::net::IpAddr::V4(src), std::net::IpAddr::V4(dst)) =
            (self.peer.gid.ip(), self.me.gid.ip())
        else {
            return; // IPv6 devices: the area is the IPv6 header (not used by these tests)
        };
        assert_eq!(
            &g[..20],
            &[0u8; 20],
            "{what}: GRH area starts with 20 zero bytes"
        );
        let h = &g[20..40];
        assert_eq!((h[0], h[9]), (0x45, 17), "{what}: IPv4, IHL 5, UDP");
        let imm = if c.op.has_imm() { 4 } else { 0 };
        let total = 20 + 8 + 12 + 8 + imm + c.len.next_multiple_of(4) + 4; // payload padded to 4
        assert_eq!(
            u16::from_be_bytes([h[2], h[3]]) as usize,
            total,
            "{what}: IPv4 total length"
        );
        assert_eq!(
            (&h[12..16], &h[16..20]),
            (&src.octets()[..], &dst.octets()[..]),
            "{what}: addresses"
        );
        let sum: u32 = h
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        let folded = (sum & 0xffff) + (sum >> 16);
        assert_eq!(
            (folded & 0xffff) + (folded >> 16),
            0xffff,
            "{what}: IPv4 header checksum"
        );
    }

    fn check_write(&self, c: &Case, data: &[u8], what: &str) {
        let read = |len: usize| gather(&self.mr, &[(DST + GUARD, len)]);
        // RC: the ACK came before A said done, so the data is there now. UC: sent is
        // all A knows; the bytes arrive on loopback soon (bounded wait).
        let deadline = Instant::now() + T;
        while c.tr == Tr::Uc && read(c.len) != data && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        same(&read(c.len), data, &format!("{what}: RDMA WRITE data"));
        assert_zero(&self.mr, DST, GUARD, what);
        assert_zero(&self.mr, DST + GUARD + c.len, GUARD, what);
    }
}

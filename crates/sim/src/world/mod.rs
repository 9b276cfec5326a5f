//! The simulation loop: devices, the network, the virtual clock, the workload
//! and the invariant checks that run after every step.

use crate::device::{Device, QpParams, SLOT, WINDOW};
use crate::net::{Faults, Network};
use crate::rng::Rng;
use crate::workload::{draw_len, Expect, Mix, Posted, RecvExpect, SimQp, WindowState};
use proto::memory::Memory;
use proto::mr::mw::BindRequest;
use proto::timers::local_ack_timeout_ns;
use proto::wc::{WcFlags, WcOpcode, WcStatus, WorkCompletion};
use proto::wr::{
    AtomicTarget, FlushTarget, ImmData, RdmaTarget, RecvWr, SendFlags, SendWr, Sge, WrOpcode,
    WrTarget,
};
use proto::AccessFlags;
use std::net::{IpAddr, SocketAddr};

/// The RoCEv2 port.
const PORT: u16 = 4791;
/// Steps a run may take before it is declared stuck.
const MAX_STEPS: u64 = 5_000_000;

/// Everything a run needs besides its seed.
#[derive(Debug, Clone)]
pub struct Config {
    /// Scenario name (for messages).
    pub name: String,
    /// Number of devices.
    pub devices: usize,
    /// Link faults during the fault phase.
    pub faults: Faults,
    /// Partitions during the fault phase, `[from_ns, until_ns)`.
    pub partitions: Vec<(u64, u64)>,
    /// Length of the fault phase.
    pub fault_phase_ns: u64,
    /// Send WRs each QP posts.
    pub wrs_per_qp: u64,
    /// Mean gap between a QP's posts.
    pub post_gap_ns: u64,
    /// A receive is posted up to this long after the message it is for (0 =
    /// before it can arrive; larger values provoke RNR NAKs).
    pub recv_lag_ns: u64,
    /// QP transport settings.
    pub qp: QpParams,
    /// The opcode mix.
    pub mix: Mix,
    /// IPv6 device addresses (exact ICRC check; IPv4 solves for the IP ID).
    pub ipv6: bool,
    /// Only the first QP of each pair posts send WRs.
    pub one_way: bool,
    /// Error completions are expected (recorded, not failures).
    pub expect_errors: bool,
    /// No receive is posted before this time (`u64::MAX`: never).
    pub recv_not_before_ns: u64,
    /// XRC instead of RC: per device pair, an XRC_SEND QP on each side
    /// reaching an XRC_RECV QP (with its own XRC SRQ) on the other.
    pub xrc: bool,
}

/// Totals reported at the end of a run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Summary {
    /// Send WRs of the workload completed (local operations not counted).
    pub wrs: u64,
    /// Memory-window local operations completed (BIND_MW, LOCAL_INV).
    pub window_ops: u64,
    /// WRs that used a window's rkey or invalidated one remotely.
    pub window_wrs: u64,
    /// Receives completed.
    pub recvs: u64,
    /// Virtual time at quiescence.
    pub end_ns: u64,
    /// Network statistics.
    pub net: crate::net::NetStats,
    /// Sum of the device counters.
    pub dev: proto::datapath::DeviceCounters,
}

/// A simulation run.
pub struct World {
    /// Seed (every failure message names it).
    pub seed: u64,
    /// Configuration.
    pub cfg: Config,
    /// Virtual time in ns.
    pub now: u64,
    /// Devices.
    pub devs: Vec<Device>,
    /// All QPs.
    pub qps: Vec<SimQp>,
    /// The network.
    pub net: Network,
    rng: Rng,
    /// (orig, add) of every FETCH_ADD, per target device.
    faa: Vec<Vec<(u64, u64)>>,
    /// Per QP: (last una, time it last moved, timeouts since, timeouts counter seen).
    watch: Vec<Watch>,
    steps: u64,
    buf: Vec<u8>,
    /// How the engines are driven, as a driver's batches or a datagram at
    /// a time (a stream of its own: the workload's and the network's
    /// draws are those of the same seed either way).
    drive: Rng,
    /// A transmit batch's buffers and what was built into them.
    batch: proto::testing::Batch,
    /// Every datagram sent: (time, device, opcode, PSN).
    pub tx_log: Vec<(u64, usize, u8, u32)>,
    /// Print every delivered datagram and timer (`SIM_TRACE=1`).
    trace: bool,
}

#[derive(Debug, Clone, Copy, Default)]
struct Watch {
    una: u32,
    progress_ns: u64,
    streak: u64,
    timeouts: u64,
}

/// An XRC_SEND QP on device `s` connected to an XRC_RECV QP (with its XRC
/// SRQ) on device `r`: the sender posts `cfg.wrs_per_qp` WRs, the target
/// none (it has no send queue). Areas and peers are filled in by the caller.
fn xrc_pair(devs: &mut [Device], s: usize, r: usize, cfg: &Config) -> (SimQp, SimQp) {
    let (hs, ns) = devs[s].create_xrc_send_qp();
    let (hr, nr, srq, srqn) = devs[r].create_xrc_target();
    let (ips, ipr) = (devs[s].ip, devs[r].ip);
    devs[s].connect(hs, nr, ipr, &cfg.qp);
    devs[r].connect(hr, ns, ips, &cfg.qp);
    let area = devs[s].area(0);
    let sender = SimQp::new(s, hs, ns, area, 0, cfg.wrs_per_qp);
    let mut target = SimQp::new(r, hr, nr, area, 0, 0);
    target.srq = Some((srq, srqn));
    (sender, target)
}

/// Panics with the seed and the replay command.
#[macro_export]
macro_rules! fail {
    ($w:expr, $($arg:tt)*) => {
        panic!(
            "[sim scenario={} seed={} t={}ns] {}\n  replay: cargo run -p softverbs-sim --bin sim -- --seed {} --scenario {}",
            $w.cfg.name, $w.seed, $w.now, format!($($arg)*), $w.seed, $w.cfg.name
        )
    };
}

/// Mixed into the seed for the [`World::drive`] stream.
const DRIVE_SEED: u64 = 0x6261_7463_6865_7321;

// After `fail!`: the completion side uses it.
mod checks;
mod completions;

impl World {
    /// Devices fully connected by one RC QP pair per device pair.
    pub fn new(cfg: Config, seed: u64) -> World {
        let mut rng = Rng::new(seed);
        let n = cfg.devices;
        let ip = |i: usize| -> IpAddr {
            if cfg.ipv6 {
                format!("fd00::{}", i + 1).parse().expect("ip")
            } else {
                format!("127.0.0.{}", i + 1).parse().expect("ip")
            }
        };
        // XRC: two QPs per peer (a sender and a target), so two areas.
        let per_dev = if cfg.xrc { 2 * (n - 1) } else { n - 1 };
        let mut devs: Vec<Device> = (0..n).map(|i| Device::new(ip(i), per_dev)).collect();
        let mut qps = Vec::new();
        let mut areas = vec![0usize; n];
        for a in 0..n {
            for b in a + 1..n {
                if cfg.xrc {
                    for (s, r) in [(a, b), (b, a)] {
                        let i = qps.len();
                        let area_s = devs[s].area(areas[s]);
                        let area_r = devs[r].area(areas[r]);
                        areas[s] += 1;
                        areas[r] += 1;
                        let mut pair = xrc_pair(&mut devs, s, r, &cfg);
                        pair.0.area = area_s;
                        pair.1.area = area_r;
                        pair.0.peer = i + 1;
                        pair.1.peer = i;
                        qps.extend([pair.0, pair.1]);
                    }
                    continue;
                }
                let (ha, na) = devs[a].create_rc_qp();
                let (hb, nb) = devs[b].create_rc_qp();
                let (ipa, ipb) = (devs[a].ip, devs[b].ip);
                devs[a].connect(ha, nb, ipb, &cfg.qp);
                devs[b].connect(hb, na, ipa, &cfg.qp);
                let (ia, ib) = (qps.len(), qps.len() + 1);
                let area_a = devs[a].area(areas[a]);
                let area_b = devs[b].area(areas[b]);
                areas[a] += 1;
                areas[b] += 1;
                let back = if cfg.one_way { 0 } else { cfg.wrs_per_qp };
                qps.push(SimQp::new(a, ha, na, area_a, ib, cfg.wrs_per_qp));
                qps.push(SimQp::new(b, hb, nb, area_b, ia, back));
                if cfg.mix.windows {
                    for (i, d) in [(ia, a), (ib, b)] {
                        let pd = devs[d].pd;
                        let (mw, rkey) = devs[d].engine.alloc_mw(pd, 2).expect("a window");
                        qps[i].mw = Some(mw);
                        qps[i].mw_rkey = rkey;
                    }
                }
            }
        }
        let mut net = Network::new(cfg.faults, rng.fork());
        net.partitions.clone_from(&cfg.partitions);
        let watch = vec![Watch::default(); qps.len()];
        let mut w = World {
            seed,
            cfg,
            now: 0,
            devs,
            qps,
            net,
            rng,
            faa: vec![Vec::new(); n],
            watch,
            steps: 0,
            buf: vec![0; 9000],
            drive: Rng::new(seed ^ DRIVE_SEED),
            batch: proto::testing::Batch::default(),
            tx_log: Vec::new(),
            trace: std::env::var_os("SIM_TRACE").is_some(),
        };
        for i in 0..w.qps.len() {
            w.watch[i].una = w.una(i);
        }
        w
    }

    /// The fault phase, then the heal phase to quiescence, then the final
    /// checks. Returns the totals.
    pub fn run(&mut self) -> Summary {
        let until = self.cfg.fault_phase_ns;
        self.run_until(Some(until));
        self.net.faults = Faults::clean(self.cfg.faults.delay_ns);
        self.net.partitions.clear();
        self.run_until(None);
        self.check_quiescent();
        self.summary()
    }

    /// Steps until `until` (or, with `None`, until nothing can happen any more).
    pub fn run_until(&mut self, until: Option<u64>) {
        loop {
            self.steps += 1;
            if self.steps > MAX_STEPS {
                fail!(self, "no quiescence after {MAX_STEPS} steps");
            }
            self.post_due();
            self.transmit_all();
            self.poll_all();
            let next = self.next_event();
            let Some(t) = next else { return };
            if until.is_some_and(|u| t > u) {
                self.now = until.unwrap_or(t);
                return;
            }
            self.now = self.now.max(t);
            self.deliver_due();
            self.observe_progress();
            self.fire_timers();
        }
    }

    fn next_event(&self) -> Option<u64> {
        let mut t = self.net.next_arrival();
        let mut take = |x: Option<u64>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |y: u64| y.min(x)));
            }
        };
        for d in &self.devs {
            take(d.engine.poll_timeout());
        }
        for q in &self.qps {
            if q.to_post > 0 && !q.failed && (q.outstanding.len() as u64) < crate::device::SLOTS {
                take(Some(q.next_post_ns.max(self.now)));
            }
            take(q.recv_due.front().copied().filter(|&t| t != u64::MAX));
        }
        t
    }

    fn addr(&self, d: usize) -> SocketAddr {
        SocketAddr::new(self.devs[d].ip, PORT)
    }

    /// Everything each device has to send, onto the network: a datagram
    /// a call, or (drawn per round) as a driver's batches: a QP's packets
    /// by bursts of a drawn size into a batch of drawn slots, the claims
    /// let go once the batch left.
    fn transmit_all(&mut self) {
        for d in 0..self.devs.len() {
            loop {
                let mut sent = Vec::new();
                if self.drive.chance(0.5) {
                    let dev = &mut self.devs[d];
                    let Some(t) = dev.engine.poll_transmit(self.now, &dev.mem, &mut self.buf)
                    else {
                        break;
                    };
                    sent.push((t.to, self.buf[..t.len].to_vec()));
                } else {
                    let slots = 1 + self.drive.below(64) as usize;
                    let max = 1 + self.drive.below(16) as usize;
                    let dev = &mut self.devs[d];
                    let batch = &mut self.batch;
                    batch.start(slots);
                    let mut claims = proto::datapath::TxClaims::default();
                    while dev.engine.poll_transmit_burst(
                        self.now,
                        &dev.mem,
                        &mut claims,
                        batch,
                        max,
                    ) > 0
                    {}
                    dev.engine.release_claims(&mut claims);
                    if batch.built.is_empty() {
                        break;
                    }
                    let each = batch.built.iter().zip(batch.datagrams());
                    sent.extend(each.map(|(t, d)| (t.to, d.to_vec())));
                }
                for (to, bytes) in sent {
                    self.send(d, to, &bytes);
                }
            }
        }
    }

    /// A datagram device `d` built, onto the network (and into the log).
    fn send(&mut self, d: usize, to: SocketAddr, bytes: &[u8]) {
        let Some(dst) = self.devs.iter().position(|x| x.ip == to.ip()) else {
            fail!(self, "device {d} sent to unknown address {to}");
        };
        if to.port() != PORT {
            fail!(self, "sent to port {}", to.port());
        }
        let bth = wire::bth::Packet::new_checked(bytes).and_then(|p| wire::bth::Repr::parse(&p));
        if let Ok(b) = bth {
            self.tx_log.push((self.now, d, b.opcode.get(), b.psn.get()));
        }
        self.net.send(self.now, d, dst, bytes);
    }

    /// What is due, to its devices: each datagram alone, or (drawn per
    /// run) consecutive ones between the same two devices as one socket
    /// read's batch.
    fn deliver_due(&mut self) {
        let mut due = Vec::new();
        while let Some(a) = self.net.pop_due(self.now) {
            if self.trace {
                let line = wire::TransportRepr::parse(&a.bytes)
                    .map_or_else(|e| format!("unparsable: {e}"), |r| r.to_string());
                println!("{:>10} {} -> {}: {line}", self.now, a.from, a.to);
            }
            due.push(a);
        }
        for run in due.chunk_by(|x, y| (x.from, x.to) == (y.from, y.to)) {
            let (from, to) = (self.addr(run[0].from), self.addr(run[0].to));
            let dev = &mut self.devs[run[0].to];
            if self.drive.chance(0.5) {
                let mut each = run.iter().map(|a| &a.bytes[..]);
                dev.engine
                    .handle_batch(self.now, (from, to), &mut each, &dev.mem);
            } else {
                for a in run {
                    dev.engine
                        .handle_datagram(self.now, from, to, &a.bytes, &dev.mem);
                }
            }
        }
    }

    fn fire_timers(&mut self) {
        for d in 0..self.devs.len() {
            if self.devs[d]
                .engine
                .poll_timeout()
                .is_some_and(|t| t <= self.now)
            {
                if self.trace {
                    println!("{:>10} device {d}: timers", self.now);
                }
                self.devs[d].engine.handle_timeout(self.now);
                if self.devs[d]
                    .engine
                    .poll_timeout()
                    .is_some_and(|t| t <= self.now)
                {
                    fail!(self, "device {d}: a timer still due after handle_timeout");
                }
                self.check_timeouts(d);
            }
        }
    }

    // ------------------------------------------------------------ posting

    fn post_due(&mut self) {
        for i in 0..self.qps.len() {
            while self.qps[i].recv_due.front().is_some_and(|&t| t <= self.now) {
                self.qps[i].recv_due.pop_front();
                self.post_recv(i);
            }
            if self.qps[i].mw_state == WindowState::Unbound && self.peer_uses_windows(i) {
                self.post_bind(i);
            }
            while self.qps[i].may_post(self.now) {
                self.post_one(i);
            }
        }
    }

    fn post_recv(&mut self, i: usize) {
        let q = &mut self.qps[i];
        let seq = q.recvs_posted;
        if seq >= q.recvs_done + crate::device::SLOTS {
            fail!(self, "QP {i}: receive slot {seq} still in use");
        }
        let q = &mut self.qps[i];
        q.recvs_posted += 1;
        let dev = &mut self.devs[q.dev];
        let sge = [Sge {
            addr: q.area.recv_slot(seq),
            length: SLOT as u32,
            lkey: dev.lkey,
        }];
        let wr = RecvWr {
            wr_id: wr_id(i, seq),
            sg_list: &sge,
        };
        let posted = match q.srq {
            Some((srq, _)) => dev.engine.post_srq_recv(srq, &wr),
            None => dev.engine.post_recv(q.h, &wr).map(drop),
        };
        if let Err(e) = posted {
            fail!(self, "post_recv on QP {i}: {e}");
        }
    }

    fn post_one(&mut self, i: usize) {
        self.maybe_rotate(i);
        if !self.qps[i].may_post(self.now) {
            return;
        }
        let peer = self.qps[i].peer;
        let invalidate = self.cfg.mix.windows
            && self.qps[peer].mw_state == WindowState::Bound
            && self.qps[peer].window_uses == 0
            && self.rng.chance(0.1);
        let op = if invalidate {
            WrOpcode::SendWithInv
        } else {
            self.cfg.mix.pick(&mut self.rng)
        };
        let seq = self.qps[i].next_seq;
        let q = &self.qps[i];
        let last = q.to_post == 1 || q.outstanding.len() as u64 + 1 >= crate::device::SLOTS;
        let signaled = last || self.rng.chance(0.7);
        let slot = q.area.send_slot(seq);
        let (peer, dev) = (q.peer, q.dev);
        let pdev = self.qps[peer].dev;
        let len = match op {
            WrOpcode::AtomicFetchAndAdd | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicWrite => 8,
            // The range flushed; the WR itself carries no data.
            WrOpcode::Flush => draw_len(&mut self.rng),
            _ => draw_len(&mut self.rng),
        };
        let mut data = vec![0u8; len as usize];
        self.rng.fill(&mut data);
        let mut flags = if signaled { SendFlags::SIGNALED.0 } else { 0 };
        let mut target = WrTarget::None;
        let mut expect = Expect::Nothing;
        let imm = self.rng.next_u64() as u32;
        let (off, rlen) = self.window_range(len);
        let off = if op == WrOpcode::AtomicWrite {
            off & !7
        } else {
            off
        };
        // Through the peer's memory window half the time it is bound.
        let via_window = matches!(
            op,
            WrOpcode::RdmaWrite
                | WrOpcode::RdmaWriteWithImm
                | WrOpcode::RdmaRead
                | WrOpcode::AtomicWrite
        ) && self.qps[peer].mw_state == WindowState::Bound
            && self.rng.chance(0.5);
        let (rkey, window) = if via_window {
            let p = &mut self.qps[peer];
            p.window_uses += 1;
            let base = if p.mw_zero_based { 0 } else { p.area.window() };
            (p.mw_rkey, base + off)
        } else {
            (self.devs[pdev].rkey, self.qps[peer].area.window() + off)
        };
        match op {
            WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv => {
                self.devs[dev].mem.write(slot, &data);
                let inv = (op == WrOpcode::SendWithInv).then_some(self.qps[peer].mw_rkey);
                if let Some(rkey) = inv {
                    target = WrTarget::Invalidate { rkey };
                    self.qps[peer].mw_state = WindowState::Invalidating;
                }
                self.expect_recv(
                    peer,
                    WcOpcode::Recv,
                    len,
                    (op == WrOpcode::SendWithImm).then_some(imm),
                    data,
                    inv,
                );
            }
            WrOpcode::AtomicWrite => {
                self.devs[dev].mem.write(slot, &data);
                self.qps[peer].window[off as usize..][..8].copy_from_slice(&data);
                target = WrTarget::Rdma(RdmaTarget {
                    remote_addr: window,
                    rkey,
                });
                if self.qps[i].reads_outstanding > 0 {
                    flags |= SendFlags::FENCE.0;
                }
            }
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => {
                self.devs[dev].mem.write(slot, &data);
                self.qps[peer].window[off as usize..][..rlen].copy_from_slice(&data);
                target = WrTarget::Rdma(RdmaTarget {
                    remote_addr: window,
                    rkey,
                });
                if self.qps[i].reads_outstanding > 0 {
                    flags |= SendFlags::FENCE.0;
                }
                if op == WrOpcode::RdmaWriteWithImm {
                    self.expect_recv(
                        peer,
                        WcOpcode::RecvRdmaWithImm,
                        len,
                        Some(imm),
                        Vec::new(),
                        None,
                    );
                }
            }
            WrOpcode::RdmaRead => {
                // Poison the destination so a missing placement shows.
                self.devs[dev].mem.write(slot, &vec![0xa5; len as usize]);
                expect = Expect::Read(self.qps[peer].window[off as usize..][..rlen].to_vec());
                target = WrTarget::Rdma(RdmaTarget {
                    remote_addr: window,
                    rkey,
                });
                self.qps[i].reads_outstanding += 1;
            }
            WrOpcode::Flush => {
                target = WrTarget::Flush(FlushTarget {
                    remote_addr: self.qps[peer].area.window() + off,
                    rkey: self.devs[pdev].rkey,
                    len: rlen as u32,
                    placement: proto::wr::FLUSH_GLOBAL,
                    level: self.rng.below(2) as u8,
                });
            }
            WrOpcode::AtomicFetchAndAdd => {
                let add = self.rng.range(1, 1 << 20);
                target = WrTarget::Atomic(AtomicTarget {
                    remote_addr: self.devs[pdev].faa_word(),
                    compare_add: add,
                    swap: 0,
                    rkey: self.devs[pdev].rkey,
                });
                expect = Expect::FetchAdd { add, target: pdev };
            }
            _ => {
                let model = self.qps[peer].cas;
                let compare = if self.rng.chance(0.5) {
                    model
                } else {
                    self.rng.next_u64()
                };
                let swap = self.rng.next_u64();
                if compare == model {
                    self.qps[peer].cas = swap;
                }
                target = WrTarget::Atomic(AtomicTarget {
                    remote_addr: self.qps[peer].area.cas_word(),
                    compare_add: compare,
                    swap,
                    rkey: self.devs[pdev].rkey,
                });
                expect = Expect::CompareSwap(model);
            }
        }
        let sge = [Sge {
            addr: slot,
            length: len,
            lkey: self.devs[dev].lkey,
        }];
        // A FLUSH has no local buffer and completes with byte_len 0.
        let (sg_list, len): (&[Sge], u32) = if op == WrOpcode::Flush {
            (&[], 0)
        } else {
            (&sge, len)
        };
        let wr = SendWr {
            wr_id: wr_id(i, seq),
            opcode: op,
            flags: SendFlags(flags),
            sg_list,
            imm_data: ImmData::from_value(imm),
            target,
        };
        let h = self.qps[i].h;
        // XRC: every WR names the peer's XRC SRQ (spec/xrc.md §5).
        let srqn = self.qps[peer].srq.map_or(0, |(_, n)| n);
        if let Err(e) = self.devs[dev].engine.post_send_xrc(h, &wr, None, srqn) {
            fail!(self, "post_send {op:?} on QP {i}: {e}");
        }
        let q = &mut self.qps[i];
        q.outstanding.push_back(Posted {
            seq,
            op,
            len,
            signaled,
            slot,
            expect,
            via_window,
        });
        q.next_seq += 1;
        q.to_post -= 1;
        q.next_post_ns = self.now + self.rng.range(0, 2 * self.cfg.post_gap_ns);
    }

    // ------------------------------------------------------ memory windows

    /// QP `i`'s window is worth binding: its peer still posts.
    fn peer_uses_windows(&self, i: usize) -> bool {
        let p = &self.qps[self.qps[i].peer];
        self.cfg.mix.windows && self.qps[i].mw.is_some() && p.to_post > 0 && !p.failed
    }

    /// Before QP `i` posts: now and then, while nothing of its peer's is
    /// outstanding through its window, it invalidates the window and binds it
    /// again with the next key.
    fn maybe_rotate(&mut self, i: usize) {
        let q = &self.qps[i];
        if q.mw_state != WindowState::Bound || q.window_uses > 0 || !q.may_post_local() {
            return;
        }
        if !self.rng.chance(0.1) {
            return;
        }
        let rkey = q.mw_rkey;
        self.post_local(
            i,
            WrOpcode::LocalInv,
            WrTarget::Invalidate { rkey },
            Expect::Nothing,
        );
        self.qps[i].mw_state = WindowState::Unbound;
        if self.peer_uses_windows(i) {
            self.post_bind(i);
        }
    }

    /// QP `i` binds its window over its window area with the next key,
    /// zero-based half the time.
    fn post_bind(&mut self, i: usize) {
        if !self.qps[i].may_post_local() {
            return;
        }
        let zero_based = self.rng.chance(0.5);
        let q = &self.qps[i];
        let Some(mw) = q.mw else { return };
        let rkey = (q.mw_rkey & !0xff) | (q.mw_rkey.wrapping_add(1) & 0xff);
        let mut access = AccessFlags::REMOTE_WRITE.0 | AccessFlags::REMOTE_READ.0;
        if zero_based {
            access |= AccessFlags::ZERO_BASED.0;
        }
        let req = BindRequest {
            mw,
            rkey,
            mr_lkey: Some(self.devs[q.dev].lkey),
            addr: q.area.window(),
            length: WINDOW,
            access,
        };
        let expect = Expect::Bind { rkey, zero_based };
        self.post_local(i, WrOpcode::BindMw, WrTarget::Bind(req), expect);
        self.qps[i].mw_state = WindowState::Binding;
    }

    /// Posts a signaled local operation on QP `i` (no packet, no `to_post`).
    fn post_local(&mut self, i: usize, op: WrOpcode, target: WrTarget, expect: Expect) {
        let q = &self.qps[i];
        let seq = q.next_seq;
        let wr = SendWr {
            wr_id: wr_id(i, seq),
            opcode: op,
            flags: SendFlags::SIGNALED,
            sg_list: &[],
            imm_data: ImmData::default(),
            target,
        };
        let (dev, h, slot) = (q.dev, q.h, q.area.send_slot(seq));
        if let Err(e) = self.devs[dev].engine.post_send(h, &wr, None) {
            fail!(self, "post_send {op:?} on QP {i}: {e}");
        }
        let q = &mut self.qps[i];
        q.outstanding.push_back(Posted {
            seq,
            op,
            len: 0,
            signaled: true,
            slot,
            expect,
            via_window: false,
        });
        q.next_seq += 1;
    }

    /// An offset and length inside the window for a `len`-byte RDMA.
    fn window_range(&mut self, len: u32) -> (u64, usize) {
        let len = u64::from(len).min(WINDOW);
        (self.rng.range(0, WINDOW - len), len as usize)
    }

    fn expect_recv(
        &mut self,
        peer: usize,
        opcode: WcOpcode,
        len: u32,
        imm: Option<u32>,
        data: Vec<u8>,
        inv: Option<u32>,
    ) {
        let lag = self.rng.range(0, self.cfg.recv_lag_ns);
        let q = &mut self.qps[peer];
        q.recv_expect.push_back(RecvExpect {
            opcode,
            len,
            imm,
            data,
            inv,
        });
        let due = q
            .recv_due
            .back()
            .copied()
            .unwrap_or(0)
            .max(self.now + lag)
            .max(self.cfg.recv_not_before_ns);
        if self.cfg.recv_lag_ns == 0 && self.cfg.recv_not_before_ns == 0 {
            // Posted at once, before the message can be sent.
            self.post_recv(peer);
        } else {
            self.qps[peer].recv_due.push_back(due);
        }
    }
}

/// `wr_id` = QP index << 40 | sequence number.
pub fn wr_id(qp: usize, seq: u64) -> u64 {
    ((qp as u64) << 40) | seq
}

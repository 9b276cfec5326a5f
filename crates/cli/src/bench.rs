//! Two processes, one RC connection, real traffic: the connection set-up over
//! TCP (as perftest exchanges QPN, PSN, GID, rkey), and the measurements —
//! ping-pong latency and WRITE / READ / SEND / atomic bandwidth.

use crate::error::CliError;
use softverbs::*;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Bytes of registered memory on each side.
pub const MR_BYTES: usize = 8 << 20;
const ALL: AccessFlags = AccessFlags(0xf);
const WAIT: Duration = Duration::from_secs(30);

/// One side of the connection.
pub struct Peer {
    pub ctx: Context,
    pub cq: CompletionQueue,
    pub mr: MemoryRegion,
    pub qp: QueuePair<Rc>,
    pub remote: Remote,
    pub ctrl: Ctrl,
    _pd: ProtectionDomain,
}

/// What the other side told us.
#[derive(Debug, Clone, Copy)]
pub struct Remote {
    pub qpn: u32,
    pub gid: Gid,
    pub addr: u64,
    pub rkey: u32,
}

/// The TCP control connection: one line per message.
pub struct Ctrl {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Ctrl {
    pub fn send(&mut self, line: &str) -> std::io::Result<()> {
        writeln!(self.writer, "{line}")?;
        self.writer.flush()
    }

    pub fn recv(&mut self) -> std::io::Result<String> {
        let mut s = String::new();
        if self.reader.read_line(&mut s)? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "peer closed the control connection",
            ));
        }
        Ok(s.trim().to_string())
    }
}

/// Server: waits for one client on `port` (127.0.0.1) and connects to it.
pub fn accept(port: u16) -> Result<Peer, CliError> {
    let listener =
        TcpListener::bind(("127.0.0.1", port)).map_err(CliError::io("binding the control port"))?;
    let (stream, _) = listener
        .accept()
        .map_err(CliError::io("accepting the client"))?;
    connect_over(stream)
}

/// Client: connects to the server on `port`, retrying for up to 10 s.
pub fn connect(port: u16) -> Result<Peer, CliError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => return connect_over(s),
            Err(e) if Instant::now() > deadline => {
                return Err(CliError::io("connecting to the server")(e))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn connect_over(stream: TcpStream) -> Result<Peer, CliError> {
    stream
        .set_nodelay(true)
        .map_err(CliError::io("setting up the control connection"))?;
    let mut ctrl = Ctrl {
        reader: BufReader::new(
            stream
                .try_clone()
                .map_err(CliError::io("setting up the control connection"))?,
        ),
        writer: stream,
    };
    let ctx = devices()?.remove(0).open()?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(4096)?;
    let mr = pd.reg_mr(MR_BYTES, ALL)?;
    let mut init = QpInit::new(&cq, &cq);
    init.cap = QpCap {
        max_send_wr: 1024,
        max_recv_wr: 1024,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let qp = pd.create_rc_qp(&init)?;
    let gid = ctx.query_gid(1, 0)?;
    let hex: String = gid.0.iter().map(|b| format!("{b:02x}")).collect();
    ctrl.send(&format!(
        "{} {hex} {} {}",
        qp.qp_num(),
        mr.addr(),
        mr.rkey()
    ))
    .map_err(CliError::io("sending our connection message"))?;
    let line = ctrl
        .recv()
        .map_err(CliError::io("reading the peer's connection message"))?;
    let remote = parse_remote(&line)?;
    let mtu = ctx.query_port(1)?.active_mtu;
    qp.to_init(ConnectedInit {
        pkey_index: 0,
        port_num: 1,
        access: ALL,
    })?;
    let ah = AhAttr::roce(remote.gid, 0);
    qp.to_rtr(RcRtr {
        ah,
        path_mtu: mtu,
        dest_qp_num: remote.qpn,
        rq_psn: 0,
        max_dest_rd_atomic: 16,
        min_rnr_timer: 1,
    })?;
    qp.to_rts(RcRts {
        sq_psn: 0,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 16,
    })?;
    Ok(Peer {
        ctx,
        cq,
        mr,
        qp,
        remote,
        ctrl,
        _pd: pd,
    })
}

fn parse_remote(line: &str) -> Result<Remote, CliError> {
    let bad = || CliError::PeerMessage {
        line: line.to_string(),
    };
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() != 4 || f[1].len() != 32 {
        return Err(bad());
    }
    let mut gid = [0u8; 16];
    for (i, b) in gid.iter_mut().enumerate() {
        *b = u8::from_str_radix(&f[1][2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(Remote {
        qpn: f[0].parse().map_err(|_| bad())?,
        gid: Gid(gid),
        addr: f[2].parse().map_err(|_| bad())?,
        rkey: f[3].parse().map_err(|_| bad())?,
    })
}

impl Peer {
    fn post(
        &self,
        id: u64,
        op: WrOpcode,
        len: u32,
        offset: usize,
        target: WrTarget,
        signaled: bool,
    ) -> Result<(), CliError> {
        let sg = [self.mr.sge(offset, len)];
        let flags = if signaled {
            SendFlags::SIGNALED
        } else {
            SendFlags(0)
        };
        self.qp.post_send(&SendWr {
            wr_id: id,
            opcode: op,
            flags,
            sg_list: &sg,
            imm_data: ImmData::from_value(0),
            target,
        })?;
        Ok(())
    }

    fn recv(&self, id: u64, len: u32) -> Result<(), CliError> {
        self.qp.post_recv(&RecvWr {
            wr_id: id,
            sg_list: &[self.mr.sge(MR_BYTES / 2, len)],
        })?;
        Ok(())
    }

    /// Waits for `n` completions; any error status is an error.
    fn reap(&self, n: usize) -> Result<(), CliError> {
        let wcs = self.cq.wait(n, WAIT);
        if let Some(bad) = wcs.iter().find(|w| w.status != WcStatus::Success) {
            return Err(CliError::Completion {
                wr_id: bad.wr_id,
                status: bad.status,
            });
        }
        if wcs.len() < n {
            return Err(CliError::Timeout {
                got: wcs.len(),
                want: n,
                wait: WAIT,
            });
        }
        Ok(())
    }

    /// Client side of a ping-pong: `iters` round trips of `size` bytes; the
    /// one-way latency of each (half the round trip).
    pub fn pingpong(&self, iters: usize, size: u32) -> Result<Vec<Duration>, CliError> {
        let mut lat = Vec::with_capacity(iters);
        for i in 0..iters {
            self.recv(i as u64, size.max(1))?;
            let t0 = Instant::now();
            self.post(i as u64, WrOpcode::Send, size, 0, WrTarget::None, true)?;
            self.reap(2)?;
            lat.push(t0.elapsed() / 2);
        }
        Ok(lat)
    }

    /// Server side of a ping-pong: answer `iters` messages.
    pub fn echo(&self, iters: usize, size: u32) -> Result<(), CliError> {
        self.recv(0, size.max(1))?;
        for i in 0..iters {
            self.reap(1)?;
            if i + 1 < iters {
                self.recv(i as u64 + 1, size.max(1))?;
            }
            self.post(i as u64, WrOpcode::Send, size, 0, WrTarget::None, true)?;
            self.reap(1)?;
        }
        Ok(())
    }

    /// Where operation `i` of a run of `op` with `size` bytes goes: one-sided
    /// operations walk through the peer's first half; atomics hit one word.
    fn target(&self, op: WrOpcode, i: usize, size: u32) -> WrTarget {
        match op {
            WrOpcode::RdmaWrite | WrOpcode::RdmaRead => {
                let slot = (i * size as usize) % (MR_BYTES / 2 - size as usize).max(1);
                WrTarget::Rdma(RdmaTarget {
                    remote_addr: self.remote.addr + slot as u64,
                    rkey: self.remote.rkey,
                })
            }
            WrOpcode::AtomicFetchAndAdd | WrOpcode::AtomicCmpAndSwp => {
                WrTarget::Atomic(AtomicTarget {
                    remote_addr: self.remote.addr,
                    compare_add: if op == WrOpcode::AtomicFetchAndAdd {
                        1
                    } else {
                        i as u64
                    },
                    swap: i as u64 + 1,
                    rkey: self.remote.rkey,
                })
            }
            _ => WrTarget::None,
        }
    }

    /// Latency of a one-sided operation the peer's CPU never sees (READ,
    /// atomics): `iters` operations one at a time, each a full round trip.
    pub fn op_latency(
        &self,
        op: WrOpcode,
        iters: usize,
        size: u32,
    ) -> Result<Vec<Duration>, CliError> {
        let len = if op.is_atomic() { 8 } else { size };
        let mut lat = Vec::with_capacity(iters);
        for i in 0..iters {
            let t0 = Instant::now();
            self.post(i as u64, op, len, 0, self.target(op, i, size), true)?;
            self.reap(1)?;
            lat.push(t0.elapsed());
        }
        Ok(lat)
    }

    /// Streams `iters` one-sided (or SEND) operations of `size` bytes with up to
    /// `depth` outstanding; returns the elapsed time. Every 16th WR is signaled.
    pub fn stream(
        &self,
        op: WrOpcode,
        iters: usize,
        size: u32,
        depth: usize,
    ) -> Result<Duration, CliError> {
        let target = |i: usize| self.target(op, i, size);
        let len = if op.is_atomic() { 8 } else { size };
        let (mut posted, mut signaled_out) = (0usize, 0usize);
        let t0 = Instant::now();
        while posted < iters {
            while posted < iters && signaled_out * 16 < depth {
                let signaled = posted % 16 == 15 || posted + 1 == iters;
                self.post(posted as u64, op, len, 0, target(posted), signaled)?;
                posted += 1;
                signaled_out += usize::from(signaled);
            }
            self.reap(1)?;
            signaled_out -= 1;
        }
        self.reap(signaled_out)?;
        Ok(t0.elapsed())
    }

    /// Server side of a SEND stream: keeps receives posted for `iters` messages.
    pub fn sink(&self, iters: usize, size: u32) -> Result<(), CliError> {
        let depth = 512.min(iters);
        for i in 0..depth {
            self.recv(i as u64, size.max(1))?;
        }
        for i in depth..iters + depth {
            self.reap(1)?;
            if i < iters {
                self.recv(i as u64, size.max(1))?;
            }
        }
        Ok(())
    }
}

/// Median, p99 and mean of latencies, in µs.
pub fn summarize(lat: &mut [Duration]) -> (f64, f64, f64) {
    lat.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let n = lat.len().max(1);
    let mean = lat.iter().map(|d| us(*d)).sum::<f64>() / n as f64;
    (us(lat[n / 2]), us(lat[(n * 99 / 100).min(n - 1)]), mean)
}

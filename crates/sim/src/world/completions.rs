//! The world's completion side: polling every CQ, and checking each
//! completion against what was posted (status, order, results of READs and
//! atomics, received data, memory-window uses).

use super::*;

impl World {
    // --------------------------------------------------------- completions

    pub(super) fn poll_all(&mut self) {
        let mut wcs = Vec::new();
        for d in 0..self.devs.len() {
            wcs.clear();
            let cq = self.devs[d].cq;
            if let Err(e) = self.devs[d].engine.poll_cq(cq, 65536, &mut wcs) {
                fail!(self, "poll_cq: {e}");
            }
            for wc in wcs.drain(..) {
                if self.trace {
                    println!(
                        "{:>10} device {d} CQE qp={:#x} wr={}:{} {} {:?} len={}",
                        self.now,
                        wc.qp_num,
                        wc.wr_id >> 40,
                        wc.wr_id & ((1 << 40) - 1),
                        wc.status.name(),
                        wc.opcode,
                        wc.byte_len
                    );
                }
                self.on_completion(d, wc);
            }
        }
    }

    pub(super) fn on_completion(&mut self, d: usize, wc: WorkCompletion) {
        let i = (wc.wr_id >> 40) as usize;
        if i >= self.qps.len() || self.qps[i].dev != d || self.qps[i].qpn != wc.qp_num {
            fail!(self, "completion for an unknown WR/QP: {wc:?}");
        }
        if wc.opcode.is_recv() {
            self.on_recv(i, wc);
        } else {
            self.on_send(i, wc);
        }
    }

    pub(super) fn on_send(&mut self, i: usize, wc: WorkCompletion) {
        let seq = wc.wr_id & ((1 << 40) - 1);
        self.qps[i].completions += 1;
        if self.qps[i].failed {
            let front = self.qps[i].outstanding.pop_front();
            if wc.status != WcStatus::WrFlushErr || front.as_ref().map(|p| p.seq) != Some(seq) {
                fail!(self, "QP {i}: after an error expected flushes in order, got {wc:?} (front {front:?})");
            }
            if let Some(p) = &front {
                self.count_done(i, p);
            }
            self.qps[i].completed += 1;
            return;
        }
        loop {
            let Some(p) = self.qps[i].outstanding.pop_front() else {
                fail!(
                    self,
                    "QP {i}: completion for a WR not outstanding (twice?): {wc:?}"
                );
            };
            self.qps[i].completed += 1;
            if p.op == WrOpcode::RdmaRead {
                self.qps[i].reads_outstanding -= 1;
            }
            self.count_done(i, &p);
            if p.seq == seq {
                return self.check_send(i, &p, &wc);
            }
            if p.signaled {
                fail!(
                    self,
                    "QP {i}: WR {} completed before signaled WR {} posted earlier: {wc:?}",
                    seq,
                    p.seq
                );
            }
            // An unsignaled WR before it is complete too (completion order).
            self.check_result(i, &p);
        }
    }

    /// WR `p` of QP `i` is complete: the window counts.
    pub(super) fn count_done(&mut self, i: usize, p: &Posted) {
        if p.op.is_local() {
            self.qps[i].local_ops += 1;
        }
        if p.via_window || p.op == WrOpcode::SendWithInv {
            self.qps[i].window_wrs += 1;
        }
        if p.via_window {
            self.window_use_done(i);
        }
    }

    /// A WR of QP `i` through its peer's window is complete (acknowledged:
    /// never sent again).
    pub(super) fn window_use_done(&mut self, i: usize) {
        let peer = self.qps[i].peer;
        let uses = &mut self.qps[peer].window_uses;
        if *uses == 0 {
            fail!(self, "QP {peer}: more window uses completed than posted");
        }
        *uses -= 1;
    }

    pub(super) fn check_send(&mut self, i: usize, p: &Posted, wc: &WorkCompletion) {
        if wc.status.is_error() {
            self.qps[i].failed = true;
            self.qps[i].error = Some((wc.status, self.now, p.seq));
            if !self.error_allowed(wc.status) {
                fail!(
                    self,
                    "QP {i}: WR {} ({:?}) failed: {}",
                    p.seq,
                    p.op,
                    wc.status.name()
                );
            }
            return;
        }
        if !p.signaled {
            fail!(self, "QP {i}: a completion for unsignaled WR {}", p.seq);
        }
        let want_op = proto::wc::wc_opcode_for(p.op).expect("opcode");
        let want_len = p.len;
        if wc.opcode != want_op || wc.byte_len != want_len {
            fail!(
                self,
                "QP {i}: WR {} {:?}: got {:?} byte_len {}, want {:?} {}",
                p.seq,
                p.op,
                wc.opcode,
                wc.byte_len,
                want_op,
                want_len
            );
        }
        self.check_result(i, p);
    }

    /// Errors a scenario expects (none in the random ones).
    pub(super) fn error_allowed(&self, _status: WcStatus) -> bool {
        self.cfg.expect_errors
    }

    /// A completed WR's local result: READ bytes, atomic original values.
    pub(super) fn check_result(&mut self, i: usize, p: &Posted) {
        let d = self.qps[i].dev;
        match &p.expect {
            Expect::Nothing => {}
            Expect::Read(want) => {
                let got = self.devs[d].mem.snapshot(p.slot, want.len());
                if &got != want {
                    let at = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
                    fail!(
                        self,
                        "QP {i}: READ {} ({} bytes) differs from the model at byte {at}",
                        p.seq,
                        want.len()
                    );
                }
            }
            Expect::FetchAdd { add, target } => {
                let orig = self.word(d, p.slot);
                self.faa[*target].push((orig, *add));
            }
            Expect::CompareSwap(want) => {
                let orig = self.word(d, p.slot);
                if orig != *want {
                    fail!(
                        self,
                        "QP {i}: CMP_SWAP {} returned {orig:#x}, model {want:#x}",
                        p.seq
                    );
                }
            }
            Expect::Bind { rkey, zero_based } => {
                let q = &mut self.qps[i];
                if q.mw_state == WindowState::Binding {
                    q.mw_state = WindowState::Bound;
                }
                q.mw_rkey = *rkey;
                q.mw_zero_based = *zero_based;
            }
        }
    }

    pub(super) fn word(&self, d: usize, addr: u64) -> u64 {
        let b = self.devs[d].mem.snapshot(addr, 8);
        u64::from_ne_bytes(b.try_into().expect("8 bytes"))
    }

    pub(super) fn on_recv(&mut self, i: usize, wc: WorkCompletion) {
        let seq = wc.wr_id & ((1 << 40) - 1);
        if wc.status.is_error() {
            if !self.error_allowed(wc.status) {
                fail!(self, "QP {i}: receive {seq} failed: {}", wc.status.name());
            }
            self.qps[i].recvs_done += 1;
            return;
        }
        let q = &mut self.qps[i];
        let Some(e) = q.recv_expect.pop_front() else {
            fail!(
                self,
                "QP {i}: a receive completed with no message sent: {wc:?}"
            );
        };
        let q = &mut self.qps[i];
        if seq != q.recvs_done {
            fail!(
                self,
                "QP {i}: receive {seq} completed, expected receive {}",
                q.recvs_done
            );
        }
        q.recvs_done += 1;
        let imm = wc
            .wc_flags
            .contains(WcFlags::WITH_IMM)
            .then(|| wc.imm_data.value());
        if wc.opcode != e.opcode || wc.byte_len != e.len || imm != e.imm {
            fail!(
                self,
                "QP {i}: receive {seq}: got {:?} len {} imm {imm:?}, want {:?} len {} imm {:?}",
                wc.opcode,
                wc.byte_len,
                e.opcode,
                e.len,
                e.imm
            );
        }
        let inv = wc.invalidated_rkey();
        if inv != e.inv {
            fail!(
                self,
                "QP {i}: receive {seq}: invalidated rkey {inv:x?}, want {:x?}",
                e.inv
            );
        }
        if e.inv.is_some() {
            // The window was invalidated when the message arrived.
            self.qps[i].mw_state = WindowState::Unbound;
        }
        let q = &self.qps[i];
        let got = self.devs[q.dev]
            .mem
            .snapshot(q.area.recv_slot(seq), e.data.len());
        if got != e.data {
            fail!(
                self,
                "QP {i}: receive {seq}: the {} bytes differ from what was sent",
                e.data.len()
            );
        }
    }
}

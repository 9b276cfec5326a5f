//! The world's watchers and final checks: retransmission progress against
//! the timeouts IBA allows, and at the end quiescence, memory windows,
//! corruption and the atomics' totals; then the run's summary.

use super::*;

impl World {
    // ------------------------------------------------- retry and timeouts

    pub(super) fn una(&self, i: usize) -> u32 {
        let q = &self.qps[i];
        self.devs[q.dev].engine.qp(q.h).map_or(0, |x| x.una().get())
    }

    pub(super) fn observe_progress(&mut self) {
        for i in 0..self.qps.len() {
            let una = self.una(i);
            if una != self.watch[i].una {
                self.watch[i] = Watch {
                    una,
                    progress_ns: self.now,
                    streak: 0,
                    ..self.watch[i]
                };
            }
        }
    }

    /// After device `d`'s timers ran: every ACK timeout came at least one
    /// timeout period after the last progress, and no QP timed out more than
    /// `retry_cnt` + 1 times in a row (the last one failing it).
    pub(super) fn check_timeouts(&mut self, d: usize) {
        let period = local_ack_timeout_ns(self.cfg.qp.timeout).ok().flatten();
        for i in 0..self.qps.len() {
            let q = &self.qps[i];
            if q.dev != d {
                continue;
            }
            let c = self.devs[d].engine.qp_counters(q.h).unwrap_or_default();
            let delta = c.timeouts - self.watch[i].timeouts;
            if delta == 0 {
                continue;
            }
            self.watch[i].timeouts = c.timeouts;
            self.watch[i].streak += delta;
            let Some(p) = period else {
                fail!(self, "QP {i}: an ACK timeout with timeout = 0 (no timer)");
            };
            if self.now < self.watch[i].progress_ns + p {
                fail!(
                    self,
                    "QP {i}: ACK timeout {} ns after progress, period {p} ns",
                    self.now - self.watch[i].progress_ns
                );
            }
            let budget = u64::from(self.cfg.qp.retry_cnt) + 1;
            if self.watch[i].streak > budget {
                fail!(
                    self,
                    "QP {i}: {} timeouts in a row, retry_cnt {}",
                    self.watch[i].streak,
                    self.cfg.qp.retry_cnt
                );
            }
        }
    }

    // ------------------------------------------------------------ the end

    /// Quiescence: every WR complete, nothing in flight, memory equals the
    /// model, FETCH_ADDs linearizable.
    pub fn check_quiescent(&mut self) {
        if self.net.in_flight() > 0 {
            fail!(self, "{} datagrams still in flight", self.net.in_flight());
        }
        for i in 0..self.qps.len() {
            let q = &self.qps[i];
            if q.to_post > 0 || !q.outstanding.is_empty() {
                fail!(
                    self,
                    "QP {i}: {} WRs never posted, {} never completed (next: {:?})",
                    q.to_post,
                    q.outstanding.len(),
                    q.outstanding.front()
                );
            }
            if !q.recv_expect.is_empty() || q.recvs_done != q.recvs_posted {
                fail!(
                    self,
                    "QP {i}: {} messages never received",
                    q.recv_expect.len()
                );
            }
            let dev = &self.devs[q.dev];
            let got = dev.mem.snapshot(q.area.window(), WINDOW as usize);
            if got != q.window {
                let at = got
                    .iter()
                    .zip(&q.window)
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                fail!(self, "QP {i}: window differs from the model at byte {at}");
            }
            let cas = self.word(q.dev, q.area.cas_word());
            if cas != q.cas {
                fail!(self, "QP {i}: CMP_SWAP word {cas:#x}, model {:#x}", q.cas);
            }
            self.check_window(i);
        }
        for d in 0..self.devs.len() {
            self.check_faa(d);
        }
        self.check_corruption();
    }

    /// QP `i`'s window is as the model has it: bound with the model's rkey,
    /// or unbound, and nothing still uses it.
    pub(super) fn check_window(&self, i: usize) {
        let q = &self.qps[i];
        let Some(mw) = q.mw else { return };
        let Ok(w) = self.devs[q.dev].engine.mw(mw) else {
            fail!(self, "QP {i}: its memory window is gone");
        };
        let bound = q.mw_state == WindowState::Bound;
        if q.window_uses != 0
            || !matches!(q.mw_state, WindowState::Bound | WindowState::Unbound)
            || w.binding.is_some() != bound
            || (bound && w.rkey != q.mw_rkey)
        {
            fail!(
                self,
                "QP {i}: window {:?} rkey {:#x} ({} uses) in the model, engine: bound {} rkey {:#x}",
                q.mw_state,
                q.mw_rkey,
                q.window_uses,
                w.binding.is_some(),
                w.rkey
            );
        }
    }

    /// Every datagram with a flipped bit was dropped (as ICRC mismatch, or
    /// earlier as malformed when the flip broke a header): the fault model
    /// never flips the ICRC-masked byte, so each one must be, and nothing else.
    pub(super) fn check_corruption(&mut self) {
        let mut c = proto::datapath::DeviceCounters::default();
        for d in &self.devs {
            c.add(&d.engine.counters());
        }
        let dropped = c.drop_icrc + c.drop_malformed;
        let hit = self.net.stats.corrupted;
        if dropped != hit {
            fail!(
                self,
                "{hit} corrupted datagrams, but {dropped} dropped as bad ICRC/malformed"
            );
        }
    }

    /// The FETCH_ADDs on device `d`'s word form one sequence from 0: sorted by
    /// the value each saw, each saw the previous value plus the previous add,
    /// and the word ends at the sum.
    pub(super) fn check_faa(&mut self, d: usize) {
        let mut ops = self.faa[d].clone();
        ops.sort_unstable();
        let mut v = 0u64;
        for (orig, add) in &ops {
            if *orig != v {
                fail!(
                    self,
                    "device {d}: FETCH_ADDs not linearizable: one saw {orig:#x}, expected {v:#x}"
                );
            }
            v = v.wrapping_add(*add);
        }
        let end = self.word(d, self.devs[d].faa_word());
        if end != v {
            fail!(
                self,
                "device {d}: FETCH_ADD word is {end:#x}, the adds sum to {v:#x}"
            );
        }
    }

    /// Totals.
    pub fn summary(&self) -> Summary {
        let mut s = Summary {
            end_ns: self.now,
            net: self.net.stats,
            ..Summary::default()
        };
        for q in &self.qps {
            s.wrs += q.completed - q.local_ops;
            s.window_ops += q.local_ops;
            s.window_wrs += q.window_wrs;
            s.recvs += q.recvs_done;
        }
        for d in &self.devs {
            s.dev.add(&d.engine.counters());
        }
        s
    }
}

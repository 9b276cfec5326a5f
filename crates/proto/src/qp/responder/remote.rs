//! The responder's remote memory operations (rc-reliability.md §3): RDMA
//! READ, the atomics, IBA 1.5 ATOMIC WRITE and FLUSH, the resources saved for
//! their duplicates, and the stream of READ responses they leave in the
//! outbox.

use super::*;

impl Responder {
    pub(super) fn rc_read(
        &mut self,
        env: &RespEnv<'_>,
        repr: &TransportRepr,
    ) -> Result<(), Refusal> {
        let reth = repr.reth.ok_or(Refusal::InvalidRequest)?;
        if env.max_dest_rd_atomic == 0 {
            return Err(Refusal::InvalidRequest);
        }
        let len = u64::from(reth.dma_len);
        check_remote(env, reth.rkey.0, reth.va, len, Access::RemoteRead)?;
        let b = &repr.bth;
        let npsn = crate::qp::wqe::packets_for(len, env.mtu);
        let job = ReadJob {
            psn: b.psn,
            first: b.psn,
            npsn,
            va: reth.va,
            rkey: reth.rkey.0,
            len,
            offset: 0,
            pd: env.pd,
        };
        self.save(
            env,
            Resource::Read {
                first: b.psn,
                npsn,
                va: reth.va,
                rkey: reth.rkey.0,
                len,
            },
        );
        // IBA C9-148: MSN counts a READ when it is accepted.
        self.msn = (self.msn + 1) & 0xff_ffff;
        self.epsn = b.psn.wrapping_add(npsn);
        self.outbox.push_back(Response::Read(job));
        Ok(())
    }

    pub(super) fn rc_atomic(
        &mut self,
        env: &RespEnv<'_>,
        repr: &TransportRepr,
    ) -> Result<(), Refusal> {
        let a = repr.atomic_eth.ok_or(Refusal::InvalidRequest)?;
        if env.max_dest_rd_atomic == 0 || a.va % 8 != 0 {
            return Err(Refusal::InvalidRequest);
        }
        let checked = check_remote(env, a.rkey.0, a.va, 8, Access::RemoteAtomic)?;
        let op = if repr.bth.opcode.operation() == Operation::CompareSwap {
            AtomicOp::CompareSwap {
                compare: a.compare,
                swap: a.swap_add,
            }
        } else {
            AtomicOp::FetchAdd { add: a.swap_add }
        };
        let orig = env.mem.atomic(checked.host, op);
        drop(checked);
        let psn = repr.bth.psn;
        self.save(env, Resource::Atomic { psn, orig });
        self.msn = (self.msn + 1) & 0xff_ffff;
        self.ack_psn = psn;
        self.epsn = psn.next();
        self.outbox.push_back(Response::AtomicAck { psn, orig });
        Ok(())
    }

    /// IBA 1.5 ATOMIC WRITE: 8 bytes stored in one piece at an 8-byte-aligned
    /// address the R_Key allows writing, answered by a zero-length READ
    /// response (rxe `send_read_response_ack`; spec/memory-windows.md §8).
    pub(super) fn rc_atomic_write(
        &mut self,
        env: &RespEnv<'_>,
        pkt: &Incoming<'_>,
    ) -> Result<(), Refusal> {
        let reth = pkt.repr.reth.ok_or(Refusal::InvalidRequest)?;
        // rxe check_resource: like READ and atomics, it needs responder resources.
        if env.max_dest_rd_atomic == 0 || reth.dma_len != 8 || reth.va % 8 != 0 {
            return Err(Refusal::InvalidRequest);
        }
        let bytes: [u8; 8] = pkt
            .payload
            .try_into()
            .map_err(|_| Refusal::InvalidRequest)?;
        let checked = check_remote(env, reth.rkey.0, reth.va, 8, Access::RemoteWrite)?;
        if checked.host % 8 != 0 {
            return Err(Refusal::InvalidRequest);
        }
        let value = u64::from_ne_bytes(bytes);
        env.mem.atomic(checked.host, AtomicOp::Store { value });
        drop(checked);
        self.placed(env, pkt.repr.bth.psn);
        Ok(())
    }

    /// IBA 1.5 FLUSH to global visibility of a range (`IBV_FLUSH_RANGE`) or
    /// of the whole region (`IBV_FLUSH_MR`) the R_Key allows flushing
    /// (`IBV_ACCESS_FLUSH_GLOBAL`). Every earlier WRITE is placed in host
    /// memory before its packet is acknowledged, so global visibility holds
    /// already: the FLUSH is an ordering point, answered by a zero-length READ
    /// response. Persistence is refused: the region cannot have
    /// `IBV_ACCESS_FLUSH_PERSISTENT` here (spec/memory-windows.md §9).
    pub(super) fn rc_flush(
        &mut self,
        env: &RespEnv<'_>,
        repr: &TransportRepr,
    ) -> Result<(), Refusal> {
        let (Some(reth), Some(feth)) = (repr.reth, repr.feth) else {
            return Err(Refusal::InvalidRequest);
        };
        if env.max_dest_rd_atomic == 0 || feth.selectivity > 1 || feth.placement & !3 != 0 {
            return Err(Refusal::InvalidRequest);
        }
        if feth.placement != 1 {
            // Persistence: no region of this device allows it.
            return Err(Refusal::AccessError);
        }
        let rkey = reth.rkey.0;
        if feth.selectivity == 0 {
            check_remote(
                env,
                rkey,
                reth.va,
                u64::from(reth.dma_len),
                Access::RemoteFlush,
            )?;
        } else {
            // The whole region: its key must allow flushing (windows never do).
            let mr = crate::mr::mr_by_key(env.mrs, rkey).ok_or(Refusal::AccessError)?;
            mr.check(env.pd, rkey, mr.addr, mr.length, Access::RemoteFlush)
                .map_err(|_| Refusal::AccessError)?;
        }
        self.placed(env, repr.bth.psn);
        Ok(())
    }

    /// An ATOMIC WRITE or FLUSH at `psn` executed: saved for duplicates,
    /// counted in the MSN, answered by a zero-length READ response.
    pub(super) fn placed(&mut self, env: &RespEnv<'_>, psn: Psn) {
        self.save(env, Resource::Placed { psn });
        self.msn = (self.msn + 1) & 0xff_ffff;
        self.ack_psn = psn;
        self.epsn = psn.next();
        self.outbox
            .push_back(Response::Read(empty_read(psn, env.pd)));
    }

    /// Keeps at most `max_dest_rd_atomic` saved resources, recycling the oldest.
    pub(super) fn save(&mut self, env: &RespEnv<'_>, r: Resource) {
        while self.resources.len() >= usize::from(env.max_dest_rd_atomic.max(1)) {
            self.resources.pop_front();
        }
        self.resources.push_back(r);
        // Responder credit: never more saved READ/atomic resources than the
        // responder resources we granted (max_dest_rd_atomic; rc-reliability.md §3 step 4).
        debug_assert!(
            self.resources.len() <= usize::from(env.max_dest_rd_atomic.max(1)),
            "responder resources beyond max_dest_rd_atomic"
        );
    }

    /// rc-reliability.md §3.3: duplicates are answered, never re-executed.
    pub(super) fn duplicate(
        &mut self,
        env: &RespEnv<'_>,
        repr: &TransportRepr,
        fx: &mut RespEffects,
    ) {
        let q = repr.bth.psn;
        fx.dropped = Some(Drop::DupDropped);
        match repr.bth.opcode.operation() {
            Operation::ReadRequest => {
                let Some(reth) = repr.reth else { return };
                let found = self.resources.iter().find_map(|r| match *r {
                    Resource::Read {
                        first,
                        npsn,
                        va,
                        rkey,
                        len,
                    } if q.offset_from(first) < npsn => Some((first, npsn, va, rkey, len)),
                    _ => None,
                });
                let Some((first, npsn, va, rkey, len)) = found else {
                    return;
                };
                // rxe's acceptance: same R_Key, range inside the saved one.
                let inside = reth.va >= va && reth.va + u64::from(reth.dma_len) <= va + len;
                if reth.rkey.0 != rkey || !inside {
                    return;
                }
                // The requester asks again from q: a READ response still being
                // sent from q or beyond is stale (go-back-N asks for everything
                // after q again), so it stops instead of streaming on ahead of
                // the new one. Earlier responses (asked for again just before)
                // stay.
                self.outbox.retain(|r| match r {
                    Response::Read(j) => !j.psn.is_after(q) && j.psn != q,
                    _ => true,
                });
                let offset = u64::from(q.offset_from(first)) * u64::from(env.mtu);
                let job = ReadJob {
                    psn: q,
                    first,
                    npsn,
                    va,
                    rkey,
                    len,
                    offset,
                    pd: env.pd,
                };
                self.outbox.push_back(Response::Read(job));
                fx.dropped = Some(Drop::DupRead);
            }
            Operation::AtomicWrite | Operation::Flush => {
                let found = self
                    .resources
                    .iter()
                    .any(|r| matches!(*r, Resource::Placed { psn } if psn == q));
                if found {
                    self.outbox.push_back(Response::Read(empty_read(q, env.pd)));
                    fx.dropped = Some(Drop::DupAtomic);
                }
            }
            Operation::CompareSwap | Operation::FetchAdd => {
                let orig = self.resources.iter().find_map(|r| match *r {
                    Resource::Atomic { psn, orig } if psn == q => Some(orig),
                    _ => None,
                });
                if let Some(orig) = orig {
                    self.outbox.push_back(Response::AtomicAck { psn: q, orig });
                    fx.dropped = Some(Drop::DupAtomic);
                }
            }
            _ => {
                fx.dropped = Some(Drop::DupAcked);
                self.push_ack(self.ack_psn)
            }
        }
    }

    // ------------------------------------------------------- responses

    /// The next response packet: its headers in the returned repr; a READ
    /// response's `payload_len` bytes are written to their place in the
    /// datagram `buf`, at `buf[repr.header_len()..]` (no staging copy). `None`
    /// when nothing waits.
    pub fn next_response(&mut self, env: &RespEnv<'_>, buf: &mut [u8]) -> Option<TransportRepr> {
        let resp = *self.outbox.front()?;
        let out = match resp {
            Response::Ack { psn, syndrome } => {
                self.outbox.pop_front();
                crate::qp::requester::ack_repr(env.dest_qpn, psn, syndrome, self.msn)
            }
            Response::AtomicAck { psn, orig } => {
                self.outbox.pop_front();
                let mut r = crate::qp::requester::ack_repr(
                    env.dest_qpn,
                    psn,
                    Syndrome::ack_unlimited(),
                    self.msn,
                );
                r.bth.opcode = rc_opcode(0x12);
                r.atomic_ack_eth = Some(atomic_ack_eth::Repr { orig });
                r
            }
            Response::Read(job) => self.read_packet(env, job, buf),
        };
        let mut out = out;
        if env.qp_type == QpType::XrcRecv {
            // The XRC response opcodes carry the RC ones' headers: the
            // payload written after them stays in place.
            let rc_len = out.header_len();
            out.bth.opcode = xrc_response(out.bth.opcode);
            debug_assert_eq!(out.header_len(), rc_len);
        }
        Some(out)
    }

    pub(super) fn read_packet(
        &mut self,
        env: &RespEnv<'_>,
        mut job: ReadJob,
        buf: &mut [u8],
    ) -> TransportRepr {
        let mtu = u64::from(env.mtu);
        let index = job.psn.offset_from(job.first) as usize;
        let n = (job.len - job.offset).min(mtu) as usize;
        let pos = Position::of(index, job.npsn as usize);
        let opcode = Opcode::segment(Transport::Rc, MessageKind::ReadResponse, pos)
            .unwrap_or(rc_opcode(0x10));
        let mut r = TransportRepr::new(crate::qp::bth(opcode, env.dest_qpn, job.psn, false, false));
        if opcode.headers().contains(wire::HeaderSet::AETH) {
            r.aeth = Some(wire::aeth::Repr {
                syndrome: Syndrome::ack_unlimited(),
                msn: wire::Msn::from_masked(self.msn),
            });
        }
        // The memory is re-checked for every packet: the MR may have gone.
        let va = job.va + job.offset;
        let env = &RespEnv { pd: job.pd, ..*env };
        // Straight into the datagram, after the headers (a buffer of one
        // path MTU plus 64 bytes always has room; a shorter one gets no bytes
        // and the emit after refuses it).
        let at = r.header_len();
        if let Some(out) = buf.get_mut(at..at + n) {
            match check_remote(env, job.rkey, va, n as u64, Access::RemoteRead) {
                Ok(checked) if n > 0 => env.mem.read(checked.host, out),
                _ => out.fill(0),
            }
        }
        r.payload_len = n;
        job.offset += n as u64;
        job.psn = job.psn.next();
        if job.offset >= job.len {
            self.outbox.pop_front();
        } else if let Some(Response::Read(j)) = self.outbox.front_mut() {
            *j = job;
        }
        r
    }
}

/// The zero-length READ response ONLY at `psn` that answers an ATOMIC WRITE
/// or a FLUSH (no bytes, so `pd` checks nothing).
fn empty_read(psn: Psn, pd: PdHandle) -> ReadJob {
    ReadJob {
        psn,
        first: psn,
        npsn: 1,
        va: 0,
        rkey: 0,
        len: 0,
        offset: 0,
        pd,
    }
}

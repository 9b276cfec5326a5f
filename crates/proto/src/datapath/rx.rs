//! Packets in: the demultiplexer. The acceptance checks of roce-wire.md §7
//! (in rxe's order) pick the QP, then the QP's actor takes the packet
//! ([`crate::qp::actor::Qp::on_packet`]).

use crate::engine::QpGuard;
use crate::handle::QpHandle;
use crate::memory::Memory;
use crate::output::Room;
use crate::qp::actor::{gid_ip, Packet};
use crate::types::QpType;
use crate::Engine;
use std::net::{IpAddr, SocketAddr};
use wire::icrc::{self, Endpoints};
use wire::opcode::Transport;
use wire::{Encap, TransportRepr};

impl Engine {
    /// A datagram arrived on the device's socket: `from` is the sender, `to`
    /// the local address it was sent to. Every rejection is a silent drop,
    /// counted (roce-wire.md §7).
    pub fn handle_datagram(
        &self,
        now: u64,
        from: SocketAddr,
        to: SocketAddr,
        payload: &[u8],
        mem: &dyn Memory,
    ) {
        self.receive(now, (from, to), payload, mem, false, false, None);
    }

    /// A datagram of the same-host path (spec/same-host.md §1 "The ICRC on
    /// the path"): sealed by the sending engine and carried through shared
    /// memory only, never a wire. For RC, UC and XRC the ICRC is not
    /// verified (their receive needs nothing the check yields); UD, CM MADs
    /// and multicast are checked as from a socket (a UD receive's GRH holds
    /// the IPv4 ID the check recovers). Everything else is
    /// [`Engine::handle_datagram`]. With `respond`, the QP's responses may
    /// leave at once through it ([`Room`]).
    pub fn handle_local_datagram(
        &self,
        now: u64,
        from: SocketAddr,
        to: SocketAddr,
        payload: &[u8],
        mem: &dyn Memory,
        respond: Option<&mut dyn Room>,
    ) {
        self.receive(now, (from, to), payload, mem, true, false, respond);
    }

    /// A datagram this device sent to its own address, handed straight back
    /// by the driver (its loopback shortcut; `from` and `to` are then both
    /// the driver's address): as [`Engine::handle_local_datagram`], or with
    /// `checked` (faults or a capture on its way) as
    /// [`Engine::handle_datagram`]. A whole RDMA WRITE it brings is not
    /// counted in [`Engine::writes_taken`]: the program wrote to itself, so
    /// no post of its answers it (a posting thread that took it for a
    /// peer's answer would wait in its posts for WRITEs its own posts make).
    pub fn handle_own_datagram(
        &self,
        now: u64,
        (from, to): (SocketAddr, SocketAddr),
        payload: &[u8],
        mem: &dyn Memory,
        checked: bool,
    ) {
        self.receive(now, (from, to), payload, mem, !checked, true, None);
    }

    /// A run of packets from the same-host path (crate::run): taken apart
    /// and handed to the QP packet by packet, under one lock, as if each
    /// had come alone through [`Engine::handle_local_datagram`]. A run that
    /// breaks the rules of crate::run, or not for an RC, UC or XRC QP, is
    /// dropped whole (counted as malformed, or by the acceptance check that
    /// refused it). `tag`: the run's [`Segments`](crate::run::Segments) as
    /// the sender's driver carried them ([`Segments::to_tag`](crate::run::Segments::to_tag)).
    /// With `respond`, as [`Engine::handle_local_datagram`].
    pub fn handle_local_run(
        &self,
        now: u64,
        (from, to): (SocketAddr, SocketAddr),
        payload: &[u8],
        tag: [u8; 3],
        mem: &dyn Memory,
        respond: Option<&mut dyn Room>,
    ) {
        let c = self.dev.counters.mine();
        c.packets_received.bump();
        c.bytes_received.add(payload.len() as u64);
        let parsed = TransportRepr::parse(payload);
        let segments = crate::run::Segments::from_tag(tag);
        let taken = parsed.as_ref().ok().zip(segments).and_then(|(repr, segs)| {
            let run = crate::run::Run::new(repr, repr.payload(payload), segs).ok()?;
            Some((repr, run))
        });
        let Some((repr, run)) = taken else {
            c.drop_malformed.bump();
            return;
        };
        c.icrc_unchecked.bump();
        let Some((h, q)) = self.accept(repr, from.ip(), to.ip()) else {
            return;
        };
        let grh = [0; 40];
        let mut each = *repr;
        let response = repr.opcode().is_response();
        let (dropped, sent) = self.drive_locked(h, q, mem, |q, env, sink| {
            q.dp.counters.runs_received += 1;
            let mut dropped = 0;
            let mut whole = false;
            for i in 0..run.len() {
                // The acceptance check again for each packet: one before
                // may have moved the QP to a state that takes no more.
                let ready = match response {
                    true => q.ctl.accepts_responses(),
                    false => q.ctl.accepts_requests(),
                };
                if i > 0 && !ready {
                    c.drop_qp_state.bump();
                    c.drop_not_accepted.bump();
                    continue;
                }
                let payload = run.packet(i, &mut each);
                let pkt = Packet {
                    repr: &each,
                    payload,
                    grh: &grh,
                };
                let dropped_one = q.on_packet(now, env, &pkt, sink);
                dropped += u64::from(dropped_one);
                whole |= !dropped_one && ends_write(&each);
            }
            // Counted as placed, before the responses (`took_writes`).
            self.took_writes(now, u64::from(whole));
            let sent = respond.map_or((0, 0), |r| q.respond_now(env, r));
            (dropped, sent)
        });
        self.responded(sent);
        c.drop_by_qp.add(dropped);
    }

    /// Datagrams of one same-host ring read together (a stream's batch,
    /// in ring order): each as [`Engine::handle_local_datagram`] takes it,
    /// but consecutive ones for the same QP under one lock and one turn of
    /// the QP, the acceptance checks of roce-wire.md §7 made again for each
    /// (one before may have moved the QP to a state that takes no more; the
    /// sender and addresses are the batch's). GSI, multicast and UD
    /// datagrams go alone. With `respond`, the responses of the last
    /// datagram's QP may leave at once through it, as for a single one.
    pub fn handle_local_batch(
        &self,
        now: u64,
        ends: (SocketAddr, SocketAddr),
        datagrams: &mut dyn Iterator<Item = &[u8]>,
        mem: &dyn Memory,
        respond: Option<&mut dyn Room>,
    ) {
        self.take_batch(now, ends, datagrams, mem, true, respond);
    }

    /// Datagrams one socket read brought from the same sender (`from`), in
    /// arrival order: each as [`Engine::handle_datagram`] takes it, its
    /// ICRC verified, but consecutive ones for the same QP under one lock
    /// and one turn, as [`Engine::handle_local_batch`] takes a ring's.
    pub fn handle_batch(
        &self,
        now: u64,
        ends: (SocketAddr, SocketAddr),
        datagrams: &mut dyn Iterator<Item = &[u8]>,
        mem: &dyn Memory,
    ) {
        self.take_batch(now, ends, datagrams, mem, false, None);
    }

    /// The two batch entries: `local`, the ICRC of RC, UC and XRC
    /// datagrams is not checked (as [`Engine::handle_local_datagram`]);
    /// else each datagram's is, before the QP sees it.
    fn take_batch(
        &self,
        now: u64,
        (from, to): (SocketAddr, SocketAddr),
        datagrams: &mut dyn Iterator<Item = &[u8]>,
        mem: &dyn Memory,
        local: bool,
        mut respond: Option<&mut dyn Room>,
    ) {
        let ep = Endpoints {
            src: from.ip(),
            dst: to.ip(),
            src_port: from.port(),
            dst_port: to.port(),
        };
        // Counted, then the ICRC as the entry for one checks it.
        let intact = |payload: &[u8]| {
            self.count_received(payload);
            let c = self.dev.counters.mine();
            if local {
                c.icrc_unchecked.bump();
                return true;
            }
            let ok = icrc::verify_received(&ep, payload).is_ok();
            if !ok {
                c.drop_icrc.bump();
            }
            ok
        };
        let mut next = datagrams.next();
        while let Some(payload) = next.take() {
            next = datagrams.next();
            let parsed = TransportRepr::parse(payload);
            let Some(repr) = parsed.as_ref().ok().filter(|r| groups(r)) else {
                // Alone, as the single entry takes it (and counts it).
                let reply = next.is_none().then(|| respond.take()).flatten();
                self.receive(now, (from, to), payload, mem, local, false, reply);
                continue;
            };
            if !intact(payload) {
                continue;
            }
            let Some((h, q)) = self.accept(repr, from.ip(), to.ip()) else {
                continue;
            };
            let qpn = repr.bth.dest_qp.get();
            let grh = [0; 40];
            let (dropped, sent) = self.drive_locked(h, q, mem, |q, env, sink| {
                let (mut dropped, mut writes) = (0, 0);
                let mut take = |q: &mut crate::qp::actor::Qp, repr: &TransportRepr, bytes| {
                    let pkt = Packet {
                        repr,
                        payload: repr.payload(bytes),
                        grh: &grh,
                    };
                    if q.on_packet(now, env, &pkt, sink) {
                        dropped += 1;
                    } else if ends_write(repr) {
                        writes += 1;
                    }
                };
                take(q, repr, payload);
                // The datagrams after it for the same QP, while they come.
                while let Some(bytes) = next.filter(|b| dest_qpn(b) == Some(qpn)) {
                    let parsed = TransportRepr::parse(bytes);
                    if parsed.as_ref().is_ok_and(|r| !groups(r)) {
                        // A UD opcode: alone, as the entry for one takes it.
                        break;
                    }
                    next = datagrams.next();
                    match parsed {
                        Ok(r) => {
                            if intact(bytes) && self.takes(q, &r) {
                                take(q, &r, bytes);
                            }
                        }
                        Err(_) => {
                            self.count_received(bytes);
                            self.dev.counters.mine().drop_malformed.bump();
                        }
                    }
                }
                // Counted as placed, before the responses (`took_writes`).
                self.took_writes(now, writes);
                let reply = next.is_none().then(|| respond.take()).flatten();
                let sent = reply.map_or((0, 0), |r| q.respond_now(env, r));
                (dropped, sent)
            });
            self.responded(sent);
            self.dev.counters.mine().drop_by_qp.add(dropped);
        }
    }

    /// A datagram received, counted.
    fn count_received(&self, payload: &[u8]) {
        let c = self.dev.counters.mine();
        c.packets_received.bump();
        c.bytes_received.add(payload.len() as u64);
    }

    /// `local`: the ICRC need not be checked; `own`: the device's own
    /// datagram (its WRITEs are not counted as taken).
    #[allow(clippy::too_many_arguments)]
    fn receive(
        &self,
        now: u64,
        (from, to): (SocketAddr, SocketAddr),
        payload: &[u8],
        mem: &dyn Memory,
        local: bool,
        own: bool,
        respond: Option<&mut dyn Room>,
    ) {
        self.count_received(payload);
        // Borrowed where parse left it (the representation is ≈ 170 bytes).
        let parsed = TransportRepr::parse(payload);
        let Ok(repr) = &parsed else {
            self.dev.counters.mine().drop_malformed.bump();
            return;
        };
        let ep = Endpoints {
            src: from.ip(),
            dst: to.ip(),
            src_port: from.port(),
            dst_port: to.port(),
        };
        let dqp = repr.bth.dest_qp.get();
        let unchecked = local
            && dqp != wire::mad::GSI_QPN
            && dqp != crate::mcast::MULTICAST_QPN
            && repr.opcode().transport() != Transport::Ud;
        let ip_id = if unchecked {
            self.dev.counters.mine().icrc_unchecked.bump();
            None
        } else {
            let Ok(ip_id) = icrc::verify_received(&ep, payload) else {
                self.dev.counters.mine().drop_icrc.bump();
                return;
            };
            ip_id
        };
        // CM hook: datagrams to QP1 go to the device's CM (gsi.rs, spec/cm.md §7).
        if repr.bth.dest_qp.get() == wire::mad::GSI_QPN {
            return self.gsi_receive(now, from.ip(), repr, payload);
        }
        // Multicast (spec/multicast.md): every attached QP of the group `to` names.
        if repr.bth.dest_qp.get() == crate::mcast::MULTICAST_QPN {
            let grh = grh_area(&ep, ip_id, payload.len());
            let body = repr.payload(payload);
            return self.mcast_receive(now, to.ip(), repr, body, &grh, mem);
        }
        let Some((h, q)) = self.accept(repr, from.ip(), to.ip()) else {
            return;
        };
        let body = repr.payload(payload);
        // Only a UD receive puts the GRH area in memory (rc-reliability.md
        // §7); `accept` gave a UD opcode only to a UD QP. Building it costs
        // an IP header and its checksum per datagram, so the others skip it.
        let grh = if repr.opcode().transport() == Transport::Ud {
            grh_area(&ep, ip_id, payload.len())
        } else {
            [0; 40]
        };
        let pkt = Packet {
            repr,
            payload: body,
            grh: &grh,
        };
        let (dropped, sent) = self.drive_locked(h, q, mem, |q, env, sink| {
            let dropped = q.on_packet(now, env, &pkt, sink);
            if !dropped && ends_write(repr) && !own {
                // Counted as placed, before the responses (`took_writes`).
                self.took_writes(now, 1);
            }
            (dropped, respond.map_or((0, 0), |r| q.respond_now(env, r)))
        });
        self.responded(sent);
        if dropped {
            self.dev.counters.mine().drop_by_qp.bump();
        }
    }

    /// Counts the datagrams and bytes a receive sent at once
    /// ([`Room`]) as the device's, as a transmit turn does.
    fn responded(&self, (n, bytes): (u64, u64)) {
        if n > 0 {
            let c = self.dev.counters.mine();
            c.packets_sent.add(n);
            c.bytes_sent.add(bytes);
        }
    }

    /// roce-wire.md §7 steps 3–6: the QP exists, its type and state take this
    /// packet, the addresses are its peer's, the P_Key matches. The QP comes
    /// back locked for its turn.
    fn accept(
        &self,
        repr: &TransportRepr,
        src: IpAddr,
        dst: IpAddr,
    ) -> Option<(QpHandle, QpGuard<'_>)> {
        let qpn = repr.bth.dest_qp.get();
        let Some(h) = self.qp_by_qpn(qpn) else {
            self.dev.counters.mine().drop_no_qp.bump();
            return None;
        };
        let q = self.qps.get(h)?.lock();
        let a = q.ctl.attr();
        let peer_ok = !q.ctl.qp_type().is_connected()
            || (a.ah_attr.grh.dgid.ip() == src
                && gid_ip(&self.info.gids, a.ah_attr.grh.sgid_index) == dst);
        self.admits(&q, repr, peer_ok).then_some((h, q))
    }

    /// roce-wire.md §7 steps 4–6 again for a datagram of the same sender,
    /// to the same QP and address, as one [`Engine::accept`] took.
    fn takes(&self, q: &crate::qp::actor::Qp, repr: &TransportRepr) -> bool {
        self.admits(q, repr, true)
    }

    /// Whether QP `q` takes `repr` (its type and state, the sender's
    /// address as `peer_ok` says, the P_Key); a refusal is counted.
    fn admits(&self, q: &crate::qp::actor::Qp, repr: &TransportRepr, peer_ok: bool) -> bool {
        let want = match q.ctl.qp_type() {
            QpType::Rc => Transport::Rc,
            QpType::Uc => Transport::Uc,
            QpType::XrcSend | QpType::XrcRecv => Transport::Xrc,
            _ => Transport::Ud,
        };
        let ready = if repr.opcode().is_response() {
            q.ctl.accepts_responses()
        } else {
            q.ctl.accepts_requests()
        };
        let pkey_ok = repr.bth.pkey.matches(wire::PKey::DEFAULT);
        let c = self.dev.counters.mine();
        let reason = if repr.opcode().transport() != want {
            &c.drop_wrong_transport
        } else if !ready {
            &c.drop_qp_state
        } else if !peer_ok {
            &c.drop_wrong_peer
        } else if !pkey_ok {
            &c.drop_pkey
        } else {
            return true;
        };
        reason.bump();
        c.drop_not_accepted.bump();
        false
    }
}

/// Whether a same-host datagram may join a batch's turn of its QP
/// ([`Engine::handle_local_batch`]): not for the CM's QP1, a multicast
/// group, or UD (those take their own ways, with the ICRC check).
fn groups(repr: &TransportRepr) -> bool {
    let dqp = repr.bth.dest_qp.get();
    dqp != wire::mad::GSI_QPN
        && dqp != crate::mcast::MULTICAST_QPN
        && repr.opcode().transport() != Transport::Ud
}

/// The destination QP of a datagram, from its BTH (bytes 5–7), without
/// parsing it.
fn dest_qpn(datagram: &[u8]) -> Option<u32> {
    let b = datagram.get(5..8)?;
    Some(u32::from_be_bytes([0, b[0], b[1], b[2]]))
}

/// The 40-byte GRH area of a UD receive (rc-reliability.md §7): IPv6: the
/// header as received; IPv4: 20 zero bytes, then the IPv4 header (with the ID
/// recovered from the ICRC and a valid checksum).
/// The last (or only) packet of an RDMA WRITE without immediate
/// ([`Engine::writes_taken`]).
fn ends_write(repr: &TransportRepr) -> bool {
    let op = repr.opcode();
    op.operation() == wire::opcode::Operation::Write && (op.is_last() || op.is_only())
}

fn grh_area(ep: &Endpoints, ip_id: Option<u16>, udp_payload_len: usize) -> [u8; 40] {
    let mut out = [0u8; 40];
    let encap = match ip_id {
        Some(id) => icrc::ipv4_with_id(ep, id),
        None => Encap::from_addrs(ep.src, ep.dst, ep.src_port).map(|mut e| {
            e.dst_port = ep.dst_port;
            e
        }),
    };
    let Some(encap) = encap else { return out };
    let mut hdr = [0u8; 48];
    if encap.emit_ip_udp(&mut hdr, udp_payload_len).is_err() {
        return out;
    }
    match encap.ip_header_len() {
        20 => out[20..].copy_from_slice(&hdr[..20]),
        _ => out.copy_from_slice(&hdr[..40]),
    }
    out
}

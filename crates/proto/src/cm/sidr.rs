//! The two SIDR state machines (spec/cm.md §5.9): SIDR_REQ_SENT on the
//! requesting side (with its retried SIDR_REQ) and SIDR_REQ_RCVD on the
//! answering side (until the owner replies). Promise: a SIDR_REQ is sent at
//! most `1 + max_cm_retries` times, 4096 ms apart (`cma_resolve_ib_udp`);
//! the owner hears exactly one outcome per request.

use wire::cm::{self, Message, SidrStatus};
use wire::{PKey, Qkey, Qpn};

use super::conn::{fit, mad, Fate, Outstanding};
use super::outbox::Outbox;
use super::timing::{convert_to_ms, MS_NS};
use super::types::*;
use crate::types::Gid;

/// SIDR_REQ_SENT: our request, waiting for the SIDR_REP.
#[derive(Debug, Clone)]
pub(crate) struct SidrSent {
    pub id: u32,
    pub peer: Gid,
    pub pending: Outstanding,
}

impl SidrSent {
    /// `ib_send_cm_sidr_req` (IDLE → SIDR_REQ_SENT).
    /// `ids` = (our request ID, the TID to send it with).
    pub fn start(
        (id, tid): (u32, u64),
        cfg: &CmConfig,
        peer: Gid,
        service_id: u64,
        pd: &[u8],
        now: u64,
        out: &mut Outbox,
    ) -> Result<SidrSent, CmError> {
        let private_data = fit::<{ cm::sidr_req::PRIVATE_DATA_LEN }>("SIDR_REQ", pd)?;
        let bytes = mad(
            tid,
            Message::SidrReq(cm::sidr_req::Repr {
                request_id: id,
                pkey: PKey(wire::mad::DEFAULT_PKEY),
                service_id,
                private_data,
            }),
        );
        out.send(peer, bytes, false);
        // cma_resolve_ib_udp: timeout_ms = 1 << (CMA_CM_RESPONSE_TIMEOUT − 8).
        let timeout_ns = convert_to_ms(cfg.cm_response_timeout) * MS_NS;
        Ok(SidrSent {
            id,
            peer,
            pending: Outstanding {
                mad: bytes,
                deadline: now.saturating_add(timeout_ns),
                timeout_ns,
                retries_left: cfg.max_cm_retries,
                sends: 1,
            },
        })
    }

    /// `cm_sidr_rep_handler` + `cma_sidr_rep_handler`: the answer ends the request.
    pub fn on_rep(&self, r: &cm::sidr_rep::Repr, out: &mut Outbox) {
        let id = ConnId(self.id);
        out.event(match r.status {
            SidrStatus::Success => CmEvent::SidrResolved {
                id,
                qpn: r.qpn,
                qkey: r.qkey.0,
                private_data: r.private_data.to_vec(),
            },
            status => CmEvent::SidrUnreachable {
                id,
                status: Some(status),
                sends: self.pending.sends,
            },
        });
    }

    /// Resend when due; after the last retry report it unreachable.
    pub fn on_timeout(&mut self, now: u64, out: &mut Outbox) -> Fate {
        let o = &mut self.pending;
        if now < o.deadline {
            return Fate::Keep;
        }
        if o.retries_left > 0 {
            o.retries_left -= 1;
            o.sends = o.sends.saturating_add(1);
            o.deadline = now.saturating_add(o.timeout_ns);
            out.send(self.peer, o.mad, true);
            return Fate::Keep;
        }
        out.event(CmEvent::SidrUnreachable {
            id: ConnId(self.id),
            status: None,
            sends: o.sends,
        });
        Fate::Remove
    }
}

/// SIDR_REQ_RCVD: a request delivered to the owner, not yet answered.
#[derive(Debug, Clone)]
pub(crate) struct SidrRcvd {
    pub peer: Gid,
    pub request_id: u32,
    pub tid: u64,
    pub service_id: u64,
}

impl SidrRcvd {
    /// `ib_send_cm_sidr_rep` (SIDR_REQ_RCVD → IDLE).
    pub fn reply(
        &self,
        status: SidrStatus,
        qpn: Qpn,
        qkey: u32,
        pd: &[u8],
        out: &mut Outbox,
    ) -> Result<(), CmError> {
        let private_data = fit::<{ cm::sidr_rep::PRIVATE_DATA_LEN }>("SIDR_REP", pd)?;
        out.send(
            self.peer,
            sidr_rep(
                self.request_id,
                self.tid,
                self.service_id,
                status,
                qpn,
                qkey,
                private_data,
            ),
            false,
        );
        Ok(())
    }
}

/// A SIDR_REP; with no listener the CM answers status Unsupported itself
/// (`cm_reject_sidr_req`).
pub(crate) fn sidr_rep(
    request_id: u32,
    tid: u64,
    service_id: u64,
    status: SidrStatus,
    qpn: Qpn,
    qkey: u32,
    private_data: [u8; cm::sidr_rep::PRIVATE_DATA_LEN],
) -> [u8; wire::mad::MAD_LEN] {
    mad(
        tid,
        Message::SidrRep(cm::sidr_rep::Repr {
            request_id,
            status,
            info_len: 0,
            qpn,
            service_id,
            qkey: Qkey(qkey),
            info: [0; cm::sidr_rep::INFO_LEN],
            private_data,
        }),
    )
}

//! UD services through SIDR: resolve (active) and answer (listener).

use super::channel::{CmChannel, Route};
use super::common::*;
use super::conn::Listener;
use crate::pd::ProtectionDomain;
use proto::types::Gid;
use std::net::IpAddr;
use std::time::{Duration, Instant};
use wire::cm::cma::{self, Header};

/// A UD service resolved through SIDR: where to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdService {
    /// The remote UD QP number.
    pub qpn: u32,
    /// Its Q_Key.
    pub qkey: u32,
    /// The SIDR_REP's private data (136 bytes).
    pub private_data: Vec<u8>,
}

/// `rdma_resolve_route` + `rdma_connect` for a UD id: resolves `port` (UDP
/// port space) at `peer` to a QPN and Q_Key (SIDR_REQ/SIDR_REP).
pub fn resolve_ud(
    pd: &ProtectionDomain,
    peer: IpAddr,
    port: u16,
    private_data: &[u8],
    wait: Duration,
) -> Result<UdService, CmError> {
    let dev = pd.inner.ctx.dev.clone();
    let ch = CmChannel::new()?;
    let hub = dev.hub();
    let id = dev.cm(|e, now| {
        let local = device_ip(e);
        let mut pd = vec![0u8; cma::HEADER_LEN];
        let hdr = Header {
            src_port: 0,
            src: local,
            dst: peer,
        };
        let _ = hdr.emit(&mut pd);
        pd.extend_from_slice(private_data);
        let sid = cma::service_id(PortSpace::Udp, port);
        let id = e.cm_mut().sidr_request(now, Gid::from(peer), sid, &pd)?;
        hub.set(Route::Conn(id.0), &ch);
        Ok::<_, CmError>(id)
    })?;
    let e = ch.take(Some(Instant::now() + wait), |e| {
        matches!(e, CmEvent::SidrResolved { id: i, .. } | CmEvent::SidrUnreachable { id: i, .. } if *i == id)
    });
    hub.unset(Route::Conn(id.0));
    match e {
        Some(CmEvent::SidrResolved {
            qpn,
            qkey,
            private_data,
            ..
        }) => Ok(UdService {
            qpn: qpn.get(),
            qkey,
            private_data,
        }),
        Some(CmEvent::SidrUnreachable {
            status: Some(s), ..
        }) => Err(CmError::Sidr(s)),
        Some(CmEvent::SidrUnreachable { sends, .. }) => Err(CmError::Unreachable { sends }),
        _ => {
            let _ = dev.cm(|e, now| e.cm_mut().destroy(now, id));
            Err(CmError::TimedOut(wait))
        }
    }
}

impl Listener {
    /// Answers the next SIDR request (waiting at most `wait`) with `qpn` and
    /// `qkey` (`rdma_accept` on a UD id). Returns the requester's private data
    /// (its user part).
    pub fn answer_sidr(&self, qpn: u32, qkey: u32, wait: Duration) -> Result<Vec<u8>, CmError> {
        let e = self
            .ch
            .take(Some(Instant::now() + wait), |e| {
                matches!(e, CmEvent::SidrRequest { .. })
            })
            .ok_or(CmError::TimedOut(wait))?;
        let CmEvent::SidrRequest {
            id, private_data, ..
        } = e
        else {
            return Err(CmError::TimedOut(wait));
        };
        let hub = self.dev.hub();
        self.dev.cm(|e, _| {
            e.cm_mut()
                .sidr_reply(id, SidrStatus::Success, Qpn::from_masked(qpn), qkey, &[])
        })?;
        hub.unset(Route::Conn(id.0));
        Ok(match Header::parse(&private_data) {
            Ok(_) => private_data[cma::HEADER_LEN..].to_vec(),
            Err(_) => private_data,
        })
    }
}

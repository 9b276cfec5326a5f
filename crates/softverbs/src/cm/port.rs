//! [`CmPort`]: the device's CM at the level of `ib_cm`, for the C ABI.

use super::channel::{CmChannel, Hub, Route};
use super::common::*;
use crate::device::Shared;
use proto::types::Gid;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;
use wire::cm::cma::{self, Header};

/// The device's connection manager at the level of `ib_cm`, for the C ABI
/// (librdmacm drives its QPs itself with `ibv_modify_qp`, from
/// [`CmPort::qp_attrs`], as rdma-core's librdmacm does with
/// `rdma_init_qp_attr`). Each call runs under the engine lock and wakes the
/// progress thread; the events of an id go to the channel it was routed to.
#[derive(Clone)]
pub struct CmPort {
    dev: Arc<Shared>,
    hub: Arc<Hub>,
}

impl std::fmt::Debug for CmPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmPort").finish_non_exhaustive()
    }
}

impl crate::Context {
    /// The device's connection manager (see [`CmPort`]).
    pub fn cm_port(&self) -> CmPort {
        let dev = self.inner.dev.clone();
        let hub = dev.hub();
        CmPort { dev, hub }
    }
}

impl CmPort {
    /// The device's address (the source of its MADs).
    pub fn local_addr(&self) -> IpAddr {
        self.dev.with(|e| device_ip(e))
    }

    /// `rdma_listen`: REQs and SIDR_REQs for `port` of `ps` go to `ch`.
    pub fn listen(
        &self,
        ps: PortSpace,
        port: u16,
        ch: &Arc<CmChannel>,
    ) -> Result<ListenId, CmError> {
        let sid = cma::service_id(ps, port);
        let l = self.dev.cm(|e, _| {
            let l = e.cm_mut().listen(sid)?;
            self.hub.set(Route::Listen(l.0), ch);
            Ok::<_, CmError>(l)
        })?;
        // On a shared address the process that receives a REQ for `sid`
        // forwards it here (spec/cm.md §8); another process listening on it
        // makes this listen fail as the kernel's ib_cm_listen does (EBUSY).
        if let Err(e) = self.dev.register_service(sid) {
            let _ = self.stop_listening(l);
            return Err(e);
        }
        Ok(l)
    }

    /// `rdma_bind_addr` of `port` in `ps`: a REQ for it that comes before
    /// the listen is held for it, not rejected (`proto::cm::Cm::reserve`;
    /// qperf tells its peer the bound port, then listens). Each call needs
    /// its [`CmPort::release`].
    ///
    /// On a shared address the service's registry name is taken now too, so
    /// that such a REQ read by another process is forwarded here (spec/cm.md
    /// §8); when another process holds the name, its listen decides, and
    /// ours fails at `listen` (EADDRINUSE) as before.
    pub fn reserve(&self, ps: PortSpace, port: u16) {
        let sid = cma::service_id(ps, port);
        self.dev.cm(|e, _| e.cm_mut().reserve(sid));
        let _ = self.dev.register_service(sid);
    }

    /// The binding of [`CmPort::reserve`] is gone (the id destroyed).
    pub fn release(&self, ps: PortSpace, port: u16) {
        let sid = cma::service_id(ps, port);
        if !self.dev.cm(|e, _| {
            e.cm_mut().release(sid);
            e.cm_mut().wants(sid)
        }) {
            self.dev.slot.unregister_service(sid);
        }
    }

    /// Stops a listen (connections made through it stay).
    pub fn stop_listening(&self, l: ListenId) -> Result<(), CmError> {
        self.hub.unset(Route::Listen(l.0));
        let wanted = self.dev.cm(|e, _| {
            e.cm_mut().stop_listening(l)?;
            Ok::<_, CmError>(e.cm_mut().wants(l.0))
        })?;
        // A binding of the port that stays keeps the registry name.
        if !wanted {
            self.dev.slot.unregister_service(l.0);
        }
        Ok(())
    }

    /// Sends a REQ (private data: the rdma_cm header + the user's bytes,
    /// [`cma_header`]); the outcome arrives on `ch`.
    pub fn connect(
        &self,
        p: &ConnectParams,
        timing: CmTiming,
        ch: &Arc<CmChannel>,
    ) -> Result<ConnId, CmError> {
        self.dev.cm(|e, now| {
            let id = e.cm_mut().connect_with(now, p, timing)?;
            self.hub.set(Route::Conn(id.0), ch);
            Ok(id)
        })
    }

    /// Routes `id`'s later events to `ch` (`rdma_migrate_id`, or a request
    /// taken from a listener's channel onto the new id's channel).
    pub fn route(&self, id: ConnId, ch: &Arc<CmChannel>) {
        self.hub.set(Route::Conn(id.0), ch);
    }

    /// REP for a `ConnectRequest`.
    pub fn accept(&self, id: ConnId, p: &AcceptParams) -> Result<(), CmError> {
        self.dev.cm(|e, now| e.cm_mut().accept(now, id, p))?;
        Ok(())
    }

    /// REJ (consumer defined) with `private_data`.
    pub fn reject(&self, id: ConnId, private_data: &[u8]) -> Result<(), CmError> {
        self.dev
            .cm(|e, now| e.cm_mut().reject(now, id, private_data))?;
        Ok(())
    }

    /// RTU after a `ConnectResponse` (the QP in RTS).
    pub fn ready_to_use(&self, id: ConnId, private_data: &[u8]) -> Result<(), CmError> {
        self.dev
            .cm(|e, _| e.cm_mut().ready_to_use(id, private_data))?;
        Ok(())
    }

    /// `rdma_notify(IBV_EVENT_COMM_EST)` / `rdma_establish`: the passive side
    /// is established without the RTU.
    pub fn establish(&self, id: ConnId) -> Result<(), CmError> {
        self.dev.cm(|e, _| e.cm_mut().establish(id))?;
        Ok(())
    }

    /// DREQ from ESTABLISHED, DREP after `Disconnected`.
    pub fn disconnect(&self, id: ConnId, private_data: &[u8]) -> Result<(), CmError> {
        self.dev
            .cm(|e, now| e.cm_mut().disconnect(now, id, private_data))?;
        Ok(())
    }

    /// `rdma_destroy_id`: forgets `id`, telling the peer as `cm_destroy_id` does.
    pub fn destroy(&self, id: ConnId) -> Result<(), CmError> {
        self.hub.unset(Route::Conn(id.0));
        self.dev.cm(|e, now| e.cm_mut().destroy(now, id))?;
        Ok(())
    }

    /// `rdma_init_qp_attr`: the attributes for `target`.
    pub fn qp_attrs(&self, id: ConnId, target: QpTarget) -> Result<CmQpAttrs, CmError> {
        Ok(self.dev.cm(|e, _| e.cm_mut().qp_attrs(id, target))?)
    }

    /// Waits (at most `timeout`) until the progress thread has taken every
    /// MAD the CM queued, then 2 ms more for it to leave through the socket:
    /// a process about to exit (its CM dies with it, unlike the kernel's)
    /// calls this so that its last REJ, DREQ or DREP still goes out. True
    /// when the queue emptied in time.
    pub fn flush(&self, timeout: std::time::Duration) -> bool {
        let end = Instant::now() + timeout;
        loop {
            if self.dev.cm(|e, _| e.cm_mut().transmits_pending()) == 0 {
                std::thread::sleep(std::time::Duration::from_millis(2));
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// SIDR_REQ for `port` of `ps` at `peer`; the answer arrives on `ch`.
    pub fn sidr_request(
        &self,
        peer: IpAddr,
        ps: PortSpace,
        port: u16,
        private_data: &[u8],
        ch: &Arc<CmChannel>,
    ) -> Result<ConnId, CmError> {
        self.dev.cm(|e, now| {
            let sid = cma::service_id(ps, port);
            let id = e
                .cm_mut()
                .sidr_request(now, Gid::from(peer), sid, private_data)?;
            self.hub.set(Route::Conn(id.0), ch);
            Ok(id)
        })
    }

    /// SIDR_REP for a `SidrRequest`.
    pub fn sidr_reply(
        &self,
        id: ConnId,
        status: SidrStatus,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        self.hub.unset(Route::Conn(id.0));
        self.dev.cm(|e, _| {
            e.cm_mut()
                .sidr_reply(id, status, Qpn::from_masked(qpn), qkey, private_data)
        })?;
        Ok(())
    }
}

/// The 36-byte rdma_cm header (`cma_hdr`) for a REQ or SIDR_REQ from `src`
/// (port `src_port`) to `dst`, followed by `user` (the caller's private data).
pub fn cma_header(src: IpAddr, src_port: u16, dst: IpAddr, user: &[u8]) -> Vec<u8> {
    let mut pd = vec![0u8; cma::HEADER_LEN];
    let h = Header { src_port, src, dst };
    // The buffer is HEADER_LEN long, the one way emit can fail.
    let _ = h.emit(&mut pd);
    pd.extend_from_slice(user);
    pd
}

impl Shared {
    /// Runs `f` on the CM under the engine lock, routes the events it made,
    /// and wakes the progress thread to send its MADs.
    pub(crate) fn cm<R>(&self, f: impl FnOnce(&mut proto::Engine, u64) -> R) -> R {
        let now = self.driver.now();
        let r = self.driver.with(|d| {
            let r = f(&mut d.engine, now);
            d.cm_hub.drain(now, d.engine.cm_mut());
            r
        });
        self.driver.doorbell();
        r
    }

    /// Registers this process as the listener of `service_id` on its
    /// (possibly shared) address (`sv_io::share::Slot::register_service`).
    pub(crate) fn register_service(&self, service_id: u64) -> Result<(), CmError> {
        self.slot.register_service(service_id).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AddrInUse {
                // Another process of the address listens on it (EADDRINUSE).
                CmError::Cm(proto::cm::CmError::AlreadyListening(service_id))
            } else {
                CmError::Os(e.kind())
            }
        })
    }

    pub(crate) fn hub(&self) -> Arc<Hub> {
        self.driver.with(|d| d.cm_hub.clone())
    }
}

impl crate::context::Context {
    /// The device CM's counters: MADs sent/received by kind, drops by reason.
    pub fn cm_counters(&self) -> CmCounters {
        self.inner.dev.driver.with(|d| d.engine.cm_counters())
    }

    /// Datagrams for QP1 that never reached the CM (not a GSI MAD).
    pub fn gsi_counters(&self) -> proto::gsi::GsiCounters {
        self.inner.dev.driver.with(|d| d.engine.gsi_counters())
    }
}

//! Event channels (an eventfd readable while events wait) and the hub that
//! routes the device CM's events to them, under the engine lock.

use super::common::*;
use proto::cm::Cm;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};
use sv_io::EventFd;

/// Where events wait: a queue, a condition variable for blocking waits and
/// an eventfd that is readable while the queue is not empty.
pub struct CmChannel {
    q: Mutex<VecDeque<CmEvent>>,
    cv: Condvar,
    fd: EventFd,
}

impl CmChannel {
    /// A channel with no events (`rdma_create_event_channel`); route ids to
    /// it through [`super::CmPort`].
    pub fn new() -> Result<Arc<CmChannel>, CmError> {
        Ok(Arc::new(CmChannel {
            q: Mutex::new(VecDeque::new()),
            cv: Condvar::new(),
            fd: EventFd::new().map_err(|e| CmError::Os(e.kind()))?,
        }))
    }

    fn push(&self, e: CmEvent) {
        let mut q = self
            .q
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        q.push_back(e);
        let _ = self.fd.add(1);
        self.cv.notify_all();
    }

    /// The first event `pick` accepts, waiting until `deadline`.
    pub(super) fn take(
        &self,
        deadline: Option<Instant>,
        pick: impl Fn(&CmEvent) -> bool,
    ) -> Option<CmEvent> {
        let mut q = self
            .q
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            if let Some(i) = q.iter().position(&pick) {
                let e = q.remove(i);
                if q.is_empty() {
                    let _ = self.fd.take();
                }
                return e;
            }
            let left = deadline?.checked_duration_since(Instant::now())?;
            q = self
                .cv
                .wait_timeout(q, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    /// The oldest event, waiting at most `timeout` (`None`: only look).
    /// For [`super::CmPort`] users; the typed objects take their own events.
    pub fn next_event(&self, timeout: Option<Duration>) -> Option<CmEvent> {
        self.take(timeout.map(|t| Instant::now() + t), |_| true)
    }

    /// Waits (poll(2) on [`CmChannel::fd`]) until an event waits or `timeout`
    /// passes; true when one waits.
    pub fn wait_readable(&self, timeout: Option<Duration>) -> bool {
        self.fd.wait_readable(timeout).unwrap_or(false)
    }

    /// Events waiting (of every object routed to this channel).
    pub fn len(&self) -> usize {
        self.q
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// True when no event waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The file descriptor: readable while events wait.
    pub fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.fd.as_raw_fd()
    }
}

/// Routes the device CM's events to the channel of the object they concern.
#[derive(Default)]
pub(crate) struct Hub {
    routes: Mutex<HashMap<Route, Weak<CmChannel>>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Route {
    Listen(u64),
    Conn(u32),
}

impl Hub {
    pub(super) fn set(&self, r: Route, ch: &Arc<CmChannel>) {
        let mut m = self
            .routes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        m.insert(r, Arc::downgrade(ch));
    }

    pub(super) fn unset(&self, r: Route) {
        let mut m = self
            .routes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        m.remove(&r);
    }

    /// Moves every event the CM has to its channel (called under the engine lock).
    pub(crate) fn drain(&self, now: u64, cm: &mut Cm) {
        while let Some(e) = cm.poll_event() {
            let (route, new_conn) = match &e {
                CmEvent::ConnectRequest { id, listen, .. }
                | CmEvent::SidrRequest { id, listen, .. } => (Route::Listen(listen.0), Some(*id)),
                CmEvent::ConnectResponse { id, .. }
                | CmEvent::Established { id }
                | CmEvent::Rejected { id, .. }
                | CmEvent::Unreachable { id, .. }
                | CmEvent::Disconnected { id, .. }
                | CmEvent::TimewaitExit { id }
                | CmEvent::SidrResolved { id, .. }
                | CmEvent::SidrUnreachable { id, .. } => (Route::Conn(id.0), None),
            };
            let ch = {
                let m = self
                    .routes
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                m.get(&route).and_then(Weak::upgrade)
            };
            match (ch, new_conn) {
                (Some(ch), Some(id)) => {
                    // Until accepted, the request's later events go to the listener.
                    self.set(Route::Conn(id.0), &ch);
                    ch.push(e);
                }
                (Some(ch), None) => ch.push(e),
                (None, Some(id)) => {
                    // The listener is gone: refuse, as the kernel does for a
                    // destroyed listen ID.
                    let _ = cm.destroy(now, id);
                }
                (None, None) => {
                    if let CmEvent::TimewaitExit { .. } = e {
                        continue;
                    }
                    tracing::debug!(target: "softverbs::cm", "event for a forgotten id: {e:?}");
                }
            }
        }
    }
}

pub(super) fn hub_points_to(hub: &Hub, id: ConnId, ch: &Arc<CmChannel>) -> bool {
    let m = hub
        .routes
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    m.get(&Route::Conn(id.0))
        .and_then(Weak::upgrade)
        .is_some_and(|c| Arc::ptr_eq(&c, ch))
}

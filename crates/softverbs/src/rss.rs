//! Receive-side scaling (spec/raw-packet.md §6): receive work queues
//! (`ibv_create_wq`, type RQ), indirection tables of them
//! (`ibv_create_rwq_ind_table`) and RSS QPs (`ibv_create_qp_ex` with
//! `IBV_QP_INIT_ATTR_IND_TABLE | _RX_HASH`): a RAW_PACKET QP with no queues
//! of its own whose flows' frames are spread over the table's WQs by the
//! Toeplitz hash of the selected fields (`proto::rss`).
//!
//! A WQ is, in the engine, a receive-only RAW_PACKET QP with no packet
//! socket (its QPN is the `wq_num`, its receive CQ the WQ's CQ); RDY is its
//! RTR. The RSS QP owns the packet socket; the device hands each of its
//! frames to the WQ the hash picks (`device.rs`).

use crate::cq::CompletionQueue;
use crate::error::{DestroyError, Error};
use crate::pd::ProtectionDomain;
use crate::qp::{AnyTransport, QpInit, QueuePair, RssTable};
use proto::rss;
use proto::wr::RecvWr;
use proto::{AttrMask, QpAttr, QpCap, QpState};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, PoisonError};

use crate::wq::{RssError, WqState, MAX_HASH_KEY_LEN, MAX_LOG_IND_TBL_SIZE};

/// A receive work queue (`struct ibv_wq`, type `IBV_WQT_RQ`).
pub struct WorkQueue {
    pub(crate) inner: Arc<WqInner>,
}

pub(crate) struct WqInner {
    qp: QueuePair<AnyTransport>,
    state: Mutex<WqState>,
    tables: AtomicUsize,
}

impl ProtectionDomain {
    /// `ibv_create_wq` (type RQ): receives into `cq`, up to `max_wr` WRs
    /// of `max_sge` SGEs; starts in RESET.
    pub fn create_wq(
        &self,
        cq: &CompletionQueue,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<WorkQueue, Error> {
        let init = QpInit {
            cap: QpCap {
                max_send_wr: 0,
                max_recv_wr: max_wr,
                max_send_sge: 0,
                max_recv_sge: max_sge,
                max_inline_data: 0,
            },
            ..QpInit::new(cq, cq)
        };
        let qp = QueuePair::create_hidden(self.inner.clone(), &init)?;
        Ok(WorkQueue {
            inner: Arc::new(WqInner {
                qp,
                state: Mutex::new(WqState::Reset),
                tables: AtomicUsize::new(0),
            }),
        })
    }

    /// An RSS QP (`ibv_create_qp_ex` with `IBV_QP_INIT_ATTR_IND_TABLE |
    /// IBV_QP_INIT_ATTR_RX_HASH`, type RAW_PACKET): frames its flows match
    /// go to the WQ of `table` that the Toeplitz hash of `fields` under
    /// `key` picks. It sends nothing. `EPERM` without `CAP_NET_RAW`.
    pub fn create_rss_qp(
        &self,
        table: &RwqIndTable,
        function: u8,
        key: &[u8],
        fields: u64,
    ) -> Result<QueuePair<AnyTransport>, Error> {
        if function != rss::FUNC_TOEPLITZ {
            return Err(RssError::HashFunction { function }.into());
        }
        if fields & !rss::fields::SUPPORTED != 0 {
            return Err(RssError::HashFields { fields }.into());
        }
        if key.is_empty() || key.len() > MAX_HASH_KEY_LEN {
            return Err(RssError::KeyLength { len: key.len() }.into());
        }
        let dispatch = crate::device::RssDispatch {
            wqs: table.inner.wqs.iter().map(|w| w.qp.qp_num()).collect(),
            key: key.to_vec(),
            fields,
            log_size: table.inner.log_size,
        };
        let cq = CompletionQueue {
            inner: table.inner.first_cq(),
        };
        QueuePair::create_rss(self.inner.clone(), table.inner.clone(), &cq, dispatch)
    }
}

impl WorkQueue {
    /// `wq_num`.
    pub fn wq_num(&self) -> u32 {
        self.inner.qp.qp_num()
    }

    /// The WQ's state.
    pub fn state(&self) -> WqState {
        *self
            .inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// `ibv_modify_wq` with `IBV_WQ_ATTR_STATE` (and `curr`:
    /// `IBV_WQ_ATTR_CURR_STATE`).
    pub fn modify(&self, to: WqState, curr: Option<WqState>) -> Result<(), Error> {
        let mut state = self
            .inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let from = *state;
        if let Some(given) = curr.filter(|&c| c != from) {
            return Err(RssError::CurrentState {
                given,
                actual: from,
            }
            .into());
        }
        let qp = &self.inner.qp;
        let step = |s: QpState, mask: AttrMask| {
            let attr = QpAttr {
                qp_state: s,
                port_num: 1,
                ..QpAttr::default()
            };
            qp.modify(&attr, mask)
        };
        match (from, to) {
            (a, b) if a == b => {}
            (WqState::Reset, WqState::Rdy) => {
                step(QpState::Init, AttrMask::STATE | AttrMask::PORT)?;
                step(QpState::Rtr, AttrMask::STATE)?;
            }
            (WqState::Rdy, WqState::Err) => step(QpState::Err, AttrMask::STATE)?,
            (WqState::Rdy | WqState::Err, WqState::Reset) => step(QpState::Reset, AttrMask::STATE)?,
            (from, to) => return Err(RssError::Transition { from, to }.into()),
        }
        *state = to;
        Ok(())
    }

    /// `ibv_post_wq_recv` for one WR.
    pub fn post_recv(&self, wr: &RecvWr<'_>) -> Result<(), Error> {
        self.inner.qp.post_recv(wr)
    }

    /// `ibv_destroy_wq`: `EBUSY` while an indirection table holds it.
    pub fn destroy(self) -> Result<(), DestroyError<Self>> {
        let tables = self.inner.tables.load(SeqCst);
        if tables > 0 {
            return Err(DestroyError {
                error: RssError::WqInTable { tables }.into(),
                object: self,
            });
        }
        Ok(())
    }
}

/// A receive work-queue indirection table (`struct ibv_rwq_ind_table`).
pub struct RwqIndTable {
    pub(crate) inner: Arc<IndTableInner>,
}

pub(crate) struct IndTableInner {
    wqs: Vec<Arc<WqInner>>,
    log_size: u32,
    pub(crate) qps: AtomicUsize,
}

impl IndTableInner {
    /// The first WQ's CQ (an RSS QP's engine QP needs one).
    pub(crate) fn first_cq(&self) -> Arc<crate::cq::CqInner> {
        self.wqs[0].qp.cq_inner()
    }
}

impl RssTable for IndTableInner {
    fn qp_added(&self) {
        self.qps.fetch_add(1, SeqCst);
    }
    fn qp_removed(&self) {
        self.qps.fetch_sub(1, SeqCst);
    }
}

impl Drop for IndTableInner {
    fn drop(&mut self) {
        for w in &self.wqs {
            w.tables.fetch_sub(1, SeqCst);
        }
    }
}

impl crate::context::Context {
    /// `ibv_create_rwq_ind_table`: `2^log_size` WQs (repeats allowed).
    pub fn create_rwq_ind_table(
        &self,
        log_size: u32,
        wqs: &[&WorkQueue],
    ) -> Result<RwqIndTable, Error> {
        if log_size > MAX_LOG_IND_TBL_SIZE || wqs.len() != 1 << log_size {
            return Err(RssError::TableSize {
                log: log_size,
                given: wqs.len(),
            }
            .into());
        }
        if wqs
            .iter()
            .any(|w| !Arc::ptr_eq(&w.inner.qp.pd().ctx, &self.inner))
        {
            return Err(RssError::ForeignWq.into());
        }
        let wqs: Vec<Arc<WqInner>> = wqs.iter().map(|w| w.inner.clone()).collect();
        for w in &wqs {
            w.tables.fetch_add(1, SeqCst);
        }
        Ok(RwqIndTable {
            inner: Arc::new(IndTableInner {
                wqs,
                log_size,
                qps: AtomicUsize::new(0),
            }),
        })
    }
}

impl RwqIndTable {
    /// `ibv_destroy_rwq_ind_table`: `EBUSY` while an RSS QP uses it.
    pub fn destroy(self) -> Result<(), DestroyError<Self>> {
        let qps = self.inner.qps.load(SeqCst);
        if qps > 0 {
            return Err(DestroyError {
                error: RssError::TableInUse { qps }.into(),
                object: self,
            });
        }
        Ok(())
    }

    /// `log_ind_tbl_size`.
    pub fn log_size(&self) -> u32 {
        self.inner.log_size
    }
}

impl std::fmt::Debug for WorkQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkQueue")
            .field("wq_num", &self.wq_num())
            .field("state", &self.state())
            .finish()
    }
}

impl std::fmt::Debug for RwqIndTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwqIndTable")
            .field("log_size", &self.inner.log_size)
            .finish()
    }
}

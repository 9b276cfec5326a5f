//! Shared receive queues: creation, `ibv_modify_srq` and `ibv_query_srq` rules.

use crate::device::DeviceAttr;
use crate::error::{Error, InvalidArg, RangeError};
use crate::handle::PdHandle;

/// `struct ibv_srq_attr`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SrqAttr {
    /// Receive WRs that may be outstanding.
    pub max_wr: u32,
    /// SGEs per receive WR.
    pub max_sge: u32,
    /// Limit that arms the SRQ-limit event (0 = not armed).
    pub srq_limit: u32,
}

/// `IBV_SRQ_MAX_WR`: resize.
pub const SRQ_MAX_WR: u32 = 1 << 0;
/// `IBV_SRQ_LIMIT`: arm the limit event.
pub const SRQ_LIMIT: u32 = 1 << 1;

/// A shared receive queue.
#[derive(Debug, Clone)]
pub struct Srq {
    /// Owning PD.
    pub pd: PdHandle,
    /// Current attributes.
    pub attr: SrqAttr,
    /// Receive WRs currently posted (maintained by the data path).
    pub posted: u32,
    /// An XRC SRQ's domain and CQ (`None`: a basic SRQ).
    pub xrc: Option<crate::xrcd::XrcSrq>,
}

fn range(
    what: &'static str,
    value: u32,
    min: u32,
    max: u32,
    note: &'static str,
) -> Result<(), Error> {
    if value < min || value > max {
        return Err(RangeError {
            what,
            value: value.into(),
            min: min.into(),
            max: max.into(),
            note,
        }
        .into());
    }
    Ok(())
}

/// Checks `ibv_create_srq`; returns the attributes granted (`srq_limit` is
/// irrelevant to create and starts at 0, not armed).
pub fn check_create(attr: &SrqAttr, dev: &DeviceAttr) -> Result<SrqAttr, Error> {
    range(
        "srq_attr.max_wr",
        attr.max_wr,
        1,
        dev.max_srq_wr,
        "; device limit max_srq_wr",
    )?;
    range(
        "srq_attr.max_sge",
        attr.max_sge,
        0,
        dev.max_srq_sge,
        "; device limit max_srq_sge",
    )?;
    Ok(SrqAttr {
        max_wr: attr.max_wr,
        max_sge: attr.max_sge,
        srq_limit: 0,
    })
}

impl Srq {
    /// `ibv_modify_srq`: all-or-nothing.
    pub fn modify(&mut self, attr: &SrqAttr, mask: u32, dev: &DeviceAttr) -> Result<(), Error> {
        let unknown = mask & !(SRQ_MAX_WR | SRQ_LIMIT);
        if unknown != 0 {
            return Err(InvalidArg::SrqUnknownMask { bits: unknown }.into());
        }
        let mut next = self.attr;
        if mask & SRQ_MAX_WR != 0 {
            range(
                "srq_attr.max_wr",
                attr.max_wr,
                1,
                dev.max_srq_wr,
                "; device limit max_srq_wr",
            )?;
            if attr.max_wr < self.posted {
                return Err(InvalidArg::SrqBelowPosted {
                    max_wr: attr.max_wr,
                    posted: self.posted,
                }
                .into());
            }
            next.max_wr = attr.max_wr;
        }
        if mask & SRQ_LIMIT != 0 {
            range(
                "srq_attr.srq_limit",
                attr.srq_limit,
                0,
                next.max_wr,
                "; must not exceed max_wr",
            )?;
            next.srq_limit = attr.srq_limit;
        }
        self.attr = next;
        Ok(())
    }
}

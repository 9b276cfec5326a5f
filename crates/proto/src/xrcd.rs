//! XRC domains: what `ibv_open_xrcd` / `ibv_close_xrcd` decide, the links
//! from XRC SRQs and XRC_RECV QPs to their domain, and the errors of the XRC
//! verbs (spec/xrc.md).
//!
//! A *domain* is the shared thing (the kernel's `struct ib_xrcd`); every
//! `ibv_open_xrcd` returns a new *open* of a domain (the kernel's uobject),
//! named by an [`XrcdHandle`]. Opens of the same file (device and inode) in one
//! engine share one domain (spec/xrc.md §1); an open without a file has a
//! domain of its own. The engine holds the tables (`engine/xrc.rs`); this
//! module holds the rules and the types, and imports only the handles.

use crate::handle::{kind, CqHandle, CtxHandle, PdHandle, QpHandle, SrqHandle, XrcdHandle};
use crate::table::Table;
use std::collections::HashMap;

/// The file an XRC domain is tied to: `st_dev` and `st_ino` of the file
/// descriptor given to `ibv_open_xrcd` (the kernel keys its table by inode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct XrcdKey {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
}

/// The `oflag` bits of `struct ibv_xrcd_init_attr` that matter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenFlags {
    /// `O_CREAT`: create the domain if the file has none.
    pub create: bool,
    /// `O_EXCL`: fail if the file already has a domain.
    pub excl: bool,
}

/// `O_CREAT` on Linux (the value `ibv_xrcd_init_attr.oflags` carries).
pub const O_CREAT: u32 = 0o100;
/// `O_EXCL` on Linux.
pub const O_EXCL: u32 = 0o200;

impl OpenFlags {
    /// From the raw `oflags` (other bits are ignored, as the kernel does).
    pub fn from_raw(oflags: u32) -> OpenFlags {
        OpenFlags {
            create: oflags & O_CREAT != 0,
            excl: oflags & O_EXCL != 0,
        }
    }
}

/// What an open of a file finds: an existing domain, a new one, or an error
/// (kernel `ib_uverbs_open_xrcd`, spec/xrc.md §1).
pub fn check_open(key: XrcdKey, existing: bool, flags: OpenFlags) -> Result<(), XrcError> {
    match (existing, flags.create, flags.excl) {
        (false, false, _) => Err(XrcError::NoDomainForFile { key }),
        (true, _, true) => Err(XrcError::DomainExists { key }),
        _ => Ok(()),
    }
}

/// An XRC SRQ's extra state: its domain and the CQ its receives complete on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XrcSrq {
    /// The open it was created through (its use count).
    pub xrcd: XrcdHandle,
    /// The domain.
    pub domain: u32,
    /// Its completion queue (`ibv_srq_init_attr_ex.cq`).
    pub cq: CqHandle,
}

/// An XRC_RECV QP's domain, and the open it was created through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XrcLink {
    /// The open it was created through (its use count).
    pub xrcd: XrcdHandle,
    /// The domain.
    pub domain: u32,
}

/// Where an XRC request goes: the SRQ the XRCETH names, checked to be an XRC
/// SRQ of the target QP's domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XrcTarget {
    /// The SRQ.
    pub srq: SrqHandle,
    /// Its PD: RDMA and atomics through the target QP are checked against it.
    pub pd: PdHandle,
    /// Its CQ: receive completions go there.
    pub cq: CqHandle,
}

/// Why an XRC request found no SRQ (the responder answers NAK Invalid
/// Request, spec/xrc.md §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum XrcMiss {
    /// No SRQ has this number.
    #[error("XRCETH names SRQ {srqn:#x}, which does not exist")]
    NoSrq {
        /// The number.
        srqn: u32,
    },
    /// The SRQ is a basic SRQ.
    #[error("XRCETH names SRQ {srqn:#x}, which is not an XRC SRQ")]
    NotXrc {
        /// The number.
        srqn: u32,
    },
    /// The number is another process's (spec/xrc-processes.md): SRQ numbers
    /// carry the process's share of the address, as QPNs do.
    #[error("XRCETH names SRQ {srqn:#x}, a number of another process sharing this address; XRC domains are not shared between processes (spec/xrc-processes.md)")]
    OtherProcess {
        /// The number.
        srqn: u32,
    },
    /// The SRQ belongs to another XRC domain than the target QP.
    #[error("XRCETH names SRQ {srqn:#x} of XRC domain {srq_domain}, but the target QP is in domain {qp_domain}")]
    OtherDomain {
        /// The number.
        srqn: u32,
        /// The SRQ's domain.
        srq_domain: u32,
        /// The QP's domain.
        qp_domain: u32,
    },
}

/// The SRQ numbers of one engine: `base` (the high bits of its QPN space,
/// which on a shared address name the process, sv_io::share) ORed with the
/// table slot + 1, below `span` (a power of two). So SRQ numbers, like QPNs,
/// are distinct across the processes of an address, and a target QP never
/// takes another process's SRQ number for one of its own
/// (spec/xrc-processes.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqNumbers {
    /// The bits every number of this engine carries.
    pub base: u32,
    /// Numbers run from `base + 1` to below `base + span`.
    pub span: u32,
}

impl SrqNumbers {
    /// The numbering that goes with QPN space `first..=last`.
    pub fn of_qpn_space(first: u32, last: u32) -> SrqNumbers {
        let len = last.saturating_sub(first).saturating_add(1);
        let span = len
            .checked_next_power_of_two()
            .unwrap_or(1 << 24)
            .min(1 << 24);
        SrqNumbers {
            base: first & !(span - 1) & 0x00ff_ffff,
            span,
        }
    }

    /// The SRQ number `ibv_get_srq_num` reports for the SRQ in table slot
    /// `index` (24 bits, never 0).
    pub fn srq_num(self, index: u32) -> u32 {
        (self.base | ((index + 1) & (self.span - 1))) & 0x00ff_ffff
    }

    /// The table slot of SRQ number `srqn` (inverse of [`SrqNumbers::srq_num`]);
    /// `Err(OtherProcess)` for a number outside this engine's.
    pub fn srq_index(self, srqn: u32) -> Result<u32, XrcMiss> {
        if srqn & !(self.span - 1) != self.base {
            return Err(XrcMiss::OtherProcess { srqn });
        }
        (srqn & (self.span - 1))
            .checked_sub(1)
            .ok_or(XrcMiss::NoSrq { srqn })
    }
}

/// An XRC verb refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum XrcError {
    /// The handle names no open XRC domain (closed, or never opened).
    #[error("no such XRC domain (handle {handle:#x}): it was closed or never opened")]
    NoSuchXrcd {
        /// The raw handle.
        handle: u64,
    },
    /// `ibv_open_xrcd` of a file with no domain, without `O_CREAT` (kernel: EAGAIN).
    #[error("open_xrcd: the file (dev {}, inode {}) has no XRC domain and oflags lack O_CREAT", key.dev, key.ino)]
    NoDomainForFile {
        /// The file.
        key: XrcdKey,
    },
    /// `ibv_open_xrcd` with `O_EXCL` of a file that has a domain (kernel: EINVAL).
    #[error("open_xrcd: O_EXCL, but the file (dev {}, inode {}) already has an XRC domain", key.dev, key.ino)]
    DomainExists {
        /// The file.
        key: XrcdKey,
    },
    /// `ibv_close_xrcd` while SRQs or QPs created through this open exist (kernel: EBUSY).
    #[error("close_xrcd: {users} XRC SRQ(s)/QP(s) created through this XRC domain handle still exist; destroy them first")]
    Busy {
        /// How many.
        users: u32,
    },
    /// An XRC object and the XRCD given with it belong to different contexts.
    #[error("{what}: the XRC domain was opened in another context")]
    OtherContext {
        /// Which call.
        what: &'static str,
    },
    /// `ibv_open_qp` of a QPN of another process sharing the address
    /// (kernel `ib_open_qp`'s answer for a QP not in the domain: EINVAL).
    #[error("open_qp: QP {qpn:#x} is not one of this process's QPs ({first:#x}..={last:#x}): it belongs to another process sharing the device's address, and XRC domains are not shared between processes, so its target QP cannot be opened here (spec/xrc-processes.md)")]
    TargetQpOfAnotherProcess {
        /// The QPN asked for.
        qpn: u32,
        /// This process's first QPN.
        first: u32,
        /// This process's last QPN.
        last: u32,
    },
    /// `ibv_open_qp` of a QPN that is no XRC_RECV QP of this domain (kernel `ib_open_qp`: EINVAL).
    #[error("open_qp: QP {qpn:#x} is not an XRC_RECV QP of this XRC domain")]
    NoTargetQp {
        /// The QPN asked for.
        qpn: u32,
    },
    /// `ibv_open_qp` of another type than XRC_RECV (kernel: EINVAL).
    #[error("open_qp: only XRC_RECV QPs can be opened (qp_type {qp_type})")]
    OpenType {
        /// The raw type asked for.
        qp_type: u32,
    },
    /// `ibv_create_srq_ex` of type XRC without an XRCD or a CQ (kernel: EINVAL).
    #[error("create_srq_ex: an XRC SRQ needs {missing} (comp_mask IBV_SRQ_INIT_ATTR_{mask})")]
    SrqMissing {
        /// What is missing.
        missing: &'static str,
        /// The comp_mask bit.
        mask: &'static str,
    },
    /// `ibv_create_srq_ex` of a type softverbs does not know.
    #[error("create_srq_ex: srq_type {srq_type} is not BASIC (0) or XRC (1)")]
    SrqType {
        /// The raw type.
        srq_type: u32,
    },
    /// An XRC_RECV QP created without `IBV_QP_INIT_ATTR_XRCD`.
    #[error("create_qp_ex: an XRC_RECV QP needs an XRC domain (comp_mask IBV_QP_INIT_ATTR_XRCD)")]
    RecvQpWithoutXrcd,
}

impl XrcError {
    /// The errno Linux returns in the same case.
    pub fn errno(&self) -> crate::Errno {
        match self {
            XrcError::NoDomainForFile { .. } => crate::Errno::EAGAIN,
            XrcError::Busy { .. } => crate::Errno::EBUSY,
            _ => crate::Errno::EINVAL,
        }
    }
}

/// How many XRC domain opens a device holds at most.
pub(crate) const MAX_XRCD_OPENS: usize = 1 << 16;

/// One `ibv_open_xrcd` (the kernel's XRCD uobject).
#[derive(Debug)]
pub(crate) struct XrcdOpen {
    pub(crate) ctx: CtxHandle,
    pub(crate) domain: u32,
    /// XRC SRQs and XRC_RECV QPs created through this open.
    pub(crate) users: u32,
}

/// One XRC domain (the kernel's `struct ib_xrcd`).
#[derive(Debug)]
pub(crate) struct Domain {
    pub(crate) key: Option<XrcdKey>,
    pub(crate) opens: u32,
}

/// The engine's XRC tables (kept by the engine, worked by engine/xrc.rs).
pub(crate) struct XrcState {
    pub(crate) opens: Table<XrcdOpen, kind::Xrcd>,
    pub(crate) domains: HashMap<u32, Domain>,
    pub(crate) by_key: HashMap<XrcdKey, u32>,
    pub(crate) next_domain: u32,
    /// XRC_RECV QPs: the XRCD opens their handles were made through, the
    /// creator's first, then one per `ibv_open_qp` (kernel: the real QP's
    /// `open_list`); the QP lives until the last handle is destroyed, and
    /// its events go to every holder's context.
    pub(crate) qp_holders: HashMap<QpHandle, Vec<XrcdHandle>>,
}

impl Default for XrcState {
    fn default() -> Self {
        XrcState {
            opens: Table::new(MAX_XRCD_OPENS),
            domains: HashMap::new(),
            by_key: HashMap::new(),
            next_domain: 1,
            qp_holders: HashMap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: XrcdKey = XrcdKey { dev: 1, ino: 2 };

    #[test]
    fn open_rules_follow_the_kernel() {
        let f = OpenFlags::from_raw;
        assert_eq!(
            check_open(KEY, false, f(0)),
            Err(XrcError::NoDomainForFile { key: KEY })
        );
        assert_eq!(check_open(KEY, false, f(O_CREAT)), Ok(()));
        assert_eq!(check_open(KEY, false, f(O_CREAT | O_EXCL)), Ok(()));
        assert_eq!(check_open(KEY, true, f(0)), Ok(()));
        assert_eq!(check_open(KEY, true, f(O_CREAT)), Ok(()));
        assert_eq!(
            check_open(KEY, true, f(O_CREAT | O_EXCL)),
            Err(XrcError::DomainExists { key: KEY })
        );
        assert_eq!(
            XrcError::NoDomainForFile { key: KEY }.errno(),
            crate::Errno::EAGAIN
        );
        assert_eq!(XrcError::Busy { users: 1 }.errno(), crate::Errno::EBUSY);
    }

    #[test]
    fn srq_numbers_round_trip_and_are_never_zero() {
        // One process alone (the whole QPN space), and the slots of a shared
        // address (sv_io::share: 7 slot bits, slot 0 starting at 16).
        let all = SrqNumbers::of_qpn_space(16, 0xff_fffe);
        assert_eq!(
            all,
            SrqNumbers {
                base: 0,
                span: 1 << 24
            }
        );
        let slot0 = SrqNumbers::of_qpn_space(16, (1 << 17) - 1);
        let slot5 = SrqNumbers::of_qpn_space(5 << 17, (6 << 17) - 1);
        let last = SrqNumbers::of_qpn_space(127 << 17, 0xff_fffe);
        assert_eq!(
            slot0,
            SrqNumbers {
                base: 0,
                span: 1 << 17
            }
        );
        assert_eq!(
            slot5,
            SrqNumbers {
                base: 5 << 17,
                span: 1 << 17
            }
        );
        assert_eq!(
            last,
            SrqNumbers {
                base: 127 << 17,
                span: 1 << 17
            }
        );
        for n in [all, slot0, slot5, last] {
            for i in [0, 1, 77, 0xfffe] {
                assert_ne!(n.srq_num(i), 0);
                assert_eq!(n.srq_index(n.srq_num(i)), Ok(i));
            }
            assert_eq!(n.srq_index(n.base), Err(XrcMiss::NoSrq { srqn: n.base }));
        }
        // Another process's number is recognised as such, never aliased.
        let theirs = slot5.srq_num(0);
        assert_eq!(
            slot0.srq_index(theirs),
            Err(XrcMiss::OtherProcess { srqn: theirs })
        );
        assert_eq!(
            slot5.srq_index(slot0.srq_num(0)),
            Err(XrcMiss::OtherProcess { srqn: 1 })
        );
    }
}

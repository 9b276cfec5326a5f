//! Work completions: `struct ibv_wc` and its enums.
//!
//! This module owns [`WorkCompletion`] (a field-for-field mirror of `ibv_wc`),
//! [`WcStatus`] with the verbs names and `ibv_wc_status_str` wording,
//! [`WcOpcode`], [`WcFlags`], the WR-opcode → WC-opcode map ([`WR_TO_WC`]) and
//! constructors for error and flush completions.
//!
//! Promises (spec completions.md):
//! - every enum value and flag bit is the verbs.h one (cross-checked by tests
//!   against the spec tables);
//! - error and flush completions set only the fields that are valid on error —
//!   `wr_id`, `status`, `qp_num`, `vendor_err` (§1, `ibv_poll_cq(3)`) — and zero
//!   the rest, except `opcode`, which is kept for the engine's own bookkeeping
//!   and logs (applications must not read it on error);
//! - `imm_data` keeps the wire bytes, in network order ([`ImmData`]).
#![forbid(unsafe_code)]

use crate::wr::{ImmData, WrOpcode};
use std::fmt;

/// `enum ibv_wc_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcStatus {
    /// `IBV_WC_SUCCESS` (0).
    Success,
    /// `IBV_WC_LOC_LEN_ERR` (1).
    LocLenErr,
    /// `IBV_WC_LOC_QP_OP_ERR` (2).
    LocQpOpErr,
    /// `IBV_WC_LOC_EEC_OP_ERR` (3), RD only.
    LocEecOpErr,
    /// `IBV_WC_LOC_PROT_ERR` (4).
    LocProtErr,
    /// `IBV_WC_WR_FLUSH_ERR` (5).
    WrFlushErr,
    /// `IBV_WC_MW_BIND_ERR` (6).
    MwBindErr,
    /// `IBV_WC_BAD_RESP_ERR` (7).
    BadRespErr,
    /// `IBV_WC_LOC_ACCESS_ERR` (8).
    LocAccessErr,
    /// `IBV_WC_REM_INV_REQ_ERR` (9).
    RemInvReqErr,
    /// `IBV_WC_REM_ACCESS_ERR` (10).
    RemAccessErr,
    /// `IBV_WC_REM_OP_ERR` (11).
    RemOpErr,
    /// `IBV_WC_RETRY_EXC_ERR` (12).
    RetryExcErr,
    /// `IBV_WC_RNR_RETRY_EXC_ERR` (13).
    RnrRetryExcErr,
    /// `IBV_WC_LOC_RDD_VIOL_ERR` (14), RD only.
    LocRddViolErr,
    /// `IBV_WC_REM_INV_RD_REQ_ERR` (15), RD only.
    RemInvRdReqErr,
    /// `IBV_WC_REM_ABORT_ERR` (16).
    RemAbortErr,
    /// `IBV_WC_INV_EECN_ERR` (17), RD only.
    InvEecnErr,
    /// `IBV_WC_INV_EEC_STATE_ERR` (18), RD only.
    InvEecStateErr,
    /// `IBV_WC_FATAL_ERR` (19).
    FatalErr,
    /// `IBV_WC_RESP_TIMEOUT_ERR` (20).
    RespTimeoutErr,
    /// `IBV_WC_GENERAL_ERR` (21).
    GeneralErr,
    /// `IBV_WC_TM_ERR` (22), tag matching.
    TmErr,
    /// `IBV_WC_TM_RNDV_INCOMPLETE` (23), tag matching.
    TmRndvIncomplete,
}

/// Every status in value order: (status, verbs name, `ibv_wc_status_str` text).
/// Values are the row index (spec completions.md §3; texts from rdma-core
/// `libibverbs/enum_strs.c`).
pub const WC_STATUSES: [(WcStatus, &str, &str); 24] = [
    (WcStatus::Success, "IBV_WC_SUCCESS", "success"),
    (
        WcStatus::LocLenErr,
        "IBV_WC_LOC_LEN_ERR",
        "local length error",
    ),
    (
        WcStatus::LocQpOpErr,
        "IBV_WC_LOC_QP_OP_ERR",
        "local QP operation error",
    ),
    (
        WcStatus::LocEecOpErr,
        "IBV_WC_LOC_EEC_OP_ERR",
        "local EE context operation error",
    ),
    (
        WcStatus::LocProtErr,
        "IBV_WC_LOC_PROT_ERR",
        "local protection error",
    ),
    (
        WcStatus::WrFlushErr,
        "IBV_WC_WR_FLUSH_ERR",
        "Work Request Flushed Error",
    ),
    (
        WcStatus::MwBindErr,
        "IBV_WC_MW_BIND_ERR",
        "memory management operation error",
    ),
    (
        WcStatus::BadRespErr,
        "IBV_WC_BAD_RESP_ERR",
        "bad response error",
    ),
    (
        WcStatus::LocAccessErr,
        "IBV_WC_LOC_ACCESS_ERR",
        "local access error",
    ),
    (
        WcStatus::RemInvReqErr,
        "IBV_WC_REM_INV_REQ_ERR",
        "remote invalid request error",
    ),
    (
        WcStatus::RemAccessErr,
        "IBV_WC_REM_ACCESS_ERR",
        "remote access error",
    ),
    (
        WcStatus::RemOpErr,
        "IBV_WC_REM_OP_ERR",
        "remote operation error",
    ),
    (
        WcStatus::RetryExcErr,
        "IBV_WC_RETRY_EXC_ERR",
        "transport retry counter exceeded",
    ),
    (
        WcStatus::RnrRetryExcErr,
        "IBV_WC_RNR_RETRY_EXC_ERR",
        "RNR retry counter exceeded",
    ),
    (
        WcStatus::LocRddViolErr,
        "IBV_WC_LOC_RDD_VIOL_ERR",
        "local RDD violation error",
    ),
    (
        WcStatus::RemInvRdReqErr,
        "IBV_WC_REM_INV_RD_REQ_ERR",
        "remote invalid RD request",
    ),
    (
        WcStatus::RemAbortErr,
        "IBV_WC_REM_ABORT_ERR",
        "aborted error",
    ),
    (
        WcStatus::InvEecnErr,
        "IBV_WC_INV_EECN_ERR",
        "invalid EE context number",
    ),
    (
        WcStatus::InvEecStateErr,
        "IBV_WC_INV_EEC_STATE_ERR",
        "invalid EE context state",
    ),
    (WcStatus::FatalErr, "IBV_WC_FATAL_ERR", "fatal error"),
    (
        WcStatus::RespTimeoutErr,
        "IBV_WC_RESP_TIMEOUT_ERR",
        "response timeout error",
    ),
    (WcStatus::GeneralErr, "IBV_WC_GENERAL_ERR", "general error"),
    (WcStatus::TmErr, "IBV_WC_TM_ERR", "TM error"),
    (
        WcStatus::TmRndvIncomplete,
        "IBV_WC_TM_RNDV_INCOMPLETE",
        "TM software rendezvous",
    ),
];

impl WcStatus {
    /// The `ibv_wc_status` value.
    pub fn raw(self) -> u32 {
        self as u32
    }

    /// From the `ibv_wc_status` value.
    pub fn from_raw(v: u32) -> Option<WcStatus> {
        WC_STATUSES.get(v as usize).map(|r| r.0)
    }

    /// The verbs name (`"IBV_WC_RETRY_EXC_ERR"`).
    pub fn name(self) -> &'static str {
        WC_STATUSES[self as usize].1
    }

    /// The `ibv_wc_status_str` text (`"transport retry counter exceeded"`).
    pub fn as_str(self) -> &'static str {
        WC_STATUSES[self as usize].2
    }

    /// Anything but `IBV_WC_SUCCESS`.
    pub fn is_error(self) -> bool {
        self != WcStatus::Success
    }
}

impl fmt::Display for WcStatus {
    /// The `ibv_wc_status_str` wording.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `enum ibv_wc_opcode` (the tag-matching and driver values 130..=137 are not produced).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// `IBV_WC_SEND` (0).
    Send,
    /// `IBV_WC_RDMA_WRITE` (1).
    RdmaWrite,
    /// `IBV_WC_RDMA_READ` (2).
    RdmaRead,
    /// `IBV_WC_COMP_SWAP` (3).
    CompSwap,
    /// `IBV_WC_FETCH_ADD` (4).
    FetchAdd,
    /// `IBV_WC_BIND_MW` (5).
    BindMw,
    /// `IBV_WC_LOCAL_INV` (6).
    LocalInv,
    /// `IBV_WC_TSO` (7).
    Tso,
    /// `IBV_WC_FLUSH` (8).
    Flush,
    /// `IBV_WC_ATOMIC_WRITE` (9).
    AtomicWrite,
    /// `IBV_WC_RECV` (128): a receive WQE consumed by an incoming SEND*.
    Recv,
    /// `IBV_WC_RECV_RDMA_WITH_IMM` (129): consumed by an RDMA WRITE with immediate.
    RecvRdmaWithImm,
}

/// Every WC opcode with its value and verbs name (spec completions.md §2).
pub const WC_OPCODES: [(WcOpcode, u32, &str); 12] = [
    (WcOpcode::Send, 0, "IBV_WC_SEND"),
    (WcOpcode::RdmaWrite, 1, "IBV_WC_RDMA_WRITE"),
    (WcOpcode::RdmaRead, 2, "IBV_WC_RDMA_READ"),
    (WcOpcode::CompSwap, 3, "IBV_WC_COMP_SWAP"),
    (WcOpcode::FetchAdd, 4, "IBV_WC_FETCH_ADD"),
    (WcOpcode::BindMw, 5, "IBV_WC_BIND_MW"),
    (WcOpcode::LocalInv, 6, "IBV_WC_LOCAL_INV"),
    (WcOpcode::Tso, 7, "IBV_WC_TSO"),
    (WcOpcode::Flush, 8, "IBV_WC_FLUSH"),
    (WcOpcode::AtomicWrite, 9, "IBV_WC_ATOMIC_WRITE"),
    (WcOpcode::Recv, 128, "IBV_WC_RECV"),
    (WcOpcode::RecvRdmaWithImm, 129, "IBV_WC_RECV_RDMA_WITH_IMM"),
];

impl WcOpcode {
    fn row(self) -> &'static (WcOpcode, u32, &'static str) {
        // One row per variant (test `wc_opcodes_match_spec`).
        let i = WC_OPCODES.iter().position(|r| r.0 == self).unwrap_or(0);
        &WC_OPCODES[i]
    }

    /// The `ibv_wc_opcode` value.
    pub fn raw(self) -> u32 {
        self.row().1
    }

    /// From the `ibv_wc_opcode` value.
    pub fn from_raw(v: u32) -> Option<WcOpcode> {
        WC_OPCODES.iter().find(|r| r.1 == v).map(|r| r.0)
    }

    /// The verbs name (`"IBV_WC_RECV"`).
    pub fn name(self) -> &'static str {
        self.row().2
    }

    /// A receive-side completion (`opcode & IBV_WC_RECV`).
    pub fn is_recv(self) -> bool {
        self.raw() & 128 != 0
    }
}

impl fmt::Display for WcOpcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The WC opcode of a send WR's completion (spec completions.md §2, "produced
/// by"; rxe `wr_to_wc_opcode`). DRIVER1 has none.
pub const WR_TO_WC: [(WrOpcode, WcOpcode); 13] = [
    (WrOpcode::Send, WcOpcode::Send),
    (WrOpcode::SendWithImm, WcOpcode::Send),
    (WrOpcode::SendWithInv, WcOpcode::Send),
    (WrOpcode::RdmaWrite, WcOpcode::RdmaWrite),
    (WrOpcode::RdmaWriteWithImm, WcOpcode::RdmaWrite),
    (WrOpcode::RdmaRead, WcOpcode::RdmaRead),
    (WrOpcode::AtomicCmpAndSwp, WcOpcode::CompSwap),
    (WrOpcode::AtomicFetchAndAdd, WcOpcode::FetchAdd),
    (WrOpcode::BindMw, WcOpcode::BindMw),
    (WrOpcode::LocalInv, WcOpcode::LocalInv),
    (WrOpcode::Tso, WcOpcode::Tso),
    (WrOpcode::Flush, WcOpcode::Flush),
    (WrOpcode::AtomicWrite, WcOpcode::AtomicWrite),
];

/// The WC opcode for a completed send WR; `None` for DRIVER1.
pub fn wc_opcode_for(op: WrOpcode) -> Option<WcOpcode> {
    WR_TO_WC.iter().find(|r| r.0 == op).map(|r| r.1)
}

/// `enum ibv_wc_flags` bits (spec completions.md §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WcFlags(pub u32);

impl WcFlags {
    /// `IBV_WC_GRH`: the first 40 bytes of a UD receive buffer hold the GRH area.
    pub const GRH: WcFlags = WcFlags(1);
    /// `IBV_WC_WITH_IMM`: `imm_data` is valid.
    pub const WITH_IMM: WcFlags = WcFlags(1 << 1);
    /// `IBV_WC_IP_CSUM_OK`: checksum-offload devices only; never set by softverbs.
    pub const IP_CSUM_OK: WcFlags = WcFlags(1 << 2);
    /// `IBV_WC_WITH_INV`: `invalidated_rkey` is valid (not produced: no SEND_WITH_INV).
    pub const WITH_INV: WcFlags = WcFlags(1 << 3);
    /// `IBV_WC_TM_SYNC_REQ` (tag matching).
    pub const TM_SYNC_REQ: WcFlags = WcFlags(1 << 4);
    /// `IBV_WC_TM_MATCH` (tag matching).
    pub const TM_MATCH: WcFlags = WcFlags(1 << 5);
    /// `IBV_WC_TM_DATA_VALID` (tag matching).
    pub const TM_DATA_VALID: WcFlags = WcFlags(1 << 6);
    /// No flag.
    pub const NONE: WcFlags = WcFlags(0);

    /// True if every bit of `other` is set.
    pub const fn contains(self, other: WcFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for WcFlags {
    type Output = WcFlags;
    fn bitor(self, rhs: WcFlags) -> WcFlags {
        WcFlags(self.0 | rhs.0)
    }
}

/// `struct ibv_wc`, field for field. Which fields are meaningful depends on
/// `status` and `opcode` (spec completions.md §1): on error only `wr_id`,
/// `status`, `qp_num` and `vendor_err`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The `wr_id` of the completed WR. Always valid.
    pub wr_id: u64,
    /// Outcome. Always valid.
    pub status: WcStatus,
    /// The operation; valid only on success.
    pub opcode: WcOpcode,
    /// Device-specific syndrome; softverbs reports 0.
    pub vendor_err: u32,
    /// Bytes (receive: written incl. the 40-byte GRH area on UD; READ: read; atomics: 8).
    pub byte_len: u32,
    /// Immediate data (network order) when `wc_flags` has `WITH_IMM`. The C
    /// union's other member, `invalidated_rkey`, is never produced.
    pub imm_data: ImmData,
    /// Local QPN (for SRQ receives: the QP that consumed the WQE). Always valid.
    pub qp_num: u32,
    /// UD receive: the source QPN from the DETH.
    pub src_qp: u32,
    /// `enum ibv_wc_flags` bits.
    pub wc_flags: WcFlags,
    /// GSI receives only; 0.
    pub pkey_index: u16,
    /// InfiniBand only; 0 on RoCE.
    pub slid: u16,
    /// InfiniBand: the service level. RoCE UD receives: the packet type as
    /// ConnectX reports it (0xa IPv4, 0x9 IPv6: bit 3 = UDP/RoCE v2, bits 2..0 =
    /// L3 header), which UCX reads; otherwise 0.
    pub sl: u8,
    /// InfiniBand only; 0 on RoCE.
    pub dlid_path_bits: u8,
    /// When the device generated the completion, on the driver's clock
    /// (nanoseconds; [`crate::Engine::set_now`]): what
    /// `ibv_wc_read_completion_ts` reports. 0 where no clock drives the engine.
    pub timestamp_ns: u64,
}

impl WorkCompletion {
    /// An error completion: only `wr_id`, `status`, `qp_num` (and `vendor_err`
    /// = 0) are meaningful; the rest is zero (spec completions.md §1,
    /// `ibv_poll_cq(3)`). `opcode` records what the WR was, for the engine.
    pub fn error(wr_id: u64, qp_num: u32, opcode: WcOpcode, status: WcStatus) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status,
            opcode,
            vendor_err: 0,
            byte_len: 0,
            imm_data: ImmData::default(),
            qp_num,
            src_qp: 0,
            wc_flags: WcFlags::NONE,
            pkey_index: 0,
            slid: 0,
            sl: 0,
            dlid_path_bits: 0,
            timestamp_ns: 0,
        }
    }

    /// The `IBV_WC_WR_FLUSH_ERR` completion of a WR outstanding or posted while
    /// the QP is in ERR (or, for sends, SQE). Generated even for unsignaled send
    /// WRs (spec qp-state-machine.md §6.2, completions.md §5).
    pub fn flush(wr_id: u64, qp_num: u32, opcode: WcOpcode) -> WorkCompletion {
        WorkCompletion::error(wr_id, qp_num, opcode, WcStatus::WrFlushErr)
    }

    /// A successful send-side completion of `op` with `byte_len` bytes; `None`
    /// for an opcode that has no WC opcode (DRIVER1).
    pub fn send_success(
        wr_id: u64,
        qp_num: u32,
        op: WrOpcode,
        byte_len: u32,
    ) -> Option<WorkCompletion> {
        let opcode = wc_opcode_for(op)?;
        Some(WorkCompletion {
            byte_len,
            status: WcStatus::Success,
            ..WorkCompletion::error(wr_id, qp_num, opcode, WcStatus::Success)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec_md::{plain, table_after};
    use crate::wr::WR_OPCODES;

    const COMPLETIONS: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../spec/completions.md"
    ));

    #[test]
    fn statuses_are_in_value_order() {
        for (i, r) in WC_STATUSES.iter().enumerate() {
            assert_eq!(r.0 as usize, i, "{}", r.1);
            assert_eq!(WcStatus::from_raw(i as u32), Some(r.0));
            assert_eq!(r.0.raw(), i as u32);
        }
        assert_eq!(WcStatus::from_raw(24), None);
    }

    /// completions.md §3, row by row (the "22, 23" row names two values).
    #[test]
    fn statuses_match_spec() {
        let rows = table_after(COMPLETIONS, "## 3. `enum ibv_wc_status`");
        let mut seen = 0;
        for r in rows {
            let values: Vec<u32> = r[0]
                .split(',')
                .map(|v| v.trim().parse().expect("value"))
                .collect();
            let names: Vec<String> = plain(&r[1])
                .split(',')
                .map(|n| n.trim().to_string())
                .collect();
            assert_eq!(values.len(), names.len(), "{r:?}");
            for (v, n) in values.iter().zip(&names) {
                assert_eq!(WcStatus::from_raw(*v).map(WcStatus::name), Some(n.as_str()));
                seen += 1;
            }
        }
        assert_eq!(seen, WC_STATUSES.len());
    }

    #[test]
    fn status_display_is_ibv_wc_status_str() {
        assert_eq!(
            WcStatus::RetryExcErr.to_string(),
            "transport retry counter exceeded"
        );
        assert_eq!(
            WcStatus::WrFlushErr.to_string(),
            "Work Request Flushed Error"
        );
        assert_eq!(WcStatus::Success.to_string(), "success");
        assert!(!WcStatus::Success.is_error() && WcStatus::GeneralErr.is_error());
    }

    /// completions.md §2: values and names; 130–137 are the unproduced TM/driver range.
    #[test]
    fn wc_opcodes_match_spec() {
        let rows = table_after(COMPLETIONS, "## 2. `enum ibv_wc_opcode`");
        let mut seen = 0;
        for r in rows {
            let Ok(v) = r[0].parse::<u32>() else {
                assert!(r[0].starts_with("130"), "{r:?}");
                continue;
            };
            let op = WcOpcode::from_raw(v).unwrap_or_else(|| panic!("{r:?}"));
            assert_eq!(op.name(), plain(&r[1]));
            assert_eq!(op.raw(), v);
            seen += 1;
        }
        assert_eq!(seen, WC_OPCODES.len());
        assert!(
            WcOpcode::Recv.is_recv()
                && WcOpcode::RecvRdmaWithImm.is_recv()
                && !WcOpcode::AtomicWrite.is_recv()
        );
    }

    /// completions.md §2 "produced by" column: every `IBV_WR_*` named there maps to that row.
    #[test]
    fn wr_to_wc_matches_spec() {
        let rows = table_after(COMPLETIONS, "## 2. `enum ibv_wc_opcode`");
        let mut seen = 0;
        for r in rows
            .iter()
            .filter(|r| r[0].parse::<u32>().is_ok_and(|v| v < 128))
        {
            let wc = plain(&r[1]);
            for word in plain(&r[2])
                .split([',', ' '])
                .filter(|w| w.starts_with("IBV_WR_"))
            {
                let wr = WR_OPCODES
                    .iter()
                    .find(|o| o.2 == word)
                    .unwrap_or_else(|| panic!("{word}"))
                    .0;
                assert_eq!(
                    wc_opcode_for(wr).map(WcOpcode::name),
                    Some(wc.as_str()),
                    "{word}"
                );
                seen += 1;
            }
        }
        assert_eq!(seen, WR_TO_WC.len());
        assert_eq!(wc_opcode_for(WrOpcode::Driver1), None);
    }

    /// completions.md §4: bit positions and names.
    #[test]
    fn flags_match_spec() {
        let ours = [
            ("IBV_WC_GRH", WcFlags::GRH),
            ("IBV_WC_WITH_IMM", WcFlags::WITH_IMM),
            ("IBV_WC_IP_CSUM_OK", WcFlags::IP_CSUM_OK),
            ("IBV_WC_WITH_INV", WcFlags::WITH_INV),
        ];
        let rows = table_after(COMPLETIONS, "## 4. `wc_flags`");
        for r in &rows {
            let name = plain(&r[1]);
            let bit = r[0].trim_start_matches("1<<");
            if name == "IBV_WC_TM_*" {
                assert_eq!(bit, "4..6");
                assert_eq!(
                    WcFlags::TM_SYNC_REQ | WcFlags::TM_MATCH | WcFlags::TM_DATA_VALID,
                    WcFlags(0b111 << 4)
                );
                continue;
            }
            let shift: u32 = bit.parse().expect("bit");
            let f = ours
                .iter()
                .find(|o| o.0 == name)
                .unwrap_or_else(|| panic!("{name}"))
                .1;
            assert_eq!(f, WcFlags(1 << shift), "{name}");
        }
        assert_eq!(rows.len(), 5);
    }

    /// Error/flush completions carry only the fields valid on error (completions.md §1).
    #[test]
    fn flush_completion_fields() {
        let wc = WorkCompletion::flush(42, 0x11, WcOpcode::Recv);
        assert_eq!(
            (wc.wr_id, wc.status, wc.qp_num, wc.vendor_err),
            (42, WcStatus::WrFlushErr, 0x11, 0)
        );
        assert_eq!(
            (wc.byte_len, wc.src_qp, wc.wc_flags, wc.imm_data),
            (0, 0, WcFlags::NONE, ImmData::default())
        );
        assert_eq!(
            (wc.pkey_index, wc.slid, wc.sl, wc.dlid_path_bits),
            (0, 0, 0, 0)
        );
        let text = plain(COMPLETIONS);
        assert!(text
            .contains("On error completions only wr_id, status, qp_num and vendor_err are\nvalid"));
    }

    #[test]
    fn send_success_maps_opcode() {
        let wc = WorkCompletion::send_success(1, 2, WrOpcode::RdmaWriteWithImm, 100)
            .expect("has wc opcode");
        assert_eq!(
            (wc.opcode, wc.status, wc.byte_len),
            (WcOpcode::RdmaWrite, WcStatus::Success, 100)
        );
        assert_eq!(
            WorkCompletion::send_success(1, 2, WrOpcode::Driver1, 0),
            None
        );
    }
}

//! Receive work queues' states and the refusals of the RSS verbs
//! (spec/raw-packet.md §6): the ground floor of rss.rs, imported by the
//! crate's error type. Imports nothing of the crate.

use proto::Errno;

/// The most entries of an indirection table: `2^MAX_LOG_IND_TBL_SIZE`.
pub const MAX_LOG_IND_TBL_SIZE: u32 = 8;
/// The longest hash key (Toeplitz keys are 40 bytes on NICs).
pub const MAX_HASH_KEY_LEN: usize = 40;

/// Why an RSS verb was refused. [`RssError::errno`] is what the verb reports.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RssError {
    /// `ibv_modify_wq` to a state not reachable from the current one.
    #[error("modify_wq: {from:?} -> {to:?} is not a work-queue transition (RESET->RDY, RDY->ERR, RDY->RESET, ERR->RESET)")]
    Transition {
        /// Current state.
        from: WqState,
        /// Asked for.
        to: WqState,
    },
    /// `IBV_WQ_ATTR_CURR_STATE` named a state the WQ is not in.
    #[error("modify_wq: curr_wq_state is {given:?} but the WQ is {actual:?}")]
    CurrentState {
        /// Given.
        given: WqState,
        /// Actual.
        actual: WqState,
    },
    /// The WQ is in an indirection table.
    #[error("destroy_wq: the WQ is in {tables} indirection table(s); destroy them first")]
    WqInTable {
        /// Tables holding it.
        tables: usize,
    },
    /// The table is used by an RSS QP.
    #[error("destroy_rwq_ind_table: {qps} RSS QP(s) use the table; destroy them first")]
    TableInUse {
        /// QPs using it.
        qps: usize,
    },
    /// A table's size.
    #[error("create_rwq_ind_table: log_ind_tbl_size {log} with {given} WQs: the table holds 2^log WQs, log <= {MAX_LOG_IND_TBL_SIZE}")]
    TableSize {
        /// `log_ind_tbl_size`.
        log: u32,
        /// WQs given.
        given: usize,
    },
    /// A table's WQs belong to another context.
    #[error("create_rwq_ind_table: a WQ belongs to another context")]
    ForeignWq,
    /// Only `IBV_RX_HASH_FUNC_TOEPLITZ`.
    #[error("rx_hash_function {function:#x}: only IBV_RX_HASH_FUNC_TOEPLITZ is offered")]
    HashFunction {
        /// Given.
        function: u8,
    },
    /// Hash fields beyond the IPv4/IPv6 addresses and TCP/UDP ports.
    #[error("rx_hash_fields_mask {fields:#x}: only the IPv4/IPv6 addresses and TCP/UDP ports (0xff) are offered")]
    HashFields {
        /// Given.
        fields: u64,
    },
    /// The key's length.
    #[error("rx_hash_key_len {len}: a Toeplitz key is 1..={MAX_HASH_KEY_LEN} bytes")]
    KeyLength {
        /// Given.
        len: usize,
    },
}

impl RssError {
    /// The errno of the refusal.
    pub fn errno(&self) -> Errno {
        match self {
            RssError::WqInTable { .. } | RssError::TableInUse { .. } => Errno::EBUSY,
            RssError::HashFunction { .. } | RssError::HashFields { .. } => Errno::EOPNOTSUPP,
            _ => Errno::EINVAL,
        }
    }
}

/// `enum ibv_wq_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WqState {
    /// `IBV_WQS_RESET`: receives nothing; WQEs may not be posted.
    Reset,
    /// `IBV_WQS_RDY`: receives.
    Rdy,
    /// `IBV_WQS_ERR`: outstanding WQEs flushed.
    Err,
}

impl WqState {
    /// From the C value (RESET 0, RDY 1, ERR 2).
    pub fn from_raw(v: u32) -> Option<WqState> {
        Some(match v {
            0 => WqState::Reset,
            1 => WqState::Rdy,
            2 => WqState::Err,
            _ => return None,
        })
    }

    /// The C value.
    pub fn raw(self) -> u32 {
        self as u32
    }
}

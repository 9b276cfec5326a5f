//! Work requests and the rules for posting them.
//!
//! This module owns the verbs work-request types ([`SendWr`], [`RecvWr`], [`Sge`],
//! [`WrOpcode`], [`SendFlags`], [`ImmData`]), the WR-opcode × QP-type matrix
//! ([`OPCODE_MATRIX`]), the per-state posting table ([`POST_TABLE`]) and the
//! pure checks that `ibv_post_send` / `ibv_post_recv` / `ibv_post_srq_recv`
//! run on each WR before it is queued ([`check_post_send`], [`check_post_recv`],
//! [`check_post_srq_recv`]).
//!
//! Promises:
//! - Every refusal is a [`PostError`] that says in words what was wrong and maps
//!   to the errno Linux returns in the same case ([`PostError::errno`]); the
//!   facts are `spec/qp-state-machine.md` §7 (both tables) and the
//!   `ibv_post_send(3)` opcode table. A refused WR changes nothing.
//! - No allocation per post in steady state: a WR *borrows* its scatter/gather
//!   list (`&[Sge]`, as `ibv_send_wr` points at its `sg_list`). The engine
//!   copies an accepted WR into a WQE its queue recycles (`qp::wqe`: retired
//!   WQEs keep their gather list and inline buffer, up to the queue's depth),
//!   so once a queue has been as full as it gets, posting allocates nothing;
//!   the first fill of a queue, and a gather list longer than any before on
//!   that slot, grow buffers (amortized). The safe API's inline gather reuses
//!   an engine buffer (`Engine::post_send_checked`).
//! - `IBV_SEND_INLINE` data is gathered from the SGE addresses by the memory
//!   module at post time (its L_Key is not checked, `ibv_post_send(3)`); this
//!   module checks only its length and opcode.
#![forbid(unsafe_code)]

mod check;
mod types;

pub use check::*;
pub use types::*;

#[cfg(test)]
mod tests;

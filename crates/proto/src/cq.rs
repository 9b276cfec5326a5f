//! Completion queues: creation rules.

use crate::device::DeviceAttr;
use crate::engine::CtxHandle;
use crate::error::{Error, RangeError};

/// Number of completion vectors (`num_comp_vectors`).
pub const NUM_COMP_VECTORS: u32 = 1;

/// A completion queue.
#[derive(Debug, Clone)]
pub struct Cq {
    /// Owning context.
    pub ctx: CtxHandle,
    /// Capacity in completions.
    pub cqe: u32,
    /// Completion vector.
    pub comp_vector: u32,
}

/// Checks `ibv_create_cq` arguments; returns the capacity granted (≥ the request).
pub fn check_create(cqe: i32, comp_vector: i32, dev: &DeviceAttr) -> Result<u32, Error> {
    if cqe < 1 || cqe as u64 > u64::from(dev.max_cqe) {
        return Err(RangeError {
            what: "cqe",
            value: cqe as i64 as u64,
            min: 1,
            max: dev.max_cqe.into(),
            note: "; device limit max_cqe",
        }
        .into());
    }
    if comp_vector < 0 || comp_vector as u32 >= NUM_COMP_VECTORS {
        return Err(Error::invalid(format!(
            "comp_vector {comp_vector} does not exist (num_comp_vectors = {NUM_COMP_VECTORS})"
        )));
    }
    Ok(cqe as u32)
}

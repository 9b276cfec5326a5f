//! The completion-queue entry as it sits in a CQ ring: a [`WorkCompletion`]
//! packed into six 64-bit words (a 64-byte, cache-line-aligned slot, like a
//! hardware CQE), so the ring ([`crate::cq`]) can store it in atomics and
//! be shared by the engine and polling threads without `unsafe`.
//!
//! Layout (word: bits):
//! ```text
//! 0: wr_id
//! 1: status 0..8 | opcode 8..16 | sl 16..24 | dlid_path_bits 24..32 | vendor_err 32..64
//! 2: byte_len 0..32 | imm_data (wire bytes, native u32) 32..64
//! 3: qp_num 0..32 | src_qp 32..64
//! 4: wc_flags 0..32 | pkey_index 32..48 | slid 48..64
//! 5: timestamp_ns
//! ```
//! `decode(encode(wc)) == Some(wc)` for every completion (property test).
#![forbid(unsafe_code)]

use crate::wc::{WcFlags, WcOpcode, WcStatus, WorkCompletion};
use crate::wr::ImmData;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Words of a packed completion.
pub const CQE_WORDS: usize = 6;

/// A completion packed into words ([`encode`]).
pub type CqeWords = [u64; CQE_WORDS];

/// One slot of a CQ ring. The ring's indices order the accesses (a Release
/// store of the tail after the words are written, an Acquire load before they
/// are read), so the words themselves are read and written Relaxed.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct CqeSlot([AtomicU64; CQE_WORDS]);

impl CqeSlot {
    /// Stores a packed completion.
    pub fn store(&self, w: &CqeWords) {
        for (slot, v) in self.0.iter().zip(w) {
            slot.store(*v, Relaxed);
        }
    }

    /// Loads the packed completion.
    pub fn load(&self) -> CqeWords {
        std::array::from_fn(|i| self.0[i].load(Relaxed))
    }

    /// The `qp_num` of the stored completion (purge on RESET).
    pub fn qp_num(&self) -> u32 {
        self.0[3].load(Relaxed) as u32
    }
}

/// Packs a completion.
pub fn encode(wc: &WorkCompletion) -> CqeWords {
    [
        wc.wr_id,
        u64::from(wc.status.raw() as u8)
            | u64::from(wc.opcode.raw() as u8) << 8
            | u64::from(wc.sl) << 16
            | u64::from(wc.dlid_path_bits) << 24
            | u64::from(wc.vendor_err) << 32,
        u64::from(wc.byte_len) | u64::from(u32::from_ne_bytes(wc.imm_data.0)) << 32,
        u64::from(wc.qp_num) | u64::from(wc.src_qp) << 32,
        u64::from(wc.wc_flags.0) | u64::from(wc.pkey_index) << 32 | u64::from(wc.slid) << 48,
        wc.timestamp_ns,
    ]
}

/// Unpacks a completion; `None` if the status or opcode byte names none
/// (never for what [`encode`] wrote).
pub fn decode(w: &CqeWords) -> Option<WorkCompletion> {
    Some(WorkCompletion {
        wr_id: w[0],
        status: WcStatus::from_raw(u32::from(w[1] as u8))?,
        opcode: WcOpcode::from_raw(u32::from((w[1] >> 8) as u8))?,
        sl: (w[1] >> 16) as u8,
        dlid_path_bits: (w[1] >> 24) as u8,
        vendor_err: (w[1] >> 32) as u32,
        byte_len: w[2] as u32,
        imm_data: ImmData(((w[2] >> 32) as u32).to_ne_bytes()),
        qp_num: w[3] as u32,
        src_qp: (w[3] >> 32) as u32,
        wc_flags: WcFlags(w[4] as u32),
        pkey_index: (w[4] >> 32) as u16,
        slid: (w[4] >> 48) as u16,
        timestamp_ns: w[5],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wc::{WC_OPCODES, WC_STATUSES};
    use proptest::prelude::*;

    fn any_wc() -> impl Strategy<Value = WorkCompletion> {
        (
            (any::<u64>(), 0..WC_STATUSES.len(), 0..WC_OPCODES.len()),
            (any::<u32>(), any::<u32>(), any::<[u8; 4]>(), any::<u32>()),
            (any::<u32>(), any::<u32>(), any::<u16>(), any::<u16>()),
            (any::<u8>(), any::<u8>(), any::<u64>()),
        )
            .prop_map(
                |((wr_id, s, o), (ve, bl, imm, qpn), (src, fl, pk, slid), (sl, dpb, ts))| {
                    WorkCompletion {
                        wr_id,
                        status: WC_STATUSES[s].0,
                        opcode: WC_OPCODES[o].0,
                        vendor_err: ve,
                        byte_len: bl,
                        imm_data: ImmData(imm),
                        qp_num: qpn,
                        src_qp: src,
                        wc_flags: WcFlags(fl),
                        pkey_index: pk,
                        slid,
                        sl,
                        dlid_path_bits: dpb,
                        timestamp_ns: ts,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn encode_decode_round_trips(wc in any_wc()) {
            prop_assert_eq!(decode(&encode(&wc)), Some(wc));
            let slot = CqeSlot::default();
            slot.store(&encode(&wc));
            prop_assert_eq!(decode(&slot.load()), Some(wc));
            prop_assert_eq!(slot.qp_num(), wc.qp_num);
        }

        #[test]
        fn decode_never_panics(w in any::<[u64; CQE_WORDS]>()) {
            if let Some(wc) = decode(&w) {
                prop_assert_eq!(encode(&wc), w);
            }
        }
    }

    #[test]
    fn a_slot_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<CqeSlot>(), 64);
        assert_eq!(std::mem::align_of::<CqeSlot>(), 64);
    }
}

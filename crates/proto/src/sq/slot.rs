//! A posted WR's fixed part as words: what the poster writes into a ring
//! slot and the engine reads back, with plain (relaxed) atomic stores and
//! loads. The ring's `tail` (stored with Release after the words, loaded
//! with Acquire before them) orders them, and only the poster holding the
//! posting lock writes a slot, only while the engine cannot read it: no lock
//! per slot.
//!
//! Layout ([`WORDS`] words a slot; a post writes only those its WR uses):
//! - 0: `wr_id`;
//! - 1: opcode (bits 0–7), target kind (8–11), a UD destination follows
//!   (12), inline bytes follow (13), XRC SRQ number (32–55);
//! - 2: immediate data (0–31, as `ImmData`'s bytes read little-endian),
//!   inline byte count (32–63);
//! - 3: SGE count (0–31), flags (32–63);
//! - 4–8: the target, by kind (below);
//! - 9–12: the UD destination: the GID (two words), local GID index,
//!   hop limit, traffic class (bits 0–23), remote QPN (0–31) and Q_Key
//!   (32–63).
#![forbid(unsafe_code)]

use super::{Slot, UdDest};
use crate::handle::{AhHandle, MwHandle};
use crate::mr::mw::BindRequest;
use crate::types::Gid;
use crate::wr::{
    AtomicTarget, FlushTarget, ImmData, RdmaTarget, SendFlags, UdTarget, WrOpcode, WrTarget,
};

const TARGET: usize = 4;
const UD: usize = 9;
const HAS_UD: u64 = 1 << 12;
const HAS_INLINE: u64 = 1 << 13;

/// The target's kind number (word 1, bits 8–11) and its words.
fn target_words(t: &WrTarget) -> (u64, [u64; 5]) {
    match *t {
        WrTarget::None => (0, [0; 5]),
        WrTarget::Rdma(r) => (1, [r.remote_addr, r.rkey.into(), 0, 0, 0]),
        WrTarget::Atomic(a) => (2, [a.remote_addr, a.compare_add, a.swap, a.rkey.into(), 0]),
        WrTarget::Ud(u) => (3, [u.ah.raw(), lo_hi(u.remote_qpn, u.remote_qkey), 0, 0, 0]),
        WrTarget::Bind(b) => (
            4,
            [
                b.mw.raw(),
                lo_hi(b.rkey, b.access),
                b.mr_lkey.map_or(0, |k| 1 << 32 | u64::from(k)),
                b.addr,
                b.length,
            ],
        ),
        WrTarget::Invalidate { rkey } => (5, [rkey.into(), 0, 0, 0, 0]),
        WrTarget::Flush(f) => (
            6,
            [
                f.remote_addr,
                lo_hi(f.rkey, f.len),
                u64::from(f.placement) | u64::from(f.level) << 8,
                0,
                0,
            ],
        ),
    }
}

/// How many target words a kind uses.
fn target_len(kind: u64) -> usize {
    [0, 2, 4, 2, 5, 1, 3]
        .get(kind as usize)
        .copied()
        .unwrap_or(0)
}

fn lo_hi(lo: u32, hi: u32) -> u64 {
    u64::from(lo) | u64::from(hi) << 32
}

fn lo(w: u64) -> u32 {
    w as u32
}

fn hi(w: u64) -> u32 {
    (w >> 32) as u32
}

impl Slot {
    /// Words of one slot.
    pub(super) const WORDS: usize = 13;

    /// Writes the slot as words: `put(i, word)` for each word it uses.
    pub(super) fn encode(&self, mut put: impl FnMut(usize, u64)) {
        let s = self;
        let (kind, t) = target_words(&s.target);
        let mut head = u64::from(s.opcode.raw() & 0xff)
            | kind << 8
            | u64::from(s.xrc_srqn & crate::types::MASK_24) << 32;
        if s.ud.is_some() {
            head |= HAS_UD;
        }
        if s.ninline.is_some() {
            head |= HAS_INLINE;
        }
        put(0, s.wr_id);
        put(1, head);
        put(
            2,
            lo_hi(u32::from_le_bytes(s.imm.0), s.ninline.unwrap_or(0)),
        );
        put(3, lo_hi(s.nsge, s.flags.0));
        for (k, w) in t.iter().take(target_len(kind)).enumerate() {
            put(TARGET + k, *w);
        }
        if let Some(u) = s.ud {
            let g = u.dgid.0;
            put(
                UD,
                u64::from_le_bytes(g[..8].try_into().unwrap_or_default()),
            );
            put(
                UD + 1,
                u64::from_le_bytes(g[8..].try_into().unwrap_or_default()),
            );
            put(
                UD + 2,
                u64::from(u.sgid_index)
                    | u64::from(u.hop_limit) << 8
                    | u64::from(u.traffic_class) << 16,
            );
            put(UD + 3, lo_hi(u.remote_qpn, u.qkey));
        }
    }

    /// Reads a slot back from its words (`get(i)`), reading only those
    /// [`Slot::encode`] wrote.
    pub(super) fn decode(get: impl Fn(usize) -> u64) -> Slot {
        let head = get(1);
        let kind = (head >> 8) & 0xf;
        let mut t = [0u64; 5];
        for (k, w) in t.iter_mut().take(target_len(kind)).enumerate() {
            *w = get(TARGET + k);
        }
        let target = match kind {
            1 => WrTarget::Rdma(RdmaTarget {
                remote_addr: t[0],
                rkey: lo(t[1]),
            }),
            2 => WrTarget::Atomic(AtomicTarget {
                remote_addr: t[0],
                compare_add: t[1],
                swap: t[2],
                rkey: lo(t[3]),
            }),
            3 => WrTarget::Ud(UdTarget {
                ah: AhHandle::from_raw(t[0]),
                remote_qpn: lo(t[1]),
                remote_qkey: hi(t[1]),
            }),
            4 => WrTarget::Bind(BindRequest {
                mw: MwHandle::from_raw(t[0]),
                rkey: lo(t[1]),
                access: hi(t[1]),
                mr_lkey: (t[2] >> 32 != 0).then_some(lo(t[2])),
                addr: t[3],
                length: t[4],
            }),
            5 => WrTarget::Invalidate { rkey: lo(t[0]) },
            6 => WrTarget::Flush(FlushTarget {
                remote_addr: t[0],
                rkey: lo(t[1]),
                len: hi(t[1]),
                placement: t[2] as u8,
                level: (t[2] >> 8) as u8,
            }),
            _ => WrTarget::None,
        };
        let ud = (head & HAS_UD != 0).then(|| {
            let mut g = [0u8; 16];
            g[..8].copy_from_slice(&get(UD).to_le_bytes());
            g[8..].copy_from_slice(&get(UD + 1).to_le_bytes());
            let w = get(UD + 2);
            let q = get(UD + 3);
            UdDest {
                dgid: Gid(g),
                sgid_index: w as u8,
                hop_limit: (w >> 8) as u8,
                traffic_class: (w >> 16) as u8,
                remote_qpn: lo(q),
                qkey: hi(q),
            }
        });
        let imm_inline = get(2);
        let counts = get(3);
        Slot {
            wr_id: get(0),
            // Written from a WrOpcode: its raw value is always one of the table's.
            opcode: WrOpcode::from_raw((head & 0xff) as u32).unwrap_or(WrOpcode::Send),
            imm: ImmData(lo(imm_inline).to_le_bytes()),
            target,
            ud,
            xrc_srqn: (head >> 32) as u32 & crate::types::MASK_24,
            nsge: lo(counts),
            flags: SendFlags(hi(counts)),
            ninline: (head & HAS_INLINE != 0).then_some(hi(imm_inline)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cell::Cell;

    fn arb_target() -> impl Strategy<Value = WrTarget> {
        prop_oneof![
            Just(WrTarget::None),
            (any::<u64>(), any::<u32>())
                .prop_map(|(remote_addr, rkey)| WrTarget::Rdma(RdmaTarget { remote_addr, rkey })),
            any::<(u64, u64, u64, u32)>().prop_map(|(remote_addr, compare_add, swap, rkey)| {
                WrTarget::Atomic(AtomicTarget {
                    remote_addr,
                    compare_add,
                    swap,
                    rkey,
                })
            }),
            any::<(u64, u32, u32)>().prop_map(|(ah, remote_qpn, remote_qkey)| {
                WrTarget::Ud(UdTarget {
                    ah: AhHandle::from_raw(ah),
                    remote_qpn,
                    remote_qkey,
                })
            }),
            any::<(u64, u32, u32, Option<u32>, u64, u64)>().prop_map(
                |(mw, rkey, access, mr_lkey, addr, length)| {
                    WrTarget::Bind(BindRequest {
                        mw: MwHandle::from_raw(mw),
                        rkey,
                        mr_lkey,
                        addr,
                        length,
                        access,
                    })
                }
            ),
            any::<u32>().prop_map(|rkey| WrTarget::Invalidate { rkey }),
            any::<(u64, u32, u32, u8, u8)>().prop_map(
                |(remote_addr, rkey, len, placement, level)| {
                    WrTarget::Flush(FlushTarget {
                        remote_addr,
                        rkey,
                        len,
                        placement,
                        level,
                    })
                }
            ),
        ]
    }

    fn arb_ud() -> impl Strategy<Value = Option<UdDest>> {
        proptest::option::of(any::<([u8; 16], u8, u8, u8, u32, u32)>().prop_map(
            |(g, sgid_index, hop_limit, traffic_class, remote_qpn, qkey)| UdDest {
                dgid: Gid(g),
                sgid_index,
                hop_limit,
                traffic_class,
                remote_qpn,
                qkey,
            },
        ))
    }

    fn arb_slot() -> impl Strategy<Value = Slot> {
        (
            any::<u64>(),
            prop::sample::select(crate::wr::WR_OPCODES.map(|r| r.0).to_vec()),
            any::<u32>(),
            any::<[u8; 4]>(),
            arb_target(),
            arb_ud(),
            0u32..=crate::types::MASK_24,
            any::<u32>(),
            proptest::option::of(any::<u32>()),
        )
            .prop_map(
                |(wr_id, opcode, flags, imm, target, ud, xrc_srqn, nsge, ninline)| Slot {
                    wr_id,
                    opcode,
                    flags: SendFlags(flags),
                    imm: ImmData(imm),
                    target,
                    ud,
                    xrc_srqn,
                    nsge,
                    ninline,
                },
            )
    }

    proptest! {
        /// Every slot reads back as it was written, over words that held
        /// another slot before (a reused ring slot): nothing of the older
        /// one shows through.
        #[test]
        fn a_slot_reads_back_as_written(s in arb_slot(), before in arb_slot()) {
            let words: Vec<Cell<u64>> = (0..Slot::WORDS).map(|_| Cell::new(0)).collect();
            before.encode(|i, w| words[i].set(w));
            s.encode(|i, w| words[i].set(w));
            let back = Slot::decode(|i| words[i].get());
            prop_assert_eq!(back, s);
        }

        /// A decode reads only the words its encode wrote.
        #[test]
        fn a_slot_reads_only_what_it_wrote(s in arb_slot()) {
            let words: Vec<Cell<Option<u64>>> = (0..Slot::WORDS).map(|_| Cell::new(None)).collect();
            s.encode(|i, w| words[i].set(Some(w)));
            let back = Slot::decode(|i| words[i].get().unwrap_or_else(|| panic!("word {i} read, never written")));
            prop_assert_eq!(back, s);
        }
    }
}

//! The fault model: per datagram, one [`Decision`] drawn from a seeded [`Rng`].

use crate::rng::Rng;
use wire::icrc::BTH_MASKED_BYTE;

/// How likely each fault is, per datagram (each in `0.0..=1.0`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Odds {
    /// The datagram is dropped.
    pub loss: f64,
    /// The datagram is delivered twice.
    pub dup: f64,
    /// The datagram is held back behind later ones.
    pub reorder: f64,
    /// One bit of the datagram is flipped.
    pub corrupt: f64,
}

impl Odds {
    /// The odds of loss, duplication, reordering and corruption.
    pub const fn new(loss: f64, dup: f64, reorder: f64, corrupt: f64) -> Odds {
        Odds {
            loss,
            dup,
            reorder,
            corrupt,
        }
    }
}

/// What happens to one datagram.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// Dropped (nothing else applies).
    pub drop: bool,
    /// Flip bit `bit % 8` of byte `bit / 8`.
    pub corrupt_bit: Option<usize>,
    /// Deliver a second copy.
    pub duplicate: bool,
    /// Hold back until this many later datagrams passed (1..=3); a driver
    /// that schedules by time instead holds it back by a delay of its choice.
    pub reorder_after: Option<u8>,
}

/// The fault decisions of one stream of datagrams.
///
/// Decisions are made in this order: loss (a lost datagram gets nothing
/// else), corruption, duplication, reordering. Every decision draws the same
/// number of values, so decision *n* depends on the seed and *n* alone, not on
/// the odds or the lengths before it. Corruption never touches the byte the
/// ICRC does not cover ([`wire::icrc::BTH_MASKED_BYTE`]): every flipped bit
/// is one the receiver must detect.
#[derive(Clone, Debug)]
pub struct FaultModel {
    odds: Odds,
    rng: Rng,
}

impl FaultModel {
    /// A model with `odds`, drawing from `rng`.
    pub fn new(odds: Odds, rng: Rng) -> Self {
        FaultModel { odds, rng }
    }

    /// The odds in force.
    pub fn odds(&self) -> Odds {
        self.odds
    }

    /// Changes the odds (a simulator's heal phase); the stream goes on.
    pub fn set_odds(&mut self, odds: Odds) {
        self.odds = odds;
    }

    /// Decides the fate of the next datagram, `len` bytes long (six draws).
    pub fn decide(&mut self, len: usize) -> Decision {
        let c = self.odds;
        let r = &mut self.rng;
        let (lost, corrupt, dup, reorder) = (
            r.chance(c.loss),
            r.chance(c.corrupt),
            r.chance(c.dup),
            r.chance(c.reorder),
        );
        let (bit_draw, after_draw) = (r.next_u64(), r.below(3) as u8 + 1);
        if lost {
            return Decision {
                drop: true,
                ..Decision::default()
            };
        }
        Decision {
            drop: false,
            corrupt_bit: if corrupt {
                corrupt_bit(bit_draw, len)
            } else {
                None
            },
            duplicate: dup,
            reorder_after: reorder.then_some(after_draw),
        }
    }
}

/// A bit of a `len`-byte datagram outside the ICRC-masked byte (`None` if there is none).
fn corrupt_bit(draw: u64, len: usize) -> Option<usize> {
    let usable = if len > BTH_MASKED_BYTE { len - 1 } else { len };
    if usable == 0 {
        return None;
    }
    let mut byte = (draw >> 3) as usize % usable;
    if len > BTH_MASKED_BYTE && byte >= BTH_MASKED_BYTE {
        byte += 1;
    }
    Some(byte * 8 + (draw & 7) as usize)
}

/// Flips `bit` of `bytes` (no-op when out of range).
pub fn flip_bit(bytes: &mut [u8], bit: usize) {
    if let Some(b) = bytes.get_mut(bit / 8) {
        *b ^= 1 << (bit % 8);
    }
}

//! Fault injection on the real UDP path: its configuration.
//!
//! Owns [`FaultConfig`] (the parsed `SOFTVERBS_FAULTS` value) and makes from it
//! one [`FaultModel`] per direction of one driver: the model the simulator
//! uses too (crates/faults), drawing from its own seeded generator, no global
//! state; it decides, datagram by datagram, what happens to each. The
//! progress thread applies the decisions (see `progress.rs` and `hold.rs`).
//!
//! # `SOFTVERBS_FAULTS`
//!
//! A comma-separated list of `key=value`; empty, `off` or `none` mean no faults.
//!
//! | key       | value                                   | effect on each datagram                                   |
//! |-----------|-----------------------------------------|-----------------------------------------------------------|
//! | `loss`    | probability (`0.05` or `5%`)            | dropped                                                   |
//! | `dup`     | probability                             | delivered twice (the copy right after the original)       |
//! | `reorder` | probability                             | held back until 1–3 later datagrams of the same direction passed (at most `delay` + 1 ms) |
//! | `delay`   | duration (`200us`, `1ms`, `0`; units `ns`,`us`,`ms`,`s`) | every datagram of the direction is held this long |
//! | `corrupt` | probability                             | one bit flipped (never in BTH byte 4, which the ICRC masks), so the receiver's ICRC check drops it |
//! | `seed`    | unsigned integer (default 0)            | seeds the generator                                       |
//! | `dir`     | `tx` (default), `rx` or `both`          | which datagrams are faulted: sent, received, or both       |
//!
//! Decisions are made in this order: loss (a lost datagram gets nothing else),
//! corruption, duplication, reordering. Faults hit every datagram of the
//! direction, including those the loopback shortcut delivers inside the process.
//!
//! **Determinism.** Each direction has its own generator, seeded from `seed` and
//! the direction, and draws the same number of values for every datagram, so
//! the *n*-th datagram sent (or received) always gets the same decision for a
//! given seed, whatever the other direction does. (Which datagram is the *n*-th
//! still depends on the real network's timing.)

use std::str::FromStr;
use std::time::Duration;

/// Which datagrams a [`FaultConfig`] applies to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FaultDirection {
    /// Datagrams the device sends (the default).
    #[default]
    Tx,
    /// Datagrams the device receives.
    Rx,
    /// Both.
    Both,
}

impl FaultDirection {
    /// Whether sent datagrams are faulted.
    pub fn tx(self) -> bool {
        matches!(self, FaultDirection::Tx | FaultDirection::Both)
    }

    /// Whether received datagrams are faulted.
    pub fn rx(self) -> bool {
        matches!(self, FaultDirection::Rx | FaultDirection::Both)
    }
}

/// The faults a driver injects (`SOFTVERBS_FAULTS`; see the module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FaultConfig {
    /// Probability that a datagram is dropped.
    pub loss: f64,
    /// Probability that a datagram is delivered twice.
    pub dup: f64,
    /// Probability that a datagram is held back behind later ones.
    pub reorder: f64,
    /// Probability that one bit of a datagram is flipped.
    pub corrupt: f64,
    /// Fixed delay of every datagram of the faulted direction(s).
    pub delay: Duration,
    /// Generator seed.
    pub seed: u64,
    /// Which datagrams are faulted.
    pub dir: FaultDirection,
}

/// A `SOFTVERBS_FAULTS` value that cannot be used: which key, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("SOFTVERBS_FAULTS: {key:?}: {reason}")]
pub struct FaultConfigError {
    /// The key as given (or the whole item when it has no `=`).
    pub key: String,
    /// What was wrong with it.
    #[source]
    pub reason: FaultValueError,
}

/// What is wrong with one `SOFTVERBS_FAULTS` item; `value` is the value as given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FaultValueError {
    /// An item without `=`.
    #[error("expected key=value (keys: {KEYS})")]
    NotKeyValue,
    /// A key that is not one of loss, dup, reorder, corrupt, delay, seed, dir.
    #[error("unknown key (the keys are: {KEYS})")]
    UnknownKey,
    /// A key given twice.
    #[error("given twice")]
    Repeated,
    /// `seed` that is not a `u64`.
    #[error("{value:?} is not an unsigned integer")]
    NotUnsigned {
        /// The value given.
        value: String,
        /// Why it does not parse.
        #[source]
        source: std::num::ParseIntError,
    },
    /// `dir` that is not `tx`, `rx` or `both`.
    #[error("{value:?} is not tx, rx or both")]
    NotDirection {
        /// The value given.
        value: String,
    },
    /// A probability that is not a number (with or without `%`).
    #[error("{value:?} is not a probability (like 0.05 or 5%)")]
    NotProbability {
        /// The value given.
        value: String,
        /// Why it does not parse.
        #[source]
        source: std::num::ParseFloatError,
    },
    /// A probability outside 0..=1.
    #[error("{value:?} is not between 0 and 1 (0% and 100%)")]
    ProbabilityRange {
        /// The value given.
        value: String,
    },
    /// A duration without a unit.
    #[error("{value:?} has no unit (ns, us, ms or s)")]
    NoUnit {
        /// The value given.
        value: String,
    },
    /// A duration with a unit other than ns, us, ms or s.
    #[error("{value:?}: unknown unit {unit:?} (ns, us, ms or s)")]
    UnknownUnit {
        /// The value given.
        value: String,
        /// The unit in it.
        unit: String,
    },
    /// A duration whose number does not parse (or is missing).
    #[error("{value:?} is not a duration (like 200us)")]
    NotDuration {
        /// The value given.
        value: String,
        /// Why the number does not parse; `None` when there is none.
        #[source]
        source: Option<std::num::ParseFloatError>,
    },
    /// A duration outside 0..=10 s.
    #[error("{value:?} is not between 0 and 10 s")]
    DurationRange {
        /// The value given.
        value: String,
    },
}

/// The keys of `SOFTVERBS_FAULTS`.
const KEYS: &str = "loss, dup, reorder, corrupt, delay, seed, dir";

impl FaultConfig {
    /// Environment variable read by [`crate::DriverOptions::try_from_env`].
    pub const ENV: &'static str = "SOFTVERBS_FAULTS";

    /// Whether this configuration changes anything at all.
    pub fn is_active(&self) -> bool {
        self.loss > 0.0
            || self.dup > 0.0
            || self.reorder > 0.0
            || self.corrupt > 0.0
            || !self.delay.is_zero()
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), FaultValueError> {
        match key {
            "loss" => self.loss = probability(value)?,
            "dup" => self.dup = probability(value)?,
            "reorder" => self.reorder = probability(value)?,
            "corrupt" => self.corrupt = probability(value)?,
            "delay" => self.delay = duration(value)?,
            "seed" => {
                self.seed = value
                    .parse()
                    .map_err(|source| FaultValueError::NotUnsigned {
                        value: value.into(),
                        source,
                    })?
            }
            "dir" => {
                self.dir = match value {
                    "tx" => FaultDirection::Tx,
                    "rx" => FaultDirection::Rx,
                    "both" => FaultDirection::Both,
                    _ => {
                        return Err(FaultValueError::NotDirection {
                            value: value.into(),
                        })
                    }
                }
            }
            _ => return Err(FaultValueError::UnknownKey),
        }
        Ok(())
    }
}

impl FromStr for FaultConfig {
    type Err = FaultConfigError;

    /// Parses strictly: an unknown key, a repeated key, or a bad value is an error.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut config = FaultConfig::default();
        let text = s.trim();
        if text.is_empty() || text == "off" || text == "none" {
            return Ok(config);
        }
        let mut seen: Vec<&str> = Vec::new();
        for item in text.split(',').map(str::trim) {
            let err = |key: &str, reason: FaultValueError| FaultConfigError {
                key: key.to_string(),
                reason,
            };
            let Some((key, value)) = item.split_once('=') else {
                return Err(err(item, FaultValueError::NotKeyValue));
            };
            let (key, value) = (key.trim(), value.trim());
            if seen.contains(&key) {
                return Err(err(key, FaultValueError::Repeated));
            }
            config.set(key, value).map_err(|reason| err(key, reason))?;
            seen.push(key);
        }
        Ok(config)
    }
}

/// `0.05` or `5%`, within 0..=1.
fn probability(value: &str) -> Result<f64, FaultValueError> {
    let (number, scale) = match value.strip_suffix('%') {
        Some(n) => (n.trim(), 100.0),
        None => (value, 1.0),
    };
    let p = number.parse::<f64>().map(|p| p / scale).map_err(|source| {
        FaultValueError::NotProbability {
            value: value.into(),
            source,
        }
    })?;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(FaultValueError::ProbabilityRange {
            value: value.into(),
        })
    }
}

/// `200us`, `1ms`, `1.5ms`, `0`; units ns, us, ms, s. At most 10 s.
fn duration(value: &str) -> Result<Duration, FaultValueError> {
    if value == "0" {
        return Ok(Duration::ZERO);
    }
    let split = value
        .rfind(|c: char| !c.is_ascii_alphabetic())
        .map_or(0, |i| i + 1);
    if split == value.len() {
        return Err(FaultValueError::NoUnit {
            value: value.into(),
        });
    }
    if split == 0 {
        return Err(FaultValueError::NotDuration {
            value: value.into(),
            source: None,
        });
    }
    let (number, unit) = value.split_at(split);
    let scale_ns = match unit {
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => {
            return Err(FaultValueError::UnknownUnit {
                value: value.into(),
                unit: unit.into(),
            })
        }
    };
    let n: f64 = number
        .trim()
        .parse()
        .map_err(|source| FaultValueError::NotDuration {
            value: value.into(),
            source: Some(source),
        })?;
    let ns = n * scale_ns;
    if !(0.0..=10e9).contains(&ns) {
        return Err(FaultValueError::DurationRange {
            value: value.into(),
        });
    }
    Ok(Duration::from_nanos(ns.round() as u64))
}

use faults::Rng;
pub use faults::{flip_bit, Decision, FaultModel, Odds};

/// Direction salts, so tx and rx draw independent streams from one seed.
const TX_SALT: u64 = 0x7478_0000_0000_0001;
const RX_SALT: u64 = 0x7278_0000_0000_0002;

impl FaultConfig {
    /// The odds of the four per-datagram faults.
    pub fn odds(&self) -> Odds {
        Odds::new(self.loss, self.dup, self.reorder, self.corrupt)
    }

    /// The model for sent datagrams.
    pub fn tx_model(&self) -> FaultModel {
        self.model(TX_SALT)
    }

    /// The model for received datagrams.
    pub fn rx_model(&self) -> FaultModel {
        self.model(RX_SALT)
    }

    fn model(&self, salt: u64) -> FaultModel {
        let mut seeder = Rng::new(self.seed ^ salt);
        FaultModel::new(self.odds(), Rng::new(seeder.next_u64()))
    }
}

#[cfg(test)]
mod tests;

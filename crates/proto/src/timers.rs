//! IBA timer and acknowledgement rules: the local ACK timeout, the RNR NAK
//! timer table, and what a requester does with each AETH syndrome (which NAK
//! ends a WQE with which status). The syndrome byte itself and the credit
//! table are `wire::aeth`'s ([`Syndrome`], [`NakCode`]); this module adds the
//! requester's side of them.
//!
//! This module owns numbers only; no clocks (time is nanoseconds passed in by
//! the engine's caller). Promises: each table equals the spec table it cites
//! (spec rc-reliability.md §1.3, §2, §4, §5; roce-wire.md §5.1), checked by
//! tests that read the spec markdown; out-of-range codes are a [`RangeError`],
//! never a panic.
#![forbid(unsafe_code)]

use crate::error::RangeError;
use crate::wc::WcStatus;
pub use wire::aeth::{NakCode, Syndrome};

/// The local ACK timeout unit: 4.096 µs (spec rc-reliability.md §1.3).
pub const ACK_TIMEOUT_UNIT_NS: u64 = 4096;

/// `rnr_retry` value meaning "retry forever" (spec rc-reliability.md §4).
pub const RNR_RETRY_INFINITE: u8 = 7;

fn code_range(what: &'static str, code: u8) -> Result<usize, RangeError> {
    if code > 31 {
        return Err(RangeError {
            what,
            value: u64::from(code),
            min: 0,
            max: 31,
            note: "; a 5-bit code",
        });
    }
    Ok(usize::from(code))
}

/// The local ACK timeout for `attr.timeout` = `code`: 4.096 µs × 2^code in
/// nanoseconds, `None` for 0 = no timer, wait forever (spec rc-reliability.md §1.3).
pub fn local_ack_timeout_ns(code: u8) -> Result<Option<u64>, RangeError> {
    let code = code_range("attr.timeout", code)?;
    Ok((code != 0).then(|| ACK_TIMEOUT_UNIT_NS << code))
}

/// RNR NAK timer code → delay in microseconds (spec rc-reliability.md §4;
/// IBA table, as `ib_rvt_rnr_table`; rxe has 61410 for code 25, a typo).
/// Code 0 is the *largest* delay.
pub const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, //
    160, 240, 320, 480, 640, 960, 1_280, 1_920, //
    2_560, 3_840, 5_120, 7_680, 10_240, 15_360, 20_480, 30_720, //
    40_960, 61_440, 81_920, 122_880, 163_840, 245_760, 327_680, 491_520,
];

/// The RNR wait for timer `code` (from an RNR NAK, or a QP's `min_rnr_timer`) in microseconds.
pub fn rnr_timer_us(code: u8) -> Result<u32, RangeError> {
    Ok(RNR_TIMER_US[code_range("RNR timer code", code)?])
}

/// The RNR wait for timer `code` in nanoseconds.
pub fn rnr_timer_ns(code: u8) -> Result<u64, RangeError> {
    rnr_timer_us(code).map(|us| u64::from(us) * 1000)
}

/// What the requester does with a NAK for its oldest outstanding WQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakAction {
    /// Go back N: resend from the NAK's PSN, counting against `retry_cnt`;
    /// when the count is spent the WQE ends with `exhausted`.
    Retry {
        /// Status when retries run out.
        exhausted: WcStatus,
    },
    /// The WQE completes with this status and the QP moves to ERR.
    Fail(WcStatus),
}

/// One row of [`NAK_RULES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NakRule {
    /// The code.
    pub code: NakCode,
    /// The AETH syndrome byte.
    pub syndrome: u8,
    /// The IBA name.
    pub name: &'static str,
    /// What the requester does (RC).
    pub action: NakAction,
}

/// NAK code ↔ syndrome ↔ requester completion status on RC (spec
/// rc-reliability.md §2 and §5, roce-wire.md §5.1). Code 4 is RD-only; on RC
/// we follow rxe and end the WQE with `REM_OP_ERR` (hfi1 ignores it).
pub const NAK_RULES: [NakRule; 5] = [
    NakRule {
        code: NakCode::PsnSequenceError,
        syndrome: 0x60,
        name: "PSN sequence error",
        action: NakAction::Retry {
            exhausted: WcStatus::RetryExcErr,
        },
    },
    NakRule {
        code: NakCode::InvalidRequest,
        syndrome: 0x61,
        name: "invalid request",
        action: NakAction::Fail(WcStatus::RemInvReqErr),
    },
    NakRule {
        code: NakCode::RemoteAccessError,
        syndrome: 0x62,
        name: "remote access error",
        action: NakAction::Fail(WcStatus::RemAccessErr),
    },
    NakRule {
        code: NakCode::RemoteOperationalError,
        syndrome: 0x63,
        name: "remote operational error",
        action: NakAction::Fail(WcStatus::RemOpErr),
    },
    NakRule {
        code: NakCode::InvalidRdRequest,
        syndrome: 0x64,
        name: "invalid RD request",
        action: NakAction::Fail(WcStatus::RemOpErr),
    },
];

/// The status that ends a WQE when the local ACK timer expires with `retry_cnt`
/// spent (spec rc-reliability.md §1.3, §5).
pub const ACK_TIMEOUT_EXHAUSTED: WcStatus = WcStatus::RetryExcErr;

/// The status that ends a WQE when an RNR NAK arrives with `rnr_retry` spent
/// (spec rc-reliability.md §1.4, §5).
pub const RNR_EXHAUSTED: WcStatus = WcStatus::RnrRetryExcErr;

/// What a requester does with an AETH it received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AethAction {
    /// Positive acknowledgement; `credits` is `None` for "no limit".
    Ack {
        /// End-to-end credits advertised.
        credits: Option<u32>,
    },
    /// Wait `delay_us`, then resend from the NAK's PSN; counts against
    /// `rnr_retry` (unless 7), ending with [`RNR_EXHAUSTED`].
    RnrWait {
        /// The responder's RNR delay.
        delay_us: u32,
    },
    /// A NAK with a defined code.
    Nak(NakRule),
}

/// The rule for NAK `code`. (Reserved syndromes never get here: `wire`
/// rejects an AETH carrying one, and the packet is dropped as malformed.)
pub fn nak_rule(code: NakCode) -> NakRule {
    NAK_RULES[code as usize]
}

/// Classifies a received AETH syndrome for the requester.
pub fn aeth_action(s: Syndrome) -> AethAction {
    match s {
        Syndrome::Ack { credit_code } => AethAction::Ack {
            credits: wire::aeth::credit_count(credit_code).map(u32::from),
        },
        Syndrome::RnrNak { timer_code } => AethAction::RnrWait {
            delay_us: RNR_TIMER_US[usize::from(timer_code & 0x1f)],
        },
        Syndrome::Nak(code) => AethAction::Nak(nak_rule(code)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec_md::{plain, table_after};

    const RC: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../spec/rc-reliability.md"
    ));
    const WIRE: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../spec/roce-wire.md"
    ));

    /// "655.36" ms → 655360 µs, exactly (no floats).
    fn ms_to_us(s: &str) -> u32 {
        let (int, frac) = s.split_once('.').unwrap_or((s, ""));
        let frac = format!("{frac:0<3}");
        int.parse::<u32>().expect("int") * 1000 + frac.parse::<u32>().expect("frac")
    }

    /// rc-reliability.md §4: the 32-entry RNR table, four (code, ms) pairs per row.
    #[test]
    fn rnr_table_matches_spec() {
        let rows = table_after(RC, "## 4. Timer encodings");
        let mut seen = [false; 32];
        for r in rows {
            for pair in r.chunks(2) {
                let code: usize = pair[0].parse().expect("code");
                assert_eq!(RNR_TIMER_US[code], ms_to_us(&pair[1]), "code {code}");
                seen[code] = true;
            }
        }
        assert!(seen.iter().all(|s| *s));
        assert!(plain(RC).contains("rnr_retry = 7\n= infinite") && RNR_RETRY_INFINITE == 7);
    }

    #[test]
    fn rnr_codes_out_of_range() {
        assert_eq!(rnr_timer_us(0), Ok(655_360));
        assert_eq!(rnr_timer_ns(1), Ok(10_000));
        let e = rnr_timer_us(32).unwrap_err();
        assert_eq!(
            e.to_string(),
            "RNR timer code = 32 is out of range (allowed 0..=31; a 5-bit code)"
        );
    }

    /// rc-reliability.md §1.3: "Values: 1 = 8.192 µs, 4 = 65.536 µs, ... 31 = 8796 s."
    #[test]
    fn ack_timeout_matches_spec() {
        let text = plain(RC);
        let at = text.find("Values: ").expect("values list") + "Values: ".len();
        let list = &text[at..at + text[at..].find(".\n").expect("end")];
        let mut n = 0;
        for item in list.replace('\n', " ").split(',') {
            let item = item.split(" (").next().unwrap_or("").trim();
            let (code, rest) = item.split_once(" = ").expect("code = value");
            let (num, unit) = rest.split_once(' ').expect("value unit");
            let scale = match unit {
                "µs" => 1e3,
                "ms" => 1e6,
                "s" => 1e9,
                other => panic!("unit {other}"),
            };
            let ns = local_ack_timeout_ns(code.parse().expect("code"))
                .expect("range")
                .expect("finite");
            let decimals = num.split_once('.').map_or(0, |(_, f)| f.len());
            assert_eq!(
                format!("{:.*}", decimals, ns as f64 / scale),
                num,
                "code {code}"
            );
            n += 1;
        }
        assert_eq!(n, 11);
        assert!(text.contains("0 means no timer"));
        assert_eq!(local_ack_timeout_ns(0), Ok(None));
        assert_eq!(local_ack_timeout_ns(14), Ok(Some(67_108_864)));
        assert!(local_ack_timeout_ns(32).is_err());
    }

    /// roce-wire.md §5.1: the syndrome-type table, the NAK code names and the byte ranges.
    #[test]
    fn syndrome_matches_wire_spec() {
        let rows = table_after(WIRE, "### 5.1 AETH syndrome byte");
        let nak = rows.iter().find(|r| r[0] == "11").expect("NAK row");
        for item in nak[2].split(", ") {
            let Some((code, name)) = item.split_once(" = ") else {
                continue;
            };
            let Ok(code) = code.parse::<u8>() else {
                continue;
            };
            if name.starts_with("reserved") || code > 4 {
                continue;
            }
            assert_eq!(rule_for(code).name, name.split(';').next().unwrap_or(name));
        }
        assert!(
            WIRE.contains("ACK 0x00–0x1F")
                && WIRE.contains("RNR NAK 0x20–0x3F")
                && WIRE.contains("NAK 0x60–0x64")
        );
        // The rules are indexed by wire's NAK code and carry its syndrome byte.
        for (i, r) in NAK_RULES.iter().enumerate() {
            assert_eq!(r.code as usize, i);
            assert_eq!(Syndrome::Nak(r.code).to_byte(), r.syndrome);
            assert_eq!(Syndrome::from_byte(r.syndrome), Some(Syndrome::Nak(r.code)));
        }
    }

    fn rule_for(code: u8) -> NakRule {
        match Syndrome::from_byte(0x60 | code) {
            Some(Syndrome::Nak(c)) => nak_rule(c),
            other => panic!("NAK code {code}: {other:?}"),
        }
    }

    fn action_of(byte: u8) -> AethAction {
        aeth_action(Syndrome::from_byte(byte).expect("a defined syndrome"))
    }

    /// roce-wire.md §5.1: "Credit code → number of credits: 0→0, 1→1, ..., 30→32768".
    #[test]
    fn credit_table_matches_spec() {
        let at = WIRE.find("Credit code → number of").expect("credit list");
        let list = &WIRE[at..at + WIRE[at..].find("(rdmavt").expect("end")];
        let list = list.split_once(':').expect("colon").1.replace('\n', " ");
        let mut n = 0;
        for item in list.split(',') {
            let (code, credits) = item.trim().split_once('→').expect("arrow");
            assert_eq!(
                wire::aeth::CREDIT_TABLE[code.parse::<usize>().expect("code")],
                credits.trim().parse::<u16>().expect("n")
            );
            n += 1;
        }
        assert_eq!(n, 31);
        assert_eq!(action_of(0x1f), AethAction::Ack { credits: None });
        assert_eq!(action_of(0x05), AethAction::Ack { credits: Some(6) });
    }

    /// rc-reliability.md §2: each "NAK ... (0x6N)" row names our status (or a resend).
    #[test]
    fn nak_rules_match_completer_spec() {
        let rows = table_after(RC, "## 2. Completer");
        let mut n = 0;
        for r in &rows {
            let Some(at) = r[0].find("(0x6") else {
                continue;
            };
            let syndrome = u8::from_str_radix(&r[0][at + 3..at + 5], 16).expect("hex");
            let rule = NAK_RULES
                .iter()
                .find(|x| x.syndrome == syndrome)
                .expect("rule");
            let action = plain(&r[1]);
            match rule.action {
                NakAction::Retry { .. } => assert!(action.contains("resend from q"), "{action}"),
                NakAction::Fail(s) => {
                    assert!(action.contains(s.name()), "{:#x}: {action}", syndrome)
                }
            }
            assert_eq!(action_of(syndrome), AethAction::Nak(*rule));
            n += 1;
        }
        assert_eq!(n, NAK_RULES.len());
        // Reserved syndromes (class 10, NAK codes 5..31) never reach the completer.
        assert_eq!(Syndrome::from_byte(0x40), None);
        assert_eq!(Syndrome::from_byte(0x71), None);
        assert_eq!(action_of(0x3d), AethAction::RnrWait { delay_us: 245_760 });
    }

    /// rc-reliability.md §5: the two exhaustion statuses.
    #[test]
    fn exhaustion_statuses_match_spec() {
        let rows = table_after(RC, "## 5. Work-completion status by failure");
        let status_of = |prefix: &str| {
            let r = rows
                .iter()
                .find(|r| r[0].starts_with(prefix))
                .expect(prefix);
            plain(&r[1])
        };
        assert_eq!(status_of("no ACK/response"), ACK_TIMEOUT_EXHAUSTED.name());
        assert_eq!(status_of("RNR NAKs beyond"), RNR_EXHAUSTED.name());
        if let NakAction::Retry { exhausted } = NAK_RULES[0].action {
            assert_eq!(exhausted, ACK_TIMEOUT_EXHAUSTED);
        }
    }
}

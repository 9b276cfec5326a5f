//! IBA timer and acknowledgement encodings: the local ACK timeout, the RNR NAK
//! timer table, the AETH syndrome byte, the end-to-end credit table, and what
//! a requester does with each AETH (which NAK ends a WQE with which status).
//!
//! This module owns numbers only; no clocks (time is nanoseconds passed in by
//! the engine's caller). Promises: each table equals the spec table it cites
//! (spec rc-reliability.md §1.3, §2, §4, §5; roce-wire.md §5.1), checked by
//! tests that read the spec markdown; out-of-range codes are a [`RangeError`],
//! never a panic.
#![forbid(unsafe_code)]

use crate::error::RangeError;
use crate::wc::WcStatus;

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

/// End-to-end credit code (ACK syndrome bits 4..0) → credits, codes 0..=30;
/// code 31 = no credit limit (spec roce-wire.md §5.1; rdmavt `credit_table`).
pub const CREDIT_COUNT: [u32; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
    2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
];

/// The credit code that means "no end-to-end credit limit" (rxe always sends it;
/// QPs on an SRQ must, spec roce-wire.md §5.1).
pub const CREDIT_UNLIMITED: u8 = 31;

/// The AETH syndrome byte, decoded (spec roce-wire.md §5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// Bits 6..5 = 00: ACK with a credit code (0..=31).
    Ack {
        /// Credit code; 31 = unlimited.
        credit_code: u8,
    },
    /// Bits 6..5 = 01: RNR NAK with an RNR timer code (0..=31).
    RnrNak {
        /// Timer code, see [`RNR_TIMER_US`].
        timer_code: u8,
    },
    /// Bits 6..5 = 11: NAK with a code (0..=4 defined, 5..=31 reserved).
    Nak {
        /// NAK code, see [`NAK_RULES`].
        code: u8,
    },
    /// Bits 6..5 = 10, or the reserved bit 7 set: the whole byte.
    Reserved(u8),
}

impl Syndrome {
    /// Decodes a syndrome byte. Bit 7 is reserved (0); a byte with it set is
    /// [`Syndrome::Reserved`], as rxe's type mask 0xE0 also treats it.
    pub fn decode(byte: u8) -> Syndrome {
        let low = byte & 0x1f;
        match byte >> 5 {
            0b000 => Syndrome::Ack { credit_code: low },
            0b001 => Syndrome::RnrNak { timer_code: low },
            0b011 => Syndrome::Nak { code: low },
            _ => Syndrome::Reserved(byte),
        }
    }

    /// The syndrome byte. Only the low five bits of a code are used.
    pub fn encode(self) -> u8 {
        match self {
            Syndrome::Ack { credit_code } => credit_code & 0x1f,
            Syndrome::RnrNak { timer_code } => 0x20 | (timer_code & 0x1f),
            Syndrome::Nak { code } => 0x60 | (code & 0x1f),
            Syndrome::Reserved(b) => b,
        }
    }
}

/// The NAK codes IBA defines (AETH bits 6..5 = 11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// 0: PSN sequence error.
    PsnSequenceError,
    /// 1: invalid request.
    InvalidRequest,
    /// 2: remote access error.
    RemoteAccessError,
    /// 3: remote operational error.
    RemoteOperationalError,
    /// 4: invalid RD request (RD only).
    InvalidRdRequest,
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
    /// A reserved syndrome: ignore the packet (hfi1 ignores AETH type 10).
    Ignore,
}

/// The defined NAK rule for `code`; reserved codes 5..=31 map to code 3's rule
/// (remote operational error), as rxe does for any unknown NAK code.
pub fn nak_rule(code: u8) -> NakRule {
    let i = usize::from(code).min(NAK_RULES.len());
    NAK_RULES.get(i).copied().unwrap_or(NAK_RULES[3])
}

/// Classifies a received AETH syndrome byte for the requester.
pub fn aeth_action(byte: u8) -> AethAction {
    match Syndrome::decode(byte) {
        Syndrome::Ack { credit_code } => AethAction::Ack {
            credits: CREDIT_COUNT.get(usize::from(credit_code)).copied(),
        },
        Syndrome::RnrNak { timer_code } => AethAction::RnrWait {
            delay_us: RNR_TIMER_US[usize::from(timer_code & 0x1f)],
        },
        Syndrome::Nak { code } => AethAction::Nak(nak_rule(code)),
        Syndrome::Reserved(_) => AethAction::Ignore,
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
            assert_eq!(nak_rule(code).name, name.split(';').next().unwrap_or(name));
        }
        assert!(
            WIRE.contains("ACK 0x00–0x1F")
                && WIRE.contains("RNR NAK 0x20–0x3F")
                && WIRE.contains("NAK 0x60–0x64")
        );
        assert_eq!(Syndrome::Ack { credit_code: 31 }.encode(), 0x1f);
        assert_eq!(Syndrome::RnrNak { timer_code: 0 }.encode(), 0x20);
        assert_eq!(Syndrome::RnrNak { timer_code: 31 }.encode(), 0x3f);
        for (i, r) in NAK_RULES.iter().enumerate() {
            assert_eq!(Syndrome::Nak { code: i as u8 }.encode(), r.syndrome);
            assert_eq!(
                Syndrome::decode(r.syndrome),
                Syndrome::Nak { code: i as u8 }
            );
        }
        for b in 0..=255u8 {
            let s = Syndrome::decode(b);
            assert_eq!(s.encode(), b, "{b:#x} round trip");
            assert_eq!(
                matches!(s, Syndrome::Reserved(_)),
                b & 0x80 != 0 || b >> 5 == 0b010
            );
        }
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
                CREDIT_COUNT[code.parse::<usize>().expect("code")],
                credits.trim().parse::<u32>().expect("n")
            );
            n += 1;
        }
        assert_eq!(n, 31);
        assert_eq!(aeth_action(0x1f), AethAction::Ack { credits: None });
        assert_eq!(aeth_action(0x05), AethAction::Ack { credits: Some(6) });
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
            assert_eq!(aeth_action(syndrome), AethAction::Nak(*rule));
            n += 1;
        }
        assert_eq!(n, NAK_RULES.len());
        assert_eq!(nak_rule(17).action, NakAction::Fail(WcStatus::RemOpErr));
        assert_eq!(aeth_action(0x40), AethAction::Ignore);
        assert_eq!(aeth_action(0x3d), AethAction::RnrWait { delay_us: 245_760 });
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

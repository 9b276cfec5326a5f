//! `proto::qp::table` against `spec/qp-state-machine.md` §4, cell by cell, in both
//! directions: every spec cell is in the code table and the code table holds
//! nothing the spec lacks. The spec is parsed from its markdown (tests/common/spec.rs).

mod common;

use common::spec::{self, Cell, SpecTable};
use proto::qp::table::{lookup, TABLE};
use proto::{AttrMask, QpState, QpType};

fn all_cells() -> impl Iterator<Item = (QpType, QpState, QpState)> {
    QpType::ALL.into_iter().flat_map(|t| {
        QpState::ALL
            .into_iter()
            .flat_map(move |f| QpState::ALL.into_iter().map(move |to| (t, f, to)))
    })
}

fn code_cell(t: QpType, from: QpState, to: QpState) -> Option<Cell> {
    lookup(t, from, to).map(|m| Cell {
        required: m.required,
        optional: m.optional,
    })
}

#[test]
fn parser_found_every_row() {
    let s = spec::load();
    assert_eq!(s.mask_rows, 11, "§2 has 11 rows of two bits");
    assert_eq!(s.names.len(), 22, "§2 names 22 bits");
    assert_eq!(s.valid_rows, 7, "§4.1 has one row per state");
    assert_eq!(
        s.valid.iter().flatten().filter(|v| **v).count(),
        22,
        "§4.1 has 22 ✔"
    );
    assert_eq!(s.sections.len(), 9, "§4.2–§4.10");
    // 7 + 4 + 7 + 7 + 7 + 7 + 7 + 4 table rows in §4.2–§4.6 and §4.8–§4.10.
    assert_eq!(s.type_rows, 50);
    assert_eq!(s.prose_rows, 2, "§4.7 is two prose statements");
    assert!(
        s.bare_rule_seen,
        "§4.1's closing sentence (R = —, O = — for bare pairs)"
    );
}

#[test]
fn every_section_covers_every_type_once() {
    let s = spec::load();
    for (from, to) in &s.sections {
        assert!(
            s.valid[*from as usize][*to as usize],
            "§4 section {from}→{to} not ✔ in §4.1"
        );
        for t in QpType::ALL {
            assert!(
                s.cells.contains_key(&(t, *from, *to)),
                "§4 {from}→{to} has no row for {t:?}"
            );
        }
    }
    assert_eq!(s.cells.len(), 9 * 8);
}

#[test]
fn pairs_without_a_section_are_the_bare_ones() {
    let s = spec::load();
    for from in QpState::ALL {
        for to in QpState::ALL {
            let covered = s.sections.contains(&(from, to));
            if s.valid[from as usize][to as usize] && !covered {
                let bare = matches!(to, QpState::Reset | QpState::Err);
                assert!(
                    bare,
                    "{from}→{to} is ✔ but has no section and is not a bare pair"
                );
            }
        }
    }
}

#[test]
fn mask_names_match_the_code() {
    let s = spec::load();
    for (bit, name) in AttrMask::NAMED {
        assert_eq!(s.names.get(*name), Some(bit), "IBV_QP_{name}");
    }
    assert_eq!(s.names.len(), AttrMask::NAMED.len());
    let all = s.names.values().fold(AttrMask::EMPTY, |a, b| a | *b);
    assert_eq!(all, AttrMask::KNOWN, "bits 0..=20 and 25");
}

#[test]
fn valid_pairs_match_for_every_type() {
    let s = spec::load();
    for (t, from, to) in all_cells() {
        let want = s.valid[from as usize][to as usize];
        assert_eq!(lookup(t, from, to).is_some(), want, "{t:?} {from}→{to}");
    }
}

#[test]
fn every_spec_cell_is_in_the_code() {
    let s = spec::load();
    let mut wrong = Vec::new();
    for (t, from, to) in all_cells() {
        let (want, got) = (s.lookup(t, from, to), code_cell(t, from, to));
        if want != got {
            wrong.push(format!("{t:?} {from}→{to}: spec {want:?}, code {got:?}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} cells differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn code_table_holds_nothing_the_spec_lacks() {
    let s = spec::load();
    assert_eq!(TABLE.len(), 22, "one rule per ✔");
    for rule in TABLE {
        let (from, to) = (rule.from, rule.to);
        assert!(
            s.valid[from as usize][to as usize],
            "code has {from}→{to}, spec §4.1 does not"
        );
        for (i, t) in QpType::ALL.iter().enumerate() {
            let m = rule.per_type[i];
            let got = Cell {
                required: m.required,
                optional: m.optional,
            };
            assert_eq!(
                s.lookup(*t, from, to),
                Some(got),
                "{t:?} {from}→{to} (per_type[{i}])"
            );
        }
    }
}

/// The §3 "consequences easy to miss" follow from the §4 tables; checking them
/// against the parsed table validates the spec's own prose and the parser.
#[test]
fn section_3_consequences_hold_in_the_parsed_table() {
    let s = spec::load();
    let allowed = |t, f, to| {
        s.lookup(t, f, to)
            .map(|c| c.required | c.optional)
            .unwrap_or_default()
    };
    let only_in = |bit: AttrMask, pairs: &[(QpState, QpState)]| {
        for (t, f, to) in all_cells() {
            if allowed(t, f, to).contains(bit) {
                assert!(pairs.contains(&(f, to)), "{bit} allowed in {t:?} {f}→{to}");
            }
        }
    };
    use QpState::*;
    only_in(AttrMask::CAP, &[]);
    only_in(AttrMask::PATH_MTU, &[(Init, Rtr)]);
    only_in(AttrMask::DEST_QPN, &[(Init, Rtr)]);
    only_in(AttrMask::RQ_PSN, &[(Init, Rtr)]);
    only_in(AttrMask::SQ_PSN, &[(Rtr, Rts)]);
    only_in(
        AttrMask::CUR_STATE,
        &[(Rtr, Rts), (Rts, Rts), (Sqd, Rts), (Sqe, Rts)],
    );
    only_in(AttrMask::RATE_LIMIT, &[(Rtr, Rts), (Rts, Rts)]);
    for (t, f, to) in all_cells() {
        let a = allowed(t, f, to);
        if matches!(
            t,
            QpType::Rc | QpType::Uc | QpType::XrcSend | QpType::XrcRecv
        ) {
            assert!(!a.contains(AttrMask::QKEY), "QKEY on {t:?} {f}→{to}");
        }
        if matches!(t, QpType::Ud | QpType::Gsi | QpType::Smi) {
            let never = AttrMask::ACCESS_FLAGS | AttrMask::AV | AttrMask::PATH_MTU;
            assert!((a & never).is_empty(), "{never} on {t:?} {f}→{to}");
        }
        if a.contains(AttrMask::RATE_LIMIT) {
            assert_eq!(t, QpType::RawPacket);
        }
    }
    assert!(
        !allowed(QpType::Rc, Init, Rtr).contains(AttrMask::PORT),
        "PORT not in INIT→RTR"
    );
    assert!(
        s.lookup(QpType::Rc, Reset, Err).is_none(),
        "RESET→ERR is illegal"
    );
    assert!(s.lookup(QpType::Rc, Rtr, Rtr).is_none() && s.lookup(QpType::Ud, Sqe, Sqe).is_none());
    for t in QpType::ALL {
        if t != QpType::RawPacket {
            assert!(
                s.lookup(t, Rtr, Rts)
                    .unwrap()
                    .required
                    .contains(AttrMask::SQ_PSN),
                "{t:?}"
            );
        }
    }
}

// ---- the parser itself must refuse what it does not understand ----

const MINI: &str =
    "## 2. Mask bits\n| bit | name |\n|---|---|\n| 0 | `IBV_QP_STATE` |\n| 6 | `IBV_QP_QKEY` |\n\
### 4.1 Valid pairs (any type)\n| from \\ to | RTS |\n|---|---|\n| RTS | ✔ |\n\
### 4.6 RTS → RTS (R = —)\n| type | optional |\n|---|---|\n| UD, GSI | QKEY |\n| RC | — (note) |\n";

#[test]
fn parser_reads_a_small_document() {
    let s: SpecTable = spec::parse(MINI);
    let c = s.lookup(QpType::Gsi, QpState::Rts, QpState::Rts).unwrap();
    assert_eq!((c.required, c.optional), (AttrMask::EMPTY, AttrMask::QKEY));
    assert_eq!(
        s.lookup(QpType::Rc, QpState::Rts, QpState::Rts),
        Some(Cell::default())
    );
    assert_eq!(s.lookup(QpType::Rc, QpState::Rts, QpState::Sqd), None);
    assert_eq!((s.type_rows, s.valid_rows, s.mask_rows), (2, 1, 2));
}

#[test]
#[should_panic(expected = "unknown mask bit")]
fn parser_rejects_an_unknown_bit() {
    spec::parse(&MINI.replace("| QKEY |", "| Q_KEY |"));
}

#[test]
#[should_panic(expected = "unknown QP type")]
fn parser_rejects_an_unknown_type() {
    spec::parse(&MINI.replace("UD, GSI", "UD, GSJ"));
}

#[test]
#[should_panic(expected = "given twice")]
fn parser_rejects_a_cell_given_twice() {
    spec::parse(&MINI.replace("| RC |", "| UD |"));
}

#[test]
#[should_panic(expected = "no required column")]
fn parser_needs_a_source_for_required() {
    spec::parse(&MINI.replace(" (R = —)", ""));
}

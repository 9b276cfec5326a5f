//! A parser for the markdown tables of `spec/qp-state-machine.md` §2 and §4: the
//! mask-bit names, the valid (from, to) pairs and the required/optional bits per
//! QP type. It is the independent oracle the table, exhaustive and property tests
//! check `proto` against; it shares nothing with `proto::qp::table`.
//!
//! The parser is strict: an unknown type, state or bit name, a cell assigned
//! twice, or a row without a required/optional source panics, so a spec edit that
//! the parser does not understand fails the tests instead of passing vacuously.

use proto::{AttrMask, QpState, QpType};
use std::collections::HashMap;

/// The spec file, as the brief names it.
pub const SPEC_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../spec/qp-state-machine.md"
);

/// Required and optional bits of one cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cell {
    pub required: AttrMask,
    pub optional: AttrMask,
}

/// Everything parsed from §2 and §4.
#[derive(Debug, Default)]
pub struct SpecTable {
    /// §2: bit name (without `IBV_QP_`) → bit.
    pub names: HashMap<String, AttrMask>,
    /// §4.1: `valid[from][to]`.
    pub valid: [[bool; 7]; 7],
    /// §4.2–§4.10: explicit cells.
    pub cells: HashMap<(QpType, QpState, QpState), Cell>,
    /// The (from, to) of each §4.2–§4.10 section, in order.
    pub sections: Vec<(QpState, QpState)>,
    /// Rows parsed: §2 rows, §4.1 rows, §4.2–4.10 table rows, prose rows (§4.7).
    pub mask_rows: usize,
    pub valid_rows: usize,
    pub type_rows: usize,
    pub prose_rows: usize,
    /// The "All ✔ transitions into RESET or ERR … R = —, O = —" sentence was seen.
    pub bare_rule_seen: bool,
}

impl SpecTable {
    /// The spec's verdict for `t` on `from → to`: `None` if the pair is invalid.
    /// Valid pairs without a section are the bare ones (R = O = —, see §4.1).
    pub fn lookup(&self, t: QpType, from: QpState, to: QpState) -> Option<Cell> {
        if !self.valid[from as usize][to as usize] {
            return None;
        }
        Some(self.cells.get(&(t, from, to)).copied().unwrap_or_default())
    }
}

/// Reads and parses the spec file.
pub fn load() -> SpecTable {
    let text = std::fs::read_to_string(SPEC_PATH).unwrap_or_else(|e| panic!("{SPEC_PATH}: {e}"));
    parse(&text)
}

#[derive(Debug, Clone)]
enum Section {
    None,
    MaskBits,
    Valid {
        cols: Vec<QpState>,
    },
    Pair {
        from: QpState,
        to: QpState,
        r_none: bool,
        o_none: bool,
        cols: Vec<String>,
    },
}

/// Parses the whole document.
pub fn parse(text: &str) -> SpecTable {
    let mut t = SpecTable::default();
    let mut sec = Section::None;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            sec = heading(line);
            if let Section::Pair { from, to, .. } = sec {
                t.sections.push((from, to));
            }
            continue;
        }
        if line.starts_with("All ✔ transitions into RESET or ERR") {
            t.bare_rule_seen = line.contains("R = —, O = —");
        }
        if line.starts_with("|---") {
            continue;
        }
        match &mut sec {
            Section::None => {}
            Section::MaskBits if line.starts_with('|') => mask_row(&mut t, &cells(line)),
            Section::Valid { cols } if line.starts_with('|') => {
                valid_row(&mut t, cols, &cells(line))
            }
            Section::Pair { cols, .. } if line.starts_with("| type") => *cols = cells(line),
            Section::Pair {
                from,
                to,
                r_none,
                o_none,
                cols,
            } => {
                let (from, to, r_none, o_none) = (*from, *to, *r_none, *o_none);
                if line.starts_with('|') {
                    let row = cells(line);
                    type_row(&mut t, (from, to), r_none, o_none, cols, &row);
                    t.type_rows += 1;
                } else if prose_row(&mut t, (from, to), r_none, line) {
                    t.prose_rows += 1;
                }
            }
            _ => {}
        }
    }
    t
}

fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(|c| c.trim().to_string()).collect()
}

fn heading(line: &str) -> Section {
    let title = line.trim_start_matches('#').trim();
    if line.starts_with("## ") {
        return if title.starts_with("2. Mask bits") {
            Section::MaskBits
        } else {
            Section::None
        };
    }
    if !title.starts_with("4.") {
        return Section::None;
    }
    if title.contains("Valid pairs") {
        return Section::Valid { cols: Vec::new() };
    }
    let Some((left, right)) = title.split_once('→') else {
        return Section::None;
    };
    let from = state(left.split_whitespace().last().expect("state before →"));
    let to = state(right.split_whitespace().next().expect("state after →"));
    let notes = right;
    Section::Pair {
        from,
        to,
        r_none: notes.contains("R = —"),
        o_none: notes.contains("O = —"),
        cols: Vec::new(),
    }
}

/// Parses a state name as the spec writes it.
pub fn state(name: &str) -> QpState {
    let name = name.trim().trim_start_matches("IBV_QPS_");
    *QpState::ALL
        .iter()
        .find(|s| s.name() == name)
        .unwrap_or_else(|| panic!("spec: unknown state {name:?}"))
}

/// Parses one type name (§4 notation) to a `QpType`.
pub fn qp_type(name: &str) -> Option<QpType> {
    Some(match name.trim() {
        "UD" => QpType::Ud,
        "UC" => QpType::Uc,
        "RC" => QpType::Rc,
        "XRC_INI" => QpType::XrcSend,
        "XRC_TGT" => QpType::XrcRecv,
        "RAW" | "RAW_PACKET" => QpType::RawPacket,
        "SMI" => QpType::Smi,
        "GSI" => QpType::Gsi,
        _ => return None,
    })
}

fn types(cell: &str) -> Vec<QpType> {
    cell.split(',')
        .map(|n| qp_type(n).unwrap_or_else(|| panic!("spec: unknown QP type {n:?}")))
        .collect()
}

fn mask_row(t: &mut SpecTable, row: &[String]) {
    if row.first().map(String::as_str) == Some("bit") {
        return;
    }
    for pair in row.chunks(2) {
        let bit: u32 = pair[0]
            .parse()
            .unwrap_or_else(|_| panic!("spec §2: bad bit {:?}", pair[0]));
        let name = pair[1]
            .trim_matches('`')
            .trim_start_matches("IBV_QP_")
            .to_string();
        assert!(
            t.names.insert(name, AttrMask(1 << bit)).is_none(),
            "spec §2: {} twice",
            pair[1]
        );
    }
    t.mask_rows += 1;
}

fn valid_row(t: &mut SpecTable, cols: &mut Vec<QpState>, row: &[String]) {
    if row[0].starts_with("from") {
        *cols = row[1..].iter().map(|s| state(s)).collect();
        return;
    }
    let from = state(&row[0]);
    assert_eq!(
        row.len() - 1,
        cols.len(),
        "spec §4.1 row {from}: wrong number of cells"
    );
    for (to, mark) in cols.iter().zip(&row[1..]) {
        match mark.as_str() {
            "✔" => t.valid[from as usize][*to as usize] = true,
            "" => {}
            other => panic!("spec §4.1 {from}→{to}: unexpected cell {other:?}"),
        }
    }
    t.valid_rows += 1;
}

/// A list of bit names; a cell starting with "—" is the empty set (whatever follows).
fn bits(t: &SpecTable, cell: &str) -> AttrMask {
    let cell = cell.trim();
    if cell.starts_with('—') {
        return AttrMask::EMPTY;
    }
    cell.split(',').fold(AttrMask::EMPTY, |acc, n| {
        let n = n.trim().trim_matches('`').trim_start_matches("IBV_QP_");
        acc | *t
            .names
            .get(n)
            .unwrap_or_else(|| panic!("spec: unknown mask bit {n:?}"))
    })
}

fn column(t: &SpecTable, cols: &[String], row: &[String], name: &str, none: bool) -> AttrMask {
    match cols.iter().position(|c| c == name) {
        Some(i) => bits(t, &row[i]),
        None if none => AttrMask::EMPTY,
        None => panic!("spec §4: no {name} column and no \"{name} = —\" note ({row:?})"),
    }
}

fn type_row(
    t: &mut SpecTable,
    pair: (QpState, QpState),
    r_none: bool,
    o_none: bool,
    cols: &[String],
    row: &[String],
) {
    assert_eq!(
        cols.first().map(String::as_str),
        Some("type"),
        "spec §4 {pair:?}: row before header"
    );
    assert_eq!(
        row.len(),
        cols.len(),
        "spec §4 {pair:?}: row {row:?} has the wrong width"
    );
    let required = column(t, cols, row, "required", r_none);
    let optional = column(t, cols, row, "optional", o_none);
    for ty in types(&row[0]) {
        insert(t, ty, pair, Cell { required, optional });
    }
}

/// §4.7 is prose: "Optional: `X` for UD, UC, …." and "RAW_PACKET: — (state bit only)."
fn prose_row(t: &mut SpecTable, pair: (QpState, QpState), r_none: bool, line: &str) -> bool {
    if let Some(rest) = line.strip_prefix("Optional:") {
        assert!(r_none, "spec §4 {pair:?}: prose optional row without R = —");
        let (b, ty) = rest
            .split_once(" for ")
            .expect("Optional: <bits> for <types>.");
        let optional = bits(t, b);
        for ty in types(ty.trim().trim_end_matches('.')) {
            insert(
                t,
                ty,
                pair,
                Cell {
                    required: AttrMask::EMPTY,
                    optional,
                },
            );
        }
        return true;
    }
    let Some((head, value)) = line.split_once(':') else {
        return false;
    };
    let Some(tys) = head.split(',').map(qp_type).collect::<Option<Vec<_>>>() else {
        return false;
    };
    assert!(r_none, "spec §4 {pair:?}: prose row without R = —");
    let optional = bits(t, value);
    for ty in tys {
        insert(
            t,
            ty,
            pair,
            Cell {
                required: AttrMask::EMPTY,
                optional,
            },
        );
    }
    true
}

fn insert(t: &mut SpecTable, ty: QpType, (from, to): (QpState, QpState), cell: Cell) {
    let old = t.cells.insert((ty, from, to), cell);
    assert!(old.is_none(), "spec §4: {ty:?} {from}→{to} given twice");
}

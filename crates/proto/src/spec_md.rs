//! Test helpers: reading tables out of the spec markdown files.
/// The rows of the first markdown table after the line starting with `heading`,
/// as trimmed cells (header and separator rows skipped).
pub fn table_after(md: &str, heading: &str) -> Vec<Vec<String>> {
    let start = md
        .find(heading)
        .unwrap_or_else(|| panic!("spec heading {heading:?} not found"));
    let rows: Vec<Vec<String>> = md[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.trim()
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect();
    rows.into_iter().skip(2).collect()
}

/// `s` without markdown emphasis and code marks.
pub fn plain(s: &str) -> String {
    s.replace("**", "").replace('`', "")
}

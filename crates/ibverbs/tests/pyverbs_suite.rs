//! rdma-core's own pyverbs test suite (Debian's python3-pyverbs ships it in
//! `/usr/share/doc/rdma-core/tests`) through the drop-in libibverbs.so.1.
//!
//! `pyverbs_suite.py prepare` copies the suite here uncompressed; then each
//! test module runs in its own `/usr/bin/python3` process (imports
//! `tests.utils` first, as the suite's runner does), bounded by a timeout and
//! killed by PID past it, and prints its outcomes as JSON. The test fails on
//! any failure or error, on a skip whose reason the README does not list, and
//! when fewer tests pass than [`MIN_PASSED`] (so a feature cannot silently
//! turn back into a skip). It prints the counts and the skips grouped by
//! reason (`--nocapture`).

mod common;

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Where Debian's python3-pyverbs puts the suite.
const SUITE: &str = "/usr/share/doc/rdma-core/tests";
/// The interpreter pyverbs is built for (not whatever `python3` is first on PATH).
const PYTHON: &str = "/usr/bin/python3";
/// One module's bound; the slowest takes about a second.
const MODULE_TIMEOUT: Duration = Duration::from_secs(120);
/// Tests that must pass at least (raise it as features land).
const MIN_PASSED: usize = 126;
/// Tests known to fail today, by unittest id. Each must still fail: when one
/// passes, it leaves this list (which only shrinks).
const KNOWN_FAILURES: &[&str] = &[];

const MARKER: &str = "PYVERBS-SUITE-RESULT ";

fn runner() -> PathBuf {
    [env!("CARGO_MANIFEST_DIR"), "tests", "pyverbs_suite.py"]
        .iter()
        .collect()
}

fn readme() -> String {
    let p: PathBuf = [env!("CARGO_MANIFEST_DIR"), "..", "..", "README.md"]
        .iter()
        .collect();
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// True if the suite and pyverbs are installed; else skip (or fail under
/// `SOFTVERBS_REQUIRE_TOOLS=1`).
fn have_suite() -> bool {
    let ok = Path::new(SUITE).is_dir()
        && Command::new(PYTHON)
            .args(["-c", "import pyverbs.device"])
            .output()
            .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("SOFTVERBS_REQUIRE_TOOLS").is_none(),
            "python3-pyverbs (with {SUITE}) is required"
        );
        eprintln!("skipping: python3-pyverbs or {SUITE} not installed");
    }
    ok
}

/// One test's outcome as the runner reports it.
#[derive(Debug)]
struct Outcome {
    id: String,
    outcome: String,
    detail: String,
}

/// `outcome TAB id TAB detail`, the detail's newlines and backslashes escaped.
fn parse_line(line: &str) -> Option<Outcome> {
    let mut f = line.splitn(3, '\t');
    let (outcome, id, detail) = (f.next()?, f.next()?, f.next()?);
    let mut d = String::with_capacity(detail.len());
    let mut chars = detail.chars();
    while let Some(c) = chars.next() {
        match (c, c == '\\') {
            (_, true) => match chars.next() {
                Some('n') => d.push('\n'),
                Some(o) => d.push(o),
                None => {}
            },
            (c, false) => d.push(c),
        }
    }
    Some(Outcome {
        id: id.to_string(),
        outcome: outcome.to_string(),
        detail: d,
    })
}

/// Runs one module in its own process; its outcomes, or why there are none.
fn run_module(work: &Path, module: &str) -> Result<Vec<Outcome>, String> {
    let out_path = work.join(format!("{module}.out"));
    let err_path = work.join(format!("{module}.err"));
    let mut child = Command::new(PYTHON)
        .arg(runner())
        .args(["run", work.to_str().unwrap(), module])
        .env("LD_LIBRARY_PATH", common::lib_dir())
        .stdin(Stdio::null())
        .stdout(File::create(&out_path).unwrap())
        .stderr(File::create(&err_path).unwrap())
        .spawn()
        .map_err(|e| format!("{module}: spawn {PYTHON}: {e}"))?;
    let deadline = Instant::now() + MODULE_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() >= deadline => break None,
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("{module}: wait: {e}")),
        }
    };
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let tail: String = {
        let lines: Vec<&str> = stderr.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    };
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!(
            "{module}: timed out after {MODULE_TIMEOUT:?} and was killed\n{tail}"
        ));
    };
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let lines: Vec<Outcome> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix(MARKER))
        .filter_map(parse_line)
        .collect();
    match lines.iter().position(|o| o.outcome == "done") {
        Some(_) => Ok(lines.into_iter().filter(|o| o.outcome != "done").collect()),
        None => Err(format!("{module}: exited {status} before the end\n{tail}")),
    }
}

#[test]
fn rdma_core_pyverbs_suite() {
    if !have_suite() {
        return;
    }
    let started = Instant::now();
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pyverbs-suite");
    std::fs::create_dir_all(&work).unwrap();
    let prep = Command::new(PYTHON)
        .arg(runner())
        .args(["prepare", SUITE, work.to_str().unwrap()])
        .output()
        .expect("run the suite runner");
    assert!(
        prep.status.success(),
        "prepare: {}",
        String::from_utf8_lossy(&prep.stderr)
    );
    let modules: Vec<String> = String::from_utf8_lossy(&prep.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert!(modules.len() > 30, "suite modules: {modules:?}");

    let mut problems = Vec::new();
    let mut all = Vec::new();
    for m in &modules {
        let t = Instant::now();
        match run_module(&work, m) {
            Ok(o) => {
                eprintln!("{m}: {} tests in {:.1?}", o.len(), t.elapsed());
                all.extend(o);
            }
            Err(e) => problems.push(e),
        }
    }

    let readme = readme();
    let mut passed = 0;
    let mut known_seen = 0;
    let mut skips: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for o in &all {
        let known = KNOWN_FAILURES.contains(&o.id.as_str());
        match o.outcome.as_str() {
            "passed" if known => problems.push(format!(
                "{} passes now: remove it from KNOWN_FAILURES",
                o.id
            )),
            "passed" => passed += 1,
            "skipped" => skips.entry(&o.detail).or_default().push(&o.id),
            _ if known => {
                eprintln!("known failure: {}", o.id);
                known_seen += 1;
            }
            other => problems.push(format!("{} {other}:\n{}", o.id, o.detail)),
        }
    }
    let failed = all.len() - passed - skips.values().map(Vec::len).sum::<usize>();
    eprintln!("\nskipped, by reason:");
    for (reason, ids) in &skips {
        eprintln!("  {:3}  {reason}", ids.len());
        if !readme.contains(&format!("`{reason}`")) {
            problems.push(format!(
                "skip reason `{reason}` ({} tests, e.g. {}) is not listed in README.md",
                ids.len(),
                ids[0]
            ));
        }
    }
    let skipped = all.len() - passed - failed;
    eprintln!(
        "\npyverbs suite: {passed} passed, {failed} failed ({} known), {skipped} skipped, \
         {} modules in {:.1?}",
        KNOWN_FAILURES.len(),
        modules.len(),
        started.elapsed()
    );
    let known_passing = problems.iter().filter(|p| p.contains("passes now")).count();
    if known_seen + known_passing != KNOWN_FAILURES.len() {
        problems.push(format!(
            "KNOWN_FAILURES names {} tests; {known_seen} failed and {known_passing} passed",
            KNOWN_FAILURES.len()
        ));
    }
    if passed < MIN_PASSED {
        problems.push(format!(
            "only {passed} tests passed, fewer than the {MIN_PASSED} that passed before"
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

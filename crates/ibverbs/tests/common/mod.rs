//! What the ibverbs tests share: where the library is, and whether a tool
//! they need is installed.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// The directory holding `libibverbs.so.1`: `SOFTVERBS_LIBIBVERBS_DIR` (the
/// release build `scripts/build-ibverbs.sh` makes; the test script sets it),
/// else the library cargo built for this test run (debug, `deps/`).
pub fn lib_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SOFTVERBS_LIBIBVERBS_DIR") {
        return PathBuf::from(d);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let target = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>/deps");
    // deps/ holds the library cargo built for this very test run; the copy
    // in target/<profile> is refreshed only by `cargo build` and can be stale.
    let so = target.join("deps/libibverbs.so");
    assert!(so.exists(), "{} not built", so.display());
    let dir = target.join("libibverbs-test");
    std::fs::create_dir_all(&dir).unwrap();
    // Both names: programs that dlopen "libibverbs.so" (NCCL) must find this
    // library, not the system's development link.
    for name in ["libibverbs.so.1", "libibverbs.so"] {
        let link = dir.join(name);
        // Tests of one binary run in parallel: make the link under a name of
        // this thread's own and rename it into place (atomic, no EEXIST race).
        let tmp = dir.join(format!(
            ".{}.{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&so, &tmp).unwrap();
        std::fs::rename(&tmp, &link).unwrap();
    }
    dir
}

/// The library file itself.
pub fn lib_path() -> PathBuf {
    lib_dir().join("libibverbs.so.1")
}

/// True if `tool` runs; otherwise the test skips, or fails when the suite
/// requires every tool (`SOFTVERBS_REQUIRE_TOOLS=1`, as under CI).
pub fn have(tool: &str) -> bool {
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("SOFTVERBS_REQUIRE_TOOLS").is_none(),
            "{tool} is required but not installed"
        );
        eprintln!("skipping: {tool} not installed");
    }
    ok
}

/// True if the system `<infiniband/verbs.h>` (libibverbs-dev) and a C compiler
/// are installed; otherwise skip, or fail under `SOFTVERBS_REQUIRE_TOOLS=1`.
pub fn have_verbs_h() -> bool {
    if !std::path::Path::new("/usr/include/infiniband/verbs.h").exists() {
        assert!(
            std::env::var_os("SOFTVERBS_REQUIRE_TOOLS").is_none(),
            "libibverbs-dev (verbs.h) is required but not installed"
        );
        eprintln!("skipping: /usr/include/infiniband/verbs.h not installed (libibverbs-dev)");
        return false;
    }
    have("cc")
}

/// Compiles `tests/c/<name>.c` against the system `<infiniband/verbs.h>` and
/// links it to this library; the executable (the caller removes it).
pub fn compile_c(name: &str) -> PathBuf {
    let src = format!("{}/tests/c/{name}.c", env!("CARGO_MANIFEST_DIR"));
    let exe = std::env::temp_dir().join(format!("softverbs-{name}-{}", std::process::id()));
    let cc = Command::new("cc")
        .args(["-std=gnu11", "-Wall", "-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg(lib_path())
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "cc {name}.c failed:\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    exe
}

/// Compiles `tests/c/<name>.c` ([`compile_c`]) and runs it (bounded by
/// 120 s) with `SOFTVERBS_LOG=warn`; the program's output.
pub fn run_c_program(name: &str) -> std::process::Output {
    let exe = compile_c(name);
    let out = Command::new("timeout")
        .arg("120")
        .arg(&exe)
        .env("LD_LIBRARY_PATH", lib_dir())
        .env("SOFTVERBS_LOG", "warn")
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&exe);
    out
}

/// A C check program of one side of a two-process exchange
/// ([`compile_c`]'s `exe` with `args`), talking by lines on its stdin and
/// stdout, bounded by 60 s, with `envs` beside the library path.
pub struct Side {
    pub child: std::process::Child,
    pub out: std::io::BufReader<std::process::ChildStdout>,
    pub input: Option<std::process::ChildStdin>,
}

impl Side {
    pub fn spawn(exe: &std::path::Path, args: &[&str], envs: &[(&str, &str)]) -> Side {
        use std::process::Stdio;
        let mut child = Command::new("timeout")
            .arg("60")
            .arg(exe)
            .args(args)
            .env("LD_LIBRARY_PATH", lib_dir())
            .envs(envs.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        let input = child.stdin.take();
        Side { child, out, input }
    }

    /// The next line it printed (empty at its end).
    pub fn line(&mut self) -> String {
        use std::io::BufRead;
        let mut s = String::new();
        self.out.read_line(&mut s).unwrap();
        s
    }

    /// Hands it a line.
    pub fn say(&mut self, line: &str) {
        use std::io::Write;
        let input = self.input.as_mut().expect("its stdin is open");
        input.write_all(line.as_bytes()).unwrap();
    }

    /// Closes its stdin.
    pub fn hang_up(&mut self) {
        self.input = None;
    }

    /// Waits for it: whether it succeeded, and its stderr.
    pub fn finish(self) -> (bool, String) {
        let o = self.child.wait_with_output().unwrap();
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    }
}

//! Bounded child processes.

use std::io::Read;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

/// True if `tool` is on PATH.
pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// True if this process runs as root.
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// `args` bounded by `secs` seconds: `timeout SECS ARGS...` (a hang is a
/// failure, not a stuck suite; timeout(1) exits 124 then).
pub fn timeout(secs: u32, args: &[&str]) -> Command {
    let mut c = Command::new("timeout");
    c.arg(secs.to_string()).args(args);
    c
}

/// What a finished program printed: stdout, then stderr.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Ends the child it holds (SIGKILL to its PID) when dropped, also after a
/// failed assertion.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl KillOnDrop {
    /// Ends the child after at most `secs` seconds and returns what it
    /// printed (stdout then stderr, if piped; line-buffered output survives
    /// the kill) and whether it exited 0 by itself.
    ///
    /// The pipes are read only after the child ended: for programs that
    /// print less than a pipe holds (64 KiB).
    pub fn finish_within(&mut self, secs: u64) -> (String, bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while self.0.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let exited_ok = self.0.try_wait().unwrap().is_some_and(|s| s.success());
        let _ = self.0.kill();
        let _ = self.0.wait();
        let mut out = String::new();
        if let Some(mut o) = self.0.stdout.take() {
            let _ = o.read_to_string(&mut out);
        }
        if let Some(mut e) = self.0.stderr.take() {
            let _ = e.read_to_string(&mut out);
        }
        (out, exited_ok)
    }
}

/// [`KillOnDrop::finish_within`] for a child not yet guarded.
pub fn finish_within(child: Child, secs: u64) -> (String, bool) {
    KillOnDrop(child).finish_within(secs)
}

/// The variable that tells a child of the test binary which test it is.
pub const CHILD: &str = "SV_NETNS_CHILD";

/// The test this process runs as a child ([`run_child`]), if it is one.
pub fn child() -> Option<String> {
    std::env::var(CHILD).ok()
}

/// Runs this binary's test `name` again as a child behind `prefix` (e.g.
/// `ip netns exec NS`, `setpriv ...`), with `env` and [`CHILD`] naming the
/// test, bounded by 60 s; its output.
pub fn run_child(prefix: &[&str], name: &str, env: &[(&str, String)]) -> Output {
    let exe = std::env::current_exe().unwrap();
    let mut c = Command::new("timeout");
    c.arg("60").args(prefix).arg(&exe);
    c.args(["--exact", name, "--nocapture", "--test-threads=1"]);
    c.env(CHILD, name);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// Asserts that a child succeeded and printed `marker`.
pub fn assert_child(o: &Output, marker: &str) {
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains(marker),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

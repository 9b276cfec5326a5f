//! What the test files of real programs under `softverbs exec` share: the
//! binary, the drop-in library's directory, tool checks, a bounded
//! `softverbs exec -- sh -c` runner, the two "hosts" (network namespaces, from
//! the testkit crate), and the reading of captures (`pcap`).
#![allow(dead_code)]

pub mod pcap;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const BIN: &str = env!("CARGO_BIN_EXE_softverbs");
/// The device address of [`exec_sh`]: its GID is known in advance.
pub const ADDR: &str = "127.0.9.1";
pub const GID0: &str = "0000:0000:0000:0000:0000:ffff:7f00:0901";
/// The addresses of the two "hosts" of [`two_hosts`].
pub const HOSTS: [&str; 2] = ["10.78.0.1", "10.78.0.2"];

/// Two "hosts": network namespaces joined by a veth pair whose ends have
/// [`HOSTS`] (deleted, with what is left running in them, on drop). `None`
/// where namespaces cannot be made (not root): the caller skips.
pub fn two_hosts() -> Option<testkit::Netns> {
    testkit::Netns::pair("svx", HOSTS)
}

/// The drop-in libraries' directory, or None (skip; fail under
/// SOFTVERBS_REQUIRE_TOOLS): `SOFTVERBS_LIBIBVERBS_DIR`, else one made of
/// the `libibverbs.so` (and `librdmacm.so`, which programs of the
/// connection manager such as libfabric's verbs provider load) a cargo
/// build left in `target/debug` or `target/release`.
pub fn lib_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("SOFTVERBS_LIBIBVERBS_DIR") {
        return Some(PathBuf::from(d));
    }
    let target = Path::new(BIN).parent()?.parent()?.to_path_buf();
    for profile in ["debug", "release"] {
        let built = target.join(profile);
        if built.join("libibverbs.so").exists() {
            let dir = target.join("libibverbs-exec-test");
            std::fs::create_dir_all(&dir).ok()?;
            for lib in ["libibverbs", "librdmacm"] {
                let so = built.join(format!("{lib}.so"));
                if so.exists() {
                    link_into(&dir, &format!("{lib}.so.1"), &so)?;
                }
            }
            return Some(dir);
        }
    }
    assert!(
        std::env::var_os("SOFTVERBS_REQUIRE_TOOLS").is_none(),
        "the drop-in libibverbs.so.1 is required: set SOFTVERBS_LIBIBVERBS_DIR"
    );
    eprintln!("skipping: no libibverbs.so.1 built (set SOFTVERBS_LIBIBVERBS_DIR)");
    None
}

/// `dir/name` → `target`, made under a name of this thread's own and
/// renamed into place: tests of one binary run in parallel, and a rename
/// replaces atomically where remove-then-link races.
fn link_into(dir: &Path, name: &str, target: &Path) -> Option<()> {
    let tmp = dir.join(format!(
        ".{name}.{}.{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp).ok()?;
    std::fs::rename(&tmp, dir.join(name)).ok()
}

pub fn have(tool: &str) -> bool {
    let ok = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
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

/// `softverbs exec [exec_args] -- sh -c script`, optionally as another user, bounded.
pub fn exec_sh(lib: &Path, prefix: &[&str], exec_args: &[&str], script: &str) -> Output {
    let mut argv: Vec<String> = prefix
        .iter()
        .map(std::string::ToString::to_string)
        .collect();
    argv.push(BIN.into());
    argv.push("exec".into());
    argv.extend(["--lib-dir".to_string(), lib.display().to_string()]);
    argv.extend(exec_args.iter().map(std::string::ToString::to_string));
    argv.extend(["--", "sh", "-c", script].map(String::from));
    let out = Command::new("timeout")
        .arg("60")
        .args(&argv)
        .env("SOFTVERBS_ADDR", ADDR)
        .env_remove("SOFTVERBS_DEVICE")
        .current_dir("/")
        .output()
        .expect("run softverbs exec");
    eprintln!(
        "$ {}\n{}{}",
        argv.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `key=value` lines of a script's output.
pub fn value(out: &Output, key: &str) -> String {
    let text = String::from_utf8_lossy(&out.stdout);
    let prefix = format!("{key}=");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {key}= in the output"))
        .trim()
        .to_string()
}

//! `softverbs exec [options] -- PROGRAM ARGS…`: runs an unmodified RDMA program
//! on softverbs, with no root.
//!
//! 1. The drop-in libraries (`libibverbs.so.1`, and `librdmacm.so.1` once it is
//!    built beside it) go first on `LD_LIBRARY_PATH`.
//! 2. Unless `--no-namespace`: the process enters a private user + mount
//!    namespace (unprivileged: the caller's uid and gid map to themselves) in
//!    which the device has the identity programs look for on a kernel RDMA host:
//!    `/sys/class/infiniband/<dev>/…` and `/sys/class/infiniband_verbs/uverbsN/…`
//!    (values from [`softverbs::Device::info`], formats from `spec/sysfs.md`) and
//!    `/dev/infiniband/uverbsN` (and `rdma_cm`, when the drop-in librdmacm is
//!    there to answer for it) as accessible character devices (bind mounts of
//!    `/dev/null`: a user namespace cannot make device nodes).
//!    `/sys/class` and `/dev` become tmpfs mounts that hold a bind mount of every
//!    original entry, so nothing else is hidden, and nothing is written to the host.
//! 3. Unless `SOFTVERBS_ADDR` is set, the device's default address (derived from
//!    the launcher's process ID) is pinned in `SOFTVERBS_ADDR`: the program and
//!    every process it starts share one address, as the processes of one host
//!    share its NIC (`sv_io::share`), and it is the address the view shows.
//! 4. The program replaces the launcher (`execvp`).

use crate::sysfs::{self, Placement};
use softverbs::DeviceInfo;
use std::ffi::OsString;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// `softverbs exec --help`.
pub const HELP: &str = "usage: softverbs exec [options] -- PROGRAM [ARGS...]

Runs PROGRAM on the softverbs device, with no root:
  - the drop-in libibverbs.so.1 (and librdmacm.so.1 when built beside it) first
    on LD_LIBRARY_PATH;
  - inside a private user + mount namespace, the device's identity where
    programs look for it on a host with kernel RDMA: /sys/class/infiniband/<dev>
    (ports, GIDs, gid_attrs/types = \"RoCE v2\", gid_attrs/ndevs, node_guid,
    fw_ver, device/numa_node, ...), /sys/class/infiniband_verbs/uverbsN, and
    /dev/infiniband/uverbsN (and rdma_cm when the drop-in librdmacm.so.1 is in
    the library directory) as accessible character devices. The
    rest of /sys/class and /dev stays visible; the host is not changed.

Which programs need the namespace:
  needed:   UCX (ucx_info, ucx_perftest; Open MPI's pml ucx, MPICH ch4:ucx), which
            skips a device without an accessible /dev/infiniband/<dev> and reads
            the GID type from sysfs; NCCL's IB transport (gid_attrs/types unless
            NCCL_IB_GID_INDEX is set); anything else that reads sysfs or /dev.
  not needed: programs that only call verbs: ibv_devinfo, ibv_*_pingpong,
            perftest (ib_write_bw, ...), pyverbs. For them --no-namespace, or
            LD_LIBRARY_PATH=<library dir> alone, is enough.

options:
  --lib-dir DIR    the directory holding the drop-in libibverbs.so.1 (default:
                   $SOFTVERBS_LIBIBVERBS_DIR, else beside this binary: DIR,
                   DIR/../libibverbs; scripts/build-ibverbs.sh prints it)
  --no-namespace   only set the library path
  -h, --help       this text

The device is configured as usual (SOFTVERBS_ADDR, SOFTVERBS_DEVICE, SOFTVERBS_MTU,
...). Without SOFTVERBS_ADDR, the program and every process it starts share one
loopback address of their own, as the processes of one host share its NIC; two
`softverbs exec` runs are two hosts. The namespace needs unprivileged user namespaces (sysctl
user.max_user_namespaces > 0; on some distributions also
kernel.unprivileged_userns_clone=1 or kernel.apparmor_restrict_unprivileged_userns=0).";

/// Why `softverbs exec` could not start the program.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The command line is wrong.
    #[error("{0}\n\n{HELP}")]
    Usage(String),
    /// No drop-in library where it was looked for.
    #[error("no libibverbs.so.1 in {looked} — build it with scripts/build-ibverbs.sh and pass its directory with --lib-dir or SOFTVERBS_LIBIBVERBS_DIR")]
    NoLibrary {
        /// The directories looked in.
        looked: String,
    },
    /// The device's configuration is refused.
    #[error("device: {0}")]
    Device(#[from] softverbs::Error),
    /// The kernel refused a user namespace.
    #[error("cannot create a user namespace: {source} — the kernel forbids unprivileged user namespaces here ({hint}); programs that only call verbs run without one: add --no-namespace")]
    UserNamespace {
        /// The refusal.
        source: std::io::Error,
        /// What to check.
        hint: &'static str,
    },
    /// A step of building the view failed.
    #[error("cannot {what} {path}: {source}")]
    View {
        /// The step.
        what: &'static str,
        /// The path it acted on.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The program could not be started.
    #[error("cannot run {program}: {source}")]
    Exec {
        /// The program.
        program: String,
        /// The error.
        source: std::io::Error,
    },
}

/// The parsed command line.
#[derive(Debug)]
struct Options {
    lib_dir: Option<PathBuf>,
    namespace: bool,
    program: Vec<OsString>,
}

fn parse(args: &[OsString]) -> Result<Option<Options>, ExecError> {
    let mut opts = Options {
        lib_dir: None,
        namespace: true,
        program: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("--") => {
                opts.program = it.cloned().collect();
                break;
            }
            Some("-h" | "--help") => return Ok(None),
            Some("--no-namespace") => opts.namespace = false,
            Some("--lib-dir") => {
                let dir = it
                    .next()
                    .ok_or_else(|| ExecError::Usage("--lib-dir needs a directory".into()))?;
                opts.lib_dir = Some(PathBuf::from(dir));
            }
            _ if opts.program.is_empty() && !a.to_string_lossy().starts_with('-') => {
                // `softverbs exec PROGRAM ARGS…` without `--` is accepted too.
                opts.program = std::iter::once(a).chain(it).cloned().collect();
                break;
            }
            _ => return Err(ExecError::Usage(format!("unknown option {a:?}"))),
        }
    }
    if opts.program.is_empty() {
        return Err(ExecError::Usage("no program given".into()));
    }
    Ok(Some(opts))
}

/// Runs `softverbs exec` with the arguments after `exec`; returns only on error
/// (or after printing the help).
pub fn run(args: &[OsString]) -> Result<(), ExecError> {
    let Some(opts) = parse(args)? else {
        println!("{HELP}");
        return Ok(());
    };
    let lib_dir = find_lib_dir(opts.lib_dir.as_deref())?;
    // Read the configuration before anything else: a bad value is refused here, in words.
    let device = softverbs::devices()?.remove(0);
    if opts.namespace {
        enter_namespace()?;
        build_view(&device.info(), lib_dir.join("librdmacm.so.1").exists())?;
    }
    let mut cmd = std::process::Command::new(&opts.program[0]);
    cmd.args(&opts.program[1..])
        .env("LD_LIBRARY_PATH", library_path(&lib_dir));
    if std::env::var_os("SOFTVERBS_ADDR").is_none() {
        // One address for the program and every process it starts (the ranks
        // of an MPI job, say), as the processes of one host share its NIC
        // (sv_io::share); it is the address the view shows.
        let addrs: Vec<String> = device
            .config()
            .addrs
            .iter()
            .map(std::string::ToString::to_string)
            .collect();
        cmd.env("SOFTVERBS_ADDR", addrs.join(","));
    }
    let err = cmd.exec();
    Err(ExecError::Exec {
        program: opts.program[0].to_string_lossy().into_owned(),
        source: err,
    })
}

/// `dir` first, then the caller's `LD_LIBRARY_PATH`.
fn library_path(dir: &Path) -> OsString {
    let mut path = dir.as_os_str().to_owned();
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
        path.push(":");
        path.push(old);
    }
    path
}

/// The directory of the drop-in `libibverbs.so.1`: the option, the variable,
/// or beside this binary.
fn find_lib_dir(given: Option<&Path>) -> Result<PathBuf, ExecError> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(d) = given {
        candidates.push(d.to_path_buf());
    } else if let Some(d) = std::env::var_os("SOFTVERBS_LIBIBVERBS_DIR").filter(|d| !d.is_empty()) {
        candidates.push(PathBuf::from(d));
    } else if let Some(bin) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        candidates.push(bin.clone());
        candidates.push(bin.join("../libibverbs"));
        candidates.push(bin.join("../lib"));
    }
    for c in &candidates {
        if c.join("libibverbs.so.1").exists() {
            return Ok(std::fs::canonicalize(c).unwrap_or_else(|_| c.clone()));
        }
    }
    let looked: Vec<String> = candidates.iter().map(|c| c.display().to_string()).collect();
    Err(ExecError::NoLibrary {
        looked: looked.join(", "),
    })
}

fn enter_namespace() -> Result<(), ExecError> {
    sv_io::host::enter_user_mount_namespace().map_err(|source| {
        let hint = match source.raw_os_error() {
            Some(ENOSPC) => "the limit is 0 or reached: sysctl user.max_user_namespaces",
            _ => "check sysctl user.max_user_namespaces (> 0), kernel.unprivileged_userns_clone (= 1 where it exists), kernel.apparmor_restrict_unprivileged_userns (= 0 where it exists), or a container's seccomp profile",
        };
        ExecError::UserNamespace { source, hint }
    })
}

const ENOSPC: i32 = 28;

/// Entries of `/sys/class` and `/dev` the view replaces instead of showing
/// the host's (a host with kernel RDMA would otherwise show its own devices).
const SYS_OWN: &[&str] = &[
    "infiniband",
    "infiniband_verbs",
    "infiniband_cm",
    "infiniband_mad",
];
const DEV_OWN: &[&str] = &["infiniband"];

/// Builds `/sys/class` and `/dev` of the namespace.
fn build_view(info: &DeviceInfo, with_rdmacm: bool) -> Result<(), ExecError> {
    let stand_in = Path::new("/dev/null");
    let meta = std::fs::metadata(stand_in).map_err(|e| view_err("inspect", stand_in, e))?;
    let rdev = meta.rdev();
    let place = Placement {
        uverbs_index: 0,
        ndevs: info
            .gids
            .iter()
            .map(|g| sv_io::host::interface_of(g.ip()))
            .collect(),
        dev_numbers: (libc_major(rdev), libc_minor(rdev)),
    };
    let sys = Path::new("/sys/class");
    overlay(sys, SYS_OWN)?;
    for (rel, text) in sysfs::files(info, &place) {
        let path = sys.join(rel);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| view_err("create", dir, e))?;
        }
        std::fs::write(&path, text).map_err(|e| view_err("write", &path, e))?;
    }
    let dev = Path::new("/dev");
    overlay(dev, DEV_OWN)?;
    let ib = dev.join("infiniband");
    std::fs::create_dir_all(&ib).map_err(|e| view_err("create", &ib, e))?;
    let mut nodes = vec![format!("uverbs{}", place.uverbs_index)];
    // rdma-core's own librdmacm would take a /dev/infiniband/rdma_cm for the
    // kernel's and talk to it (it hangs on /dev/null): only the drop-in gets one.
    if with_rdmacm {
        nodes.push("rdma_cm".to_string());
    }
    for node in nodes {
        let path = ib.join(node);
        std::fs::write(&path, "").map_err(|e| view_err("create", &path, e))?;
        sv_io::host::bind_mount(stand_in, &path)
            .map_err(|e| view_err("bind /dev/null on", &path, e))?;
    }
    Ok(())
}

/// Covers `dir` with a writable tmpfs that shows every original entry except
/// `own`: directories and files are bind mounts of the originals (reached
/// through an `O_PATH` descriptor of the covered directory), symlinks copies.
fn overlay(dir: &Path, own: &[&str]) -> Result<(), ExecError> {
    let entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| view_err("list", dir, e))?
        .filter_map(Result::ok)
        .filter(|e| !own.iter().any(|o| e.file_name() == *o))
        .collect();
    let covered = sv_io::host::open_path(dir).map_err(|e| view_err("open", dir, e))?;
    let via = PathBuf::from(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&covered)
    ));
    let mut links = Vec::new();
    for e in &entries {
        let ft = e
            .file_type()
            .map_err(|err| view_err("inspect", &e.path(), err))?;
        if ft.is_symlink() {
            let target =
                std::fs::read_link(e.path()).map_err(|err| view_err("read", &e.path(), err))?;
            links.push((e.file_name(), target));
        }
    }
    sv_io::host::mount_tmpfs(dir).map_err(|e| view_err("mount a tmpfs on", dir, e))?;
    for (name, target) in links {
        let path = dir.join(&name);
        std::os::unix::fs::symlink(&target, &path).map_err(|e| view_err("link", &path, e))?;
    }
    for e in &entries {
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_symlink() {
            continue;
        }
        let path = dir.join(e.file_name());
        let made = if ft.is_dir() {
            std::fs::create_dir(&path)
        } else if ft.is_file()
            || ft.is_char_device()
            || ft.is_block_device()
            || ft.is_socket()
            || ft.is_fifo()
        {
            std::fs::write(&path, "")
        } else {
            continue;
        };
        made.map_err(|err| view_err("create", &path, err))?;
        let source = via.join(e.file_name());
        if let Err(err) = sv_io::host::bind_mount(&source, &path) {
            // An entry the namespace may not see (e.g. under a mount it cannot
            // reveal) stays an empty placeholder; everything else is shown.
            tracing::debug!(path = %path.display(), error = %err, "entry not shown in the view");
        }
    }
    Ok(())
}

fn view_err(what: &'static str, path: &Path, source: std::io::Error) -> ExecError {
    ExecError::View {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// `major(3)` of a `dev_t` (glibc's encoding).
fn libc_major(dev: u64) -> u32 {
    (((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0x0000_0fff)) as u32
}

/// `minor(3)` of a `dev_t` (glibc's encoding).
fn libc_minor(dev: u64) -> u32 {
    (((dev >> 12) & 0xffff_ff00) | (dev & 0x0000_00ff)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn command_line() {
        let o = parse(&os(&["--no-namespace", "--", "ucx_info", "-d"]))
            .unwrap()
            .unwrap();
        assert!(!o.namespace);
        assert_eq!(o.program, os(&["ucx_info", "-d"]));
        let o = parse(&os(&["--lib-dir", "/x", "ibv_devinfo", "-v"]))
            .unwrap()
            .unwrap();
        assert_eq!(
            (o.lib_dir.unwrap(), o.namespace),
            (PathBuf::from("/x"), true)
        );
        assert_eq!(o.program, os(&["ibv_devinfo", "-v"]));
        assert!(parse(&os(&["--help"])).unwrap().is_none());
        assert!(matches!(parse(&os(&["--"])), Err(ExecError::Usage(_))));
        assert!(matches!(
            parse(&os(&["--bogus", "--", "x"])),
            Err(ExecError::Usage(_))
        ));
    }

    #[test]
    fn device_numbers() {
        // /dev/null is 1:3 everywhere.
        assert_eq!((libc_major(0x103), libc_minor(0x103)), (1, 3));
        // glibc's makedev(259, 5) = 0x10305; makedev(4095 + 1, 256) spills into the high bits.
        assert_eq!((libc_major(0x10305), libc_minor(0x10305)), (259, 5));
        assert_eq!(
            (libc_major(0x1000_0010_0000), libc_minor(0x1000_0010_0000)),
            (4096, 256)
        );
    }
}

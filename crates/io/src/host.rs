//! What a launcher needs from the host to give a program a device's identity
//! without root: a private user + mount namespace, tmpfs and bind mounts inside
//! it, and the network interface that holds an address.
//!
//! Everything here is a thin, safe wrapper over one system call (the `unsafe`
//! blocks of this module carry their `// SAFETY:` lines, like `sys`'s). Nothing
//! here keeps state. The launcher (`softverbs exec`) decides what to mount where.
#![allow(unsafe_code)] // system calls, as in `sys` (workspace lint: unsafe_code = deny)

use std::ffi::{CStr, CString};
use std::io;
use std::net::IpAddr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn cvt(ret: libc::c_int) -> io::Result<()> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn cstr(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL byte"))
}

/// `unshare(CLONE_NEWUSER | CLONE_NEWNS)`, then maps the caller's uid and gid
/// to themselves (setgroups denied, as an unprivileged map requires), then makes
/// every mount private so nothing done inside propagates to the host.
///
/// Must be called while the process has one thread (the kernel refuses a new
/// user namespace to a multi-threaded process).
pub fn enter_user_mount_namespace() -> io::Result<()> {
    // SAFETY: getuid/getgid take no arguments and cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    // SAFETY: unshare takes only flags.
    cvt(unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) })?;
    std::fs::write("/proc/self/setgroups", "deny")?;
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
    std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    let root = cstr(Path::new("/"))?;
    // SAFETY: every pointer is a NUL-terminated string or NULL, valid for the call.
    cvt(unsafe {
        libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    })
}

/// Mounts a fresh tmpfs (mode 0755, no setuid) on `target`.
pub fn mount_tmpfs(target: &Path) -> io::Result<()> {
    let target = cstr(target)?;
    let (fs, opts) = (c"tmpfs", c"mode=0755");
    // SAFETY: every pointer is a NUL-terminated string valid for the call.
    cvt(unsafe {
        libc::mount(
            fs.as_ptr(),
            target.as_ptr(),
            fs.as_ptr(),
            libc::MS_NOSUID,
            opts.as_ptr().cast(),
        )
    })
}

/// Bind-mounts `source` (with every mount below it) on `target`.
pub fn bind_mount(source: &Path, target: &Path) -> io::Result<()> {
    let (source, target) = (cstr(source)?, cstr(target)?);
    // SAFETY: every pointer is a NUL-terminated string or NULL, valid for the call.
    cvt(unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REC,
            std::ptr::null(),
        )
    })
}

/// An `O_PATH` descriptor of the directory `dir`: it still reaches the
/// directory's entries (as `/proc/self/fd/N/<entry>`) once a mount covers it.
pub fn open_path(dir: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(dir)
}

/// The name of the network interface holding `ip`, or whose prefix contains it
/// (every `127.x.y.z` is on `lo`), if any.
pub fn interface_of(ip: IpAddr) -> Option<String> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&raw mut head) } != 0 {
        return None;
    }
    let mut best: Option<(u32, String)> = None;
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        // SAFETY: addr and netmask are NULL or point to sockaddrs of the family they name.
        let (Some(addr), Some(mask)) = (unsafe { sockaddr_ip(ifa.ifa_addr) }, unsafe {
            sockaddr_ip(ifa.ifa_netmask)
        }) else {
            continue;
        };
        let Some(prefix) = prefix_match(ip, addr, mask) else {
            continue;
        };
        if best.as_ref().is_none_or(|(p, _)| prefix > *p) {
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let name = unsafe { CStr::from_ptr(ifa.ifa_name) };
            best = Some((prefix, name.to_string_lossy().into_owned()));
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    best.map(|(_, name)| name)
}

/// The link speed in Mb/s of the network interface holding `ip`
/// (`/sys/class/net/<if>/speed`, the kernel's ethtool link settings), or None
/// when unknown: no such interface, no link settings (`lo` answers EINVAL), or
/// `SPEED_UNKNOWN` (-1).
pub fn link_speed_mbps(ip: IpAddr) -> Option<u32> {
    let name = interface_of(ip)?;
    let text =
        std::fs::read_to_string(Path::new("/sys/class/net").join(name).join("speed")).ok()?;
    text.trim()
        .parse::<i64>()
        .ok()
        .and_then(|v| u32::try_from(v).ok())
        .filter(|&v| v > 0)
}

/// The index of the network interface `name` (`if_nametoindex`), if it exists.
pub fn interface_index(name: &str) -> Option<u32> {
    let name = CString::new(name).ok()?;
    // SAFETY: `name` is a NUL-terminated string valid for the call.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    (index != 0).then_some(index)
}

/// The IP address in a `sockaddr_in`/`sockaddr_in6`.
///
/// # Safety
/// `sa` is NULL or points to a valid sockaddr of the family it names.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: the caller promises `sa` points to a sockaddr; its family says which.
    match i32::from(unsafe { (*sa).sa_family }) {
        libc::AF_INET => {
            // SAFETY: an AF_INET sockaddr is a sockaddr_in.
            let v4 = unsafe { &*sa.cast::<libc::sockaddr_in>() };
            Some(IpAddr::from(u32::from_be(v4.sin_addr.s_addr).to_be_bytes()))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 sockaddr is a sockaddr_in6.
            let v6 = unsafe { &*sa.cast::<libc::sockaddr_in6>() };
            Some(IpAddr::from(v6.sin6_addr.s6_addr))
        }
        _ => None,
    }
}

/// The prefix length of `mask` when `ip` lies in `addr`/`mask`.
fn prefix_match(ip: IpAddr, addr: IpAddr, mask: IpAddr) -> Option<u32> {
    let bytes = |a: IpAddr| match a {
        IpAddr::V4(v) => v.octets().to_vec(),
        IpAddr::V6(v) => v.octets().to_vec(),
    };
    let (ip, addr, mask) = (bytes(ip), bytes(addr), bytes(mask));
    if ip.len() != addr.len() || mask.len() != ip.len() {
        return None;
    }
    let inside = ip
        .iter()
        .zip(&addr)
        .zip(&mask)
        .all(|((i, a), m)| i & m == a & m);
    inside.then(|| mask.iter().map(|m| m.count_ones()).sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_loopback_address_is_on_the_loopback_interface() {
        let lo = interface_of("127.0.0.1".parse().unwrap()).expect("127.0.0.1 has an interface");
        assert_eq!(interface_of("127.3.2.1".parse().unwrap()), Some(lo));
        assert_eq!(interface_of("203.0.113.9".parse().unwrap()), None);
    }

    #[test]
    fn prefixes() {
        let p = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            prefix_match(p("10.1.2.3"), p("10.0.0.1"), p("255.0.0.0")),
            Some(8)
        );
        assert_eq!(
            prefix_match(p("11.1.2.3"), p("10.0.0.1"), p("255.0.0.0")),
            None
        );
        assert_eq!(prefix_match(p("::1"), p("10.0.0.1"), p("255.0.0.0")), None);
    }
}

//! Registering the program's own memory (the C ABI's `ibv_reg_mr` /
//! `ibv_rereg_mr`) checks what the kernel's pinning checks: the range is
//! mapped, and writable when the access flags allow any write; otherwise
//! `EFAULT`, with the region (on rereg) left as it was. So a peer's WRITE can
//! never meet read-only memory behind a region registered for writes.
#![allow(unsafe_code)]

mod pair;

use pair::*;
use softverbs::*;

/// One read-only anonymous page, unmapped when dropped.
struct ReadOnlyPage(*mut libc::c_void);

impl ReadOnlyPage {
    fn new() -> ReadOnlyPage {
        // SAFETY: a fresh anonymous mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        ReadOnlyPage(p)
    }
    fn addr(&self) -> u64 {
        self.0 as u64
    }
}

impl Drop for ReadOnlyPage {
    fn drop(&mut self) {
        // SAFETY: our own mapping, no region over it is alive any more.
        unsafe { libc::munmap(self.0, 4096) };
    }
}

#[test]
fn write_access_to_read_only_memory_is_efault_at_reg_and_rereg() {
    let ctx = device("ext-mr", "127.7.30.1", Mtu::Mtu1024);
    let pd = ctx.alloc_pd().unwrap();
    let page = ReadOnlyPage::new();
    let write = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;

    // SAFETY: the page stays mapped (read-only) until after the regions drop.
    let e = unsafe { raw::reg_external_mr(&pd, page.addr(), 4096, write) }.unwrap_err();
    assert_eq!(e.errno(), Errno::EFAULT, "{e}");
    assert!(e.to_string().contains("not mapped writable"), "{e}");

    // Reading it remotely is fine; adding write access later is refused the
    // same way and leaves the region readable only.
    // SAFETY: as above.
    let mut mr =
        unsafe { raw::reg_external_mr(&pd, page.addr(), 4096, AccessFlags::REMOTE_READ) }.unwrap();
    let e = raw::rereg_external_mr(&mut mr, None, Some(write)).unwrap_err();
    assert_eq!(e.errno(), Errno::EFAULT, "{e}");
    assert_eq!(mr.access(), AccessFlags::REMOTE_READ);
    drop(mr);

    // Unmapped memory is refused even for reading. The page at 4 KiB: the
    // kernel places mappings top-down and never there unless asked with
    // MAP_FIXED, which nothing here does (a page unmapped by this test could be
    // taken at once by another thread's allocation).
    let addr = 0x1000;
    // SAFETY: nothing is registered: the call must refuse the range.
    let e = unsafe { raw::reg_external_mr(&pd, addr, 4096, AccessFlags::REMOTE_READ) }.unwrap_err();
    assert_eq!(e.errno(), Errno::EFAULT, "{e}");
    assert!(e.to_string().contains("is not mapped in"), "{e}");
}

//! What every entry point shares: errno, refusal logging, and the checked
//! conversion from a C pointer to the block behind it.

use std::ffi::c_int;
use std::sync::Once;

pub(crate) const ENOENT: c_int = libc::ENOENT;
pub(crate) const EAGAIN: c_int = libc::EAGAIN;
pub(crate) const EINVAL: c_int = libc::EINVAL;
pub(crate) const EBUSY: c_int = libc::EBUSY;
pub(crate) const ENODATA: c_int = libc::ENODATA;
pub(crate) const EOPNOTSUPP: c_int = libc::EOPNOTSUPP;

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// Reads the calling thread's `errno`.
pub(crate) fn errno() -> c_int {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() }
}

fn errno_name(e: c_int) -> &'static str {
    match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EBUSY => "EBUSY",
        libc::EINVAL => "EINVAL",
        libc::ENODATA => "ENODATA",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        _ => "errno",
    }
}

/// Logs a refusal by this library (bad pointer, unsupported feature…) at
/// `warn` and returns `errno` for the caller to report.
pub(crate) fn refuse(verb: &str, errno: c_int, why: impl std::fmt::Display) -> c_int {
    tracing::warn!(target: "softverbs", "{verb} refused ({}): {why}", errno_name(errno));
    errno
}

/// The errno of a softverbs refusal (softverbs already logged it in words).
pub(crate) fn errno_of(e: &softverbs::Error) -> c_int {
    e.errno().raw()
}

/// `SOFTVERBS_LOG=error|warn|info|debug|trace` sends the log to stderr; set up
/// once, on the first entry into the library.
pub(crate) fn init_log() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| match softverbs::log_level_from_env() {
        Ok(Some(level)) => {
            let _ = tracing_subscriber::fmt()
                .with_max_level(level)
                .with_writer(std::io::stderr)
                .try_init();
        }
        Ok(None) => {}
        Err(e) => eprintln!("libibverbs (softverbs): {e}"),
    });
}

/// A `repr(C)` block handed to C as a pointer to its first field, `C`.
///
/// # Safety
/// Implementors are `repr(C)` with the `C` struct as first field and a `magic`
/// word that [`Block::magic`] reads.
pub(crate) unsafe trait Block: Sized {
    /// The public verbs struct at offset 0.
    type C;
    /// What a live block of this kind holds in its magic word.
    const MAGIC: u64;
    /// What the verb is called in messages ("qp", "cq", …).
    const WHAT: &'static str;
    fn magic(&self) -> u64;
    fn magic_mut(&mut self) -> &mut u64;
}

/// The block behind a C pointer: `EINVAL` for NULL or a pointer that is not a
/// live object of this kind.
///
/// # Safety
/// `p` is NULL or points to readable memory of at least the block's size
/// (true for every pointer this library handed out and not yet freed).
pub(crate) unsafe fn block<'a, B: Block>(verb: &str, p: *const B::C) -> Result<&'a B, c_int> {
    if p.is_null() {
        return Err(refuse(
            verb,
            EINVAL,
            format_args!("the {} pointer is NULL", B::WHAT),
        ));
    }
    // SAFETY: per the contract; the block starts with its C struct.
    let b = unsafe { &*p.cast::<B>() };
    if b.magic() != B::MAGIC {
        return Err(refuse(
            verb,
            EINVAL,
            format_args!("{p:?} is not a live {} of this library", B::WHAT),
        ));
    }
    Ok(b)
}

/// Moves a block to the heap and hands out the pointer C sees.
pub(crate) fn into_c<B: Block>(b: B) -> *mut B::C {
    Box::into_raw(Box::new(b)).cast::<B::C>()
}

/// Frees a block: clears its magic first, so a stale pointer is recognised
/// while the memory stays mapped.
///
/// # Safety
/// `p` came from [`into_c`] for this `B` and is not used again.
pub(crate) unsafe fn free<B: Block>(p: *const B::C) {
    // SAFETY: per the contract.
    let mut b = unsafe { Box::from_raw(p as *mut B) };
    *b.magic_mut() = 0;
    drop(b);
}

/// Declares the [`Block`] impl of a block type.
macro_rules! impl_block {
    ($ty:ty, $c:ty, $what:literal, $magic:expr) => {
        // SAFETY: the type is repr(C) with `$c` first and a `magic` field.
        unsafe impl $crate::util::Block for $ty {
            type C = $c;
            const MAGIC: u64 = $magic;
            const WHAT: &'static str = $what;
            fn magic(&self) -> u64 {
                self.magic
            }
            fn magic_mut(&mut self) -> &mut u64 {
                &mut self.magic
            }
        }
    };
}
pub(crate) use impl_block;

/// Copies `s` into a fixed C char array, NUL-terminated (truncated if needed).
pub(crate) fn fill_c_str(dst: &mut [std::ffi::c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.as_bytes()[..n].iter()) {
        *d = *b as std::ffi::c_char;
    }
    if let Some(d) = dst.get_mut(n) {
        *d = 0;
    }
}

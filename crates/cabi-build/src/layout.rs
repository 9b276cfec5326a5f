//! What the layout tests of the drop-in libraries share: checks of a Rust
//! `repr(C)` mirror against a system C header, compiled and run here.
//!
//! Each [`Check`] pairs a C expression (a `sizeof`, `offsetof`, constant…)
//! with the value Rust gives it; [`assert_matches_c`] prints every expression
//! from one C program built with the system compiler and fails on any that
//! differ. [`layout!`](crate::layout!) adds the size, alignment and each
//! field's offset and size of a struct.

use std::fmt::Write as _;
use std::process::Command;

/// One checked item: a C expression and the value Rust gives it.
#[derive(Debug, Clone)]
pub struct Check {
    /// The C expression (converted to `size_t`).
    pub c_expr: String,
    /// What Rust says it is.
    pub rust: usize,
}

/// `layout!(checks; rust_struct = "c struct" { rust_field = "c_field", … })`:
/// size and alignment of the struct, offset and size of each field.
#[macro_export]
macro_rules! layout {
    ($checks:ident; $($ty:ident = $cty:literal { $($f:ident = $cf:literal),* $(,)? })*) => {$(
        $checks.push($crate::layout::Check { c_expr: format!("sizeof({})", $cty), rust: std::mem::size_of::<$ty>() });
        $checks.push($crate::layout::Check { c_expr: format!("_Alignof({})", $cty), rust: std::mem::align_of::<$ty>() });
        $(
            $checks.push($crate::layout::Check { c_expr: format!("offsetof({}, {})", $cty, $cf), rust: std::mem::offset_of!($ty, $f) });
            $checks.push($crate::layout::Check {
                c_expr: format!("sizeof((({} *)0)->{})", $cty, $cf),
                rust: {
                    fn size_of_field<T, F>(_: impl Fn(&T) -> &F) -> usize { std::mem::size_of::<F>() }
                    size_of_field(|s: &$ty| &s.$f)
                },
            });
        )*
    )*};
}

/// Compiles a program including `headers` that prints every check's C value
/// and asserts each equals Rust's; `name` tells the header in the failure.
/// Returns how many matched.
pub fn assert_matches_c(headers: &[&str], name: &str, checks: &[Check]) -> usize {
    let mut c = String::from("#include <stddef.h>\n#include <stdint.h>\n#include <stdio.h>\n");
    for h in headers {
        writeln!(c, "#include <{h}>").unwrap();
    }
    c.push_str("int main(void) {\n");
    for k in checks {
        writeln!(c, "  printf(\"%zu\\n\", (size_t)({}));", k.c_expr).unwrap();
    }
    c.push_str("  return 0;\n}\n");
    let dir = std::env::temp_dir().join(format!(
        "softverbs-layout-{}-{}",
        name.replace(['/', '.'], "_"),
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, exe) = (dir.join("layout.c"), dir.join("layout"));
    std::fs::write(&src, c).unwrap();
    let cc = Command::new("cc")
        .arg("-std=gnu11")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("cc runs");
    assert!(
        cc.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&exe)
        .output()
        .expect("the layout program runs");
    let _ = std::fs::remove_dir_all(&dir);
    let values: Vec<usize> = String::from_utf8(out.stdout)
        .expect("digits")
        .lines()
        .map(|l| l.parse().expect("a number per line"))
        .collect();
    assert_eq!(values.len(), checks.len(), "one value per check");
    let wrong: Vec<String> = checks
        .iter()
        .zip(&values)
        .filter(|(k, v)| k.rust != **v)
        .map(|(k, v)| format!("{}: C {v}, Rust {}", k.c_expr, k.rust))
        .collect();
    assert!(
        wrong.is_empty(),
        "layout differs from {name}:\n{}",
        wrong.join("\n")
    );
    checks.len()
}

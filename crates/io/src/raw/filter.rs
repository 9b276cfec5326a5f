//! A RAW_PACKET QP's flow rules as one classic-BPF socket filter
//! (`SO_ATTACH_FILTER`, `Documentation/networking/filter.rst`): the frame is
//! accepted whole if any alternative of any rule matches, dropped otherwise;
//! with no rule at all the program drops everything (a QP with no flow
//! receives nothing, as on a NIC).
//!
//! Layout: each alternative is a run of `load; [and mask;] jeq value` steps
//! whose failure jumps to the next alternative's first instruction, ending in
//! "accept"; the last instruction is "drop". Every alternative tests the
//! EtherType before any deeper load, so a short frame of another type never
//! reaches a load past its end (which would end the whole program with
//! "drop" rather than try the next alternative).

use super::flow::{Base, Check, FlowRule};
use libc::sock_filter;

/// cBPF's jump offsets are 8 bits: the longest alternative it can skip.
const MAX_JUMP: usize = 255;
/// Accept: keep the whole frame.
const ACCEPT: u32 = u32::MAX;

fn op(code: u32, k: u32) -> sock_filter {
    sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn ancillary(what: libc::c_int) -> u32 {
    (libc::SKF_AD_OFF + what) as u32
}

fn load(c: &Check) -> sock_filter {
    let size = match c.width {
        1 => libc::BPF_B,
        2 => libc::BPF_H,
        _ => libc::BPF_W,
    };
    match c.base {
        Base::Frame => op(libc::BPF_LD | size | libc::BPF_ABS, c.off),
        Base::Ipv4Payload => op(libc::BPF_LD | size | libc::BPF_IND, 14 + c.off),
        Base::VlanTci => op(
            libc::BPF_LD | libc::BPF_W | libc::BPF_ABS,
            ancillary(libc::SKF_AD_VLAN_TAG),
        ),
        Base::VlanPresent => op(
            libc::BPF_LD | libc::BPF_W | libc::BPF_ABS,
            ancillary(libc::SKF_AD_VLAN_TAG_PRESENT),
        ),
    }
}

fn full_mask(width: u8) -> u32 {
    match width {
        1 => 0xff,
        2 => 0xffff,
        _ => u32::MAX,
    }
}

/// The instructions of one alternative, its jumps to "next" still zero:
/// returns them with the index of each jump that must skip to the next one.
fn alternative(checks: &[Check]) -> (Vec<sock_filter>, Vec<usize>) {
    let mut code = Vec::new();
    let mut jumps = Vec::new();
    let mut have_x = false;
    for c in checks {
        if c.base == Base::Ipv4Payload && !have_x {
            // X = IHL × 4 of the IPv4 header at 14.
            code.push(op(libc::BPF_LDX | libc::BPF_B | libc::BPF_MSH, 14));
            have_x = true;
        }
        code.push(load(c));
        let whole = match c.base {
            Base::VlanTci | Base::VlanPresent => u32::MAX,
            _ => full_mask(c.width),
        };
        if c.mask & whole != whole {
            code.push(op(libc::BPF_ALU | libc::BPF_AND | libc::BPF_K, c.mask));
        }
        jumps.push(code.len());
        code.push(op(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, c.value));
    }
    code.push(op(libc::BPF_RET | libc::BPF_K, ACCEPT));
    (code, jumps)
}

/// Error: an alternative too long for cBPF's 8-bit jumps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a flow rule compiles to {len} instructions, more than a classic-BPF jump can skip ({MAX_JUMP})")]
pub struct TooLong {
    /// Instructions of the alternative.
    pub len: usize,
}

/// The socket filter of a QP whose rules are `rules`.
pub fn program(rules: &[FlowRule]) -> Result<Vec<sock_filter>, TooLong> {
    let mut prog = Vec::new();
    for alt in rules.iter().flat_map(|r| r.alternatives.iter()) {
        let (mut code, jumps) = alternative(alt);
        let len = code.len();
        if len > MAX_JUMP {
            return Err(TooLong { len });
        }
        for j in jumps {
            // From the instruction after the jump to the next alternative.
            code[j].jf = (len - j - 1) as u8;
        }
        prog.extend(code);
    }
    prog.push(op(libc::BPF_RET | libc::BPF_K, 0));
    Ok(prog)
}

/// A classic-BPF interpreter for the instructions [`program`] emits, as the
/// kernel runs them (a load past the end returns 0). For tests.
#[cfg(test)]
pub(crate) fn run(prog: &[sock_filter], frame: &[u8], vlan: Option<u16>) -> u32 {
    let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
    let ld = |at: u32, size: u32| -> Option<u32> {
        let n = match size {
            libc::BPF_B => 1,
            libc::BPF_H => 2,
            _ => 4,
        };
        let at = at as usize;
        frame
            .get(at..at + n)
            .map(|b| b.iter().fold(0, |v, &x| (v << 8) | u32::from(x)))
    };
    while let Some(i) = prog.get(pc) {
        let code = u32::from(i.code);
        pc += 1;
        match code & 0x07 {
            libc::BPF_LD => {
                let size = code & 0x18;
                let v = if i.k == ancillary(libc::SKF_AD_VLAN_TAG) {
                    Some(u32::from(vlan.unwrap_or(0)))
                } else if i.k == ancillary(libc::SKF_AD_VLAN_TAG_PRESENT) {
                    Some(u32::from(vlan.is_some()))
                } else if code & 0xe0 == libc::BPF_IND {
                    ld(i.k.wrapping_add(x), size)
                } else {
                    ld(i.k, size)
                };
                match v {
                    Some(v) => a = v,
                    None => return 0,
                }
            }
            libc::BPF_LDX => match frame.get(i.k as usize) {
                Some(b) => x = u32::from(b & 0xf) * 4,
                None => return 0,
            },
            libc::BPF_ALU => a &= i.k,
            libc::BPF_JMP => {
                let skip = if a == i.k { i.jt } else { i.jf };
                pc += usize::from(skip);
            }
            libc::BPF_RET => return i.k,
            _ => return 0,
        }
    }
    0
}

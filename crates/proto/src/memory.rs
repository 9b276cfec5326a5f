//! How the engine touches registered memory.
//!
//! `proto` has no `unsafe`, so it never dereferences an address itself: the
//! driver hands it a [`Memory`] that does. The engine calls it only for ranges
//! that passed the memory-region check ([`crate::mr::Mr::check`]: key, PD,
//! bounds, access flag), which is what makes the real implementation (raw
//! copies into the program's memory, like DMA) sound. [`VecMemory`] is a plain
//! byte array for tests and the simulator.

/// An atomic operation on 8 bytes of registered memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOp {
    /// Compare and swap: if the value equals `compare`, store `swap`.
    CompareSwap {
        /// Expected value.
        compare: u64,
        /// New value.
        swap: u64,
    },
    /// Fetch and add (wrapping).
    FetchAdd {
        /// The addend.
        add: u64,
    },
    /// Store 8 bytes in one piece (IBA 1.5 ATOMIC WRITE): `value` holds the
    /// bytes as they arrived, read in host order, so memory gets them unchanged.
    Store {
        /// The new value.
        value: u64,
    },
}

impl AtomicOp {
    /// The value stored, given the original.
    pub fn apply(self, original: u64) -> u64 {
        match self {
            AtomicOp::CompareSwap { compare, swap } if original == compare => swap,
            AtomicOp::CompareSwap { .. } => original,
            AtomicOp::FetchAdd { add } => original.wrapping_add(add),
            AtomicOp::Store { value } => value,
        }
    }
}

/// Byte-level access to the memory behind registered MRs.
pub trait Memory {
    /// Copies `dst.len()` bytes starting at `addr`.
    fn read(&self, addr: u64, dst: &mut [u8]);
    /// Copies `src` to `addr`.
    fn write(&self, addr: u64, src: &[u8]);
    /// Performs `op` atomically on the 8-byte word at `addr` (8-aligned), in host
    /// byte order, and returns the original value.
    fn atomic(&self, addr: u64, op: AtomicOp) -> u64;
    /// Makes `[addr, addr + len)` present for reading (and writing, if
    /// `write`), as a device's page fault on an on-demand-paging region does;
    /// false if the range is not mapped so (the access then fails instead of
    /// touching it). Memory that is always present answers true.
    fn fault_in(&self, addr: u64, len: u64, write: bool) -> bool {
        let _ = (addr, len, write);
        true
    }
}

/// A flat byte array at a base address: test and simulation memory.
#[derive(Debug)]
pub struct VecMemory {
    base: u64,
    bytes: std::cell::RefCell<Vec<u8>>,
}

impl VecMemory {
    /// `len` zero bytes at `base`.
    pub fn new(base: u64, len: usize) -> VecMemory {
        VecMemory {
            base,
            bytes: std::cell::RefCell::new(vec![0; len]),
        }
    }

    /// First address.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// A copy of `len` bytes at `addr` (for assertions).
    pub fn snapshot(&self, addr: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.read(addr, &mut v);
        v
    }

    fn offset(&self, addr: u64, len: usize) -> usize {
        let off = addr
            .checked_sub(self.base)
            .expect("address below VecMemory base") as usize;
        assert!(
            off + len <= self.bytes.borrow().len(),
            "access beyond VecMemory: the engine skipped a bounds check"
        );
        off
    }
}

impl Memory for VecMemory {
    fn read(&self, addr: u64, dst: &mut [u8]) {
        let off = self.offset(addr, dst.len());
        dst.copy_from_slice(&self.bytes.borrow()[off..off + dst.len()]);
    }

    fn write(&self, addr: u64, src: &[u8]) {
        let off = self.offset(addr, src.len());
        self.bytes.borrow_mut()[off..off + src.len()].copy_from_slice(src);
    }

    fn atomic(&self, addr: u64, op: AtomicOp) -> u64 {
        let mut word = [0u8; 8];
        self.read(addr, &mut word);
        let original = u64::from_ne_bytes(word);
        self.write(addr, &op.apply(original).to_ne_bytes());
        original
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomics_follow_their_definition() {
        let m = VecMemory::new(0x1000, 64);
        m.write(0x1008, &5u64.to_ne_bytes());
        assert_eq!(m.atomic(0x1008, AtomicOp::FetchAdd { add: u64::MAX }), 5);
        assert_eq!(
            m.atomic(
                0x1008,
                AtomicOp::CompareSwap {
                    compare: 3,
                    swap: 9
                }
            ),
            4
        );
        assert_eq!(
            m.atomic(
                0x1008,
                AtomicOp::CompareSwap {
                    compare: 4,
                    swap: 9
                }
            ),
            4
        );
        assert_eq!(m.snapshot(0x1008, 8), 9u64.to_ne_bytes());
    }
}

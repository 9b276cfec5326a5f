//! Typed handles: the ground floor of the object model.
//!
//! A [`Handle<K>`] names one object of kind `K` (a slot index and the
//! generation of its occupant) in one of the engine's tables. The kinds are
//! empty marker types in [`kind`], so a file that only needs to *name* a
//! protection domain or a CQ imports this module, never the engine or the
//! object it names. This module imports nothing from the crate.

use std::fmt;
use std::marker::PhantomData;

/// The kinds of object a handle can name (empty marker types).
pub mod kind {
    /// A device context.
    #[derive(Debug)]
    pub enum Ctx {}
    /// A protection domain.
    #[derive(Debug)]
    pub enum Pd {}
    /// A memory region.
    #[derive(Debug)]
    pub enum Mr {}
    /// A completion queue.
    #[derive(Debug)]
    pub enum Cq {}
    /// A shared receive queue.
    #[derive(Debug)]
    pub enum Srq {}
    /// An address handle.
    #[derive(Debug)]
    pub enum Ah {}
    /// A queue pair.
    #[derive(Debug)]
    pub enum Qp {}
    /// A memory window.
    #[derive(Debug)]
    pub enum Mw {}
    /// An open of an XRC domain.
    #[derive(Debug)]
    pub enum Xrcd {}
}

/// A typed handle: slot `index` at `generation` in the table of kind `K`.
pub struct Handle<K> {
    index: u32,
    generation: u32,
    _kind: PhantomData<fn() -> K>,
}

/// Handle of a context.
pub type CtxHandle = Handle<kind::Ctx>;
/// Handle of a PD.
pub type PdHandle = Handle<kind::Pd>;
/// Handle of an MR.
pub type MrHandle = Handle<kind::Mr>;
/// Handle of a CQ.
pub type CqHandle = Handle<kind::Cq>;
/// Handle of an SRQ.
pub type SrqHandle = Handle<kind::Srq>;
/// Handle of an AH.
pub type AhHandle = Handle<kind::Ah>;
/// Handle of a QP.
pub type QpHandle = Handle<kind::Qp>;
/// Handle of a memory window.
pub type MwHandle = Handle<kind::Mw>;
/// Handle of an open XRC domain.
pub type XrcdHandle = Handle<kind::Xrcd>;

impl<K> Handle<K> {
    /// The handle of slot `index` at `generation` (for the tables).
    pub(crate) fn new(index: u32, generation: u32) -> Self {
        Handle {
            index,
            generation,
            _kind: PhantomData,
        }
    }

    /// The handle as one number (generation in the high half), for the C ABI and logs.
    pub fn raw(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.index)
    }

    /// Rebuilds a handle from [`Handle::raw`]. A stale or made-up value simply names no object.
    pub fn from_raw(raw: u64) -> Self {
        Handle::new(raw as u32, (raw >> 32) as u32)
    }

    /// The slot index (dense, reused after removal).
    pub fn index(self) -> u32 {
        self.index
    }

    /// The generation of the slot's occupant this handle names.
    pub fn generation(self) -> u32 {
        self.generation
    }
}

impl<K> Clone for Handle<K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K> Copy for Handle<K> {}
impl<K> PartialEq for Handle<K> {
    fn eq(&self, other: &Self) -> bool {
        self.index == other.index && self.generation == other.generation
    }
}
impl<K> Eq for Handle<K> {}
impl<K> std::hash::Hash for Handle<K> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.raw().hash(state)
    }
}
impl<K> fmt::Debug for Handle<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}.{}", self.index, self.generation)
    }
}
